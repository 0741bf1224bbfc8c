"""``jitbench sweep``: workloads x strategies x faults into one results table."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from jitbench.cli import console
from jitbench.cli.console import cell
from jitbench.cli.options import (
    Backend,
    BatchSize,
    FaultRank,
    Mtbf,
    OverwriteOut,
    Strategies,
    check_sizes,
    csv_list,
    parse_duration_s,
)
from jitbench.errors import SpecError
from jitbench.records import ExitStatus, verdict

if TYPE_CHECKING:
    from rich.table import Table


def parse_sizes(text: str | None) -> dict[str, str]:
    """``"gpt=tiny,resnet=resnet18"`` -> ``{"gpt": "tiny", "resnet": "resnet18"}``.

    Raises:
        SpecError: an item without ``=``.
    """
    if not text:
        return {}
    sizes = {}
    for item in csv_list(text):
        if "=" not in item:
            raise SpecError(f"--sizes takes workload=size pairs (gpt=tiny,resnet=resnet18), "
                            f"got {item!r}")
        k, v = item.split("=", 1)
        sizes[k.strip()] = v.strip()
    return sizes


def sweep(
    workloads: Annotated[str, typer.Option(help="Comma-separated workloads.")] = "gpt,resnet",
    strategies: Strategies = "jit,periodic:5,periodic-async:5,none",
    faults: Annotated[str, typer.Option(help="Comma-separated fault kinds.")]
    = "kill,nccl-hang",
    seeds: Annotated[str, typer.Option(help="Comma-separated seeds.")] = "0",
    repeats: Annotated[int, typer.Option(help="Runs of each configuration.")] = 1,
    steps: Annotated[int, typer.Option(help="Optimizer steps per run.")] = 24,
    fault_step: Annotated[int, typer.Option(help="Step the fault fires at.")] = 14,
    fault_rank: FaultRank = 1,
    nproc: Annotated[int, typer.Option("--nproc", help="Ranks per run.")] = 2,
    backend: Backend = "gloo",
    batch_size: BatchSize = 8,
    sizes: Annotated[str | None, typer.Option(help="Model sizes, e.g. gpt=tiny,"
                                                   "resnet=resnet18 (default: each "
                                                   "workload's).")] = None,
    mtbf: Mtbf = None,
    fault_mtbf_steps: Annotated[float | None, typer.Option(
        "--fault-mtbf-steps", help="Poisson faults (mean steps between failures, random "
        "ranks, seeded by each seed) instead of one at --fault-step; the model "
        "validation runs on such sweeps.")] = None,
    fault_count: Annotated[int | None, typer.Option(
        help="At most this many faults per run (--fault-mtbf-steps).")] = None,
    out_dir: Annotated[Path | None, typer.Option("--out", help="Sweep directory "
                                                              "(default sweeps/<time>).")]
    = None,
    resume: Annotated[bool, typer.Option(help="Keep finished runs of an interrupted sweep "
                                              "in --out and run the rest.")] = False,
    overwrite: OverwriteOut = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the rows as JSON lines.")]
    = False,
) -> None:
    """Run workloads x strategies x faults into one results table.

    Each cell (x seeds x repeats) is one run with its fault-free reference."""
    from jitbench.harness.sweep import SweepConfig, run_sweep
    size_map = parse_sizes(sizes)
    check_sizes(size_map)
    try:
        seed_list = [int(s) for s in csv_list(seeds)]
    except ValueError:
        raise SpecError(f"--seeds takes comma-separated integers, got {seeds!r}") from None
    cfg = SweepConfig(workloads=csv_list(workloads), strategies=csv_list(strategies),
                      faults=csv_list(faults), seeds=seed_list, repeats=repeats, steps=steps,
                      fault_step=fault_step, fault_rank=fault_rank, nproc=nproc,
                      backend=backend, batch_size=batch_size, sizes=size_map,
                      mtbf_s=parse_duration_s(mtbf), fault_mtbf_steps=fault_mtbf_steps,
                      fault_count=fault_count)
    cfg.validate()
    if out_dir is None:
        out_dir = Path("sweeps") / time.strftime("%Y%m%d-%H%M%S")
    n = len(cfg.cells())
    done = {"n": 0}
    t0 = time.monotonic()
    err = console.err()

    def on_run(row: dict) -> None:
        if row.get("reference"):
            err.print(f"[dim]reference {row['workload']} seed {row['seed']}: "
                      f"{cell(row.get('wall_s'), 1)} s[/dim]")
            return
        done["n"] += 1
        if as_json:
            print(json.dumps(row, default=str), flush=True)
        ok = verdict(row, strict=True)[0] == ExitStatus.OK
        err.print(f"[{done['n']}/{n}] {row['workload']} {row['strategy']} {row['fault']} "
                  f"r{row['repeat']}: recovery {cell(row.get('recovery_s'))} s, replayed "
                  f"{cell(row.get('replayed_steps'))} (expected "
                  f"{cell(row.get('expected_replayed_steps'))}), state_equal "
                  f"{cell(row.get('state_equal'))} "
                  + ("[green]ok[/green]" if ok else "[red]VIOLATION[/red]")
                  + f"  [{time.monotonic() - t0:.0f} s]")

    res = run_sweep(cfg, out_dir, resume=resume, overwrite=overwrite, on_run=on_run)
    t = res.table
    if not as_json:
        console.out().print(results_table(t))
        console.out().print(f"sweep directory: {out_dir}  ({len(t)} runs, wall {res.wall_s:.0f} s)")
    from jitbench.records import table_verdict

    status, lines = table_verdict(t)
    for text in lines:
        console.line(f"error: {text}")
    if status:
        raise typer.Exit(int(status))

def results_table(t) -> Table:
    """Terminal table of a results table (one row per run; times in s)."""
    from rich.table import Table

    tab = Table(title="sweep results (times in s)")
    heads = ("workload", "strategy", "fault", "detect", "save", "restart", "restore",
             "recovery", "replayed/expected", "wasted GPU-s", "goodput", "state_equal")
    for h in heads:
        tab.add_column(h, justify="left" if h in heads[:3] else "right")
    for _, r in t.iterrows():
        tab.add_row(str(r["workload"]), str(r["strategy"]), str(r["fault"]),
                    *[cell(r.get(k)) for k in ("detect_s", "save_s", "restart_s", "restore_s",
                                              "recovery_s")],
                    f"{cell(r.get('replayed_steps'))}/{cell(r.get('expected_replayed_steps'))}",
                    cell(r.get("wasted_gpu_s"), 1), cell(r.get("goodput")),
                    cell(r.get("state_equal")))
    return tab
