"""``jitbench report``: an HTML and a markdown report of a sweep, run or overhead directory."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from jitbench.cli import console


def report(
    directory: Annotated[Path, typer.Argument(help="A sweep directory (results.parquet), "
                                                   "a run directory, or an overhead "
                                                   "directory.")],
    overhead_dir: Annotated[Path | None, typer.Option(
        "--overhead", help="An overhead directory (overhead.csv) to include.")] = None,
    out_path: Annotated[Path | None, typer.Option(
        "--out", help="HTML file (default DIR/report.html; markdown beside it).")] = None,
    max_timelines: Annotated[int, typer.Option(
        min=0, help="Timelines drawn at most (0: none).")] = 16,
) -> None:
    """Write an HTML and a markdown report for DIR.

    The HTML is one self-contained file (plots inline, no network)."""
    from jitbench.cli.outfile import check_output
    from jitbench.reports.html import write_report

    if out_path is not None:
        # a missing or unwritable directory is refused now, in one line, as validate and
        # io refuse theirs (it is not created); whether an existing file there is a
        # report, and may be replaced, write_report decides
        check_output(out_path, "--out", lambda p: True, "jitbench report", "report")
    html, md = write_report(directory, out_path, overhead_dir, max_timelines=max_timelines)
    console.out().print(f"report: {html}\nmarkdown: {md}")
