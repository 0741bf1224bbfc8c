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
Groups are (workload, strategy, fault kind); each run is predicted from the
phase medians of the group's other runs when it has several (leave-one-out).
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from jitbench import records
from jitbench.reports.model import periodic_wasted_gpu_s

TOLERANCE_PCT = 15.0
"""Agreement target between model and measurement (issue 6)."""


def _interval(strategy: str) -> int | None:
    if ":" in strategy:
        tail = strategy.split(":", 1)[1]
        if tail.isdigit():
            return int(tail)
    return None


RUN_COLUMNS = ("workload", "strategy", "world_size", "num_failures", "step_s", "wasted_gpu_s")
"""Columns of a run the validation reads (a records or results table has them)."""


def load_results(path: str | Path, require_dirs: str | None = None
                 ) -> tuple[pd.DataFrame, pd.DataFrame, int]:
    """Runs and failures (:func:`jitbench.records.load_results` and
    :func:`jitbench.records.load_failures`): a sweep directory (its results
    table and each run's ``failures.csv``), another directory (every
    ``records.csv`` and ``failures.csv`` below it) or one records table
    (CSV/Parquet; the phase costs come from a ``failures.csv`` beside it, else
    from its own columns), and how many runs' directories were not found (their
    ``failures.csv`` neither checked against the row nor read).

    ``require_dirs``: None, or the opt-out flag named when a row whose run directory is
    missing is refused (:func:`jitbench.reports.evidence.check_evidence`).

    Raises:
        InputError: nothing usable at ``path``, or not a jitbench records/results
            table (it lacks one of :data:`RUN_COLUMNS`), or a row that contradicts its
            evidence, or (``require_dirs``) whose run directory is missing
            (:func:`jitbench.reports.evidence.check_evidence`); a ValueError.
    """
    from jitbench.reports.evidence import check_evidence

    runs = records.load_results(path, require=RUN_COLUMNS, what="records or results")
    unchecked = check_evidence(runs, str(path), path, require_dirs=require_dirs)
    return runs, records.load_failures(path, runs), unchecked


def _median(df: pd.DataFrame, col: str) -> float | None:
    """Median of the finite values of ``df[col]``; None when there is none."""
    if col not in df.columns:
        return None
    v = pd.to_numeric(df[col], errors="coerce")
    v = v[v.map(lambda x: math.isfinite(x))]
    return float(v.median()) if len(v) else None


def _num(run: pd.Series, col: str, default: float | None = None) -> float | None:
    """A finite number from a records row, else ``default``."""
    try:
        x = float(run.get(col))
    except (TypeError, ValueError):
        return default
    return x if math.isfinite(x) else default


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
    n = _num(run, "world_size")
    k = _num(run, "num_failures", 0.0)
    step = phases.get("step_s")
    if not n or n <= 0 or not step or step <= 0:
        return None
    needed = ["detect_s", "restart_s", "restore_s"]
    strategy = str(run["strategy"])
    interval = _interval(strategy)
    if strategy.startswith("periodic") and interval:
        t = _num(run, "train_wall_s", 0.0)
        saves = _num(run, "checkpoint_saves", 0.0)
        if t <= 0 or any(phases.get(x) is None for x in needed):
            return None
        r = phases["detect_s"] + phases["restart_s"] + phases["restore_s"]
        c = 1.0 / (interval * step)
        f = k / (n * t)
        # the model charges c*t checkpoints; the run's own count is exact
        w = periodic_wasted_gpu_s(n, t, 0.0, c, f, r)
        return w + n * saves * (phases.get("checkpoint_s") or 0.0)
    if strategy == "jit":
        if any(phases.get(x) is None for x in needed + ["save_s"]):
            return None
        return n * k * (phases["detect_s"] + phases["save_s"] + phases["restart_s"]
                        + phases["restore_s"] + step / 2.0)
    if strategy == "none":
        if any(phases.get(x) is None for x in needed):
            return None
        r = phases["detect_s"] + phases["restart_s"] + phases["restore_s"]
        replay = _num(run, "replayed_steps", 0.0)
        return n * (k * (r + step / 2.0) + replay * step)
    return None


COVERED = ("jit", "none", "periodic:N", "periodic-async:N")
"""The strategies :func:`predict_run` predicts (``N``: the checkpoint interval in steps)."""


def covers(strategy: str) -> bool:
    """Whether :func:`predict_run` has a model of ``strategy`` (:data:`COVERED`): ``jit``,
    ``none``, or a ``periodic*:N`` strategy with an interval of N steps."""
    strategy = str(strategy)
    return (strategy in ("jit", "none")
            or (strategy.startswith("periodic") and _interval(strategy) is not None))


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def why_empty(runs: pd.DataFrame, failures: pd.DataFrame) -> str:
    """Why :func:`validation_table` of these runs has no row, in one line (for the
    error message): no run had a failure; the runs with a failure are all under
    strategies the model does not cover (:data:`COVERED`; e.g. ``own``, a script's own
    recovery); or the covered ones lack what the model needs (a measured
    ``wasted_gpu_s``, or the world size, step time, a phase cost or, for
    ``periodic:N``, the training wall time). Several causes are joined by
    ``;``. Call it only when the table is empty."""
    if runs.empty or "num_failures" not in runs.columns or "strategy" not in runs.columns:
        return "no run with a failure to validate against"
    faulty = runs[pd.to_numeric(runs["num_failures"], errors="coerce").fillna(0) > 0]
    if faulty.empty:
        return (f"no run with a failure to validate against ({_plural(len(runs), 'run')}, "
                "none with num_failures > 0)")
    # a table that did not come through load_results may hold an empty strategy cell
    faulty = faulty.assign(strategy=faulty["strategy"].fillna("").astype(str))
    strategies = faulty["strategy"]
    other = faulty[~strategies.map(covers)]
    causes = []
    if len(other):
        names = sorted(set(other["strategy"]))
        causes.append(f"{_plural(len(other), 'run')} with a failure under strategy "
                      f"{', '.join(names)}, which the model does not predict (it covers: "
                      f"{', '.join(COVERED)})")
    covered = faulty[strategies.map(covers)]
    if len(covered):
        unmeasured = sum(_num(r, "wasted_gpu_s") is None for _, r in covered.iterrows())
        # a periodic run's prediction also needs its training wall time (predict_run)
        names = covered["strategy"].astype(str)
        periodic = names.str.startswith("periodic").any()
        cols = ["world_size", "step_s",
                *(p for p in PHASES if p != "save_s" or (names == "jit").any()),
                *(["train_wall_s"] if periodic else [])]
        needs = f"a value the model needs ({', '.join(cols)})"
        if unmeasured == len(covered):
            what = "none with a measured wasted_gpu_s (a failure that did not recover)"
        elif unmeasured:
            what = (f"{unmeasured} without a measured wasted_gpu_s (a failure that did not "
                    f"recover), the others without {needs}")
        else:
            what = f"without {needs}"
        causes.append(f"{_plural(len(covered), 'run')} with a failure under "
                      f"{', '.join(sorted(set(covered['strategy'].astype(str))))}, {what}")
    head = "no run the model can predict" if len(covered) else "no run the model covers"
    return f"{head}: " + "; ".join(causes)


PHASES = ("detect_s", "save_s", "restart_s", "restore_s")


def _phases(runs: pd.DataFrame, failures: pd.DataFrame, strategy: str) -> dict[str, float | None]:
    """Median phase costs (s) of ``runs``: per failure from ``failures`` (rows
    of these runs); without per-failure rows, the runs' own summary columns."""
    if not failures.empty and "run_dir" in failures.columns and "run_dir" in runs.columns:
        failures = failures[failures["run_dir"].isin(runs["run_dir"])]
    src = failures if not failures.empty else runs
    phases = {k: _median(src, k) for k in PHASES}
    phases["step_s"] = _median(runs, "step_s")
    phases["checkpoint_s"] = _median(runs, "checkpoint_s")
    if not str(strategy).startswith("jit"):
        phases["save_s"] = 0.0
    return phases


def fault_kind(runs: pd.DataFrame) -> pd.Series:
    """The fault kind of each run: the ``fault`` column of a sweep, else the
    kinds of the ``faults`` column of records (``kill@1:7,...``), joined by ``+``."""
    if "fault" in runs.columns:
        return runs["fault"].fillna("none").astype(str)
    if "faults" in runs.columns:
        return runs["faults"].fillna("").astype(str).map(
            lambda x: "+".join(sorted({f.split("@")[0] for f in x.split(",") if f})) or "none")
    return pd.Series("?", index=runs.index)


COLUMNS = ["workload", "strategy", "fault", "runs", "failures", "measured_wasted_gpu_s",
           "predicted_wasted_gpu_s", "error_pct", "within_tolerance", "phases_from"]


def validation_table(runs: pd.DataFrame, failures: pd.DataFrame) -> pd.DataFrame:
    """Measured vs predicted wasted GPU-seconds per (workload, strategy, fault kind).

    Only runs with at least one failure, a measured ``wasted_gpu_s`` and the
    costs the model needs count. Groups are per fault kind because detection
    differs by orders of magnitude (a killed peer: milliseconds; a hang: the
    watchdog bound). Out of sample where possible: when a group holds several
    runs (seeds or repeats), each run is predicted from the phase medians of
    the group's *other* runs (leave-one-out), so a run's own recovery times
    never enter its prediction; a group of one run is predicted from its own
    medians (``phases_from``: ``other runs`` or ``own run``).

    Columns: :data:`COLUMNS`.
    """
    out = []
    if runs.empty or "num_failures" not in runs.columns or "strategy" not in runs.columns:
        return pd.DataFrame(columns=COLUMNS)
    runs = runs.assign(fault=fault_kind(runs))
    if "workload" not in runs.columns:
        runs["workload"] = "?"
    faulty = runs[pd.to_numeric(runs["num_failures"], errors="coerce").fillna(0) > 0]
    for (workload, strategy, fault), grp in faulty.groupby(["workload", "strategy", "fault"],
                                                           sort=True):
        loo = len(grp) > 1 and "run_dir" in grp.columns
        own = _phases(grp, failures, str(strategy))
        preds, meas, nfail = [], [], 0
        for idx, row in grp.iterrows():
            phases = _phases(grp.drop(index=idx), failures, str(strategy)) if loo else own
            p = predict_run(row, phases)
            m = _num(row, "wasted_gpu_s")
            if p is None or m is None or not math.isfinite(p):
                continue
            preds.append(p)
            meas.append(m)
            nfail += int(_num(row, "num_failures", 0.0))
        if not meas:
            continue
        measured, predicted = sum(meas), sum(preds)
        err = 100.0 * (predicted - measured) / measured if measured > 0 else float("nan")
        out.append({"workload": workload, "strategy": strategy, "fault": fault,
                    "runs": len(meas), "failures": nfail,
                    "measured_wasted_gpu_s": measured, "predicted_wasted_gpu_s": predicted,
                    "error_pct": err,
                    "within_tolerance": bool(math.isfinite(err) and abs(err) <= TOLERANCE_PCT),
                    "phases_from": "other runs" if loo else "own run"})
    return pd.DataFrame(out, columns=COLUMNS)
