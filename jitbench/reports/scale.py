"""The model sections of ``jitbench report``: validation against the measured
runs, and wasted work at scale from the measured costs.

- :func:`validation` sets the model's predicted wasted GPU-seconds beside the
  measured ones for every (workload, strategy) group of runs that had a
  failure (:func:`jitbench.reports.validate.validation_table`; seeded Poisson
  campaigns come from ``jitbench sweep --fault-mtbf-steps``).
- :func:`at_scale` extrapolates: the step, save, restore, restart, detection
  and checkpoint costs are the medians measured in the results
  (:func:`jitbench.reports.projection.params_from_table`), the failure rate is
  the Llama 3 report's per-GPU MTBF
  (:data:`jitbench.reports.model.LLAMA3_MTBF_HOURS_PER_GPU`) unless given;
  the analytic model and the simulator then give wasted GPU-hours per day and
  goodput for 8 to 100,000 GPUs, and the crossover world sizes.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from jitbench.errors import InputError

SCALE_GPUS: tuple[int, ...] = (8, 64, 512, 4096, 16384, 100_000)
"""World sizes of the simulated points in the report (the analytic curves are continuous)."""
SCALE_TRIALS = 40
"""Simulated trials per world size in the report (``jitbench model --trials`` for more)."""
SCALE_HORIZON_HOURS = 24.0
SCALE_SEED = 0


def validation(directory: Path):
    """The validation table for the runs below ``directory``, or None when no
    run there had a failure (or nothing there is readable).

    Returns:
        pandas DataFrame, columns of :func:`jitbench.reports.validate.validation_table`.
    """
    from jitbench.reports.validate import load_results, validation_table

    try:
        runs, failures = load_results(directory)
    except (FileNotFoundError, ValueError, OSError):
        return None
    table = validation_table(runs, failures)
    return None if table.empty else table


@dataclass
class ScaleResult:
    """What :func:`at_scale` computed."""

    png: bytes
    """Wasted GPU-hours/day and goodput vs world size (analytic lines, simulated points)."""
    rows: list[dict[str, Any]]
    """:func:`jitbench.reports.projection.build_rows` rows (one per world size x strategy)."""
    crossovers: list[dict[str, Any]]
    """Analytic crossovers (``a``, ``b``, ``n_gpus``, ``below``, ``above``)."""
    params: dict[str, float]
    """The model parameters used (s; MTBF in hours per GPU)."""
    measured: list[str]
    """Parameter names that came from the results (the rest are the model's defaults)."""


def at_scale(table, mtbf_hours_per_gpu: float | None = None,
             gpus: tuple[int, ...] = SCALE_GPUS, trials: int = SCALE_TRIALS) -> ScaleResult | None:
    """Model and simulate the measured costs at 8-100,000 GPUs.

    Args:
        table: results or records (pandas DataFrame) with any of the columns
            of :data:`jitbench.reports.projection.RESULT_COLUMNS`.
        mtbf_hours_per_gpu: per-GPU MTBF (h); default the Llama 3 figure.

    Returns:
        None unless the table holds measured recovery costs (restart and
        detection: runs with failures); costs it lacks keep the model's
        defaults and are listed as such.
    """
    from jitbench.reports import model as m
    from jitbench.reports import projection

    try:
        overrides = projection.params_from_table(table)
    except InputError:
        return None
    if not {"restart_s", "detect_s"} <= set(overrides):
        return None
    mtbf = mtbf_hours_per_gpu or m.LLAMA3_MTBF_HOURS_PER_GPU
    params = replace(m.ModelParams(mtbf_hours_per_gpu=mtbf), **overrides)
    try:
        params.validate()
    except ValueError:
        return None
    rows = projection.build_rows(list(gpus), params, SCALE_HORIZON_HOURS, trials, SCALE_SEED)
    cross = projection.crossovers(params, list(gpus), rows)["analytic"]
    buf = io.BytesIO()  # savefig writes PNG (its default format) to a file object too
    projection.write_plot(buf, params, list(gpus), rows)
    used = {k: float(getattr(params, k)) for k in (
        "mtbf_hours_per_gpu", "step_s", "checkpoint_s", "save_s", "restore_s", "restart_s",
        "detect_s")}
    return ScaleResult(buf.getvalue(), rows, cross, used, sorted(overrides))
