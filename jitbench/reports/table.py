"""Tables of records: one column specification, three renderers.

Every table of jitbench (run summary, sweep results, overhead, model
validation, model at scale) is a list of :class:`Column` (the record column,
its header, unit and format); :func:`cell` formats one value of it, and the
terminal (:func:`rich_table`), markdown (:func:`markdown_table`) and HTML
(the ``table`` macro of ``templates/report.html.j2``) renderers all read the
same list. :func:`fmt` is the one cell formatter. Reads records only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.table import Table
from rich.text import Text

from jitbench.records import SCHEMA, empty_cell


def fmt(value: object, digits: int = 3, none: str = "-", yes: str = "true",
        no: str = "false") -> str:
    """One table cell: floats to ``digits`` decimals, booleans as ``yes``/``no``,
    None and NaN as ``none``; numpy scalars (from a DataFrame) as Python values."""
    if hasattr(value, "item"):
        value = value.item()
    if value is None or (isinstance(value, float) and value != value):
        return none
    if isinstance(value, bool):
        return yes if value else no
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


@dataclass(frozen=True)
class Column:
    """One column of a table: where its values come from and how they are shown."""

    name: str
    """The record / row key."""
    header: str
    """The column's label."""
    unit: str = ""
    """Unit of the values (``s``, ``GPU-s``, ``%``, ...; ``""``: none or a label)."""
    format: str = "2"
    """``N`` (decimals of a number), ``text``, ``strategy`` (a strategy name, drawn as
    a coloured pill in HTML), ``bool`` (a check: marked good or bad), ``yesno`` (a
    boolean that is neither good nor bad), ``signed``
    (``+x.xx``), ``thousands`` (an integer with separators)."""
    ok: str | None = None
    """Row key whose truth marks the cell good or bad (``replayed_steps`` is good when
    ``replay_ok``); a ``bool`` column marks itself."""
    promised: str | None = None
    """Row key that, when false, leaves the cell unmarked: the run's strategy promises
    nothing about it (``replay_promised`` false: a launched script's own recovery;
    ``bitwise_promised`` false: a peer that trains on with fewer replicas)."""

    @property
    def left(self) -> bool:
        """Left-aligned (labels) rather than right-aligned (numbers)."""
        return self.format in ("text", "strategy")


TERMINAL = {"none": "-", "yes": "true", "no": "false"}
"""Symbols of empty and boolean cells in the terminal."""
REPORT = {"none": "–", "yes": "✓", "no": "✗"}
"""Symbols of empty and boolean cells in the HTML report."""
MARKDOWN = {**REPORT, "plain": True}
"""The report's symbols, numbers written plainly (no ``+`` sign, no thousands
separators: markdown tables are read by scripts too)."""


def _missing(v: Any) -> bool:
    """A cell that holds nothing: None, NaN, pandas NA or blank text (never compared,
    not measured)."""
    if hasattr(v, "item"):
        v = v.item()
    return empty_cell(v)


def truth(v: Any) -> bool | None:
    """A cell's truth: True or False for a flag (a boolean, 0/1, or true/false as
    text), None for an empty cell (never compared: it is neither)."""
    if _missing(v):
        return None
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, str):
        return v.strip().lower() in ("true", "1")
    return bool(v)


def cell(col: Column, row: Any, symbols: dict = TERMINAL) -> str:
    """The text of ``row[col.name]`` (a dict or a pandas row) in ``col``'s format."""
    v = row.get(col.name)
    none, yes, no = symbols["none"], symbols["yes"], symbols["no"]
    if col.format == "strategy" and v == "none-aa":
        return "none (A/A control)"
    if col.format in ("text", "strategy"):
        return none if _missing(v) else str(v)
    if col.format in ("bool", "yesno") and _missing(v):  # never compared / no verdict
        return none
    if col.format in ("bool", "yesno"):
        return yes if truth(v) else no
    plain = symbols.get("plain", False)
    if col.format == "signed":
        return none if _missing(v) else f"{float(v):{'' if plain else '+'}.2f}"
    if col.format == "thousands":
        return none if _missing(v) else f"{int(v):{'' if plain else ','}}"
    return fmt(v, int(col.format), none=none, yes=yes, no=no)


def good(col: Column, row: Any) -> bool | None:
    """Whether the cell is marked good (True), bad (False) or not at all (None: nothing
    to judge, or the strategy promises nothing about it, :attr:`Column.promised`). An
    empty flag (``state_equal`` of a run never compared, ``replay_ok`` of a run that was
    not judged) is nothing to judge: unmarked, never bad."""
    if col.promised is not None:
        v = row.get(col.promised)
        if truth(v) is False:
            return None
    if col.ok is not None:
        return truth(row.get(col.ok))
    if col.format == "bool":
        return truth(row.get(col.name))
    return None


def rows_of(table: Any) -> list:
    """The rows of a DataFrame (as dicts) or a list of dicts."""
    return table.to_dict("records") if hasattr(table, "to_dict") else list(table)


def rich_table(table: Any, columns: list[Column], **kw: Any) -> Table:
    """A terminal table (rich) of ``table``'s rows; ``kw`` go to :class:`rich.table.Table`."""
    t = Table(**kw)
    for c in columns:
        t.add_column(c.header, justify="left" if c.left else "right")
    for r in rows_of(table):
        t.add_row(*(cell(c, r) for c in columns))
    return t


def markdown_table(table: Any, columns: list[Column]) -> str:
    """A markdown table of ``table``'s rows (labels left-aligned, numbers right;
    :data:`MARKDOWN` symbols)."""
    lines = ["| " + " | ".join(c.header for c in columns) + " |",
             "|" + "|".join("---" if c.left else "---:" for c in columns) + "|"]
    for r in rows_of(table):
        lines.append("| " + " | ".join(cell(c, r, MARKDOWN) for c in columns) + " |")
    return "\n".join(lines)


RESULT_COLUMNS = [
    Column("workload", "workload", format="text"), Column("strategy", "strategy",
                                                          format="strategy"),
    Column("fault", "fault", format="text"), Column("repeat", "rep"),
    Column("detect_s", "detect s", "s"), Column("stall_s", "stall s", "s"),
    Column("save_s", "save s", "s"),
    Column("restart_s", "restart s", "s"), Column("reform_s", "re-form s", "s"),
    Column("transfer_s", "transfer s", "s"), Column("restore_s", "restore s", "s"),
    Column("replay_s", "replay s", "s"), Column("recovery_s", "recovery s", "s"),
    Column("replayed_steps", "replayed", "steps", ok="replay_ok", promised="replay_promised"),
    Column("expected_replayed_steps", "expected", "steps"),
    Column("wasted_gpu_s", "wasted GPU-s", "GPU-s"), Column("goodput", "goodput"),
    Column("state_equal", "state equal", format="bool", promised="bitwise_promised"),
    Column("max_abs_diff", "max |diff|", format="3")]
"""One row per run of a sweep (or a run's records)."""
OVERHEAD_COLUMNS = [
    Column("strategy", "strategy", format="strategy"), Column("repeats", "repeats"),
    Column("step_s", "step s (median)", "s", "4"),
    Column("overhead_pct", "overhead %", "%", "signed"),
    Column("overhead_pct_lo", "95% CI low %", "%", "signed"),
    Column("overhead_pct_hi", "95% CI high %", "%", "signed"),
    Column("overhead_pct_median", "median of repeats %", "%", "signed"),
    Column("overhead_pct_q25", "q25 %", "%", "signed"),
    Column("overhead_pct_q75", "q75 %", "%", "signed"),
    Column("overhead_pct_min", "min %", "%", "signed"),
    Column("overhead_pct_max", "max %", "%", "signed"),
    Column("cpu_overhead_pct", "CPU-time overhead %", "%", "signed"),
    Column("cpu_overhead_pct_lo", "CPU 95% CI low %", "%", "signed"),
    Column("cpu_overhead_pct_hi", "CPU 95% CI high %", "%", "signed"),
    Column("rt_us", "runtime hot path µs/step", "µs", "0"),
    Column("within_noise", "within noise", format="yesno"),
    Column("control_ok", "A/A control unbiased", format="yesno"),
    Column("no_verdict", "no verdict because", format="text")]
"""One row per strategy of an overhead measurement."""
VALIDATION_COLUMNS = [
    Column("workload", "workload", format="text"),
    Column("strategy", "strategy", format="strategy"), Column("fault", "fault", format="text"),
    Column("runs", "runs"), Column("failures", "failures"),
    Column("measured_wasted_gpu_s", "measured wasted GPU-s", "GPU-s"),
    Column("predicted_wasted_gpu_s", "predicted wasted GPU-s", "GPU-s"),
    Column("error_pct", "error %", "%"), Column("within_tolerance", "within tolerance",
                                                format="bool"),
    Column("phases_from", "phase costs from", format="text")]
"""One row per group of runs: the model's prediction against the measurement."""
SCALE_COLUMNS = [
    Column("n_gpus", "GPUs", format="thousands"),
    Column("strategy", "strategy", format="strategy"),
    Column("interval_s", "interval s", "s"), Column("failures_per_day", "failures/day"),
    Column("analytic_wasted_gpu_hours_per_day", "wasted GPU-h/day (analytic)", "GPU-h"),
    Column("sim_wasted_gpu_hours_per_day_mean", "wasted GPU-h/day (simulated)", "GPU-h"),
    Column("analytic_goodput", "goodput (analytic)", format="3"),
    Column("sim_goodput_mean", "goodput (simulated)", format="3")]
"""One row per world size and strategy of the model at scale."""


SUMMARY_ROWS = [
    Column("detect_s", "detect_s", "s", "3"), Column("stall_s", "stall_s", "s", "3"),
    Column("save_s", "save_s", "s", "3"),
    Column("restart_s", "restart_s", "s", "3"), Column("restore_s", "restore_s", "s", "3"),
    Column("replayed_steps", "replayed_steps", "steps", "3"),
    Column("recovery_s", "recovery_s", "s", "3"), Column("state_equal", "state_equal", "", "3"),
    Column("max_abs_diff", "max_abs_diff", "", "3"), Column("loss_diff", "loss_diff", "", "3"),
    Column("sample_stream_equal", "sample_stream_equal", "", "3"),
    Column("wasted_gpu_s", "wasted_gpu_s", "GPU-s", "3"), Column("attempts", "attempts", "", "3"),
    Column("completed", "completed", "", "3")]
"""The headline metrics of one run (rows of :func:`summary_table`; ``fmt`` with 3
decimals, booleans as true/false)."""
LOSS_EQUAL = Column("loss_equal", "loss_equal", "", "3")
LOSS_EQUAL_DOC = ("every step's loss on rank 0 bitwise equal to the fault-free reference's "
                  "(a launched script)")
"""Shown after ``sample_stream_equal`` where a launch compared its per-step losses."""
IN_PROCESS_ROWS = [Column("reform_s", "reform_s", "s", "3"),
                   Column("transfer_s", "transfer_s", "s", "3")]
"""Shown after ``restart_s`` where a failure was recovered in process."""
LAUNCH_DOCS = {
    "own": {"restore_s": "the script's own restore: process group ready -> its first "
                         "step, slowest rank (mean over failures)"},
    "jit": {"restore_s": "process group ready -> the fast-forward's load of the JIT "
                         "checkpoint (else the script's first step), slowest rank (mean "
                         "over failures)"},
}
"""What a metric measures in a launched script's summary (``jitbench launch``, a
``script`` key), by strategy, where it differs from :data:`~jitbench.records.SCHEMA`'s."""


def metric_docs(summary: dict) -> dict[str, str]:
    """What each metric of ``summary`` measures: :data:`~jitbench.records.SCHEMA`'s
    words, with :data:`LAUNCH_DOCS` in their place for a launched script's summary."""
    docs = {f.name: f.doc for f in SCHEMA}
    docs["loss_diff"] = "last step's loss minus the fault-free reference's (0: same loss)"
    if summary.get("script") is not None:
        docs.update(LAUNCH_DOCS.get(str(summary.get("strategy")), {}))
    return docs


VALUE_WIDTH = 48
"""Characters of the summary table's value column; a longer value folds onto more lines."""


def summary_table(summary: dict) -> Table:
    """The run's headline metrics, one row per metric (metric, value): :data:`SUMMARY_ROWS`,
    then a straggler's step times and why the run ended. The run's recovery decisions
    (``decisions``: resumes, skipped parts, fallbacks) are lines printed under it."""
    title = (f"{summary['workload']} x{summary['world_size']} ranks, strategy "
             f"{summary['strategy']}, fault "
             + (", ".join(f"{f['kind']}@rank{f['rank']}:"
                          + (f"t{f['time_s']:g}s" if f.get("time_s") is not None
                             else f"step{f['step']}") for f in summary['faults'])
                or "none"))
    t = Table(title=title)
    t.add_column("metric")
    # a long value (a reason, an error) folds at VALUE_WIDTH instead of widening the table
    t.add_column("value", justify="right", overflow="fold", max_width=VALUE_WIDTH)
    t.add_column("unit")
    t.add_column("what it measures", overflow="fold")
    docs = metric_docs(summary)

    def row(c: Column) -> None:
        t.add_row(c.header, cell(c, summary), c.unit, docs.get(c.name, ""))

    for c in SUMMARY_ROWS:
        row(c)
        if c.name == "sample_stream_equal" and summary.get("sample_stream_reason") \
                and _missing(summary.get(c.name)):  # the why its empty cell points to
            t.add_row("sample_stream_reason", Text(str(summary["sample_stream_reason"]), justify="left"), "",
                      docs.get("sample_stream_reason", ""))
        if c.name == "sample_stream_equal" and summary.get("loss_equal") is not None:
            # a launched script's oracle of the stream, which its reason names
            t.add_row("loss_equal", cell(LOSS_EQUAL, summary), "", LOSS_EQUAL_DOC)
        if c.name == "restart_s":  # recovered in process: its two phases in the restart's place
            for extra in IN_PROCESS_ROWS:
                if summary.get(extra.name) is not None:
                    row(extra)
    if summary.get("slow_windows"):  # a straggler: its steps against the others
        t.add_row("slow_window_step_s", fmt(summary.get("slow_window_step_s")), "s",
                  docs.get("slow_window_step_s", ""))
        t.add_row("normal_step_s", fmt(summary.get("normal_step_s")), "s",
                  docs.get("normal_step_s", ""))
    if summary.get("end_reason") not in (None, "completed"):
        t.add_row("end_reason", Text(str(summary["end_reason"]), justify="left"), "", docs.get("end_reason", ""))
    return t
