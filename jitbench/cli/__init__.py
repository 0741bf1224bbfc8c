"""The ``jitbench`` command line (typer): every command, registered here.

Commands are thin: each lives in its own module of this package and imports
what it needs (torch, pandas, the harness) inside its body, so ``--help``,
``faults``, ``model`` and the help of every command start without torch.
Errors the user can cause are :class:`~jitbench.errors.JitbenchError`\\ s;
:func:`main` prints each as one line on stderr and exits with its
``exit_status`` (the table in :mod:`jitbench.errors` and README.md).
"""

from __future__ import annotations

import functools
import os
import signal
import sys
from collections.abc import Callable
from typing import Annotated

import typer

from jitbench.cli import faults, gate, io, launch, model, overhead, report, run, sweep, validate
from jitbench.cli.console import line
from jitbench.errors import ExitStatus, InputError, JitbenchError

__all__ = ["app", "main", "repeated_option"]


class _Interrupted(Exception):
    """Ctrl-C or SIGTERM (``KeyboardInterrupt``) that a command did not take itself:
    typer would turn it into a silent exit 130 (click into a silent ``Abort``);
    :func:`main` says ``interrupted``."""


def _interruptible(command: Callable) -> Callable:
    """``command`` with a ``KeyboardInterrupt`` it lets out raised as :class:`_Interrupted`."""

    @functools.wraps(command)
    def call(*args, **kwargs):
        _started["on"] = True  # from here on the command says its own 130 line
        try:
            return command(*args, **kwargs)
        except KeyboardInterrupt as exc:
            raise _Interrupted from exc

    return call


app = typer.Typer(add_completion=False, rich_markup_mode=None, no_args_is_help=True,
                  help="Fault-injection testbed and benchmark for JIT checkpointing.")
for _name, _command in (("run", run.run), ("launch", launch.launch), ("faults", faults.faults),
                        ("model", model.model), ("validate", validate.validate),
                        ("sweep", sweep.sweep), ("overhead", overhead.overhead),
                        ("report", report.report), ("gate", gate.gate), ("io", io.io)):
    app.command(_name)(_interruptible(_command))

_debug = {"on": False}
_started = {"on": False}
"""Whether a command's body has started (its options parsed): an exit 130 before it
is typer's silent answer to a Ctrl-C while the options were parsed."""


@app.callback()
def _options(debug: Annotated[bool, typer.Option(help="Show tracebacks of internal errors.")]
             = False) -> None:
    _debug["on"] = debug


def _on_sigterm(signum, frame) -> None:
    raise KeyboardInterrupt


def _parse(args: list[str]) -> tuple | None:
    """``(command, values, order, extra)`` of ``args`` (the command line after
    ``jitbench``) as click's parser reads it before any conversion (``extra``: the
    arguments no parameter took), or None (no command, or a command line click will
    refuse on the real parse, saying why)."""
    group = typer.main.get_command(app)
    names = [i for i, a in enumerate(args) if not a.startswith("-")]
    cmd = group.commands.get(args[names[0]]) if names else None  # type: ignore[attr-defined]
    if cmd is None:
        return None
    try:
        parser = cmd.make_parser(cmd.context_class(cmd, info_name=args[names[0]],
                                                   resilient_parsing=True))
        values, extra, order = parser.parse_args(args=list(args[names[0] + 1:]))
    except Exception:  # noqa: BLE001 - click says what is wrong, on the real parse
        return None
    return cmd, values, order, extra


def blank_value(args: list[str]) -> str | None:
    """The one-line refusal of a blank value (empty or only spaces) given to an option
    or argument in ``args``, or None. No jitbench option takes one, and a path that is
    blank was read as the working directory (``jitbench validate ""`` validated every
    run under it) or named nothing (``--data ""``): most often an unset shell
    variable. Of a launched script's command (after ``--``) only the script itself is
    read, not its own arguments."""
    parsed = _parse(args)
    if parsed is None:
        return None
    cmd, values, _, extra = parsed
    for p in cmd.params:
        if p.name in BLANK_ALLOWED:
            continue
        v = values.get(p.name)
        given = [v] if isinstance(v, str) else list(v or ()) if isinstance(v, list | tuple) else []
        if getattr(p, "param_type_name", "") == "argument" and p.name == "command":
            given = _script_of(given)  # its own arguments are the script's
        if any(isinstance(x, str) and not x.strip() for x in given):
            what = (max(p.opts, key=len) if getattr(p, "param_type_name", "") == "option"
                    else "the script to launch" if p.name == "command"
                    else (getattr(p, "metavar", None) or p.name).upper())
            return f"{what} is blank (an unset shell variable?); give a value"
    if any(not x.strip() for x in extra):
        return "a blank argument was given (an unset shell variable?); remove it or give a value"
    return None


BLANK_ALLOWED = frozenset({"script_args"})
"""Parameters whose blank value means something: ``sweep --script-args ''`` is a
script run without arguments beside others that take some."""


def _script_of(command: list) -> list:
    """The items of a launched command that name what runs: the script, or the module
    of ``-m MODULE``, past a leading interpreter (``python``, ``python3.11``, a path to
    one); the rest are the script's own arguments."""
    rest = list(command)
    if rest and isinstance(rest[0], str) and os.path.basename(rest[0]).startswith("python") \
            and len(rest) > 1:
        rest = rest[1:]
    if rest and rest[0] == "-m":
        return rest[1:2]
    return rest[:1]


def repeated_option(args: list[str]) -> str | None:
    """The one-line refusal of an option that takes one value and is given several
    times in ``args`` (the command line after ``jitbench``), or None. Click keeps the
    last value silently, so ``--fault kill --fault nccl-hang`` would inject only
    ``nccl-hang``. A launched script's own arguments (after ``--``) are not read."""
    parsed = _parse(args)
    if parsed is None:
        return None
    cmd, _, order, _ = parsed
    seen: dict[str, int] = {}
    for p in order:  # every option each time it was given (typer's own click classes)
        if (getattr(p, "param_type_name", "") == "option" and not p.multiple
                and not p.is_flag and not p.count):
            seen[p.name] = seen.get(p.name, 0) + 1
    for p in cmd.params:
        if seen.get(p.name, 0) > 1:
            flag = max(p.opts, key=len)
            extra = " (several faults: --scenario FILE)" if flag == "--fault" else ""
            return f"{flag} was given {seen[p.name]} times; it takes one value{extra}"
    return None


def main() -> None:
    """Console-script entry point: maps errors to exit statuses, one line each.

    SIGTERM is handled like Ctrl-C: workers are stopped, records kept, exit 130,
    always with one line (the command's own, naming its directory, else
    ``interrupted``).
    """
    try:
        signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError:  # not the main thread (embedded use)
        pass
    try:
        why = repeated_option(sys.argv[1:]) or blank_value(sys.argv[1:])
        if why is not None:
            raise InputError(why)
        # click returns (does not raise) a typer.Exit's status when not standalone
        _started["on"] = False
        rc = app(prog_name="jitbench", standalone_mode=False)
        if isinstance(rc, int) and rc:
            if rc == ExitStatus.INTERRUPTED and not _started["on"]:
                # typer turned a Ctrl-C while it parsed the options into a silent
                # Exit(130) (returned, not standalone): never a silent exit
                line("interrupted")
            sys.exit(rc)
    except JitbenchError as exc:
        line(f"error: {exc}")
        sys.exit(int(exc.exit_status))
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except (KeyboardInterrupt, _Interrupted):
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
        if type(exc).__name__ == "Abort":  # click's Ctrl-C: never a silent exit
            line("interrupted")
            sys.exit(int(ExitStatus.INTERRUPTED))
        if _debug["on"]:
            raise
        line(f"internal error: {type(exc).__name__}: {exc} (rerun with --debug)")
        sys.exit(int(ExitStatus.INTERNAL))
