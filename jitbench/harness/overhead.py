"""Steady-state overhead: step time per strategy from interleaved segments of one run.

``overhead_pct`` (DESIGN.md, "Metrics") is the step time under a strategy over
the step time with no checkpointing, minus one. It is small (JIT: a few
microseconds per step; periodic: one save every N steps), while step times on
a shared machine drift by several per cent over minutes. So jitbench measures
every strategy *inside one launch*: the worker trains one job and switches the
runtime's strategy at segment boundaries (:meth:`Runtime.set_strategy`)::

    warm-up (none) | A B C D | D C B A | A B C D | ...     (one segment = S steps)

Why one launch rather than interleaved launches: separate launches differ in
things that have nothing to do with the strategy (process start-up, allocator
and page-cache state, which cores the ranks land on, the first iterations of
DDP), and each launch costs seconds of start-up. Inside one launch the same
processes with the same memory run adjacent segments seconds apart, so slow
drift (other jobs on the machine, thermal state) hits neighbouring segments
almost equally; reversing the order every other repeat (ABCD DCBA) cancels a
linear drift within a repeat. What one launch cannot show is a strategy's
start-up cost (e.g. the first async save creating its thread pool): that is
part of the first repeat only, and the median over repeats discounts it.

Measurement, from rank 0's events only (ranks move in lockstep: every step
ends in a collective):

- a segment's step time = (begin of the next segment's first step - begin of
  its own first step) / S: every step, every checkpoint in it, and the
  switch (which waits for an async save in flight) are included. The mean over
  the segment's steps, not the median: a periodic checkpoint costs one step
  in N, which a median would hide;
- per repeat r: ``overhead[r, s] = step_s[r, s] / step_s[r, none] - 1``, the
  ratio to the adjacent ``none`` segment of the same repeat;
- per strategy: ``step_s`` = median over repeats, ``overhead_pct`` = 100 x
  median over repeats, with the spread over repeats as IQR (``q25``/``q75``)
  and min-max;
- an A/A control: every repeat also runs a second ``none`` segment
  (``none-aa``), whose ratio to the first is pure measurement noise. A
  strategy's overhead is ``within_noise`` when its median lies inside
  ``±max |control|`` over the repeats (the band is symmetric: which of two
  identical segments comes first is arbitrary; without a control: when its
  own min-max range contains 0): "indistinguishable from zero at this
  precision", where the precision is measured, not assumed;
- ``cpu_overhead_pct``: the same ratio of rank 0's process CPU time per step
  (``cpu_s`` of step-begin events, :func:`time.process_time`, every thread).
  Other jobs on the machine stretch wall time but hardly CPU time, so on a
  shared machine this is the precise figure for CPU work such as the JIT
  snapshot or an async writer thread; it leaves out time spent waiting (an
  fsync, a barrier), which only the wall-time ratio holds;
- ``rt_us``: the median of the runtime's own time at a step end (lock and
  snapshot, the ``rt_s`` field of step-end events), in microseconds: the JIT
  hot path measured directly.

Strategies with their own launcher (``jit-inprocess`` with its spares and
membership store, the peers) cannot be a segment of a ``none`` launch: what
they cost is partly outside the training processes (hot spares polling the
store, the peers' lighthouse and heartbeats). When any is asked for, the
measurement runs in **launch mode**: one fault-free launch per strategy and
repeat, in the same ABBA order with the same A/A control (a second ``none``
launch), each measured over ``segment_steps`` steps after ``warmup_steps``
excluded ones, by the same formulas. Launches differ in more than the strategy
(start-up, page cache, which cores the ranks land on), so the control's band is
wider than in segment mode; the table says which mode measured it.

Every segment of a periodic strategy holds the same number of checkpoints:
the segment length must be a multiple of each interval, and the warm-up is
stretched so checkpoints fall mid-segment (an async save's last write then
overlaps the segment's own steps).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path

from jitbench.harness.segments import CONTROL
from jitbench.harness.spec import RunSpec, SpecError, Strategy
from jitbench.runtime.events import read_events

OVERHEAD_VERSION = 1
DEFAULT_STRATEGIES = ("none", "jit", "periodic:10", "periodic-async:10")


@dataclass
class OverheadConfig:
    """The segment plan of a steady-state overhead run."""

    strategies: list[str] = field(default_factory=lambda: list(DEFAULT_STRATEGIES))
    """Strategies to compare; ``none`` is added first when missing (it is the baseline)."""
    segment_steps: int = 20
    """Steps per segment (a multiple of every periodic interval)."""
    repeats: int = 5
    """Segments per strategy (ABCD DCBA ... order)."""
    warmup_steps: int = 10
    """Fault-free steps under ``none`` before the first segment, excluded (at least this many)."""
    control: bool = True
    """Add an A/A control (a second ``none`` segment per repeat) that measures the noise."""
    mode: str = "segments"
    """``segments`` (one launch) or ``launches`` (one launch per strategy and repeat);
    set by :meth:`validate`: launches when a strategy has its own launcher."""

    def validate(self) -> list[Strategy]:
        """Parse the strategies.

        Raises:
            SpecError: unknown or ``auto`` strategy, duplicates, a segment length that
                is not a multiple of an interval, or non-positive sizes.
        """
        if self.segment_steps < 2 or self.repeats < 1 or self.warmup_steps < 0:
            raise SpecError("overhead needs --segment-steps >= 2, --repeats >= 1, "
                            "--warmup-steps >= 0")
        raw = [s.strip().lower() for s in self.strategies if s.strip()]
        if len(set(raw)) != len(raw):
            raise SpecError(f"duplicate strategy in {','.join(self.strategies)}")
        names = raw if "none" in raw else ["none", *raw]
        out = []
        for n in names:
            st = Strategy.parse(n)
            if st.auto:
                raise SpecError("overhead takes fixed intervals (periodic:N), not periodic:auto")
            if st.interval and self.segment_steps % st.interval:
                raise SpecError(f"--segment-steps {self.segment_steps} is not a multiple of "
                                f"the interval of {n}: segments would hold different numbers "
                                "of checkpoints")
            out.append(st)
        self.strategies = [str(s) for s in out]
        self.mode = ("launches" if any(st.entry.launcher != "agent" for st in out)
                     else "segments")
        return out

    def order(self) -> list[tuple[str, int]]:
        """``[(strategy or CONTROL, repeat), ...]`` in measurement order: the
        strategies, then the control, reversed every other repeat (ABCD DCBA ...)."""
        self.validate()
        labels = self.strategies + ([CONTROL] if self.control else [])
        return [(s, r) for r in range(self.repeats)
                for s in (labels if r % 2 == 0 else labels[::-1])]

    def plan(self) -> tuple[list[list], int]:
        """``([[first_step, strategy, repeat], ...], total_steps)``; repeat -1 is the warm-up."""
        sts = self.validate()
        nmax = max((s.interval for s in sts), default=0)
        warm = max(1, self.warmup_steps)
        if nmax:  # put checkpoints mid-segment: first segment starts at step = k*nmax + nmax//2 + 1
            while warm % nmax != nmax // 2:
                warm += 1
        segs: list[list] = [[1, "none", -1]]
        step = warm + 1
        for s, r in self.order():
            segs.append([step, s, r])
            step += self.segment_steps
        return segs, step  # one extra step after the last segment closes it


def overhead_spec(base: RunSpec, cfg: OverheadConfig) -> RunSpec:
    """The fault-free spec of an overhead run: ``base`` with the segment plan and steps."""
    segs, total = cfg.plan()
    d = RunSpec.from_dict(__import__("dataclasses").asdict(base))
    d.faults, d.strategy, d.segments = [], "none", segs
    d.workload.steps = total
    d.save_final_state = False
    d.validate()
    return d


class _Rank0Steps:
    """Rank 0's step-begin times and CPU times and step-end ``rt_s`` of one launch."""

    def __init__(self, run_dir: Path) -> None:
        evs = read_events(Path(run_dir) / "events")
        if any(e["attempt"] > 0 or (e.get("gen") or 0) > 0 for e in evs):
            raise ValueError(f"{run_dir}: the overhead run restarted; its step times are "
                             "not steady")
        self.run_dir = run_dir
        mine = [e for e in evs if e["event"] == "step" and e["rank"] == 0]
        self.begin = {e["step"]: e["t_mono"] for e in mine if e["phase"] == "begin"}
        self.cpu = {e["step"]: e.get("cpu_s") for e in mine if e["phase"] == "begin"}
        self.rt = {e["step"]: e.get("rt_s") for e in mine if e["phase"] == "end"}

    def row(self, strategy: str, rep: int, first: int, nxt: int) -> dict:
        """Steps ``first .. nxt - 1``: mean step time from step begin to step begin (s),
        CPU time per step (s), median runtime hot path (µs)."""
        if first not in self.begin or nxt not in self.begin:
            raise ValueError(f"{self.run_dir}: segment at step {first} is incomplete")
        n = nxt - first
        rts = [self.rt[s] for s in range(first, nxt) if self.rt.get(s) is not None]
        cpu_step = (None if self.cpu.get(nxt) is None or self.cpu.get(first) is None
                    else (self.cpu[nxt] - self.cpu[first]) / n)
        return {"strategy": strategy, "repeat": rep, "first_step": first, "steps": n,
                "step_s": (self.begin[nxt] - self.begin[first]) / n, "cpu_step_s": cpu_step,
                "rt_us": statistics.median(rts) * 1e6 if rts else None}


def segment_times(run_dir: Path, spec: RunSpec) -> list[dict]:
    """Per segment: strategy, repeat, steps, mean step time (s) and median ``rt_s``.

    Raises:
        ValueError: the run restarted or lacks a segment's events.
    """
    steps = _Rank0Steps(run_dir)
    segs = spec.segments
    return [steps.row(strategy, rep, first, segs[i + 1][0] if i + 1 < len(segs)
                      else spec.steps)
            for i, (first, strategy, rep) in enumerate(segs) if rep >= 0]


def launch_spec(base: RunSpec, cfg: OverheadConfig, strategy: str) -> RunSpec:
    """The fault-free spec of one launch-mode measurement: ``strategy`` (``none`` for the
    control) for ``warmup_steps`` + ``segment_steps`` + 1 steps."""
    d = RunSpec.from_dict(__import__("dataclasses").asdict(base))
    d.faults, d.segments = [], []
    d.strategy = "none" if strategy == CONTROL else strategy
    d.workload.steps = max(1, cfg.warmup_steps) + cfg.segment_steps + 1
    d.save_final_state = False
    d.validate()
    return d


def launch_times(run_dir: Path, cfg: OverheadConfig, strategy: str, rep: int) -> dict:
    """The measured steps of one launch-mode launch (:class:`_Rank0Steps.row`).

    Raises:
        ValueError: the launch restarted or lacks the measured steps' events.
    """
    first = max(1, cfg.warmup_steps) + 1
    return _Rank0Steps(run_dir).row(strategy, rep, first, first + cfg.segment_steps)


def _q(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    if len(xs) == 1:
        return xs[0]
    pos = q * (len(xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize(rows: list[dict], strategies: list[str]) -> list[dict]:
    """One row per strategy: median step time, ``overhead_pct`` vs ``none`` and its spread."""
    by = {(r["strategy"], r["repeat"]): r for r in rows}
    repeats = sorted({r["repeat"] for r in rows})
    out = []
    if any(r["strategy"] == CONTROL for r in rows) and CONTROL not in strategies:
        strategies = [*strategies, CONTROL]
    for s in strategies:
        steps = [by[(s, r)]["step_s"] for r in repeats if (s, r) in by]
        pct = [100.0 * (by[(s, r)]["step_s"] / by[("none", r)]["step_s"] - 1.0)
               for r in repeats if (s, r) in by and ("none", r) in by]
        cpct = [100.0 * (by[(s, r)]["cpu_step_s"] / by[("none", r)]["cpu_step_s"] - 1.0)
                for r in repeats if (s, r) in by and ("none", r) in by
                and by[(s, r)].get("cpu_step_s") and by[("none", r)].get("cpu_step_s")]
        rts = [by[(s, r)]["rt_us"] for r in repeats
               if (s, r) in by and by[(s, r)]["rt_us"] is not None]
        out.append({
            "strategy": s, "repeats": len(steps),
            "step_s": statistics.median(steps), "step_s_min": min(steps),
            "step_s_max": max(steps),
            "overhead_pct": statistics.median(pct), "overhead_pct_q25": _q(pct, 0.25),
            "overhead_pct_q75": _q(pct, 0.75), "overhead_pct_min": min(pct),
            "overhead_pct_max": max(pct),
            "within_noise": min(pct) <= 0.0 <= max(pct),  # refined below with the control
            "cpu_overhead_pct": statistics.median(cpct) if cpct else None,
            "cpu_overhead_pct_min": min(cpct) if cpct else None,
            "cpu_overhead_pct_max": max(cpct) if cpct else None,
            "rt_us": statistics.median(rts) if rts else None,
        })
    ctrl = next((r for r in out if r["strategy"] == CONTROL), None)
    if ctrl is not None:
        # which of two identical segments runs first is arbitrary: the noise is symmetric
        half = max(abs(ctrl["overhead_pct_min"]), abs(ctrl["overhead_pct_max"]))
        lo, hi = -half, half
        for r in out:
            r["noise_lo_pct"], r["noise_hi_pct"] = lo, hi
            r["within_noise"] = lo <= r["overhead_pct"] <= hi
    return out


@dataclass
class OverheadResult:
    """What :func:`run_overhead` measured."""

    summary: list[dict]
    """One row per strategy (:func:`summarize`)."""
    segments: list[dict]
    """One row per segment (:func:`segment_times`)."""
    run_dir: Path
    meta: dict
    """Spec, machine fingerprint, code version, wall time."""


def run_overhead(base: RunSpec, cfg: OverheadConfig, out_dir: Path, overwrite: bool = False,
                 progress=None, timeout_s: float | None = None) -> OverheadResult:
    """Run one fault-free launch of interleaved segments (or, in launch mode, one
    launch per strategy and repeat) and write the results.

    Writes ``out_dir/overhead.csv`` (one row per strategy), ``overhead_segments.csv``
    (one row per segment or launch), ``overhead.json`` (both plus provenance) and the
    runs' own directories (``out_dir/run/``; launch mode: ``out_dir/runs/NN-STRATEGY-rR``).

    Raises:
        SpecError: invalid plan or spec, or a non-empty ``out_dir`` without ``overwrite``.
        RuntimeError: the launch did not complete.
    """
    import json

    import pandas as pd

    from jitbench.harness.run import code_version, execute, machine_fingerprint, prepare_dir

    cfg.validate()
    prepare_dir(out_dir, overwrite, flag="--out")
    if cfg.mode == "segments":
        spec = overhead_spec(base, cfg)
        run_dir = out_dir / "run"
        res = execute(spec, run_dir, progress, timeout_s)
        if res.returncode != 0 or res.interrupted:
            raise RuntimeError(f"the overhead run did not complete (agent exit "
                               f"{res.returncode}); see {run_dir / 'agent.log'}")
        segs = segment_times(run_dir, spec)
        wall_s = res.wall_s
    else:
        segs, wall_s, run_dir = [], 0.0, out_dir / "runs"
        for i, (strategy, rep) in enumerate(cfg.order()):
            spec = launch_spec(base, cfg, strategy)
            d = run_dir / f"{i:02d}-{strategy.replace(':', '_')}-r{rep}"
            res = execute(spec, d, progress, timeout_s)
            wall_s += res.wall_s
            if res.returncode != 0 or res.interrupted:
                raise RuntimeError(f"the overhead launch of {strategy} (repeat {rep}) did not "
                                   f"complete (agent exit {res.returncode}); see {d}")
            segs.append(launch_times(d, cfg, strategy, rep))
        spec = launch_spec(base, cfg, "none")
    summ = summarize(segs, cfg.strategies)
    meta = {"overhead_version": OVERHEAD_VERSION, "workload": spec.workload.name,
            "size": spec.workload.size, "world_size": spec.world_size,
            "segment_steps": cfg.segment_steps, "repeats": cfg.repeats, "mode": cfg.mode,
            "strategies": cfg.strategies, "wall_s": wall_s, "code_version": code_version(),
            "machine": machine_fingerprint(), "spec": json.loads(spec.to_json())}
    for r in summ:
        r.update({k: meta[k] for k in ("workload", "size", "world_size", "segment_steps",
                                       "mode")})
    pd.DataFrame(summ).to_csv(out_dir / "overhead.csv", index=False)
    pd.DataFrame(segs).to_csv(out_dir / "overhead_segments.csv", index=False)
    (out_dir / "overhead.json").write_text(json.dumps({**meta, "summary": summ,
                                                       "segments": segs}, indent=2))
    return OverheadResult(summ, segs, run_dir, meta)
