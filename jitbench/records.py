"""The records schema, the one results loader and the one verdict.

A *record* is one run as one flat row (``RUN_DIR/records.parquet`` and
``records.csv``, written by :func:`jitbench.harness.run.write_records`); a
*results table* is many of them (a sweep's ``results.parquet``/``.csv``, with
the sweep's own columns). :data:`SCHEMA` lists the columns, with units.

:func:`load_results` is the one loader of records and results for every
command that reads them (``report``, ``gate``, ``validate``, ``model
--from-results``); :func:`load_failures` reads the per-failure rows beside
them. :func:`verdict` turns a run's summary (or a results row) into the exit
status of the command and one line saying why.

This module imports no other jitbench layer than :mod:`jitbench.errors` (no
torch, no harness), so the reports may use it.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jitbench.errors import ExitStatus, InputError

__all__ = ["KEY_COLUMNS", "REFERENCE_NOT_STARTED", "RESULTS_VERSION", "SCHEMA",
           "SUMMARY_VERSION", "Field", "check_cells", "empty_cell", "fault_kinds", "find_table",
           "is_bool", "load_failures", "load_results", "reference_not_compared", "run_dirs",
           "spec_hash", "table_verdict", "verdict"]

SUMMARY_VERSION = 1
"""Schema version of ``summary.json`` and of a run's record row."""
RESULTS_VERSION = 1
"""Schema version of a results table (the gate refuses to compare across versions)."""


@dataclass(frozen=True)
class Field:
    """One column of a record / results table."""

    name: str
    unit: str
    """``s``, ``GPU-s``, ``steps``, ``bool``, ``ratio`` ...; ``""`` for labels."""
    doc: str


SCHEMA: tuple[Field, ...] = (
    Field("workload", "", "workload name (gpt, resnet; script:NAME for a launched script "
                          "in a sweep)"),
    Field("script", "", "a launched script's path (or module); empty for a built-in workload"),
    Field("size", "", "model size by name (empty: the workload's default)"),
    Field("strategy", "", "checkpointing strategy as written (jit, periodic:5, ...)"),
    Field("faults", "", "the fault plan, kind@rank:step joined by commas"),
    Field("world_size", "ranks", "ranks of the job"),
    Field("parallel", "", "how the model is spread over the ranks: ddp, or hsdp:RxS (R "
                          "replica groups x S shards); empty (older records, launched "
                          "scripts): ddp"),
    Field("steps", "steps", "optimizer steps of the training"),
    Field("seed", "", "seed of init, data order and random faults"),
    Field("detect_s", "s", "fault injected -> first survivor declares the failure "
                           "(mean over failures)"),
    Field("save_s", "s", "JIT save begin -> durable, slowest rank; periodic: the last "
                         "checkpoint before the fault (mean over failures)"),
    Field("stall_s", "s", "fault -> the first step completed by any rank after it (mean "
                          "over failures)"),
    Field("restart_s", "s", "last process of the failed attempt gone -> every new rank "
                            "initialised (mean over failures)"),
    Field("reform_s", "s", "in-process recovery: failure declared -> the new generation's "
                           "process group formed (mean over failures)"),
    Field("transfer_s", "s", "in-process recovery: the boundary state's broadcast from a "
                             "healthy replica, first begin -> last end (mean over failures)"),
    Field("restore_s", "s", "checkpoint load begin -> end, slowest rank (mean over failures)"),
    Field("replay_s", "s", "restore end -> the last replayed step's end (mean over failures)"),
    Field("recovery_s", "s", "fault -> first new step completed by every rank (mean over "
                             "failures)"),
    Field("replayed_steps", "steps", "steps completed before a fault and executed again "
                                     "(sum over failures)"),
    Field("replayed_gpu_steps", "rank-steps", "replayed_steps x world_size"),
    Field("max_replayed_steps_per_failure", "steps", "most steps replayed in one failure"),
    Field("expected_replayed_steps", "steps", "steps since the newest committed checkpoint "
                                              "(sum over failures)"),
    Field("replay_ok", "bool", "every failure replayed exactly the expected steps (jit: <= 1, "
          "unless under jit:backstop=N no JIT checkpoint survived; inmem:N from memory: <= N)"),
    Field("replay_promised", "bool", "the strategy promises a replay bound (false: a launched "
          "script's own recovery, whose replay_ok is empty and not judged; empty: true)"),
    Field("last_commit_step", "steps", "newest step committed in the checkpoint directory "
                                       "when the last failure's recovery began (its manifest "
                                       "renamed into place, whatever its writer logged)"),
    Field("num_failures", "", "failure episodes: attempts (or in-process generations) that "
                              "failed, by an injected fault or by the job itself"),
    Field("injected_failures", "", "failure episodes started by a fault the harness injected"),
    Field("own_failures", "", "failure episodes the job met by itself (a failed checkpoint "
                              "write, an exception in its step, a hang, a bad checkpoint or "
                              "input); the end reason names the last one's root cause"),
    Field("completed", "bool", "every rank reached the last step"),
    Field("attempts", "", "attempts of the worker group (restarts + 1)"),
    Field("step_s", "s", "median step time"),
    Field("train_wall_s", "s", "first step begin -> last step end"),
    Field("goodput", "ratio", "useful step time / wall time of training"),
    Field("checkpoint_saves", "", "committed periodic and async checkpoints"),
    Field("checkpoint_s", "s", "median synchronous periodic checkpoint save"),
    Field("checkpoint_stall_gpu_s", "GPU-s", "world size x the main thread's checkpoint stalls "
                                             "(rank-seconds: CPU ranks' too)"),
    Field("wasted_gpu_s", "GPU-s", "rank time not spent on new progress (rank-seconds, GPU-s "
                                   "on GPUs; empty: a failure did not recover)"),
    Field("unfired_faults", "", "planned faults that never fired"),
    Field("state_equal", "bool", "final state bitwise equal to the fault-free reference's"),
    Field("max_abs_diff", "", "largest absolute difference from the reference's final state"),
    Field("sample_stream_equal", "bool", "the reference's samples were consumed at every step "
                                         "(empty: not compared, sample_stream_reason says why)"),
    Field("sample_stream_reason", "", "why sample_stream_equal is empty though a reference "
                                      "was compared (a run resumed from an earlier job's "
                                      "checkpoints; a launched script, whose samples are "
                                      "not recorded)"),
    Field("end_reason", "", "why the run ended, one line"),
    Field("wall_s", "s", "wall time of the launch"),
    Field("code_version", "", "jitbench version (+ git commit)"),
    Field("machine_torch", "", "torch version (machine_* : the machine fingerprint)"),
    Field("fault", "", "fault kind(s) of the row (sweeps: the cell's; records: from faults)"),
    Field("repeat", "", "repeat index of the configuration (sweeps)"),
    Field("spec_hash", "", "SHA-256 prefix of the run spec (equal for repeats)"),
    Field("spec_json", "", "the run spec as JSON (the gate compares it field by field)"),
    Field("run_wall_s", "s", "wall time of the run and its comparison (sweeps)"),
    Field("results_version", "", "RESULTS_VERSION of the table (sweeps)"),
    Field("run_dir", "", "the run directory the row came from"),
)
"""The main columns of a record / results row (a row may hold more: every scalar
of the summary, ``machine_*``, ``auto_*``)."""

KEY_COLUMNS = ("workload", "strategy", "fault", "state_equal")
"""Columns every results table has (``report`` and ``gate`` refuse a table without them)."""

NUMBER_UNITS = ("s", "GPU-s", "steps", "ranks", "rank-steps", "ratio")
"""Units of :data:`SCHEMA` columns that hold a measured or counted number >= 0."""
COUNT_COLUMNS = ("num_failures", "injected_failures", "own_failures", "attempts",
                 "checkpoint_saves", "unfired_faults", "repeat", "max_abs_diff")
"""Unit-less :data:`SCHEMA` columns that hold a number >= 0 as well."""
LABEL_COLUMNS = ("workload", "strategy", "fault")
"""Columns that name a row's configuration: never empty in a row."""
INTEGER_UNITS = ("steps", "ranks", "rank-steps")
"""Units of :data:`SCHEMA` columns that count whole things (steps, ranks)."""
INTEGER_COLUMNS = ("num_failures", "injected_failures", "own_failures", "attempts",
                   "checkpoint_saves", "unfired_faults", "repeat", "seed", "final_step",
                   "checkpoint_interval")
"""Unit-less columns that hold whole numbers >= 0: of :data:`SCHEMA`, and two of the
summary's that records and results tables carry beside it (``final_step``, read by
:func:`verdict`; ``checkpoint_interval``, periodic strategies' N). ``seed``: in
[0, 2**32), numpy's seed range, as ``RunSpec.validate`` has it."""
SEED_END = 2**32
FAULT_ITEM = re.compile(r"[a-z0-9][a-z0-9-]*@\d+:\d+")
"""One fault of a ``faults`` cell: ``kind@rank:step`` (:func:`fault_kinds`)."""
UNBOUNDED_COLUMNS = ("max_abs_diff",)
"""Number columns that may hold +inf: a final state whose tensors differ in shape or
dtype from the reference's (:func:`jitbench.harness.metrics.compare_states`)."""


def empty_cell(v: Any) -> bool:
    """A table cell that holds nothing: None, NaN, pandas NA, or blank text."""
    if v is None:
        return True
    if isinstance(v, str):
        return not v.strip()
    try:
        return bool(v != v)  # NaN (float, numpy); pd.NA raises TypeError
    except TypeError:
        return True


_FLAGS = {"true": True, "false": False, "1": True, "0": False}
"""Text a ``bool`` cell may hold (case and surrounding blanks ignored)."""


def _number_cells(col) -> tuple[Any, Any]:
    """``(values, empty)`` of a number column (pandas Series): each cell parsed as
    pandas parses numbers (NaN where it cannot), and which cells hold nothing
    (:func:`empty_cell`). Booleans are not numbers here."""
    import numpy as np
    import pandas as pd

    empty = col.map(empty_cell).astype(bool)
    raw = col.map(lambda v: math.nan if empty_cell(v) or isinstance(v, bool | np.bool_)
                  else (v.strip() if isinstance(v, str) else v))
    return pd.to_numeric(raw, errors="coerce").astype(float), empty


def _flag_ok(v: Any) -> bool:
    """A non-empty ``bool`` cell: a boolean, true/false/1/0 as text, or 0/1."""
    x = v.item() if hasattr(v, "item") else v
    if isinstance(x, bool):
        return True
    if isinstance(x, str):
        return x.strip().lower() in _FLAGS
    return isinstance(x, int | float) and x in (0, 1)


def _faults_ok(v: Any) -> bool:
    """Whether a non-empty ``faults`` cell is ``kind@rank:step`` items joined by commas."""
    if isinstance(v, str) and v.strip() in ("[]", "none"):  # no fault, as older tables say
        return True
    return isinstance(v, str) and all(FAULT_ITEM.fullmatch(f.strip())
                                      for f in v.split(","))


def _spec_ok(v) -> bool:
    """Whether a ``spec_json`` cell is a JSON object (as :func:`json.loads` reads it)."""
    import json

    try:
        return isinstance(json.loads(v), dict) if isinstance(v, str) else False
    except ValueError:
        return False


def check_cells(t, name: str = "results") -> None:
    """Refuse a table with a cell that cannot be what its column records.

    For the :data:`SCHEMA` columns ``t`` has: a number column (unit in
    :data:`NUMBER_UNITS`, or :data:`COUNT_COLUMNS`) holds empty cells (None,
    NaN, blank: not measured, e.g. no failure to time) or numbers as pandas
    parses them, finite and >= 0 (``world_size`` >= 1; +inf too in
    :data:`UNBOUNDED_COLUMNS`); a ``bool`` column empty cells, true/false or
    1/0; a :data:`LABEL_COLUMNS` column no empty cell; ``spec_json`` empty cells
    (only where ``spec_hash`` is empty too: a hash needs the spec it was taken of)
    or JSON objects; ``faults`` empty cells or ``kind@rank:step`` items joined by
    commas. Counts (:data:`INTEGER_UNITS`, :data:`INTEGER_COLUMNS`) must be whole
    numbers, ``seed`` below 2**32. Nothing of ``t`` is
    changed (:func:`load_results` then converts number columns read as text).

    Args:
        t: a records or results table (pandas DataFrame, one row per run).
        name: how the message names the table (its file, or ``--baseline FILE``).

    Raises:
        InputError: the first bad cell, in one line naming ``name``, the 1-based row
            (the header not counted), its configuration and repeat where known, the
            column and the value (exit status 2).
    """
    units = {f.name: f.unit for f in SCHEMA}
    for col in t.columns:
        unit = units.get(col)
        cells = t[col]
        if col in LABEL_COLUMNS:
            bad = cells.map(empty_cell).astype(bool).tolist()
            why = f"{col} is empty; every row names its {col}"
        elif unit == "bool":
            bad = [not empty_cell(v) and not _flag_ok(v) for v in cells.tolist()]
            why = "a flag must be empty, true or false"
        elif col == "spec_json":  # the run spec, compared by gate: a JSON object
            hashes = (t["spec_hash"].tolist() if "spec_hash" in t.columns
                      else [None] * len(t))
            blank = [empty_cell(v) and not empty_cell(h)
                     for v, h in zip(cells.tolist(), hashes, strict=True)]
            bad = [b or (not empty_cell(v) and not _spec_ok(v))
                   for v, b in zip(cells.tolist(), blank, strict=True)]
            if any(bad) and blank[bad.index(True)]:
                i = bad.index(True)
                raise InputError(
                    f"{name}: row {i + 1}{_where_of(t, i)}: spec_json is empty beside "
                    f"spec_hash {str(hashes[i]).strip()!r}; it must be the run spec that "
                    "hash was taken of (a corrupt table: nothing was read from it)")
            why = "it must be empty or the run spec as a JSON object"
        elif col == "faults":
            bad = [not empty_cell(v) and not _faults_ok(v) for v in cells.tolist()]
            why = "it must be empty or faults as kind@rank:step joined by commas"
        elif unit in NUMBER_UNITS or col in COUNT_COLUMNS or col in INTEGER_COLUMNS:
            vals, empty = _number_cells(cells)
            low = 1 if col == "world_size" else 0
            top = (math.inf if col in UNBOUNDED_COLUMNS else SEED_END - 1 if col == "seed"
                   else math.nextafter(math.inf, 0))
            whole = unit in INTEGER_UNITS or col in INTEGER_COLUMNS
            ok = empty | ((vals >= low) & (vals <= top)  # NaN compares false: refused
                          & ((vals == vals.round()) if whole else True))
            bad = (~ok).tolist()
            what = {"s": "seconds", "GPU-s": "GPU-seconds"}.get(unit or "", unit or "")
            kind = ("whole number" if whole else "finite number" if col not in UNBOUNDED_COLUMNS
                    else "number")
            why = (f"it must be empty or a {kind} >= {low}"
                   + (" and < 2**32" if col == "seed" else "") + (f" ({what})" if what else ""))
        else:
            continue
        if not any(bad):
            continue
        i = bad.index(True)
        v = t.iloc[i][col]
        x = v.item() if hasattr(v, "item") else v
        what = why if col in LABEL_COLUMNS else f"{col} is {x!r}; {why}"
        raise InputError(f"{name}: row {i + 1}{_where_of(t, i)}: "
                         f"{what} (a corrupt table: nothing was read from it)")


def _where_of(t, i: int) -> str:
    """`` (workload/strategy/fault repeat N)`` of row ``i`` of ``t``, what it has of
    them (empty text when none)."""
    row = t.iloc[i]
    where = "/".join(str(row[k]) for k in LABEL_COLUMNS
                     if k in t.columns and not empty_cell(row[k]))
    if "repeat" in t.columns and not empty_cell(row["repeat"]):
        rep = row["repeat"]
        where += f" repeat {int(rep) if isinstance(rep, float) and rep.is_integer() else rep}"
    return f" ({where})" if where.strip() else ""


_TABLES = ("results.parquet", "results.csv", "records.parquet", "records.csv")


def spec_hash(spec: dict) -> str:
    """The ``spec_hash`` of a run spec given as a dict (``dataclasses.asdict`` of a
    ``RunSpec`` or ``ScriptSpec``, or a results row's ``spec_json`` as read): the
    first 12 hex digits of the SHA-256 of its canonical JSON (sorted keys, indent 2:
    the text of ``RunSpec.to_json``). The sweep hashes its specs with this, and the
    gate, ``validate`` and ``report`` recompute it from ``spec_json``."""
    return hashlib.sha256(json.dumps(spec, indent=2, sort_keys=True).encode()).hexdigest()[:12]


def _same_cell(a: Any, b: Any) -> bool:
    """Two cells of one column, read from a parquet and a CSV file, hold the same
    value: both empty, equal numbers (to 1e-9 relative), equal flags or equal text."""
    if empty_cell(a) or empty_cell(b):
        return empty_cell(a) and empty_cell(b)
    a, b = (v.item() if hasattr(v, "item") else v for v in (a, b))
    if isinstance(a, bool) or isinstance(b, bool):
        return is_bool(b, a) if isinstance(a, bool) else is_bool(a, b)
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=0.0)
    except (TypeError, ValueError):
        return str(a).strip() == str(b).strip()


def _check_twins(table: Path, t, shown: str) -> None:
    """A directory's ``.parquet`` table and the ``.csv`` beside it (the sweep and the
    run write both) must agree: the same columns, rows and cells.

    Raises:
        InputError: they differ (one line naming both files and the first difference).
    """
    twin = table.with_suffix(".csv")
    if table.suffix != ".parquet" or not twin.is_file():
        return
    other = _read(twin, str(twin))
    why = ""
    if set(t.columns) != set(other.columns):
        cols = sorted(set(t.columns) ^ set(other.columns))
        why = f"columns differ ({', '.join(map(str, cols[:4]))})"
    elif len(t) != len(other):
        why = f"{len(t)} rows in {table.name}, {len(other)} in {twin.name}"
    else:
        for col in t.columns:
            for i, (a, b) in enumerate(zip(t[col].tolist(), other[col].tolist(), strict=True)):
                if not _same_cell(a, b):
                    label = "/".join(str(t.iloc[i][k]) for k in LABEL_COLUMNS if k in t.columns)
                    why = (f"row {i + 1}{f' ({label})' if label else ''} {col}: {a!r} in "
                           f"{table.name}, {b!r} in {twin.name}")
                    break
            if why:
                break
    if why:
        raise InputError(f"{shown}: {table.name} and {twin.name} differ ({why}): one was "
                         "edited or is stale; nothing was read (keep the right one, remove "
                         "the other)")


def find_table(directory: str | Path) -> Path | None:
    """The results (a sweep) or records (a run) table in ``directory``, or None."""
    d = Path(directory)
    return next((d / n for n in _TABLES if (d / n).is_file()), None)


def _read(p: Path, shown: str):
    import pandas as pd

    suffix = p.suffix.lower()
    if suffix not in (".parquet", ".pq", ".csv", ".txt"):
        raise InputError(f"{shown}: expected a .csv or .parquet file")
    try:
        return pd.read_parquet(p) if suffix in (".parquet", ".pq") else pd.read_csv(p)
    except Exception as exc:  # noqa: BLE001 - pandas/pyarrow raise many types for bad files
        first = (str(exc).strip().splitlines() or [""])[0]
        raise InputError(f"{shown}: not a results table ({type(exc).__name__}: {first})"
                         ) from None


def fault_kinds(faults: Any) -> str:
    """The fault kinds of a ``faults`` cell (``kill@1:7,term@0:9``), sorted and joined
    by ``+``; ``none`` for a fault-free run."""
    text = "" if faults is None or (isinstance(faults, float) and math.isnan(faults)) \
        else str(faults)
    return "+".join(sorted({f.split("@")[0] for f in text.split(",") if f})) or "none"


def load_results(path: str | Path, require: tuple[str, ...] = KEY_COLUMNS,
                 what: str = "results", name: str | None = None):
    """A records or results table (pandas DataFrame, one row per run).

    ``path`` is a ``.parquet``/``.csv`` table, a sweep directory (its
    ``results.parquet`` or ``results.csv``), a run directory (its
    ``records.parquet`` or ``records.csv``) or any other directory (every
    ``records.csv`` below it, concatenated). Rows of a run's records get the
    columns a results table has: ``fault`` (:func:`fault_kinds` of ``faults``),
    ``repeat`` (0) and ``run_dir`` (the directory, when not recorded).

    Args:
        path: the table or directory.
        require: columns the caller reads; a table without one is refused.
        what: how the messages name the table (``results``; ``records or results``).
        name: how a bad cell's message names the table (default: ``path``).

    Raises:
        InputError: missing path, unreadable or non-table file, no table in the
            directory, no rows, a required column missing, or a cell that cannot be
            what its column records (:func:`check_cells`), in one line.
    """
    import pandas as pd

    def read(f: Path):  # a table file, its cells checked where the file is named
        t = _read(f, str(f) if f != p else str(path))
        check_cells(t, name or str(f if f != p else path))
        return t

    p = Path(path)
    if p.is_dir():
        table = find_table(p)
        if table is not None:
            t = read(table)
            _check_twins(table, t, str(path))
            if table.name.startswith("records"):
                t = _as_results(t, p)
        else:
            check_unfinished_sweep(p, str(path))
            found = sorted(p.rglob("records.csv"))
            if not found:
                raise InputError(f"{path}: no results.parquet, results.csv or records.csv "
                                 "(not a sweep or run directory)")
            t = pd.concat([_as_results(read(f), f.parent) for f in found],
                          ignore_index=True)
    elif p.exists():
        t = read(p)
        if "fault" not in t.columns and "faults" in t.columns:
            t = _as_results(t, None)
    else:
        raise InputError(f"{path} does not exist")
    missing = [c for c in require if c not in t.columns]
    if missing or t.empty:
        raise InputError(f"{path}: not a jitbench {what} table ("
                         + (f"no column {', '.join(missing)}" if missing else "no rows") + ")")
    return _numeric(t)


def check_unfinished_sweep(d: Path, shown: str) -> None:
    """Refuse a sweep directory whose ``sweep.json`` says ``complete`` false and that has
    no results table yet (interrupted before a cell finished): its run directories'
    records are not a sweep's results (``load_table``, and ``report``, which says so
    rather than that there is nothing to report).

    Raises:
        InputError: ``sweep interrupted after N of M cells; --resume runs the rest``.
    """
    import json

    try:
        rec = json.loads((d / "sweep.json").read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return
    if isinstance(rec, dict) and rec.get("complete") is False:
        runs, cells = rec.get("runs"), rec.get("cells")
        if not isinstance(runs, int):  # written before interrupted sweeps kept a table
            raise InputError(f"{shown}: sweep interrupted before its results table was "
                             "written; --resume runs the rest and writes it")
        of = f" of {cells}" if isinstance(cells, int) else ""
        raise InputError(f"{shown}: sweep interrupted after {runs}{of} cells; --resume runs "
                         "the rest (no results table yet)")


def sweep_incomplete(meta: dict, what: str = "this report") -> str | None:
    """The sentence a report (or ``what`` else reads it) of an interrupted sweep's table
    carries (``sweep.json`` ``meta`` says ``complete`` false): ``Sweep interrupted: N of
    M cells finished; WHAT covers those only ...``; None for a complete sweep or a
    directory without ``sweep.json``."""
    if not isinstance(meta, dict) or meta.get("complete") is not False:
        return None
    runs, cells = meta.get("runs"), meta.get("cells")
    done = (f"{runs} of {cells} cells" if isinstance(runs, int) and isinstance(cells, int)
            else f"{runs} cells" if isinstance(runs, int) else "some cells")
    return (f"Sweep interrupted: {done} finished; {what} covers those only "
            "(jitbench sweep --resume runs the rest).")


def _numeric(t):
    """``t`` with its number columns (:func:`check_cells`) that pandas read as text (a
    blank cell among numbers, a parquet column of mixed types; object or string
    dtype) converted to numbers, and its flags spelled as text or numbers to True,
    False or None."""
    import pandas as pd

    units = {f.name: f.unit for f in SCHEMA}
    cols = [c for c in t.columns if c in units and not pd.api.types.is_numeric_dtype(t[c])
            and (units[c] in NUMBER_UNITS or c in COUNT_COLUMNS)]
    flags = [c for c in t.columns if units.get(c) == "bool"
             and not pd.api.types.is_bool_dtype(t[c])]
    if not cols and not flags:
        return t
    t = t.copy()
    for c in cols:
        t[c] = _number_cells(t[c])[0]  # what check_cells accepted, as numbers
    for c in flags:  # True, False or None, however the file spelled them
        t[c] = pd.Series([None if empty_cell(v) else _flag(v) for v in t[c].tolist()],
                         index=t.index, dtype=object)
    return t


def _flag(v: Any) -> bool:
    """The boolean of a non-empty ``bool`` cell that :func:`_flag_ok` accepted."""
    x = v.item() if hasattr(v, "item") else v
    return _FLAGS[x.strip().lower()] if isinstance(x, str) else bool(x)


def _as_results(t, run_dir: Path | None):
    """Records rows with the results-table columns ``fault``, ``repeat``, ``run_dir``."""
    t = t.copy()
    if "fault" not in t.columns:
        t["fault"] = (t["faults"].map(fault_kinds) if "faults" in t.columns else "none")
    if "repeat" not in t.columns:
        t["repeat"] = 0
    if run_dir is not None and "run_dir" not in t.columns:
        t["run_dir"] = str(run_dir)
    return t


def _is_run_dir(d: Path) -> bool:
    """Whether ``d`` holds a run's record (``summary.json`` or ``records.*``)."""
    return any((d / f).is_file() for f in ("summary.json", "records.csv", "records.parquet"))


def run_dirs(t, path: str | Path) -> list[Path | None]:
    """The run directory of each row of ``t``, the table :func:`load_results` read
    from ``path``, found from where the table lies, never from the working directory:

    - ``path`` is a run directory (or its ``records.*`` file), whose table holds its
      one row: that directory, whatever the row's ``run_dir`` says (a copied run);
    - a tree of runs (a directory without a table of its own): the directory of the
      ``records.csv`` each row was read from;
    - a sweep (its directory or ``results.*`` file) or another table file:
      ``runs/NAME`` or ``NAME`` beside the table (``NAME``: the last part of the row's
      ``run_dir``), else the recorded ``run_dir`` itself, only where it is absolute
      or resolves beside the table, and only if it holds a run's record.

    None for a row whose directory is not found."""
    import pandas as pd

    p = Path(path)
    base = p.parent if p.is_file() else p
    table = find_table(p) if p.is_dir() else (p if p.is_file() else None)
    n = len(t)
    if table is not None and table.name.startswith("records") and _is_run_dir(base) \
            and n == 1:  # one run's record (more rows: a table of runs put there)
        return [base]
    if p.is_dir() and table is None:  # a tree of runs, concatenated in this order
        dirs: list[Path | None] = []
        for f in sorted(p.rglob("records.csv")):
            try:
                dirs += [f.parent] * len(pd.read_csv(f))
            except (OSError, ValueError, pd.errors.EmptyDataError):
                return [None] * n
        return dirs if len(dirs) == n else [None] * n
    recorded = t["run_dir"].tolist() if "run_dir" in t.columns else [None] * n
    out: list[Path | None] = []
    for rd in recorded:
        found = None
        if not empty_cell(rd):
            r = Path(str(rd))
            cands = [base / "runs" / r.name, base / r.name, r if r.is_absolute() else base / r]
            found = next((c for c in cands if _is_run_dir(c)), None)
        out.append(found)
    return out


def load_failures(path: str | Path, runs=None):
    """Per-failure rows (``failures.csv`` of each run: one row per failure episode,
    with ``run_dir``) for the runs of :func:`load_results` ``(path)``: beside a
    table file, in a run directory, below any directory, or in each of ``runs``'
    run directories (a sweep: :func:`run_dirs`, found from where the table lies).
    Empty DataFrame when none is found. Whole-number columns are read as numbers
    whether a file wrote them as ``3`` or, as older files did, ``3.0``."""
    import pandas as pd

    p = Path(path)
    files: list[Path] = []
    if p.is_file():
        files = [f for f in (p.with_name("failures.csv"),) if f.is_file()]
    elif p.is_dir() and any((p / n).is_file() for n in ("results.parquet", "results.csv")):
        dirs = run_dirs(runs, p) if runs is not None else []
        files = [d / "failures.csv" for d in dict.fromkeys(d for d in dirs if d is not None)
                 if (d / "failures.csv").is_file()]
    elif p.is_dir():
        files = sorted(p.rglob("failures.csv"))
    frames = [pd.read_csv(f) for f in files]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


# ---------------------------------------------------------------- verdict
REFERENCE_NOT_STARTED = "not started (Ctrl-C or SIGTERM came first)"
"""``reference_cut_short`` of a fault-free reference that was never launched: Ctrl-C or
SIGTERM arrived once the run had ended by itself, before the reference began."""


def reference_not_compared(cut: str) -> str:
    """Why the final states of a run were not compared, in words, from its
    ``reference_cut_short`` (``cut``): ``the fault-free reference was CUT before its end,
    so the final states were not compared`` (one never started: not "before its end")."""
    end = "" if cut == REFERENCE_NOT_STARTED else " before its end"
    return f"the fault-free reference was {cut}{end}, so the final states were not compared"


def is_bool(value: Any, want: bool) -> bool:
    """``value`` is the boolean ``want`` (numpy/pandas scalars and "True" strings too)."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, str):
        return value.strip().lower() == str(want).lower()
    return value is want or (isinstance(value, int) and value == want)


def _num(value: Any) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return 0.0
    return 0.0 if math.isnan(x) else x


def verdict(summary: dict, strict: bool = False) -> tuple[ExitStatus, str]:
    """The exit status of a finished run and one line saying why.

    In order: interrupted (130; also a ``late_interrupt``, one that stopped nothing:
    the records are complete, the reason says so); a worker refused its input, e.g. another job's
    checkpoint directory (2); the launch timed out or the job did not complete
    (3); the fault-free reference did not run to its end (``reference_cut_short``:
    it failed or was stopped), so the final states were not compared (3; not for a
    strategy whose summary says ``bitwise_promised`` false); the final state
    differs from the reference (4; not for a strategy whose
    summary says ``bitwise_promised`` false, such as ``torchft``); ``jit`` replayed more
    than one step in a failure, or a failure replayed other than the steps since
    the newest committed checkpoint (4; not for a summary with ``replay_promised``
    false: a launched script's own recovery); a planned fault never fired and nothing
    was injected (3; when others fired, 0 with a warning in the reason);
    otherwise 0.

    Args:
        summary: ``summary.json`` of a run, or one row of a results table (its
            lists are absent: ``unfired_faults`` counts the unfired faults).
        strict: a sweep's or gate's row: every planned fault must have fired
            (else 3), and ``state_equal`` and ``replay_ok`` must be true, not
            merely not false (else 4).
    """
    s = summary
    if is_bool(s.get("interrupted"), True):
        if is_bool(s.get("late_interrupt"), True):  # nothing was stopped
            return ExitStatus.INTERRUPTED, ("interrupted once its launches had ended; the "
                                            "records are complete")
        return ExitStatus.INTERRUPTED, "interrupted; what was recorded is kept"
    completed = is_bool(s.get("completed"), True)
    if s.get("error_kind") in ("checkpoint", "input") and not completed:
        return ExitStatus.INPUT, str(s.get("error"))
    if is_bool(s.get("timed_out"), True):
        return ExitStatus.RUN_FAILED, str(s.get("end_reason") or "the run was stopped "
                                          "after its timeout")
    if not completed:
        why = s.get("end_reason") or (f"agent exit {s.get('agent_exit')}, "
                                      f"{s.get('attempts')} attempts")
        return ExitStatus.RUN_FAILED, f"the job did not complete: {why}"
    cut = s.get("reference_cut_short")
    if isinstance(cut, str) and cut and not is_bool(s.get("bitwise_promised"), False):
        # the fault-free reference itself failed or was stopped: the oracle never ran
        return ExitStatus.RUN_FAILED, reference_not_compared(cut)
    unfired = list(s.get("unfired") or [])
    n_unfired = len(unfired) or int(_num(s.get("unfired_faults")))
    if strict and n_unfired:
        return ExitStatus.RUN_FAILED, (f"{n_unfired} planned fault(s) never fired: nothing "
                                       "was measured for them")
    # a peer that trains on with fewer replicas does not promise the fault-free state
    # (summary ``bitwise_promised`` false): its state_equal and max_abs_diff are reported,
    # not judged
    bitwise = not is_bool(s.get("bitwise_promised"), False)
    if bitwise and (is_bool(s.get("state_equal"), False)
                    or (strict and not is_bool(s.get("state_equal"), True))):
        diff = s.get("max_abs_diff")
        return ExitStatus.INCORRECT, ("final state differs from the fault-free run "
                                      + (f"(max_abs_diff {_num(diff):.3g})" if diff is not None
                                         else "(not compared)"))
    most = int(_num(s.get("max_replayed_steps_per_failure")))
    if str(s.get("strategy")) == "jit" and most > 1:
        return ExitStatus.INCORRECT, f"JIT replayed {most} steps in one failure"
    if (strict and not is_bool(s.get("replay_ok"), True) and not is_bool(s.get("replay_ok"), False)
            and int(_num(s.get("late_replacements")))):
        return ExitStatus.RUN_FAILED, ("the job finished before the replacement joined: "
                                       "recovery was never reached (run more steps after "
                                       "the fault)")
    # a launched script's own recovery promises no replay bound (``replay_promised``
    # false): its replayed steps are reported, not judged
    promised = not is_bool(s.get("replay_promised"), False)
    if promised and (is_bool(s.get("replay_ok"), False)
                     or (strict and not is_bool(s.get("replay_ok"), True))):
        if not bitwise:
            return ExitStatus.INCORRECT, (f"{s.get('strategy')} broke its promise: "
                                          f"{s.get('replay_promise')}")
        return ExitStatus.INCORRECT, (
            f"replayed {s.get('replayed_steps')} steps, expected "
            f"{s.get('expected_replayed_steps')} (the steps since the newest committed "
            "checkpoint; at most 1 per failure under jit)")
    if n_unfired:
        try:
            last = float(s.get("final_step"))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            last = math.nan
        ended = (f"the run ended after step {int(last)} first" if math.isfinite(last)
                 else "the run ended first")
        what = (f"planned fault {', '.join(unfired)}" if unfired
                else f"{n_unfired} planned fault(s)") + f" never fired ({ended})"
        if "fired" in s and not s.get("fired"):
            return ExitStatus.RUN_FAILED, f"{what}: nothing was injected, so no recovery " \
                                          "was measured"
        return ExitStatus.OK, f"warning: {what}"
    return ExitStatus.OK, "completed"


_PRIORITY = (ExitStatus.INTERRUPTED, ExitStatus.INPUT, ExitStatus.RUN_FAILED,
             ExitStatus.INCORRECT)


def table_verdict(rows, strict: bool = True) -> tuple[ExitStatus, list[str]]:
    """The exit status of many runs (a sweep) and one line per run that is not OK.

    Every row is judged by :func:`verdict`; the status is the first of
    interrupted, input, did not complete, incorrect that any row has (a sweep
    with an incomplete run exits 3 even when another is incorrect).

    Args:
        rows: dicts, or a DataFrame (one row per run).
        strict: see :func:`verdict` (default: sweeps require every check).
    """
    if hasattr(rows, "to_dict"):
        rows = rows.to_dict("records")
    found: dict[ExitStatus, list[str]] = {}
    for r in rows:
        status, why = verdict(r, strict)
        if status != ExitStatus.OK:
            label = " ".join(str(r.get(k)) for k in ("workload", "strategy", "fault")
                             if r.get(k) is not None)
            rep = r.get("repeat")
            found.setdefault(status, []).append(
                f"{label}{f' r{rep}' if rep is not None else ''}: {why}")
    for status in _PRIORITY:
        if status in found:
            return status, found[status]
    return ExitStatus.OK, []
