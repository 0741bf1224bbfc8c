"""Validate the wasted-work model against measured runs (issue: model vs measurement).

For every group of measured runs (workload x strategy) that had failures, the
model predicts the wasted GPU time from the group's *measured* per-phase
medians (detection, JIT save, restart, restore; step time; checkpoint cost)
and the number of failures each run actually had, and the prediction is set
beside the measured ``wasted_gpu_s`` (derived from events, see
:mod:`jitbench.harness.metrics`).

Predictions per run of ``n`` GPUs (ranks), ``k`` failures:

- ``periodic:N`` (Young 1974; Daly 2006; :func:`jitbench.reports.model.periodic_wasted_gpu_s`):
  ``W = n t (c o + n f r + n f / (2c))`` with ``n f t = k`` failures over the
  training wall time ``t``, ``c = 1 / (N x step_s)`` checkpoints per second,
  ``o`` the measured checkpoint cost and ``r = detect + restart + restore``:
  each failure costs the recovery plus, on average, half a checkpoint interval
  of lost work.
- ``periodic-async:N``: as periodic with the measured (stall) cost per save.
- ``jit`` (Gupta et al., EuroSys 2024): ``W = n k (detect + save + restart +
  restore + step_s / 2)``: each failure costs the recovery and, on average,
  half of the interrupted minibatch; no steady-state term (the runtime's
  per-step cost is measured separately by ``jitbench overhead``).
- ``none``: ``W = n sum(recovery + work since start)``, evaluated from the
  fault steps (the model has no closed form without a failure-time law).

``error_pct = 100 (predicted - measured) / measured`` over the group's total.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from jitbench.reports.model import periodic_wasted_gpu_s

TOLERANCE_PCT = 15.0
"""Agreement target between model and measurement (issue 6)."""


def _interval(strategy: str) -> int | None:
    if ":" in strategy:
        tail = strategy.split(":", 1)[1]
        if tail.isdigit():
            return int(tail)
    return None


def load_results(path: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Runs and failures from a results directory (every ``records.csv`` and
    ``failures.csv`` below it) or from one records table (CSV/Parquet).

    Raises:
        FileNotFoundError: nothing usable at ``path``.
    """
    p = Path(path)
    if p.is_dir():
        recs = [pd.read_csv(f) for f in sorted(p.rglob("records.csv"))]
        fails = [pd.read_csv(f) for f in sorted(p.rglob("failures.csv"))]
        if not recs:
            raise FileNotFoundError(f"{p}: no records.csv below it")
        runs = pd.concat(recs, ignore_index=True)
        failures = pd.concat(fails, ignore_index=True) if fails else pd.DataFrame()
        return runs, failures
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such file or directory")
    runs = pd.read_parquet(p) if p.suffix in (".parquet", ".pq") else pd.read_csv(p)
    fpath = p.with_name("failures.csv")
    failures = pd.read_csv(fpath) if fpath.exists() else pd.DataFrame()
    return runs, failures


def _median(df: pd.DataFrame, col: str) -> float:
    if col not in df.columns:
        return 0.0
    v = pd.to_numeric(df[col], errors="coerce").dropna()
    return float(v.median()) if len(v) else 0.0


def predict_run(run: pd.Series, phases: dict[str, float]) -> float | None:
    """Model-predicted wasted GPU-seconds of one measured run (see module doc).

    Args:
        run: one records row (``strategy``, ``world_size``, ``num_failures``,
            ``train_wall_s``, ``checkpoint_saves``, ``replayed_steps``).
        phases: medians ``detect_s``, ``save_s``, ``restart_s``, ``restore_s``,
            ``step_s``, ``checkpoint_s`` (s).

    Returns:
        GPU-seconds, or None for a strategy the model does not cover.
    """
    n = float(run["world_size"])
    k = float(run.get("num_failures", 0) or 0)
    step = phases["step_s"]
    strategy = str(run["strategy"])
    interval = _interval(strategy)
    if strategy.startswith("periodic") and interval:
        t = float(run.get("train_wall_s") or 0.0)
        saves = float(run.get("checkpoint_saves") or 0.0)
        if t <= 0:
            return None
        r = phases["detect_s"] + phases["restart_s"] + phases["restore_s"]
        c = 1.0 / (interval * step)
        f = k / (n * t)
        # the model charges c*t checkpoints; the run's own count is exact
        w = periodic_wasted_gpu_s(n, t, 0.0, c, f, r)
        return w + n * saves * phases["checkpoint_s"]
    if strategy == "jit":
        return n * k * (phases["detect_s"] + phases["save_s"] + phases["restart_s"]
                        + phases["restore_s"] + step / 2.0)
    if strategy == "none":
        r = phases["detect_s"] + phases["restart_s"] + phases["restore_s"]
        replay = float(run.get("replayed_steps") or 0.0)
        return n * (k * (r + step / 2.0) + replay * step)
    return None


def _phases(runs: pd.DataFrame, failures: pd.DataFrame, strategy: str) -> dict[str, float]:
    """Median phase costs (s) of ``runs`` and their ``failures``."""
    if not failures.empty and "run_dir" in failures.columns and "run_dir" in runs.columns:
        failures = failures[failures["run_dir"].isin(runs["run_dir"])]
    phases = {k: _median(failures, k) for k in ("detect_s", "save_s", "restart_s", "restore_s")}
    phases["step_s"] = _median(runs, "step_s")
    phases["checkpoint_s"] = _median(runs, "checkpoint_s")
    if not str(strategy).startswith("jit"):
        phases["save_s"] = 0.0
    return phases


def validation_table(runs: pd.DataFrame, failures: pd.DataFrame) -> pd.DataFrame:
    """Measured vs predicted wasted GPU-seconds per (workload, strategy).

    Only runs with at least one failure and a measured ``wasted_gpu_s`` count.
    Out of sample where possible: when a group holds several runs (seeds or
    repeats), each run is predicted from the phase medians of the group's
    *other* runs (leave-one-out), so a run's own recovery times never enter
    its prediction; a group of one run is predicted from its own medians
    (``phases_from``: ``other runs`` or ``own run``).

    Columns: ``workload, strategy, runs, failures, measured_wasted_gpu_s,
    predicted_wasted_gpu_s, error_pct, within_tolerance, phases_from``.
    """
    out = []
    if runs.empty or "num_failures" not in runs.columns:
        return pd.DataFrame(columns=["workload", "strategy", "runs", "failures",
                                     "measured_wasted_gpu_s", "predicted_wasted_gpu_s",
                                     "error_pct", "within_tolerance", "phases_from"])
    faulty = runs[pd.to_numeric(runs["num_failures"], errors="coerce").fillna(0) > 0]
    for (workload, strategy), grp in faulty.groupby(["workload", "strategy"], sort=True):
        loo = len(grp) > 1 and "run_dir" in grp.columns
        own = _phases(grp, failures, str(strategy))
        preds, meas = [], []
        for idx, row in grp.iterrows():
            phases = _phases(grp.drop(index=idx), failures, str(strategy)) if loo else own
            p = predict_run(row, phases)
            m = row.get("wasted_gpu_s")
            if p is None or m is None or (isinstance(m, float) and math.isnan(m)):
                continue
            preds.append(p)
            meas.append(float(m))
        if not meas:
            continue
        measured, predicted = sum(meas), sum(preds)
        err = 100.0 * (predicted - measured) / measured if measured > 0 else float("nan")
        out.append({"workload": workload, "strategy": strategy, "runs": len(meas),
                    "failures": int(pd.to_numeric(grp["num_failures"]).sum()),
                    "measured_wasted_gpu_s": measured, "predicted_wasted_gpu_s": predicted,
                    "error_pct": err,
                    "within_tolerance": bool(abs(err) <= TOLERANCE_PCT),
                    "phases_from": "other runs" if loo else "own run"})
    return pd.DataFrame(out)
