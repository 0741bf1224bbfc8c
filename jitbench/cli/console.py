"""Where the CLI writes: tables and results on stdout, progress and one-line messages on stderr.

The rich consoles are built on first use, so commands that print plain text
(``--help``, ``--json``) never import rich's console.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console


@cache
def out() -> Console:
    """The console for tables and results (stdout; 200 columns when not a terminal,
    so CI logs are not squeezed; a terminal's width, or rich's ``$COLUMNS``, otherwise)."""
    from rich.console import Console

    return Console() if sys.stdout.isatty() else Console(width=200)


@cache
def err() -> Console:
    """The console for progress and status lines (stderr)."""
    from rich.console import Console

    return Console(stderr=True)


def line(text: str) -> None:
    """One plain line on stderr (never wrapped or styled)."""
    print(text, file=sys.stderr, flush=True)


@contextmanager
def on_interrupt(where: object, extra: str = "") -> Iterator[None]:
    """End the command on Ctrl-C or SIGTERM inside the block (a ``KeyboardInterrupt``:
    a second one while a stop is under way, or one outside a launch) with one line on
    stderr, ``interrupted; records kept in WHERE`` and ``extra``, printed with further
    signals held back, and exit status 130 (never click's silent abort)."""
    try:
        yield
    except KeyboardInterrupt:
        import typer

        from jitbench.errors import ExitStatus
        from jitbench.harness.launch import held_signals

        with held_signals(reraise=False):
            line(f"interrupted; records kept in {where}{extra}")
        raise typer.Exit(int(ExitStatus.INTERRUPTED)) from None


def cell(value: object, digits: int = 2) -> str:
    """One number, boolean or missing value as a table cell
    (:func:`jitbench.reports.table.fmt`, 2 decimals by default)."""
    from jitbench.reports.table import fmt

    return fmt(value, digits)
