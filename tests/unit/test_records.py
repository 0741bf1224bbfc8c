"""The records loader and the verdict (jitbench.records)."""

from __future__ import annotations

import pandas as pd
import pytest

from jitbench.errors import ExitStatus, InputError
from jitbench.records import load_failures, load_results, table_verdict, verdict

ROW = {"workload": "gpt", "strategy": "jit", "faults": "kill@1:7,term@0:9", "completed": True,
       "state_equal": True, "replay_ok": True, "max_replayed_steps_per_failure": 1}


def test_one_loader_reads_a_file_a_run_dir_a_sweep_dir_and_a_tree(tmp_path):
    run = tmp_path / "tree" / "run1"
    run.mkdir(parents=True)
    pd.DataFrame([ROW]).to_csv(run / "records.csv", index=False)
    pd.DataFrame([{"detect_s": 1.0}]).to_csv(run / "failures.csv", index=False)
    for path in (run, run / "records.csv", tmp_path / "tree"):
        t = load_results(path)
        assert t["fault"].tolist() == ["kill+term"] and t["repeat"].tolist() == [0]
        assert len(load_failures(path, t)) == 1
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    pd.DataFrame([{**ROW, "fault": "kill", "run_dir": str(run)}]).to_parquet(
        sweep / "results.parquet")
    t = load_results(sweep)
    assert t["fault"].tolist() == ["kill"] and len(load_failures(sweep, t)) == 1


@pytest.mark.parametrize("make, needle", [
    (lambda p: p / "missing.csv", "does not exist"),
    (lambda p: (p / "x.json").write_text("{}") and p / "x.json", "expected a .csv or .parquet"),
    (lambda p: (p / "g.parquet").write_bytes(b"nope") and p / "g.parquet",
     "not a results table"),
    (lambda p: (p / "o.csv").write_text("workload,strategy\ngpt,jit\n") and p / "o.csv",
     "no column fault, state_equal"),
    (lambda p: p, "no results.parquet, results.csv or records.csv"),
])
def test_bad_tables_are_one_line_input_errors(tmp_path, make, needle):
    with pytest.raises(InputError, match=needle) as info:
        load_results(make(tmp_path))
    assert "\n" not in str(info.value)


def test_verdict_in_order():
    ok = {**ROW, "fired": [1], "unfired": []}
    assert verdict(ok) == (ExitStatus.OK, "completed")
    assert verdict({**ok, "interrupted": True})[0] == ExitStatus.INTERRUPTED
    assert verdict({**ok, "completed": False, "error_kind": "input", "error": "x"}) == (
        ExitStatus.INPUT, "x")
    assert verdict({**ok, "completed": False, "end_reason": "budget"}) == (
        ExitStatus.RUN_FAILED, "the job did not complete: budget")
    assert verdict({**ok, "state_equal": False, "max_abs_diff": 0.5})[0] == ExitStatus.INCORRECT
    assert verdict({**ok, "max_replayed_steps_per_failure": 2})[0] == ExitStatus.INCORRECT
    assert verdict({**ok, "replay_ok": False})[0] == ExitStatus.INCORRECT
    assert verdict({**ok, "unfired": ["kill@1:t99"], "fired": []})[0] == ExitStatus.RUN_FAILED
    status, why = verdict({**ok, "unfired": ["kill@1:t99"]})
    assert status == ExitStatus.OK and why.startswith("warning: planned fault kill@1:t99")
    assert why.endswith("never fired (the run ended first)")  # no final step known
    # the last step the run reached names where it ended (a launched script without
    # --steps decides its own length; a fault planned past it never fires)
    for last in (20, 20.0, "20"):
        _, why = verdict({**ok, "unfired": ["kill@0:50"], "final_step": last})
        assert why == "warning: planned fault kill@0:50 never fired (the run ended after " \
                      "step 20 first)"
    for last in (None, float("nan"), "?"):
        _, why = verdict({**ok, "unfired": ["kill@0:50"], "final_step": last})
        assert why.endswith("never fired (the run ended first)")
    # a results row: no lists; strict requires every check
    assert verdict({**ROW, "state_equal": None})[0] == ExitStatus.OK
    assert verdict({**ROW, "state_equal": None}, strict=True)[0] == ExitStatus.INCORRECT
    assert verdict({**ROW, "unfired_faults": 1}, strict=True)[0] == ExitStatus.RUN_FAILED


def test_table_verdict_prefers_incomplete_over_incorrect():
    rows = pd.DataFrame([{**ROW, "state_equal": False}, {**ROW, "completed": False}, ROW])
    status, lines = table_verdict(rows)
    assert status == ExitStatus.RUN_FAILED and len(lines) == 1
    assert table_verdict(pd.DataFrame([ROW])) == (ExitStatus.OK, [])
