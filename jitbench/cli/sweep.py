"""``jitbench sweep``: workloads x strategies x faults into one results table.

A workload is a built-in one (``--workloads``) or a user's training script
(``--script PATH``, repeatable, with ``--script-args``), launched in each of
its cells as ``jitbench launch`` launches it.
"""

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
    Mtbf,
    OverwriteOut,
    check_sizes,
    csv_list,
    parse_duration_s,
)
from jitbench.errors import SpecError
from jitbench.records import ExitStatus, verdict
from jitbench.runtime.strategies import usage as strategies_usage

if TYPE_CHECKING:
    from rich.table import Table

    from jitbench.harness.sweep import SweepScript

DEFAULT_WORKLOADS = "gpt,resnet"
"""``--workloads`` without ``--script`` (with it, only the scripts run unless given)."""
DEFAULT_STRATEGIES = "jit,periodic:5,periodic-async:5,none"
"""``--strategies`` of built-in workloads alone."""
SCRIPT_STRATEGIES = "own,jit"
"""``--strategies`` of scripts alone; beside built-in workloads only ``jit`` (both take it)."""


def parse_sizes(text: str | None) -> dict[str, str]:
    """``"gpt=tiny,resnet=resnet18"`` -> ``{"gpt": "tiny", "resnet": "resnet18"}``.

    Raises:
        SpecError: an item without ``=``.
    """
    if not text:
        return {}
    sizes = {}
    for item in csv_list(text, "--sizes"):
        if "=" not in item:
            raise SpecError(f"--sizes takes workload=size pairs (gpt=tiny,resnet=resnet18), "
                            f"got {item!r}")
        k, v = item.split("=", 1)
        if k.strip() in sizes:  # a second size of one workload would overwrite the first
            raise SpecError(f"--sizes gives a size of {k.strip()} twice ({sizes[k.strip()]}, "
                            f"{v.strip()}): give one size per workload")
        sizes[k.strip()] = v.strip()
    return sizes


def parse_scripts(paths: list[Path] | None, args: list[str] | None) -> list[SweepScript]:
    """The ``--script`` options with their ``--script-args`` (the k-th belongs to the
    k-th script; none at all: every script runs without arguments), each split as a
    shell would split it. Paths are made absolute.

    Raises:
        SpecError: ``--script-args`` given a different number of times than
            ``--script``, or unbalanced quotes (one line).
    """
    import shlex

    from jitbench.harness.sweep import SweepScript

    paths, args = list(paths or []), list(args or [])
    if args and len(args) != len(paths):
        raise SpecError(f"--script-args belongs to a --script: give it once per --script, in "
                        f"the same order (got {len(args)} --script-args for {len(paths)} "
                        "--script; --script-args '' for a script without arguments)")
    out = []
    for i, path in enumerate(paths):
        try:
            words = shlex.split(args[i]) if args else []
        except ValueError as exc:
            raise SpecError(f"--script-args {args[i]!r}: {exc}") from None
        out.append(SweepScript(path=str(Path(path).resolve()), args=words))
    return out


def fault_placement(fault_step: int | None, fault_rank: int | None,
                    mtbf_steps: float | None) -> dict[str, int]:
    """The :class:`~jitbench.harness.sweep.SweepConfig` fields of ``--fault-step`` and
    ``--fault-rank``: one fault at ``fault_step`` on ``fault_rank`` (their defaults
    when not given), or with ``--fault-mtbf-steps`` the Poisson draw's
    ``fault_start_step`` (``--fault-step``, as ``jitbench run`` takes it; its range is
    checked by ``SweepConfig.validate``).

    Raises:
        SpecError: ``--fault-rank`` with ``--fault-mtbf-steps`` (the draw picks each
            fault's rank from the seed, so the option would be ignored).
    """
    if mtbf_steps is None:
        return {k: v for k, v in (("fault_step", fault_step), ("fault_rank", fault_rank))
                if v is not None}
    if fault_rank is not None:
        raise SpecError("--fault-rank does not apply to --fault-mtbf-steps: a sweep's Poisson "
                        "faults hit ranks drawn from each seed (drop --fault-rank, or sweep "
                        "one fault per run with --fault-step)")
    return {} if fault_step is None else {"fault_start_step": fault_step}


def sweep(
    workloads: Annotated[str | None, typer.Option(
        help=f"Comma-separated workloads (default {DEFAULT_WORKLOADS}; with --script, none "
             "unless given).", show_default=False)] = None,
    scripts: Annotated[list[Path] | None, typer.Option(
        "--script", help="Also sweep this training script (repeatable): each cell launches "
                         "it as 'jitbench launch -- SCRIPT ARGS' does; its rows' workload is "
                         "script:NAME. Strategies: own and jit only.", show_default=False)]
    = None,
    script_args: Annotated[list[str] | None, typer.Option(
        "--script-args", help="The script's arguments, one string split as a shell would "
                              "(once per --script, in order); {run_dir} becomes each launch's "
                              "run directory, {seed} the cell's seed.", show_default=False)]
    = None,
    strategies: Annotated[str | None, typer.Option(
        help=f"Comma-separated strategies ({strategies_usage()}). Default: "
             f"{DEFAULT_STRATEGIES}; with --script alone {SCRIPT_STRATEGIES} (own: the script's "
             "own recovery); with both, jit.", show_default=False)] = None,
    faults: Annotated[str, typer.Option(help="Comma-separated fault kinds.")]
    = "kill,nccl-hang",
    seeds: Annotated[str, typer.Option(help="Comma-separated seeds.")] = "0",
    repeats: Annotated[int, typer.Option(help="Runs of each configuration.")] = 1,
    steps: Annotated[int, typer.Option(help="Optimizer steps per run.")] = 24,
    fault_step: Annotated[int | None, typer.Option(
        help="Step the fault fires at (default 14); with --fault-mtbf-steps, the step the "
             "Poisson draw starts at (default 1), as in 'jitbench run'.",
        show_default=False)] = None,
    fault_rank: Annotated[int | None, typer.Option(
        help="Rank the fault hits (default 1; not with --fault-mtbf-steps, whose faults "
             "hit ranks drawn from each seed).", show_default=False)] = None,
    nproc: Annotated[int, typer.Option("--nproc", help="Ranks per run.")] = 2,
    backend: Backend = "gloo",
    batch_size: BatchSize = 8,
    sizes: Annotated[str | None, typer.Option(help="Model sizes, e.g. gpt=tiny,"
                                                   "resnet=resnet18 (default: each "
                                                   "workload's).")] = None,
    mtbf: Mtbf = None,
    fault_mtbf_steps: Annotated[float | None, typer.Option(
        "--fault-mtbf-steps", help="Poisson faults (mean steps between failures, random "
        "ranks, seeded by each seed, drawn from --fault-step on) instead of one at "
        "--fault-step; the model validation runs on such sweeps.")] = None,
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

    Each cell (x seeds x repeats) is one run with its fault-free reference. A
    --script is a workload too: its cells launch it as 'jitbench launch' does."""
    from jitbench.harness.sweep import SweepConfig, SweepInterrupted, run_sweep
    size_map = parse_sizes(sizes)
    check_sizes(size_map)
    seed_items = csv_list(seeds, "--seeds")
    try:
        seed_list = [int(s) for s in seed_items]
    except ValueError:
        raise SpecError(f"--seeds takes comma-separated integers, got {seeds!r}") from None
    script_list = parse_scripts(scripts, script_args)
    if workloads is None:
        workloads = "" if script_list else DEFAULT_WORKLOADS
    if strategies is None:
        strategies = (DEFAULT_STRATEGIES if not script_list else
                      "jit" if csv_list(workloads, "--workloads") else SCRIPT_STRATEGIES)
    # every fault-placement option is honoured or refused, as 'jitbench run' does:
    # with --fault-mtbf-steps --fault-step starts the draw; the draw picks the ranks
    placement = fault_placement(fault_step, fault_rank, fault_mtbf_steps)
    cfg = SweepConfig(workloads=csv_list(workloads, "--workloads"), scripts=script_list,
                      strategies=csv_list(strategies, "--strategies"),
                      faults=csv_list(faults, "--faults"), seeds=seed_list, repeats=repeats,
                      steps=steps, nproc=nproc, backend=backend, batch_size=batch_size,
                      sizes=size_map, mtbf_s=parse_duration_s(mtbf),
                      fault_mtbf_steps=fault_mtbf_steps, fault_count=fault_count, **placement)
    try:
        cfg.validate()
    except SpecError as exc:
        if resume and out_dir is not None:  # an option left out takes its default
            raise SpecError(f"{exc}; --resume takes the options the sweep was started "
                            f"with (recorded in {out_dir / 'sweep.json'})") from None
        raise
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

    with console.on_interrupt(out_dir, " (--resume runs the rest)"):
        try:
            res = run_sweep(cfg, out_dir, resume=resume, overwrite=overwrite, on_run=on_run)
        except SweepInterrupted as e:
            say_interrupted(out_dir, e)
    if res.already_complete:
        console.line(f"sweep already complete in {out_dir} ({len(res.table)} runs); "
                     "nothing to resume")
        return
    with console.on_interrupt(out_dir):  # the sweep is complete: only its printing stops
        t = res.table
        if not as_json:
            console.out().print(results_table(t))
            session = (f", this session {res.session_wall_s:.0f} s"
                       if res.session_wall_s < res.wall_s - 0.5 else "")
            console.out().print(f"sweep directory: {out_dir}  ({len(t)} runs, wall "
                                f"{res.wall_s:.0f} s in all{session})")
        from jitbench.records import table_verdict

        status, lines = table_verdict(t)
        for text in lines:
            console.line(f"error: {text}")
    if status:
        raise typer.Exit(int(status))

def say_interrupted(out_dir: Path, e) -> None:
    """One line for an interrupted sweep (:class:`~jitbench.harness.sweep.SweepInterrupted`)
    with further signals held, then exit 130."""
    from jitbench.errors import ExitStatus
    from jitbench.harness.launch import held_signals

    late = (" once its last launch had ended (that run is finished and kept)"
            if e.late else "")
    table = (f"; their results are in {out_dir / 'results.csv'}" if e.done
             else "; no results table yet")
    with held_signals(reraise=False):
        console.line(f"interrupted{late}: sweep stopped after {e.done} of {e.total} cells"
                     f"{table} (sweep.json: complete false); --resume runs the rest")
    raise typer.Exit(int(ExitStatus.INTERRUPTED)) from None


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
