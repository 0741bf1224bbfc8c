"""Cross-checks of a records or results table against its own evidence.

A row's flags and hashes are conclusions drawn when the run was recorded; the
figures they were drawn from are in the row too, or beside it. ``gate``,
``validate`` and ``report`` do not take a conclusion on trust where its evidence
can refute it (:func:`check_evidence`):

- ``spec_hash`` is the hash of ``spec_json`` (:func:`jitbench.records.spec_hash`,
  the function the sweep hashes with): an edited hash would make two specs look
  like repeats of one, or hide a changed spec from the gate;
- ``replay_ok`` true needs what :func:`jitbench.harness.run.replay_ok` checked
  per failure to hold in the sums: ``replayed_steps`` equal to
  ``expected_replayed_steps``, and under a strategy that promises one minibatch
  (registry ``replay_bound`` ``one``: ``jit``, ``jit-inprocess``; not
  ``jit:backstop=N``, whose lost JIT checkpoints are held to the backstop's)
  at most one replayed step per failure (``max_replayed_steps_per_failure`` and
  ``replayed_steps`` against ``num_failures``). Rows whose replay is not
  promised (``replay_promised`` false) and strategies that keep no replay bound
  of their own (``torchft``: ``replay_ok`` is its healing check) are left alone;
- ``num_failures`` is the number of rows of the run's ``failures.csv`` (none
  when the file is absent), where the run directory can be found.

A contradiction is a corrupt record, refused as bad input like a corrupt cell
(:func:`jitbench.records.check_cells`): one line naming the table, the row, the
run and the field (:class:`jitbench.errors.InputError`, exit 2).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from jitbench.errors import InputError
from jitbench.records import LABEL_COLUMNS, empty_cell, is_bool, spec_hash

__all__ = ["check_evidence"]


def _num(v: Any) -> float | None:
    if empty_cell(v):
        return None
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _where(row: dict) -> str:
    """``workload/strategy/fault repeat N`` of a row (what it has of them)."""
    where = "/".join(str(row[k]) for k in LABEL_COLUMNS if k in row and not empty_cell(row[k]))
    rep = _num(row.get("repeat"))
    if rep is not None:
        where += f" repeat {int(rep)}"
    return where


def _replay_bound(strategy: str) -> str | None:
    """The strategy's registry ``replay_bound`` (``one`` only when no backstop
    relaxes it); None for a name the registry does not know (a script's ``own``)."""
    from jitbench.runtime.strategies import parse

    try:
        choice = parse(strategy)
    except (ValueError, KeyError):
        return None
    bound = choice.entry.replay_bound
    return "one-backstop" if bound == "one" and choice.backstop else bound


def replay_contradiction(row: dict) -> str | None:
    """Why a row's ``replay_ok`` true contradicts its replayed steps (module
    docstring), or None when it does not (or cannot be checked)."""
    if not is_bool(row.get("replay_ok"), True) or is_bool(row.get("replay_promised"), False):
        return None
    strategy = str(row.get("strategy"))
    bound = _replay_bound(strategy)
    if bound in (None, "none"):
        return None
    replayed, expected = _num(row.get("replayed_steps")), _num(row.get("expected_replayed_steps"))
    if replayed is not None and expected is not None and replayed != expected:
        return (f"replay_ok is true but replayed_steps {replayed:g} differs from "
                f"expected_replayed_steps {expected:g} (every failure must replay exactly "
                "the steps since the newest committed checkpoint)")
    if bound != "one":
        return None
    most = _num(row.get("max_replayed_steps_per_failure"))
    if most is not None and most > 1:
        return (f"replay_ok is true but max_replayed_steps_per_failure is {most:g}: {strategy} "
                "replays at most one step per failure")
    failures = _num(row.get("num_failures"))
    if replayed is not None and failures is not None and replayed > failures:
        return (f"replay_ok is true but replayed_steps {replayed:g} exceeds num_failures "
                f"{failures:g}: {strategy} replays at most one step per failure")
    return None


def _spec_contradiction(row: dict) -> str | None:
    """Why a row's ``spec_hash`` is not the hash of its ``spec_json``, or None."""
    h, text = row.get("spec_hash"), row.get("spec_json")
    if empty_cell(h) or empty_cell(text):
        return None
    try:
        spec = json.loads(text)
    except (TypeError, ValueError):
        return None  # check_cells refuses a spec_json that is not JSON
    if not isinstance(spec, dict):
        return None
    want = spec_hash(spec)
    if str(h).strip() != want:
        return (f"spec_hash is {str(h)!r} but its spec_json hashes to {want!r} (the hash or "
                "the spec was edited)")
    return None


def _run_dir(root: Path | None, recorded: Any) -> Path | None:
    """The run directory a row's ``run_dir`` names, as recorded or moved with its sweep
    (``root/runs/NAME``, ``root/NAME``); None when none of them holds a run's record."""
    if empty_cell(recorded):
        return None
    p = Path(str(recorded))
    cands = [p] + ([root / "runs" / p.name, root / p.name] if root is not None else [])
    for c in cands:
        if any((c / f).is_file() for f in ("summary.json", "records.csv", "records.parquet")):
            return c
    return None


def _failures_contradiction(row: dict, root: Path | None) -> str | None:
    """Why a row's ``num_failures`` differs from its run's ``failures.csv`` rows, or
    None (also when the run directory cannot be found)."""
    import pandas as pd

    n = _num(row.get("num_failures"))
    d = _run_dir(root, row.get("run_dir"))
    if n is None or d is None:
        return None
    f = d / "failures.csv"
    try:
        rows = len(pd.read_csv(f)) if f.is_file() else 0
    except (OSError, ValueError, pd.errors.EmptyDataError):
        rows = 0
    if rows != n:
        return (f"num_failures is {n:g} but {f} has {rows} row{'s' if rows != 1 else ''} "
                "(one per failure episode)")
    return None


def check_evidence(t, name: str = "results", root: str | Path | None = None) -> None:
    """Refuse a records or results table with a row whose recorded conclusions its
    own evidence contradicts (module docstring): ``spec_hash`` against ``spec_json``,
    ``replay_ok`` against the replayed steps and the strategy's promise,
    ``num_failures`` against the run's ``failures.csv``.

    Args:
        t: the table (pandas DataFrame, one row per run), as
            :func:`jitbench.records.load_results` returns it.
        name: how the message names the table (its file, or ``--baseline FILE``).
        root: the directory the table was read from (a sweep's run directories are
            looked for below it when their recorded path moved); None: as recorded.

    Raises:
        InputError: the first contradiction, in one line naming ``name``, the
            1-based row, its run (configuration and repeat) and the field (exit 2).
    """
    base = Path(root) if root is not None else None
    if base is not None and base.is_file():
        base = base.parent
    for i, row in enumerate(t.to_dict("records")):
        why = (_spec_contradiction(row) or replay_contradiction(row)
               or _failures_contradiction(row, base))
        if why:
            where = _where(row)
            run = f" ({where})" if where else ""
            raise InputError(f"{name}: row {i + 1}{run}: {why} (a record that contradicts "
                             "its evidence: nothing was read from it)")
