"""The ``jitbench`` command line (typer): every command, registered here.

Commands are thin: each lives in its own module of this package and imports
what it needs (torch, pandas, the harness) inside its body, so ``--help``,
``faults``, ``model`` and the help of every command start without torch.
Errors the user can cause are :class:`~jitbench.errors.JitbenchError`\\ s;
:func:`main` prints each as one line on stderr and exits with its
``exit_status`` (the table in :mod:`jitbench.errors` and README.md).
"""

from __future__ import annotations

import signal
import sys
from typing import Annotated

import typer

from jitbench.cli import faults, gate, io, launch, model, overhead, report, run, sweep, validate
from jitbench.cli.console import line
from jitbench.errors import ExitStatus, JitbenchError

__all__ = ["app", "main"]

app = typer.Typer(add_completion=False, rich_markup_mode=None, no_args_is_help=True,
                  help="Fault-injection testbed and benchmark for JIT checkpointing.")
app.command("run")(run.run)
app.command("launch")(launch.launch)
app.command("faults")(faults.faults)
app.command("model")(model.model)
app.command("validate")(validate.validate)
app.command("sweep")(sweep.sweep)
app.command("overhead")(overhead.overhead)
app.command("report")(report.report)
app.command("gate")(gate.gate)
app.command("io")(io.io)

_debug = {"on": False}


@app.callback()
def _options(debug: Annotated[bool, typer.Option(help="Show tracebacks of internal errors.")]
             = False) -> None:
    _debug["on"] = debug


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
    except JitbenchError as exc:
        line(f"error: {exc}")
        sys.exit(int(exc.exit_status))
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        line("interrupted")
        sys.exit(int(ExitStatus.INTERRUPTED))
    except SystemExit:
        raise
    except Exception as exc:  # noqa: BLE001
        if type(exc).__name__ == "NoArgsIsHelpError":  # plain `jitbench`: the help, as is
            print(exc.format_message(), file=sys.stderr)
            sys.exit(exc.exit_code)
        if hasattr(exc, "format_message") and hasattr(exc, "exit_code"):  # usage errors
            ctx = getattr(exc, "ctx", None)
            hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
            line(f"error: {' '.join(exc.format_message().split())}{hint}")
            sys.exit(exc.exit_code)
        if type(exc).__name__ == "Abort":
            sys.exit(int(ExitStatus.INTERRUPTED))
        if _debug["on"]:
            raise
        line(f"internal error: {type(exc).__name__}: {exc} (rerun with --debug)")
        sys.exit(int(ExitStatus.INTERNAL))
