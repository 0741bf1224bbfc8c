"""The user-facing errors of jitbench and the exit statuses of its commands.

One hierarchy: every error a user can cause or meet derives from
:class:`JitbenchError` and carries the exit status the CLI turns it into
(one line on stderr, never a traceback). Anything else that escapes a command
is a bug (exit 1). This module imports nothing (no torch), so every layer may
use it.

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

import difflib
from collections.abc import Iterable
from enum import IntEnum

__all__ = ["DataError", "ExitStatus", "IncomparableError", "InputError", "JitbenchError",
           "RunDirError", "RunFailedError", "ScheduleError", "SpecError", "suggest", "unknown"]


def suggest(name: object, choices: Iterable[str], rest: str = "") -> str:
    """``did you mean 'x'? `` for the choice closest to ``name`` by
    :func:`difflib.get_close_matches` (ratio >= 0.6), with ``rest`` appended to it (a
    strategy's ``:N``); an empty string where none is that close."""
    close = difflib.get_close_matches(str(name).lower(), list(choices), n=1)
    return f"did you mean {close[0] + rest!r}? " if close else ""


def unknown(what: str, name: object, choices: Iterable[str]) -> str:
    """The one-line message for a name that is not one of ``choices``:
    ``unknown fault 'nccl-hnag'; did you mean 'nccl-hang'? one of ...`` (:func:`suggest`)."""
    choices = list(choices)
    return f"unknown {what} {name!r}; {suggest(name, choices)}one of {', '.join(choices)}"


class ExitStatus(IntEnum):
    """Exit statuses of every ``jitbench`` command (the table above)."""

    OK = 0
    INTERNAL = 1
    INPUT = 2
    RUN_FAILED = 3
    INCORRECT = 4
    REGRESSION = 5
    INCOMPARABLE = 6
    INTERRUPTED = 130


class JitbenchError(Exception):
    """An error the user is told about in one line; ``exit_status`` says how the CLI exits."""

    exit_status: ExitStatus = ExitStatus.INTERNAL


class InputError(JitbenchError, ValueError):
    """Bad user input (a flag, a value, a file): one line, exit status 2."""

    exit_status = ExitStatus.INPUT


class SpecError(InputError):
    """The run spec is invalid; the message is one line for the user."""


class RunDirError(SpecError):
    """The run directory exists and is not empty (never overwritten silently)."""


class ScheduleError(InputError):
    """A fault schedule or scenario file is invalid; the message is one line."""


class DataError(InputError):
    """The workload's data cannot be used (missing, empty, unreadable, corrupt)."""


class RunFailedError(JitbenchError):
    """A training job the command needs did not complete (the message says why): exit
    status 3."""

    exit_status = ExitStatus.RUN_FAILED


class IncomparableError(JitbenchError, ValueError):
    """Results cannot be compared with a baseline (the message says why): exit status 6."""

    exit_status = ExitStatus.INCOMPARABLE
