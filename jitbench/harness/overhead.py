"""Steady-state overhead: step time per strategy from balanced segments of one run.

``overhead_pct`` (docs/design.md, "Metrics") is the step time under a strategy over
the step time with no checkpointing, minus one. It is small (JIT: tens of
microseconds per step; periodic: one save every N steps), while step times on
a shared machine drift by several per cent over minutes. So jitbench measures
every strategy *inside one launch*: the worker trains one job and switches the
runtime's strategy at segment boundaries (:meth:`Runtime.set_strategy`)::

    warm-up (none) | C A D B | A B C D | D C B A | ...   (one row of the design per repeat)

Why one launch rather than interleaved launches: separate launches differ in
things that have nothing to do with the strategy (process start-up, allocator
and page-cache state, which cores the ranks land on, the first iterations of
DDP), and each launch costs seconds of start-up. Inside one launch the same
processes with the same memory run adjacent segments seconds apart.

**Order** (:meth:`OverheadConfig.order`, the single source of order in both
modes): a Williams design over the labels (the strategies and the A/A control
``none-aa``; Williams 1949, "Experimental designs balanced for the estimation
of residual effects of treatments"): a Latin square whose rows, one per
repeat, put every label in every position once, and where every label
follows every other label within a row equally often (once for an even number
of labels; for an odd number the square and its mirror, ``2n`` rows). Labels
and rows are shuffled with a recorded ``seed``. With ``repeats`` a multiple of
the design size (:meth:`OverheadConfig.design_size`; the default repeats are) the order is
balanced: a slow first position, a drift, or background work spilling into the
next segment (an async save) hits every label alike. The old ABBA order was
not: the control always followed ``periodic-async`` in even repeats, ``none``
never did, and the A/A control read +7% on an idle machine.

**Segment length**: by default short. In one launch with no periodic interval a
segment is :data:`SHORT_SEGMENT_STEPS` (2) measured steps after 1 warm-up step, so a
repeat (one row of the design) spans seconds and a change of the machine's speed
that lasts longer hits every label of the repeat alike; the number of repeats
grows instead (whole designs until every label has :data:`MIN_MEASURED_STEPS`
measured steps). With a periodic strategy a segment is the intervals' LCM (one
checkpoint per window) after at least 3 warm-up steps (the whole segment
stretched to a multiple of the LCM); per launch it is :data:`LAUNCH_SEGMENT_STEPS`
rounded up to a multiple of the LCM.

**Warm-up per segment**: the first ``segment_warmup`` steps of every segment
(and of every launch) are run but not measured, so the switch and what the
previous segment left behind fall outside the measurement. The measured
window is ``segment_steps`` long, a multiple of every periodic interval: it
then holds the same number of checkpoints in every segment; segments are
stretched to a multiple of the intervals' LCM and the first warm-up so that
checkpoints fall mid-window (an async save's last write overlaps the window's
own steps).

Measurement, from rank 0's events only (ranks move in lockstep: every step
ends in a collective):

- per step: begin-to-begin time (s), CPU time (s), the runtime's ``rt_s``
  (µs), kept in ``overhead_steps.csv``; a segment's ``step_s`` is the mean
  over its measured window (a periodic checkpoint costs one step in N, which a
  median would hide);
- per strategy: ``overhead_pct = 100 x (sum_r step_s[r, s] / sum_r step_s[r,
  none] - 1)`` over the repeats. In a balanced order every label occupies
  each position equally often, so a linear drift over the run cancels exactly
  in the two sums. ``overhead_pct_median`` is the median of the per-repeat
  ratios, ``overhead_pct_min/max/q25/q75`` their spread;
- a 95% bootstrap interval (``overhead_pct_lo``/``_hi``): ``resamples`` (2,000)
  resamplings of whole repeats with replacement, seeded, the percentile
  interval of ``overhead_pct`` over them (Efron and Tibshirani 1993, ch. 13);
- the A/A control: ``none-aa`` is ``none`` under another label, so its
  ``overhead_pct`` is measurement error and its interval must contain 0. When
  it does (``control_ok``), a strategy is ``within_noise`` when its own
  interval contains 0; when it does not, the design is biased and no strategy
  gets a verdict (``within_noise`` is None);
- the minimum for a verdict (:meth:`OverheadConfig.min_verdict_repeats`): one whole
  design (every label in every position once: fewer repeats leave a label's
  position and predecessor unbalanced, so a drift no longer cancels) and at least
  :data:`MIN_VERDICT_FLOOR` repeats (the bootstrap resamples whole repeats: ``n``
  of them give at most ``C(2n-1, n)`` distinct resamples, 1 for one repeat and 3
  for two, so the interval collapses onto the few per-repeat ratios). Below it the
  figures are kept but no strategy nor the control gets a verdict
  (``within_noise`` and ``control_ok`` None, ``no_verdict`` says why);
- ``cpu_overhead_pct``: the same ratio of rank 0's process CPU time per step
  (``cpu_s`` of step-begin events, :func:`time.process_time`, every thread):
  on a shared machine the precise figure for CPU work such as the JIT snapshot
  or an async writer thread (with its own bootstrap interval,
  ``cpu_overhead_pct_lo``/``_hi``); it leaves out time spent waiting;
- ``rt_us``: the median of the runtime's own time at a step end (lock and
  snapshot, the ``rt_s`` field of step-end events), in microseconds.

Strategies with their own launcher (``jit-inprocess`` with its spares and
membership store, the peers) cannot be a segment of a ``none`` launch: what
they cost is partly outside the training processes. When any is asked for, the
measurement runs in **launch mode**: one fault-free launch per strategy and
repeat, in the same order with the same A/A control (a second ``none``
launch), each measured over ``segment_steps`` steps after ``warmup_steps``
excluded ones, by the same formulas.

**A launched script** (``jitbench overhead -- SCRIPT ARGS``, ``cfg.script``) runs in
launch mode with the arms of :data:`SCRIPT_ARMS`: ``none`` is the script as
``torchrun`` runs it (under the same elastic agent, with nothing of jitbench's
but the step clock of :mod:`jitbench.harness.steptimer`), ``own`` and ``jit``
are ``jitbench launch --strategy own|jit`` without faults, and the A/A control
is a second ``none`` launch. Every arm is timed by the same step clock, so the
hooks' cost is what differs. The script decides its steps: it must run
:func:`script_steps_needed` of them.

A ``jit:backstop=N`` segment counts like a periodic one: its N joins the
intervals the segments are aligned to.
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

from jitbench.harness.script import ScriptSpec
from jitbench.harness.segments import CONTROL
from jitbench.harness.spec import RunSpec, SpecError, Strategy
from jitbench.runtime.events import read_events

OVERHEAD_VERSION = 2
DEFAULT_STRATEGIES = ("none", "jit", "periodic:10", "periodic-async:10")
SHORT_SEGMENT_STEPS = 2
"""Measured steps per segment in one launch when no interval constrains them: each
repeat then spans seconds, so a change of the machine's speed that lasts longer
(on the development VM segment means of 20 steps varied by 7-8%) falls on all of a
repeat's labels; at equal measured steps, 2-step segments gave an A/A interval half
as wide as 20-step ones, side by side under the same load
(``benchmarks/overhead-aa-cpu.txt``, run 4)."""
MIN_VERDICT_FLOOR = 4
"""Fewest repeats of any verdict, whatever the design (module docstring): with ``n``
repeats the bootstrap has at most ``C(2n-1, n)`` distinct resamples (1, 3, 10, 35 for
``n`` = 1..4), so below 4 its 2.5% and 97.5% percentiles are the extremes of a handful
of values. Every design with a strategy beside ``none`` and the control has at least
4 rows anyway (3 labels: 6 rows; 4 labels: 4)."""
MIN_MEASURED_STEPS = 100
"""Measured steps per label that the default number of repeats reaches in one launch."""
LAUNCH_SEGMENT_STEPS = 20
"""Measured steps per launch in launch mode (and for a launched script) by default."""
SCRIPT_ARMS = ("none", "own", "jit")
"""The arms of an overhead run on a launched script: ``none`` is the script with only
the step clock (:mod:`jitbench.harness.steptimer`), as ``torchrun`` runs it; ``own``
adds jitbench's hooks (``jitbench launch --strategy own``); ``jit`` adds transparent
JIT (``--strategy jit``)."""


def williams_design(n: int) -> list[list[int]]:
    """Rows of a Williams design over symbols ``0 .. n-1``: every symbol once per
    row and once per column; every ordered pair of distinct symbols adjacent
    (``a`` right before ``b``) in the same number of rows. ``n`` rows for even
    ``n``, ``2n`` (the square and its mirror) for odd ``n``.

    Raises:
        ValueError: ``n < 1``.
    """
    if n < 1:
        raise ValueError("a design needs at least one symbol")
    first, lo, hi = [0], 1, n - 1
    while len(first) < n:
        first.append(lo)
        lo += 1
        if len(first) < n:
            first.append(hi)
            hi -= 1
    rows = [[(x + i) % n for x in first] for i in range(n)]
    return rows if n % 2 == 0 or n == 1 else rows + [r[::-1] for r in rows]


@dataclass
class OverheadConfig:
    """The segment plan of a steady-state overhead run."""

    strategies: list[str] = field(default_factory=lambda: list(DEFAULT_STRATEGIES))
    """Strategies to compare; ``none`` is added first when missing (it is the baseline)."""
    segment_steps: int | None = None
    """Measured steps per segment (a multiple of every periodic interval); None: chosen
    by :meth:`validate` (:data:`SHORT_SEGMENT_STEPS` or the intervals' LCM in one
    launch, :data:`LAUNCH_SEGMENT_STEPS` per launch)."""
    repeats: int | None = None
    """Segments per strategy, one row of the design each; None: whole designs
    (:meth:`design_size`) until every label has :data:`MIN_MEASURED_STEPS` measured
    steps in one launch, one whole design in launch mode."""
    warmup_steps: int = 10
    """Fault-free steps under ``none`` before the first segment, excluded (at least this many)."""
    segment_warmup: int | None = None
    """Steps at the start of every segment that are run but not measured (at least this
    many: stretched so segments stay aligned with the periodic intervals); None: 1 for
    segments no interval constrains, else 3."""
    control: bool = True
    """Add an A/A control (a second ``none`` segment per repeat) that measures the noise."""
    seed: int = 0
    """Seed of the order's shuffle and of the bootstrap (recorded in ``overhead.json``)."""
    resamples: int = 2000
    """Bootstrap resamples of the repeats for each interval."""
    script: bool = False
    """The measured job is a launched script (:class:`~jitbench.harness.script.ScriptSpec`):
    the labels are :data:`SCRIPT_ARMS` and the mode is ``launches``."""
    mode: str = "segments"
    """``segments`` (one launch) or ``launches`` (one launch per strategy and repeat);
    set by :meth:`validate`: launches when a strategy has its own launcher."""

    def validate(self) -> list[Strategy]:
        """Parse the strategies.

        Raises:
            SpecError: no strategy named, unknown or ``auto`` strategy,
                duplicates, a segment length that is not a multiple of an interval, or
                non-positive sizes.
        """
        if ((self.segment_steps is not None and self.segment_steps < 2)
                or (self.repeats is not None and self.repeats < 1)
                or self.warmup_steps < 0
                or (self.segment_warmup is not None and self.segment_warmup < 0)
                or self.resamples < 100):
            raise SpecError("overhead needs --segment-steps >= 2, --repeats >= 1, "
                            "--warmup-steps >= 0, --segment-warmup >= 0, resamples >= 100")
        raw = [s.strip().lower() for s in self.strategies if s.strip()]
        if not raw:
            raise SpecError("--strategies is empty: name at least one (none alone measures "
                            "only the A/A control)")
        if len(set(raw)) != len(raw):
            raise SpecError(f"duplicate strategy in {','.join(self.strategies)}")
        names = raw if "none" in raw else ["none", *raw]
        if self.script:
            bad = [n for n in names if n not in SCRIPT_ARMS]
            if bad:
                raise SpecError(f"overhead on a launched script compares none (the script as "
                                f"torchrun runs it), own (jitbench's hooks) and jit "
                                f"(transparent JIT), got {bad[0]!r}")
            self.strategies, self.mode = ["none", *(n for n in names if n != "none")], "launches"
            self._choose_segments(1, False)
            return []
        parsed = []
        for n in names:
            st = Strategy.parse(n)
            if st.auto:
                raise SpecError("overhead takes fixed intervals (periodic:N), not periodic:auto")
            parsed.append(st)
        self.mode = ("launches" if any(st.entry.launcher != "agent" for st in parsed)
                     else "segments")
        self._choose_segments(math.lcm(1, *(st.every for st in parsed if st.every)),
                              any(st.every for st in parsed))
        out = []
        for n, st in zip(names, parsed, strict=True):
            if st.every and self.segment_steps % st.every:  # jit:backstop=N: its N
                raise SpecError(f"--segment-steps {self.segment_steps} is not a multiple of "
                                f"the interval of {n}: segments would hold different numbers "
                                "of checkpoints")
            out.append(st)
        self.strategies = [str(s) for s in out]
        return out

    def _choose_segments(self, lcm: int, periodic: bool) -> None:
        """Fill in the segment length and warm-up left None, for ``mode``, the
        intervals' LCM (``lcm``) and whether any strategy has an interval
        (``periodic``): short segments in one launch (slow drifts of the machine's
        speed then fall on every label of a repeat alike), whole intervals (their
        LCM, at least 2 steps) when a periodic strategy needs them, and
        :data:`LAUNCH_SEGMENT_STEPS` rounded up to a multiple of the LCM per launch
        (a launch's start-up is not measured, but it costs seconds)."""
        if self.segment_steps is None:
            if self.mode == "launches":
                self.segment_steps = -(-LAUNCH_SEGMENT_STEPS // lcm) * lcm
            else:
                self.segment_steps = -(-SHORT_SEGMENT_STEPS // lcm) * lcm
        if self.segment_warmup is None:
            self.segment_warmup = 3 if periodic or self.mode == "launches" else 1

    def labels(self) -> list[str]:
        """The strategies and, with ``control``, the A/A control's label."""
        self.validate()
        return self.strategies + ([CONTROL] if self.control else [])

    def design_size(self) -> int:
        """Rows of the Williams design over :meth:`labels` (:func:`williams_design`):
        repeats that are a multiple of it are balanced in position and predecessor."""
        return len(williams_design(len(self.labels())))

    def n_repeats(self) -> int:
        """``repeats``; when it is None, in one launch the fewest whole designs that
        give every label :data:`MIN_MEASURED_STEPS` measured steps, per launch one
        whole design."""
        if self.repeats is not None:
            return self.repeats
        size = self.design_size()
        if self.mode == "launches":
            return size
        rows = -(-MIN_MEASURED_STEPS // self.segment_steps)
        return -(-rows // size) * size

    def min_verdict_repeats(self) -> int:
        """Fewest repeats that give a verdict (``within_noise``, ``control_ok``): one whole
        design (:meth:`design_size`: every label in every position) and at least
        :data:`MIN_VERDICT_FLOOR`. The default :meth:`n_repeats` always reaches it."""
        return max(self.design_size(), MIN_VERDICT_FLOOR)

    def balanced(self) -> bool:
        """Whether every label takes every position and follows every other label
        (within a repeat) equally often."""
        return self.n_repeats() % self.design_size() == 0

    def order(self) -> list[tuple[str, int]]:
        """``[(strategy or CONTROL, repeat), ...]`` in measurement order, in both modes:
        repeat ``r`` is row ``r`` of the Williams design over the labels, labels and
        rows shuffled with ``seed``; every design size a fresh shuffle of its rows."""
        labels = self.labels()
        rng = random.Random(self.seed)
        names = labels[:]
        rng.shuffle(names)
        rows = williams_design(len(labels))
        out: list[tuple[str, int]] = []
        block: list[list[int]] = []
        for r in range(self.n_repeats()):
            if not block:
                block = rows[:]
                rng.shuffle(block)
            out += [(names[k], r) for k in block.pop()]
        return out

    def _lcm(self) -> int:
        return math.lcm(1, *(s.every for s in self.validate() if s.every))

    def segment_length(self) -> int:
        """Steps per segment: ``segment_warmup`` + ``segment_steps``, the warm-up
        stretched to a multiple of the intervals' LCM."""
        m = self._lcm()
        length = self.segment_warmup + self.segment_steps
        return -(-length // m) * m

    def plan(self) -> tuple[list[list], int]:
        """``([[first_step, strategy, repeat], ...], total_steps)``; repeat -1 is the warm-up."""
        m = self._lcm()
        seg_warm = self.segment_length() - self.segment_steps
        warm = max(1, self.warmup_steps)
        if m > 1:  # checkpoints mid-window: a measured window starts at k*m + m//2 + 1
            while (warm + seg_warm) % m != m // 2:
                warm += 1
        segs: list[list] = [[1, "none", -1]]
        step = warm + 1
        for s, r in self.order():
            segs.append([step, s, r])
            step += self.segment_length()
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

    def __init__(self, run_dir: Path, timer: bool = False) -> None:
        """``timer``: step begins and CPU times from the step clock of a launched
        script (:func:`~jitbench.harness.steptimer.read_step_times`), ``rt_s`` from
        step events where the arm has them."""
        events_dir = Path(run_dir) / "events"
        evs = read_events(events_dir) if events_dir.is_dir() or not timer else []
        if any(e["attempt"] > 0 or (e.get("gen") or 0) > 0 for e in evs):
            raise ValueError(f"{run_dir}: the overhead run restarted; its step times are "
                             "not steady")
        self.run_dir = run_dir
        mine = [e for e in evs if e["event"] == "step" and e["rank"] == 0]
        if timer:
            from jitbench.harness.steptimer import read_step_times

            self.begin, self.cpu = read_step_times(run_dir)
        else:
            self.begin = {e["step"]: e["t_mono"] for e in mine if e["phase"] == "begin"}
            self.cpu = {e["step"]: e.get("cpu_s") for e in mine if e["phase"] == "begin"}
        self.rt = {e["step"]: e.get("rt_s") for e in mine if e["phase"] == "end"}

    def steps(self, strategy: str, rep: int, seg: int, first: int, skip: int,
              nxt: int) -> list[dict]:
        """Per step ``first .. nxt - 1``: begin-to-begin time (s), CPU time (s), ``rt_s``
        (µs) and whether it is measured (the first ``skip`` are the segment's warm-up)."""
        out = []
        for s in range(first, nxt):
            b, b2 = self.begin.get(s), self.begin.get(s + 1)
            c, c2 = self.cpu.get(s), self.cpu.get(s + 1)
            rt = self.rt.get(s)
            out.append({"segment": seg, "strategy": strategy, "repeat": rep, "step": s,
                        "measured": s >= first + skip,
                        "step_s": None if b is None or b2 is None else b2 - b,
                        "cpu_s": None if c is None or c2 is None else c2 - c,
                        "rt_us": None if rt is None else rt * 1e6})
        return out

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


def segment_times(run_dir: Path, spec: RunSpec, skip: int = 0,
                  per_step: list | None = None) -> list[dict]:
    """Per segment: strategy, repeat, measured steps (after the first ``skip``), mean
    step time (s) and median ``rt_s`` (µs); every step's times appended to ``per_step``.

    Raises:
        ValueError: the run restarted or lacks a segment's events.
    """
    steps = _Rank0Steps(run_dir)
    segs = spec.segments
    out = []
    for i, (first, strategy, rep) in enumerate(segs):
        if rep < 0:
            continue
        nxt = segs[i + 1][0] if i + 1 < len(segs) else spec.steps
        out.append(steps.row(strategy, rep, first + skip, nxt))
        if per_step is not None:
            per_step += steps.steps(strategy, rep, i - 1, first, skip, nxt)
    return out


def launch_spec(base: RunSpec, cfg: OverheadConfig, strategy: str) -> RunSpec:
    """The fault-free spec of one launch-mode measurement: ``strategy`` (``none`` for the
    control) for ``warmup_steps`` + ``segment_steps`` + 1 steps."""
    cfg.validate()  # fills in the default segment length
    d = RunSpec.from_dict(__import__("dataclasses").asdict(base))
    d.faults, d.segments = [], []
    d.step_cpu_time = True  # cpu_overhead_pct, as segment runs record it
    d.strategy = "none" if strategy == CONTROL else strategy
    d.workload.steps = max(1, cfg.warmup_steps) + cfg.segment_steps + 1
    d.save_final_state = False
    d.validate()
    return d


def script_launch_spec(base: ScriptSpec, strategy: str) -> ScriptSpec:
    """The fault-free launch of one arm of an overhead run on a script (:data:`SCRIPT_ARMS`;
    ``none`` for the control too): the step clock on, no restarts, no final state."""
    d = {**asdict(base), "faults": [], "max_restarts": 0, "save_final_state": False,
         "step_timer": True}
    arm = "none" if strategy == CONTROL else strategy
    d["hooks"] = arm != "none"
    d["strategy"] = "jit" if arm == "jit" else "own"
    spec = ScriptSpec.from_dict(d)
    spec.validate()
    return spec


def script_steps_needed(cfg: OverheadConfig) -> int:
    """Optimizer steps a script must run for one launch-mode measurement: the warm-up
    and the measured window (the step clock times a step from its predecessor's end)."""
    cfg.validate()  # fills in the default segment length
    return max(1, cfg.warmup_steps) + cfg.segment_steps


def launch_times(run_dir: Path, cfg: OverheadConfig, strategy: str, rep: int,
                 per_step: list | None = None, seg: int = 0) -> dict:
    """The measured steps of one launch-mode launch (:class:`_Rank0Steps.row`).

    Raises:
        ValueError: the launch restarted or lacks the measured steps' events (for a
            script: it ran fewer than :func:`script_steps_needed` steps).
    """
    first = max(1, cfg.warmup_steps) + 1
    steps = _Rank0Steps(run_dir, timer=cfg.script)
    if cfg.script and first + cfg.segment_steps not in steps.begin:
        raise ValueError(f"{run_dir}: the script ran {len(steps.begin)} optimizer steps; "
                         f"the measurement needs {script_steps_needed(cfg)} "
                         "(--warmup-steps + --segment-steps): give the script more steps "
                         "in its arguments")
    if per_step is not None:
        per_step += steps.steps(strategy, rep, seg, 1, first - 1, first + cfg.segment_steps)
    return steps.row(strategy, rep, first, first + cfg.segment_steps)


def _q(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    if len(xs) == 1:
        return xs[0]
    pos = q * (len(xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def ratio_pct(num: list[float], den: list[float]) -> float:
    """``100 x (sum(num) / sum(den) - 1)``: the overhead over paired repeats (%)."""
    return 100.0 * (sum(num) / sum(den) - 1.0)


def bootstrap_pct(num: list[float], den: list[float], resamples: int = 2000, seed: int = 0,
                  level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval (%) of :func:`ratio_pct` over paired repeats:
    ``resamples`` draws of the repeats with replacement (``random.Random(seed)``).

    Raises:
        ValueError: no pairs, or ``num`` and ``den`` of different lengths.
    """
    if not num or len(num) != len(den):
        raise ValueError("bootstrap needs equally many paired values, at least one")
    rng = random.Random(seed)
    n = len(num)
    stats = []
    for _ in range(resamples):
        idx = [rng.randrange(n) for _ in range(n)]
        stats.append(ratio_pct([num[i] for i in idx], [den[i] for i in idx]))
    a = (1.0 - level) / 2.0
    return _q(stats, a), _q(stats, 1.0 - a)


def summarize(rows: list[dict], strategies: list[str], resamples: int = 2000,
              seed: int = 0, min_repeats: int = 0) -> list[dict]:
    """One row per strategy: median step time, ``overhead_pct`` vs ``none`` with its
    bootstrap interval and spread, the control's verdict (module docstring).

    With fewer than ``min_repeats`` repeats (:meth:`OverheadConfig.min_verdict_repeats`)
    every row keeps its figures but gets no verdict: ``within_noise`` and ``control_ok``
    None, ``no_verdict`` "too few repeats (need N)"; a biased control's rows say "A/A
    control biased"; otherwise ``no_verdict`` is None. ``min_repeats`` is recorded in
    every row."""
    by = {(r["strategy"], r["repeat"]): r for r in rows}
    repeats = sorted({r["repeat"] for r in rows})
    out = []
    if any(r["strategy"] == CONTROL for r in rows) and CONTROL not in strategies:
        strategies = [*strategies, CONTROL]
    for s in strategies:
        steps = [by[(s, r)]["step_s"] for r in repeats if (s, r) in by]
        paired = [r for r in repeats if (s, r) in by and ("none", r) in by]
        num = [by[(s, r)]["step_s"] for r in paired]
        den = [by[("none", r)]["step_s"] for r in paired]
        pct = [100.0 * (a / b - 1.0) for a, b in zip(num, den, strict=True)]
        cp = [r for r in paired if by[(s, r)].get("cpu_step_s")
              and by[("none", r)].get("cpu_step_s")]
        cnum = [by[(s, r)]["cpu_step_s"] for r in cp]
        cden = [by[("none", r)]["cpu_step_s"] for r in cp]
        cpct = [100.0 * (a / b - 1.0) for a, b in zip(cnum, cden, strict=True)]
        rts = [by[(s, r)]["rt_us"] for r in repeats
               if (s, r) in by and by[(s, r)]["rt_us"] is not None]
        lo, hi = bootstrap_pct(num, den, resamples, seed)
        clo, chi = bootstrap_pct(cnum, cden, resamples, seed) if cp else (None, None)
        out.append({
            "strategy": s, "repeats": len(steps),
            "step_s": statistics.median(steps), "step_s_min": min(steps),
            "step_s_max": max(steps),
            "overhead_pct": ratio_pct(num, den), "overhead_pct_lo": lo, "overhead_pct_hi": hi,
            "overhead_pct_median": statistics.median(pct),
            "overhead_pct_q25": _q(pct, 0.25), "overhead_pct_q75": _q(pct, 0.75),
            "overhead_pct_min": min(pct), "overhead_pct_max": max(pct),
            "within_noise": lo <= 0.0 <= hi,  # refined below with the control
            "cpu_overhead_pct": ratio_pct(cnum, cden) if cp else None,
            "cpu_overhead_pct_lo": clo, "cpu_overhead_pct_hi": chi,
            "cpu_overhead_pct_min": min(cpct) if cpct else None,
            "cpu_overhead_pct_max": max(cpct) if cpct else None,
            "rt_us": statistics.median(rts) if rts else None,
        })
    ctrl = next((r for r in out if r["strategy"] == CONTROL), None)
    few = len(repeats) < min_repeats
    for r in out:
        r["min_repeats"], r["no_verdict"] = min_repeats, None
        if ctrl is not None:
            ok = ctrl["overhead_pct_lo"] <= 0.0 <= ctrl["overhead_pct_hi"]
            r["control_ok"] = None if few else ok
            r["noise_lo_pct"], r["noise_hi_pct"] = ctrl["overhead_pct_lo"], ctrl["overhead_pct_hi"]
            if not ok:  # the design is biased: no verdict against it
                r["within_noise"], r["no_verdict"] = None, "A/A control biased"
        if few:  # the interval collapses onto a few ratios: figures only
            r["within_noise"] = None
            r["no_verdict"] = f"too few repeats (need {min_repeats})"
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


def run_overhead(base: RunSpec | ScriptSpec, cfg: OverheadConfig, out_dir: Path,
                 overwrite: bool = False, progress=None,
                 timeout_s: float | None = None) -> OverheadResult:
    """Run one fault-free launch of interleaved segments (or, in launch mode, one
    launch per strategy and repeat) and write the results. ``base`` is a
    :class:`ScriptSpec` exactly when ``cfg.script`` is set.

    Writes ``out_dir/overhead.csv`` (one row per strategy), ``overhead_segments.csv``
    (one row per segment or launch, measured window), ``overhead_steps.csv`` (one row
    per step, warm-up steps flagged ``measured`` False), ``overhead.json`` (both plus provenance) and the
    runs' own directories (``out_dir/run/``; launch mode: ``out_dir/runs/NN-STRATEGY-rR``).

    Raises:
        SpecError: invalid plan or spec, or a non-empty ``out_dir`` without ``overwrite``.
        RuntimeError: the launch did not complete.
        OverheadInterrupted: (a ``KeyboardInterrupt``; the CLI exits 130) Ctrl-C or
            SIGTERM stopped a launch, or arrived once one had ended by itself before the
            last: ``overhead.json`` says ``complete`` false (``launches_done`` of
            ``launches``), the finished launches' rows are in ``overhead_segments.csv``
            and ``overhead_steps.csv`` (launch mode), and there is no ``overhead.csv``.
            One that arrived once the last launch had ended by itself stopped nothing:
            the measurement is written whole (``late_interrupt`` true in
            ``overhead.json``) and the exception says ``complete``.
    """
    import json

    import pandas as pd

    from jitbench.harness.run import code_version, execute, machine_fingerprint, prepare_dir

    cfg.validate()
    prepare_dir(out_dir, overwrite, flag="--out", what="overhead directory",
                marker="overhead.json")
    # the marker first: an interrupted run's directory is replaced by --overwrite too
    (out_dir / "overhead.json").write_text(json.dumps({"complete": False}))
    per_step: list[dict] = []
    segs: list[dict] = []
    late = False  # a Ctrl-C or SIGTERM once the last launch had ended by itself
    total = 1 if cfg.mode == "segments" else len(cfg.order())
    try:
        if cfg.mode == "segments":
            spec = overhead_spec(base, cfg)
            run_dir = out_dir / "run"
            res = execute(spec, run_dir, progress, timeout_s)
            if res.interrupted:  # Ctrl-C / SIGTERM stopped it: nothing measured
                raise KeyboardInterrupt
            if res.returncode != 0:
                raise RuntimeError(f"the overhead run did not complete (agent exit "
                                   f"{res.returncode}); see {run_dir / 'agent.log'}")
            try:
                segs = segment_times(run_dir, spec, cfg.segment_length() - cfg.segment_steps,
                                     per_step)
            except ValueError as exc:  # as in launch mode: exit 3 with the line
                raise RuntimeError(str(exc)) from None
            wall_s, late = res.wall_s, res.late_interrupt
        else:
            wall_s, run_dir, spec, late = _launches(base, cfg, out_dir, progress, timeout_s,
                                                    segs, per_step)
    except OverheadInterrupted:
        raise
    except KeyboardInterrupt:
        raise _interrupted(out_dir, segs, per_step, total) from None
    summ = summarize(segs, cfg.strategies, cfg.resamples, cfg.seed, cfg.min_verdict_repeats())
    meta = {"overhead_version": OVERHEAD_VERSION,
            "workload": spec.name if cfg.script else spec.workload.name,
            "size": None if cfg.script else spec.workload.size, "world_size": spec.world_size,
            "segment_steps": cfg.segment_steps, "segment_warmup": cfg.segment_warmup,
            "segment_length": cfg.segment_length(), "repeats": cfg.n_repeats(),
            "mode": cfg.mode, "script": cfg.script, "seed": cfg.seed, "resamples": cfg.resamples,
            "balanced": cfg.balanced(), "design_size": cfg.design_size(),
            "min_verdict_repeats": cfg.min_verdict_repeats(),
            "order": [list(x) for x in cfg.order()],
            "strategies": cfg.strategies, "wall_s": wall_s, "code_version": code_version(),
            "machine": machine_fingerprint(), "spec": json.loads(spec.to_json()),
            "late_interrupt": bool(late)}
    for r in summ:
        r.update({k: meta[k] for k in ("workload", "size", "world_size", "segment_steps",
                                       "mode", "balanced")})
    from jitbench.harness.launch import held_signals

    with held_signals(reraise=False) as got:  # the files are written whole
        pd.DataFrame(summ).to_csv(out_dir / "overhead.csv", index=False)
        pd.DataFrame(segs).to_csv(out_dir / "overhead_segments.csv", index=False)
        pd.DataFrame(per_step).to_csv(out_dir / "overhead_steps.csv", index=False)
        (out_dir / "overhead.json").write_text(json.dumps(
            {**meta, "complete": True, "summary": summ, "segments": segs}, indent=2))
    if late or got:  # the measurement is complete and written; the command exits 130
        raise OverheadInterrupted(total, total, complete=True)
    return OverheadResult(summ, segs, run_dir, meta)


class OverheadInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM ended an overhead measurement after ``done`` of its ``total``
    launches. ``complete``: it came once the last launch had ended by itself, and the
    whole measurement is written (``overhead.csv``); otherwise ``overhead.json`` says
    ``complete`` false and there is no ``overhead.csv`` (the finished launches' times
    are in ``overhead_segments.csv`` and ``overhead_steps.csv``)."""

    def __init__(self, done: int, total: int, complete: bool = False):
        super().__init__(f"overhead interrupted after {done} of {total} launches")
        self.done, self.total, self.complete = done, total, complete


def _interrupted(out_dir: Path, segs: list[dict], per_step: list[dict],
                 total: int) -> OverheadInterrupted:
    """Write what an interrupted measurement measured: the finished launches' rows
    (``overhead_segments.csv``, ``overhead_steps.csv``; none: no file) and
    ``overhead.json`` ``complete`` false with ``launches_done`` of ``launches``; the
    exception to raise. Further signals are held while the files are written."""
    import json

    import pandas as pd

    from jitbench.harness.launch import held_signals

    done = len(segs) if total > 1 else 0  # launch mode: one row per finished launch
    with held_signals(reraise=False):
        if segs and total > 1:
            pd.DataFrame(segs).to_csv(out_dir / "overhead_segments.csv", index=False)
            pd.DataFrame(per_step).to_csv(out_dir / "overhead_steps.csv", index=False)
        (out_dir / "overhead.json").write_text(json.dumps(
            {"complete": False, "interrupted": True, "launches_done": done,
             "launches": total}, indent=2))
    return OverheadInterrupted(done, total)


def _launches(base: RunSpec | ScriptSpec, cfg: OverheadConfig, out_dir: Path, progress,
              timeout_s: float | None, segs: list[dict], per_step: list[dict]):
    """Launch mode of :func:`run_overhead`: one launch per strategy and repeat, each
    one's row appended to ``segs`` (and its steps to ``per_step``) as it finishes.
    Returns ``(wall_s, runs_dir, spec of none, late)``; ``late``: a Ctrl-C or SIGTERM
    came once the last launch had ended by itself (the measurement is complete).

    Raises:
        KeyboardInterrupt: a launch was stopped, or a late one came before the last
            launch (the launch it came after is kept in ``segs``).
        RuntimeError: a launch did not complete.
    """
    from jitbench.harness.run import execute

    late = False
    order = cfg.order()
    wall_s, run_dir = 0.0, out_dir / "runs"
    for i, (strategy, rep) in enumerate(order):
        d = run_dir / f"{i:02d}-{strategy.replace(':', '_')}-r{rep}"
        if cfg.script:
            from jitbench.harness import script

            spec = script_launch_spec(base, strategy)
            res = script.execute(spec, d, progress, timeout_s)
        else:
            spec = launch_spec(base, cfg, strategy)
            res = execute(spec, d, progress, timeout_s)
        wall_s += res.wall_s
        if res.interrupted:  # Ctrl-C / SIGTERM stopped it: not measured
            raise KeyboardInterrupt
        if res.returncode != 0:
            raise RuntimeError(f"the overhead launch of {strategy} (repeat {rep}) did not "
                               f"complete (agent exit {res.returncode}); see "
                               f"{d / 'agent.log'}")
        try:
            segs.append(launch_times(d, cfg, strategy, rep, per_step, i))
        except ValueError as exc:
            raise RuntimeError(str(exc)) from None
        if res.late_interrupt:  # this launch ended by itself: measured and kept
            if i + 1 < len(order):
                raise KeyboardInterrupt
            late = True
    spec = (script_launch_spec(base, "none") if cfg.script
            else launch_spec(base, cfg, "none"))
    return wall_s, run_dir, spec, late
