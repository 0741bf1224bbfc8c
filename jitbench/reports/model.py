"""Analytic wasted-work model for JIT and periodic checkpointing.

All times are seconds unless a field name says otherwise; rates are per second.
Notation (field names in brackets):

- ``N``  world size, GPUs in the job (``n_gpus``).
- ``f``  per-GPU failure rate, 1/s: ``1 / (mtbf_hours_per_gpu * 3600)``. Every
  job interruption is counted once, whatever its blast radius, so the job's
  failure rate (1/job MTBF) is ``lambda = N f``.
- ``o``  blocking cost of one synchronous periodic checkpoint (``checkpoint_s``).
- ``c``  checkpoints per second of wall time (the period is ``1/c``).
- ``r``  per-failure recovery cost: ``detect_s + restart_s + restore_s``.
- ``m``  one minibatch, the fault-free step time (``step_s``).

Periodic checkpointing, first-order model (Young 1974, "A first order
approximation to the optimum checkpoint interval", CACM 17(9); Daly 2006, "A
higher order estimate of the optimum checkpoint interval for restart dumps",
FGCS 22(3); in the form of the wasted-GPU-work analysis of Gupta et al.,
EuroSys 2024)::

    W = N t (c o + N f r + N f / (2 c))        wasted GPU-seconds over wall time t
    c* = sqrt(N f / (2 o))                      minimises W (dW/dc = 0, W convex)

Goodput is useful GPU time over total GPU time, ``1 - W / (N t)``. The model
is first order: it charges every failure (also one during a recovery) a full
recovery plus the mean lost work, so it overstates waste once failures are
not rare against the checkpoint interval and the recovery time (about 10-20 %
at 10^5 GPUs with a 3 h-per-16k-GPU failure rate); the simulator
(:mod:`jitbench.reports.simulate`) has no such approximation.

The JIT strategies follow Gupta et al., "Just-In-Time Checkpointing: Low Cost
Error Recovery from Deep Learning Training Failures", EuroSys 2024: no
steady-state checkpoint stall, and per failure detection + save + restart +
restore + at most one minibatch replayed. That holds only while some healthy
replica of every shard survives and the survivors' state is trustworthy; the
model charges a fall back to the last durable checkpoint otherwise (see
:func:`jit_break_probability`), and for a second failure inside the JIT save
window.

Failure causes and their weights come from the Llama 3 paper (Meta, "The Llama
3 Herd of Models", 2024, section 3.3.4, Table 5): 419 unexpected interruptions
in a 54-day snapshot of Llama 3 405B pre-training on 16,384 H100 GPUs (8 GPUs
per host). See :data:`LLAMA3_TABLE5`.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

# Young's and Daly's intervals have one implementation, the runtime's (periodic:auto
# uses it); the model re-exports them for its callers.
from jitbench.runtime.interval import daly_interval_s, young_interval_s  # noqa: F401

SECONDS_PER_HOUR = 3600.0
SECONDS_PER_DAY = 86400.0

MODEL_STRATEGIES: tuple[str, ...] = ("jit", "jit-transparent", "periodic", "periodic-async")
"""Strategies the analytic model and the simulator know, in table order. Not the
runtime's strategies (:mod:`jitbench.runtime.strategies`): ``jit-transparent`` is
modelled only, ``none`` is not modelled."""

Scope = Literal["gpu", "host", "state"]
"""Blast radius of a failure cause: one rank's GPU (``gpu``), every GPU of the
failed rank's host (``host``), or the training state of every replica
(``state``: silent data corruption reaches all replicas through the gradient
all-reduce, so a JIT save of the in-memory state cannot be trusted)."""


@dataclass(frozen=True)
class FailureCause:
    """One row of a published root-cause table of job interruptions.

    ``count`` is the number of interruptions attributed to the cause,
    ``paper_pct`` the percentage as printed in the source, ``scope`` the blast
    radius this project assigns (see :data:`Scope`).
    """

    name: str
    paper_category: str
    count: int
    paper_pct: float
    scope: Scope


LLAMA3_TOTAL_INTERRUPTIONS = 419
LLAMA3_GPUS = 16384
LLAMA3_DAYS = 54
LLAMA3_MTBF_HOURS_PER_GPU = LLAMA3_GPUS * LLAMA3_DAYS * 24.0 / LLAMA3_TOTAL_INTERRUPTIONS
"""Per-GPU MTBF implied by the Llama 3 snapshot: 16,384 GPUs x 54 days x 24 h /
419 interruptions ~= 50,677 GPU-hours (a job MTBF of ~3.1 h at 16,384 GPUs)."""

LLAMA3_TABLE5: tuple[FailureCause, ...] = (
    FailureCause("faulty GPU", "GPU", 148, 30.1, "gpu"),
    FailureCause("GPU HBM3 memory", "GPU", 72, 17.2, "gpu"),
    FailureCause("software bug", "Dependency", 54, 12.9, "gpu"),
    FailureCause("network switch/cable", "Network", 35, 8.4, "gpu"),
    FailureCause("host maintenance", "Unplanned Maintenance", 32, 7.6, "host"),
    FailureCause("GPU SRAM memory", "GPU", 19, 4.5, "gpu"),
    FailureCause("GPU system processor", "GPU", 17, 4.1, "gpu"),
    FailureCause("NIC", "Host", 7, 1.7, "host"),
    FailureCause("NCCL watchdog timeouts", "Unknown", 7, 1.7, "gpu"),
    FailureCause("silent data corruption", "GPU", 6, 1.4, "state"),
    FailureCause("GPU thermal interface + sensor", "GPU", 6, 1.4, "gpu"),
    FailureCause("SSD", "Host", 3, 0.7, "host"),
    FailureCause("power supply", "Host", 3, 0.7, "host"),
    FailureCause("server chassis", "Host", 2, 0.5, "host"),
    FailureCause("IO expansion board", "Host", 2, 0.5, "host"),
    FailureCause("dependency", "Dependency", 2, 0.5, "gpu"),
    FailureCause("CPU", "Host", 2, 0.5, "host"),
    FailureCause("system memory", "Host", 2, 0.5, "host"),
)
"""Root causes of the 419 unexpected interruptions in Llama 3 405B pre-training
(Meta, "The Llama 3 Herd of Models", 2024, Table 5: component, category,
interruption count, % of interruptions).

Weights are ``count / 419`` (the counts sum to 419). The printed percentages
agree with the counts except for "faulty GPU": 148 / 419 is 35.3 %, the table
prints 30.1 %, and the printed column sums to 94.9 %; the counts are used.

Scope assignment (this project's, not the paper's): the paper's "Host" category
and host maintenance take out the whole host (all ``gpus_per_host`` GPUs);
silent data corruption taints every replica's state; every other cause takes
out one rank (a GPU, its link, or its process: software bugs and NCCL watchdog
timeouts stop one rank while the survivors block in the next collective, the
case JIT checkpointing is built for). A network switch can take out more than
one host; it is modelled as one rank's link failing.
"""


@dataclass(frozen=True)
class ModelParams:
    """Inputs of the analytic model and the simulator (all but the world size).

    Durations in seconds, MTBF in hours, fractions dimensionless.
    """

    mtbf_hours_per_gpu: float = 50_000.0
    """Mean time between job-interrupting failures of one GPU, hours (see
    :data:`LLAMA3_MTBF_HOURS_PER_GPU`)."""
    step_s: float = 1.0
    """Fault-free step (one minibatch) time ``m``."""
    checkpoint_s: float = 60.0
    """Blocking cost ``o`` of one synchronous periodic checkpoint; also the
    write time of an asynchronous one."""
    restart_s: float = 300.0
    """Last old process gone -> all new ranks initialised."""
    detect_s: float = 30.0
    """Failure -> first survivor declares it."""
    save_s: float = 30.0
    """JIT checkpoint write, begin -> durable."""
    restore_s: float = 60.0
    """Checkpoint load, begin -> end."""
    async_stall_fraction: float = 0.1
    """Fraction of ``checkpoint_s`` that an asynchronous checkpoint stalls
    training for (the device -> host snapshot; the write to storage overlaps
    training). 0.1 is an assumption, not a measurement: measure it with
    ``periodic-async`` runs and pass it."""
    jit_overhead_fraction: float = 0.0
    """JIT steady-state step-time overhead (``overhead_pct / 100``); near zero
    per Gupta et al. 2024."""
    fallback_interval_s: float = 6 * SECONDS_PER_HOUR
    """Wall time between the infrequent periodic (synchronous) checkpoints a
    JIT job keeps for the cases JIT cannot cover (``math.inf``: none, fall back
    to the job's start)."""
    gpus_per_host: int = 8
    """GPUs per host (blast radius of a host failure)."""
    replicas_per_shard: int | None = None
    """Data-parallel replicas of each shard of the training state (hybrid
    sharding, HSDP); ``None`` is plain data parallel (every rank holds a full
    replica). 1 is fully sharded (FSDP/ZeRO-3): no JIT save is possible."""
    causes: tuple[FailureCause, ...] = field(default=LLAMA3_TABLE5, repr=False)
    """Failure causes and their weights (default: Llama 3, Table 5)."""

    @property
    def failure_rate_per_gpu_s(self) -> float:
        """Per-GPU failure rate ``f``, 1/s."""
        return 1.0 / (self.mtbf_hours_per_gpu * SECONDS_PER_HOUR)

    def recovery_s(self) -> float:
        """Per-failure recovery cost of a restart from a checkpoint ``r``:
        detect + restart + restore, seconds."""
        return self.detect_s + self.restart_s + self.restore_s

    def validate(self) -> None:
        """Raise :class:`ValueError` (one clear line) on an unusable value."""
        positive = {"mtbf_hours_per_gpu": self.mtbf_hours_per_gpu, "step_s": self.step_s,
                    "fallback_interval_s": self.fallback_interval_s}
        for name, value in positive.items():
            # fallback_interval_s may be inf (no fallback checkpoint)
            if not (value > 0) or math.isnan(value) or (
                    math.isinf(value) and name != "fallback_interval_s"):
                raise ValueError(f"{name} must be a finite number > 0 (got {value})")
        for name in ("checkpoint_s", "restart_s", "detect_s", "save_s", "restore_s",
                     "jit_overhead_fraction"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number >= 0 (got {value})")
        if not (0.0 <= self.async_stall_fraction <= 1.0):
            raise ValueError(
                f"async_stall_fraction must be in [0, 1] (got {self.async_stall_fraction})")
        if self.gpus_per_host < 1:
            raise ValueError(f"gpus_per_host must be >= 1 (got {self.gpus_per_host})")
        if self.replicas_per_shard is not None and self.replicas_per_shard < 1:
            raise ValueError(
                f"replicas_per_shard must be >= 1 or None (got {self.replicas_per_shard})")
        if not self.causes or sum(c.count for c in self.causes) <= 0:
            raise ValueError("causes must hold at least one cause with a positive count")

    def cause_weights(self) -> np.ndarray:
        """Probability of each cause (``count / total``), in ``causes`` order."""
        counts = np.array([c.count for c in self.causes], dtype=float)
        return counts / counts.sum()


# --------------------------------------------------------------------------- periodic


def job_failure_rate_per_s(n_gpus: int, mtbf_hours_per_gpu: float) -> float:
    """Job failure rate ``lambda = N f`` (1/s) for ``n_gpus`` GPUs that each fail
    independently with MTBF ``mtbf_hours_per_gpu`` hours (job MTBF = 1/lambda)."""
    return n_gpus / (mtbf_hours_per_gpu * SECONDS_PER_HOUR)


def periodic_wasted_gpu_s(
    n_gpus: float,
    wall_s: float,
    checkpoint_s: float,
    checkpoints_per_s: float,
    failure_rate_per_gpu_s: float,
    restart_s: float,
) -> float:
    """Wasted GPU-seconds of synchronous periodic checkpointing (first order).

    ``W = N t (c o + N f r + N f / (2 c))`` with ``N = n_gpus``, ``t = wall_s``,
    ``o = checkpoint_s``, ``c = checkpoints_per_s``, ``f = failure_rate_per_gpu_s``
    and ``r = restart_s`` (the whole per-failure recovery cost). Checkpoint
    stalls, recovery, and on average half a checkpoint period of lost work per
    failure. Source: Young 1974; Daly 2006; Gupta et al. 2024 (wasted-work analysis).
    """
    nf = n_gpus * failure_rate_per_gpu_s
    return n_gpus * wall_s * (checkpoints_per_s * checkpoint_s + nf * restart_s
                              + nf / (2.0 * checkpoints_per_s))


def young_daly_checkpoints_per_s(
    n_gpus: float, failure_rate_per_gpu_s: float, checkpoint_s: float
) -> float:
    """Optimal checkpoint rate ``c* = sqrt(N f / (2 o))`` (1/s), the minimum of
    :func:`periodic_wasted_gpu_s`; its period ``1/c* = sqrt(2 o M)`` with job
    MTBF ``M = 1/(N f)`` is Young's interval (Young 1974; Daly 2006 eq. for the
    first-order case). ``inf`` when ``checkpoint_s`` is 0."""
    if checkpoint_s <= 0:
        return math.inf
    return math.sqrt(n_gpus * failure_rate_per_gpu_s / (2.0 * checkpoint_s))


def periodic_async_wasted_gpu_s(
    n_gpus: float,
    wall_s: float,
    checkpoint_s: float,
    checkpoints_per_s: float,
    failure_rate_per_gpu_s: float,
    restart_s: float,
    async_stall_fraction: float,
) -> float:
    """Wasted GPU-seconds of asynchronous periodic checkpointing (first order).

    ``W = N t (c a o + N f r + N f (1/(2c) + o))``: each checkpoint stalls
    training for ``a o`` (``a = async_stall_fraction``) and becomes durable
    ``o`` after its snapshot; a failure loses the work since the last
    *completed* checkpoint, on average ``1/(2c) + o`` for a period ``1/c >= o``
    (a failure in the first ``o`` of a period falls back one more period).
    Extension of Young 1974 / Daly 2006 to overlapped writes (this project).
    """
    nf = n_gpus * failure_rate_per_gpu_s
    return n_gpus * wall_s * (
        checkpoints_per_s * async_stall_fraction * checkpoint_s
        + nf * restart_s
        + nf * (1.0 / (2.0 * checkpoints_per_s) + checkpoint_s)
    )


def periodic_async_optimal_checkpoints_per_s(
    n_gpus: float, failure_rate_per_gpu_s: float, checkpoint_s: float, async_stall_fraction: float
) -> float:
    """Optimal asynchronous checkpoint rate ``sqrt(N f / (2 a o))`` (1/s), the
    minimum of :func:`periodic_async_wasted_gpu_s` before the ``1/c >= o``
    constraint (applied by :func:`estimate`). ``inf`` when ``a o`` is 0."""
    stall = async_stall_fraction * checkpoint_s
    if stall <= 0:
        return math.inf
    return math.sqrt(n_gpus * failure_rate_per_gpu_s / (2.0 * stall))


# --------------------------------------------------------------------------- topology


@dataclass(frozen=True)
class Topology:
    """Which single failures leave some shard with no healthy replica.

    Ranks are laid out as an HSDP device mesh ``(replicate, shard)``: rank
    ``k * s + j`` holds replica ``k`` of shard ``j``, with shard-group size
    ``s = ceil(N / R)``; host ``h`` holds ranks ``[h g, (h + 1) g)``.
    ``rank_breaks[i]``: losing rank ``i`` alone loses every replica of its
    shard. ``host_breaks[h]``: losing host ``h`` loses every replica of some
    shard.
    """

    n_gpus: int
    gpus_per_host: int
    replicas_per_shard: int
    rank_breaks: np.ndarray
    host_breaks: np.ndarray

    @property
    def rank_break_fraction(self) -> float:
        """Fraction of ranks whose loss alone breaks JIT."""
        return float(self.rank_breaks.mean())

    @property
    def host_break_fraction(self) -> float:
        """Fraction of hosts whose loss breaks JIT (a failed rank's host is drawn
        uniformly over ranks, so hosts are weighted by their rank count)."""
        g = self.gpus_per_host
        sizes = np.minimum(g, self.n_gpus - np.arange(self.host_breaks.size) * g)
        return float((self.host_breaks * sizes).sum() / self.n_gpus)


@functools.lru_cache(maxsize=256)
def topology(n_gpus: int, gpus_per_host: int = 8, replicas_per_shard: int | None = None) -> Topology:
    """Build the :class:`Topology` of a job of ``n_gpus`` GPUs (see there)."""
    if n_gpus < 1:
        raise ValueError(f"n_gpus must be >= 1 (got {n_gpus})")
    reps = n_gpus if replicas_per_shard is None else min(replicas_per_shard, n_gpus)
    s = math.ceil(n_gpus / reps)
    n_hosts = math.ceil(n_gpus / gpus_per_host)
    # replicas of shard j: ranks j, j+s, ... < N
    shard_ids = np.arange(s)
    rep_count = (n_gpus - 1 - shard_ids) // s + 1
    ranks = np.arange(n_gpus)
    rank_breaks = rep_count[ranks % s] == 1
    min_reps = int(rep_count.min())
    if min_reps >= 2 and (min_reps - 1) * s >= gpus_per_host:
        host_breaks = np.zeros(n_hosts, dtype=bool)  # replicas span more than a host
    else:
        host = ranks // gpus_per_host
        key = host * s + ranks % s
        keys, counts = np.unique(key, return_counts=True)
        lost = counts == rep_count[keys % s]
        host_breaks = np.zeros(n_hosts, dtype=bool)
        host_breaks[keys[lost] // s] = True
    rank_breaks.setflags(write=False)
    host_breaks.setflags(write=False)
    return Topology(n_gpus, gpus_per_host, reps, rank_breaks, host_breaks)


def jit_break_probability(params: ModelParams, n_gpus: int) -> float:
    """Probability that one failure leaves JIT nothing trustworthy to save.

    Sum over causes of weight x P(break | scope): ``state`` always breaks;
    ``gpu`` breaks when the failed rank's shard has no other replica; ``host``
    when the host holds every replica of some shard (see :func:`topology`).
    With plain data parallel only a host failure of a job that fits in one
    host, or silent data corruption, breaks it.
    """
    topo = topology(n_gpus, params.gpus_per_host, params.replicas_per_shard)
    by_scope = {"gpu": topo.rank_break_fraction, "host": topo.host_break_fraction, "state": 1.0}
    weights = params.cause_weights()
    return float(sum(w * by_scope[c.scope] for w, c in zip(weights, params.causes, strict=True)))


def mean_age_mod_s(rate_per_s: float, period_s: float) -> float:
    """``E[X mod T]`` for ``X ~ Exp(rate)``: the mean age of the last periodic
    checkpoint at a failure, when the checkpoint schedule restarts after every
    recovery (each run segment starts from a durable checkpoint and lasts an
    exponential time). Equals ``1/rate - T / (exp(rate T) - 1)``; ``T/2`` for
    ``rate T -> 0``; ``1/rate`` for ``T = inf``. Seconds."""
    if rate_per_s <= 0:
        return period_s / 2.0
    if not math.isfinite(period_s):
        return 1.0 / rate_per_s
    x = rate_per_s * period_s
    if x < 1e-4:
        return period_s * (0.5 - x / 12.0)
    if x > 700:
        return 1.0 / rate_per_s
    return 1.0 / rate_per_s - period_s / math.expm1(x)


# --------------------------------------------------------------------------- estimates


@dataclass(frozen=True)
class StrategyEstimate:
    """Analytic estimate for one strategy at one world size.

    ``waste_fraction`` is wasted over total GPU time (first order; clipped to
    [0, 1]), ``goodput = 1 - waste_fraction``. ``interval_s`` is the wall time
    between checkpoint starts (periodic: the Young/Daly optimum; JIT: the
    fallback interval). ``recovery_per_failure_s`` is the expected wall time
    a failure costs the job (recovery plus lost work).
    """

    strategy: str
    n_gpus: int
    waste_fraction: float
    goodput: float
    wasted_gpu_hours_per_day: float
    interval_s: float | None
    failures_per_day: float
    steady_state_fraction: float
    recovery_per_failure_s: float
    jit_fallback_probability: float | None = None


def periodic_period_s(params: ModelParams, n_gpus: int) -> float:
    """Wall time between synchronous checkpoint starts at the Young/Daly optimum
    ``1/c*``, at least one checkpoint plus one step. Seconds."""
    c = young_daly_checkpoints_per_s(n_gpus, params.failure_rate_per_gpu_s, params.checkpoint_s)
    return max(1.0 / c if c > 0 else math.inf, params.checkpoint_s + params.step_s)


def async_period_s(params: ModelParams, n_gpus: int) -> float:
    """Wall time between asynchronous checkpoint starts at their optimum, at least
    the write time ``o`` (one write in flight) and the stall plus one step."""
    c = periodic_async_optimal_checkpoints_per_s(
        n_gpus, params.failure_rate_per_gpu_s, params.checkpoint_s, params.async_stall_fraction)
    floor = max(params.checkpoint_s, params.async_stall_fraction * params.checkpoint_s + params.step_s)
    return max(1.0 / c if c > 0 else math.inf, floor)


def jit_fallback_period_s(params: ModelParams) -> float:
    """Wall time between the JIT job's fallback periodic checkpoints: the fallback
    interval rounded to whole steps of compute plus one checkpoint. Seconds."""
    if not math.isfinite(params.fallback_interval_s):
        return math.inf
    work = jit_fallback_work_s(params)
    return work * (1.0 + params.jit_overhead_fraction) + params.checkpoint_s


def jit_fallback_work_s(params: ModelParams) -> float:
    """Progress (fault-free compute seconds, whole steps) between fallback
    checkpoints, from ``fallback_interval_s`` less the checkpoint itself."""
    if not math.isfinite(params.fallback_interval_s):
        return math.inf
    compute_wall = max(params.fallback_interval_s - params.checkpoint_s, params.step_s)
    steps = max(1, round(compute_wall / (1.0 + params.jit_overhead_fraction) / params.step_s))
    return steps * params.step_s


def _finish(strategy: str, n_gpus: int, params: ModelParams, steady: float, per_failure_s: float,
            interval_s: float | None, p_fb: float | None = None) -> StrategyEstimate:
    lam = job_failure_rate_per_s(n_gpus, params.mtbf_hours_per_gpu)
    waste = min(max(steady + lam * per_failure_s, 0.0), 1.0)
    return StrategyEstimate(
        strategy=strategy,
        n_gpus=n_gpus,
        waste_fraction=waste,
        goodput=1.0 - waste,
        wasted_gpu_hours_per_day=n_gpus * 24.0 * waste,
        interval_s=interval_s,
        failures_per_day=lam * SECONDS_PER_DAY,
        steady_state_fraction=steady,
        recovery_per_failure_s=per_failure_s,
        jit_fallback_probability=p_fb,
    )


def measured_estimate(strategy: str, n_gpus: int, mtbf_hours_per_gpu: float,
                      steady_fraction: float, per_failure_s: float) -> StrategyEstimate:
    """Waste of a strategy at ``n_gpus`` GPUs from its *measured* costs, for strategies
    the analytic model has no formula for (the peers, in-process recovery).

    ``waste = steady + N f x per_failure`` (the same form as every strategy of
    :func:`estimate`): ``steady_fraction`` is the share of fault-free time the strategy
    costs (its checkpoint stalls over the training time), ``per_failure_s`` the job
    time one failure costs (seconds every GPU loses: detection, recovery and replayed
    work). Both are taken as measured at a small world size and assumed independent
    of ``n_gpus``, which holds for detection and replay, but not for a restart whose
    rendezvous grows with the job: at scale this favours whole-job restarts. The
    per-failure cost is that of the measured fault position (a periodic strategy's
    replay depends on where the fault fell in its interval).

    Raises:
        ValueError: a negative cost or a non-positive MTBF.
    """
    if not (mtbf_hours_per_gpu > 0) or steady_fraction < 0 or per_failure_s < 0:
        raise ValueError(f"measured_estimate: need MTBF > 0 and costs >= 0 (got "
                         f"{mtbf_hours_per_gpu}, {steady_fraction}, {per_failure_s})")
    params = ModelParams(mtbf_hours_per_gpu=mtbf_hours_per_gpu)
    return _finish(strategy, n_gpus, params, steady_fraction, per_failure_s, None)


def estimate(strategy: str, n_gpus: int, params: ModelParams) -> StrategyEstimate:
    """Analytic waste and goodput of ``strategy`` for a job of ``n_gpus`` GPUs.

    - ``periodic``: ``W/(N t) = c o + N f r + N f/(2c)`` at ``c = c*``
      (:func:`periodic_wasted_gpu_s`, Young 1974 / Daly 2006).
    - ``periodic-async``: :func:`periodic_async_wasted_gpu_s` at its optimum,
      period at least ``o``.
    - ``jit`` (user level, Gupta et al. 2024): steady state: the JIT step
      overhead and the fallback checkpoints (``o`` each; the schedule restarts
      after every recovery, so there are ``(1 - lambda L) / T`` of them per
      second for a fallback period ``T``, not ``1/T``). Per
      failure, with ``p_b`` = :func:`jit_break_probability` and ``p_s = 1 -
      exp(-N f (detect_s + save_s))`` (a second failure inside the save window
      loses the JIT checkpoint)::

          (1-p_b)(1-p_s) (detect + save + restart + restore + m/2)
        + (1-p_b) p_s   ((detect + save)/2 + L)
        + p_b           (detect + restart + restore + L)

      where ``m/2`` is the mean part of the failing step (at most one
      minibatch) that is redone and ``L`` = :func:`mean_age_mod_s` the mean
      work since the last durable checkpoint.
    - ``jit-transparent``: as ``jit`` without the restart term on the JIT path
      (the paper's transparent mode recovers in place); a fall back still
      restarts the job.
    """
    params.validate()
    if n_gpus < 1:
        raise ValueError(f"n_gpus must be >= 1 (got {n_gpus})")
    f = params.failure_rate_per_gpu_s
    lam = n_gpus * f
    o = params.checkpoint_s
    r = params.recovery_s()
    if strategy == "periodic":
        period = periodic_period_s(params, n_gpus)
        c = 1.0 / period
        steady = c * o
        return _finish(strategy, n_gpus, params, steady, r + period / 2.0, period)
    if strategy == "periodic-async":
        period = async_period_s(params, n_gpus)
        c = 1.0 / period
        steady = c * params.async_stall_fraction * o
        return _finish(strategy, n_gpus, params, steady, r + period / 2.0 + o, period)
    if strategy in ("jit", "jit-transparent"):
        eps = params.jit_overhead_fraction
        period = jit_fallback_period_s(params)
        if math.isfinite(period):
            # the fallback schedule restarts after every recovery, so a run segment
            # of length X ~ Exp(lambda) holds floor(X / period) fallback checkpoints:
            # (1 - lambda E[X mod period]) / period of them per second, not 1/period
            per_s = (1.0 - lam * mean_age_mod_s(lam, period)) / period
            stall = per_s * o
            steady = stall + (1.0 - stall) * eps / (1.0 + eps)
        else:
            steady = eps / (1.0 + eps)
        p_b = jit_break_probability(params, n_gpus)
        window = params.detect_s + params.save_s
        p_s = -math.expm1(-lam * window)
        lost_fb = mean_age_mod_s(lam, period) / (1.0 + eps)
        restart = params.restart_s if strategy == "jit" else 0.0
        ok = params.detect_s + params.save_s + restart + params.restore_s + params.step_s / 2.0
        per_failure = ((1 - p_b) * (1 - p_s) * ok
                       + (1 - p_b) * p_s * (window / 2.0 + lost_fb)
                       + p_b * (r + lost_fb))
        p_fb = p_b + (1 - p_b) * p_s
        return _finish(strategy, n_gpus, params, steady, per_failure,
                       period if math.isfinite(period) else None, p_fb)
    raise ValueError(f"unknown strategy {strategy!r} (known: {', '.join(MODEL_STRATEGIES)})")


@dataclass(frozen=True)
class Crossover:
    """World size where strategy ``a``'s waste crosses strategy ``b``'s.

    ``n_gpus`` is the smallest integer world size at or above the crossing
    whose winner is ``above``; ``below`` wins just under it.
    """

    a: str
    b: str
    n_gpus: int
    below: str
    above: str


def unclipped_waste_fraction(strategy: str, n_gpus: int, params: ModelParams) -> float:
    """First-order wasted fraction of GPU time of :func:`estimate`, not clipped at 1
    (dimensionless): ``steady + N f x per-failure cost`` (clipping hides which of two
    strategies is worse once both waste everything)."""
    e = estimate(strategy, n_gpus, params)
    return e.steady_state_fraction + e.failures_per_day / SECONDS_PER_DAY * e.recovery_per_failure_s


def find_crossovers(params: ModelParams, a: str = "jit", b: str = "periodic",
                    lo_gpus: int = 1, hi_gpus: int = 1_000_000,
                    multiple_of: int = 1) -> list[Crossover]:
    """Every world size in ``[lo_gpus, hi_gpus]`` where the cheaper of ``a`` and
    ``b`` (analytic wasted GPU-hours, :func:`unclipped_waste_fraction`) changes, by a
    log-spaced scan then integer bisection. Empty when one strategy wins throughout.

    ``multiple_of``: only world sizes that are multiples of it are looked at (an HSDP
    job of ``R`` replicas per shard has ``N = R x S`` GPUs; in between, the layout of
    :func:`topology` leaves some shard one replica short, which the scan would
    otherwise report as a crossover at every odd ``N``)."""
    if multiple_of < 1:
        raise ValueError(f"multiple_of must be >= 1 (got {multiple_of})")
    k = multiple_of
    lo_m, hi_m = max(1, -(-lo_gpus // k)), hi_gpus // k  # world sizes k*m, m in [lo_m, hi_m]
    if hi_m < lo_m:
        return []

    def diff(m: int) -> float:
        return (unclipped_waste_fraction(a, m * k, params)
                - unclipped_waste_fraction(b, m * k, params))

    grid = np.unique(np.round(np.geomspace(lo_m, hi_m, 400)).astype(int))
    out: list[Crossover] = []
    prev_m, prev_d = int(grid[0]), diff(int(grid[0]))
    for m in grid[1:]:
        m = int(m)
        d = diff(m)
        if (prev_d < 0) != (d < 0) and prev_d != 0:
            lo, hi = prev_m, m  # sign(diff(lo)) == sign(prev_d) != sign(diff(hi))
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if (diff(mid) < 0) == (prev_d < 0):
                    lo = mid
                else:
                    hi = mid
            below, above = (a, b) if prev_d < 0 else (b, a)
            out.append(Crossover(a=a, b=b, n_gpus=hi * k, below=below, above=above))
        prev_m, prev_d = m, d
    return out
