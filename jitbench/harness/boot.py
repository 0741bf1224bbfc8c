"""The entrypoint the elastic agent starts for a launched script.

``python -m jitbench.harness.boot RUN_DIR`` reads ``RUN_DIR/spec.json`` (a
:class:`~jitbench.harness.script.ScriptSpec`), opens this rank's event log,
starts a :class:`~jitbench.runtime.core.Runtime` under strategy ``none`` (its
watchdog: hang bound, SIGTERM, peer notices), installs the hooks of
:mod:`jitbench.harness.hooks`, and then runs the script in this process as
``python SCRIPT ARGS`` would (:func:`runpy.run_path` with ``__name__ ==
"__main__"``, ``sys.argv = [SCRIPT, *ARGS]`` and the script's directory first
on ``sys.path``), or ``python -m MODULE ARGS`` (:func:`runpy.run_module`).
Rank, world size and attempt come from the agent's environment, which the
script reads as under ``torchrun``. A spec with ``hooks`` false (the ``none``
arm of ``jitbench overhead`` on a script) gets no runtime and no hooks, only the
step clock of :mod:`jitbench.harness.steptimer`: the script as ``torchrun``
runs it.

How the script ends decides the exit status:

- it returns (or calls ``sys.exit(0)``): rank 0 writes the final model and
  optimizer state (``RUN_DIR/final/state.pt``), ``done`` and exit 0;
- it raises after a fault fired in this attempt (any rank), or with a
  collective error (a peer died or timed out): a ``failure`` of the job
  (trigger ``exception`` or ``collective_error``), exit 76; the agent
  restarts the group and the script recovers by itself;
- it raises (or exits non-zero) with no fault fired: the script failed by
  itself. Its traceback goes to stderr (``agent.log``), an ``error`` event
  holds its last lines, and the process exits
  :data:`~jitbench.harness.script.EXIT_SCRIPT_ERROR` (79); the harness stops
  the agent rather than restart the script into the same error;
- it reaches no optimizer step within ``first_step_s``: exit
  :data:`~jitbench.harness.script.EXIT_NOT_TRAINING` (78).
"""

from __future__ import annotations

import os
import runpy
import sys
import traceback
from pathlib import Path

from jitbench.harness.hooks import ScriptHooks, fault_fired_in_attempt
from jitbench.harness.launch import die_with_parent
from jitbench.harness.script import EXIT_SCRIPT_ERROR, ScriptSpec
from jitbench.harness.steptimer import StepTimer, main_timer
from jitbench.runtime.checkpoint import write_durable
from jitbench.runtime.config import EXIT_FAILURE
from jitbench.runtime.core import Runtime, is_collective_error
from jitbench.runtime.events import EventLog, events_path
from jitbench.runtime.state import to_bytes

TAIL_LINES = 15
"""Lines of a script's own traceback kept in its ``error`` event."""


def run(spec: ScriptSpec, run_dir: Path) -> None:
    """Run the script as ``python`` would, in this process (may raise anything)."""
    args = spec.script_args(run_dir)
    if spec.module is not None:
        sys.argv = [spec.module, *args]
        runpy.run_module(spec.module, run_name="__main__", alter_sys=True)
    else:
        sys.argv = [spec.script, *args]
        sys.path[0] = str(Path(spec.script).parent)
        runpy.run_path(spec.script, run_name="__main__")


def main(argv: list[str]) -> int:
    die_with_parent()  # the agent gone (SIGKILLed): SIGTERM us
    run_dir = Path(argv[0])
    spec = ScriptSpec.load(run_dir / "spec.json")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))
    timer = main_timer(run_dir, rank, attempt) if spec.step_timer else None
    if not spec.hooks:
        return plain(spec, run_dir, timer)
    events = EventLog(events_path(run_dir / "events", attempt, rank), rank, attempt)
    events.emit("process", "point", world_size=world, master_port=os.environ.get("MASTER_PORT"),
                ppid=os.getppid(), script=spec.script or spec.module, durable=True)
    rt = Runtime(spec.runtime_config(str(run_dir / "ckpt")), events, rank, world)
    hooks = ScriptHooks(rt, events, spec, run_dir, rank, world, local_rank, attempt)
    hooks.install()
    events.emit("init", "begin")
    try:
        run(spec, run_dir)
    except SystemExit as exc:
        if exc.code not in (None, 0):
            _failed(hooks, rt, exc, attempt, run_dir)
    except BaseException as exc:  # noqa: BLE001 - every escape is classified
        _failed(hooks, rt, exc, attempt, run_dir)
    hooks.finish()
    if timer is not None:
        timer.write()
    if spec.save_final_state and rank == 0:
        state = hooks.final_state()
        if state:
            path = run_dir / "final" / "state.pt"
            path.parent.mkdir(parents=True, exist_ok=True)
            write_durable(path, to_bytes(state))
    rt.finish(None)
    rt.close()
    events.emit("exit", code=0, durable=True)
    events.close()
    return 0


def plain(spec: ScriptSpec, run_dir: Path, timer: StepTimer | None) -> int:
    """Run the script with nothing of jitbench's but the step clock (``hooks`` False:
    the ``none`` arm of ``jitbench overhead`` on a script): its traceback, if it
    raises, goes to stderr and the process exits 1, as under ``torchrun``."""
    try:
        run(spec, run_dir)
    except SystemExit as exc:
        if exc.code not in (None, 0):
            return exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - reported as python would
        traceback.print_exc()
        return 1
    if timer is not None:
        timer.write()
    return 0


def _failed(hooks: ScriptHooks, rt: Runtime, exc: BaseException, attempt: int,
            run_dir: Path) -> None:
    """The script raised or exited non-zero: a failure of the job (after a fault, or
    a collective error) or the script's own error (see the module docstring). Never
    returns (``rt.fail`` and :meth:`ScriptHooks.give_up` end the process)."""
    what = (f"exit status {exc.code}" if isinstance(exc, SystemExit)
            else f"{type(exc).__name__}: {exc}")
    collective = not isinstance(exc, SystemExit) and is_collective_error(exc)
    if collective or fault_fired_in_attempt(run_dir, attempt):
        print(f"jitbench: rank {hooks.rank}: the script stopped after a failure: {what}"[:500],
              file=sys.stderr, flush=True)
        rt.fail("collective_error" if collective else "exception", error=what[:500])
        os._exit(EXIT_FAILURE)  # rt.fail ends the process; never reached
    tb = "".join(traceback.format_exception(exc)) if not isinstance(exc, SystemExit) else what
    print(tb, file=sys.stderr, flush=True)
    tail = "\n".join(tb.rstrip().splitlines()[-TAIL_LINES:])
    hooks.give_up(EXIT_SCRIPT_ERROR, "script", what, tail=tail)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
