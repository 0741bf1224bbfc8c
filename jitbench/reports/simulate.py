"""Seeded discrete-event Monte Carlo simulator of failures against a training job.

Each trial draws one failure trace for a job of ``N`` GPUs over a horizon and
plays the *same* trace against every strategy (common random numbers, so
differences between strategies are not sampling noise of separate traces):

- Failure arrivals are a job-level renewal process with mean inter-arrival
  time the job MTBF ``mtbf_hours_per_gpu / N``: exponential (a Poisson
  process; what the analytic model assumes), or Weibull with shape ``k``
  (``k < 1``: bursty, infant-mortality failures, as field studies of HPC
  systems often fit). The failed component is restored at each failure
  (renewal), and each failure hits a uniformly drawn rank.
- Each failure's cause is drawn with the Llama 3 paper's weights (Meta, "The
  Llama 3 Herd of Models", 2024, Table 5; :data:`jitbench.reports.model.LLAMA3_TABLE5`);
  its scope sets its blast radius (one rank, its whole host, or every
  replica's state).

Per strategy the job is a deterministic schedule between failures (compute,
checkpoint stalls, checkpoint writes becoming durable) and a recovery state
machine at each failure:

- ``periodic``: roll back to the last durable checkpoint (a failure during a
  checkpoint write loses that checkpoint), then detect + restart + restore.
- ``periodic-async``: as periodic, but a checkpoint stalls training for only
  ``async_stall_fraction * checkpoint_s`` and becomes durable ``checkpoint_s``
  after its snapshot; a failure before then falls back one more checkpoint.
- ``jit`` (Gupta et al., EuroSys 2024): if some healthy replica of every shard
  survives (:func:`jitbench.reports.model.topology`) and the state is not
  corrupt, survivors save the state at the last step boundary (the partial
  step is lost: at most one minibatch), then restart + restore. A second
  failure inside the detect + save window loses the JIT checkpoint and falls
  back to the last durable checkpoint (the previous JIT checkpoint or the last
  fallback periodic checkpoint, whichever is newer). Otherwise the job falls
  back the same way. JIT jobs keep infrequent periodic checkpoints every
  ``fallback_interval_s``.
- ``jit-transparent``: as ``jit`` without the restart (in-place recovery).
- For every strategy a failure during restart or restore starts the recovery
  over from the same durable checkpoint (nothing is lost but the recovery time
  already spent; the checkpoint being loaded is already durable).

Useful work is the progress (fault-free compute seconds) the job holds at the
horizon; goodput is useful over total GPU time, and wasted GPU-hours are
``N * (horizon - progress)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from jitbench.reports.model import (
    MODEL_STRATEGIES,
    SECONDS_PER_DAY,
    SECONDS_PER_HOUR,
    ModelParams,
    async_period_s,
    jit_fallback_period_s,
    jit_fallback_work_s,
    periodic_period_s,
    topology,
)


@dataclass(frozen=True)
class SimConfig:
    """What to simulate: world size, horizon (hours of wall time per trial),
    number of seeded trials, the seed (an int >= 0), the inter-arrival law
    (``weibull_shape=None``: exponential; else the Weibull shape ``k > 0``,
    mean kept at the job MTBF), and the strategies to play."""

    n_gpus: int
    horizon_hours: float = 24.0 * 30
    trials: int = 100
    seed: int = 0
    weibull_shape: float | None = None
    strategies: tuple[str, ...] = MODEL_STRATEGIES

    def validate(self) -> None:
        """Raise :class:`ValueError` (one clear line) on an unusable value."""
        if self.n_gpus < 1:
            raise ValueError(f"n_gpus must be >= 1 (got {self.n_gpus})")
        if not (math.isfinite(self.horizon_hours) and self.horizon_hours > 0):
            raise ValueError(f"horizon_hours must be > 0 (got {self.horizon_hours})")
        if self.trials < 1:
            raise ValueError(f"trials must be >= 1 (got {self.trials})")
        if self.seed < 0:
            raise ValueError(f"seed must be >= 0 (got {self.seed})")
        if self.weibull_shape is not None and not (self.weibull_shape > 0):
            raise ValueError(f"weibull_shape must be > 0 (got {self.weibull_shape})")
        for s in self.strategies:
            if s not in MODEL_STRATEGIES:
                raise ValueError(f"unknown strategy {s!r} (known: {', '.join(MODEL_STRATEGIES)})")


@dataclass(frozen=True, eq=False)
class FailureTrace:
    """One trial's failures: sorted arrival times (s, in ``[0, horizon)``), the
    index of each one's cause in ``params.causes``, and the failed rank."""

    times_s: np.ndarray
    cause: np.ndarray
    rank: np.ndarray

    def __len__(self) -> int:
        return int(self.times_s.size)


def failure_trace(
    rng: np.random.Generator,
    n_gpus: int,
    params: ModelParams,
    horizon_s: float,
    weibull_shape: float | None = None,
) -> FailureTrace:
    """Draw the failures of one trial from ``rng``.

    Inter-arrival times are exponential, or Weibull with shape
    ``weibull_shape`` and scale ``M / Gamma(1 + 1/k)`` so the mean is the job
    MTBF ``M = mtbf_hours_per_gpu * 3600 / n_gpus`` seconds. Causes are drawn
    with ``params.cause_weights()``; ranks uniformly in ``[0, n_gpus)``.
    """
    mtbf_s = params.mtbf_hours_per_gpu * SECONDS_PER_HOUR / n_gpus
    mean_count = horizon_s / mtbf_s
    chunk = int(mean_count + 6.0 * math.sqrt(mean_count) + 16)

    def draw(k: int) -> np.ndarray:
        if weibull_shape is None:
            return rng.exponential(mtbf_s, size=k)
        return rng.weibull(weibull_shape, size=k) * (mtbf_s / math.gamma(1.0 + 1.0 / weibull_shape))

    times = np.cumsum(draw(chunk))
    while times[-1] < horizon_s:
        times = np.concatenate([times, times[-1] + np.cumsum(draw(chunk))])
    times = times[times < horizon_s]
    k = times.size
    cause = rng.choice(len(params.causes), size=k, p=params.cause_weights())
    rank = rng.integers(0, n_gpus, size=k)
    return FailureTrace(times, cause, rank)


def jit_breaks(trace: FailureTrace, params: ModelParams, n_gpus: int) -> np.ndarray:
    """Per failure of ``trace``: True when it leaves JIT nothing trustworthy to
    save (every replica of some shard lost, or state corrupt); see
    :func:`jitbench.reports.model.topology`."""
    topo = topology(n_gpus, params.gpus_per_host, params.replicas_per_shard)
    scope = np.array([c.scope for c in params.causes])[trace.cause]
    out = np.ones(len(trace), dtype=bool)  # "state"
    gpu = scope == "gpu"
    out[gpu] = topo.rank_breaks[trace.rank[gpu]]
    host = scope == "host"
    out[host] = topo.host_breaks[trace.rank[host] // params.gpus_per_host]
    return out


@dataclass(frozen=True)
class _Schedule:
    """Fault-free schedule of a run segment that starts from a durable checkpoint:
    cycles of ``compute_s`` wall seconds of compute (progress ``rate`` per
    second) then ``cycle_s - compute_s`` of checkpoint stall; the snapshot taken
    at the start of each stall is durable ``durable_delay_s`` later."""

    cycle_s: float
    compute_s: float
    rate: float
    durable_delay_s: float

    def progress(self, elapsed_s: float) -> float:
        if not math.isfinite(self.cycle_s):
            return elapsed_s * self.rate
        n = math.floor(elapsed_s / self.cycle_s)
        rem = elapsed_s - n * self.cycle_s
        return (n * self.compute_s + min(rem, self.compute_s)) * self.rate

    def durable(self, elapsed_s: float) -> float:
        """Progress captured by the newest checkpoint durable at ``elapsed_s``."""
        if not math.isfinite(self.cycle_s):
            return 0.0
        stall = self.cycle_s - self.compute_s
        k = math.floor((elapsed_s + stall - self.durable_delay_s) / self.cycle_s)
        return max(k, 0) * self.compute_s * self.rate


def _schedule(strategy: str, params: ModelParams, n_gpus: int) -> _Schedule:
    o = params.checkpoint_s
    if strategy == "periodic":
        period = periodic_period_s(params, n_gpus)
        return _Schedule(period, period - o, 1.0, o)
    if strategy == "periodic-async":
        period = async_period_s(params, n_gpus)
        return _Schedule(period, period - params.async_stall_fraction * o, 1.0, o)
    if strategy in ("jit", "jit-transparent"):
        rate = 1.0 / (1.0 + params.jit_overhead_fraction)
        period = jit_fallback_period_s(params)
        if not math.isfinite(period):
            return _Schedule(math.inf, math.inf, rate, o)
        return _Schedule(period, jit_fallback_work_s(params) / rate, rate, o)
    raise ValueError(f"unknown strategy {strategy!r} (known: {', '.join(MODEL_STRATEGIES)})")


@dataclass(frozen=True)
class TrialOutcome:
    """One strategy on one trace: ``progress_s`` useful work held at the horizon
    (fault-free compute seconds) and counts of failures (all, those JIT had to
    fall back for, those inside a JIT save window, those inside a restart or
    restore)."""

    progress_s: float
    failures: int
    jit_fallbacks: int
    save_window_failures: int
    recovery_window_failures: int


def play(strategy: str, trace: FailureTrace, params: ModelParams, n_gpus: int,
         horizon_s: float) -> TrialOutcome:
    """Play ``trace`` against ``strategy`` for a job of ``n_gpus`` GPUs until
    ``horizon_s`` (see the module docstring for the state machine)."""
    sched = _schedule(strategy, params, n_gpus)
    jit = strategy in ("jit", "jit-transparent")
    transparent = strategy == "jit-transparent"
    breaks = jit_breaks(trace, params, n_gpus).tolist() if jit else []
    times = trace.times_s.tolist()
    n = len(times)
    d, save, rs, rr, m = (params.detect_s, params.save_s, params.restart_s, params.restore_s,
                          params.step_s)
    full = d + rs + rr
    jit_restart = 0.0 if transparent else rs
    t = 0.0  # wall time the current run segment started
    p0 = 0.0  # progress at segment start (a durable checkpoint)
    i = 0
    fallbacks = save_fails = rec_fails = 0

    def outcome(progress: float) -> TrialOutcome:
        return TrialOutcome(progress, n, fallbacks, save_fails, rec_fails)

    while True:
        tf = times[i] if i < n else math.inf
        if tf >= horizon_s:
            return outcome(p0 + sched.progress(horizon_s - t))
        e = tf - t
        progress = p0 + sched.progress(e)
        durable = p0 + sched.durable(e)
        i += 1
        if jit and not breaks[i - 1]:
            save_end = tf + d + save
            if i < n and times[i] < save_end:  # second failure while saving
                save_fails += 1
                fallbacks += 1
                restore = durable
                rec_start, rec_len = times[i], full
                i += 1
            else:
                restore = max(durable, math.floor(progress / m + 1e-9) * m)
                rec_start, rec_len = save_end, jit_restart + rr
        else:
            if jit:
                fallbacks += 1
            restore = durable
            rec_start, rec_len = tf, full
        while i < n and times[i] < rec_start + rec_len:  # failure during restart/restore
            rec_fails += 1
            in_place = transparent and not breaks[i]
            rec_start, rec_len = times[i], (d + rr) if in_place else full
            i += 1
        t = rec_start + rec_len
        p0 = restore
        if t >= horizon_s:
            return outcome(p0)


@dataclass(frozen=True)
class Distribution:
    """Mean and 5th/50th/95th percentiles of a quantity over trials."""

    mean: float
    p5: float
    p50: float
    p95: float

    @classmethod
    def of(cls, values: Sequence[float] | np.ndarray) -> Distribution:
        a = np.asarray(values, dtype=float)
        p5, p50, p95 = np.percentile(a, [5, 50, 95])
        return cls(float(a.mean()), float(p5), float(p50), float(p95))


@dataclass(frozen=True)
class StrategySimResult:
    """Simulated outcome of one strategy at one world size over all trials.

    ``wasted_gpu_hours`` is per trial (over the horizon),
    ``wasted_gpu_hours_per_day`` the same scaled to 24 h of wall time;
    ``goodput`` = useful / total GPU time. ``interval_s`` is the wall time
    between checkpoint starts (JIT: between fallback checkpoints). The
    ``*_mean`` counts are per trial.
    """

    strategy: str
    n_gpus: int
    horizon_hours: float
    trials: int
    interval_s: float | None
    wasted_gpu_hours: Distribution
    wasted_gpu_hours_per_day: Distribution
    goodput: Distribution
    failures_mean: float
    jit_fallbacks_mean: float
    save_window_failures_mean: float
    recovery_window_failures_mean: float
    goodput_per_trial: tuple[float, ...]


def trial_generators(seed: int, n_gpus: int, trials: int) -> list[np.random.Generator]:
    """One independent :class:`numpy.random.Generator` per trial, derived from
    ``(seed, n_gpus)`` with :class:`numpy.random.SeedSequence`; trial ``i``'s
    stream does not depend on how many trials run."""
    children = np.random.SeedSequence([seed, n_gpus]).spawn(trials)
    return [np.random.default_rng(c) for c in children]


def simulate(params: ModelParams, config: SimConfig) -> dict[str, StrategySimResult]:
    """Run ``config.trials`` seeded trials and summarise each strategy.

    Same ``(params, config)`` -> identical results; the failure trace of a
    trial is shared by all strategies. Returns ``{strategy: result}`` in
    ``config.strategies`` order.
    """
    params.validate()
    config.validate()
    n = config.n_gpus
    horizon_s = config.horizon_hours * SECONDS_PER_HOUR
    outcomes: dict[str, list[TrialOutcome]] = {s: [] for s in config.strategies}
    for rng in trial_generators(config.seed, n, config.trials):
        trace = failure_trace(rng, n, params, horizon_s, config.weibull_shape)
        for s in config.strategies:
            outcomes[s].append(play(s, trace, params, n, horizon_s))
    results: dict[str, StrategySimResult] = {}
    days = horizon_s / SECONDS_PER_DAY
    for s, outs in outcomes.items():
        progress = np.array([o.progress_s for o in outs])
        wasted_h = n * (horizon_s - progress) / SECONDS_PER_HOUR
        goodput = progress / horizon_s
        cycle = _schedule(s, params, n).cycle_s
        results[s] = StrategySimResult(
            strategy=s,
            n_gpus=n,
            horizon_hours=config.horizon_hours,
            trials=config.trials,
            interval_s=cycle if math.isfinite(cycle) else None,
            wasted_gpu_hours=Distribution.of(wasted_h),
            wasted_gpu_hours_per_day=Distribution.of(wasted_h / days),
            goodput=Distribution.of(goodput),
            failures_mean=float(np.mean([o.failures for o in outs])),
            jit_fallbacks_mean=float(np.mean([o.jit_fallbacks for o in outs])),
            save_window_failures_mean=float(np.mean([o.save_window_failures for o in outs])),
            recovery_window_failures_mean=float(
                np.mean([o.recovery_window_failures for o in outs])),
            goodput_per_trial=tuple(goodput.tolist()),
        )
    return results
