"""Events -> phases, derived once (jitbench.phases)."""

from __future__ import annotations

import json

from jitbench import phases
from jitbench.harness.metrics import compute
from jitbench.reports.plots import timeline_data


def _events(d, attempt, rank, items):
    d.mkdir(parents=True, exist_ok=True)
    with open(d / f"attempt{attempt:03d}_rank{rank:05d}.jsonl", "w") as fh:
        for name, phase, t, extra in items:
            fh.write(json.dumps({"event": name, "phase": phase, "t_wall": t, "t_mono": t,
                                 "rank": rank, "attempt": attempt, "pid": 1, "host": "h",
                                 **extra}) + "\n")


def _run(tmp_path):
    """Rank 1 killed in step 4; rank 0 saves a JIT checkpoint of step 3; restart; the
    restore of step 3 is slower on rank 1; steps 4 and 5 run on both ranks."""
    for rank in (0, 1):
        a0 = [("init", "end", 0.5, {})]
        for s in (1, 2, 3):
            a0 += [("step", "begin", s, {"step": s}), ("step", "end", s + 0.5,
                                                      {"step": s, "dur_s": 0.5})]
        a0.append(("step", "begin", 4.0, {"step": 4}))
        if rank == 1:
            a0.append(("fault", "point", 4.2, {"kind": "kill", "step": 4}))
        else:
            a0 += [("failure", "point", 4.5, {"trigger": "peer"}),
                   ("save", "begin", 4.6, {"kind": "jit", "step": 3}),
                   ("save", "end", 4.9, {"kind": "jit", "step": 3, "ok": True, "part": "p3"})]
        _events(tmp_path / "events", 0, rank, a0)
        _events(tmp_path / "events", 1, rank, [
            ("init", "end", 8.0 + rank, {}), ("restore", "begin", 9.1, {}),
            ("restore", "end", 9.2 + 0.3 * rank, {"step": 3, "kind": "jit"}),
            ("step", "begin", 10.0, {"step": 4}), ("step", "end", 10.5, {"step": 4, "dur_s": 0.5}),
            ("step", "begin", 11.0, {"step": 5}), ("step", "end", 11.5, {"step": 5, "dur_s": 0.5}),
            ("done", "point", 12.0, {"step": 5})])


def test_phases_of_one_failure(tmp_path):
    _run(tmp_path)
    t = phases.derive(phases.read_events(tmp_path), 2)
    f = {r["phase"]: r for r in t[t["scope"] == "failure"].to_dict("records")}
    assert list(f) == ["fault", "detect", "save", "restart", "restore", "replay", "recovery",
                       "stall"]
    assert f["detect"]["dur_s"] == 4.5 - 4.2 and f["detect"]["trigger"] == "peer"
    assert f["save"]["dur_s"] == 4.9 - 4.6 and f["save"]["kind"] == "jit"
    assert f["restart"]["t0"] == 4.9 and f["restart"]["t1"] == 9.0 and f["restart"]["ok"]
    assert f["restore"]["dur_s"] == 9.5 - 9.1 and f["restore"]["step"] == 3
    assert f["replay"]["dur_s"] == 0.0 and f["recovery"]["t1"] == 10.5
    ends = [e["t_mono"] for e in phases.read_events(tmp_path)
            if e["event"] == "step" and e["phase"] == "end" and e["t_mono"] > 4.2]
    assert f["stall"]["t0"] == 4.2 and f["stall"]["t1"] == min(ends)
    # the table is written once and read back the same; metrics read it
    phases.write(tmp_path, t)
    m = compute(tmp_path, 5, 2)
    (fm,) = m.failures
    assert (fm.detect_s, fm.save_s, fm.restore_s) == (f["detect"]["dur_s"],
                                                      f["save"]["dur_s"], f["restore"]["dur_s"])
    assert fm.restart_s == 9.0 - 4.9 and fm.recovery_s == 10.5 - 4.2
    assert fm.replayed_steps == 0 and fm.restored_step == 3 and fm.lost_partial_s == 4.2 - 4.0
    assert m.completed and m.final_step == 5


def test_timeline_reads_the_phases(tmp_path):
    _run(tmp_path)
    d = timeline_data(tmp_path)  # no phases.parquet yet: derived from the events
    assert d["attempts"] == 2 and d["faults"] == [4.2 - 0.5] and d["detect"] == [4.5 - 0.5]
    assert d["saves"] == [(4.6 - 0.5, 4.9 - 0.5, "jit")]
    assert d["restarts"] == [(4.9 - 0.5, 9.0 - 0.5)] and d["restores"] == [(9.1 - 0.5,
                                                                             9.5 - 0.5)]
    assert sorted(s for _, s in d["ranks"][0]) == [1, 2, 3, 4, 5]


def _inprocess_run(tmp_path):
    """Rank 1 killed in step 4 of generation 0; rank 0 decides generation 1 at 4.6, the
    spare joins as rank 1, the boundary of step 3 is broadcast 5.0 -> 5.2; every rank
    adopts it and runs steps 4 and 5 in generation 1 of the same attempt."""
    for rank in (0, 1):
        g0 = [("init", "end", 0.5, {})]
        for s in (1, 2, 3):
            g0 += [("step", "begin", s, {"step": s}),
                   ("step", "end", s + 0.5, {"step": s, "dur_s": 0.5})]
        g0.append(("step", "begin", 4.0, {"step": 4}))
        if rank == 1:
            g0.append(("fault", "point", 4.2, {"kind": "kill", "step": 4}))
        else:
            g0 += [("failure", "point", 4.5, {"trigger": "collective_error"}),
                   ("membership", "begin", 4.5, {}),
                   ("membership", "end", 4.6, {"new_gen": 1, "source": 0, "fallback": None,
                                                  "resume_step": 3})]
        g1 = [("transfer", "begin", 5.0, {"gen": 1, "source": 0}),
              ("transfer", "end", 5.2, {"gen": 1, "source": 0}),
              ("restore", "begin", 5.21, {"gen": 1}),
              ("restore", "end", 5.25, {"gen": 1, "step": 3, "kind": "peer"})]
        for s in (4, 5):
            g1 += [("step", "begin", s + 2.0, {"step": s, "gen": 1}),
                   ("step", "end", s + 2.5, {"step": s, "dur_s": 0.5, "gen": 1})]
        g1.append(("done", "point", 8.0, {"step": 5, "gen": 1}))
        _events(tmp_path / "events", 0, rank, g0 + g1 if rank == 0 else g0)
        if rank == 1:  # the spare that replaced rank 1 writes its own file
            _events(tmp_path / "events_spare", 0, rank, g1)
            (tmp_path / "events_spare" / "attempt000_rank00001.jsonl").rename(
                tmp_path / "events" / "attempt000_rank00001_spare.jsonl")


def test_inprocess_recovery_phases_reach_the_timeline_and_the_phase_bars(tmp_path):
    from jitbench.reports.plots import PHASES, phase_table
    from jitbench.reports.table import summary_table

    _inprocess_run(tmp_path)
    t = phases.derive(phases.read_events(tmp_path), 2)
    f = {r["phase"]: r for r in t[t["scope"] == "failure"].to_dict("records")}
    assert "restart" not in f
    assert (f["reform"]["t0"], f["reform"]["t1"]) == (4.5, 5.0)
    assert (f["transfer"]["t0"], f["transfer"]["t1"]) == (5.0, 5.2)
    d = timeline_data(tmp_path)
    assert d["restarts"] == [] and d["attempts"] == 1
    assert d["reforms"] == [(4.5 - 0.5, 5.0 - 0.5)] and d["transfers"] == [(4.5, 4.7)]
    assert d["restores"] == [(5.21 - 0.5, 5.25 - 0.5)]

    m = compute(tmp_path, 5, 2)
    (fm,) = m.failures
    row = {"workload": "gpt", "fault": "kill", "strategy": "jit-inprocess",
           "recovery_s": fm.recovery_s, **{k: getattr(fm, k, None) for k in PHASES[:-1]}}
    import pandas as pd

    p = phase_table(pd.DataFrame([row])).iloc[0]
    assert p["reform_s"] == 0.5 and abs(p["transfer_s"] - 0.2) < 1e-9 and p["restart_s"] == 0
    assert abs(p[list(PHASES)].sum() - fm.recovery_s) < 1e-9  # the bars add up to recovery

    from rich.console import Console
    con = Console(width=100, record=True)
    con.print(summary_table({"workload": "gpt", "world_size": 2, "strategy": "jit-inprocess",
                             "faults": [{"kind": "kill", "rank": 1, "step": 4}],
                             "reform_s": fm.reform_s, "transfer_s": fm.transfer_s}))
    text = con.export_text()
    assert "reform_s" in text and "transfer_s" in text
    con = Console(width=100, record=True)
    con.print(summary_table({"workload": "gpt", "world_size": 2, "strategy": "jit",
                             "faults": [], "restart_s": 2.0}))
    assert "reform_s" not in con.export_text()  # a whole-job restart shows no such rows



def test_an_in_process_decision_that_no_member_took_is_recovered_by_the_restart(tmp_path):
    """Stress chunk 20's shape: rank 0 killed in step 4; rank 1, hung in its own code,
    decides generation 1 as the source at 4.6 but never re-forms; the newcomer leaves
    at 6.0, a spare finds generation 1 lost at 6.2 and falls back; attempt 1 restores
    the JIT checkpoint of step 3 rank 1 wrote when it failed itself (stuck at 5.0).
    The episode is a whole-job restart (not in process), its fallback reason is the
    lost generation's, and its restart starts when generation 1 was gone."""
    ev = tmp_path / "events"
    g0 = [("init", "end", 0.5, {})]
    for s in (1, 2, 3):
        g0 += [("step", "begin", s, {"step": s}),
               ("step", "end", s + 0.5, {"step": s, "dur_s": 0.5})]
    g0.append(("step", "begin", 4.0, {"step": 4}))
    # the newcomer that took rank 0's place appends to rank 0's file of attempt 0
    _events(ev, 0, 0, g0 + [("fault", "point", 4.1, {"kind": "kill", "step": 4}),
                            ("failure", "point", 6.0, {"trigger": "join_failed", "gen": 1})])
    _events(ev, 0, 1, g0 + [
        ("failure", "compute", 4.5, {"trigger": "hang", "step": 4}),
        ("membership", "end", 4.6, {"new_gen": 1, "source": 1, "fallback": None,
                                     "resume_step": 3, "dead": [0]}),
        ("failure", "point", 5.0, {"trigger": "stuck", "step": 4, "in_phase": "recovery"}),
        ("save", "begin", 5.1, {"kind": "jit", "step": 3}),
        ("save", "end", 5.3, {"kind": "jit", "step": 3, "ok": True, "part": "p3"})])
    _events(ev, 0, -1, [("membership", "end", 6.2, {
        "gen": 1, "new_gen": 2, "source": None, "dead": [0, 1],
        "fallback": "no surviving replica holds a consistent state"})])
    for rank in (0, 1):
        _events(ev, 1, rank, [
            ("init", "end", 8.0, {"gen": 2}),
            ("restore", "begin", 9.0, {"gen": 2}),
            ("restore", "end", 9.2, {"gen": 2, "step": 3, "kind": "jit"}),
            ("step", "begin", 10.0, {"step": 4, "gen": 2}),
            ("step", "end", 10.5, {"step": 4, "dur_s": 0.5, "gen": 2}),
            ("done", "point", 11.0, {"step": 4, "gen": 2})])
    evs = phases.read_events(tmp_path)
    fault = phases.failure_starts(evs)[0]
    cur, nxt, in_process = phases.episode_events(evs, fault)
    assert not in_process
    assert {e["attempt"] for e in nxt} == {1}
    assert max(e["t_mono"] for e in cur) == 6.2  # generation 1's end is the old job's end
    t = phases.derive(evs, 2)
    f = {r["phase"]: r for r in t[t["scope"] == "failure"].to_dict("records")}
    assert (f["restart"]["t0"], f["restart"]["t1"]) == (6.2, 8.0)
    assert f["restore"]["kind"] == "jit" and f["restore"]["step"] == 3
    (fm,) = compute(tmp_path, 4, 2).failures
    assert not fm.in_process
    assert fm.fallback == "no surviving replica holds a consistent state"
    assert fm.restored_step == 3 and fm.replayed_steps == 0

    # a failure of its own in generation 1 (here the newcomer killed at its restore
    # point) is the next episode: the first stays the in-process one it was
    with open(ev / "attempt000_rank00000.jsonl", "a") as fh:
        fh.write(json.dumps({"event": "fault", "phase": "point", "t_wall": 5.9, "t_mono": 5.9,
                             "rank": 0, "attempt": 0, "pid": 2, "host": "h", "gen": 1,
                             "kind": "kill", "step": 4}) + "\n")
    evs = phases.read_events(tmp_path)
    starts = phases.failure_starts(evs)
    assert [phases.gen_of(e) for e in starts] == [0, 1]
    assert phases.episode_events(evs, starts[0])[2] is True
    assert phases.episode_events(evs, starts[1])[2] is False

def test_a_write_fault_absorbed_by_a_background_writer_is_no_failure(tmp_path):
    """jit-inprocess: the backstop write after a recovery fails (EIO) and training goes
    on; that fault starts no failure episode. A fault followed by a failure does."""
    from jitbench.phases import failing_faults

    evs = [{"event": "fault", "phase": "point", "t_mono": 1.0, "attempt": 0, "gen": 1,
            "rank": 0, "kind": "eio", "step": 5},
           {"event": "save", "phase": "end", "t_mono": 1.1, "attempt": 0, "gen": 1,
            "rank": 0, "ok": False},
           {"event": "step", "phase": "end", "t_mono": 1.5, "attempt": 0, "gen": 1,
            "rank": 0, "step": 5}]
    assert failing_faults(evs) == []
    evs.append({"event": "failure", "phase": "point", "t_mono": 1.6, "attempt": 0, "gen": 1,
                "rank": 1, "trigger": "collective_error"})
    assert failing_faults(evs) == [evs[0]]
    kill = [{"event": "fault", "phase": "point", "t_mono": 1.0, "attempt": 0, "rank": 1,
             "kind": "kill", "step": 3},
            {"event": "step", "phase": "end", "t_mono": 1.2, "attempt": 0, "rank": 0,
             "step": 3}]
    assert failing_faults(kill) == [kill[0]]  # its rank never went on


def test_a_slower_rank_finishing_an_old_step_after_the_fault_is_no_stall_end(tmp_path):
    """Rank 0 is killed in step 4 at 4.2 while rank 1 is still finishing step 3 (ends
    4.25): that is no progress after the fault, so the stall runs to the first end of
    step 4 after the restart (a new-user trial saw stall_s 0.01 s for a 28 s stall)."""
    ev = tmp_path / "events"
    for rank in (0, 1):
        a0 = [("init", "end", 0.5, {})]
        for s in (1, 2, 3):
            end = s + 0.5 + (0.75 if rank == 1 and s == 3 else 0.0)
            a0 += [("step", "begin", s, {"step": s}),
                   ("step", "end", end, {"step": s, "dur_s": end - s})]
        if rank == 0:
            a0 += [("step", "begin", 4.0, {"step": 4}),
                   ("fault", "point", 4.2, {"kind": "kill", "step": 4})]
        _events(ev, 0, rank, a0)
        _events(ev, 1, rank, [
            ("init", "end", 8.0, {}), ("restore", "begin", 9.0, {}),
            ("restore", "end", 9.1, {"step": 3, "kind": "jit"}),
            ("step", "begin", 10.0, {"step": 4}),
            ("step", "end", 10.5 + 0.1 * rank, {"step": 4, "dur_s": 0.5})])
    t = phases.derive(phases.read_events(tmp_path), 2)
    f = {r["phase"]: r for r in t[t["scope"] == "failure"].to_dict("records")}
    assert (f["stall"]["t0"], f["stall"]["t1"], f["stall"]["step"]) == (4.2, 10.5, 4)
