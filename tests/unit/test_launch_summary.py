"""``jitbench launch``'s summary against the README: its recovery decisions (the same
:func:`jitbench.harness.run.decisions` as ``run``), why ``sample_stream_equal`` is empty,
and what its table says ``restore_s`` measured. Synthetic events; nothing is launched."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from jitbench.faults import FaultSpec
from jitbench.harness.launch import LaunchResult
from jitbench.harness.script import ScriptSpec, summarize
from jitbench.records import SCHEMA
from jitbench.reports.table import VALUE_WIDTH, summary_table

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "ddp_tutorial.py")


def _events(d: Path, attempt: int, rank: int, items) -> None:
    d.mkdir(parents=True, exist_ok=True)
    with open(d / f"attempt{attempt:03d}_rank{rank:05d}.jsonl", "a") as fh:
        for name, phase, t, extra in items:
            fh.write(json.dumps({"event": name, "phase": phase, "t_wall": 1000.0 + t,
                                 "t_mono": 1000.0 + t, "rank": rank, "attempt": attempt,
                                 "pid": 1 + attempt, "host": "h", **extra}) + "\n")


def _steps(first: int, last: int, t0: float) -> list:
    out = []
    for i, s in enumerate(range(first, last + 1)):
        out += [("step", "begin", t0 + i, {"step": s}),
                ("step", "end", t0 + i + 0.5, {"step": s, "dur_s": 0.5})]
    return out


def _killed_and_restarted(run: Path) -> None:
    """2 ranks: steps 1-3, rank 1 killed in step 4, no JIT checkpoint written; the
    restart begins at step 0 (the script restores nothing) and runs steps 1-6."""
    for rank in (0, 1):
        a0 = [("init", "end", 0.5, {}), ("restore", "begin", 0.6, {}),
              ("restore", "end", 0.9, {"step": 0, "kind": None}), *_steps(1, 3, 1.0),
              ("step", "begin", 4.0, {"step": 4})]
        a0 += ([("fault", "point", 4.2, {"kind": "kill", "step": 4, "fault_id": "kill@1:4"})]
               if rank == 1 else
               [("failure", "point", 4.5, {"trigger": "collective_error", "step": 4})])
        _events(run / "events", 0, rank, a0)
        _events(run / "events", 1, rank, [
            ("init", "end", 8.0, {}), ("restore", "begin", 8.1, {}),
            ("restore", "end", 9.0, {"step": 0, "kind": None}), *_steps(1, 6, 10.0),
            ("done", "point", 17.0, {"step": 6})])


def _fault_free(run: Path) -> None:
    for rank in (0, 1):
        _events(run / "events", 0, rank, [
            ("init", "end", 0.5, {}), ("restore", "begin", 0.6, {}),
            ("restore", "end", 0.9, {"step": 0, "kind": None}), *_steps(1, 6, 1.0),
            ("done", "point", 8.0, {"step": 6})])


def _spec(strategy: str, faults: bool = True) -> ScriptSpec:
    return ScriptSpec(script=EXAMPLE, strategy=strategy, nproc=2,
                      faults=[FaultSpec("kill", 1, 4)] if faults else [])


def _table_rows(summary: dict) -> dict[str, str]:
    """``metric -> what it measures`` of the summary's table as printed."""
    t = summary_table(summary)
    names, docs = t.columns[0]._cells, t.columns[3]._cells
    Console(width=200, file=io.StringIO()).print(t)  # it renders
    return dict(zip(names, docs, strict=True))


@pytest.mark.parametrize("strategy", ["own", "jit"])
def test_a_launch_keeps_its_recovery_decisions_like_run(tmp_path, strategy):
    """README (Metrics): every recovery decision is one line under the table and in
    ``decisions``; a launch gets them from run's function, so under ``jit`` a failure
    whose JIT checkpoint was lost says so and what was restored instead."""
    _killed_and_restarted(tmp_path)
    s = summarize(_spec(strategy), tmp_path, LaunchResult(0, 20.0), None)
    assert "decisions" in s and isinstance(s["decisions"], list)
    if strategy == "jit":
        assert s["decisions"] == [s["failures"][0]["fallback"]]
        assert s["decisions"][0].startswith("no JIT checkpoint survived the failure at step 4")
        assert "a fresh start" in s["decisions"][0]
    else:  # the script's own recovery: jitbench decided nothing
        assert s["decisions"] == []


def test_a_fault_free_jit_launch_says_no_checkpoint_was_needed(tmp_path):
    """The decision line of ``run``, without the ``--final-checkpoint`` that launch lacks."""
    _fault_free(tmp_path)
    s = summarize(_spec("jit", faults=False), tmp_path, LaunchResult(0, 10.0), None)
    assert s["decisions"] == ["no checkpoint was needed: jit writes one only when a peer fails"]


def test_the_decisions_are_printed_under_the_launch_table(tmp_path, capsys):
    from jitbench.cli.run import show_summary

    _fault_free(tmp_path)
    s = summarize(_spec("jit", faults=False), tmp_path, LaunchResult(0, 10.0), None)
    show_summary(s, tmp_path, as_json=False)
    assert "no checkpoint was needed: jit writes one only" in capsys.readouterr().out


@pytest.mark.parametrize("strategy", ["own", "jit"])
def test_a_launch_says_why_its_sample_stream_is_not_compared(tmp_path, strategy):
    _killed_and_restarted(tmp_path)
    s = summarize(_spec(strategy), tmp_path, LaunchResult(0, 20.0), None)
    assert s["sample_stream_equal"] is None
    reason = s["sample_stream_reason"]
    assert reason and "not compared" in reason and "launched script" in reason
    # no reference compared here: the reason does not point at a loss comparison
    assert s["loss_equal"] is None and "loss_equal" not in reason
    rows = _table_rows(s)  # the reason the empty cell's label points to is in the table
    assert "sample_stream_reason" in rows and "loss_equal" not in rows
    # with a reference compared, the reason names loss_equal: the table shows its row
    compared = {**s, "loss_equal": False,
                "sample_stream_reason": reason + "; loss_equal compares its per-step losses"}
    t = summary_table(compared)
    names, values = t.columns[0]._cells, t.columns[1]._cells
    assert "loss_equal" in names and values[names.index("loss_equal")] == "false"


@pytest.mark.parametrize("strategy, words", [
    ("own", "process group ready -> its first step"),
    ("jit", "process group ready -> the fast-forward's load of the JIT checkpoint"),
])
def test_the_launch_table_says_what_restore_s_measured(tmp_path, strategy, words):
    """README (launch): ``restore_s`` of a launched script is its restore from the
    process group's creation, not a checkpoint load of jitbench's."""
    _killed_and_restarted(tmp_path)
    s = summarize(_spec(strategy), tmp_path, LaunchResult(0, 20.0), None)
    doc = _table_rows(s)["restore_s"]
    assert words in doc and "checkpoint load begin -> end" not in doc
    run_doc = next(f.doc for f in SCHEMA if f.name == "restore_s")  # run's keeps its own
    assert _table_rows({k: v for k, v in s.items() if k != "script"})["restore_s"] == run_doc


def test_the_summary_table_folds_long_values(tmp_path):
    """A new-user trial: a long ``sample_stream_reason`` made the table as wide as the
    reason."""
    _fault_free(tmp_path)
    s = summarize(_spec("jit", faults=False), tmp_path, LaunchResult(0, 10.0), None)
    reason = "not comparable: " + "x " * 200
    s.update(sample_stream_equal=None, sample_stream_reason=reason,
             end_reason="rank 0 failed: " + "y " * 150)
    buf = io.StringIO()
    Console(width=1000, file=buf).print(summary_table(s))
    lines = buf.getvalue().splitlines()
    widest_doc = max(len(f.doc) for f in SCHEMA)
    assert max(len(x) for x in lines) <= 22 + VALUE_WIDTH + 8 + widest_doc + 16
    text = " ".join(x.split("│")[2].strip() for x in lines if x.count("│") >= 4)
    assert "x x x" in text and text.count("x") >= 200  # folded, not cut


# -- the reference and the harness's stop follow run's rules ---------------------------


def _with_final(run: Path) -> None:
    import torch

    (run / "final").mkdir(parents=True, exist_ok=True)
    torch.save({"w": torch.ones(3)}, run / "final" / "state.pt")


def _finished_with_reference(tmp_path: Path) -> tuple[Path, Path]:
    """A fault-free launch and its reference, both finished with the same final state
    (a reference cut short keeps whatever state it wrote: never compared)."""
    run, ref = tmp_path / "run", tmp_path / "run" / "reference"
    for d in (run, ref):
        _fault_free(d)
        _with_final(d)
    return run, ref


@pytest.mark.parametrize("cut, phrase", [
    ("interrupted", "interrupted (Ctrl-C or SIGTERM)"),
    ("timed_out", "stopped by the harness: --timeout-s 8 s ran out (launch stopped after 9.0 s)"),
    ("failed", "stopped by a failure (agent exit 1)"),
    ("stop mark", "interrupted (Ctrl-C or SIGTERM)"),
    ("not started", "not started (Ctrl-C or SIGTERM came first)"),
])
@pytest.mark.parametrize("strategy", ["own", "jit"])
def test_a_launch_reference_cut_short_is_named_and_never_compared(tmp_path, cut, phrase,
                                                                   strategy):
    """A new-user trial: launch's summary had no ``reference_complete`` or
    ``reference_cut_short``, said ``completed`` and compared a stopped reference whose
    ``final/state.pt`` existed. Now as run's: the same keys and words."""
    from jitbench.harness.launch import STOP_FILE
    from jitbench.harness.run import summarize as run_summarize

    run, ref_dir = _finished_with_reference(tmp_path)
    ref = {"interrupted": LaunchResult(-15, 9.0, True),
           "timed_out": LaunchResult(-15, 9.0, timed_out=True),
           "failed": LaunchResult(1, 9.0), "stop mark": LaunchResult(0, 9.0),
           "not started": None}[cut]
    if cut == "stop mark":  # a reference directory the harness stopped (--reference-dir)
        (ref_dir / STOP_FILE).write_text(json.dumps({"why": "interrupt", "t_wall": 8.0,
                                                     "t_mono": 8.0}))
    s = summarize(_spec(strategy, faults=False), run, LaunchResult(0, 10.0), ref,
                  timeout_s=8.0, ref_skipped=cut == "not started")
    assert s["completed"] and s["reference_complete"] is False
    assert s["reference_cut_short"] == phrase
    assert s["state_equal"] is None and s["max_abs_diff"] is None and s["loss_equal"] is None
    assert s["end_reason"].startswith("completed; the fault-free reference was " + phrase)
    assert s["end_reason"].endswith("so the final states were not compared")
    assert "reference_dir" not in s
    # run's summary of the same directories says the same
    from jitbench.harness.spec import RunSpec
    from jitbench.workloads import WorkloadConfig

    r = run_summarize(RunSpec(workload=WorkloadConfig(steps=6)), run, LaunchResult(0, 10.0),
                      ref, timeout_s=8.0, ref_skipped=cut == "not started")
    for k in ("reference_complete", "reference_cut_short", "end_reason", "state_equal"):
        assert s[k] == r[k], k


@pytest.mark.parametrize("strategy", ["own", "jit"])
def test_a_complete_launch_reference_is_compared(tmp_path, strategy):
    run, ref_dir = _finished_with_reference(tmp_path)
    s = summarize(_spec(strategy, faults=False), run, LaunchResult(0, 10.0),
                  LaunchResult(0, 9.0, late_interrupt=True))
    assert s["reference_complete"] is True and s["reference_cut_short"] is None
    assert s["state_equal"] is True and s["max_abs_diff"] == 0.0
    assert s["end_reason"] == "completed" and s["reference_dir"] == str(ref_dir)
    assert s["harness_stopped"] is False and s["timeout_s"] is None


def test_the_exit_line_of_a_launch_names_its_interrupted_reference(tmp_path):
    from jitbench.cli.run import outcome_status
    from jitbench.errors import ExitStatus

    run, _ = _finished_with_reference(tmp_path)
    s = summarize(_spec("own", faults=False), run, LaunchResult(0, 10.0),
                  LaunchResult(-15, 3.0, True))
    s["interrupted"] = True
    status, line = outcome_status(s, "own", run, None)
    assert status == ExitStatus.INTERRUPTED
    assert line == ("interrupted (the run completed; the fault-free reference was interrupted "
                    "(Ctrl-C or SIGTERM) before its end, so the final states were not "
                    f"compared); records kept in {run}")


def _stopped_during_restart(run: Path) -> None:
    """2 ranks: steps 1-3, rank 1 killed in step 4, rank 0 declares it (collective
    error, t 4.5); the harness stops the launch during the restart (t 6.0, its
    ``harness_stop.json``) and rank 0 declares the stop's SIGTERM (t 6.5)."""
    for rank in (0, 1):
        a0 = [("process", "point", 0.1, {"world_size": 2}), ("init", "end", 0.5, {}),
              ("restore", "begin", 0.6, {}), ("restore", "end", 0.9, {"step": 0, "kind": None}),
              *_steps(1, 3, 1.0), ("step", "begin", 4.0, {"step": 4})]
        a0 += ([("fault", "point", 4.2, {"kind": "kill", "step": 4, "fault_id": "kill@1:4"})]
               if rank == 1 else
               [("failure", "point", 4.5, {"trigger": "collective_error", "step": 4}),
                ("failure", "point", 6.5, {"trigger": "sigterm", "step": 4})])
        _events(run / "events", 0, rank, a0)
    (run / "harness_stop.json").write_text(json.dumps({"why": "interrupt", "t_wall": 1006.0,
                                                       "t_mono": 1006.0}))


@pytest.mark.parametrize("strategy", ["own", "jit"])
def test_a_launch_the_harness_stopped_records_harness_stopped(tmp_path, strategy):
    """A new-user trial: launch never applied the stop (metrics without it, no
    ``harness_stopped``), so failures.csv said harness_stopped False and
    expected_replayed_steps 3 (own) or 0 (jit) for a failure that never recovered."""
    import pandas as pd

    from jitbench.harness.run import write_records

    _stopped_during_restart(tmp_path)
    s = summarize(_spec(strategy), tmp_path, LaunchResult(-15, 7.0, True), None)
    assert s["harness_stopped"] is True and not s["completed"]
    assert s["end_reason"] == "stopped by the harness: interrupted (Ctrl-C or SIGTERM)"
    assert s["num_failures"] == 1 and s["trigger"] == "collective_error"  # not the stop's
    f = s["failures"][0]
    assert f["harness_stopped"] is True and f["expected_replayed_steps"] is None
    assert f["replayed_steps"] is None
    assert s["expected_replayed_steps"] is None and s["replayed_steps"] is None
    write_records(s, tmp_path)
    row = pd.read_csv(tmp_path / "failures.csv").iloc[0]
    assert bool(row["harness_stopped"]) is True
    assert pd.isna(row["expected_replayed_steps"]) and pd.isna(row["replayed_steps"])


def test_run_script_keeps_a_stopped_reference_out_of_the_comparison(tmp_path, monkeypatch):
    """run_script end to end with fake launches: the reference's launch was stopped by
    Ctrl-C though it had written its final state (the trial's L4): not compared, and
    the summary on disk says why."""
    from jitbench.harness import script

    def execute(spec, run_dir, progress=None, timeout_s=None):
        run_dir = Path(run_dir)
        _fault_free(run_dir)
        _with_final(run_dir)
        stopped = run_dir.name == "reference"
        return LaunchResult(-15 if stopped else 0, 5.0, interrupted=stopped,
                            log_path=run_dir / "agent.log")

    monkeypatch.setattr(script, "execute", execute)
    out = script.run_script(_spec("own"), tmp_path / "run", timeout_s=30.0)
    on_disk = json.loads((tmp_path / "run" / "summary.json").read_text())
    for s in (out.summary, on_disk):
        assert s["reference_complete"] is False
        assert s["reference_cut_short"] == "interrupted (Ctrl-C or SIGTERM)"
        assert s["state_equal"] is None and s["interrupted"] is True
        assert s["late_interrupt"] is False and s["timeout_s"] == 30.0
