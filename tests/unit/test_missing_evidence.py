"""A row whose run directory is missing is never passed over in silence (new-user
trial: ``check_evidence`` skipped its ``failures.csv`` check without a word). The
candidate of ``gate`` and the table of ``validate`` refuse such a row in one line
naming it and the directory (exit 2) unless ``--allow-missing-evidence``, which then
says how many rows went unchecked; the gate's stored baseline needs no run
directories; ``report`` and ``model --from-results`` say in a note line (and the
report in its results section) how many rows were not checked. Fixture tables only.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from jitbench.errors import ExitStatus, InputError
from jitbench.records import load_results
from jitbench.reports.evidence import check_evidence
from tests.conftest import one_line
from tests.unit.test_evidence import _sweep

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
MISSING = "gpt-periodic_5-kill-s0-r0"
"""The run directory of row 3 of the fixture sweep, removed by :func:`_holed`."""
OPT_OUT = "--allow-missing-evidence"


def _holed(tmp_path):
    """The fixture sweep with one run directory gone (row 3)."""
    sw = _sweep(tmp_path)
    shutil.rmtree(sw / "runs" / MISSING)
    return sw


def test_check_evidence_counts_the_rows_it_could_not_check(tmp_path):
    sw = _holed(tmp_path)
    t = load_results(sw)
    assert check_evidence(t, "x", sw) == 1
    assert check_evidence(t, "x", None) == len(t)  # no place given: nothing read
    assert check_evidence(load_results(_sweep(tmp_path / "whole")), "x",
                          tmp_path / "whole" / "sw") == 0
    with pytest.raises(InputError) as e:
        check_evidence(t, "x", sw, require_dirs=OPT_OUT)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("x: row 3 (gpt/periodic:5/kill repeat 0): its "
                                              "run directory ")
    assert MISSING in msg and str(sw / "runs" / MISSING) in msg and OPT_OUT in msg, msg


def test_gate_refuses_a_candidate_row_without_its_run_directory(jb, tmp_path):
    good, holed = _sweep(tmp_path / "good"), _holed(tmp_path)
    code, err = jb("gate", "--baseline", str(good), str(holed))
    line = one_line(err)
    assert code == ExitStatus.INPUT, err
    assert "row 3 (gpt/periodic:5/kill repeat 0)" in line and MISSING in line, line
    assert OPT_OUT in line and "failures.csv" in line, line
    code, err = jb("gate", "--baseline", str(good), str(holed), OPT_OUT)
    assert code == 0, err
    assert f"{holed / 'results.parquet'}: 1 of 4 rows have no run directory" in one_line(err)


def test_the_gate_baseline_needs_no_run_directories(jb, tmp_path):
    good = _sweep(tmp_path / "good")
    stored = tmp_path / "baseline.csv"
    shutil.copy(_sweep(tmp_path / "b") / "results.csv", stored)
    shutil.rmtree(tmp_path / "b")  # a committed table: its runs are nowhere
    code, err = jb("gate", "--baseline", str(stored), str(good))
    assert code == 0, err
    note = one_line(err)
    assert note.startswith(f"note: --baseline {stored}: 4 of 4 rows have no run directory")
    assert "a stored baseline needs none" in note


def test_the_committed_baseline_gates_against_itself_only_with_the_opt_out(jb):
    base = str(BENCH / "baseline-cpu.csv")
    n = len(load_results(base))
    code, err = jb("gate", "--baseline", base, base)
    assert code == ExitStatus.INPUT and OPT_OUT in one_line(err), err
    code, err = jb("gate", "--baseline", base, base, OPT_OUT)
    assert code == 0, err
    assert f"note: {base}: {n} of {n} rows have no run directory" in err, err


def test_validate_refuses_a_row_without_its_run_directory(jb, tmp_path):
    holed = _holed(tmp_path)
    code, err = jb("validate", str(holed))
    line = one_line(err)
    assert code == ExitStatus.INPUT and "row 3" in line and MISSING in line, err
    assert OPT_OUT in line
    code, err = jb("validate", str(holed), OPT_OUT)
    # past the evidence: whatever validate makes of the fixture, it is not that refusal
    assert MISSING not in err and "its run directory" not in err, err
    if code == 0:
        assert "1 of 4 rows have no run directory" in err, err


def test_report_says_how_many_rows_it_could_not_check(jb, tmp_path):
    holed = _holed(tmp_path)
    code, err = jb("report", str(holed))
    assert code == 0, err
    assert "note: " in err and "1 of 4 rows have no run directory" in err, err
    for page in ("report.html", "report.md"):
        assert "Evidence not checked: 1 of 4 rows" in (holed / page).read_text(), page
    whole = _sweep(tmp_path / "whole")
    code, err = jb("report", str(whole))
    assert code == 0 and "no run directory" not in err, err
    assert "Evidence not checked" not in (whole / "report.html").read_text()


def test_model_from_results_says_how_many_rows_it_could_not_check(jb, tmp_path):
    holed = _holed(tmp_path)
    code, err = jb("model", "--trials", "1", "--gpus", "8", "--from-results", str(holed),
                   "--json")
    assert code == 0, err
    assert "1 of 4 rows have no run directory" in one_line(err), err
    base = BENCH / "baseline-cpu.csv"
    n = len(load_results(base))
    code, err = jb("model", "--trials", "1", "--gpus", "8", "--from-results", str(base))
    assert code == 0 and f"{n} of {n} rows have no run directory" in err, err


def test_model_json_records_the_unchecked_rows(tmp_path, capsys):
    from jitbench.reports.modelcmd import model_main

    holed = _holed(tmp_path)
    assert model_main([8], 1000.0, 1.0, 60.0, 300.0, 30.0, 30.0, 60.0, [holed], 10.0, 1, 0,
                      True, None) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["from_results"]["evidence_unchecked_rows"] == 1
    assert doc["from_results"]["evidence_rows"] == 4


def test_the_gate_says_when_a_side_is_an_interrupted_sweeps_partial_table(jb, tmp_path):
    """Cells an interrupted sweep never ran are never gated (a re-trial: a partial
    candidate against a partial baseline passed without a word): a note per side."""
    good, part = _sweep(tmp_path / "good"), _sweep(tmp_path / "part")
    meta_path = part / "sweep.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    meta.update({"complete": False, "runs": 4, "cells": 6})
    meta_path.write_text(json.dumps(meta))
    code, err = jb("gate", "--baseline", str(good), str(part))
    assert code == 0, err
    notes = [x for x in err.splitlines() if "Sweep interrupted" in x]
    assert len(notes) == 1 and "4 of 6 cells finished; the gate covers those only" in notes[0]
    assert notes[0].startswith(f"note: {part / 'results.parquet'}")
    code, err = jb("gate", "--baseline", str(part), str(good))
    assert code == 0 and f"note: --baseline {part / 'results.parquet'}: Sweep interrupted" in err
    code, err = jb("gate", "--baseline", str(good), str(good))
    assert code == 0 and "Sweep interrupted" not in err, err
