"""Terminal tables of run summaries (reads records only)."""

from __future__ import annotations

from rich.table import Table

SUMMARY_COLUMNS = (
    ("detect_s", "detect_s"), ("save_s", "save_s"), ("restart_s", "restart_s"),
    ("restore_s", "restore_s"), ("replayed_steps", "replayed_steps"),
    ("recovery_s", "recovery_s"), ("state_equal", "state_equal"),
)


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


def summary_table(summary: dict) -> Table:
    """The run's headline metrics, one row per metric (metric, value, unit)."""
    title = (f"{summary['workload']} x{summary['world_size']} ranks, strategy "
             f"{summary['strategy']}, fault "
             + (", ".join(f"{f['kind']}@rank{f['rank']}:"
                          + (f"t{f['time_s']:g}s" if f.get("time_s") is not None
                             else f"step{f['step']}") for f in summary['faults'])
                or "none"))
    t = Table(title=title)
    t.add_column("metric")
    t.add_column("value", justify="right")
    for key, _ in SUMMARY_COLUMNS + (("max_abs_diff", ""), ("sample_stream_equal", ""),
                                     ("wasted_gpu_s", ""), ("attempts", ""), ("completed", "")):
        t.add_row(key, fmt(summary.get(key)))
    if summary.get("slow_windows"):  # a straggler: its steps against the others
        t.add_row("slow_window_step_s", fmt(summary.get("slow_window_step_s")))
        t.add_row("normal_step_s", fmt(summary.get("normal_step_s")))
    if summary.get("restore_skipped"):  # restore fell back past invalid parts
        t.add_row("restore_skipped", ", ".join(p for p, _ in summary["restore_skipped"]))
    if summary.get("end_reason") not in (None, "completed"):
        t.add_row("end_reason", str(summary["end_reason"]))
    return t
