"""Events -> phase spans, derived once (docs/design.md, "Metrics").

A run's JSONL events (:mod:`jitbench.runtime.events`) are read once and turned
into one table of spans, written beside the records as ``RUN_DIR/phases.parquet``
(and ``phases.csv``). The summary metrics (:mod:`jitbench.harness.metrics`),
the correctness checks and the report's timelines (:mod:`jitbench.reports.plots`)
read this table instead of pairing events themselves. A run directory written
before the table existed is derived from its events on first read
(:func:`load`).

Clock: times are ``t_mono`` (CLOCK_MONOTONIC, s) when every event comes from
one host, else ``t_wall`` (s since the epoch); the ``clock`` column names it.
``t0``/``t1`` are absolute times on that clock; ``dur_s = t1 - t0``.

Rows (``scope``, ``phase``):

``run`` scope
    ``attempt``: the first and last event of an attempt (one row per attempt;
    ``t1`` of a failed attempt is the moment its last process was gone).

``rank`` scope, one row per begin/end pair of an event on one rank in one attempt
    ``step`` (``step``; ``dur_s`` is the runtime's own step time, ``t1`` NaN
    for a step begun and never ended), ``save`` (``kind`` ``jit``,
    ``periodic``, ``async`` or ``disk``; ``step``; ``part``), ``restore``, ``init``,
    ``stage`` (an async checkpoint's staging copy; ``inmem``'s own copy, kind
    ``inmem``), ``probe`` (the ``periodic:auto`` cost probe), ``copy`` (``inmem``'s
    copy into a peer's memory, in the background); and ``fault`` points (every injected fault,
    ``kind``, ``step``). A begin pairs with the next successful end of the
    same event (and, for ``save``, the same ``kind``) on that rank; an end
    with ``ok: false`` is a row with ``ok`` False and leaves the begin open.

``failure`` scope, one row per phase of each failure episode (``failure`` =
0, 1, ...; an episode is an attempt, and within it a generation ``gen`` of an
in-process-recovering job, in which a fault that fails the job fired; its
first such fault starts it; faults with ``fails_job: false``, such as
``slow``, start none; in a unit where no failing fault fired, a rank's own
failure starts it: a failed checkpoint write, an exception in its step, a hang,
a restore or workload that gave up, :func:`own_failures`). Recovery happens in the next attempt (a whole-job
restart) or, when the survivors' ``membership`` decision formed a new
generation, in that generation of the same attempt (in process)
    ``fault`` (point: ``t0 = t1`` the injection, ``rank``/``step``/``kind`` of
    the fault; for an own failure its first event and its kind, e.g.
    ``storage_error``); ``detect`` (fault -> first ``failure`` event of a survivor, a
    rank no failing fault of the episode hit, else of any rank; ``trigger``);
    ``save`` (the slowest rank's JIT save of the attempt, else the last
    periodic, async or disk save that ended before the fault, else a row with
    ``dur_s`` 0 and no times); ``restart`` (last event of the failed attempt ->
    the last ``init`` end of the next; ``ok`` when every rank initialised);
    ``restore`` (the slowest rank's restore; ``step``/``kind`` of the part
    restored); ``replay`` (the slowest restore's end -> the end of the last
    step completed before the fault; ``step`` that step); ``recovery`` (fault
    -> the end, on every rank, of the first step that had not completed before
    the fault); ``stall`` (fault -> the first end, on *any* rank, of a step no
    rank had completed before the fault; differs from ``recovery`` where
    survivors go on with fewer replicas).
    In process (``jit-inprocess``), instead of ``restart``: ``reform`` (the first
    ``failure`` event -> the last member's ``transfer`` begin, when every
    member's new process group was usable) and ``transfer`` (first ``transfer``
    begin -> last end). Where only failed ranks restart (``torchft``), episodes
    are read on the time line instead (:func:`derive` with ``per_replica``).

This module reads events with the runtime's reader and imports no torch.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

from jitbench.runtime.events import read_events as _read_events

__all__ = ["COLUMNS", "PHASES_FILE", "ROOT_TRIGGERS", "clock", "derive", "describe",
           "episode_events", "failing_faults", "failure_starts", "gen_of", "load",
           "own_failures", "read_events", "write"]

PHASES_FILE = "phases.parquet"
COLUMNS = ("scope", "phase", "failure", "attempt", "gen", "rank", "kind", "step", "part", "ok",
           "trigger", "t0", "t1", "dur_s", "clock")
"""Columns of the phases table (see the module docstring)."""
SPANS = ("step", "save", "restore", "init", "stage", "probe", "copy")
"""Events paired into ``rank`` scope spans."""
SAVE_KINDS = ("periodic", "async", "disk")
"""Kinds of the scheduled checkpoints a failure episode's ``save`` row falls back to
(the JIT save comes first): ``periodic``, ``async`` (``periodic-async``), ``disk``
(``inmem``'s disk checkpoints)."""


def read_events(run_dir: str | Path) -> list[dict]:
    """Every event of ``run_dir/events``, in time order (torn last lines skipped)."""
    return _read_events(Path(run_dir) / "events")


STOP_FILE = "harness_stop.json"
"""A run directory's record of the harness stopping its launch
(:data:`jitbench.harness.launch.STOP_FILE`, the same name)."""


def harness_stop(run_dir: str | Path) -> dict | None:
    """When the harness stopped the launch of ``run_dir`` (``--timeout-s`` ran out,
    Ctrl-C or SIGTERM): ``{"why", "t_wall", "t_mono"}`` (s, the events' clocks), or
    None when it ran to its end (or the record is unreadable)."""
    try:
        stop = json.loads((Path(run_dir) / STOP_FILE).read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(stop, dict) and all(isinstance(stop.get(k), (int, float))
                                        for k in ("t_wall", "t_mono"))
    return stop if ok else None


def without_stop_failures(evs: list[dict], stop: dict | None) -> list[dict]:
    """``evs`` less the ``failure`` events declared once the harness had stopped the
    launch (``stop``: :func:`harness_stop`): the workers' SIGTERM (``sigterm``) and the
    broken collectives that follow are the stop's doing, not the detection of a fault
    (a hang the harness stopped before the watchdog saw it has no detection)."""
    if stop is None:
        return evs
    key = clock(evs)
    return [e for e in evs if not (e["event"] == "failure" and e[key] >= stop[key])]


def clock(evs: list[dict]) -> str:
    """``t_mono`` when every event comes from one host, else ``t_wall``."""
    return "t_mono" if len({e.get("host") for e in evs}) <= 1 else "t_wall"


def _row(scope: str, phase: str, t0: float | None, t1: float | None, **kw) -> dict:
    dur = kw.pop("dur_s", None)
    if dur is None and t0 is not None and t1 is not None:
        dur = t1 - t0
    return {"scope": scope, "phase": phase, "failure": None, "attempt": None, "gen": None,
            "rank": None,
            "kind": None, "step": None, "part": None, "ok": True, "trigger": None,
            "t0": t0, "t1": t1, "dur_s": dur, **kw}


def _spans(evs: list[dict], key: str) -> list[dict]:
    out: list[dict] = []
    open_: dict[tuple, dict] = {}
    for e in evs:
        name = e["event"]
        if name == "fault":
            out.append(_row("rank", "fault", e[key], e[key], dur_s=0.0, attempt=e["attempt"],
                            gen=gen_of(e), rank=e["rank"], kind=e.get("kind"),
                            step=e.get("step")))
            continue
        if name not in SPANS:
            continue
        k = (e["attempt"], e["rank"], e.get("pid"), name, e.get("kind") if name == "save" else None)
        if e["phase"] == "begin":
            open_[k] = e
        elif e["phase"] == "end":
            ok = bool(e.get("ok", True))
            begin = open_.pop(k, None) if ok else open_.get(k)
            t0 = begin[key] if begin is not None else None
            row = _row("rank", name, t0, e[key], attempt=e["attempt"], gen=gen_of(e),
                       rank=e["rank"],
                       kind=e.get("kind") if name == "save" else None, step=e.get("step"),
                       part=e.get("part"), ok=ok)
            if name == "step":
                row["dur_s"] = e.get("dur_s")
            out.append(row)
    for b in open_.values():  # begun, never ended (a killed rank's step)
        if b["event"] == "step":
            out.append(_row("rank", "step", b[key], None, attempt=b["attempt"], gen=gen_of(b),
                            rank=b["rank"], step=b.get("step"), ok=False))
    return out


def _slowest(rows: list[dict]) -> dict | None:
    """The row of the longest successful span (the first of equals, in start order)."""
    done = sorted((r for r in rows if r["ok"] and r["t0"] is not None),
                  key=lambda r: (r["t0"], r["dur_s"]))
    return max(done, key=lambda r: r["dur_s"]) if done else None


def gen_of(e: dict) -> int:
    """The generation of an event (0 for jobs that never recovered in process)."""
    return int(e.get("gen") or 0)


def failing_faults(evs: list[dict]) -> list[dict]:
    """The fault events that failed the job, in time order.

    A fault fails the job unless its event says ``fails_job: false`` (a straggler, a
    corruption found only at the next restore) or it was absorbed: its rank went on
    to complete a step in the same attempt and generation, and no rank declared a
    failure there after it (a failed background write under ``jit-inprocess``: the
    backstop is lost, training goes on).
    """
    out = []
    key = clock(evs)
    for f in evs:
        if f["event"] != "fault" or not f.get("fails_job", True):
            continue
        unit = (f["attempt"], gen_of(f))
        later = [e for e in evs if e[key] >= f[key]
                 and (e["attempt"], gen_of(e)) == unit]
        went_on = any(e["event"] == "step" and e["phase"] == "end" and e["rank"] == f["rank"]
                      for e in later)
        if went_on and not any(e["event"] == "failure" for e in later):
            continue
        out.append(f)
    return out


ROOT_TRIGGERS = ("storage_error", "exception", "hang", "stuck")
"""``failure`` triggers that name a rank's own failure (a peer's death shows as
``collective_error``, ``notice`` or ``sigterm`` on the others)."""
OWN_WHERE = {"restore": "restore_error", "workload": "input_error"}
"""``error`` events (a worker giving up, :mod:`jitbench.harness.worker`) that are a
rank's own failure, by ``where``, and the kind they are reported as."""


def describe(e: dict) -> str:
    """One line naming a rank's own failure from its ``failure`` or ``error`` event:
    rank, operation, step and the OS error or exception, e.g. ``rank 0: checkpoint
    write at step 8 failed: No space left on device`` (the OS error's text from its
    ``errno`` when the event has one)."""
    import os

    rank, step = e.get("rank"), e.get("step")
    err = e.get("errno")
    reason = (os.strerror(err) if isinstance(err, int) and err > 0
              else str(e.get("error") or e.get("reason") or e.get("trigger") or "unknown"))
    if e["event"] == "error":
        what = {"restore": "restoring the checkpoint", "workload": "building the workload "
                "(data, options)"}.get(e.get("where"), str(e.get("where")))
        return f"rank {rank}: {what} failed: {reason}"
    trigger = e.get("trigger")
    if trigger == "storage_error":
        return f"rank {rank}: checkpoint write at step {step} failed: {reason}"
    if trigger == "hang":
        return (f"rank {rank}: step {step} made no progress for {e.get('waited_s', 0):.1f} s "
                f"(hang bound {e.get('bound_s', 0):.1f} s, phase {e.get('phase')})")
    if trigger == "stuck":
        return f"rank {rank}: step {step} stuck: {reason}"
    if trigger == "exception":
        if e.get("in_phase") == "checkpoint":
            return f"rank {rank}: checkpoint at step {step} failed: {reason}"
        return f"rank {rank}: step {step} failed: {reason}"
    return f"rank {rank}: {trigger} at step {step}: {reason}"


def own_failures(evs: list[dict]) -> list[dict]:
    """The failures the job met by itself: per attempt and generation in which no
    failing fault fired (:func:`failing_faults`), its first root-cause event (a
    ``failure`` with a trigger in :data:`ROOT_TRIGGERS`, or an ``error`` event of a
    worker giving up at restore or while building its workload), as a fault-like
    event: ``event`` ``fault``, ``kind`` (the trigger, or ``restore_error`` /
    ``input_error``), ``rank``, ``step`` (0 when the event has none), ``injected``
    False and ``cause`` (:func:`describe`). Units whose failures are only reactions
    to a peer (``collective_error``, ``notice``, ``sigterm``) start none."""
    faulted = {(f["attempt"], gen_of(f)) for f in failing_faults(evs)}
    out: dict[tuple[int, int], dict] = {}
    for e in evs:
        unit = (e["attempt"], gen_of(e))
        if unit in faulted or unit in out or not isinstance(e.get("rank"), int) \
                or e["rank"] < 0:
            continue
        if e["event"] == "failure" and e.get("trigger") in ROOT_TRIGGERS:
            kind = e["trigger"]
        elif e["event"] == "error" and e.get("where") in OWN_WHERE:
            kind = OWN_WHERE[e["where"]]
        else:
            continue
        step = e.get("step")
        out[unit] = {**e, "event": "fault", "phase": "point", "kind": kind,
                     "step": step if isinstance(step, int) else 0, "injected": False,
                     "cause": describe(e)}
    return list(out.values())


def failure_starts(evs: list[dict]) -> list[dict]:
    """What started each failure episode, in time order: the failing faults
    (:func:`failing_faults`) and the failures the job met by itself
    (:func:`own_failures`, ``injected`` False)."""
    key = clock(evs) if evs else "t_mono"
    return sorted(failing_faults(evs) + own_failures(evs), key=lambda e: e[key])


def episode_events(evs: list[dict], fault: dict, key: str = "t_mono"
                   ) -> tuple[list[dict], list[dict], bool]:
    """``(cur, nxt, in_process)`` for the failure episode started by ``fault``: the
    events of its attempt and generation, and those of the attempt or generation
    it recovered in (``in_process``: the survivors' ``membership`` decision, with
    no fallback, formed a new generation of the same attempt in which a member took
    a state; when none did before a whole-job restart, ``cur`` also holds those
    generations and the restart's attempt recovered)."""
    a, g = fault["attempt"], gen_of(fault)
    cur = [e for e in evs if e["attempt"] == a and gen_of(e) == g]
    decided = [e for e in cur if e["event"] == "membership" and e["phase"] == "end"
               and e.get("fallback") is None and e.get("new_gen") is not None
               and e[key] >= fault[key]]
    restarted = [e for e in evs if e["attempt"] == a + 1]
    if decided:
        # the generations after it (a member that failed while the state was sent
        # makes the next one carry the recovery)
        new = int(decided[0]["new_gen"])
        later = [e for e in evs if e["attempt"] == a and gen_of(e) >= new]
        took = any(e["event"] == "restore" and e["phase"] == "end" and e.get("ok", True)
                   for e in later)
        if took or not restarted or any(
                e["attempt"] == a and gen_of(e) >= new for e in failure_starts(evs)):
            # (a failure of its own in those generations is the next episode, which
            # the restart then recovers)
            return cur, later, True
        # no member of those generations took a state before the job fell back to a
        # whole-job restart, and nothing failed there of its own (a survivor stuck in
        # its own code never re-formed: stress chunk 20): the restart recovered, from
        # the end of the last of them
        cur = sorted(cur + later, key=lambda e: e[key])
    return cur, restarted, False


def completed_before(cur: list[dict]) -> int:
    """The steps the job had completed when a failure struck its attempt (or in-process
    generation) ``cur``: the newest step any rank of it completed, or, when none
    completed one, the step its restore loaded (the state the attempt started from:
    an earlier attempt, or an earlier job of ``--ckpt-dir``, completed those steps).
    An attempt that restored step k and failed in step k + 1 had completed k steps,
    not 0 (a rank that fails in every attempt, ``--every-attempt``); 0 only for a
    fresh start that completed nothing."""
    done = [e["step"] for e in cur if e["event"] == "step" and e["phase"] == "end"]
    loaded = [e["step"] for e in cur if e["event"] == "restore" and e["phase"] == "end"
              and e.get("ok", True) and isinstance(e.get("step"), int)]
    return max(done + loaded, default=0)


def _episodes(evs: list[dict], key: str, spans: list[dict], world_size: int) -> list[dict]:
    rows: list[dict] = []
    failing = failure_starts(evs)
    seen: set[tuple[int, int]] = set()
    for fault in failing:
        a, g = fault["attempt"], gen_of(fault)
        if (a, g) in seen:
            continue  # a second fault in the same attempt and generation: the same episode
        seen.add((a, g))
        i = len(seen) - 1
        cur, nxt, in_process = episode_events(evs, fault, key)
        tf = fault[key]
        ep = {"failure": i, "attempt": a, "gen": g}
        rows.append(_row("failure", "fault", tf, tf, dur_s=0.0, rank=fault["rank"],
                         kind=fault["kind"], step=fault["step"], **ep))
        hit = {e["rank"] for e in failing if e["attempt"] == a and gen_of(e) == g}
        fails = [e for e in cur if e["event"] == "failure" and e[key] >= tf]
        fails = [e for e in fails if e["rank"] not in hit] or fails
        if fails:
            first = min(fails, key=lambda e: e[key])
            rows.append(_row("failure", "detect", tf, first[key], rank=first["rank"],
                             trigger=first.get("trigger"), **ep))
        mine = [r for r in spans if r["attempt"] == a and r["phase"] == "save"
                and (not in_process or r["t0"] is None or r["t0"] >= tf or r["gen"] == g)]
        save = _slowest([r for r in mine if r["kind"] == "jit"
                         and (not in_process or (r["t0"] is not None and r["t0"] >= tf))])
        if save is None:
            before = sorted((r for r in mine if r["kind"] in SAVE_KINDS and r["ok"]
                             and r["t0"] is not None and r["t1"] <= tf),
                            key=lambda r: (r["t0"], r["dur_s"]))
            save = before[-1] if before else None
        rows.append(_row("failure", "save", None, None, **ep) if save is None else  # none made
                    _row("failure", "save", save["t0"], save["t1"], rank=save["rank"],
                         kind=save["kind"], step=save["step"], part=save["part"], **ep))
        if not nxt:
            continue
        if in_process:
            # this episode's transfers: those before the first step it resumed
            first_step = min((e[key] for e in nxt if e["event"] == "step"
                              and e["phase"] == "end"), default=math.inf)
            t_fail = min(e[key] for e in fails) if fails else tf
            tb = [e[key] for e in nxt if e["event"] == "transfer" and e["phase"] == "begin"
                  and e[key] <= first_step]
            te = [e[key] for e in nxt if e["event"] == "transfer" and e["phase"] == "end"
                  and e[key] <= first_step]
            if tb:
                rows.append(_row("failure", "reform", t_fail, max(tb), **ep))
            if tb and te:
                rows.append(_row("failure", "transfer", min(tb), max(te), **ep))
        else:
            old_gone = max(e[key] for e in cur)
            inits = [e for e in nxt if e["event"] == "init" and e["phase"] == "end"]
            if inits:
                rows.append(_row("failure", "restart", old_gone, max(e[key] for e in inits),
                                 ok=len({e["rank"] for e in inits}) == world_size, **ep))
        rend = [e for e in nxt if e["event"] == "restore" and e["phase"] == "end"]
        if not rend:
            continue
        gens = {gen_of(e) for e in nxt}
        slow = _slowest([r for r in spans if r["phase"] == "restore" and (
            (in_process and r["attempt"] == a and r["gen"] in gens)
            or (not in_process and r["attempt"] == a + 1))])
        t_rest = max(e[key] for e in rend)
        rows.append(_row("failure", "restore", slow["t0"] if slow else None,
                         slow["t1"] if slow else None, rank=slow["rank"] if slow else None,
                         kind=rend[0].get("kind"), step=rend[0]["step"], **ep))
        done_before = completed_before(cur)
        ends: dict[int, list[float]] = defaultdict(list)
        for e in nxt:
            if e["event"] == "step" and e["phase"] == "end":
                ends[e["step"]].append(e[key])
        if done_before - rend[0]["step"] <= 0:
            rows.append(_row("failure", "replay", t_rest, t_rest, dur_s=0.0, step=done_before,
                             **ep))
        elif done_before in ends:
            rows.append(_row("failure", "replay", t_rest, max(ends[done_before]),
                             step=done_before, **ep))
        new = [s for s in ends if s > done_before and len(ends[s]) == world_size]
        if new:
            rows.append(_row("failure", "recovery", tf, max(ends[min(new)]), step=min(new),
                             **ep))
    return rows


def _stall(evs: list[dict], key: str, tf: float, ep: dict) -> list[dict]:
    """The ``stall`` row: fault -> the first end, on any rank, of a step that no rank
    had completed before the fault (a step a slower rank was still finishing when
    its faster peer failed in the next one is no progress after the fault)."""
    ends = [e for e in evs if e["event"] == "step" and e["phase"] == "end"]
    top = max((e["step"] for e in ends if e[key] <= tf), default=0)
    after = [e for e in ends if e[key] > tf and e["step"] > top]
    if not after:
        return []
    first = min(after, key=lambda e: e[key])
    return [_row("failure", "stall", tf, first[key], rank=first["rank"], step=first["step"],
                 **ep)]


def _episodes_per_replica(evs: list[dict], key: str, spans: list[dict],
                          world_size: int) -> list[dict]:
    """Failure episodes where only the failed rank restarts (its own agent) and the
    others keep their processes (``torchft``): attempts count per rank, so an
    episode is a failing fault's (rank, attempt) and the phases are read on the
    time line:

    ``detect``: fault -> first ``failure`` event of another rank after it (else of
    any rank); ``save``: none (dur 0); ``restart``: the failed process's last event
    -> ``init`` end of the same rank's next attempt; ``restore``: that attempt's
    restore span (``kind`` ``heal``: state from a live replica); ``replay``: 0 when
    the restored step is not behind the steps completed before the fault;
    ``stall``: fault -> first end, on any rank, of a step no rank had completed
    before the fault; ``recovery``: fault -> the end,
    on every rank, of the first step that no rank had completed before the fault.
    """
    rows: list[dict] = []
    failing = sorted(failing_faults(evs), key=lambda e: e[key])
    seen: set[tuple[int, int]] = set()
    for fault in failing:
        r, a = fault["rank"], fault["attempt"]
        if (r, a) in seen:
            continue
        seen.add((r, a))
        i = len(seen) - 1
        tf = fault[key]
        ep = {"failure": i, "attempt": a}
        rows.append(_row("failure", "fault", tf, tf, dur_s=0.0, rank=r, kind=fault["kind"],
                         step=fault["step"], failure=i, attempt=a))
        fails = [e for e in evs if e["event"] == "failure" and e[key] >= tf]
        fails = [e for e in fails if e["rank"] != r] or fails
        if fails:
            first = min(fails, key=lambda e: e[key])
            rows.append(_row("failure", "detect", tf, first[key], rank=first["rank"],
                             trigger=first.get("trigger"), **ep))
        rows.append(_row("failure", "save", None, None, dur_s=0.0, **ep))
        old = [e for e in evs if e["rank"] == r and e["attempt"] == a]
        nxt = [e for e in evs if e["rank"] == r and e["attempt"] == a + 1]
        inits = [e for e in nxt if e["event"] == "init" and e["phase"] == "end"]
        if old and inits:
            rows.append(_row("failure", "restart", max(e[key] for e in old), inits[0][key],
                             rank=r, **ep))
        done_before = max((e["step"] for e in evs if e["event"] == "step"
                           and e["phase"] == "end" and e[key] <= tf), default=0)
        rest = [sp for sp in spans if sp["phase"] == "restore" and sp["rank"] == r
                and sp["attempt"] == a + 1 and sp["ok"]]
        rend = [e for e in nxt if e["event"] == "restore" and e["phase"] == "end"]
        if rest and rend:
            rows.append(_row("failure", "restore", rest[0]["t0"], rest[0]["t1"], rank=r,
                             kind=rend[0].get("kind"), step=rend[0]["step"], **ep))
            t_rest = rest[0]["t1"]
            if done_before - rend[0]["step"] <= 0:
                rows.append(_row("failure", "replay", t_rest, t_rest, dur_s=0.0,
                                 step=done_before, **ep))
        ends: dict[int, dict[int, float]] = defaultdict(dict)
        for e in evs:
            if e["event"] == "step" and e["phase"] == "end" and e[key] > tf:
                ends[e["step"]].setdefault(e["rank"], e[key])
        new = [st for st in ends if st > done_before and len(ends[st]) == world_size]
        if new:
            rows.append(_row("failure", "recovery", tf, max(ends[min(new)].values()),
                             step=min(new), **ep))
    return rows


def derive(evs: list[dict], world_size: int, per_replica: bool = False):
    """The phases table (pandas DataFrame, :data:`COLUMNS`) of a run's events.

    Args:
        evs: the run's events in time order (:func:`read_events`).
        world_size: ranks of the job (a restart is complete when all initialised,
            a step is new progress when all completed it).
        per_replica: only failed ranks restart, the others keep their processes
            (registry ``launcher`` ``torchft``): failure episodes are derived on the
            time line (:func:`_episodes_per_replica`), not by attempt.
    """
    import pandas as pd

    if not evs:
        return pd.DataFrame(columns=list(COLUMNS))
    key = clock(evs)
    rows: list[dict] = []
    by_attempt: dict[int, list[float]] = defaultdict(list)
    for e in evs:
        by_attempt[e["attempt"]].append(e[key])
    for a, ts in sorted(by_attempt.items()):
        rows.append(_row("run", "attempt", min(ts), max(ts), attempt=a))
    spans = _spans(evs, key)
    rows += spans
    eps = (_episodes_per_replica if per_replica else _episodes)(evs, key, spans, world_size)
    for f in [r for r in eps if r["phase"] == "fault"]:
        eps += _stall(evs, key, f["t0"], {"failure": f["failure"], "attempt": f["attempt"],
                                          "gen": f["gen"]})
    rows += eps
    t = pd.DataFrame(rows, columns=list(COLUMNS[:-1]))
    t["clock"] = key
    return t


def write(run_dir: str | Path, table) -> Path:
    """Write ``table`` as ``run_dir/phases.parquet`` and ``phases.csv``; returns the Parquet path."""
    path = Path(run_dir) / PHASES_FILE
    table.to_parquet(path, index=False)
    table.to_csv(path.with_suffix(".csv"), index=False)
    return path


def load(run_dir: str | Path, world_size: int | None = None, per_replica: bool = False):
    """The phases table of a run directory: its ``phases.parquet``, or derived from
    its events when it has none (a run directory written before the table
    existed; ``world_size`` default: the ranks that logged events).

    Returns:
        pandas DataFrame with :data:`COLUMNS` (empty when there are no events).
    """
    import pandas as pd

    path = Path(run_dir) / PHASES_FILE
    if path.is_file():
        return pd.read_parquet(path)
    evs = read_events(run_dir)
    return derive(evs, world_size or len({e["rank"] for e in evs}), per_replica)


def value(v) -> float | int | str | None:
    """A table cell as a Python value: NaN/None -> None, numpy scalars -> Python,
    whole floats of an integer column stay floats (callers convert)."""
    if v is None:
        return None
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and math.isnan(v):
        return None
    return v
