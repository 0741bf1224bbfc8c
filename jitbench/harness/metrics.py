"""Metrics derived from a run's events (docs/design.md, "Metrics").

Every number here comes from the JSONL events; nothing is typed in. The spans
(the phases below) are derived once, by :mod:`jitbench.phases`, into the run's
phases table; this module reads them. Times are differences of ``t_mono``
(CLOCK_MONOTONIC, s) when every event comes from one host, else of ``t_wall``.

Per failure (one per attempt in which a fault that fails the job fired, its
first such fault; faults marked ``fails_job: false`` in their event, such as
``slow``, ``corrupt`` or a non-fatal Xid, start no episode; a fault's
*attempt* is the attempt it fired in, recovery happens in the next one):

- ``detect_s``: fault -> first ``failure`` event of a survivor (a rank no
  failing fault of the episode hit; any rank if there is none).
- ``save_s``: JIT save begin -> end, the slowest rank's (MLPerf Storage
  convention); for strategies without a JIT save, the duration of the last
  periodic (or async: request -> commit; ``inmem``: disk) save before the fault
  (0 if none).
- ``restart_s``: last event of the failed attempt (its last process gone) ->
  every rank of the next attempt has finished ``init``.
- ``restore_s``: restore begin -> end, the slowest rank's.
- ``replayed_steps``: steps completed before the fault and re-executed
  (``max completed - restored step``); ``replayed_gpu_steps`` multiplies by the
  world size; ``replay_s``: restore end -> the last replayed step's end.
- ``last_commit_step``: the newest step whose checkpoint was committed in the
  checkpoint directory (its manifest renamed into place, :func:`durable_parts`:
  the directory now and as each restore found it; the writer's ``save`` events
  only where neither exists) when recovery began (the recovering attempt's first
  restore begin; in process, the fault), less parts the restore found invalid
  (its ``skipped`` list); a writer killed after its manifest's rename committed
  though it never logged the save's end;
  ``expected_replayed_steps`` = ``completed_before - last_commit_step`` (0 when
  nothing committed): what a restore that picks the newest committed
  checkpoint replays. ``replayed_steps == expected_replayed_steps`` is the
  per-strategy replay invariant (``periodic:N`` replays the steps since its
  last checkpoint, ``none`` everything, ``jit`` the steps since its JIT save).
- ``recovery_s``: fault -> the end (all ranks) of the first step that had not
  completed before the fault.
- ``stall_s``: fault -> the first end, on *any* rank, of a step that no rank had
  completed before the fault (a survivor that goes on with fewer replicas, as
  under ``torchft``, ends it long before ``recovery_s``).
- In-process recovery (``jit-inprocess``, ``inmem``) has no ``restart_s``; instead
  ``reform_s`` (survivors leave the failed collective -> every member's new
  process group usable) and ``transfer_s`` (the state sent from a healthy
  replica to the others); its ``restore_s`` is the adoption of that state. Its
  expected replay counts from the source's state (the membership decision's
  ``resume_step``), except after a rollback to an in-memory copy (``inmem``,
  restore kind ``memory``): from ``memory_copy_step``, the newest copy a
  survivor held when the failure was detected (from its ``stage`` and
  ``restore`` events, not from the decision).
- ``wasted_gpu_s``: ``world_size x (recovery_s + lost_partial_s - step_s)``,
  where ``lost_partial_s`` is the interrupted step's time before the fault and
  ``step_s`` the median fault-free step time: GPU-seconds not spent on new
  progress. A recovery cut short by a later failure has no ``recovery_s``; once
  the job got past it, its waste is its whole window (fault -> the first step
  beyond what it had completed) less what the failures inside the window counted
  (:func:`_interrupted_waste`).
- ``injected`` / ``cause``: whether the harness injected the episode's fault, or
  the job met the failure by itself (:func:`jitbench.phases.own_failures`: a
  failed checkpoint write, an exception in a step, a hang, a bad checkpoint or
  input), then its root cause in one line.

Per run: ``checkpoint_stall_gpu_s`` (world size x the main thread's stall in
checkpoints: synchronous periodic saves, for ``periodic-async`` the
staging copy plus any wait for the previous save, for ``periodic:auto`` the
probe write that measured the checkpoint cost),
``goodput`` (useful step time / wall time of training: :func:`useful_step_s`, the
steps this job trained from its start step, each once, over the span from its first
step's begin to its last step's end; at most 1 by construction), and the
correctness oracles, ``state_equal`` and ``sample_stream_equal``.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import torch

from jitbench import phases
from jitbench.runtime.events import read_events


@dataclass
class FailureMetrics:
    """Metrics of one failure episode (s unless named otherwise)."""

    fault_kind: str
    fault_rank: int
    fault_step: int
    attempt: int
    trigger: str | None = None
    detect_s: float | None = None
    save_s: float | None = None
    restart_s: float | None = None
    restore_s: float | None = None
    restored_step: int | None = None
    restored_kind: str | None = None
    completed_before: int = 0
    """Steps the job had completed when the fault struck: the newest step completed in
    the failed attempt, or the step it restored (:func:`jitbench.phases.completed_before`)."""
    last_commit_step: int | None = None
    expected_replayed_steps: int | None = None
    replayed_steps: int | None = None
    replayed_gpu_steps: int | None = None
    replay_s: float | None = None
    recovery_s: float | None = None
    stall_s: float | None = None
    reform_s: float | None = None
    transfer_s: float | None = None
    in_process: bool = False
    """Recovered without restarting the survivors (a new generation, same attempt)."""
    fallback: str | None = None
    """Why the recovery fell back (one line; None otherwise): an in-process recovery to
    the checkpoints and a whole-job restart (the membership decision's reason), or,
    under ``jit``, the restore to an older checkpoint because no JIT checkpoint of the
    failure survived (:func:`jit_fallback`: why, and what was restored, e.g. the
    backstop of ``jit:backstop=N``)."""
    lost_partial_s: float | None = None
    wasted_gpu_s: float | None = None
    skipped_parts: list = field(default_factory=list)
    """``[part, reason]`` of newer parts the restore rejected (fell back past them)."""
    fault_ranks: list = field(default_factory=list)
    """Ranks hit by failing faults of the episode."""
    stall_s: float | None = None
    """Fault -> the first end, on any rank, of a step no rank had completed before it (s)."""
    memory_copy_step: int | None = None
    """``inmem``, recovered from memory: the newest in-memory copy a survivor held when
    the failure was detected (its ``stage`` end, kind ``inmem``, or a restore that
    left one); ``expected_replayed_steps`` counts from it."""
    degraded_rank_steps: int | None = None
    """``torchft``: step ends of survivors between the fault and the recovery step
    (progress with fewer replicas; subtracted from ``wasted_gpu_s`` at ``step_s`` each)."""
    injected: bool = True
    """The harness injected the fault that started the episode; False: the job met the
    failure by itself (:func:`jitbench.phases.own_failures`; ``fault_kind`` is then its
    trigger, e.g. ``storage_error``, or ``restore_error`` / ``input_error``)."""
    harness_stopped: bool = False
    """The harness stopped the launch (``--timeout-s`` ran out, Ctrl-C or SIGTERM)
    before this failure recovered: its ``detect_s`` is empty unless a rank declared
    the failure before the stop (the SIGTERM of the stop is no detection), and its
    recovery figures measure the stop, not the job; ``jitbench model --from-results``
    leaves such runs out."""
    cause: str | None = None
    """An own failure's root cause, one line (``rank 0: checkpoint write at step 8
    failed: No space left on device``); None for an injected fault."""


INTEGER_FAILURE_FIELDS = tuple(f.name for f in fields(FailureMetrics)
                               if f.type in ("int", "int | None"))
"""Whole-number fields of a failure (steps, ranks, attempt): ``failures.csv`` writes
them as integers, an empty cell where one was not measured (pandas ``Int64``)."""


@dataclass
class RunMetrics:
    """Run-level metrics."""

    completed: bool
    """Every rank reached ``done`` at the last step."""
    steps: int
    final_step: int
    attempts: int
    world_size: int
    step_s: float | None
    """Median step time over the run's steps (s)."""
    train_wall_s: float | None
    """First step begin -> last step end (s)."""
    goodput: float | None
    checkpoint_saves: int
    """Committed periodic, async and disk (``inmem``) checkpoints."""
    checkpoint_s: float | None
    """Median duration of one synchronous periodic checkpoint save (s)."""
    checkpoint_stall_gpu_s: float
    wasted_gpu_s: float | None
    """Sum over failures plus checkpoint stalls; None when a failure did not recover."""
    replayed_steps: int | None
    """Sum over the failures (None: failures, none of which recovered)."""
    max_replayed_steps_per_failure: int | None
    loss_first: float | None
    loss_last: float | None
    failures: list[FailureMetrics]
    late_replacements: int = 0
    """``torchft``: replacements that arrived after the job finished (never joined)."""
    auto_interval: dict | None = None
    """``periodic:auto``: the first ``auto_interval`` event's choice (interval in
    steps, measured ``cost_s`` and ``step_s``, ``mtbf_s``, Young's interval in s)."""
    slow_windows: list = field(default_factory=list)
    """Per ``slow`` fault: ``{fault_id, rank, first_step, last_step, step_s}``, with
    ``step_s`` the median step time (all ranks) of the slowed steps."""
    normal_step_s: float | None = None
    """Median step time (s) outside every slow window (None without slow faults)."""

    def to_dict(self) -> dict:
        return asdict(self)


def compute(run_dir: str | Path, spec_steps: int, world_size: int,
            events: list[dict] | None = None, phase_table=None,
            per_replica: bool = False, ckpt_dir: str | Path | None = None,
            strategy: str | None = None, stop: dict | None = None) -> RunMetrics:
    """Derive run and failure metrics of ``run_dir``.

    The spans (detect, save, restart, restore, replay, recovery, checkpoint
    saves, staging, probes) come from the phases table
    (:mod:`jitbench.phases`: ``phase_table``, else ``run_dir/phases.parquet``,
    else derived from the events); counts and steps from the events
    (``events``, else read from ``run_dir/events``). ``per_replica``: only failed
    ranks restart (``torchft``; see :func:`jitbench.phases.derive`): the steps
    completed before a fault are those that ended before it, the restored step is
    the failed rank's, and steps completed by survivors during the episode are
    not counted as waste. ``ckpt_dir``: the run's checkpoint directory, read (with
    the restore events' listings) for what was committed (:func:`durable_parts`);
    None: ``run_dir/ckpt`` when it exists. ``strategy``: the run's (its CLI form);
    under ``jit`` a restore that fell back past a lost JIT checkpoint gets its
    ``fallback`` line (:func:`jit_fallback`); None: no such line. ``stop``: when the
    harness stopped the launch (:func:`jitbench.phases.harness_stop`; None: it did
    not): failures declared after it are no detection
    (:func:`jitbench.phases.without_stop_failures`; pass ``events`` and
    ``phase_table`` already without them), and a failure whose recovery it cut short
    is ``harness_stopped``.
    """
    from jitbench.runtime.strategies import parse

    choice = parse(strategy) if strategy else None
    jit_restart = (choice is not None and choice.entry.writes == "on_failure"
                   and choice.entry.launcher == "agent")
    if ckpt_dir is None and (Path(run_dir) / "ckpt").is_dir():
        ckpt_dir = Path(run_dir) / "ckpt"
    evs = events if events is not None else phases.without_stop_failures(
        phases.read_events(run_dir), stop)
    ph = phase_table if phase_table is not None else (
        phases.derive(evs, world_size, per_replica) if events is not None
        else phases.load(run_dir, world_size, per_replica))
    rows = ph.to_dict("records")
    attempts = sorted({e["attempt"] for e in evs})

    step_end = [e for e in evs if e["event"] == "step" and e["phase"] == "end"]
    durs = [e["dur_s"] for e in step_end if "dur_s" in e]
    step_s = statistics.median(durs) if durs else None
    done = [e for e in evs if e["event"] == "done"]
    # the last step reached: a step end, or a restore (a resumed, already finished
    # training runs no step) or the done event
    final_step = max([e["step"] for e in step_end]
                     + [e["step"] for e in evs if e["event"] in ("restore", "done")
                        and e.get("phase", "end") in ("end", "point")
                        and isinstance(e.get("step"), int)], default=0)
    finished = {e["rank"] for e in done if e["step"] == spec_steps}
    # per replica (torchft): a replacement that arrived after the survivors finished
    # leaves without training; the job completed, its recovery was never reached
    late = {e["rank"] for e in evs if e["event"] == "warning" and e.get("late")}
    completed = len(finished | (late if per_replica and finished else set())) == world_size

    episodes: dict[int, dict[str, dict]] = defaultdict(dict)
    for r in rows:
        if r["scope"] == "failure":
            episodes[int(r["failure"])][r["phase"]] = r
    failing = phases.failure_starts(evs)
    known = durable_parts(evs, ckpt_dir)
    failures: list[FailureMetrics] = []
    for i in sorted(episodes):
        ep = episodes[i]
        f0 = ep["fault"]
        a, g = int(f0["attempt"]), int(_val(f0.get("gen")) or 0)
        if per_replica:  # attempts are per rank: read the failed rank and the time line
            key = phases.clock(evs)
            cur = [e for e in evs if e[key] <= f0["t0"]]
            nxt = [e for e in evs if e["attempt"] == a + 1 and e["rank"] == f0["rank"]]
            in_process = False
            fault_ev = next((e for e in failing if e["attempt"] == a
                             and e["rank"] == f0["rank"]), None)
        else:
            fault_ev = next(e for e in failing if e["attempt"] == a and phases.gen_of(e) == g)
            cur, nxt, in_process = phases.episode_events(evs, fault_ev, phases.clock(evs))
        fm = FailureMetrics(f0["kind"], _int(f0["rank"]), _int(f0["step"]), a)
        fm.in_process = in_process
        fm.harness_stopped = (stop is not None and "recovery" not in ep
                              and f0["t0"] < stop[phases.clock(evs)])
        if fault_ev is not None:
            fm.injected = bool(fault_ev.get("injected", True))
            fm.cause = fault_ev.get("cause")
        if not in_process:  # a survivor's decision, or the claimants' record of it
            why = [e["fallback"] for e in cur if e["event"] == "membership"
                   and e["phase"] == "end" and e.get("fallback")]
            why += [e["reason"] for e in nxt if e["event"] == "fallback" and e.get("reason")]
            fm.fallback = why[0] if why else None
        fm.fault_ranks = sorted({e["rank"] for e in phases.failing_faults(evs)
                                 if e["attempt"] == a and phases.gen_of(e) == g}
                                or ({fm.fault_rank} if not fm.injected else set()))
        for name in ("stall", "reform", "transfer"):
            if name in ep:
                setattr(fm, f"{name}_s", _val(ep[name]["dur_s"]))
        if "detect" in ep:
            fm.detect_s, fm.trigger = _val(ep["detect"]["dur_s"]), _val(ep["detect"]["trigger"])
        fm.save_s = _val(ep["save"]["dur_s"])
        clock = phases.clock(evs)
        fm.completed_before = phases.completed_before(cur)
        rend = [e for e in nxt if e["event"] == "restore" and e["phase"] == "end"]
        invalid = {name for r in rend for name, _ in r.get("skipped", [])}
        if known is not None:  # what the directory held when recovery began
            cutoff = _durable_cutoff(fault_ev, cur, nxt, in_process)
            fm.last_commit_step = max((p["step"] for p in known if p["t"] <= cutoff
                                       and p["name"] not in invalid), default=None)
        else:  # no directory to read (events of a run without one): the writers' events
            commits = [(e["step"], e.get("part")) for e in evs if e["attempt"] <= a
                       and e["event"] == "save" and e["phase"] == "end" and e.get("ok", True)
                       and not (in_process and e[clock] > f0["t0"])]
            fm.last_commit_step = max((st for st, part in commits if part not in invalid),
                                      default=None)
        fm.expected_replayed_steps = (0 if per_replica else  # survivors keep their state
                                      max(0, fm.completed_before - (fm.last_commit_step or 0)))
        if in_process:  # the state came from a replica, not from disk
            decided = [e for e in cur if e["event"] == "membership" and e["phase"] == "end"
                       and e.get("source") is not None]  # not an evicted rank's own view
            if decided:
                fm.expected_replayed_steps = max(0, fm.completed_before
                                                 - int(decided[0]["resume_step"]))
            kind = _val(ep["restore"]["kind"]) if "restore" in ep else None
            held = memory_copy_step(evs, cur, fm.fault_ranks, f0["t0"], a, clock)
            if kind == "memory" and held is not None:  # rolled back to an in-memory copy
                fm.memory_copy_step = held
                fm.expected_replayed_steps = max(0, fm.completed_before - held)
        begins = [r for r in rows if r["scope"] == "rank" and r["phase"] == "step"
                  and r["attempt"] == a and int(_val(r.get("gen")) or 0) == g
                  and r["rank"] == f0["rank"]
                  and r["step"] == f0["step"] and _val(r["t0"]) is not None]
        if begins:
            fm.lost_partial_s = max(0.0, f0["t0"] - max(r["t0"] for r in begins))
        restart = ep.get("restart")
        if restart is not None and restart["ok"]:
            fm.restart_s = _val(restart["dur_s"])
        if "restore" in ep:
            fm.restore_s = _val(ep["restore"]["dur_s"])
            fm.restored_step = _int(ep["restore"]["step"])
            fm.restored_kind = _val(ep["restore"]["kind"])
            fm.skipped_parts = rend[0].get("skipped", [])
            fm.replayed_steps = max(0, fm.completed_before - fm.restored_step)
            fm.replayed_gpu_steps = fm.replayed_steps * world_size
            if jit_restart and not in_process and fm.fallback is None:
                fm.fallback = jit_fallback(fm, cur, f0["t0"], clock, choice.backstop)
            if "replay" in ep:
                fm.replay_s = _val(ep["replay"]["dur_s"])
            if "recovery" in ep:
                fm.recovery_s = _val(ep["recovery"]["dur_s"])
                if step_s is not None:
                    fm.wasted_gpu_s = world_size * max(
                        0.0, fm.recovery_s + (fm.lost_partial_s or 0.0) - step_s)
                    if per_replica:  # survivors' committed steps in the episode were progress
                        key = phases.clock(evs)
                        t_end = ep["recovery"]["t1"]
                        fm.degraded_rank_steps = sum(
                            1 for e in evs if e["event"] == "step" and e["phase"] == "end"
                            and f0["t0"] < e[key] < t_end)
                        fm.wasted_gpu_s = max(0.0, fm.wasted_gpu_s
                                              - fm.degraded_rank_steps * step_s)
        if fm.harness_stopped:  # never recovered: no replay happened or was due yet
            fm.expected_replayed_steps = fm.replayed_steps = fm.replayed_gpu_steps = None
        failures.append(fm)
    if step_s is not None and not per_replica:
        _interrupted_waste(failures, episodes, evs, world_size, step_s)

    def spans(phase: str, kinds: tuple = ()) -> list[float]:
        """Durations of the successful ``rank`` spans of ``phase``, in start order."""
        got = [(r["t0"], r["dur_s"]) for r in rows if r["scope"] == "rank"
               and r["phase"] == phase and r["ok"] and _val(r["t0"]) is not None
               and (not kinds or r["kind"] in kinds)]
        return [d for _, d in sorted(got)]

    periodic = spans("save", phases.SAVE_KINDS)
    sync = spans("save", ("periodic",))
    stall = (sum(sync) + sum(spans("stage")) + sum(spans("probe"))) * world_size
    key = phases.clock(evs) if evs else "t_mono"
    firsts = [e for e in evs if e["event"] == "step" and e["phase"] == "begin"]
    train_wall = (max(e[key] for e in step_end) - min(e[key] for e in firsts)
                  if step_end and firsts else None)
    useful = useful_step_s(step_end, start_step(evs), key)
    goodput = useful / train_wall if completed and useful and train_wall else None
    # a failure with no recovery (the budget ran out, an interrupt, a timeout) has no
    # measured waste: the run's total is unknown, not zero
    wasted = (None if any(f.wasted_gpu_s is None for f in failures)
              else sum(f.wasted_gpu_s for f in failures) + stall)
    rank0 = sorted((e for e in step_end if e["rank"] == 0), key=lambda e: e[key])
    autos = [e for e in evs if e["event"] == "auto_interval" and e["rank"] == 0]
    auto = ({k: autos[0].get(k) for k in ("interval", "cost_s", "step_s", "mtbf_s",
                                          "young_interval_s", "step")} if autos else None)
    windows, normal = _slow_windows(evs, step_end)
    return RunMetrics(
        completed=completed, steps=spec_steps, final_step=final_step, attempts=len(attempts),
        world_size=world_size, step_s=step_s, train_wall_s=train_wall,
        goodput=goodput, checkpoint_saves=len(periodic),
        checkpoint_s=statistics.median(sync) if sync else None,
        checkpoint_stall_gpu_s=stall, wasted_gpu_s=wasted,
        replayed_steps=_measured_sum([f.replayed_steps for f in failures]),
        max_replayed_steps_per_failure=_measured_max([f.replayed_steps for f in failures]),
        loss_first=rank0[0].get("loss") if rank0 else None,
        loss_last=rank0[-1].get("loss") if rank0 else None, failures=failures,
        auto_interval=auto, slow_windows=windows, normal_step_s=normal,
        late_replacements=len(late) if per_replica else 0)


def _measured_sum(values: list[int | None]) -> int | None:
    """The sum of the measured values (None: not measured, e.g. a failure that never
    recovered); 0 for no failure, None when failures were there and none measured."""
    got = [v for v in values if v is not None]
    return sum(got) if got or not values else None


def _measured_max(values: list[int | None]) -> int | None:
    """The largest measured value; 0 for no failure, None when none was measured."""
    got = [v for v in values if v is not None]
    return max(got) if got else (0 if not values else None)


def resume_restores(evs: list[dict]) -> list[dict]:
    """The ``restore`` end events of the job's first start, before any failure
    (attempt 0, generation 0, ok): where a run resumed from checkpoints an earlier
    job left in its ``--ckpt-dir``, the step they loaded; [] when the events do not
    begin at attempt 0 (a part of a job) or no restore ran."""
    if min((e["attempt"] for e in evs), default=0) != 0:
        return []
    return [e for e in evs if e["event"] == "restore" and e["phase"] == "end"
            and e["attempt"] == 0 and phases.gen_of(e) == 0 and e.get("ok", True)]


def start_step(evs: list[dict]) -> int:
    """The step this job started from (0: a fresh start; k > 0: it resumed after step
    k from an earlier job's checkpoint, so steps 1..k are not its work), from
    :func:`resume_restores`."""
    return max((e.get("step") or 0 for e in resume_restores(evs)), default=0)


def useful_step_s(step_end: list[dict], start: int, key: str) -> float | None:
    """Useful step time of a job, in seconds: per rank, the sum of the durations
    (``dur_s``) of the last execution of each step after ``start`` (the step it
    started from: the steps this job trained, each once; an execution a failure
    made it replay is waste, not useful time), averaged over the ranks. ``step_end``:
    the step end events; ``key``: their clock, which orders a rank's executions.
    None when no step after ``start`` ended.

    A rank's steps run one after another inside the training wall time (its first
    step's begin to the last step's end), so the ratio of the two, ``goodput``, is
    at most 1 with no cap; the steps an earlier job trained (before a resume from
    ``--ckpt-dir``) are not counted."""
    last: dict[tuple[int, int], float] = {}
    for e in sorted(step_end, key=lambda e: e[key]):
        if e["step"] > start and isinstance(e.get("dur_s"), (int, float)):
            last[(e["rank"], e["step"])] = float(e["dur_s"])
    per_rank: dict[int, float] = defaultdict(float)
    for (rank, _), d in last.items():
        per_rank[rank] += d
    return sum(per_rank.values()) / len(per_rank) if per_rank else None


def jit_fallback(fm: FailureMetrics, cur: list[dict], t_fault: float, key: str,
                 backstop: int = 0) -> str | None:
    """Under ``jit`` (a whole-job restart), the line that says the failure's JIT checkpoint
    was lost and what the restore fell back to, or None when it was not lost.

    Lost: the restore loaded no JIT checkpoint, or one more than a step older than
    the last completed step (an earlier failure's). Why, from the survivors'
    ``save`` events of kind ``jit`` in the failed attempt (``cur``) at or after the
    fault (``t_fault``, clock ``key``): the save failed (its error), was skipped
    (its reason), began and never ended (the writer died in it), or none was
    attempted; and, for a sharded (HSDP) job, the shard that no survivor held, from
    the restore's skipped parts (``jit step 5: shard 0 of 2 missing ...``: every
    replica of that shard failed). What: ``backstop periodic:N`` for a periodic checkpoint when
    ``backstop`` is N >= 1 (``jit:backstop=N``), an older JIT checkpoint, another
    kind, or a fresh start (step 0)."""
    if fm.restored_step is None or (fm.restored_kind == "jit" and (fm.replayed_steps or 0) <= 1):
        return None
    saves = [e for e in cur if e["event"] == "save" and e.get("kind") == "jit"
             and e[key] >= t_fault]
    why = []
    for rank in sorted({e["rank"] for e in saves}):
        mine = [e for e in saves if e["rank"] == rank]
        end = next((e for e in mine if e["phase"] == "end"), None)
        skip = next((e for e in mine if e["phase"] == "skip"), None)
        if end is not None and not end.get("ok", True):
            why.append(f"rank {rank}'s write failed: {str(end.get('error'))[:160]}")
        elif skip is not None:
            why.append(f"rank {rank} skipped it: {str(skip.get('reason'))[:160]}")
        elif end is None:
            why.append(f"rank {rank} died while writing it")
    if not saves:
        why.append("no survivor wrote one")
    why += list(dict.fromkeys(f"every replica of a shard failed: {reason}"
                              for _, reason in fm.skipped_parts
                              if " shard " in str(reason) and "missing" in str(reason)))
    if fm.restored_step == 0 or fm.restored_kind is None:
        what = "a fresh start: nothing was committed"
    elif fm.restored_kind == "periodic" and backstop:
        what = f"backstop periodic:{backstop}"
    elif fm.restored_kind == "jit":
        what = "an older JIT checkpoint"
    else:
        what = f"a {fm.restored_kind} checkpoint"
    return (f"no JIT checkpoint survived the failure at step {fm.fault_step}"
            + (f" ({'; '.join(why)})" if why else "")
            + f": restored step {fm.restored_step} ({what})")


def memory_copy_step(evs: list[dict], cur: list[dict], hit: list[int], t_fault: float,
                     attempt: int, key: str) -> int | None:
    """The newest step of an in-memory copy (``inmem``) that a surviving process held when
    the failure at ``t_fault`` was detected, or None (no copy recorded).

    Survivors are the processes (pids) of the episode's attempt and generation
    (``cur``) on ranks no failing fault hit (``hit``). A process holds a copy of step
    k after its ``stage`` end of kind ``inmem`` at step k, and after every successful
    restore (``inmem`` copies the restored or adopted state). Detection is the first
    ``failure`` event of a survivor at or after the fault (a survivor may finish the
    step the failed rank died in, and copy it, before it notices; the failed rank's
    own ``failure`` event, as a SIGTERMed rank logs one, is not a detection)."""
    pids = {e.get("pid") for e in cur if e["rank"] >= 0 and e["rank"] not in hit}
    fails = [e[key] for e in cur if e["event"] == "failure" and e[key] >= t_fault
             and e.get("pid") in pids]
    t_detect = min(fails, default=t_fault)
    steps = [e["step"] for e in evs if e["attempt"] == attempt and e.get("pid") in pids
             and e["phase"] == "end" and e[key] <= t_detect
             and isinstance(e.get("step"), int)
             and ((e["event"] == "stage" and e.get("kind") == "inmem")
                  or (e["event"] == "restore" and e.get("ok", True)))]
    return max(steps, default=None)


def durable_parts(evs: list[dict], ckpt_dir: str | Path | None) -> list[dict] | None:
    """Every checkpoint part known to have been committed, with its commit time.

    The checkpoint directory decides, not the writer's log (a writer killed after
    its manifest's rename never logs the end of its save, yet the part is
    committed): the union of the listings that rank 0's restores recorded
    (``restore`` end ``committed``: the directory as each restore found it, parts
    pruned later included) and the directory as it is now
    (:func:`jitbench.runtime.checkpoint.committed`). Entries are ``{name, step,
    kind, rank, t}``, ``t`` the commit time (wall clock, s since the epoch; see
    :data:`jitbench.runtime.checkpoint.COMMIT_TIME`).

    Returns:
        The parts (one per name and commit time), or None when neither the events nor
        a directory say anything (no ``committed`` listing in any restore event and no
        ``ckpt_dir``): callers fall back to the writers' ``save`` events.
    """
    from jitbench.runtime import checkpoint as ckpt

    listings = [e["committed"] for e in evs if e["event"] == "restore"
                and e.get("phase") == "end" and isinstance(e.get("committed"), list)]
    if not listings and (ckpt_dir is None or not Path(ckpt_dir).is_dir()):
        return None
    try:
        now = ckpt.committed(ckpt_dir) if ckpt_dir is not None else []
    except OSError:
        now = []
    seen: dict[tuple[str, float], dict] = {}
    for p in [q for lst in listings for q in lst] + now:
        seen.setdefault((p["name"], round(float(p["t"]), 6)), p)
    return list(seen.values())


def _durable_cutoff(fault: dict | None, cur: list[dict], nxt: list[dict],
                    in_process: bool) -> float:
    """The instant (wall clock, s) up to which commits count for a failure's recovery:
    in process, the fault (the state comes from a replica; a backstop written after
    it is not what recovery reads); else the first ``restore`` begin of the recovering
    attempt (the saves of the failed attempt, the JIT save after the fault included,
    are what it can read), or, with none, the failed attempt's last event."""
    if in_process and fault is not None:
        return fault["t_wall"]
    begins = [e["t_wall"] for e in nxt if e["event"] == "restore" and e["phase"] == "begin"]
    if begins:
        return min(begins)
    return max((e["t_wall"] for e in cur), default=float("inf"))


def _interrupted_waste(failures: list[FailureMetrics], episodes: dict, evs: list[dict],
                       world_size: int, step_s: float) -> None:
    """``wasted_gpu_s`` of failures whose recovery a later failure interrupted.

    Such a failure has no ``recovery`` span (no new step completed in the attempt
    or generation it recovered in), yet when the job later got past it, its waste is
    known: its window runs from the fault (less the interrupted step's part
    before it) to the end, on every rank, of the first step after the fault beyond
    ``completed_before``; every later failure inside that window has counted its
    own window, so this one gets the rest: ``world_size x (t_new - t_fault +
    lost_partial_s - step_s)`` minus the ``wasted_gpu_s`` of the failures that began
    inside it. Failures are taken newest first, so nested interruptions add up to
    the whole window. Left None when the job never got past the failure.
    """
    key = phases.clock(evs)
    ends: dict[int, dict[int, float]] = defaultdict(dict)  # step -> rank -> first end
    order = sorted(range(len(failures)), key=lambda i: episodes[i]["fault"]["t0"],
                   reverse=True)
    for i in order:
        fm = failures[i]
        if fm.wasted_gpu_s is not None or fm.recovery_s is not None:
            continue
        tf = episodes[i]["fault"]["t0"]
        ends.clear()
        for e in evs:
            if (e["event"] == "step" and e["phase"] == "end" and e[key] > tf
                    and e["step"] > fm.completed_before):
                ends[e["step"]].setdefault(e["rank"], e[key])
        new = [st for st, by in ends.items() if len(by) == world_size]
        if not new:
            continue
        t_new = max(ends[min(new)].values())
        inside = [failures[j].wasted_gpu_s for j in range(len(failures))
                  if j != i and tf < episodes[j]["fault"]["t0"] < t_new]
        if any(w is None for w in inside):
            continue
        window = world_size * max(0.0, t_new - tf + (fm.lost_partial_s or 0.0) - step_s)
        fm.wasted_gpu_s = max(0.0, window - sum(inside))


def _val(v):
    """A phases-table cell as a Python value (NaN -> None)."""
    return phases.value(v)


def _int(v) -> int | None:
    v = phases.value(v)
    return None if v is None else int(v)


def _slow_windows(evs: list[dict], step_end: list[dict]) -> tuple[list[dict], float | None]:
    """Step times inside each ``slow`` fault's window (its attempt) and outside all."""
    slow = [e for e in evs if e["event"] == "fault" and e.get("kind") == "slow"]
    if not slow:
        return [], None
    inside: set[tuple[int, int]] = set()
    out = []
    for f in slow:
        n = int((f.get("params") or {}).get("steps", 1))
        first, last = f["step"], f["step"] + n - 1
        durs = [e["dur_s"] for e in step_end if e["attempt"] == f["attempt"]
                and first <= e["step"] <= last and "dur_s" in e]
        inside.update((f["attempt"], s) for s in range(first, last + 1))
        out.append({"fault_id": f.get("fault_id"), "rank": f["rank"], "first_step": first,
                    "last_step": last, "delay_s": (f.get("params") or {}).get("delay_s"),
                    "step_s": statistics.median(durs) if durs else None})
    rest = [e["dur_s"] for e in step_end if (e["attempt"], e["step"]) not in inside
            and "dur_s" in e]
    return out, statistics.median(rest) if rest else None


def sample_streams(run_dir: str | Path,
                   events: list[dict] | None = None) -> dict[int, dict[int, list[int]]]:
    """Effective sample-id stream: ``{rank: {step: ids of its last completed execution}}``
    (from ``events`` when the caller has read them already)."""
    out: dict[int, dict[int, list[int]]] = defaultdict(dict)
    for e in events if events is not None else read_events(Path(run_dir) / "events"):
        if e["event"] == "step" and e["phase"] == "end" and "sample_ids" in e:
            out[e["rank"]][e["step"]] = e["sample_ids"]
    return out


def executions(run_dir: str | Path) -> dict[int, list[dict]]:
    """Every completed step execution per rank, in time order (across attempts):
    ``{rank: [step-end event, ...]}`` (a replayed step appears once per execution)."""
    out: dict[int, list[dict]] = defaultdict(list)
    for e in read_events(Path(run_dir) / "events"):
        if e["event"] == "step" and e["phase"] == "end":
            out[e["rank"]].append(e)
    return dict(out)


def stream_violations(run_dir: str | Path, reference_dir: str | Path, steps: int,
                      max_replay: int) -> list[str]:
    """Check the *raw* sample-id stream of a run against its fault-free reference.

    Per rank, the executed steps in time order must be the reference's steps
    1..``steps`` with, at each restart (a new attempt, or a new generation of an
    in-process recovery), a rewind of at most ``max_replay`` steps (the replayed
    minibatches) and no skip, except over steps that a peer completed before the
    restart (a survivor adopting a peer's newer boundary skips the steps that peer
    completed; a peer finishing step s proves that
    every rank's gradient of step s arrived, so this rank consumed its
    minibatch even though it died before logging the step's end, e.g. a rank
    SIGTERMed inside the collective that saves while the peer steps on).
    Every execution of a step must consume the reference's sample ids and
    micro-batch indices and start from the reference's RNG state (``rng``
    digest, when recorded).

    Returns:
        One line per violation (empty: the stream is the reference's except at
        most ``max_replay`` replayed minibatches per failure).
    """
    ref = {r: {e["step"]: e for e in evs} for r, evs in executions(reference_dir).items()}
    run = executions(run_dir)
    out: list[str] = []
    if not ref:
        return ["reference recorded no steps"]
    if sorted(run) != sorted(ref):
        out.append(f"ranks {sorted(run)} recorded steps, reference ranks {sorted(ref)}")
    def unit(e: dict) -> tuple[int, int]:  # what one restart replaces: attempt, generation
        return e["attempt"], phases.gen_of(e)

    done_by: dict[tuple[int, int], set[int]] = defaultdict(set)  # steps any rank completed
    for evs in run.values():
        for e in evs:
            done_by[unit(e)].add(e["step"])
    for rank, evs in sorted(run.items()):
        done = 0  # highest step completed so far on this rank
        prev = None
        for e in evs:
            s = e["step"]
            want = ref.get(rank, {}).get(s)
            if want is None:
                out.append(f"rank {rank}: step {s} is not in the reference")
                continue
            for key in ("sample_ids", "micro", "rng"):
                if key in want and e.get(key) != want[key]:
                    out.append(f"rank {rank} step {s} (attempt {e['attempt']}): {key} differs "
                               "from the reference")
            new_unit = prev is None or unit(e) != unit(prev)
            where = f"attempt {e['attempt']}" + (f" generation {unit(e)[1]}" if unit(e)[1]
                                                 else "")
            if not new_unit and s != prev["step"] + 1:
                out.append(f"rank {rank}: step {s} follows step {prev['step']} in {where}")
            if new_unit:  # this rank's first step, or its first after a restart
                by_peers = set().union(*(done_by[u] for u in done_by if u < unit(e)))
                skipped = set(range(done + 1, s))
                if not skipped <= by_peers:
                    out.append(f"rank {rank}: {where} starts at step {s}, "
                               f"skipping {sorted(skipped - by_peers)} that no rank completed")
                elif done - (s - 1) > max_replay:
                    out.append(f"rank {rank}: {where} replays {done - (s - 1)} "
                               f"steps (allowed {max_replay})")
                done = max(done, s - 1)
            done = max(done, s)
            prev = e
        if done != steps:
            out.append(f"rank {rank}: last completed step {done}, expected {steps}")
    return out


def sample_stream_equal(run_dir: str | Path, reference_dir: str | Path) -> bool:
    """The run consumed the reference's samples at every step on every rank
    (re-executed steps count once: the replayed minibatch is the allowed difference).

    A step that a rank began but never logged the end of counts as consumed
    when a peer completed it: a peer finishing step s proves that every rank's
    gradient of step s arrived (a rank SIGTERMed inside that collective saves
    and exits while its peer steps on; the same rule as
    :func:`stream_violations`).
    """
    evs = read_events(Path(run_dir) / "events")
    a, b = sample_streams(run_dir, evs), sample_streams(reference_dir)
    if not b or set(a) - set(b):
        return False
    completed = {s for steps in a.values() for s in steps}
    begun = {(e["rank"], e["step"]) for e in evs
             if e["event"] == "step" and e["phase"] == "begin"}
    for rank, steps in b.items():
        got = a.get(rank, {})
        if set(got) - set(steps):
            return False
        for step, ids in steps.items():
            if step not in got:
                if not (step in completed and (rank, step) in begun):
                    return False
            elif got[step] != ids:
                return False
    return True


def compare_states(path_a: str | Path, path_b: str | Path) -> tuple[bool, float]:
    """Compare two final states (model + optimizer) bitwise.

    Returns:
        ``(equal, max_abs_diff)``: bitwise equality of every tensor and scalar,
        and the largest absolute elementwise difference over all tensors.

    Raises:
        FileNotFoundError: a state file is missing.
    """
    a = torch.load(path_a, map_location="cpu", weights_only=True)
    b = torch.load(path_b, map_location="cpu", weights_only=True)
    equal, diff = True, 0.0

    def walk(x, y) -> None:
        nonlocal equal, diff
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if x.shape != y.shape or x.dtype != y.dtype:
                equal, diff = False, float("inf")
                return
            if not torch.equal(x, y):
                equal = False
                if x.numel():
                    diff = max(diff, (x.double() - y.double()).abs().max().item())
        elif isinstance(x, dict) and isinstance(y, dict):
            if x.keys() != y.keys():
                equal = False
            for k in x.keys() & y.keys():
                walk(x[k], y[k])
        elif isinstance(x, (list, tuple)) and isinstance(y, (list, tuple)):
            if len(x) != len(y):
                equal = False
            for u, v in zip(x, y, strict=False):
                walk(u, v)
        elif x != y:
            equal = False

    walk(a, b)
    return equal, diff


def event_order(run_dir: str | Path) -> list[str]:
    """Names of the recovery milestones in time order, one per failure, e.g.
    ``fault, failure, save, restart, restore, step`` for a whole-job restart and
    ``fault, failure, reform, transfer, restore, step`` for an in-process one, with
    ``save`` after ``failure`` where the failed rank itself lived to write its JIT
    part (an exception or SIGTERM in its own step; for tests and reports)."""
    evs = read_events(Path(run_dir) / "events")
    out: list[str] = []
    seen_attempt = 0
    last_fault = None
    failing = {id(e) for e in phases.failing_faults(evs)}
    for e in evs:
        n, p = e["event"], e["phase"]
        where = (e["attempt"], phases.gen_of(e))
        if n == "fault" and id(e) in failing and last_fault != where:
            out.append("fault")
            last_fault = where
        elif n == "failure" and out and out[-1] == "fault":
            out.append("failure")
        elif n == "save" and p == "end" and e.get("kind") == "jit" and out and out[-1] == "failure":
            out.append("save")
        elif (n == "fallback" or (n == "init" and p == "end")) and e["attempt"] > seen_attempt:
            # a new attempt's processes initialised, or (in process) spares claimed it
            seen_attempt = e["attempt"]
            out.append("restart")
        elif n == "reform" and p == "end" and out and out[-1] in ("failure", "save"):
            out.append("reform")
        elif n == "transfer" and p == "end" and out and out[-1] == "reform":
            out.append("transfer")
        elif n == "restore" and p == "end" and out and out[-1] in ("restart", "transfer"):
            out.append("restore")
        elif n == "step" and p == "end" and out and out[-1] == "restore":
            out.append("step")
    return out
