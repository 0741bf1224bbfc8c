"""``gate``, ``validate``, ``report`` and ``model --from-results`` cross-check a table's recorded conclusions
against the evidence beside them (new-user trial): a ``jit`` row with 3 replayed
steps in one failure and ``replay_ok`` true, an edited ``spec_hash``, a
``results.parquet`` that a ``results.csv`` beside it contradicts, and a
``num_failures`` of 7 over a ``failures.csv`` of 1 row are refused in one line
naming the table, the row, the run and the field (exit 2, a corrupt record, as a
corrupt cell is), never passed. Fixture tables only: nothing is launched.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path

import pandas as pd
import pytest

from jitbench.errors import ExitStatus, InputError
from jitbench.harness.sweep import SweepConfig, SweepScript, spec_hash
from jitbench.records import load_results
from jitbench.records import spec_hash as records_spec_hash
from jitbench.reports.evidence import check_evidence, replay_contradiction
from tests.conftest import one_line

CFG = SweepConfig(workloads=["gpt"], strategies=["jit", "periodic:5"], faults=["kill"],
                  steps=24, fault_step=14)


def _row(strategy: str, rep: int, run_dir: str) -> dict:
    spec = CFG.spec("gpt", strategy, "kill", 0)
    replayed = 1 if strategy == "jit" else 4
    return {"workload": "gpt", "strategy": strategy, "fault": "kill", "repeat": rep,
            "seed": 0, "spec_hash": spec_hash(spec),
            "spec_json": json.dumps(asdict(spec), sort_keys=True), "results_version": 1,
            "machine_torch": "2.14.1", "machine_host": "a", "machine_cpus": 2,
            "world_size": 2, "completed": True, "state_equal": True, "replay_ok": True,
            "replayed_steps": replayed, "expected_replayed_steps": replayed,
            "max_replayed_steps_per_failure": replayed, "num_failures": 1,
            "detect_s": 0.1, "save_s": 0.05, "restart_s": 3.0, "restore_s": 0.1,
            "recovery_s": 4.0, "wasted_gpu_s": 9.0, "step_s": 0.05, "run_dir": run_dir}


RESULTS_ONLY = ("fault", "repeat", "spec_hash", "spec_json", "results_version")
"""Columns a sweep adds to a run's summary fields in its results row."""


def _write_summary(d: Path, row: dict) -> None:
    """``d/summary.json``: the run's fields of a results row (empty cells as null)."""
    summary = {k: (None if isinstance(v, float) and math.isnan(v) else
                   v.item() if hasattr(v, "item") else v)
               for k, v in row.items() if k not in RESULTS_ONLY}
    (d / "summary.json").write_text(json.dumps(summary))


def _sweep(tmp_path, edit=None):
    """A sweep directory: results.csv and .parquet, each run's summary and failures.csv
    (one failure each); ``edit(table)`` changes the table before it is written, and
    each run's summary.json holds its row as edited (a run that recorded it so)."""
    sw = tmp_path / "sw"
    rows = []
    for strategy in ("jit", "periodic:5"):
        for rep in (0, 1):
            d = sw / "runs" / f"gpt-{strategy.replace(':', '_')}-kill-s0-r{rep}"
            d.mkdir(parents=True)
            pd.DataFrame([{"run_dir": str(d), "attempt": 0, "detect_s": 0.1}]).to_csv(
                d / "failures.csv", index=False)
            rows.append(_row(strategy, rep, str(d)))
    t = pd.DataFrame(rows)
    if edit is not None:
        edit(t)
    for row in t.to_dict("records"):
        if isinstance(row.get("run_dir"), str) and Path(row["run_dir"]).is_dir():
            _write_summary(Path(row["run_dir"]), row)
    t.to_csv(sw / "results.csv", index=False)
    t.to_parquet(sw / "results.parquet", index=False)
    return sw


def test_the_hash_the_sweep_records_is_the_hash_of_its_spec_json():
    for spec in (CFG.spec("gpt", "jit", "kill", 3),
                 SweepConfig(scripts=[SweepScript("/x/train.py", ["--seed", "{seed}"])],
                             strategies=["own"], faults=["kill"])
                 .spec("script:train.py", "own", "kill", 1)):
        recorded = json.dumps(asdict(spec), sort_keys=True)
        assert spec_hash(spec) == records_spec_hash(json.loads(recorded))


def test_a_consistent_sweep_passes(jb, tmp_path):
    sw = _sweep(tmp_path)
    code, err = jb("gate", "--baseline", str(sw), str(sw))
    assert code == 0, err
    check_evidence(load_results(sw), "x", sw)


def _set(drop=(), **cols):
    """An edit of the fixture table: whole columns replaced, columns dropped."""
    def edit(t):
        for col, values in cols.items():
            t[col] = values
        for col in drop:
            del t[col]
    return edit


@pytest.mark.parametrize("edit, field", [
    # jit replayed 3 steps in its one failure, yet replay_ok true
    (_set(replayed_steps=[3, 1, 4, 4], expected_replayed_steps=[3, 1, 4, 4],
          max_replayed_steps_per_failure=[3, 1, 4, 4]),
     "replay_ok is true but max_replayed_steps_per_failure is 3"),
    # the same without the per-failure column: the sum against num_failures
    (_set(drop=("max_replayed_steps_per_failure",), replayed_steps=[3, 1, 4, 4],
          expected_replayed_steps=[3, 1, 4, 4]),
     "replay_ok is true but replayed_steps 3 exceeds num_failures 1"),
    # periodic replayed other than the steps since its checkpoint
    (_set(replayed_steps=[1, 1, 4, 9]),
     "replay_ok is true but replayed_steps 9 differs from expected_replayed_steps 4"),
    (lambda t: t.__setitem__("spec_hash", [t["spec_hash"][0], "0123456789ab",
                                           *t["spec_hash"][2:]]),
     "spec_hash is '0123456789ab' but its spec_json hashes to"),
    (_set(num_failures=[1, 1, 7, 1]), "num_failures is 7 but"),
])
def test_gate_validate_and_report_refuse_a_record_its_evidence_contradicts(
        jb, tmp_path, edit, field):
    sw = _sweep(tmp_path, edit)
    good = _sweep(tmp_path / "good")
    for args in (("gate", "--baseline", str(good), str(sw)),
                 ("gate", "--baseline", str(sw), str(good)),
                 ("validate", str(sw)), ("report", str(sw)),
                 ("model", "--trials", "1", "--from-results", str(sw))):
        code, err = jb(*args)
        line = one_line(err)
        assert code == ExitStatus.INPUT, (args, err)
        assert field in line and "row " in line and "gpt/" in line and " repeat " in line, line
        assert "contradicts its evidence" in line, line
    assert not (sw / "report.html").exists()


def test_num_failures_against_failures_csv_names_the_file(tmp_path):
    sw = _sweep(tmp_path, _set(num_failures=[1, 1, 7, 1]))
    with pytest.raises(InputError, match=r"row 3 \(gpt/periodic:5/kill repeat 0\): "
                                         r"num_failures is 7 but .*failures.csv has 1 row "):
        check_evidence(load_results(sw), str(sw), sw)


def test_parquet_and_csv_of_one_directory_must_agree(jb, tmp_path):
    sw = _sweep(tmp_path)
    t = pd.read_csv(sw / "results.csv")
    t.loc[1, "replay_ok"] = False  # the CSV says the run broke its promise
    t.to_csv(sw / "results.csv", index=False)
    for args in (("gate", "--baseline", str(sw), str(sw)), ("validate", str(sw)),
                 ("report", str(sw))):
        code, err = jb(*args)
        line = one_line(err)
        assert code == ExitStatus.INPUT, (args, err)
        assert ("results.parquet and results.csv differ (row 2 (gpt/jit/kill) replay_ok: True "
                "in results.parquet, False in results.csv)") in line, line
    pd.read_parquet(sw / "results.parquet").drop(columns="step_s").to_parquet(
        sw / "results.parquet", index=False)
    with pytest.raises(InputError, match=r"columns differ \(step_s\)"):
        load_results(sw)
    (sw / "results.parquet").unlink()  # the CSV alone is read as it is
    assert load_results(sw)["replay_ok"].tolist()[1] is False


def test_what_promises_no_bound_is_not_held_to_one():
    row = {"strategy": "jit:backstop=5", "replay_ok": True, "replayed_steps": 4,
           "expected_replayed_steps": 4, "num_failures": 1, "max_replayed_steps_per_failure": 4}
    assert replay_contradiction(row) is None  # the backstop's steps
    assert replay_contradiction({**row, "strategy": "jit"}) is not None
    assert replay_contradiction({**row, "strategy": "own", "replay_promised": False,
                                 "expected_replayed_steps": None}) is None
    assert replay_contradiction({**row, "strategy": "torchft", "expected_replayed_steps": 0}) \
        is None
    assert replay_contradiction({**row, "strategy": "jit", "replay_ok": False}) is None
