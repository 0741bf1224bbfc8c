"""The model's projection to many world sizes: rows, crossovers and the plot.

What ``jitbench model`` prints and the report's "at scale" section draws
(:mod:`jitbench.reports.modelcmd`, :mod:`jitbench.reports.scale`): model
parameters from measured results (:func:`params_from_table`), one row per
world size and strategy from the analytic model and the simulator
(:func:`build_rows`), the world sizes where two strategies cross
(:func:`crossovers`) and the figure (:func:`write_plot`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pandas as pd

from jitbench.errors import InputError
from jitbench.reports.model import (
    MODEL_STRATEGIES,
    Crossover,
    ModelParams,
    estimate,
    find_crossovers,
)
from jitbench.reports.simulate import SimConfig, simulate

PLOT_MIN_GPUS = 8
PLOT_MAX_GPUS = 100_000
CROSSOVER_PAIRS: tuple[tuple[str, str], ...] = (
    ("jit", "periodic"),
    ("jit", "periodic-async"),
    ("jit-transparent", "periodic"),
    ("jit-transparent", "periodic-async"),
)

RESULT_COLUMNS: dict[str, str] = {
    "step_time_s": "step_s",
    "step_s": "step_s",  # jitbench's own records name the median step time so
    "save_s": "save_s",
    "restore_s": "restore_s",
    "restart_s": "restart_s",
    "detect_s": "detect_s",
    "checkpoint_s": "checkpoint_s",
}
"""Records column -> :class:`ModelParams` field taken from ``--from-results``."""

_PREFERRED_ROWS: dict[str, tuple[str, ...]] = {
    # column: strategy prefixes whose rows are used when they hold a value
    "step_time_s": ("none",),  # fault-free step time without checkpointing
    "step_s": ("none",),
    "save_s": ("jit",),  # the JIT save, not a final periodic one
    "checkpoint_s": ("periodic:",),  # synchronous periodic runs
}




def params_from_table(df: pd.DataFrame, source: str = "results") -> dict[str, float]:
    """:class:`ModelParams` overrides (s) from a records/results table: the
    median of each :data:`RESULT_COLUMNS` column, preferring the rows of
    :data:`_PREFERRED_ROWS`, over the rows of the strategies the model knows (the
    peers' rows, ``torchft`` and ``nvrx``, are left out when others exist; see
    :func:`jitbench.reports.modelcmd.load_params_from_results`).

    Raises:
        InputError: no usable column, or a negative (or zero step) median.
    """
    strategy = df["strategy"].astype(str) if "strategy" in df.columns else None
    if strategy is not None:  # the model's strategies only: the peers recover otherwise
        from jitbench.runtime.strategies import REGISTRY

        peers = tuple(n for n, e in REGISTRY.items() if e.launcher != "agent")
        own = ~strategy.str.split(":").str[0].isin(peers)
        if own.any():
            df, strategy = df[own], strategy[own]
    overrides: dict[str, float] = {}
    for column, param in RESULT_COLUMNS.items():
        if column not in df.columns:
            continue
        values = pd.to_numeric(df[column], errors="coerce")
        values = values[np.isfinite(values)]
        prefixes = _PREFERRED_ROWS.get(column)
        if strategy is not None and prefixes:
            preferred = values[strategy.loc[values.index].str.startswith(prefixes)]
            if len(preferred):
                values = preferred
        if not len(values):
            continue
        value = float(values.median())
        if value < 0 or (param == "step_s" and value <= 0):
            raise InputError(f"--from-results: {source}: median {column} is {value}, must be "
                             f"{'> 0' if param == 'step_s' else '>= 0'}")
        overrides[param] = value
    if not overrides:
        raise InputError(f"--from-results: {source} has no usable column (need a number in one "
                         f"of: {', '.join(RESULT_COLUMNS)})")
    return overrides


def build_rows(gpus: Sequence[int], params: ModelParams, horizon_hours: float, trials: int,
               seed: int, weibull_shape: float | None = None) -> list[dict[str, Any]]:
    """One row per (world size, strategy): analytic and simulated wasted
    GPU-hours per day and goodput (simulated: mean and p5/p50/p95 over
    ``trials``), checkpoint interval (s), failures per day."""
    rows: list[dict[str, Any]] = []
    for n in gpus:
        sim = simulate(params, SimConfig(n_gpus=n, horizon_hours=horizon_hours, trials=trials,
                                         seed=seed, weibull_shape=weibull_shape))
        for s in MODEL_STRATEGIES:
            a = estimate(s, n, params)
            r = sim[s]
            rows.append({
                "n_gpus": n,
                "strategy": s,
                "interval_s": a.interval_s,
                "failures_per_day": a.failures_per_day,
                "analytic_wasted_gpu_hours_per_day": a.wasted_gpu_hours_per_day,
                "analytic_goodput": a.goodput,
                "sim_wasted_gpu_hours_per_day_mean": r.wasted_gpu_hours_per_day.mean,
                "sim_wasted_gpu_hours_per_day_p5": r.wasted_gpu_hours_per_day.p5,
                "sim_wasted_gpu_hours_per_day_p50": r.wasted_gpu_hours_per_day.p50,
                "sim_wasted_gpu_hours_per_day_p95": r.wasted_gpu_hours_per_day.p95,
                "sim_goodput_mean": r.goodput.mean,
                "sim_goodput_p5": r.goodput.p5,
                "sim_goodput_p50": r.goodput.p50,
                "sim_goodput_p95": r.goodput.p95,
                "sim_failures_per_trial": r.failures_mean,
                "sim_jit_fallbacks_per_trial": r.jit_fallbacks_mean if s.startswith("jit") else None,
            })
    return rows


def crossovers(params: ModelParams, gpus: Sequence[int],
               rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Analytic crossover world sizes (exact integer N, over 1..max(100000, N))
    and simulated ones (bracketed by consecutive table world sizes) for each
    pair in :data:`CROSSOVER_PAIRS`."""
    hi = max(PLOT_MAX_GPUS, max(gpus))
    analytic: list[Crossover] = []
    for a, b in CROSSOVER_PAIRS:
        analytic.extend(find_crossovers(params, a, b, 1, hi))
    simulated: list[dict[str, Any]] = []
    mean = {(r["n_gpus"], r["strategy"]): r["sim_wasted_gpu_hours_per_day_mean"] for r in rows}
    ns = sorted(set(gpus))
    for a, b in CROSSOVER_PAIRS:
        for n0, n1 in zip(ns, ns[1:], strict=False):
            d0 = mean[(n0, a)] - mean[(n0, b)]
            d1 = mean[(n1, a)] - mean[(n1, b)]
            if d0 != 0 and d1 != 0 and (d0 < 0) != (d1 < 0):
                below, above = (a, b) if d0 < 0 else (b, a)
                simulated.append({"a": a, "b": b, "between_gpus": [n0, n1],
                                  "below": below, "above": above})
    return {"analytic": [asdict(c) for c in analytic], "simulated": simulated}


def write_plot(path: Path | BinaryIO, params: ModelParams, gpus: Sequence[int],
               rows: list[dict[str, Any]]) -> None:
    """PNG of wasted GPU-hours/day and goodput vs world size (log x): analytic
    curves over 8..100000 GPUs (wider if the table is), simulated means with
    p5-p95 bars at the table's world sizes."""
    from matplotlib.figure import Figure  # no pyplot: no global backend state

    lo = min(PLOT_MIN_GPUS, min(gpus))
    hi = max(PLOT_MAX_GPUS, max(gpus))
    grid = np.unique(np.round(np.geomspace(lo, hi, 160)).astype(int))
    fig = Figure(figsize=(11, 4.5), layout="constrained")
    ax_w, ax_g = fig.subplots(1, 2)
    colors = dict(zip(MODEL_STRATEGIES, ("tab:green", "tab:blue", "tab:red", "tab:orange"),
                      strict=True))
    for s in MODEL_STRATEGIES:
        est = [estimate(s, int(n), params) for n in grid]
        ax_w.plot(grid, [e.wasted_gpu_hours_per_day for e in est], color=colors[s],
                  label=f"{s} (analytic)")
        ax_g.plot(grid, [e.goodput for e in est], color=colors[s], label=f"{s} (analytic)")
        sr = [r for r in rows if r["strategy"] == s]
        x = np.array([r["n_gpus"] for r in sr], dtype=float)
        for ax, key in ((ax_w, "sim_wasted_gpu_hours_per_day"), (ax_g, "sim_goodput")):
            mid = np.array([r[f"{key}_mean"] for r in sr])
            err = np.vstack([mid - np.array([r[f"{key}_p5"] for r in sr]),
                             np.array([r[f"{key}_p95"] for r in sr]) - mid]).clip(min=0)
            ax.errorbar(x, mid, yerr=err, fmt="o", ms=4, capsize=3, color=colors[s],
                        label=f"{s} (simulated, p5-p95)")
    ax_w.set(xscale="log", yscale="log", xlabel="world size N (GPUs)",
             ylabel="wasted GPU-hours per day", title="Wasted GPU time (lines: analytic model)")
    lows = [e.goodput for s in MODEL_STRATEGIES for e in (estimate(s, int(n), params) for n in grid)]
    lows += [r["sim_goodput_p5"] for r in rows]
    bottom = max(0.0, math.floor((min(lows) - 0.005) * 100) / 100)  # zoom in on high goodput
    ax_g.set(xscale="log", xlabel="world size N (GPUs)", ylabel="goodput (useful / total GPU time)",
             title="Goodput", ylim=(bottom, 1.0 + (1.0 - bottom) * 0.02))
    for ax in (ax_w, ax_g):
        ax.grid(True, which="both", alpha=0.3)
    ax_g.legend(fontsize=7, loc="lower left")
    fig.suptitle(f"MTBF {params.mtbf_hours_per_gpu:,.0f} h/GPU, step {params.step_s:.3g} s, "
                 f"checkpoint {params.checkpoint_s:.3g} s, restart {params.restart_s:.3g} s, "
                 f"detect {params.detect_s:.3g} s, save {params.save_s:.3g} s, "
                 f"restore {params.restore_s:.3g} s", fontsize=9)
    fig.savefig(path, dpi=120)


