"""The ``jitbench`` command line (typer).

Commands are thin: they build a :class:`~jitbench.harness.spec.RunSpec` and
call the harness. Exit statuses (also in README.md):

====  =====================================================================
0     success (the run completed; with a reference, ``state_equal`` is true)
1     internal error (a bug: rerun with ``--debug`` for the traceback)
2     bad input: flag, value, scenario file, data path, run directory
3     the training job did not complete (restart budget exhausted, timeout)
4     correctness violated (``state_equal`` false, or replay bound broken)
5     ``gate``: a metric regressed against the baseline
6     ``gate``: the results are not comparable with the baseline
130   interrupted (Ctrl-C / SIGTERM); what was recorded is kept
====  =====================================================================
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from jitbench.benchcli import Backend, MtbfOpt, parse_duration_s, register
from jitbench.faults import FAULTS
from jitbench.harness.spec import RunSpec, SpecError
from jitbench.workloads import DataError, WorkloadConfig

EXIT_OK, EXIT_INTERNAL, EXIT_INPUT, EXIT_RUN_FAILED, EXIT_INCORRECT = 0, 1, 2, 3, 4
EXIT_INTERRUPTED = 130

app = typer.Typer(add_completion=False, rich_markup_mode=None, no_args_is_help=True,
                  help="Fault-injection testbed and benchmark for JIT checkpointing.")
err = Console(stderr=True)
out = Console(width=200) if not sys.stdout.isatty() else Console()  # CI logs: no squeeze
_debug = {"on": False}


def _line(text: str) -> None:
    """One plain line on stderr (never wrapped or styled)."""
    print(text, file=sys.stderr, flush=True)


class InputError(Exception):
    """Bad user input: one line, exit status 2."""


Workload = Annotated[str, typer.Option("--workload", "-w", help="gpt or resnet.")]
Size = Annotated[str | None, typer.Option(help="Model size by name (gpt: tiny/small/medium/gpt2; "
                                                "resnet: resnet18/resnet50).")]
Strategy = Annotated[str, typer.Option(help="jit, none, periodic:N, periodic-async:N or "
                                            "periodic:auto (needs --mtbf).")]
Nproc = Annotated[int, typer.Option("--nproc", help="Ranks per node.")]
Steps = Annotated[int, typer.Option(help="Optimizer steps.")]
Seed = Annotated[int, typer.Option(help="Seed for init, dropout, data order and random faults.")]
Data = Annotated[str | None, typer.Option(help="Text file (gpt) or ImageFolder dir (resnet); "
                                               "default: embedded data.")]
RunDir = Annotated[Path | None, typer.Option(help="Run directory (must be absent or empty).")]
Json = Annotated[bool, typer.Option("--json", help="Print the summary as one JSON object.")]
JsonRows = Annotated[bool, typer.Option("--json", help="Print the rows as one JSON array.")]


@app.callback()
def _main(debug: Annotated[bool, typer.Option(help="Show tracebacks of internal errors.")] = False
          ) -> None:
    _debug["on"] = debug


def _check_data(workload: str, data: str | None, wl: WorkloadConfig | None = None,
                nproc: int = 1) -> None:
    if data is None:
        return
    p = Path(data)
    if not p.exists():
        raise InputError(f"data path {data} does not exist")
    if workload == "gpt":
        if not p.is_file():
            raise InputError(f"data path {data} is not a file (gpt takes a text file)")
        try:
            with open(p, "rb") as fh:
                if not fh.read(1):
                    raise InputError(f"data path {data} is empty")
        except OSError as exc:
            raise InputError(f"data path {data} is unreadable: {exc.strerror}") from exc
        if wl is not None:  # enough text for one window and one global minibatch
            from jitbench.workloads.base import PositionedSampler
            from jitbench.workloads.gpt import DEFAULT_SIZE, SIZES
            from jitbench.workloads.text import ByteWindows, read_text

            try:
                windows = ByteWindows(read_text(p, int(wl.extra.get("max_bytes", 2_000_000))),
                                      SIZES[wl.size or DEFAULT_SIZE].block_size)
                PositionedSampler(windows.num_samples, wl.batch_size, wl.grad_accum, 0, nproc,
                                  wl.seed)
            except DataError as exc:
                raise InputError(f"data path {data}: {exc}") from exc
    elif workload == "resnet":
        from jitbench.workloads.images import load_images

        try:
            images = load_images(str(p), 32)
            if wl is not None:
                from jitbench.workloads.base import PositionedSampler

                PositionedSampler(len(images), wl.batch_size, wl.grad_accum, 0, nproc, wl.seed)
        except DataError as exc:
            raise InputError(str(exc)) from exc


@app.command()
def run(
    fault: Annotated[str | None, typer.Option(
        help="Fault to inject ('jitbench faults' lists them); 'none' for a fault-free run. "
             "Default: nccl-hang, or none with --scenario.")] = None,
    fault_rank: Annotated[int, typer.Option(help="Rank the fault hits.")] = 1,
    fault_step: Annotated[int | None, typer.Option(help="Step the fault fires at "
                                                         "(default: a third of the way in).")] = None,
    fault_time_s: Annotated[float | None, typer.Option(
        help="Fire once this many seconds have passed since training started.")] = None,
    fault_every: Annotated[int | None, typer.Option(
        help="Fire every N steps (from --fault-step, default N).")] = None,
    fault_count: Annotated[int | None, typer.Option(
        help="At most this many faults (--fault-every, --fault-mtbf-*).")] = None,
    mtbf_steps: Annotated[float | None, typer.Option("--fault-mtbf-steps",
        help="Poisson arrivals, mean steps between faults (seeded by --seed).")] = None,
    mtbf_s: Annotated[float | None, typer.Option("--fault-mtbf-s",
        help="Poisson arrivals, mean seconds between faults (seeded by --seed; not "
             "--mtbf, which sizes periodic:auto).")] = None,
    every_attempt: Annotated[bool, typer.Option(
        help="Fire in every restarted attempt (a rank that always fails).")] = False,
    fault_param: Annotated[list[str] | None, typer.Option(
        help="Fault parameter KEY=VALUE (repeatable; 'jitbench faults' lists them).")] = None,
    xid: Annotated[int | None, typer.Option(help="Xid code of the xid fault (e.g. 79, 48, "
                                                 "63).")] = None,
    slow_s: Annotated[float | None, typer.Option(help="Delay per step of the slow fault "
                                                      "(s).")] = None,
    slow_steps: Annotated[int | None, typer.Option(help="Steps slowed by the slow "
                                                        "fault.")] = None,
    scenario: Annotated[Path | None, typer.Option(
        help="TOML scenario file: a campaign of several faults (see "
             "jitbench.faults.schedule).")] = None,
    workload: Workload = "gpt",
    size: Size = None,
    strategy: Strategy = "jit",
    nproc: Nproc = 2,
    backend: Backend = "gloo",
    nnodes: Annotated[int, typer.Option(help="Nodes (each runs this command; needs "
                                             "--rdzv-endpoint and a shared --run-dir).")] = 1,
    rdzv_endpoint: Annotated[str | None, typer.Option(help="HOST:PORT of the c10d rendezvous "
                                                           "for several nodes.")] = None,
    steps: Steps = 60,
    seed: Seed = 0,
    data: Data = None,
    batch_size: Annotated[int, typer.Option(help="Micro-batch size per rank.")] = 8,
    grad_accum: Annotated[int, typer.Option(help="Micro-batches per optimizer step.")] = 1,
    max_restarts: Annotated[int, typer.Option(help="Elastic agent's restart budget.")] = 3,
    hang_floor_s: Annotated[float, typer.Option(help="Hang bound floor (s).")] = 2.0,
    hang_factor: Annotated[float, typer.Option(help="Hang bound = max(floor, factor x median "
                                                    "step time).")] = 10.0,
    hang_first_s: Annotated[float, typer.Option(help="Hang bound before any step time is "
                                                     "known (s).")] = 30.0,
    deterministic_reduce: Annotated[bool, typer.Option(help="Rank-ordered gradient sum "
                                                            "(bitwise across restarts).")] = True,
    amp: Annotated[str, typer.Option(help="gpt mixed precision: off, bf16 (autocast) or fp16 "
                                          "(autocast + GradScaler).")] = "off",
    schedule: Annotated[str | None, typer.Option(help="gpt LR schedule: warmup-cosine or "
                                                      "step-decay (x0.5 per epoch).")] = None,
    ckpt_dir: Annotated[Path | None, typer.Option(help="Checkpoint directory (default "
                                                       "RUN_DIR/ckpt); an existing one must "
                                                       "hold this same training's checkpoints "
                                                       "and the run resumes from it.")] = None,
    reference: Annotated[bool, typer.Option(help="Also run without the fault and compare "
                                                 "final states.")] = True,
    run_dir: RunDir = None,
    overwrite: Annotated[bool, typer.Option(help="Replace a non-empty run directory.")] = False,
    timeout_s: Annotated[float | None, typer.Option(help="Stop a launch after this long (s).")]
    = None,
    mtbf: MtbfOpt = None,
    as_json: Json = False,
) -> None:
    """Train, inject a fault, measure the recovery.

    Trains a workload under a checkpointing strategy, injects the fault, and
    compares the final state with a fault-free reference run."""
    extra: dict = {}
    if amp != "off" or schedule is not None:
        if workload != "gpt":
            raise InputError("--amp and --schedule apply to the gpt workload only")
        if amp != "off":
            extra["amp"] = amp
        if schedule is not None:
            extra["schedule"] = schedule
    wl = WorkloadConfig(name=workload, size=size, data=data, batch_size=batch_size,
                        grad_accum=grad_accum, steps=steps, seed=seed, extra=extra)
    faults = _fault_plan(fault, fault_rank, fault_step, steps, nproc * max(1, nnodes), seed,
                         fault_time_s, fault_every, fault_count, mtbf_steps, mtbf_s,
                         every_attempt, fault_param, xid, slow_s, slow_steps, scenario)
    spec = RunSpec(workload=wl, strategy=strategy, faults=faults, nproc=nproc, nnodes=nnodes,
                   backend=backend,
                   rdzv_endpoint=rdzv_endpoint,
                   max_restarts=max_restarts, hang_floor_s=hang_floor_s,
                   hang_factor=hang_factor, hang_first_s=hang_first_s,
                   deterministic_reduce=deterministic_reduce,
                   ckpt_dir=str(ckpt_dir.resolve()) if ckpt_dir is not None else None,
                   mtbf_s=parse_duration_s(mtbf))
    spec.validate()
    if mtbf is not None and strategy != "periodic:auto":
        raise InputError(f"--mtbf sizes the interval of periodic:auto; it does nothing for "
                         f"--strategy {strategy} (for fault arrivals: --fault-mtbf-s)")
    if timeout_s is not None and not timeout_s > 0:
        raise InputError(f"--timeout-s must be > 0, got {timeout_s:g}")
    _check_size(workload, size)
    _check_data(workload, data, wl, spec.world_size)
    from jitbench.harness.run import check_ckpt_dir

    check_ckpt_dir(spec)
    if run_dir is None:
        label = (scenario.stem if scenario is not None and fault is None
                 else fault or "nccl-hang")
        stamp = time.strftime("%Y%m%d-%H%M%S") + f"-{int(time.time() * 1000) % 1000:03d}"
        run_dir = Path("runs") / f"{stamp}-{workload}-{label}-{os.getpid()}"
    from jitbench.harness.run import prepare_dir
    from jitbench.harness.run import run as run_spec

    prepare_dir(run_dir, overwrite, spec)
    from jitbench.reports.table import summary_table

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[info]}"), TimeElapsedColumn(), console=err,
                  transient=as_json) as bar:
        tasks: dict[str, int] = {}

        def progress(label: str, st: dict) -> None:
            if label not in tasks:
                tasks[label] = bar.add_task(label, total=steps, info="")
            loss = st.get("loss")
            info = f"attempt {st.get('attempt', 0)}" + (f" loss {loss:.3f}" if loss else "")
            bar.update(tasks[label], completed=st.get("step", 0), info=info)

        outcome = run_spec(spec, run_dir, reference=reference, overwrite=overwrite,
                           progress=progress, timeout_s=timeout_s)
    s = outcome.summary
    if as_json:
        print(json.dumps(s, default=str))
    else:
        out.print(summary_table(s))
        out.print(f"run directory: {run_dir}")
    if s.get("interrupted"):
        _line(f"interrupted; records kept in {run_dir}")
        raise typer.Exit(EXIT_INTERRUPTED)
    if s.get("error_kind") in ("checkpoint", "input") and not s["completed"]:
        _line(f"error: {s['error']} (records kept in {run_dir})")
        raise typer.Exit(EXIT_INPUT)
    if s.get("timed_out"):
        _line(f"error: the run was stopped after --timeout-s {timeout_s:g} s; see "
              f"{run_dir / 'agent.log'}")
        raise typer.Exit(EXIT_RUN_FAILED)
    if not s["completed"]:
        why = s.get("end_reason") or f"agent exit {s.get('agent_exit')}, {s.get('attempts')} attempts"
        _line(f"error: the job did not complete: {why}; see {run_dir / 'agent.log'}")
        raise typer.Exit(EXIT_RUN_FAILED)
    if s["state_equal"] is False:
        _line(f"error: final state differs from the fault-free run "
              f"(max_abs_diff {s['max_abs_diff']:.3g})")
        raise typer.Exit(EXIT_INCORRECT)
    if strategy == "jit" and (s.get("max_replayed_steps_per_failure") or 0) > 1:
        _line(f"error: JIT replayed {s['max_replayed_steps_per_failure']} steps in one failure")
        raise typer.Exit(EXIT_INCORRECT)
    if s.get("replay_ok") is False:
        _line(f"error: replayed {s['replayed_steps']} steps, expected "
              f"{s['expected_replayed_steps']} (the steps since the newest committed "
              f"checkpoint; at most 1 per failure under jit)")
        raise typer.Exit(EXIT_INCORRECT)
    if s.get("unfired"):
        what = f"planned fault {', '.join(s['unfired'])} never fired (the run ended first)"
        if not s.get("fired"):
            _line(f"error: {what}: nothing was injected, so no recovery was measured")
            raise typer.Exit(EXIT_RUN_FAILED)
        _line(f"warning: {what}")


def _fault_plan(fault, rank, step, steps, nproc, seed, time_s, every, count, mtbf_steps, mtbf_s,
                every_attempt, params, xid, slow_s, slow_steps, scenario) -> list:
    """The run's fault plan from the options (see :func:`jitbench.faults.schedule.plan_from_options`)."""
    from jitbench.faults.schedule import ScheduleError, plan_from_options

    kv: dict[str, str] = {}
    for item in params or []:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise InputError(f"--fault-param takes KEY=VALUE, got {item!r}")
        kv[key.strip()] = value.strip()
    for flag, key, value, kinds in (("--xid", "code", xid, ("xid",)),
                                    ("--slow-s", "delay_s", slow_s, ("slow",)),
                                    ("--slow-steps", "steps", slow_steps, ("slow",))):
        if value is None:
            continue
        kind = fault or ("none" if scenario is not None else "nccl-hang")
        if kind not in kinds:
            raise InputError(f"{flag} applies to --fault {kinds[0]}, not {kind}"
                             + (" (a scenario's faults take their parameters in the file)"
                                if scenario is not None else ""))
        kv[key] = str(value)
    if scenario is not None and not scenario.is_file():
        raise InputError(f"scenario file {scenario} "
                         + ("is not a file" if scenario.exists() else "does not exist"))
    try:
        return plan_from_options(fault, rank, step, steps, nproc, seed, time_s=time_s,
                                 every_steps=every, count=count, mtbf_steps=mtbf_steps,
                                 mtbf_s=mtbf_s, every_attempt=every_attempt, params=kv,
                                 scenario=scenario)
    except ScheduleError as exc:
        raise InputError(str(exc)) from None


def _check_size(workload: str, size: str | None) -> None:
    if size is None:
        return
    if workload == "gpt":
        from jitbench.workloads.gpt import SIZES
    else:
        from jitbench.workloads.resnet import SIZES
    if size not in SIZES:
        raise InputError(f"unknown {workload} size {size!r}; one of {', '.join(SIZES)}")


@app.command()
def faults(as_json: JsonRows = False) -> None:
    """List every fault with a one-line description."""
    from jitbench.faults.base import FAMILIES

    order = sorted(FAULTS.items(), key=lambda kv: (FAMILIES.index(kv[1].family), kv[0]))
    rows = [{"name": n, "family": c.family, "point": c.point, "recoverable": c.recoverable,
             "fails_job": c.fails_job, "summary": c.summary,
             "params": {k: {"type": p.type.__name__, "default": p.default, "doc": p.doc}
                        for k, p in c.all_params().items()}}
            for n, c in order]
    if as_json:
        print(json.dumps(rows))
        return
    from rich.table import Table

    t = Table(title="faults (jitbench run --fault NAME [--fault-param KEY=VALUE])")
    for col in ("name", "family", "fires", "summary", "parameters"):
        # names and parameters are typed back on the command line: never cut
        t.add_column(col, no_wrap=col in ("name", "family", "fires"), overflow="fold")
    for r in rows:
        t.add_row(r["name"], r["family"], r["point"], r["summary"],
                  " ".join(f"{k}={v['default']}" for k, v in r["params"].items()))
    out.print(t)


LLAMA3_MTBF_HOURS_PER_GPU = 16_384 * 54 * 24 / 419
"""Per-GPU MTBF (h) from the Llama 3 report ("The Llama 3 Herd of Models", Meta 2024, sec.
3.3.4): 419 unexpected interruptions in 54 days of pre-training on 16,384 GPUs."""


def _int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"--gpus: expected comma-separated integers, got {text!r}") from None


@app.command()
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
    as_json: Json = False,
) -> None:
    """Wasted GPU time and goodput vs world size.

    The analytic model and the failure simulator side by side, for jit and the
    periodic baselines."""
    from jitbench.reports.modelcmd import RESULT_COLUMNS, model_main

    # typer ships its own click; compare the source's name, not click's enum
    given = frozenset(k for k in RESULT_COLUMNS.values()
                      if getattr(ctx.get_parameter_source(k), "name", None) == "COMMANDLINE")
    code = model_main(_int_list(gpus), mtbf_hours_per_gpu, step_s, checkpoint_s, restart_s,
                      detect_s, save_s, restore_s, from_results, horizon_hours, trials, seed,
                      as_json, out, explicit=given)
    if code:
        raise typer.Exit(code)


@app.command()
def validate(
    results: Annotated[Path, typer.Argument(help="A results directory (records.csv and "
                                                 "failures.csv below it) or a records table.")],
    strict: Annotated[bool, typer.Option(help="Exit 4 when a group is outside the "
                                              "tolerance.")] = False,
    csv_path: Annotated[Path | None, typer.Option("--csv", help="Also write the table as "
                                                  "CSV here.")] = None,
    as_json: JsonRows = False,
) -> None:
    """Model-predicted vs measured wasted GPU time.

    For the measured fault campaigns of RESULTS (a sweep with Poisson faults)."""
    from jitbench.reports.validate import TOLERANCE_PCT, load_results, validation_table

    try:
        runs, failures = load_results(results)
    except (FileNotFoundError, ValueError, OSError) as exc:
        msg = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise InputError(msg if str(results) in msg else f"{results}: {msg}") from None
    table = validation_table(runs, failures)
    if table.empty:
        raise InputError(f"{results}: no run with a failure to validate against")
    if csv_path is not None:
        try:
            table.to_csv(csv_path, index=False)
        except OSError as exc:
            raise InputError(f"--csv: cannot write {csv_path}: {exc.strerror or exc}") from None
    if as_json:
        print(table.to_json(orient="records"))
    else:
        from rich import box
        from rich.table import Table

        ok = int(table["within_tolerance"].sum())
        sources = sorted(set(map(str, table.get("phases_from", []))))
        t = Table(title=f"model vs measured wasted GPU-s (tolerance {TOLERANCE_PCT:.0f}%)",
                  caption=f"{ok} of {len(table)} groups within {TOLERANCE_PCT:.0f}%; phase "
                          f"costs from {', '.join(sources)} (--csv/--json: every column)",
                  box=box.SIMPLE_HEAD, pad_edge=False)
        labels = {"workload": "workload", "strategy": "strategy", "fault": "fault",
                  "runs": "runs", "failures": "fails", "measured_wasted_gpu_s": "meas.",
                  "predicted_wasted_gpu_s": "pred.", "error_pct": "err %"}
        cols = [c for c in table.columns if c in labels]  # 8 columns: fits 80 wide
        for col in cols:
            t.add_column(labels[col], no_wrap=True, justify="left" if col in (
                "workload", "strategy", "fault") else "right")
        for _, row in table.iterrows():
            cells = [f"{row[c]:.2f}" if isinstance(row[c], float) else str(row[c]) for c in cols]
            if not row["within_tolerance"]:
                cells[-1] += " !"
            t.add_row(*cells)
        out.print(t)
    if strict and not table["within_tolerance"].all():
        raise typer.Exit(EXIT_INCORRECT)


register(app)  # sweep, overhead, report, gate (jitbench/benchcli.py)


def _on_sigterm(signum, frame) -> None:
    raise KeyboardInterrupt


def main() -> None:
    """Console-script entry point: maps errors to exit statuses, one line each.

    SIGTERM is handled like Ctrl-C: workers are stopped, records kept, exit 130.
    """
    try:
        signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError:  # not the main thread (embedded use)
        pass
    try:
        # click returns (does not raise) a typer.Exit's status when not standalone
        rc = app(prog_name="jitbench", standalone_mode=False)
        if isinstance(rc, int) and rc:
            sys.exit(rc)
    except (InputError, SpecError, DataError) as exc:
        _line(f"error: {exc}")
        sys.exit(EXIT_INPUT)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        _line("interrupted")
        sys.exit(EXIT_INTERRUPTED)
    except SystemExit:
        raise
    except Exception as exc:  # noqa: BLE001
        if hasattr(exc, "format_message") and hasattr(exc, "exit_code"):  # usage errors
            ctx = getattr(exc, "ctx", None)
            hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
            _line(f"error: {' '.join(exc.format_message().split())}{hint}")
            sys.exit(exc.exit_code)
        if type(exc).__name__ == "Abort":
            sys.exit(EXIT_INTERRUPTED)
        if _debug["on"]:
            raise
        _line(f"internal error: {type(exc).__name__}: {exc} (rerun with --debug)")
        sys.exit(EXIT_INTERNAL)


if __name__ == "__main__":
    main()
