"""Poisson sweeps (the validation campaigns) and the report's model sections."""

from __future__ import annotations

import pandas as pd
import pytest

from jitbench.harness.spec import SpecError
from jitbench.harness.sweep import SweepConfig
from jitbench.reports import scale
from jitbench.reports.validate import validation_table


def _cfg(**kw) -> SweepConfig:
    base = dict(workloads=["gpt"], strategies=["jit", "periodic:4"], faults=["kill"],
                seeds=[0, 1], steps=40, fault_mtbf_steps=8.0)
    base.update(kw)
    return SweepConfig(**base)


def test_poisson_sweep_gives_every_strategy_of_a_seed_the_same_trace():
    cfg = _cfg()
    cfg.validate()
    for seed in cfg.seeds:
        plans = [[(f.kind, f.rank, f.step) for f in cfg.spec("gpt", s, "kill", seed).faults]
                 for s in cfg.strategies]
        assert plans[0] == plans[1] and plans[0]
        assert all(0 < step < cfg.steps and rank in (0, 1) for _, rank, step in plans[0])
    a = [f.step for f in cfg.spec("gpt", "jit", "kill", 0).faults]
    b = [f.step for f in cfg.spec("gpt", "jit", "kill", 1).faults]
    assert a != b  # the seed draws the trace
    assert a == [f.step for f in _cfg().spec("gpt", "jit", "kill", 0).faults]  # replayable
    assert len(_cfg(fault_count=1).spec("gpt", "jit", "kill", 0).faults) == 1
    long = _cfg(steps=200).spec("gpt", "jit", "kill", 0)
    assert len(long.faults) > 3 and long.max_restarts == len(long.faults) + 1  # budget covers them
    assert cfg.spec("gpt", "jit", None, 0).faults == []  # the reference


@pytest.mark.parametrize("kw, needle", [
    ({"fault_mtbf_steps": 0.0}, "--fault-mtbf-steps must be > 0"),
    ({"fault_mtbf_steps": None, "fault_count": 2}, "--fault-count applies to"),
    ({"fault_count": 0}, "--fault-count must be >= 1"),
])
def test_poisson_sweep_bad_input(kw, needle):
    with pytest.raises(SpecError, match=needle):
        _cfg(**kw).validate()


def _runs() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Two jit runs, two failures each; the second run's restarts are slower."""
    runs = pd.DataFrame([
        {"run_dir": "a", "workload": "gpt", "strategy": "jit", "world_size": 2,
         "num_failures": 2, "step_s": 0.1, "train_wall_s": 30.0, "checkpoint_saves": 0,
         "replayed_steps": 0, "wasted_gpu_s": 2 * 2 * (1.0 + 0.1 + 4.0 + 0.2 + 0.05)},
        {"run_dir": "b", "workload": "gpt", "strategy": "jit", "world_size": 2,
         "num_failures": 2, "step_s": 0.1, "train_wall_s": 30.0, "checkpoint_saves": 0,
         "replayed_steps": 0, "wasted_gpu_s": 2 * 2 * (1.0 + 0.1 + 6.0 + 0.2 + 0.05)},
    ])
    fails = pd.DataFrame([{"run_dir": d, "detect_s": 1.0, "save_s": 0.1, "restart_s": r,
                           "restore_s": 0.2} for d, r in (("a", 4.0), ("a", 4.0), ("b", 6.0),
                                                         ("b", 6.0))])
    return runs, fails


def test_validation_predicts_each_run_from_the_other_runs():
    runs, fails = _runs()
    [row] = validation_table(runs, fails).to_dict("records")
    assert row["phases_from"] == "other runs" and row["failures"] == 4
    # run a is predicted with b's restart (6 s) and b with a's (4 s): the total matches
    assert row["predicted_wasted_gpu_s"] == pytest.approx(row["measured_wasted_gpu_s"])
    [one] = validation_table(runs.iloc[:1], fails).to_dict("records")
    assert one["phases_from"] == "own run" and one["error_pct"] == pytest.approx(0.0, abs=1e-9)
    # a group whose runs differ from the others' costs is caught: b alone is 20% off a's costs
    runs2 = runs.copy()
    runs2.loc[1, "wasted_gpu_s"] *= 1.5
    [off] = validation_table(runs2, fails).to_dict("records")
    assert not off["within_tolerance"] and off["error_pct"] < -15


def test_at_scale_uses_the_measured_costs():
    runs, _ = _runs()
    t = runs.assign(detect_s=1.0, save_s=0.1, restart_s=5.0, restore_s=0.2, checkpoint_s=0.3)
    sc = scale.at_scale(t, gpus=(8, 1024), trials=3)
    assert sc is not None and sc.png[:8] == b"\x89PNG\r\n\x1a\n"
    assert sc.params["restart_s"] == 5.0 and sc.params["checkpoint_s"] == 0.3
    assert {"restart_s", "checkpoint_s", "step_s"} <= set(sc.measured)
    assert {(r["n_gpus"], r["strategy"]) for r in sc.rows} >= {(8, "jit"), (1024, "periodic")}
    assert scale.at_scale(pd.DataFrame({"x": [1]})) is None
    assert scale.at_scale(runs) is None  # fault-free costs only: nothing measured to scale


def test_validation_survives_missing_and_nan_costs():
    runs, fails = _runs()
    runs.loc[0, "step_s"] = float("nan")  # run a: no step time
    [row] = validation_table(runs, fails).to_dict("records")  # b predicted from a's costs
    assert row["runs"] == 1 and row["failures"] == 2  # a needs b's step: b has one
    nan_all = runs.assign(step_s=float("nan"))
    assert validation_table(nan_all, fails).empty
    # a records table without failures.csv: the runs' own phase columns
    own = runs.assign(detect_s=1.0, save_s=0.1, restart_s=5.0, restore_s=0.2, step_s=0.1)
    [row] = validation_table(own, pd.DataFrame()).to_dict("records")
    assert row["predicted_wasted_gpu_s"] == pytest.approx(2 * 4 * (1.0 + 0.1 + 5.0 + 0.2 + 0.05))
    # groups split by fault kind
    both = pd.concat([own, own.assign(run_dir=["c", "d"], faults="nccl-hang@1:3")])
    own_k = both.assign(faults=both["faults"].fillna("kill@1:3"))
    assert sorted(validation_table(own_k, pd.DataFrame())["fault"]) == ["kill", "nccl-hang"]
