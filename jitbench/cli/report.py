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

    The HTML is one self-contained file (plots inline, no network). Rows whose run
    directory is missing are reported unchecked against their failures.csv: a note
    line (and the report) says how many."""
    from jitbench.cli.outfile import check_dir, check_output
    from jitbench.reports.html import write_report

    flag = "--out" if out_path is not None else "report"

    def writable(html: Path, md: Path, files: Path) -> None:
        # before the figures are drawn: a missing or unwritable directory (never created,
        # as validate and io refuse theirs), or a file there that cannot be replaced, is
        # one line now, with nothing written; write_report has already refused an
        # existing file that is not a report, so any left may be replaced
        for f in (html, md):
            check_output(f, flag, lambda p: True, "jitbench report", "report")
        check_dir(files, flag)

    html, md = write_report(directory, out_path, overhead_dir, max_timelines=max_timelines,
                            preflight=writable, on_note=console.line)
    console.out().print(f"report: {html}\nmarkdown: {md}")
