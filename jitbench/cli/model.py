"""``jitbench model``: wasted GPU time and goodput versus world size (no torch)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from jitbench.cli.options import JsonSummary, csv_list
from jitbench.errors import InputError

LLAMA3_MTBF_HOURS_PER_GPU = 16_384 * 54 * 24 / 419
"""Per-GPU MTBF (h) from the Llama 3 report ("The Llama 3 Herd of Models", Meta 2024, sec.
3.3.4): 419 unexpected interruptions in 54 days of pre-training on 16,384 GPUs."""


def parse_gpus(text: str, flag: str = "--gpus") -> list[int]:
    """``"8,64"`` -> ``[8, 64]``.

    Raises:
        InputError: not comma-separated integers, or an empty item (named as
            ``flag``).
    """
    items = csv_list(text, flag)
    try:
        return [int(x) for x in items]
    except ValueError:
        raise InputError(f"{flag}: expected comma-separated integers, got {text!r}") from None


def model(
    ctx: typer.Context,
    gpus: Annotated[str, typer.Option(help="Comma-separated world sizes (GPUs).")]
    = "8,64,512,1024,4096,16384,100000",
    mtbf_hours_per_gpu: Annotated[float, typer.Option(
        help="Per-GPU mean time between failures (h); default 50,677 h from the Llama 3 "
        "report (16,384 GPUs x 54 days / 419 interruptions).", show_default=False)]
    = LLAMA3_MTBF_HOURS_PER_GPU,
    step_s: Annotated[float, typer.Option(help="Step (minibatch) time (s).")] = 1.0,
    checkpoint_s: Annotated[float, typer.Option(help="Cost of one synchronous periodic "
                                                     "checkpoint (s).")] = 60.0,
    restart_s: Annotated[float, typer.Option(help="Job restart cost (s).")] = 300.0,
    detect_s: Annotated[float, typer.Option(help="Failure detection latency (s).")] = 30.0,
    save_s: Annotated[float, typer.Option(help="JIT checkpoint save (s).")] = 30.0,
    restore_s: Annotated[float, typer.Option(help="Checkpoint restore (s).")] = 60.0,
    from_results: Annotated[list[Path] | None, typer.Option(
        help="Records table (CSV/Parquet) of measured runs, or a sweep or run directory: its "
        "medians replace the costs not given as flags (rows of --parallel hsdp:RxS runs: the "
        "costs and replicas per shard of a sharded job). Also (repeat the option) a "
        "`jitbench io` CSV: its seconds per GB give the save, restore and checkpoint costs.",
        metavar="PATH")]
    = None,
    state_gb: Annotated[float | None, typer.Option(
        help="Training state (model + optimizer) in GB to scale the io table's seconds per "
        "GB to; default the state the io table measured.", show_default=False)] = None,
    split_writers: Annotated[int | None, typer.Option(
        help="Take the JIT save (and restore) of this many split writers from the io table "
        "(one of its `split save R=` rows) instead of one writer's.", show_default=False)]
    = None,
    crossover_replicas: Annotated[str, typer.Option(
        help="HSDP replicas per shard whose jit vs periodic crossover is shown beside plain "
        "data parallel (the measured R is added; 1 is full sharding).")] = "1,2,4,8",
    horizon_hours: Annotated[float, typer.Option(help="Simulated job length (h).")] = 720.0,
    trials: Annotated[int, typer.Option(help="Monte Carlo trials per point.")] = 100,
    seed: Annotated[int, typer.Option(help="Seed of the simulated failure traces.")] = 0,
    out: Annotated[Path | None, typer.Option(help="Also write model.csv and model.png here.")]
    = None,
    as_json: JsonSummary = False,
) -> None:
    """Wasted GPU time and goodput vs world size.

    The analytic model and the failure simulator side by side, for jit and the
    periodic baselines."""
    from jitbench.reports.modelcmd import RESULT_COLUMNS, model_main

    # typer ships its own click; compare the source's name, not click's enum
    given = frozenset(k for k in RESULT_COLUMNS.values()
                      if getattr(ctx.get_parameter_source(k), "name", None) == "COMMANDLINE")
    code = model_main(parse_gpus(gpus), mtbf_hours_per_gpu, step_s, checkpoint_s, restart_s,
                      detect_s, save_s, restore_s, from_results or None, horizon_hours, trials,
                      seed, as_json, out, explicit=given, state_gb=state_gb,
                      split_writers=split_writers,
                      crossover_replicas=parse_gpus(crossover_replicas, "--crossover-replicas"))
    if code:
        raise typer.Exit(code)
