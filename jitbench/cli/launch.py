"""``jitbench launch [OPTIONS] -- SCRIPT [ARGS...]``: a user's own training script under faults.

The script (a Python file, or ``-m MODULE``; a leading ``python`` is
accepted, as in ``torchrun``-style command lines) is started through the
elastic agent exactly as ``torchrun`` would start it, with jitbench's hooks
installed first (:mod:`jitbench.harness.script`). Fault, detection and output
options are ``run``'s (:class:`~jitbench.cli.run.FaultOptions`,
:class:`~jitbench.cli.run.DetectionOptions`, :class:`~jitbench.cli.run.OutputOptions`);
the job options are the script's (:class:`ScriptOptions`). ``{run_dir}`` in
the script's arguments becomes each launch's run directory, so the faulty run
and its reference keep their own checkpoints. The harness and torch are
imported inside the command, so ``jitbench launch --help`` does not load them.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from jitbench.cli import console
from jitbench.cli.options import (
    MaxRestarts,
    Nnodes,
    Nproc,
    RdzvEndpoint,
    option_groups,
    parse_nnodes,
)
from jitbench.cli.run import (
    DetectionOptions,
    FaultOptions,
    OutputOptions,
    outcome_status,
    show_summary,
)
from jitbench.errors import InputError

if TYPE_CHECKING:
    from jitbench.harness.script import ScriptSpec

PYTHONS = ("python", "python3")
"""A first word of the command that names the interpreter (dropped: the agent runs
the script with this Python)."""


@dataclass
class ScriptOptions:
    """How the script's job runs: strategy, ranks, nodes, restarts, bounds."""

    strategy: Annotated[str, typer.Option(
        help="own: the script recovers by itself (its own checkpoints, or from step 0); "
             "jit: transparent JIT checkpointing: the survivors save at the failure, the "
             "restart fast-forwards the script's loop to the saved step (README: support matrix).")
    ] = "own"
    nproc: Nproc = 2
    nnodes: Nnodes = "1"
    rdzv_endpoint: RdzvEndpoint = None
    max_restarts: MaxRestarts = 3
    steps: Annotated[int | None, typer.Option(
        help="The script's optimizer steps, if known: places the default --fault-step (a "
             "third of the way in) and checks fault steps. Without it, give --fault-step.")
    ] = None
    seed: Annotated[int, typer.Option(help="Seed of random fault schedules.")] = 0
    first_step_s: Annotated[float, typer.Option(
        help="A script that reaches no optimizer step within this long after it starts "
             "(s) is not a training script: exit 2.")] = 300.0
    pg_timeout_s: Annotated[float, typer.Option(
        help="Process-group timeout (s) where the script gives none.")] = 300.0
    reference_dir: Annotated[Path | None, typer.Option(
        help="Compare against this earlier fault-free launch of the same script and "
             "arguments instead of launching the reference.")] = None


def parse_command(command: list[str]) -> tuple[str | None, str | None, list[str]]:
    """``(script, module, args)`` of the words after ``--``: ``SCRIPT [ARGS]``,
    ``-m MODULE [ARGS]``, either after ``python``/``python3``/this interpreter.

    Raises:
        InputError: nothing to run, or ``-m`` without a module (one line).
    """
    import sys

    words = list(command)
    if words and (words[0] in PYTHONS or words[0] == sys.executable):
        words = words[1:]
    if not words:
        raise InputError("give the script to launch after --: jitbench launch [OPTIONS] -- "
                         "SCRIPT.py [ARGS] (or -- -m MODULE [ARGS])")
    if words[0] == "-m":
        if len(words) < 2:
            raise InputError("-m needs a module: jitbench launch -- -m MODULE [ARGS]")
        return None, words[1], words[2:]
    if words[0].startswith("-"):
        raise InputError(f"{words[0]!r} is not a script: jitbench launch [OPTIONS] -- "
                         "SCRIPT.py [ARGS] (python options are not passed through)")
    return str(Path(words[0]).resolve()), None, words[1:]


def build_spec(command: list[str], faults: FaultOptions, job: ScriptOptions,
               detection: DetectionOptions) -> ScriptSpec:
    """The validated launch spec of the command and the options.

    Raises:
        InputError, SpecError: one line; nothing is created.
    """
    from jitbench.harness.script import UNKNOWN_STEPS, ScriptSpec

    script, module, args = parse_command(command)
    spec = ScriptSpec(script=script, module=module, args=args, strategy=job.strategy,
                      nproc=job.nproc, nnodes=parse_nnodes(job.nnodes)[1],
                      min_nodes=parse_nnodes(job.nnodes)[0], rdzv_endpoint=job.rdzv_endpoint,
                      max_restarts=job.max_restarts, hang_floor_s=detection.hang_floor_s,
                      hang_factor=detection.hang_factor, hang_first_s=detection.hang_first_s,
                      pg_timeout_s=job.pg_timeout_s, first_step_s=job.first_step_s,
                      steps=job.steps, seed=job.seed)
    spec.validate_command()  # a missing script is named before anything else
    if spec.strategy != "own":
        spec.validate()  # refuses it, one line
    # one fault with no step, time or schedule goes a third of the way in: that needs
    # the run's length, which a script without --steps decides itself (--fault-every
    # starts at its interval, a Poisson schedule at step 1)
    scheduled = any(v is not None for v in (faults.fault_time_s, faults.fault_every,
                                            faults.mtbf_steps, faults.mtbf_s))
    # (a count without a schedule is refused by the plan, which says what it needs)
    if faults.kind != "none" and job.steps is None and faults.fault_step is None \
            and not scheduled and faults.fault_count is None:
        from jitbench.errors import unknown
        from jitbench.faults import FAULTS, FaultSpec
        from jitbench.harness.script import unsupported_fault

        if faults.kind not in FAULTS:  # an unknown fault is named first
            raise InputError(unknown("fault", faults.kind, ["none", *sorted(FAULTS)]))
        # then a kind no step would make injectable (a storage fault): asking for a
        # step first sent the user round for nothing
        why = unsupported_fault(FaultSpec(faults.kind, 0, 1, params=faults.params()))
        if why is not None:
            raise InputError(f"fault {faults.kind} cannot be injected into a launched "
                             f"script: {why}")
        raise InputError("the script decides its own steps: give --fault-step (or --steps, "
                         "and the fault goes a third of the way in)")
    spec.faults = faults.plan(job.steps or UNKNOWN_STEPS, spec.world_size, job.seed)
    spec.validate()
    return spec


@option_groups
def launch(faults: FaultOptions, job: ScriptOptions, detection: DetectionOptions,
           output: OutputOptions,
           command: Annotated[list[str] | None, typer.Argument(
               help="After --: the script and its arguments (SCRIPT.py ARGS, or -m MODULE "
                    "ARGS); {run_dir} in them becomes each launch's run directory.",
               show_default=False)] = None) -> None:
    """Launch your own training script under faults and measure its recovery.

    Starts SCRIPT through the elastic agent as torchrun would, injects the
    fault through hooks on the optimizer step and DDP's gradient all-reduce,
    and compares the final state with the same script run without the fault."""
    spec = build_spec(command or [], faults, job, detection)
    if output.timeout_s is not None and not output.timeout_s > 0:
        raise InputError(f"--timeout-s must be > 0, got {output.timeout_s:g}")
    from jitbench.harness.launch import check_agent_room
    from jitbench.harness.run import prepare_dir
    from jitbench.harness.script import check_reference, run_script

    if job.reference_dir is not None:
        check_reference(spec, job.reference_dir)
    run_dir = output.run_dir
    if run_dir is None:
        stamp = time.strftime("%Y%m%d-%H%M%S") + f"-{int(time.time() * 1000) % 1000:03d}"
        stem = Path(spec.name).stem.replace(".", "-")
        run_dir = Path("runs") / f"{stamp}-launch-{stem}-{faults.label()}-{os.getpid()}"
    check_agent_room(spec, run_dir)
    prepare_dir(run_dir, output.overwrite, spec)
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with console.on_interrupt(run_dir):  # one line and 130, whenever Ctrl-C comes
        with Progress(TextColumn("{task.description}"), BarColumn(),
                      TextColumn("step {task.completed}"), TextColumn("{task.fields[info]}"),
                      TimeElapsedColumn(), console=console.err(),
                      transient=output.as_json) as bar:
            tasks: dict[str, int] = {}

            def progress(label: str, st: dict) -> None:
                if label not in tasks:
                    tasks[label] = bar.add_task(label, total=job.steps, info="")
                loss = st.get("loss")
                info = f"attempt {st.get('attempt', 0)}" + (f" loss {loss:.3f}" if loss else "")
                bar.update(tasks[label], completed=st.get("step", 0), info=info)

            outcome = run_script(spec, run_dir, reference=output.reference,
                                 overwrite=output.overwrite, progress=progress,
                                 timeout_s=output.timeout_s, reference_from=job.reference_dir)
        summary = outcome.summary
        show_summary(summary, outcome.run_dir, output.as_json)
        if not output.as_json:
            for warning in summary.get("warnings") or []:
                console.line(f"warning: {warning}")
        status, message = outcome_status(summary, spec.strategy, outcome.run_dir,
                                         output.timeout_s)
        if message:
            console.line(message)
            if summary.get("error_kind") == "script" and summary.get("error_tail"):
                console.line("last lines of the script's output:\n" + summary["error_tail"])
    if status:
        raise typer.Exit(int(status))
