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
  goodput for 8 to 100,000 GPUs, and the crossover world sizes; beside them the
  JIT vs periodic crossover for plain data parallel and each HSDP replica count
  (:func:`jitbench.reports.projection.crossovers_by_replicas`), with the costs of
  the results' ``hsdp:RxS`` rows where there are any.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
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
        runs, failures, _ = load_results(directory)  # the report counts unchecked rows
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
    by_replicas: list[dict[str, Any]] = field(default_factory=list)
    """:func:`jitbench.reports.projection.crossovers_by_replicas` rows (jit vs periodic
    for plain data parallel and each HSDP replica count), each with ``measured``
    (whether the results hold ``hsdp`` rows of that R) and ``text`` (one line)."""
    layout: str = "ddp"
    """The layout of the main table: ``ddp``, or ``hsdp R=..`` for results of ``hsdp``
    runs only."""


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

    mtbf = mtbf_hours_per_gpu or m.LLAMA3_MTBF_HOURS_PER_GPU
    base = m.ModelParams(mtbf_hours_per_gpu=mtbf)
    try:
        costs = projection.costs_from_records(table)
        main = costs.main_replicas()
        params, overrides, _ = projection.layout_params(base, costs, main)
        if not {"restart_s", "detect_s"} <= set(overrides):
            return None
        layouts = []
        for r in [None, *projection.replica_counts(costs)]:
            p, _, label = projection.layout_params(base, costs, r)
            layouts.append((r, p, label))
    except InputError:
        return None
    rows = projection.build_rows(list(gpus), params, SCALE_HORIZON_HOURS, trials, SCALE_SEED)
    cross = projection.crossovers(params, list(gpus), rows)["analytic"]
    by_replicas = projection.crossovers_by_replicas(layouts, list(gpus))
    for b in by_replicas:
        b["measured"] = b["replicas_per_shard"] in costs.replicas
        b["text"] = projection.describe_crossovers(b)
    buf = io.BytesIO()  # savefig writes PNG (its default format) to a file object too
    projection.write_plot(buf, params, list(gpus), rows)
    used = {k: float(getattr(params, k)) for k in (
        "mtbf_hours_per_gpu", "step_s", "checkpoint_s", "save_s", "restore_s", "restart_s",
        "detect_s")}
    return ScaleResult(buf.getvalue(), rows, cross, used, sorted(overrides), by_replicas,
                       "ddp" if main is None else f"hsdp R={main}")
