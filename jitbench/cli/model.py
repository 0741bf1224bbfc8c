"""``jitbench model``: wasted GPU time and goodput versus world size (no torch)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from jitbench.cli.options import JsonSummary
from jitbench.errors import InputError

LLAMA3_MTBF_HOURS_PER_GPU = 16_384 * 54 * 24 / 419
"""Per-GPU MTBF (h) from the Llama 3 report ("The Llama 3 Herd of Models", Meta 2024, sec.
3.3.4): 419 unexpected interruptions in 54 days of pre-training on 16,384 GPUs."""


def parse_gpus(text: str) -> list[int]:
    """``"8,64"`` -> ``[8, 64]``.

    Raises:
        InputError: not comma-separated integers.
    """
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"--gpus: expected comma-separated integers, got {text!r}") from None


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
    from_results: Annotated[Path | None, typer.Option(
        help="Records table (CSV/Parquet) of measured runs, or a sweep directory: its "
        "medians replace the costs not given as flags.")]
    = None,
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
                      detect_s, save_s, restore_s, from_results, horizon_hours, trials, seed,
                      as_json, out, explicit=given)
    if code:
        raise typer.Exit(code)
