"""``jitbench gate``: compare results with a stored baseline; fail CI on a regression."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated

import typer

from jitbench.cli import console
from jitbench.errors import ExitStatus, IncomparableError, InputError, SpecError


def gate(
    results: Annotated[Path, typer.Argument(help="Results to check: a sweep directory or "
                                                 "its results .parquet/.csv (not a single "
                                                 "run's records).")],
    baseline: Annotated[Path, typer.Option(help="The stored baseline: a sweep's results "
                                                "table or directory.")],
    tolerance: Annotated[float, typer.Option(help="Timing tolerance: a median may grow by "
                                                  "this fraction beyond the noise band "
                                                  "before it is a regression.")] = 0.5,
    floor_s: Annotated[float, typer.Option(help="Absolute slack (s): a timing that grew "
                                                "by less is within noise.")] = 1.0,
    strict_machine: Annotated[bool, typer.Option(help="Also require the same host name and "
                                                      "CPU count.")] = False,
    verbose: Annotated[bool, typer.Option(help="Also print the comparisons that are "
                                               "ok.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print every comparison as "
                                                         "JSON.")] = False,
    allow_missing_evidence: Annotated[bool, typer.Option(
        "--allow-missing-evidence", help="Check RESULTS rows whose run directory is missing "
        "without it (their failures.csv is not read; a note says how many) instead of "
        "refusing them (exit 2).")] = False,
) -> None:
    """Compare RESULTS with a stored baseline; fail on a regression.

    Exit 4 if an invariant is broken, 5 on a timing regression, 6 if the
    results are not comparable with the baseline, 2 if a table is unusable (not a
    sweep's results, a timing that is not empty or a number of seconds >= 0, a
    record its evidence contradicts: an edited spec_hash, replay_ok true over replayed
    steps that break the promise, results.parquet and results.csv that differ, or a
    RESULTS row whose run directory is missing, unless --allow-missing-evidence). The
    baseline needs no run directories (a stored table)."""
    for flag, v in (("--tolerance", tolerance), ("--floor-s", floor_s)):
        if not (math.isfinite(v) and v >= 0):
            raise SpecError(f"{flag} must be a finite number >= 0, got {v}")
    from jitbench.records import KEY_COLUMNS, find_table, load_results
    from jitbench.reports import gate as g

    # a gate compares sweeps (repeats of one spec, keyed by its spec_hash); a run's own
    # records lack that column and are refused here (exit 2), not as incomparable (6)
    need = (*KEY_COLUMNS, "spec_hash")
    for flag, path in (("--baseline ", baseline), ("", results)):
        table = find_table(path) if path.is_dir() else None
        if table is not None and table.name.startswith("records"):
            raise InputError(f"{flag}{path}: a run's records ({table.name}); gate compares "
                             "the results of a sweep (jitbench sweep --out DIR writes "
                             "DIR/results.csv)")
    base_t = load_results(baseline, require=need, what="sweep results",
                          name=f"--baseline {_shown(baseline)}")
    new_t = load_results(results, require=need, what="sweep results",
                         name=str(_shown(results)))
    from jitbench.reports.evidence import check_evidence, unchecked_note

    # the candidate's evidence must be there (a row without its run directory is
    # refused unless the user opts out); the stored baseline is a table without them
    flag = None if allow_missing_evidence else "--allow-missing-evidence"
    base_n = check_evidence(base_t, f"--baseline {_shown(baseline)}", baseline)
    new_n = check_evidence(new_t, str(_shown(results)), results, require_dirs=flag)
    notes = [unchecked_note(f"--baseline {_shown(baseline)}", base_n, len(base_t))
             + " (a stored baseline needs none)"] if base_n else []
    if new_n:
        notes.append(unchecked_note(str(_shown(results)), new_n, len(new_t))
                     + " (--allow-missing-evidence)")
    for name, path in ((f"--baseline {_shown(baseline)}", baseline), (str(_shown(results)), results)):
        partial = _partial_sweep(path)
        if partial:  # cells that never ran are never gated: say so
            notes.append(f"note: {name}: {partial}")
    try:
        verdict = g.compare(base_t, new_t, tolerance=tolerance, floor_s=floor_s,
                            strict_machine=strict_machine,
                            names=(f"--baseline {_shown(baseline)}", str(_shown(results))))
    except IncomparableError as exc:
        console.line(f"error: incomparable results: {exc}")
        raise typer.Exit(int(ExitStatus.INCOMPARABLE)) from None
    for note in notes:  # once the tables compared: an error stays the one line
        console.line(note)
    if as_json:
        print(json.dumps([c.__dict__ for c in verdict.checks], default=str))
    else:
        for text in verdict.lines(verbose):
            print(text)
    if verdict.violations:
        raise typer.Exit(int(ExitStatus.INCORRECT))
    if verdict.regressions:
        raise typer.Exit(int(ExitStatus.REGRESSION))


def _partial_sweep(path: Path) -> str | None:
    """The sentence for a gate argument that is the table of an interrupted sweep (its
    ``sweep.json`` says ``complete`` false; :func:`jitbench.records.sweep_incomplete`),
    else None (a complete sweep, a stored table, an unreadable ``sweep.json``)."""
    from jitbench.records import sweep_incomplete

    d = path if path.is_dir() else path.parent
    try:
        meta = json.loads((d / "sweep.json").read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return sweep_incomplete(meta, "the gate")


def _shown(path: Path) -> Path:
    """The table file a gate argument names: the file itself, or a directory's results
    table (:func:`jitbench.records.find_table`), for messages."""
    from jitbench.records import find_table

    return (find_table(path) or path) if path.is_dir() else path
