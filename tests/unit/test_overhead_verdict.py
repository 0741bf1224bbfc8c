"""``jitbench overhead`` gives a verdict (within noise, slower, faster; the A/A
control's bias) only from enough repeats: one whole balanced design over the
strategies and the A/A control, and at least MIN_VERDICT_FLOOR (the bootstrap
interval collapses onto the few per-repeat ratios below it). With fewer the figures
stand, the verdict column says "too few repeats (need N)", and the JSON has no verdict.
Nothing is launched: the launch and its event reading are stubs.
"""

from __future__ import annotations

import json
import math
import random

import pytest
from rich.console import Console

from jitbench.cli.overhead import overhead_table, row_verdict
from jitbench.harness import overhead as oh
from jitbench.harness.overhead import MIN_VERDICT_FLOOR, OverheadConfig, summarize


def _rows(cfg: OverheadConfig, true_pct: dict, noise: float = 0.003, seed: int = 0):
    rng = random.Random(seed)
    return [{"strategy": label, "repeat": rep, "rt_us": 5.0,
             "step_s": 0.1 * (1 + true_pct.get(label, 0.0) / 100) * (1 + rng.gauss(0, noise)),
             "cpu_step_s": 0.05}
            for label, rep in cfg.order()]


@pytest.mark.parametrize("strategies, need", [
    (["jit"], 6),                       # none, jit, none-aa: 3 labels, odd: 6 rows
    (["jit", "periodic:10"], 4),        # 4 labels: 4 rows
    (["none"], MIN_VERDICT_FLOOR),      # none and the control: 2 rows, the floor rules
    (["jit", "periodic:10", "periodic-async:10"], 10),
])
def test_the_minimum_is_one_whole_design_and_the_floor(strategies, need):
    cfg = OverheadConfig(strategies=strategies)
    assert cfg.min_verdict_repeats() == need == max(cfg.design_size(), MIN_VERDICT_FLOOR)
    assert cfg.n_repeats() >= need  # the default always reaches it
    launches = OverheadConfig(strategies=[*strategies, "jit-inprocess"])
    launches.validate()
    assert launches.mode == "launches"
    assert launches.n_repeats() >= launches.min_verdict_repeats()


@pytest.mark.parametrize("repeats", [1, 2, 5])
def test_too_few_repeats_give_figures_and_no_verdict(repeats):
    cfg = OverheadConfig(strategies=["jit", "periodic:10"], segment_steps=20, repeats=repeats)
    need = cfg.min_verdict_repeats()
    assert repeats < need or repeats == 5
    cfg.repeats = min(repeats, need - 1)
    rows = summarize(_rows(cfg, {"periodic:10": 8.0}), cfg.strategies, 500, 0, need)
    by = {r["strategy"]: r for r in rows}
    for r in rows:  # the figures are kept
        assert math.isfinite(r["overhead_pct"]) and r["overhead_pct_lo"] is not None
        assert r["within_noise"] is None and r["control_ok"] is None
        assert r["no_verdict"] == f"too few repeats (need {need})"
        assert r["min_repeats"] == need
    assert by["periodic:10"]["overhead_pct"] > 4  # measured, just not judged
    assert row_verdict(by["periodic:10"]) == f"too few repeats (need {need})"
    assert row_verdict(by["none-aa"]) == f"too few repeats (need {need})"
    assert row_verdict(by["none"]) == "baseline"
    text = _render(overhead_table(rows, {"workload": "gpt", "world_size": 2,
                                         "repeats": cfg.repeats, "segment_steps": 20}))
    assert f"too few repeats (need {need})" in text
    assert "within noise" not in text and "slower" not in text and "unbiased" not in text


def test_enough_repeats_give_verdicts():
    cfg = OverheadConfig(strategies=["jit", "periodic:10"], segment_steps=20)
    cfg.repeats = cfg.min_verdict_repeats() * 3
    rows = summarize(_rows(cfg, {"periodic:10": 8.0}), cfg.strategies, 500, 0,
                     cfg.min_verdict_repeats())
    by = {r["strategy"]: r for r in rows}
    assert by["none-aa"]["control_ok"] is True and isinstance(by["jit"]["within_noise"], bool)
    assert by["periodic:10"]["within_noise"] is False and by["jit"]["no_verdict"] is None
    assert row_verdict(by["periodic:10"]) == "slower"
    assert row_verdict(by["none-aa"]) == "noise (A/A): unbiased"


def _render(table) -> str:
    con = Console(record=True, width=300)
    con.print(table)
    return con.export_text()


def test_a_short_overhead_run_records_no_verdict(tmp_path, monkeypatch):
    """run_overhead with 2 repeats (a quick look) runs, and overhead.json,
    overhead.csv and its summary rows say there is no verdict and why."""
    from jitbench.harness import run as run_mod
    from jitbench.harness.spec import RunSpec
    from jitbench.workloads import WorkloadConfig

    class Res:
        interrupted, late_interrupt, returncode, wall_s = False, False, 0, 1.0

    monkeypatch.setattr(run_mod, "execute", lambda *a, **k: Res())
    cfg = OverheadConfig(strategies=["jit"], repeats=2)
    monkeypatch.setattr(oh, "segment_times", lambda *a, **k: _rows(cfg, {}))
    base = RunSpec(workload=WorkloadConfig(name="gpt", size="tiny"))
    res = oh.run_overhead(base, cfg, tmp_path / "o")
    assert res.meta["min_verdict_repeats"] == 6 and res.meta["repeats"] == 2
    assert all(r["within_noise"] is None and r["no_verdict"] == "too few repeats (need 6)"
               for r in res.summary)
    recorded = json.loads((tmp_path / "o" / "overhead.json").read_text())
    assert recorded["min_verdict_repeats"] == 6
    assert {r["no_verdict"] for r in recorded["summary"]} == {"too few repeats (need 6)"}
    assert "too few repeats (need 6)" in (tmp_path / "o" / "overhead.csv").read_text()
