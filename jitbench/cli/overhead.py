"""``jitbench overhead``: steady-state step time of each strategy against none."""

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
    OverwriteOut,
    Workload,
    check_sizes,
    csv_list,
)
from jitbench.errors import ExitStatus, InputError

if TYPE_CHECKING:
    from rich.table import Table

    from jitbench.harness.script import ScriptSpec


def overhead(
    workload: Workload = "gpt",
    size: Annotated[str | None, typer.Option(help="Model size by name.")] = None,
    strategies: Annotated[str | None, typer.Option(
        help="Comma-separated strategies (none is always included). Default: "
             "none,jit,periodic:10,periodic-async:10; for a script: none,own,jit.")] = None,
    segment_steps: Annotated[int | None, typer.Option(
        help="Measured steps per segment (a multiple of every interval). Default: 2 in "
             "one launch (the intervals' LCM with a periodic strategy), 20 per launch "
             "(rounded up to a multiple of the intervals).",
        show_default=False)] = None,
    repeats: Annotated[int | None, typer.Option(
        help="Segments per strategy (default: whole balanced designs until each strategy "
             "has 100 measured steps in one launch, one design per launch; a multiple of "
             "the design size keeps the order balanced).")] = None,
    warmup_steps: Annotated[int, typer.Option(help="Excluded steps before the first "
                                                   "segment.")] = 10,
    segment_warmup: Annotated[int | None, typer.Option(
        help="Excluded steps at the start of every segment (at least: stretched to "
             "whole intervals). Default: 1, or 3 with a periodic strategy.",
        show_default=False)] = None,
    order_seed: Annotated[int, typer.Option("--order-seed", help="Seed of the order's "
                                            "shuffle and of the bootstrap.")] = 0,
    nproc: Annotated[int, typer.Option("--nproc", help="Ranks.")] = 2,
    backend: Backend = "gloo",
    batch_size: BatchSize = 8,
    seed: Annotated[int, typer.Option(help="Seed.")] = 0,
    out_dir: Annotated[Path | None, typer.Option("--out", help="Output directory "
                                                              "(default overhead/<time>).")]
    = None,
    overwrite: OverwriteOut = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the rows as JSON.")] = False,
    command: Annotated[list[str] | None, typer.Argument(
        help="After --: a training script and its arguments (as for jitbench launch): "
             "measure the overhead of jitbench's hooks (own) and of transparent JIT (jit) "
             "on it against the script as torchrun runs it (none).", show_default=False)]
    = None,
) -> None:
    """Steady-state overhead of each strategy versus none.

    Every strategy fault-free, in segments of one launch ordered by a balanced
    (Williams) design with an A/A control; strategies with their own launcher
    (jit-inprocess, the peers) one launch per strategy and repeat, in the same order.
    Overheads come with 95% bootstrap intervals. With a script after --
    (jitbench overhead [OPTIONS] -- SCRIPT.py ARGS) one launch per arm and
    repeat: the script alone, under jitbench's hooks, and under transparent JIT."""
    from jitbench.harness.overhead import OverheadConfig, OverheadInterrupted, run_overhead
    from jitbench.harness.spec import RunSpec

    script = command is not None and len(command) > 0
    if strategies is None:
        strategies = "none,own,jit" if script else "none,jit,periodic:10,periodic-async:10"
    cfg = OverheadConfig(strategies=csv_list(strategies, "--strategies"),
                         segment_steps=segment_steps, repeats=repeats, warmup_steps=warmup_steps,
                         segment_warmup=segment_warmup, seed=order_seed, script=script)
    base: RunSpec | ScriptSpec
    if script:
        from jitbench.cli.launch import parse_command
        from jitbench.harness.script import ScriptSpec

        if size:
            raise InputError("--size is a built-in workload's: a script sizes itself (pass "
                             "its own options after --)")
        path, module, args = parse_command(command)
        base = ScriptSpec(script=path, module=module, args=args, nproc=nproc)
        workload = base.name
    else:
        from jitbench.workloads import WorkloadConfig

        if size:
            check_sizes({workload: size})
        base = RunSpec(workload=WorkloadConfig(name=workload, size=size,
                                               batch_size=batch_size, seed=seed),
                       nproc=nproc, backend=backend)
    base.validate()
    cfg.validate()
    if out_dir is None:
        out_dir = Path("overhead") / time.strftime("%Y%m%d-%H%M%S")
    if cfg.mode == "segments":
        what = (f"{cfg.plan()[1]} steps in {len(cfg.order())} segments of one launch")
    else:
        what = (f"{len(cfg.order())} launches (strategies with their own launcher: one "
                "launch each per repeat)")
    with console.on_interrupt(out_dir):  # one line and 130, whenever Ctrl-C comes
        with console.err().status(f"overhead: {workload} x{nproc}, {what}"):
            try:
                res = run_overhead(base, cfg, out_dir, overwrite=overwrite)
            except RuntimeError as exc:
                console.line(f"error: {exc}")
                raise typer.Exit(int(ExitStatus.RUN_FAILED)) from None
            except OverheadInterrupted as e:
                say_interrupted(out_dir, e)
        if as_json:
            print(json.dumps(res.summary))
            return
        console.out().print(overhead_table(res.summary, res.meta))
        console.out().print(f"output: {out_dir}/overhead.csv  (launch wall "
                            f"{res.meta['wall_s']:.0f} s)")


def say_interrupted(out_dir: Path, e) -> None:
    """One true line for an interrupted measurement
    (:class:`~jitbench.harness.overhead.OverheadInterrupted`), signals held, then 130."""
    from jitbench.harness.launch import held_signals

    if e.complete:
        text = ("interrupted once the last launch had ended; the measurement is complete: "
                f"{out_dir / 'overhead.csv'}")
    elif e.done:
        text = (f"interrupted after {e.done} of {e.total} launches: the measurement is "
                "incomplete, so there is no overhead.csv (the finished launches' times are "
                f"in {out_dir / 'overhead_segments.csv'}); rerun with --overwrite")
    else:
        text = ("interrupted before a launch finished: nothing was measured (no "
                f"overhead.csv; {out_dir} keeps the launch's run records); rerun with "
                "--overwrite")
    with held_signals(reraise=False):
        console.line(text)
    raise typer.Exit(int(ExitStatus.INTERRUPTED)) from None


def row_verdict(r: dict) -> str:
    """The verdict cell of one summary row (:func:`jitbench.harness.overhead.summarize`):
    ``baseline`` for ``none``; "too few repeats (need N)" below the minimum for a
    verdict (the figures stand, no verdict is given); the A/A control's bias; "within
    noise", "slower" or "faster" against the control."""
    few = str(r.get("no_verdict") or "").startswith("too few")
    if r["strategy"] == "none":
        return "baseline"
    if few:
        return str(r["no_verdict"])
    if r["strategy"] == "none-aa":
        return "noise (A/A): unbiased" if r.get("control_ok", True) else "A/A BIASED: no verdicts"
    wn = r.get("within_noise")
    return ("no verdict" if wn is None else "within noise" if wn else
            "slower" if r["overhead_pct"] > 0 else "faster")


def overhead_table(rows: list[dict], meta: dict) -> Table:
    """Terminal table of the overhead summary: the estimate (ratio of summed step
    times over the repeats) with its 95% bootstrap interval, the per-repeat
    median and IQR, and a verdict against the A/A control's interval."""
    from rich.table import Table

    unit = ("launches" if meta.get("mode") == "launches" else "segments")
    bal = ("balanced order" if meta.get("balanced") else
           f"UNBALANCED order (repeats not a multiple of {meta.get('design_size')})")
    tab = Table(title=f"steady-state overhead: {meta['workload']} x{meta['world_size']}, "
                      f"{meta['repeats']} repeats of {meta['segment_steps']}-step {unit}, "
                      f"{bal}, seed {meta.get('seed', 0)}")
    for c in ("strategy", "step s (median)", "overhead %", "95% CI %", "median [IQR] %",
              "CPU-time % [95% CI]", "runtime/step", "verdict"):
        tab.add_column(c, justify="left" if c in ("strategy", "verdict") else "right")
    for r in rows:
        pct_of_step = (r["rt_us"] / 1e6 / r["step_s"] * 100) if r["rt_us"] and r["step_s"] else None
        verdict = row_verdict(r)
        name = "none (A/A control)" if r["strategy"] == "none-aa" else r["strategy"]
        if meta.get("script") and name == "none":
            name = "none (plain torchrun)"
        lo, hi = r.get("overhead_pct_lo"), r.get("overhead_pct_hi")
        med = r.get("overhead_pct_median", r["overhead_pct"])
        tab.add_row(name, f"{r['step_s']:.4f}", f"{r['overhead_pct']:+.2f}",
                    "-" if lo is None else f"[{lo:+.2f}, {hi:+.2f}]",
                    f"{med:+.2f} [{r['overhead_pct_q25']:+.2f}, {r['overhead_pct_q75']:+.2f}]",
                    "-" if r.get("cpu_overhead_pct") is None else
                    f"{r['cpu_overhead_pct']:+.2f}" + (
                        "" if r.get("cpu_overhead_pct_lo") is None else
                        f" [{r['cpu_overhead_pct_lo']:+.2f}, {r['cpu_overhead_pct_hi']:+.2f}]"),
                    f"{cell(r['rt_us'], 0)} us ({cell(pct_of_step, 3)}%)", verdict)
    return tab
