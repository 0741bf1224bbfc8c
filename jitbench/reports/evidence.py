"""Cross-checks of a records or results table against its own evidence.

A row's flags and hashes are conclusions drawn when the run was recorded; the
figures they were drawn from are in the row too, or beside it. ``gate``,
``validate``, ``report`` and ``model --from-results`` do not take a conclusion on trust where its evidence
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
- ``state_equal`` true (bitwise equal to the fault-free run) needs
  ``max_abs_diff`` 0 and ``loss_diff`` 0 where they are recorded (rows whose
  strategy does not promise the fault-free state, ``bitwise_promised`` false, are
  left alone);
- ``completed`` true needs ``final_step`` at the run's planned steps (``steps``,
  else those of ``spec_json``);
- ``replay_ok`` true needs ``replayed_steps`` measured (a non-empty cell, where
  the table has the column; not for ``replay_promised`` false);
- every column the row's ``spec_json`` determines (:func:`spec_columns`:
  ``strategy``, ``workload``, ``size``, ``world_size``, ``steps``, ``seed``,
  ``faults``, ``fault``, ...) holds what the spec says (an empty cell: not
  recorded, no claim);
- ``state_equal`` and ``sample_stream_equal`` are empty where the reference was
  cut short (``reference_complete`` false, or a ``reference_cut_short`` reason):
  a reference stopped before its end has nothing to compare with;
- ``num_failures`` is the number of rows of the run's ``failures.csv`` (none
  when the file is absent), ``replayed_steps`` and ``expected_replayed_steps``
  the sums of its per-failure cells (an empty cell counts 0, as the summary sums
  them) and each recovery phase (:data:`PHASE_MEANS`) the mean of its non-empty
  per-failure cells, where the run directory is found: the directory given when
  it is a run directory, else from where the table lies, never from the working
  directory (:func:`jitbench.records.run_dirs`);
- every scalar field of the run's own ``summary.json`` there that the row has
  too (the oracles, losses, recovery figures and replayed counts; not the paths
  of :data:`LOCATIONS`) holds the same value: a flag flipped in the table is
  tampered or stale evidence, not a result.

A contradiction is a corrupt record, refused as bad input like a corrupt cell
(:func:`jitbench.records.check_cells`): one line naming the table, the row, the
run and the field (:class:`jitbench.errors.InputError`, exit 2).

The last check needs the row's run directory. A row whose directory is not found
is never passed over in silence: :func:`check_evidence` returns how many rows went
unchecked (``report`` and ``model --from-results`` print that count in a note
line), and with ``require_dirs`` (the candidate of ``gate``, ``validate``) refuses
the first such row in one line naming it and the directory it looked for
(:func:`missing_dir_line`), unless the user opted out (``--allow-missing-evidence``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from jitbench.errors import InputError
from jitbench.records import (
    LABEL_COLUMNS,
    empty_cell,
    fault_kinds,
    is_bool,
    run_dirs,
    spec_hash,
)

__all__ = ["check_evidence", "missing_dir_line", "spec_columns", "unchecked_note"]


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


def _row_spec(row: dict) -> dict | None:
    """The row's ``spec_json`` as a dict, or None when empty or not a JSON object
    (:func:`jitbench.records.check_cells` refuses one that is not JSON)."""
    text = row.get("spec_json")
    if empty_cell(text):
        return None
    try:
        spec = json.loads(text)
    except (TypeError, ValueError):
        return None
    return spec if isinstance(spec, dict) else None


def _spec_contradiction(row: dict) -> str | None:
    """Why a row's ``spec_hash`` is not the hash of its ``spec_json``, or None."""
    h, spec = row.get("spec_hash"), _row_spec(row)
    if empty_cell(h) or spec is None:
        return None
    want = spec_hash(spec)
    if str(h).strip() != want:
        return (f"spec_hash is {str(h)!r} but its spec_json hashes to {want!r} (the hash or "
                "the spec was edited)")
    return None


def _reference_contradiction(row: dict) -> str | None:
    """Why a row's ``state_equal`` or ``sample_stream_equal`` (either value) contradicts
    a reference recorded as cut short (``reference_complete`` false, or a
    ``reference_cut_short`` reason): a reference stopped before its end has no final
    state or sample stream to compare with, so neither flag can hold a result."""
    cut = row.get("reference_cut_short")
    stopped = is_bool(row.get("reference_complete"), False) or not empty_cell(cut)
    if not stopped:
        return None
    why = (f"reference_cut_short is {str(cut).strip()!r}" if not empty_cell(cut)
           else "reference_complete is false")
    for col in ("state_equal", "sample_stream_equal"):
        v = row.get(col)
        if not empty_cell(v):
            return (f"{col} is {_shown(v)} but {why} (a reference cut short has nothing to "
                    "compare with: the flag must be empty)")
    return None


def _shown(v: Any) -> str:
    """A cell as a message shows it: text quoted, a whole float without ``.0``,
    ``empty`` for nothing."""
    if empty_cell(v):
        return "empty"
    x = v.item() if hasattr(v, "item") else v
    if isinstance(x, float) and x.is_integer():
        return str(int(x))
    return repr(x.strip()) if isinstance(x, str) else str(x)


def _fault_plan(faults: Any) -> str | None:
    """A spec's (or summary's) fault list as a ``faults`` cell (``kind@rank:step``
    joined by commas), the text of one already so written, or None when it is neither."""
    if isinstance(faults, str):
        return faults.strip()
    if not isinstance(faults, list):
        return None
    try:
        return ",".join(f"{f['kind']}@{f['rank']}:{f['step']}" for f in faults)
    except (TypeError, KeyError):
        return None


def spec_columns(spec: dict) -> dict[str, Any]:
    """The row columns a run spec (``spec_json`` as read) determines, as the run's
    summary writes them: a run spec's ``workload``, ``size``, ``strategy``,
    ``world_size`` (ranks per node x nodes), ``steps``, ``seed``, ``faults``,
    ``fault`` (the plan's kinds), ``deterministic_reduce`` and ``parallel`` (its
    kind, ``ddp`` or ``hsdp``); a launched script's (``kind`` ``script``)
    ``workload`` (its label, else the script's file name or module), ``strategy``,
    ``world_size``, ``seed``, ``faults`` and ``fault`` (not ``steps``: the step its
    ranks finished at). A value the spec does not hold is left out; an empty cell
    of the row (not recorded) is no contradiction."""
    out: dict[str, Any] = {}
    nproc, nnodes = spec.get("nproc"), spec.get("nnodes", 1)
    if isinstance(nproc, int) and isinstance(nnodes, int):
        out["world_size"] = nproc * nnodes
    out["strategy"] = spec.get("strategy")
    plan = _fault_plan(spec["faults"]) if "faults" in spec else None
    if plan is not None:
        out["faults"], out["fault"] = plan, fault_kinds(plan)
    if spec.get("kind") == "script":
        script, module = spec.get("script"), spec.get("module")
        out["workload"] = spec.get("label") or (Path(script).name if script else module)
        out["seed"] = spec.get("seed")
        return {k: v for k, v in out.items() if v is not None}
    work = spec.get("workload")
    if isinstance(work, dict):
        out.update(workload=work.get("name"), size=work.get("size"), steps=work.get("steps"),
                   seed=work.get("seed"))
    out["deterministic_reduce"] = spec.get("deterministic_reduce")
    par = spec.get("parallel")
    out["parallel"] = par.split(":")[0].strip() if isinstance(par, str) else None
    return {k: v for k, v in out.items() if v is not None}


def _same(a: Any, b: Any) -> bool:
    """A table cell ``a`` holds the value ``b`` (a spec's or summary's): both empty,
    the same flag, equal numbers (to 1e-9 relative) or the same text."""
    if empty_cell(a) or empty_cell(b):
        return empty_cell(a) and empty_cell(b)
    a, b = (v.item() if hasattr(v, "item") else v for v in (a, b))
    if isinstance(b, bool) or isinstance(a, bool):
        other, flag = (a, b) if isinstance(b, bool) else (b, a)
        return is_bool(other, flag) if not isinstance(other, float) else other == flag
    if isinstance(a, (int, float)) or isinstance(b, (int, float)):
        try:
            return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=0.0) or (
                math.isinf(float(a)) and float(a) == float(b))
        except (TypeError, ValueError):
            pass
    return str(a).strip() == str(b).strip()


def _spec_columns_contradiction(row: dict) -> str | None:
    """Why a column the row's ``spec_json`` determines (:func:`spec_columns`) holds
    another value, or None (also without a spec)."""
    spec = _row_spec(row)
    for col, want in (spec_columns(spec) if spec is not None else {}).items():
        if col not in row or empty_cell(row[col]):  # not recorded (older tables): no claim
            continue
        got = row[col]
        if col == "parallel" and isinstance(got, str):
            got = got.split(":")[0]
        if not _same(got, want):
            return (f"{col} is {_shown(row[col])} but its spec_json says {_shown(want)} "
                    "(the row or its spec was edited)")
    return None


def _state_contradiction(row: dict) -> str | None:
    """Why a row's ``state_equal`` true contradicts its recorded differences, or None."""
    if not is_bool(row.get("state_equal"), True) or is_bool(row.get("bitwise_promised"), False):
        return None
    d = row.get("max_abs_diff")
    try:
        diff = None if empty_cell(d) else float(d)  # +inf: shapes or dtypes differ
    except (TypeError, ValueError):
        diff = None
    if diff is not None and diff > 0:
        return (f"state_equal is true but max_abs_diff is {diff:g} (bitwise equal states "
                "differ by 0)")
    loss = _num(row.get("loss_diff"))
    if loss is not None and loss != 0:
        return (f"state_equal is true but loss_diff is {loss:g} (bitwise equal runs end "
                "on the same loss)")
    return None


def _planned_steps(row: dict) -> float | None:
    """The run's planned optimizer steps: ``steps``, else those of ``spec_json``
    (``workload.steps`` of a run spec, ``steps`` of a launched script's)."""
    steps = _num(row.get("steps"))
    if steps is not None:
        return steps
    spec = _row_spec(row)
    if spec is None:
        return None
    work = spec.get("workload")  # a RunSpec's are its workload's; a ScriptSpec's its own
    return _num(work.get("steps") if isinstance(work, dict) else spec.get("steps"))


def _completed_contradiction(row: dict) -> str | None:
    """Why a row's ``completed`` true contradicts its ``final_step``, or None."""
    if not is_bool(row.get("completed"), True):
        return None
    final, planned = _num(row.get("final_step")), _planned_steps(row)
    if final is not None and planned is not None and final < planned:
        return (f"completed is true but final_step {final:g} is short of the {planned:g} "
                "planned steps")
    return None


def _replay_measured(row: dict) -> str | None:
    """Why a row's ``replay_ok`` true has no replayed steps behind it, or None."""
    if (not is_bool(row.get("replay_ok"), True) or is_bool(row.get("replay_promised"), False)
            or "replayed_steps" not in row or not empty_cell(row.get("replayed_steps"))):
        return None
    return "replay_ok is true but replayed_steps is empty (no replay was measured)"


def _failures_contradiction(row: dict, d: Path | None) -> str | None:
    """Why a row's ``num_failures``, ``replayed_steps`` or ``expected_replayed_steps``
    differs from its run's ``failures.csv`` (in ``d``), or None (also when the run
    directory was not found)."""
    import pandas as pd

    n = _num(row.get("num_failures"))
    if d is None:
        return None
    f = d / "failures.csv"
    try:
        fails = pd.read_csv(f) if f.is_file() else pd.DataFrame()
    except (OSError, ValueError, pd.errors.EmptyDataError):
        fails = pd.DataFrame()
    rows = len(fails)
    if n is not None and rows != n:
        return (f"num_failures is {n:g} but {f} has {rows} row{'s' if rows != 1 else ''}"
                + (" (one per failure episode)" if f.is_file() else " (it is missing)"))
    for col in ("replayed_steps", "expected_replayed_steps"):
        got = _num(row.get(col))
        if got is None or col not in fails.columns:
            continue
        total = sum(x for x in (_num(v) for v in fails[col].tolist()) if x is not None)
        if total != got:
            return (f"{col} is {got:g} but the per-failure {col} of {f} sum to {total:g}")
    return _means_contradiction(row, fails, f)


PHASE_MEANS = ("detect_s", "stall_s", "save_s", "restart_s", "restore_s", "recovery_s",
               "replay_s", "reform_s", "transfer_s")
"""A run's recovery phases: the summary's (and row's) value is the mean of the
non-empty per-failure values of its ``failures.csv`` (derived from its phases table);
empty when none is measured."""
LOCATIONS = ("run_dir", "reference_dir")
"""Summary fields that say where a run lay, not what it measured: a copied sweep
keeps the paths it was recorded at, so they are not compared."""


def _means_contradiction(row: dict, fails, f: Path) -> str | None:
    """Why a row's recovery phase (:data:`PHASE_MEANS`) is not the mean of the
    per-failure values of ``fails`` (its run's ``failures.csv``, read from ``f``)."""
    for col in PHASE_MEANS:
        if col not in row or col not in fails.columns:
            continue
        vals = [x for x in (_num(v) for v in fails[col].tolist()) if x is not None]
        want = sum(vals) / len(vals) if vals else None
        if not _same(row[col], want):
            return (f"{col} is {_shown(row[col])} but the per-failure {col} of {f} "
                    + (f"average {want:g}" if want is not None else "are empty")
                    + " (tampered or stale evidence)")
    return None


def _summary_contradiction(row: dict, d: Path | None) -> str | None:
    """Why a row differs from its run's own ``summary.json`` (in ``d``): every scalar
    field the summary and the row both have (the oracles ``state_equal``,
    ``sample_stream_equal``, ``completed``, ``replay_ok``, ``reference_complete``,
    the losses, the recovery figures, the replayed counts, ...; ``faults`` as the
    row writes it; not :data:`LOCATIONS`) must hold the same value. None when it
    does, or when the run directory or its summary is not found or not readable
    (a summary that is not a JSON object is said)."""
    if d is None:
        return None
    f = d / "summary.json"
    try:
        summary = json.loads(f.read_text())
    except OSError:
        return None
    except ValueError:
        return f"{f} is not JSON, so the row cannot be checked against its run's own record"
    if not isinstance(summary, dict):
        return f"{f} is not a JSON object, so the row cannot be checked against it"
    for col, want in summary.items():
        if col in LOCATIONS or col not in row:
            continue
        if col == "faults":
            want = _fault_plan(want)
            if want is None:
                continue
        elif isinstance(want, (list, dict)):
            continue
        if not _same(row[col], want):
            return (f"{col} is {_shown(row[col])} in the table but {_shown(want)} in {f}, "
                    "the run's own record (tampered or stale evidence)")
    return None


def _looked_for(row: dict, root: Path) -> str:
    """The run directory a row names, as :func:`jitbench.records.run_dirs` looked for
    it beside ``root`` (the table's place): ``runs/NAME`` there, or that the row
    records none."""
    rd = row.get("run_dir")
    if empty_cell(rd):
        return "it records no run_dir, so its run directory cannot be found"
    r = Path(str(rd))
    base = root.parent if root.is_file() else root
    places = dict.fromkeys(str(c) for c in (base / "runs" / r.name, base / r.name,
                                            r if r.is_absolute() else base / r))
    return (f"its run directory {rd} is missing (no run's record at "
            + " or ".join(places) + ")")


def missing_dir_line(name: str, i: int, row: dict, root: Path, flag: str) -> str:
    """The one line refusing row ``i`` (0-based) of table ``name`` whose run directory
    is missing: what was looked for, what goes unchecked, and the opt-out ``flag``."""
    where = _where(row)
    run = f" ({where})" if where else ""
    return (f"{name}: row {i + 1}{run}: {_looked_for(row, root)}, so its failures.csv "
            f"cannot be checked against the row; copy the run directories beside the table, "
            f"or pass {flag} to check the rows without them")


def unchecked_note(name: str, unchecked: int, rows: int) -> str:
    """The note line of a table with ``unchecked`` of its ``rows`` rows whose run
    directory was not found (their failures.csv was not read)."""
    return (f"note: {name}: {unchecked} of {rows} row{'s' if rows != 1 else ''} have no run "
            "directory here, so their num_failures and replayed steps were not checked "
            "against a failures.csv")


def check_evidence(t, name: str = "results", root: str | Path | None = None, *,
                   require_dirs: str | None = None) -> int:
    """Refuse a records or results table with a row whose recorded conclusions its
    own evidence contradicts (module docstring): ``spec_hash`` against ``spec_json``,
    ``replay_ok`` against the replayed steps and the strategy's promise,
    ``state_equal`` against ``max_abs_diff`` and ``loss_diff``, ``completed``
    against ``final_step`` and the planned steps, the spec's columns against
    ``spec_json``, the comparisons against a reference cut short, ``num_failures``,
    the replayed steps and recovery phases against the run's ``failures.csv``, and
    the row against the run's own ``summary.json``.

    Args:
        t: the table (pandas DataFrame, one row per run), as
            :func:`jitbench.records.load_results` returns it.
        name: how the message names the table (its file, or ``--baseline FILE``).
        root: the path the table was read from (a run directory, a sweep, a tree of
            runs or a table file): each row's run directory is found from it
            (:func:`jitbench.records.run_dirs`); None: no run directory is read.
        require_dirs: None, or the opt-out flag (``--allow-missing-evidence``) named
            when a row whose run directory is not found is refused.

    Returns:
        How many rows' run directories were not found, so that their
        ``failures.csv`` was not read (every row when ``root`` is None).

    Raises:
        InputError: the first contradiction, in one line naming ``name``, the
            1-based row, its run (configuration and repeat) and the field (exit 2);
            with ``require_dirs``, the first row whose run directory is missing
            (:func:`missing_dir_line`, exit 2).
    """
    dirs = run_dirs(t, root) if root is not None else [None] * len(t)
    for i, row in enumerate(t.to_dict("records")):
        why = (_spec_contradiction(row) or _spec_columns_contradiction(row)
               or replay_contradiction(row) or _replay_measured(row)
               or _reference_contradiction(row) or _state_contradiction(row)
               or _completed_contradiction(row))
        if not why and require_dirs is not None and dirs[i] is None:
            raise InputError(missing_dir_line(name, i, row, Path(root or "."), require_dirs))
        why = why or _failures_contradiction(row, dirs[i]) or _summary_contradiction(row, dirs[i])
        if why:
            where = _where(row)
            run = f" ({where})" if where else ""
            raise InputError(f"{name}: row {i + 1}{run}: {why} (a record that contradicts "
                             "its evidence: nothing was read from it)")
    return sum(d is None for d in dirs)
