"""A results row is checked against every source that determines it (new-user trial on
hand-edited sweep tables): the columns its ``spec_json`` determines, its reference
(a comparison beside a reference cut short), its run's own ``summary.json`` and the
per-failure phases of its ``failures.csv``. A contradiction is refused in one line
naming the row, the column and both values (exit 2, as the other evidence
refusals), never judged as a result: a ``strategy`` edited from jit to none is not
modelled as none, a ``state_equal`` flipped to false is not a VIOLATION (exit 4).
The gate's violation lines print no ``nan``, and the report says per row why a run
was stopped or its state not compared. Fixture tables only: nothing is launched.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from jitbench.errors import ExitStatus, InputError
from jitbench.records import load_results
from jitbench.reports import gate as g
from jitbench.reports.evidence import check_evidence, spec_columns
from tests.unit.test_evidence import CFG, _row, _set, _sweep
from tests.unit.test_report_trust import _refusals

CUT = "interrupted (Ctrl-C or SIGTERM)"


def _edit_table(sw, row: int, **cols) -> None:
    """Edit the sweep's results.csv and .parquet alike (the run's records untouched)."""
    for name in ("results.csv", "results.parquet"):
        f = sw / name
        t = pd.read_csv(f) if f.suffix == ".csv" else pd.read_parquet(f)
        for col, value in cols.items():
            t[col] = t[col].astype(object)
            t.loc[row, col] = value
        t.to_csv(f, index=False) if f.suffix == ".csv" else t.to_parquet(f, index=False)


# -- (a) the columns spec_json determines ----------------------------------------------


def test_spec_columns_are_what_the_run_summary_writes():
    from dataclasses import asdict

    cols = spec_columns(json.loads(json.dumps(asdict(CFG.spec("gpt", "jit", "kill", 3)))))
    assert cols["strategy"] == "jit" and cols["workload"] == "gpt" and cols["seed"] == 3
    assert cols["world_size"] == 2 and cols["steps"] == 24 and cols["fault"] == "kill"
    assert cols["faults"].startswith("kill@")
    assert spec_columns({"steps": 8, "nproc": 2}) == {"world_size": 2}  # what it holds


@pytest.mark.parametrize("edit, field", [
    (_set(strategy=["jit", "none", "periodic:5", "periodic:5"]),
     "strategy is 'none' but its spec_json says 'jit'"),
    (_set(world_size=[2, 2, 2, 8]), "world_size is 8 but its spec_json says 2"),
    (_set(seed=[0, 0, 5, 0]), "seed is 5 but its spec_json says 0"),
    (_set(steps=[24, 24, 24, 12]), "steps is 12 but its spec_json says 24"),
])
def test_a_column_its_spec_contradicts_is_refused(jb, tmp_path, edit, field):
    sw = _sweep(tmp_path, edit)  # the runs' summaries say so too: only the spec refutes it
    for line in _refusals(jb, sw, _sweep(tmp_path / "good")):
        assert field in line and "row " in line and "contradicts its evidence" in line, line


def test_an_empty_spec_column_is_not_recorded_not_a_contradiction(tmp_path):
    sw = _sweep(tmp_path, _set(world_size=[None] * 4))
    assert check_evidence(load_results(sw), "x", sw) == 0


# -- (b) a comparison beside a reference cut short --------------------------------------


@pytest.mark.parametrize("edit, field", [
    (_set(reference_complete=[True, False, True, True]),
     "state_equal is True but reference_complete is false"),
    (_set(reference_cut_short=[None, None, CUT, None], state_equal=[True, True, False, True]),
     f"state_equal is False but reference_cut_short is '{CUT}'"),
])
def test_a_comparison_beside_a_reference_cut_short_is_refused(jb, tmp_path, edit, field):
    sw = _sweep(tmp_path, edit)
    for line in _refusals(jb, sw, _sweep(tmp_path / "good")):
        assert field in line and "row " in line, line


def test_a_reference_cut_short_without_a_comparison_passes(tmp_path):
    sw = _sweep(tmp_path, _set(reference_complete=[True, False, True, True],
                               reference_cut_short=[None, CUT, None, None],
                               state_equal=[True, None, True, True]))
    assert check_evidence(load_results(sw), "x", sw) == 0


# -- (c) the run's own summary.json and failures.csv -----------------------------------


@pytest.mark.parametrize("col, value, was", [
    ("state_equal", False, "True"), ("completed", False, "True"),
    ("replay_ok", False, "True"), ("recovery_s", 0.5, "4"), ("wasted_gpu_s", 1.0, "9"),
])
def test_a_table_cell_its_run_summary_contradicts_is_refused(jb, tmp_path, col, value, was):
    sw = _sweep(tmp_path)
    _edit_table(sw, 1, **{col: value})
    good = _sweep(tmp_path / "good")
    lines = _refusals(jb, sw, good)
    code, err = jb("gate", "--baseline", str(good), str(sw))
    assert code == ExitStatus.INPUT, err  # tampered evidence, not a VIOLATION (exit 4)
    for line in lines:
        assert f"row 2 (gpt/jit/kill repeat 1): {col} is " in line, line
        assert f"in the table but {was} in " in line and "summary.json" in line, line
        assert "tampered or stale evidence" in line, line


def test_a_recovery_phase_other_than_its_failures_mean_is_refused(tmp_path):
    sw = _sweep(tmp_path, _set(detect_s=[0.1, 0.1, 0.2, 0.1]))  # failures.csv: 0.1
    with pytest.raises(InputError, match=r"row 3 .*detect_s is 0.2 but the per-failure "
                                         r"detect_s of .*failures.csv average 0.1"):
        check_evidence(load_results(sw), "x", sw)


def test_a_moved_sweep_keeps_its_paths_and_passes(tmp_path):
    sw = _sweep(tmp_path)
    moved = tmp_path / "moved"
    sw.rename(moved)  # summary and table still say run_dir under sw
    assert check_evidence(load_results(moved), "x", moved) == 0


# -- (d) the gate's violation lines --------------------------------------------------


def test_a_violation_line_prints_no_nan():
    sw_rows = pd.DataFrame([{**_row("jit", 0, "runs/x"), "state_equal": False,
                             "max_abs_diff": float("nan"), "replay_ok": False,
                             "replayed_steps": 2, "expected_replayed_steps": float("nan")}])
    lines = " ".join(g.compare(sw_rows, sw_rows).lines())
    assert "nan" not in lines and "None" not in lines, lines
    assert "replayed 2 (jit: at most 1 per failure)" in lines, lines
    with_fig = sw_rows.assign(max_abs_diff=0.25, expected_replayed_steps=1.0)
    lines = " ".join(g.compare(with_fig, with_fig).lines())
    assert "false (max_abs_diff 0.25)" in lines and "replayed 2, expected 1" in lines, lines


# -- (e) the report says why a comparison is missing -------------------------------------


def test_the_report_says_why_a_run_was_stopped_or_not_compared(jb, tmp_path):
    cut = (f"completed; the fault-free reference was {CUT} before its end, so the final "
           "states were not compared")
    sw = _sweep(tmp_path, _set(
        end_reason=["completed", cut, "stopped by the harness: --timeout-s 30",
                    "completed"],
        reference_complete=[True, False, True, True],
        reference_cut_short=[None, CUT, None, None],
        state_equal=[True, None, None, True], completed=[True, True, False, True],
        final_step=[24, 24, 10, 24], harness_stopped=[False, False, True, False],
        interrupted=[False, True, False, True], late_interrupt=[False, False, False, True]))
    code, err = jb("report", str(sw))
    assert code == 0, err
    md = (sw / "report.md").read_text()
    html = (sw / "report.html").read_text()
    assert "## Runs stopped or not compared" in md and "Runs stopped or not compared" in html
    lines = [x for x in md.splitlines() if x.startswith("- **gpt · ")]
    said = {x.split("**")[1]: x for x in lines}
    assert set(said) == {"gpt · jit · kill · repeat 1", "gpt · periodic:5 · kill · repeat 0",
                         "gpt · periodic:5 · kill · repeat 1"}, lines
    assert "the fault-free reference was interrupted" in said["gpt · jit · kill · repeat 1"]
    assert "--timeout-s 30" in said["gpt · periodic:5 · kill · repeat 0"]
    late = said["gpt · periodic:5 · kill · repeat 1"]
    assert "late interrupt" in late and "; interrupted" not in late, late
