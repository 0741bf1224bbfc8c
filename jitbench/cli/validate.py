"""``jitbench validate``: the model's predicted wasted GPU time against the measured one."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from jitbench.cli import console
from jitbench.cli.options import JsonRows
from jitbench.errors import ExitStatus, InputError


def validate(
    results: Annotated[Path, typer.Argument(help="A results directory (records.csv and "
                                                 "failures.csv below it) or a records table.")],
    strict: Annotated[bool, typer.Option(help="Exit 4 when a group is outside the "
                                              "tolerance.")] = False,
    csv_path: Annotated[Path | None, typer.Option("--csv", help="Also write the table as "
                                                  "CSV here.")] = None,
    as_json: JsonRows = False,
    allow_missing_evidence: Annotated[bool, typer.Option(
        "--allow-missing-evidence", help="Use rows whose run directory is missing without "
        "it (their failures.csv is neither checked nor read; a note says how many) instead "
        "of refusing them (exit 2).")] = False,
) -> None:
    """Model-predicted vs measured wasted GPU time.

    For the measured fault campaigns of RESULTS (a sweep with Poisson faults).
    --csv never replaces a file that is not an earlier validate table. A row whose run
    directory is missing is refused (exit 2) unless --allow-missing-evidence."""
    from jitbench.cli.outfile import check_output, csv_header_is
    from jitbench.reports.validate import COLUMNS, load_results, validation_table, why_empty

    if csv_path is not None:  # before anything is read: nothing recorded is replaced
        check_output(csv_path, "--csv", csv_header_is(COLUMNS), "jitbench validate table",
                     "validate")
    try:
        runs, failures, unchecked = load_results(
            results, require_dirs=None if allow_missing_evidence else "--allow-missing-evidence")
    except (FileNotFoundError, ValueError, OSError) as exc:
        msg = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise InputError(msg if str(results) in msg else f"{results}: {msg}") from None
    table = validation_table(runs, failures)
    if table.empty:
        raise InputError(f"{results}: {why_empty(runs, failures)}")
    if csv_path is not None:
        try:
            table.to_csv(csv_path, index=False)
        except OSError as exc:
            raise InputError(f"--csv: cannot write {csv_path}: {exc.strerror or exc}") from None
    if as_json:
        print(table.to_json(orient="records"))
    else:
        console.out().print(_table(table))
    if unchecked:  # after the table: an error before it stays the one line
        from jitbench.reports.evidence import unchecked_note

        console.line(unchecked_note(str(results), unchecked, len(runs))
                     + " (--allow-missing-evidence)")
    if strict and not table["within_tolerance"].all():
        raise typer.Exit(int(ExitStatus.INCORRECT))


_LABELS = {"workload": "workload", "strategy": "strategy", "fault": "fault", "runs": "runs",
           "failures": "fails", "measured_wasted_gpu_s": "meas.",
           "predicted_wasted_gpu_s": "pred.", "error_pct": "err %"}


def _table(table):
    """Terminal table of the validation: 8 columns, fits 80 wide (--csv/--json keep all)."""
    from rich import box
    from rich.table import Table

    from jitbench.reports.validate import TOLERANCE_PCT

    ok = int(table["within_tolerance"].sum())
    sources = sorted(set(map(str, table.get("phases_from", []))))
    t = Table(title=f"model vs measured wasted GPU-s (tolerance {TOLERANCE_PCT:.0f}%)",
              caption=f"{ok} of {len(table)} groups within {TOLERANCE_PCT:.0f}%; phase "
                      f"costs from {', '.join(sources)} (--csv/--json: every column)",
              box=box.SIMPLE_HEAD, pad_edge=False)
    cols = [c for c in table.columns if c in _LABELS]
    for col in cols:
        t.add_column(_LABELS[col], no_wrap=True,
                     justify="left" if col in ("workload", "strategy", "fault") else "right")
    for _, row in table.iterrows():
        cells = [f"{row[c]:.2f}" if isinstance(row[c], float) else str(row[c]) for c in cols]
        if not row["within_tolerance"]:
            cells[-1] += " !"
        t.add_row(*cells)
    return t
