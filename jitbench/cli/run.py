"""``jitbench run``: train, inject a fault, measure the recovery.

The command's options come in groups (:class:`FaultOptions`,
:class:`TrainingOptions`, :class:`JobOptions`, :class:`DetectionOptions`,
:class:`OutputOptions`); :func:`build_spec` turns the first four into a
:class:`~jitbench.harness.spec.RunSpec` (the fault group makes the fault plan,
the training group the workload config). Everything is validated before
anything is created or launched. The harness, the workloads and with them
torch are imported inside the functions, so ``jitbench run --help`` does not
load them.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from jitbench import hang
from jitbench.cli import console
from jitbench.cli.options import (
    Backend,
    BatchSize,
    JsonSummary,
    MaxRestarts,
    Mtbf,
    Nnodes,
    Nproc,
    RdzvEndpoint,
    Strategy,
    Workload,
    check_sizes,
    option_groups,
    parse_duration_s,
    parse_nnodes,
)
from jitbench.errors import ExitStatus, InputError
from jitbench.runtime import strategies

if TYPE_CHECKING:
    from jitbench.faults import FaultSpec
    from jitbench.harness.spec import RunSpec
    from jitbench.workloads import WorkloadConfig

DEFAULT_FAULT = "nccl-hang"


@dataclass
class FaultOptions:
    """What fails, where and when (one fault, a schedule, or a scenario file)."""

    fault: Annotated[str | None, typer.Option(
        help="Fault to inject ('jitbench faults' lists them); 'none' for a fault-free run. "
             "Default: nccl-hang, or none with --scenario.")] = None
    fault_rank: Annotated[int | None, typer.Option(
        help="Rank the fault hits (default 1; with --fault-mtbf-steps/-s, ranks drawn "
             "from the seed over the world size, as sweep draws them, unless given).")] = None
    fault_step: Annotated[int | None, typer.Option(
        help="Step the fault fires at (default: a third of the way in).")] = None
    fault_time_s: Annotated[float | None, typer.Option(
        help="Fire once this many seconds have passed since training started (with "
             "--fault-step: at the first point of that step or later once the time has "
             "passed; without it: from step 1).")] = None
    fault_every: Annotated[int | None, typer.Option(
        help="Fire every N steps (from --fault-step, default N).")] = None
    fault_count: Annotated[int | None, typer.Option(
        help="At most this many faults (--fault-every, --fault-mtbf-*).")] = None
    mtbf_steps: Annotated[float | None, typer.Option(
        "--fault-mtbf-steps",
        help="Poisson arrivals, mean steps between faults (seeded by --seed).")] = None
    mtbf_s: Annotated[float | None, typer.Option(
        "--fault-mtbf-s",
        help="Poisson arrivals, mean seconds between faults (seeded by --seed; not "
             "--mtbf, which sizes periodic:auto).")] = None
    every_attempt: Annotated[bool, typer.Option(
        help="Fire in every restarted attempt (a rank that always fails).")] = False
    fault_param: Annotated[list[str] | None, typer.Option(
        help="Fault parameter KEY=VALUE (repeatable; 'jitbench faults' lists them).")] = None
    xid: Annotated[int | None, typer.Option(
        help="Xid code of the xid fault (e.g. 79, 48, 63).")] = None
    slow_s: Annotated[float | None, typer.Option(
        help="Delay per step of the slow fault (s).")] = None
    slow_steps: Annotated[int | None, typer.Option(
        help="Steps slowed by the slow fault.")] = None
    scenario: Annotated[Path | None, typer.Option(
        help="TOML scenario file: a campaign of several faults (see "
             "jitbench.faults.schedule).")] = None

    @property
    def kind(self) -> str:
        """The fault kind the flags name (``none`` for a scenario without --fault)."""
        return self.fault or ("none" if self.scenario is not None else DEFAULT_FAULT)

    def label(self) -> str:
        """What the default run directory is named after: the fault, or the scenario."""
        if self.scenario is not None and self.fault is None:
            return self.scenario.stem
        return self.fault or DEFAULT_FAULT

    def params(self) -> dict[str, str]:
        """``--fault-param`` pairs plus the kind-specific flags (--xid, --slow-*).

        Raises:
            InputError: a malformed pair, or a flag that does not apply to the fault.
        """
        kv: dict[str, str] = {}
        for item in self.fault_param or []:
            key, eq, value = item.partition("=")
            if not eq or not key.strip():
                raise InputError(f"--fault-param takes KEY=VALUE, got {item!r}")
            kv[key.strip()] = value.strip()
        for flag, key, value, kinds in (("--xid", "code", self.xid, ("xid",)),
                                        ("--slow-s", "delay_s", self.slow_s, ("slow",)),
                                        ("--slow-steps", "steps", self.slow_steps, ("slow",))):
            if value is None:
                continue
            if self.kind not in kinds:
                raise InputError(f"{flag} applies to --fault {kinds[0]}, not {self.kind}"
                                 + (" (a scenario's faults take their parameters in the file)"
                                    if self.scenario is not None else ""))
            kv[key] = str(value)
        return kv

    def plan(self, steps: int, world_size: int, seed: int) -> list[FaultSpec]:
        """The concrete faults of the run
        (:func:`jitbench.faults.schedule.plan_from_options`).

        Raises:
            InputError: bad fault flags or scenario file (one line).
        """
        params = self.params()
        if self.scenario is not None and not self.scenario.is_file():
            raise InputError(f"scenario file {self.scenario} "
                             + ("is not a file" if self.scenario.exists() else "does not exist"))
        from jitbench.faults.schedule import ScheduleError, plan_from_options

        try:
            plan = plan_from_options(self.fault, self.fault_rank, self.fault_step, steps,
                                     world_size, seed, time_s=self.fault_time_s,
                                     every_steps=self.fault_every, count=self.fault_count,
                                     mtbf_steps=self.mtbf_steps, mtbf_s=self.mtbf_s,
                                     every_attempt=self.every_attempt, params=params,
                                     scenario=self.scenario)
        except ScheduleError as exc:
            raise InputError(str(exc)) from None
        _note_unknown_xids(plan)
        return plan


def _note_unknown_xids(plan: list[FaultSpec]) -> None:
    """One stderr line per simulated Xid code that jitbench's table does not know.

    Such a code is accepted, since a new hardware fault may bring a new code, and the
    runtime treats it as fatal by policy
    (:func:`jitbench.runtime.health.xid.describe_xid`); the line says so, so a typo
    (``--xid 799``) does not pass for a known fault.
    """
    from jitbench.runtime.health.xid import XID_TABLE

    codes = {int(f.params["code"]) for f in plan if f.kind == "xid" and "code" in f.params}
    for code in sorted(codes - set(XID_TABLE)):
        console.line(f"note: Xid {code} is not in jitbench's Xid table "
                     f"(jitbench/runtime/health/xid.py); the runtime treats it as fatal by policy")


@dataclass
class TrainingOptions:
    """What is trained: workload, model size, data, steps, batch, precision."""

    workload: Workload = "gpt"
    size: Annotated[str | None, typer.Option(
        help="Model size by name (gpt: tiny/small/medium/gpt2; resnet: "
             "resnet18/resnet50).")] = None
    steps: Annotated[int, typer.Option(help="Optimizer steps.")] = 60
    seed: Annotated[int, typer.Option(
        help="Seed for init, dropout, data order and random faults.")] = 0
    data: Annotated[str | None, typer.Option(
        help="Text file (gpt) or ImageFolder dir (resnet); default: embedded data.")] = None
    batch_size: BatchSize = 8
    grad_accum: Annotated[int, typer.Option(help="Micro-batches per optimizer step.")] = 1
    amp: Annotated[str, typer.Option(
        help="gpt mixed precision: off, bf16 (autocast) or fp16 (autocast + "
             "GradScaler).")] = "off"
    schedule: Annotated[str | None, typer.Option(
        help="gpt LR schedule: warmup-cosine or step-decay (x0.5 per epoch).")] = None

    def config(self) -> WorkloadConfig:
        """The workload's config.

        Raises:
            InputError: --amp or --schedule for a workload other than gpt.
        """
        from jitbench.workloads import WorkloadConfig

        extra: dict = {}
        if self.amp != "off" or self.schedule is not None:
            if self.workload != "gpt":
                raise InputError("--amp and --schedule apply to the gpt workload only")
            if self.amp != "off":
                extra["amp"] = self.amp
            if self.schedule is not None:
                extra["schedule"] = self.schedule
        return WorkloadConfig(name=self.workload, size=self.size, data=self.data,
                              batch_size=self.batch_size, grad_accum=self.grad_accum,
                              steps=self.steps, seed=self.seed, extra=extra)


@dataclass
class JobOptions:
    """How the job runs: strategy, ranks, nodes, backend, restarts, checkpoints."""

    strategy: Strategy = "jit"
    backstop: Annotated[str | None, typer.Option(
        help="--strategy jit only: periodic:N, also a synchronous checkpoint by rank 0 every "
             "N steps, the safety net when every copy of the JIT checkpoint is lost (the "
             "strategy reads jit:backstop=N).")] = None
    nproc: Nproc = 2
    backend: Backend = "gloo"
    nnodes: Nnodes = "1"
    rdzv_endpoint: RdzvEndpoint = None
    rdzv_timeout_s: Annotated[float | None, typer.Option(
        help="Several nodes: how long an agent waits for the others in a (re-)rendezvous, "
             "s (torch's join_timeout; default 600).")] = None
    max_restarts: MaxRestarts = 3
    spares: Annotated[int | None, typer.Option(
        help="Hot spares waiting to replace a failed rank (jit-inprocess; default 1; 0: "
             "the failed rank's own agent restarts it).")] = None
    deterministic_reduce: Annotated[bool, typer.Option(
        help="Rank-ordered gradient sum (bitwise across restarts; ddp only).")] = True
    parallel: Annotated[str, typer.Option(
        help="ddp (every rank a full replica) or hsdp:RxS (gpt: FSDP2 hybrid sharding, R "
             "replica groups x S shards, R x S = world size; strategies jit, "
             "jit:backstop=N, periodic:N, none).")] = "ddp"
    ckpt_dir: Annotated[Path | None, typer.Option(
        help="Checkpoint directory (default RUN_DIR/ckpt); an existing one must hold this "
             "same training's checkpoints and the run resumes from it. Refused for "
             "strategies that never read or write one (none, torchft).")] = None
    mtbf: Mtbf = None
    final_checkpoint: Annotated[bool, typer.Option(
        help="Write a checkpoint of the final state into the checkpoint directory at the "
             "end (jit writes none when no peer fails), for a later run to resume from.")] \
        = False

    @property
    def world_size(self) -> int:
        """Ranks over all nodes."""
        return self.nproc * parse_nnodes(self.nnodes)[1]


@dataclass
class DetectionOptions:
    """The runtime's hang bound: ``max(floor, factor x median step time)``."""

    hang_floor_s: Annotated[float, typer.Option(help="Hang bound floor (s).")] = hang.FLOOR_S
    hang_factor: Annotated[float, typer.Option(
        help="Hang bound = max(floor, factor x median step time).")] = hang.FACTOR
    hang_first_s: Annotated[float, typer.Option(
        help="Hang bound before any step time is known (s); never below the floor.")] = hang.FIRST_S


@dataclass
class OutputOptions:
    """Where the run is recorded, how long it may take, how it is printed."""

    reference: Annotated[bool, typer.Option(
        help="Also run without the fault and compare final states.")] = True
    run_dir: Annotated[Path | None, typer.Option(
        help="Run directory (must be absent or empty).")] = None
    overwrite: Annotated[bool, typer.Option(help="Replace a non-empty run directory.")] = False
    timeout_s: Annotated[float | None, typer.Option(
        help="Stop a launch after this long (s).")] = None
    as_json: JsonSummary = False


def build_spec(faults: FaultOptions, training: TrainingOptions, job: JobOptions,
               detection: DetectionOptions) -> RunSpec:
    """The validated run spec of the options.

    Raises:
        InputError, SpecError: bad flags, fault plan or strategy, or a ``--backstop``
            other than ``periodic:N`` (N >= 1) or under a strategy other than ``jit``
            (one line; nothing is created).
    """
    from jitbench.harness.spec import RunSpec

    # --strategy jit --backstop periodic:N is jit:backstop=N everywhere after this
    strategy = (job.strategy if job.backstop is None
                else str(strategies.with_backstop(job.strategy, job.backstop)))
    wl = training.config()
    plan = faults.plan(training.steps, job.world_size, training.seed)
    spec = RunSpec(workload=wl, strategy=strategy, faults=plan, nproc=job.nproc,
                   nnodes=parse_nnodes(job.nnodes)[1],
                   min_nodes=parse_nnodes(job.nnodes)[0], backend=job.backend, rdzv_endpoint=job.rdzv_endpoint,
                   rdzv_timeout_s=job.rdzv_timeout_s,
                   max_restarts=job.max_restarts, spares=job.spares,
                   hang_floor_s=detection.hang_floor_s,
                   hang_factor=detection.hang_factor, hang_first_s=detection.hang_first_s,
                   deterministic_reduce=job.deterministic_reduce, parallel=job.parallel,
                   ckpt_dir=str(job.ckpt_dir.resolve()) if job.ckpt_dir is not None else None,
                   mtbf_s=parse_duration_s(job.mtbf), final_checkpoint=job.final_checkpoint)
    choice = strategies.parse(strategy)
    spec.validate()
    if job.mtbf is not None and not choice.auto:
        raise InputError(f"--mtbf sizes the interval of periodic:auto; it does nothing for "
                         f"--strategy {strategy} (for fault arrivals: --fault-mtbf-s)")
    return spec


def check_data(workload: str, data: str | None, wl: WorkloadConfig | None = None,
               nproc: int = 1) -> None:
    """Refuse a data path the workload cannot train on (missing, empty, unreadable,
    too small for one window and one global minibatch, a corrupt image).

    Raises:
        InputError: one line.
    """
    if data is None:
        return
    from jitbench.workloads import DataError

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


def show_summary(summary: dict, run_dir: Path, as_json: bool) -> None:
    """Print a finished run's summary on stdout: the JSON, or the metrics table, then
    one line per recovery decision (``summary["decisions"]``: a resume, a skipped
    checkpoint part, a restore further back than promised, a fallback, no checkpoint
    needed) and the run directory. A run in which no step completed measured
    nothing: no table, only the run directory (the error line says why)."""
    if as_json:
        print(json.dumps(summary, default=str))
        return
    if summary.get("final_step") == 0 and not summary.get("completed"):
        console.out().print(f"run directory: {run_dir} (no step completed: nothing "
                            "measured)", markup=False, highlight=False)
        return
    from jitbench.reports.table import summary_table

    console.out().print(summary_table(summary))
    for line in summary.get("decisions") or []:
        console.out().print(line, markup=False, highlight=False)
    console.out().print(f"run directory: {run_dir}")
    console.out().print(f"next: jitbench report {run_dir}  (an HTML and a markdown report: "
                        "timeline, phases, decisions)", markup=False, highlight=False)


def outcome_status(s: dict, strategy: str, run_dir: Path,
                   timeout_s: float | None) -> tuple[ExitStatus, str | None]:
    """The exit status of a finished run (:func:`jitbench.records.verdict`) and the
    line that explains it, with where to look. ``s`` is the run's summary; a run
    whose planned faults partly never fired succeeds with a warning line; a reference
    cut short (``reference_cut_short``) is named in the line, and one that failed or
    was stopped while the run completed is exit 3 (its final states were not
    compared), pointing at the reference's ``agent.log``; an interrupt that stopped
    nothing (``late_interrupt``) is 130 with a line saying the records are complete.
    ``strategy`` is the one run (a summary names it too)."""
    from jitbench.records import reference_not_compared, verdict

    status, why = verdict({"strategy": strategy, **s})
    cut = s.get("reference_cut_short")
    ref = (f" (the run completed; {reference_not_compared(cut)})" if cut and s.get("completed")
           else "")
    if status == ExitStatus.OK:
        return status, why if why.startswith("warning") else None
    if status == ExitStatus.INTERRUPTED and s.get("late_interrupt"):
        # it stopped nothing: every launch had ended by itself (a reference due was
        # not started), and the records are whole
        what = "the run and its fault-free reference" if s.get("reference_dir") else "the run"
        note = f"; {reference_not_compared(cut)}" if cut and s.get("completed") else ""
        return status, (f"interrupted after {what} ended (nothing was stopped){note}; "
                        f"records complete in {run_dir}")
    if status == ExitStatus.INTERRUPTED:
        return status, f"interrupted{ref}; records kept in {run_dir}"
    if status == ExitStatus.RUN_FAILED:
        if s.get("timed_out") and timeout_s is not None:
            why = f"the run was stopped after --timeout-s {timeout_s:g} s{ref}"
        # a completed run whose reference failed: the reference's own log says why
        log = (run_dir / "reference" / "agent.log" if cut and s.get("completed")
               and not s.get("timed_out") else run_dir / "agent.log")
        return status, f"error: {why}; see {log}"
    return status, f"error: {why} (records kept in {run_dir})"


@option_groups
def run(faults: FaultOptions, training: TrainingOptions, job: JobOptions,
        detection: DetectionOptions, output: OutputOptions) -> None:
    """Train, inject a fault, measure the recovery.

    Trains a workload under a checkpointing strategy, injects the fault, and
    compares the final state with a fault-free reference run. Ctrl-C or SIGTERM
    stops the launch it meets (a reference not yet started is skipped; one that
    has ended is compared), keeps the records and exits 130 with one line."""
    spec = build_spec(faults, training, job, detection)
    if output.timeout_s is not None and not output.timeout_s > 0:
        raise InputError(f"--timeout-s must be > 0, got {output.timeout_s:g}")
    if training.size is not None:
        check_sizes({training.workload: training.size})
    check_data(training.workload, training.data, spec.workload, spec.world_size)
    from jitbench.harness.launch import check_agent_room
    from jitbench.harness.run import check_ckpt_dir, prepare_dir

    check_ckpt_dir(spec)
    run_dir = output.run_dir
    if run_dir is None:
        stamp = time.strftime("%Y%m%d-%H%M%S") + f"-{int(time.time() * 1000) % 1000:03d}"
        run_dir = Path("runs") / f"{stamp}-{training.workload}-{faults.label()}-{os.getpid()}"
    check_agent_room(spec, run_dir)
    prepare_dir(run_dir, output.overwrite, spec)
    with console.on_interrupt(run_dir):  # one line and 130, whenever Ctrl-C comes
        summary = _run_with_progress(spec, run_dir, output, training.steps)
        show_summary(summary, run_dir, output.as_json)
        status, message = outcome_status(summary, spec.strategy, run_dir, output.timeout_s)
        if message:
            console.line(message)
    if status:
        raise typer.Exit(int(status))


def _run_with_progress(spec: RunSpec, run_dir: Path, output: OutputOptions, steps: int) -> dict:
    """Run the spec (and its reference) with one progress bar per launch on stderr;
    returns the summary."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from jitbench.harness.run import run as run_spec

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[info]}"), TimeElapsedColumn(), console=console.err(),
                  transient=output.as_json) as bar:
        tasks: dict[str, int] = {}

        def progress(label: str, st: dict) -> None:
            if label not in tasks:
                tasks[label] = bar.add_task(label, total=steps, info="")
            loss = st.get("loss")
            info = f"attempt {st.get('attempt', 0)}" + (f" loss {loss:.3f}" if loss else "")
            bar.update(tasks[label], completed=st.get("step", 0), info=info)

        outcome = run_spec(spec, run_dir, reference=output.reference,
                           overwrite=output.overwrite, progress=progress,
                           timeout_s=output.timeout_s)
    return outcome.summary
