"""Model-vs-measurement validation table."""

from __future__ import annotations

import pandas as pd
import pytest

from jitbench.reports.validate import predict_run, validation_table

PHASES = {"detect_s": 2.0, "save_s": 0.5, "restart_s": 3.0, "restore_s": 0.1, "step_s": 0.2,
          "checkpoint_s": 0.4}


def test_jit_prediction_is_per_failure_recovery_plus_half_a_step():
    run = pd.Series({"strategy": "jit", "world_size": 4, "num_failures": 3})
    assert predict_run(run, PHASES) == pytest.approx(4 * 3 * (2.0 + 0.5 + 3.0 + 0.1 + 0.1))


def test_periodic_prediction_charges_half_an_interval_and_each_save():
    run = pd.Series({"strategy": "periodic:10", "world_size": 2, "num_failures": 2,
                     "train_wall_s": 100.0, "checkpoint_saves": 5})
    recovery = 2.0 + 3.0 + 0.1
    half_interval = 10 * 0.2 / 2
    expect = 2 * 2 * (recovery + half_interval) + 2 * 5 * 0.4
    assert predict_run(run, PHASES) == pytest.approx(expect)


def test_table_groups_runs_and_reports_error():
    runs = pd.DataFrame([
        {"run_dir": "a", "workload": "gpt", "strategy": "jit", "world_size": 2,
         "num_failures": 1, "wasted_gpu_s": 10.0, "step_s": 0.2},
        {"run_dir": "b", "workload": "gpt", "strategy": "jit", "world_size": 2,
         "num_failures": 2, "wasted_gpu_s": 20.0, "step_s": 0.2},
        {"run_dir": "c", "workload": "gpt", "strategy": "jit", "world_size": 2,
         "num_failures": 0, "wasted_gpu_s": 0.0, "step_s": 0.2},
    ])
    failures = pd.DataFrame([
        {"run_dir": d, "detect_s": 1.0, "save_s": 0.5, "restart_s": 3.0, "restore_s": 0.4}
        for d in ("a", "b", "b")])
    t = validation_table(runs, failures)
    row = t.iloc[0]
    assert (row.runs, row.failures) == (2, 3)  # the fault-free run is left out
    predicted = 2 * 3 * (1.0 + 0.5 + 3.0 + 0.4 + 0.1)
    assert row.predicted_wasted_gpu_s == pytest.approx(predicted)
    assert row.error_pct == pytest.approx(100 * (predicted - 30.0) / 30.0)
    assert row.within_tolerance == (abs(row.error_pct) <= 15)
