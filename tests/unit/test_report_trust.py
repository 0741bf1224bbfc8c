"""Findings of a second new-user trial of the reports: an empty flag drawn as a failed
check, ``model --from-results`` dropping runs whose reference (not the run) was
stopped, the ``failures.csv`` check reading the recorded path instead of the directory
given, conclusions a row's own figures refute (``state_equal`` over a difference,
``completed`` short of its steps, ``replay_ok`` over no replay, replayed steps that
are not the sum of the failures'), a blank ``spec_json`` beside a hash, and
``failures.csv`` counts written as floats or as 0 where nothing was measured.
Fixture tables and directories only: nothing is launched."""

from __future__ import annotations

import json
import math
import shutil

import pandas as pd
import pytest

from jitbench import records
from jitbench.errors import ExitStatus, InputError
from jitbench.records import check_cells, load_results
from jitbench.reports.evidence import check_evidence
from jitbench.reports.modelcmd import harness_stopped_rows
from jitbench.reports.table import (
    MARKDOWN,
    REPORT,
    RESULT_COLUMNS,
    TERMINAL,
    cell,
    good,
    markdown_table,
    truth,
)
from tests.conftest import one_line
from tests.unit.test_evidence import _row, _set, _sweep

EMPTY = [None, math.nan, pd.NA, "", "  "]

# -- 1. an empty flag (never compared) is a dash, unmarked ---------------------------


@pytest.mark.parametrize("v", EMPTY)
def test_an_empty_flag_is_a_dash_and_neither_good_nor_bad(v):
    state = next(c for c in RESULT_COLUMNS if c.name == "state_equal")
    replayed = next(c for c in RESULT_COLUMNS if c.name == "replayed_steps")
    row = {"state_equal": v, "replay_ok": v, "replayed_steps": 0, "bitwise_promised": True}
    assert truth(v) is None
    for symbols in (TERMINAL, REPORT, MARKDOWN):
        assert cell(state, row, symbols) == symbols["none"]
    assert good(state, row) is None and good(replayed, row) is None
    assert cell(state, {"state_equal": True}, REPORT) == "✓"
    assert good(state, {"state_equal": False}) is False
    assert good(state, {"state_equal": "false"}) is False  # a flag spelled as text
    md = markdown_table([{"workload": "gpt", "strategy": "jit", "fault": "kill",
                          "repeat": 0, **row}], RESULT_COLUMNS)
    assert "✗" not in md and md.splitlines()[-1].split("|")[-3].strip() == "–"


def test_the_report_of_runs_never_compared_marks_nothing_bad(jb, tmp_path):
    # the reference was cut short: state_equal empty, replay_ok still judged
    sw = _sweep(tmp_path, _set(state_equal=[None] * 4))
    code, err = jb("report", str(sw))
    assert code == 0, err
    html = (sw / "report.html").read_text()
    md = (sw / "report.md").read_text()
    assert "✗" not in html and "✗" not in md
    assert 'class="bad"' not in html and 'class="v bad"' not in html
    assert '<div class="v ">–</div><div class="k">state_equal</div>' in html


# -- 2. model --from-results: harness_stopped decides where it is recorded -----------


def test_harness_stopped_decides_per_row_and_the_old_columns_only_stand_in():
    t = pd.DataFrame({
        "harness_stopped": [False, "false", True, None, None, math.nan],
        "timed_out": [True, True, False, True, False, False],   # the reference's
        "interrupted": [True, False, False, False, True, False]})
    assert harness_stopped_rows(t).tolist() == [False, False, True, True, True, False]
    old = t.drop(columns="harness_stopped")
    assert harness_stopped_rows(old).tolist() == [True, True, False, True, True, False]


def test_model_keeps_a_run_whose_reference_was_stopped(jb, tmp_path):
    sw = _sweep(tmp_path, _set(harness_stopped=[False] * 4, timed_out=[True] * 4,
                               interrupted=[False, True, False, False]))
    code, err = jb("model", "--trials", "1", "--from-results", str(sw), "--out",
                   str(tmp_path / "m"), "--json")
    assert code == 0, err
    assert "left out" not in err


# -- 3. num_failures against the failures.csv of the directory given -----------------


def _run(d, n_failures: int, recorded: str | None = None):
    """A run directory: records (``run_dir`` recorded as ``recorded``, default ``d``),
    summary and a ``failures.csv`` of ``n_failures`` rows."""
    d.mkdir(parents=True)
    row = {**_row("jit", 0, recorded or str(d)), "num_failures": n_failures,
           "replayed_steps": 0, "expected_replayed_steps": 0,
           "max_replayed_steps_per_failure": 0}
    for k in ("fault", "repeat", "results_version", "spec_hash", "spec_json"):
        row.pop(k)
    row["faults"] = "kill@1:14"
    pd.DataFrame([row]).to_csv(d / "records.csv", index=False)
    (d / "summary.json").write_text(json.dumps(row))
    pd.DataFrame([{"run_dir": str(d), "attempt": a, "replayed_steps": 0}
                  for a in range(n_failures)]).to_csv(d / "failures.csv", index=False)
    return d


def _check(path):
    check_evidence(load_results(path, require=()), str(path), path)


def test_a_copied_run_is_checked_against_its_own_failures_csv(tmp_path, monkeypatch):
    orig = _run(tmp_path / "orig", 3)
    _check(orig)
    cut = tmp_path / "cut"
    shutil.copytree(orig, cut)
    f = pd.read_csv(cut / "failures.csv")
    f.head(2).to_csv(cut / "failures.csv", index=False)
    assert records.run_dirs(load_results(cut), cut) == [cut]
    with pytest.raises(InputError, match=r"num_failures is 3 but .*cut/failures.csv has 2 rows"):
        _check(cut)
    with pytest.raises(InputError, match="num_failures is 3"):
        _check(cut / "records.csv")  # the table file of the run directory: the same
    (cut / "failures.csv").unlink()
    with pytest.raises(InputError, match=r"failures.csv has 0 rows \(it is missing\)"):
        _check(cut)
    # a relative recorded path that the working directory happens to hold is not read
    rel = _run(tmp_path / "rel", 1, recorded="runs/x")
    (rel / "failures.csv").unlink()
    _run(tmp_path / "runs" / "x", 1)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError, match="it is missing"):
        _check(rel)


def test_a_moved_sweep_and_a_tree_of_runs_are_read_where_they_lie(tmp_path):
    sw = _sweep(tmp_path / "a")
    moved = tmp_path / "b"
    shutil.copytree(sw, moved)  # results.csv still records a/sw/runs/...
    victim = moved / "runs" / "gpt-periodic_5-kill-s0-r1" / "failures.csv"
    victim.unlink()
    with pytest.raises(InputError, match=r"row 4 .*num_failures is 1 but .*b/runs/.* missing"):
        _check(moved)
    _check(sw)  # the original is intact
    tree = tmp_path / "tree"
    _run(tree / "one", 1)
    _run(tree / "two", 2, recorded=str(tmp_path / "elsewhere"))
    assert records.run_dirs(load_results(tree), tree) == [tree / "one", tree / "two"]
    _check(tree)
    pd.read_csv(tree / "two" / "failures.csv").head(1).to_csv(tree / "two" / "failures.csv",
                                                              index=False)
    with pytest.raises(InputError, match=r"row 2 .*num_failures is 2 but .*two/failures.csv"):
        _check(tree)


# -- 4. conclusions the row's own figures refute --------------------------------------


def _refusals(jb, sw, good) -> list[str]:
    """The one line each of gate, validate, report and model --from-results refuses
    sweep ``sw`` with (asserting exit 2)."""
    lines = []
    for args in (("gate", "--baseline", str(good), str(sw)), ("validate", str(sw)),
                 ("report", str(sw)), ("model", "--trials", "1", "--from-results", str(sw))):
        code, err = jb(*args)
        assert code == ExitStatus.INPUT, (args, err)
        lines.append(one_line(err))
    return lines


def _per_failure_replayed(sw, values):
    """Give each run's failures.csv a ``replayed_steps`` column (one value per run)."""
    for d, v in zip(sorted((sw / "runs").iterdir()), values, strict=True):
        pd.DataFrame([{"run_dir": str(d), "attempt": 0, "replayed_steps": v}]).to_csv(
            d / "failures.csv", index=False)


@pytest.mark.parametrize("edit, field", [
    (_set(max_abs_diff=[0.0, 0.5, 0.0, 0.0]), "state_equal is true but max_abs_diff is 0.5"),
    (_set(max_abs_diff=[0.0, math.inf, 0.0, 0.0]), "state_equal is true but max_abs_diff is inf"),
    (_set(loss_diff=[0.0, 0.0, -0.25, 0.0]), "state_equal is true but loss_diff is -0.25"),
    (_set(steps=[24] * 4, final_step=[24, 10, 24, 24]),
     "completed is true but final_step 10 is short of the 24 planned steps"),
    (_set(final_step=[24, 24, 24, 9]),  # no steps column: the spec's
     "completed is true but final_step 9 is short of the 24 planned steps"),
    (_set(replayed_steps=[1, None, 4, 4]), "replay_ok is true but replayed_steps is empty"),
    ("per-failure", "replayed_steps is 1 but the per-failure replayed_steps of"),
])
def test_a_row_whose_figures_refute_its_conclusion_is_refused(jb, tmp_path, edit, field):
    sw = _sweep(tmp_path, None if edit == "per-failure" else edit)
    if edit == "per-failure":  # jit claims 1 replayed step, its failures.csv says 0
        _per_failure_replayed(sw, [0, 1, 4, 4])
    for line in _refusals(jb, sw, _sweep(tmp_path / "good")):
        assert field in line and "row " in line and "gpt/" in line, line
        assert "contradicts its evidence" in line, line


@pytest.mark.parametrize("edit", [
    _set(max_abs_diff=[0.5] * 4, bitwise_promised=[False] * 4),  # no bitwise promise
    _set(max_abs_diff=[0.5] * 4, state_equal=[None] * 4),  # never compared
    _set(replayed_steps=[None] * 4, replay_promised=[False] * 4),
    _set(replayed_steps=[None] * 4, replay_ok=[None] * 4),  # never recovered
    _set(drop=("replayed_steps",)),  # an older table without the column
    _set(steps=[24] * 4, final_step=[10] * 4, completed=[False] * 4),
])
def test_what_promises_or_claims_nothing_is_left_alone(tmp_path, edit):
    sw = _sweep(tmp_path, edit)
    _per_failure_replayed(sw, [1, 1, 4, 4])  # the sums the rows record
    _check(sw)


def test_the_committed_benchmark_tables_still_pass(jb):
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "benchmarks"
    code, err = jb("gate", "--baseline", str(root / "baseline-cpu.csv"),
                   str(root / "baseline-cpu.csv"), "--allow-missing-evidence")  # no runs
    assert code == 0, err
    for name in ("baseline-cpu.csv", "peers-cpu.csv"):
        _check(root / name)


# -- 5. an empty spec_json beside a spec_hash ----------------------------------------


def test_an_empty_spec_json_beside_its_hash_is_refused_everywhere(jb, tmp_path):
    sw = _sweep(tmp_path, lambda t: t.__setitem__(
        "spec_json", [t["spec_json"][0], "", *t["spec_json"][2:]]))
    for line in _refusals(jb, sw, _sweep(tmp_path / "good")):
        assert "row 2 (gpt/jit/kill repeat 1): spec_json is empty beside spec_hash" in line, line
        assert "nan" not in line, line
    # without a hash an empty spec is an older table's: accepted
    t = pd.DataFrame([{"workload": "gpt", "strategy": "jit", "spec_json": None,
                       "spec_hash": None}])
    check_cells(t)


def test_the_gate_names_an_empty_spec_json_empty(jb, tmp_path):
    sw = _sweep(tmp_path, _set(spec_json=[""] * 4, spec_hash=[""] * 4))
    code, err = jb("gate", "--baseline", str(sw), str(sw))
    assert code == ExitStatus.INPUT, err
    line = one_line(err)
    assert "spec_json is empty, not a run spec" in line and "nan" not in line, line


# -- 6. failures.csv: whole counts as integers, empty where not measured ---------------


def test_failures_csv_writes_counts_as_integers(tmp_path):
    from jitbench.faults import FaultSpec
    from jitbench.harness.launch import LaunchResult
    from jitbench.harness.run import summarize, write_records
    from jitbench.harness.spec import RunSpec
    from jitbench.records import load_failures
    from jitbench.workloads import WorkloadConfig
    from tests.unit.test_run_trial import _every_attempt_run

    _every_attempt_run(tmp_path)
    spec = RunSpec(workload=WorkloadConfig(steps=12), faults=[FaultSpec("kill", 1, 4)])
    s = summarize(spec, tmp_path, LaunchResult(1, 9.0), None)
    write_records(s, tmp_path)
    raw = pd.read_csv(tmp_path / "failures.csv", dtype=str, keep_default_na=False)
    for col in ("restored_step", "replayed_steps", "replayed_gpu_steps", "completed_before",
                "last_commit_step", "expected_replayed_steps", "attempt", "fault_step"):
        assert not any("." in v for v in raw[col]), (col, raw[col].tolist())
    assert raw["restored_step"].tolist() == ["3", "3", ""]
    f = load_failures(tmp_path)
    assert f["restored_step"].tolist()[:2] == [3, 3] and math.isnan(f["restored_step"][2])
    assert f["replayed_steps"].tolist()[:2] == [0, 0]
    # an older file's 3.0 reads as the same number
    old = f.assign(restored_step=[3.0, 3.0, None])
    old.to_csv(tmp_path / "failures.csv", index=False)
    assert load_failures(tmp_path)["restored_step"].tolist()[:2] == [3, 3]


def test_a_stopped_failure_that_never_recovered_measured_no_replay(tmp_path):
    from jitbench.harness.run import write_records
    from tests.unit.test_run_trial import _hang_run, _summarize_hang

    _hang_run(tmp_path)
    s = _summarize_hang(tmp_path)
    (f,) = s["failures"]
    assert f["harness_stopped"] is True
    assert f["replayed_steps"] is None and f["expected_replayed_steps"] is None
    assert s["replayed_steps"] is None and s["expected_replayed_steps"] is None
    assert s["replayed_gpu_steps"] is None and s["max_replayed_steps_per_failure"] is None
    write_records(s, tmp_path)
    row = pd.read_csv(tmp_path / "failures.csv").iloc[0]
    assert math.isnan(row["replayed_steps"]) and math.isnan(row["expected_replayed_steps"])
    assert row["completed_before"] == 3
    rec = pd.read_csv(tmp_path / "records.csv").iloc[0]
    assert math.isnan(rec["replayed_steps"]) and math.isnan(rec["expected_replayed_steps"])
    _check(tmp_path)  # the record and its failures.csv agree
