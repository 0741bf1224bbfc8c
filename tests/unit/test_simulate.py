"""Monte Carlo failure simulator (jitbench.reports.simulate) and ``model_main``."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from jitbench.reports import model as M
from jitbench.reports.model import MODEL_STRATEGIES, ModelParams, estimate
from jitbench.reports.modelcmd import _fmt_hours, model_main
from jitbench.reports.simulate import (
    FailureTrace,
    SimConfig,
    failure_trace,
    play,
    simulate,
    trial_generators,
)

CAUSE = {c.name: i for i, c in enumerate(M.LLAMA3_TABLE5)}
GPU, HOST, SDC = CAUSE["faulty GPU"], CAUSE["host maintenance"], CAUSE["silent data corruption"]

# small round numbers for hand-checked traces; no fallback checkpoints unless set
HAND = ModelParams(mtbf_hours_per_gpu=10_000.0, step_s=1.0, checkpoint_s=10.0, restart_s=100.0,
                   detect_s=5.0, save_s=5.0, restore_s=20.0, fallback_interval_s=math.inf)
H = 100_000.0  # horizon, s


def trace(*failures: tuple[float, int]) -> FailureTrace:
    """Failures as (time_s, cause index), all on rank 0."""
    return FailureTrace(np.array([t for t, _ in failures], dtype=float),
                        np.array([c for _, c in failures], dtype=int),
                        np.zeros(len(failures), dtype=int))


# ------------------------------------------------------------------ hand-checked traces


def test_no_failures():
    assert play("jit", trace(), HAND, 64, H).progress_s == pytest.approx(H)
    period = M.periodic_period_s(HAND, 64)
    n = math.floor(H / period)
    expect = n * (period - HAND.checkpoint_s) + min(H - n * period, period - HAND.checkpoint_s)
    assert play("periodic", trace(), HAND, 64, H).progress_s == pytest.approx(expect)


def test_jit_replays_at_most_the_failing_step():
    out = play("jit", trace((1000.4, GPU)), HAND, 64, H)
    recovery = HAND.detect_s + HAND.save_s + HAND.restart_s + HAND.restore_s
    assert out.progress_s == pytest.approx(1000.0 + H - (1000.4 + recovery))
    assert (out.failures, out.jit_fallbacks) == (1, 0)
    tr = play("jit-transparent", trace((1000.4, GPU)), HAND, 64, H)
    assert tr.progress_s == pytest.approx(1000.0 + H - (1000.4 + recovery - HAND.restart_s))


def test_second_failure_during_jit_save_falls_back():
    out = play("jit", trace((1000.4, GPU), (1003.0, GPU)), HAND, 64, H)
    assert (out.save_window_failures, out.jit_fallbacks) == (1, 1)
    # no durable checkpoint yet: back to the job's start, recovery from the second failure
    assert out.progress_s == pytest.approx(H - (1003.0 + HAND.recovery_s()))


def test_failure_during_restore_restarts_recovery_from_the_jit_checkpoint():
    out = play("jit", trace((1000.4, GPU), (1100.0, GPU)), HAND, 64, H)
    assert (out.recovery_window_failures, out.jit_fallbacks) == (1, 0)
    assert out.progress_s == pytest.approx(1000.0 + H - (1100.0 + HAND.recovery_s()))
    tr = play("jit-transparent", trace((1000.4, GPU), (1020.0, GPU)), HAND, 64, H)
    assert tr.recovery_window_failures == 1
    assert tr.progress_s == pytest.approx(
        1000.0 + H - (1020.0 + HAND.detect_s + HAND.restore_s))


def test_jit_falls_back_when_no_replica_survives_or_state_is_corrupt():
    p = replace(HAND, fallback_interval_s=3600.0)
    work = M.jit_fallback_work_s(p)
    cycle = M.jit_fallback_period_s(p)
    t = 2 * cycle + 500.0  # two fallback checkpoints durable
    for cause, n, fallback in ((SDC, 64, True), (HOST, 8, True), (HOST, 64, False),
                               (GPU, 1, True)):
        out = play("jit", trace((t, cause)), p, n, H)
        assert out.jit_fallbacks == int(fallback), (cause, n)
        restored = 2 * work if fallback else math.floor(2 * work + 500.0)
        rest = H - (t + (p.recovery_s() if fallback else p.recovery_s() + p.save_s))
        sched_after = play("jit", trace(), p, n, rest).progress_s
        assert out.progress_s == pytest.approx(restored + sched_after), (cause, n)
    fsdp = play("jit", trace((t, GPU)), replace(p, replicas_per_shard=1), 64, H)
    assert fsdp.jit_fallbacks == 1


def test_periodic_rolls_back_to_the_last_durable_checkpoint():
    period = M.periodic_period_s(HAND, 64)
    o = HAND.checkpoint_s
    x = 2.5 * period
    out = play("periodic", trace((x, GPU)), HAND, 64, H)
    after = play("periodic", trace(), HAND, 64, H - x - HAND.recovery_s()).progress_s
    assert out.progress_s == pytest.approx(2 * (period - o) + after)
    # a failure during a checkpoint write loses that checkpoint too
    x = 3 * period - o / 2
    out = play("periodic", trace((x, GPU)), HAND, 64, H)
    after = play("periodic", trace(), HAND, 64, H - x - HAND.recovery_s()).progress_s
    assert out.progress_s == pytest.approx(2 * (period - o) + after)


def test_async_checkpoint_counts_only_once_written():
    period = M.async_period_s(HAND, 64)
    stall = HAND.async_stall_fraction * HAND.checkpoint_s
    compute = period - stall
    for dt, durable in ((HAND.checkpoint_s / 2, 0.0), (HAND.checkpoint_s + 1, compute)):
        x = compute + dt  # first snapshot starts at `compute`, durable o later
        out = play("periodic-async", trace((x, GPU)), HAND, 64, H)
        after = play("periodic-async", trace(), HAND, 64, H - x - HAND.recovery_s()).progress_s
        assert out.progress_s == pytest.approx(durable + after)


# ------------------------------------------------------------------ traces


def test_trace_rate_causes_and_weibull_mean():
    p = ModelParams(mtbf_hours_per_gpu=1000.0)
    horizon = 2000 * 3600.0
    rng = np.random.default_rng(1)
    exp = [failure_trace(rng, 100, p, horizon) for _ in range(30)]  # ~6,000 failures
    gaps = np.concatenate([np.diff(np.r_[0.0, t.times_s]) for t in exp])
    assert gaps.mean() == pytest.approx(36_000.0, rel=0.04)
    causes = np.concatenate([t.cause for t in exp])
    freq = np.bincount(causes, minlength=len(p.causes)) / causes.size
    assert np.abs(freq - p.cause_weights()).max() < 0.015
    ranks = np.concatenate([t.rank for t in exp])
    assert ranks.min() >= 0 and ranks.max() < 100
    wb = [failure_trace(rng, 100, p, horizon, weibull_shape=0.6) for _ in range(30)]
    wgaps = np.concatenate([np.diff(np.r_[0.0, t.times_s]) for t in wb])
    assert wgaps.mean() == pytest.approx(36_000.0, rel=0.08)
    assert wgaps.std() / wgaps.mean() > 1.3  # burstier than exponential (CV 1)


def test_trial_streams_do_not_depend_on_trial_count():
    a = [g.random() for g in trial_generators(7, 64, 5)]
    b = [g.random() for g in trial_generators(7, 64, 3)]
    assert a[:3] == b


# ------------------------------------------------------------------ seeded Monte Carlo


AGREE = ModelParams(mtbf_hours_per_gpu=10_000.0, step_s=2.0, checkpoint_s=30.0, restart_s=60.0,
                    detect_s=10.0, save_s=10.0, restore_s=20.0, fallback_interval_s=3600.0)


@pytest.mark.parametrize("n_gpus", [500, 2000])
def test_simulation_agrees_with_the_model_where_its_assumptions_hold(n_gpus):
    # exponential arrivals; job MTBF 20 h / 5 h, far longer than the checkpoint
    # interval (~35 / 17 min) and recovery (~100 s), so the first-order terms dominate;
    # ~4,000 / 16,000 failures in all. (Over seeds 0-9 the ratio stays in [0.972, 1.009].)
    cfg = SimConfig(n_gpus=n_gpus, horizon_hours=2000.0, trials=60, seed=11)
    sim = simulate(AGREE, cfg)
    for s in MODEL_STRATEGIES:
        analytic = estimate(s, n_gpus, AGREE).waste_fraction
        simulated = 1 - sim[s].goodput.mean
        assert simulated == pytest.approx(analytic, rel=0.04), s


def test_same_seed_same_results_different_seed_differs():
    cfg = SimConfig(n_gpus=2048, horizon_hours=200.0, trials=8, seed=3)
    a, b = simulate(AGREE, cfg), simulate(AGREE, cfg)
    assert a == b
    c = simulate(AGREE, replace(cfg, seed=4))
    for s in MODEL_STRATEGIES:
        assert a[s].goodput_per_trial != c[s].goodput_per_trial
    w = simulate(AGREE, replace(cfg, weibull_shape=0.7))
    assert w["periodic"].goodput_per_trial != a["periodic"].goodput_per_trial


def test_result_summaries_are_consistent():
    cfg = SimConfig(n_gpus=512, horizon_hours=500.0, trials=20, seed=0)
    for r in simulate(AGREE, cfg).values():
        assert r.wasted_gpu_hours_per_day.mean == pytest.approx(
            512 * 24 * (1 - r.goodput.mean))
        assert r.goodput.p5 <= r.goodput.p50 <= r.goodput.p95 <= 1.0
        assert r.wasted_gpu_hours_per_day.p5 <= r.wasted_gpu_hours_per_day.p95
        assert len(r.goodput_per_trial) == 20


def test_fully_sharded_jit_always_falls_back():
    p = replace(AGREE, replicas_per_shard=1)
    r = simulate(p, SimConfig(n_gpus=256, horizon_hours=500.0, trials=5, seed=0))["jit"]
    assert r.failures_mean > 0 and r.jit_fallbacks_mean == r.failures_mean
    dp = simulate(AGREE, SimConfig(n_gpus=256, horizon_hours=500.0, trials=5, seed=0))["jit"]
    assert dp.goodput.mean > r.goodput.mean


def test_simulated_jit_waste_grows_slower_than_periodic_and_crosses():
    p = replace(ModelParams(), jit_overhead_fraction=0.01)  # analytic crossover ~250 GPUs
    cfg = SimConfig(n_gpus=16, horizon_hours=720.0, trials=20, seed=5)
    waste = {}
    for n in (16, 128, 4096):
        sim = simulate(p, replace(cfg, n_gpus=n))
        waste[n] = {s: sim[s].wasted_gpu_hours_per_day.mean for s in ("jit", "periodic")}
    assert waste[16]["periodic"] < waste[16]["jit"]
    assert waste[4096]["jit"] < waste[4096]["periodic"]
    ratio = [waste[n]["jit"] / waste[n]["periodic"] for n in (16, 128, 4096)]
    assert ratio[0] > ratio[1] > ratio[2]


def test_sim_config_validation():
    with pytest.raises(ValueError, match="trials"):
        simulate(AGREE, SimConfig(n_gpus=8, trials=0))
    with pytest.raises(ValueError, match="unknown strategy"):
        simulate(AGREE, SimConfig(n_gpus=8, strategies=("periodic:10",)))


# ------------------------------------------------------------------ model_main


ARGS = dict(gpus=[8, 1024], mtbf_hours_per_gpu=50_000.0, step_s=1.0, checkpoint_s=60.0,
            restart_s=300.0, detect_s=30.0, save_s=30.0, restore_s=60.0, from_results=None,
            horizon_hours=200.0, trials=5, seed=0, as_json=True, out_dir=None)


def test_model_table_fits_an_80_column_terminal(monkeypatch, capsys):
    """Both tables fit 80 columns whole: no strategy name or number cut."""
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "80")
    assert model_main(**{**ARGS, "gpus": [8, 16384, 100_000], "as_json": False}) == 0
    lines = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out).splitlines()
    table = [x for x in lines if x[:1] in "┃│"]
    assert table and max(len(x) for x in table) <= 80
    assert "…" not in "".join(lines)
    assert sum("jit-transparent" in x for x in table) == 6  # 3 sizes x 2 tables


@pytest.mark.parametrize("x, text", [
    (0.0, "0"), (0.0123, "0.0123"), (0.485, "0.485"), (97.3, "97.3"), (275.4, "275"),
    (9932.0, "9.93k"), (20_300.0, "20.3k"), (123_456.0, "123k"), (1.5e6, "1.50M"),
    (float("nan"), "-"),
])
def test_gpu_hours_have_three_significant_figures(x, text):
    assert _fmt_hours(x) == text


def test_model_main_json(capsys):
    assert model_main(**ARGS) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["rows"]) == 2 * len(MODEL_STRATEGIES)
    row = out["rows"][0]
    assert {"analytic_wasted_gpu_hours_per_day", "sim_wasted_gpu_hours_per_day_p95",
            "analytic_goodput", "sim_goodput_mean"} <= row.keys()
    assert {"analytic", "simulated"} == out["crossovers"].keys()
    assert out["crossovers"]["analytic"][0]["n_gpus"] > 0


def test_model_main_table_and_files(tmp_path, capsys):
    assert model_main(**{**ARGS, "as_json": False, "out_dir": tmp_path / "out"}) == 0
    text = capsys.readouterr().out
    assert "periodic-async" in text and "crossover" in text
    df = pd.read_csv(tmp_path / "out" / "model.csv")
    assert len(df) == 8 and set(df["strategy"]) == set(MODEL_STRATEGIES)
    assert (tmp_path / "out" / "model.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_model_main_from_results(tmp_path, capsys):
    df = pd.DataFrame({
        "strategy": ["none", "jit", "jit", "periodic:10", "periodic:10"],
        "step_time_s": [0.5, 0.6, 0.6, 0.7, 0.7],
        "save_s": [np.nan, 2.0, 4.0, 9.0, 9.0],
        "restart_s": [np.nan, 10.0, 20.0, 30.0, np.nan],
        "checkpoint_s": [np.nan, np.nan, np.nan, 8.0, 12.0],
        "world_size": [4, 4, 4, 4, 4],
    })
    (tmp_path / "sweep").mkdir()
    df.to_parquet(tmp_path / "sweep" / "results.parquet")
    for path in (tmp_path / "r.csv", tmp_path / "r.parquet", tmp_path / "sweep"):
        if path.suffix == ".csv":
            df.to_csv(path, index=False)
        elif path.suffix == ".parquet":
            df.to_parquet(path)
        assert model_main(**{**ARGS, "from_results": path}) == 0
        out = json.loads(capsys.readouterr().out)
        params, sources = out["params"], out["sources"]
        assert params["step_s"] == 0.5  # fault-free rows
        assert params["save_s"] == 3.0  # JIT rows
        assert params["restart_s"] == 20.0
        assert params["checkpoint_s"] == 10.0
        assert params["detect_s"] == 30.0 and sources["detect_s"] == "flag"
        assert sources["save_s"] == "results"
        assert out["from_results"]["world_size_median"] == 4
    # a cost given as a flag wins over the measured one
    assert model_main(**{**ARGS, "from_results": tmp_path / "r.csv", "save_s": 7.0},
                      explicit=frozenset({"save_s"})) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["params"]["save_s"] == 7.0 and out["sources"]["save_s"] == "flag"
    assert out["params"]["restart_s"] == 20.0 and out["sources"]["restart_s"] == "results"


@pytest.mark.parametrize("change", [
    {"gpus": []}, {"gpus": [0]}, {"trials": 0}, {"step_s": -1.0}, {"mtbf_hours_per_gpu": 0.0},
    {"horizon_hours": 0.0}, {"seed": -1}, {"gpus": [10_000_000_000]},
    {"step_s": float("inf")}, {"mtbf_hours_per_gpu": float("inf")},
])
def test_model_main_bad_flags(change, capsys):
    assert model_main(**{**ARGS, **change}) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1


def test_model_main_bad_results_file(tmp_path, capsys):
    no_cols = tmp_path / "x.csv"
    no_cols.write_text("strategy,foo\njit,1\n")
    garbage = tmp_path / "g.parquet"
    garbage.write_bytes(b"not parquet at all")
    negative = tmp_path / "n.csv"
    negative.write_text("save_s\n-3\n")
    (tmp_path / "empty").mkdir()
    for path in (tmp_path / "missing.csv", no_cols, garbage, negative, tmp_path / "x.json",
                 tmp_path / "empty"):
        if path.suffix == ".json":
            path.write_text("{}")
        assert model_main(**{**ARGS, "from_results": path}) == 2, path
        captured = capsys.readouterr()
        assert captured.out == ""
        assert captured.err.startswith("error: --from-results") and captured.err.count("\n") == 1
