"""The benchmark commands of the ``jitbench`` CLI: ``sweep``, ``overhead``, ``report``, ``gate``.

Registered on :data:`jitbench.cli.app` by :func:`register`; each command is a
thin wrapper around a plain function (:func:`jitbench.harness.sweep.run_sweep`,
:func:`jitbench.harness.overhead.run_overhead`,
:func:`jitbench.reports.html.write_report`, :func:`jitbench.reports.gate.compare`).
Bad input raises :class:`~jitbench.harness.spec.SpecError`, which the CLI's
``main`` turns into one line and exit status 2. Exit statuses of these
commands (also in README.md): 0 success; 2 bad input; 3 a run did not
complete; 4 a correctness invariant failed (``state_equal`` false or the
replay invariant broken; for ``gate``: in the results); 5 the gate found a
timing regression; 6 the gate refused incomparable results.
"""

from __future__ import annotations

import json
import math
import re
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from jitbench.harness.spec import SpecError
from jitbench.reports.table import fmt

EXIT_RUN_FAILED, EXIT_INCORRECT, EXIT_REGRESSION, EXIT_INCOMPARABLE = 3, 4, 5, 6

out = Console(width=200) if not sys.stdout.isatty() else Console()
err = Console(stderr=True)

_UNITS_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration_s(text: str | None) -> float | None:
    """``"90"`` or ``"90s"`` -> 90.0; ``"10m"``, ``"2h"``, ``"1.5d"`` likewise (seconds).

    Raises:
        SpecError: not a positive duration.
    """
    if text is None:
        return None
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[+-]?\d+)?)\s*([smhd]?)\s*", text.lower())
    if not m or float(m[1]) <= 0:
        raise SpecError(f"--mtbf must be a positive duration in seconds (or with a unit: "
                        f"90s, 10m, 2h, 1d), got {text!r}")
    return float(m[1]) * _UNITS_S[m[2] or "s"]


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _sizes(text: str | None) -> dict:
    if not text:
        return {}
    outd = {}
    for item in _csv(text):
        if "=" not in item:
            raise SpecError(f"--sizes takes workload=size pairs (gpt=tiny,resnet=resnet18), "
                            f"got {item!r}")
        k, v = item.split("=", 1)
        outd[k.strip()] = v.strip()
    return outd


def _check_sizes(sizes: dict) -> None:
    from jitbench.workloads import WORKLOADS

    for w, size in sizes.items():
        if w not in WORKLOADS:
            raise SpecError(f"unknown workload {w!r} in --sizes; one of {', '.join(WORKLOADS)}")
        mod = __import__(f"jitbench.workloads.{w}", fromlist=["SIZES"])
        if size not in mod.SIZES:
            raise SpecError(f"unknown {w} size {size!r}; one of {', '.join(mod.SIZES)}")


def _f(v, digits: int = 2) -> str:
    return fmt(v, digits)


Backend = Annotated[str, typer.Option(
    help="Process-group backend: gloo (CPU) or nccl (one CUDA device per rank).")]
MtbfOpt = Annotated[str | None, typer.Option(
    "--mtbf", help="The job's mean time between failures for periodic:auto: seconds, or with a "
                   "unit (90s, 10m, 2h, 1d). Whole job, not per GPU.")]


def register(app: typer.Typer) -> None:
    """Add the benchmark commands to the CLI app."""

    @app.command()
    def sweep(
        workloads: Annotated[str, typer.Option(help="Comma-separated workloads.")] = "gpt,resnet",
        strategies: Annotated[str, typer.Option(help="Comma-separated strategies (jit, none, "
                                                     "periodic:N, periodic-async:N, "
                                                     "periodic:auto).")]
        = "jit,periodic:5,periodic-async:5,none",
        faults: Annotated[str, typer.Option(help="Comma-separated fault kinds.")]
        = "kill,nccl-hang",
        seeds: Annotated[str, typer.Option(help="Comma-separated seeds.")] = "0",
        repeats: Annotated[int, typer.Option(help="Runs of each configuration.")] = 1,
        steps: Annotated[int, typer.Option(help="Optimizer steps per run.")] = 24,
        fault_step: Annotated[int, typer.Option(help="Step the fault fires at.")] = 14,
        fault_rank: Annotated[int, typer.Option(help="Rank the fault hits.")] = 1,
        nproc: Annotated[int, typer.Option("--nproc", help="Ranks per run.")] = 2,
        backend: Backend = "gloo",
        batch_size: Annotated[int, typer.Option(help="Micro-batch size per rank.")] = 8,
        sizes: Annotated[str | None, typer.Option(help="Model sizes, e.g. gpt=tiny,"
                                                       "resnet=resnet18 (default: each "
                                                       "workload's).")] = None,
        mtbf: MtbfOpt = None,
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
        overwrite: Annotated[bool, typer.Option(help="Replace a non-empty --out.")] = False,
        as_json: Annotated[bool, typer.Option("--json", help="Print the rows as JSON lines.")]
        = False,
    ) -> None:
        """Run workloads x strategies x faults into one results table.

        Each cell (x seeds x repeats) is one run with its fault-free reference."""
        from jitbench.harness.sweep import SweepConfig, run_sweep

        size_map = _sizes(sizes)
        _check_sizes(size_map)
        try:
            seed_list = [int(s) for s in _csv(seeds)]
        except ValueError:
            raise SpecError(f"--seeds takes comma-separated integers, got {seeds!r}") from None
        cfg = SweepConfig(workloads=_csv(workloads), strategies=_csv(strategies),
                          faults=_csv(faults), seeds=seed_list, repeats=repeats, steps=steps,
                          fault_step=fault_step, fault_rank=fault_rank, nproc=nproc,
                          backend=backend,
                          batch_size=batch_size, sizes=size_map, mtbf_s=parse_duration_s(mtbf),
                          fault_mtbf_steps=fault_mtbf_steps, fault_count=fault_count)
        cfg.validate()
        if out_dir is None:
            out_dir = Path("sweeps") / time.strftime("%Y%m%d-%H%M%S")
        n = len(cfg.cells())
        done = {"n": 0}
        t0 = time.monotonic()

        def on_run(row: dict) -> None:
            if row.get("reference"):
                err.print(f"[dim]reference {row['workload']} seed {row['seed']}: "
                          f"{_f(row.get('wall_s'), 1)} s[/dim]")
                return
            done["n"] += 1
            if as_json:
                print(json.dumps(row, default=str), flush=True)
            ok = (row.get("state_equal") is True and row.get("replay_ok") is True
                  and not row.get("unfired_faults"))
            err.print(f"[{done['n']}/{n}] {row['workload']} {row['strategy']} {row['fault']} "
                      f"r{row['repeat']}: recovery {_f(row.get('recovery_s'))} s, replayed "
                      f"{_f(row.get('replayed_steps'))} (expected "
                      f"{_f(row.get('expected_replayed_steps'))}), state_equal "
                      f"{_f(row.get('state_equal'))} "
                      + ("[green]ok[/green]" if ok else "[red]VIOLATION[/red]")
                      + f"  [{time.monotonic() - t0:.0f} s]")

        res = run_sweep(cfg, out_dir, resume=resume, overwrite=overwrite, on_run=on_run)
        t = res.table
        if not as_json:
            out.print(results_table(t))
            out.print(f"sweep directory: {out_dir}  ({len(t)} runs, wall {res.wall_s:.0f} s)")
        if not bool(t["completed"].all()):
            err.print("error: some runs did not complete; see their agent.log")
            raise typer.Exit(EXIT_RUN_FAILED)
        if "unfired_faults" in t and bool((t["unfired_faults"].fillna(0) > 0).any()):
            err.print("error: in some runs a planned fault never fired (see their summary.json, "
                      "'unfired')")
            raise typer.Exit(EXIT_RUN_FAILED)
        bad = t[(t["state_equal"] != True) | (t["replay_ok"] != True)]  # noqa: E712
        if len(bad):
            for _, r in bad.iterrows():
                print(f"error: {r['workload']} {r['strategy']} {r['fault']} r{r['repeat']}: "
                      f"state_equal {r['state_equal']}, replayed {r['replayed_steps']} "
                      f"(expected {r['expected_replayed_steps']})", file=sys.stderr)
            raise typer.Exit(EXIT_INCORRECT)

    @app.command()
    def overhead(
        workload: Annotated[str, typer.Option("--workload", "-w", help="gpt or resnet.")] = "gpt",
        size: Annotated[str | None, typer.Option(help="Model size by name.")] = None,
        strategies: Annotated[str, typer.Option(help="Comma-separated strategies (none is "
                                                     "always included).")]
        = "none,jit,periodic:10,periodic-async:10",
        segment_steps: Annotated[int, typer.Option(help="Steps per segment (a multiple of "
                                                        "every interval).")] = 20,
        repeats: Annotated[int, typer.Option(help="Segments per strategy.")] = 5,
        warmup_steps: Annotated[int, typer.Option(help="Excluded steps before the first "
                                                       "segment.")] = 10,
        nproc: Annotated[int, typer.Option("--nproc", help="Ranks.")] = 2,
        backend: Backend = "gloo",
        batch_size: Annotated[int, typer.Option(help="Micro-batch size per rank.")] = 8,
        seed: Annotated[int, typer.Option(help="Seed.")] = 0,
        out_dir: Annotated[Path | None, typer.Option("--out", help="Output directory "
                                                                  "(default overhead/<time>).")]
        = None,
        overwrite: Annotated[bool, typer.Option(help="Replace a non-empty --out.")] = False,
        as_json: Annotated[bool, typer.Option("--json", help="Print the rows as JSON.")] = False,
    ) -> None:
        """Steady-state overhead of each strategy versus none.

        Every strategy fault-free, interleaved in segments of one launch."""
        from jitbench.harness.overhead import OverheadConfig, run_overhead
        from jitbench.harness.spec import RunSpec
        from jitbench.workloads import WorkloadConfig

        if size:
            _check_sizes({workload: size})
        cfg = OverheadConfig(strategies=_csv(strategies), segment_steps=segment_steps,
                             repeats=repeats, warmup_steps=warmup_steps)
        base = RunSpec(workload=WorkloadConfig(name=workload, size=size, batch_size=batch_size,
                                               seed=seed), nproc=nproc, backend=backend)
        base.validate()
        cfg.validate()
        if out_dir is None:
            out_dir = Path("overhead") / time.strftime("%Y%m%d-%H%M%S")
        total = cfg.plan()[1]
        with err.status(f"overhead: {workload} x{nproc}, {total} steps in "
                        f"{len(cfg.strategies) * repeats} segments"):
            try:
                res = run_overhead(base, cfg, out_dir, overwrite=overwrite)
            except RuntimeError as exc:
                print(f"error: {exc}", file=sys.stderr)
                raise typer.Exit(EXIT_RUN_FAILED) from None
        if as_json:
            print(json.dumps(res.summary))
            return
        out.print(overhead_table(res.summary, res.meta))
        out.print(f"output: {out_dir}/overhead.csv  (launch wall {res.meta['wall_s']:.0f} s)")

    @app.command()
    def report(
        directory: Annotated[Path, typer.Argument(help="A sweep directory (results.parquet), "
                                                       "a run directory, or an overhead "
                                                       "directory.")],
        overhead_dir: Annotated[Path | None, typer.Option(
            "--overhead", help="An overhead directory (overhead.csv) to include.")] = None,
        out_path: Annotated[Path | None, typer.Option(
            "--out", help="HTML file (default DIR/report.html; markdown beside it).")] = None,
        max_timelines: Annotated[int, typer.Option(help="Timelines drawn at most.")] = 16,
    ) -> None:
        """Write an HTML and a markdown report for DIR.

        The HTML is one self-contained file (plots inline, no network)."""
        from jitbench.reports.html import write_report

        html, md = write_report(directory, out_path, overhead_dir, max_timelines=max_timelines)
        out.print(f"report: {html}\nmarkdown: {md}")

    @app.command()
    def gate(
        results: Annotated[Path, typer.Argument(help="Results to check: a sweep directory or "
                                                     "a results .parquet/.csv.")],
        baseline: Annotated[Path, typer.Option(help="The stored baseline results table.")],
        tolerance: Annotated[float, typer.Option(help="Timing tolerance: a median may grow by "
                                                      "this fraction beyond the noise band "
                                                      "before it is a regression.")] = 0.5,
        floor_s: Annotated[float, typer.Option(help="Absolute slack (s): a timing that grew "
                                                    "by less is within noise.")] = 1.0,
        strict_machine: Annotated[bool, typer.Option(help="Also require the same host name and "
                                                          "CPU count.")] = False,
        verbose: Annotated[bool, typer.Option(help="Also print the comparisons that are "
                                                   "ok.")] = False,
        as_json: Annotated[bool, typer.Option("--json", help="Print every comparison as "
                                                             "JSON.")] = False,
    ) -> None:
        """Compare RESULTS with a stored baseline; fail on a regression.

        Exit 4 if an invariant is broken, 5 on a timing regression, 6 if the
        results are not comparable with the baseline."""
        from jitbench.harness.sweep import load_results
        from jitbench.reports import gate as g

        for flag, v in (("--tolerance", tolerance), ("--floor-s", floor_s)):
            if not (math.isfinite(v) and v >= 0):
                raise SpecError(f"{flag} must be a finite number >= 0, got {v}")
        base_t, new_t = load_results(baseline), load_results(results)
        try:
            verdict = g.compare(base_t, new_t, tolerance=tolerance, floor_s=floor_s,
                                strict_machine=strict_machine)
        except g.Incomparable as exc:
            print(f"error: incomparable results: {exc}", file=sys.stderr)
            raise typer.Exit(EXIT_INCOMPARABLE) from None
        if as_json:
            print(json.dumps([c.__dict__ for c in verdict.checks], default=str))
        else:
            for line in verdict.lines(verbose):
                print(line)
        if verdict.violations:
            raise typer.Exit(EXIT_INCORRECT)
        if verdict.regressions:
            raise typer.Exit(EXIT_REGRESSION)


def results_table(t) -> Table:
    """Terminal table of a results table (one row per run; times in s)."""
    tab = Table(title="sweep results (times in s)")
    heads = ("workload", "strategy", "fault", "detect", "save", "restart", "restore",
             "recovery", "replayed/expected", "wasted GPU-s", "goodput", "state_equal")
    for h in heads:
        tab.add_column(h, justify="left" if h in heads[:3] else "right")
    for _, r in t.iterrows():
        tab.add_row(str(r["workload"]), str(r["strategy"]), str(r["fault"]),
                    *[_f(r.get(k)) for k in ("detect_s", "save_s", "restart_s", "restore_s",
                                             "recovery_s")],
                    f"{_f(r.get('replayed_steps'))}/{_f(r.get('expected_replayed_steps'))}",
                    _f(r.get("wasted_gpu_s"), 1), _f(r.get("goodput")),
                    _f(r.get("state_equal")))
    return tab


def overhead_table(rows: list[dict], meta: dict) -> Table:
    """Terminal table of the overhead summary."""
    tab = Table(title=f"steady-state overhead: {meta['workload']} x{meta['world_size']}, "
                      f"{meta['repeats']} repeats of {meta['segment_steps']}-step segments")
    for c in ("strategy", "step s (median)", "overhead % (median)", "IQR %", "min..max %",
              "CPU-time % [min..max]", "runtime/step", "verdict"):
        tab.add_column(c, justify="left" if c in ("strategy", "verdict") else "right")
    for r in rows:
        pct_of_step = (r["rt_us"] / 1e6 / r["step_s"] * 100) if r["rt_us"] and r["step_s"] else None
        verdict = ("baseline" if r["strategy"] == "none" else
                   "noise (A/A)" if r["strategy"] == "none-aa" else
                   "within noise" if r["within_noise"] else
                   "slower" if r["overhead_pct"] > 0 else "faster")
        name = "none (A/A control)" if r["strategy"] == "none-aa" else r["strategy"]
        tab.add_row(name, f"{r['step_s']:.4f}", f"{r['overhead_pct']:+.2f}",
                    f"[{r['overhead_pct_q25']:+.2f}, {r['overhead_pct_q75']:+.2f}]",
                    f"[{r['overhead_pct_min']:+.2f}, {r['overhead_pct_max']:+.2f}]",
                    "-" if r.get("cpu_overhead_pct") is None else
                    f"{r['cpu_overhead_pct']:+.2f} [{r['cpu_overhead_pct_min']:+.2f}, "
                    f"{r['cpu_overhead_pct_max']:+.2f}]",
                    f"{_f(r['rt_us'], 0)} us ({_f(pct_of_step, 3)}%)", verdict)
    return tab
