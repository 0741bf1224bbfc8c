"""The model's projection to many world sizes: rows, crossovers and the plot.

What ``jitbench model`` prints and the report's "at scale" section draws
(:mod:`jitbench.reports.modelcmd`, :mod:`jitbench.reports.scale`): model
parameters from measured results (:func:`params_from_table`), one row per
world size and strategy from the analytic model and the simulator
(:func:`build_rows`), the world sizes where two strategies cross
(:func:`crossovers`) and the figure (:func:`write_plot`).

Measured costs enter from two kinds of table: a records/results table of runs
(:func:`costs_from_records`: its ``ddp`` and ``hsdp:RxS`` rows apart, so the
sharded runs' costs and their replicas per shard ``R`` are known) and a
``jitbench io`` table (:func:`io_costs_from_table`: seconds per GB of state of
the JIT save, the restore and the periodic checkpoint, and of the split save of
R writers, scaled to a state size). :func:`crossovers_by_replicas` gives the
JIT vs periodic crossover for plain data parallel and for each HSDP replica
count, with the costs measured for that layout.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pandas as pd

from jitbench.errors import InputError
from jitbench.reports.model import (
    MODEL_STRATEGIES,
    Crossover,
    ModelParams,
    estimate,
    find_crossovers,
    unclipped_waste_fraction,
)
from jitbench.reports.simulate import SimConfig, simulate

PLOT_MIN_GPUS = 8
PLOT_MAX_GPUS = 100_000
CROSSOVER_PAIRS: tuple[tuple[str, str], ...] = (
    ("jit", "periodic"),
    ("jit", "periodic-async"),
    ("jit-transparent", "periodic"),
    ("jit-transparent", "periodic-async"),
)

RESULT_COLUMNS: dict[str, str] = {
    "step_time_s": "step_s",
    "step_s": "step_s",  # jitbench's own records name the median step time so
    "save_s": "save_s",
    "restore_s": "restore_s",
    "restart_s": "restart_s",
    "detect_s": "detect_s",
    "checkpoint_s": "checkpoint_s",
}
"""Records column -> :class:`ModelParams` field taken from ``--from-results``."""

_PREFERRED_ROWS: dict[str, tuple[str, ...]] = {
    # column: strategy prefixes whose rows are used when they hold a value
    "step_time_s": ("none",),  # fault-free step time without checkpointing
    "step_s": ("none",),
    "save_s": ("jit",),  # the JIT save, not a final periodic one
    "checkpoint_s": ("periodic:",),  # synchronous periodic runs
}




def _medians(df: pd.DataFrame, source: str) -> dict[str, float]:
    """The medians of :func:`params_from_table` (s); empty when no column holds a
    number. Raises :class:`InputError` on a negative (or zero step) median."""
    strategy = df["strategy"].astype(str) if "strategy" in df.columns else None
    if strategy is not None:  # the model's strategies only: the peers recover otherwise
        from jitbench.runtime.strategies import REGISTRY

        peers = tuple(n for n, e in REGISTRY.items() if e.launcher != "agent")
        own = ~strategy.str.split(":").str[0].isin(peers)
        if own.any():
            df, strategy = df[own], strategy[own]
    overrides: dict[str, float] = {}
    for column, param in RESULT_COLUMNS.items():
        if column not in df.columns:
            continue
        values = pd.to_numeric(df[column], errors="coerce")
        values = values[np.isfinite(values)]
        prefixes = _PREFERRED_ROWS.get(column)
        if strategy is not None and prefixes:
            preferred = values[strategy.loc[values.index].str.startswith(prefixes)]
            if len(preferred):
                values = preferred
        if not len(values):
            continue
        value = float(values.median())
        if value < 0 or (param == "step_s" and value <= 0):
            raise InputError(f"--from-results: {source}: median {column} is {value}, must be "
                             f"{'> 0' if param == 'step_s' else '>= 0'}")
        overrides[param] = value
    return overrides


def params_from_table(df: pd.DataFrame, source: str = "results") -> dict[str, float]:
    """:class:`ModelParams` overrides (s) from a records/results table: the
    median of each :data:`RESULT_COLUMNS` column, preferring the rows of
    :data:`_PREFERRED_ROWS`, over the rows of the strategies the model knows (the
    peers' rows, ``torchft`` and ``nvrx``, are left out when others exist; see
    :func:`jitbench.reports.modelcmd.load_from_results`). Every row counts,
    whatever its ``parallel`` layout (:func:`costs_from_records` keeps them apart).

    Raises:
        InputError: no usable column, or a negative (or zero step) median.
    """
    overrides = _medians(df, source)
    if not overrides:
        raise InputError(f"--from-results: {source} has no usable column (need a number in one "
                         f"of: {', '.join(RESULT_COLUMNS)})")
    return overrides


# --------------------------------------------------------------------------- layouts

PARALLEL_COLUMN = "parallel"
"""Records column of a run's layout: ``ddp`` or ``hsdp:RxS`` (:mod:`jitbench.records`)."""
_HSDP = re.compile(r"hsdp:(\d+)x(\d+)")


def replicas_of(layout: object) -> int | None:
    """``R`` of a ``parallel`` cell: ``hsdp:RxS`` -> R (replica groups, i.e. replicas
    of each shard); ``ddp``, empty or missing (older records, launched scripts) ->
    None, plain data parallel. The grammar is :func:`jitbench.harness.parallel.parse`'s
    (the reports may not import the harness).

    Raises:
        InputError: any other value (one line).
    """
    if layout is None or (isinstance(layout, float) and math.isnan(layout)):
        return None
    text = str(layout).strip().lower()
    if text in ("", "ddp"):
        return None
    m = _HSDP.fullmatch(text)
    if not m or int(m[1]) < 1 or int(m[2]) < 1:
        raise InputError(f"parallel {layout!r} is neither ddp nor hsdp:RxS (R, S >= 1)")
    return int(m[1])


@dataclass(frozen=True)
class MeasuredCosts:
    """:class:`ModelParams` overrides (s) measured in one records table, by layout.

    Each dict is :func:`params_from_table`'s medians over the rows of one layout;
    a dict is empty when that layout has no row or no number.
    """

    ddp: dict[str, float]
    """Medians over the ``ddp`` rows (plain data parallel)."""
    hsdp: dict[int, dict[str, float]]
    """``R`` -> medians over the ``hsdp:RxS`` rows of that R (any S)."""
    pooled_hsdp: dict[str, float]
    """Medians over every ``hsdp`` row, whatever its R."""
    rows: dict[str, int]
    """Rows per layout as written (``{"ddp": 3, "hsdp:2x2": 4}``)."""

    @property
    def replicas(self) -> tuple[int, ...]:
        """The replicas per shard measured (the R of the ``hsdp`` rows), ascending."""
        return tuple(sorted(self.hsdp))

    def main_replicas(self) -> int | None:
        """The layout a table's model stands for: plain data parallel (None) when the
        table has ``ddp`` rows with a cost, else the smallest measured R (fewest
        replicas: the layout JIT covers least), None for a table of neither."""
        if self.ddp or not self.hsdp:
            return None
        return self.replicas[0]

    def for_layout(self, replicas: int | None) -> tuple[dict[str, float], str]:
        """Overrides for a job of ``replicas`` per shard (None: plain data parallel)
        and which rows they come from (a label for the output).

        Plain data parallel: the ``ddp`` rows (a table of ``hsdp`` rows only: all of
        them). R: the ``hsdp`` rows of that R, over the ``ddp`` rows for the costs they
        lack; an R not measured takes every ``hsdp`` row's medians (the costs are
        taken as independent of R, as the model takes them independent of N).
        """
        if replicas is None:
            if self.ddp or not self.pooled_hsdp:
                return dict(self.ddp), ("ddp rows" if self.ddp else "none")
            return dict(self.pooled_hsdp), "hsdp rows (no ddp row)"
        if replicas in self.hsdp:
            return {**self.ddp, **self.hsdp[replicas]}, f"hsdp:{replicas}xS rows"
        if self.pooled_hsdp:
            got = ",".join(map(str, self.replicas))
            return ({**self.ddp, **self.pooled_hsdp},
                    f"hsdp rows of R={got} (R={replicas} not measured)")
        return dict(self.ddp), ("ddp rows" if self.ddp else "none")


def costs_from_records(df: pd.DataFrame, source: str = "results") -> MeasuredCosts:
    """Split a records/results table by its :data:`PARALLEL_COLUMN` (absent: every
    row ``ddp``) and take :func:`params_from_table`'s medians of each layout.

    Raises:
        InputError: a ``parallel`` cell that is neither ddp nor hsdp:RxS, no number in
            any :data:`RESULT_COLUMNS` column, or a negative (zero step) median.
    """
    if PARALLEL_COLUMN in df.columns:
        cells = df[PARALLEL_COLUMN]
        try:
            reps = cells.map(replicas_of)
        except InputError as exc:
            raise InputError(f"--from-results: {source}: {exc}") from None
        shown = cells.where(reps.notna(), "ddp").astype(str).str.strip().str.lower()
    else:
        reps = pd.Series([None] * len(df), index=df.index, dtype=object)
        shown = pd.Series(["ddp"] * len(df), index=df.index)
    is_ddp = reps.isna()
    ddp = _medians(df[is_ddp], source) if is_ddp.any() else {}
    hsdp: dict[int, dict[str, float]] = {}
    for r in sorted({int(x) for x in reps[~is_ddp]}):
        got = _medians(df[reps == r], f"{source} (hsdp R={r} rows)")
        if got:
            hsdp[r] = got
    pooled = _medians(df[~is_ddp], f"{source} (hsdp rows)") if (~is_ddp).any() else {}
    if not ddp and not hsdp:
        raise InputError(f"--from-results: {source} is neither a records table with a cost (a "
                         f"number in one of: {', '.join(RESULT_COLUMNS)}) nor a jitbench io "
                         f"table (columns {', '.join(IO_COLUMNS)})")
    return MeasuredCosts(ddp=ddp, hsdp=hsdp, pooled_hsdp=pooled,
                         rows={str(k): int(v) for k, v in shown.value_counts().sort_index().items()})


# --------------------------------------------------------------------------- io table

IO_COLUMNS = ("what", "mb", "seconds")
"""Columns of a ``jitbench io`` table (:mod:`jitbench.harness.iobench`) that the model reads."""
IO_ROWS: dict[str, tuple[str, ...]] = {
    "save_s": ("jit save",),
    "restore_s": ("restore as run (newest_valid + load_part)", "restore (load_part)"),
    "checkpoint_s": ("periodic (blocking = total)",),
}
""":class:`ModelParams` field -> the io rows it is taken from (the first present): the
JIT save of one survivor's part, the restore as the runtime runs it (choice of the
part included), the synchronous periodic save (blocking = total)."""
_SPLIT_ROW = re.compile(r"split (save|restore) R=(\d+)")
GB = 1e9
"""Bytes per GB (decimal, as the io table's MB are 10^6 bytes)."""


@dataclass(frozen=True)
class IoCosts:
    """Checkpoint costs per GB of state from a ``jitbench io`` table, s/GB.

    Each is the row's median seconds over its bytes moved (``seconds / (mb / 1000)``),
    so a cost at another state size is taken proportional to the size (the io rows
    move 1 GB or more: per-file fixed costs such as the fsyncs and the manifest are
    amortised there, and would dominate a much smaller state).
    """

    state_gb: float
    """State size the table measured (GB, the JIT save row's bytes)."""
    s_per_gb: dict[str, float]
    """:class:`ModelParams` field (``save_s``, ``restore_s``, ``checkpoint_s``) -> s/GB."""
    split_save_s_per_gb: dict[int, float]
    """Writers R -> s/GB of state when R writers each write 1/R of it at once (until the
    last commits): how the save falls with R split writers."""
    split_restore_s_per_gb: dict[int, float]
    """Writers R -> s/GB of state loaded and merged from R slices."""

    def overrides(self, state_gb: float | None = None,
                  writers: int | None = None) -> dict[str, float]:
        """:class:`ModelParams` overrides (s) for a state of ``state_gb`` GB (None: the
        table's own) saved by ``writers`` split writers (None: one writer, the ``jit
        save`` row; R: the ``split save R=R`` row, and its restore row when present).

        Raises:
            InputError: ``writers`` that the table did not measure, a state size that
                is not a finite number > 0.
        """
        g = self.state_gb if state_gb is None else state_gb
        if not (math.isfinite(g) and g > 0):
            raise InputError(f"--state-gb must be a finite number > 0 (got {g})")
        per = dict(self.s_per_gb)
        if writers is not None:
            if writers not in self.split_save_s_per_gb:
                have = ", ".join(map(str, sorted(self.split_save_s_per_gb))) or "none"
                raise InputError(f"--split-writers {writers}: the io table measured split "
                                 f"saves of R = {have}")
            per["save_s"] = self.split_save_s_per_gb[writers]
            if writers in self.split_restore_s_per_gb:
                per["restore_s"] = self.split_restore_s_per_gb[writers]
        return {k: v * g for k, v in per.items()}


def is_io_table(df: pd.DataFrame) -> bool:
    """Whether ``df`` is a ``jitbench io`` table (it has :data:`IO_COLUMNS`)."""
    return set(IO_COLUMNS) <= set(df.columns)


def io_costs_from_table(df: pd.DataFrame, source: str = "io table") -> IoCosts:
    """:class:`IoCosts` from a ``jitbench io`` table (CSV of ``--csv``: one row per
    measurement, ``what``, ``mb`` = 10^6 bytes moved, ``seconds`` = median time).

    Raises:
        InputError: no row of :data:`IO_ROWS` with a positive size and time.
    """
    what = df["what"].astype(str).str.strip()
    mb = pd.to_numeric(df["mb"], errors="coerce")
    sec = pd.to_numeric(df["seconds"], errors="coerce")
    ok = np.isfinite(mb) & np.isfinite(sec) & (mb > 0) & (sec > 0)
    per_gb = (sec / (mb / 1000.0))[ok]
    by_what = dict(zip(what[ok], per_gb, strict=True))
    size_gb = dict(zip(what[ok], mb[ok] / 1000.0, strict=True))
    s_per_gb: dict[str, float] = {}
    state_gb: float | None = None
    for param, names in IO_ROWS.items():
        name = next((n for n in names if n in by_what), None)
        if name is not None:
            s_per_gb[param] = float(by_what[name])
            if state_gb is None or param == "save_s":
                state_gb = float(size_gb[name])
    if not s_per_gb or state_gb is None:
        want = ", ".join(repr(n) for names in IO_ROWS.values() for n in names)
        raise InputError(f"--from-results: {source} is a jitbench io table without a usable "
                         f"row (need a positive mb and seconds in one of: {want})")
    split: dict[str, dict[int, float]] = {"save": {}, "restore": {}}
    for name, value in by_what.items():
        m = _SPLIT_ROW.fullmatch(name)
        if m and int(m[2]) >= 1:
            split[m[1]][int(m[2])] = float(value)
    return IoCosts(state_gb=state_gb, s_per_gb=s_per_gb,
                   split_save_s_per_gb=dict(sorted(split["save"].items())),
                   split_restore_s_per_gb=dict(sorted(split["restore"].items())))


def build_rows(gpus: Sequence[int], params: ModelParams, horizon_hours: float, trials: int,
               seed: int, weibull_shape: float | None = None) -> list[dict[str, Any]]:
    """One row per (world size, strategy): analytic and simulated wasted
    GPU-hours per day and goodput (simulated: mean and p5/p50/p95 over
    ``trials``), checkpoint interval (s), failures per day."""
    rows: list[dict[str, Any]] = []
    for n in gpus:
        sim = simulate(params, SimConfig(n_gpus=n, horizon_hours=horizon_hours, trials=trials,
                                         seed=seed, weibull_shape=weibull_shape))
        for s in MODEL_STRATEGIES:
            a = estimate(s, n, params)
            r = sim[s]
            rows.append({
                "n_gpus": n,
                "strategy": s,
                "interval_s": a.interval_s,
                "failures_per_day": a.failures_per_day,
                "analytic_wasted_gpu_hours_per_day": a.wasted_gpu_hours_per_day,
                "analytic_goodput": a.goodput,
                "sim_wasted_gpu_hours_per_day_mean": r.wasted_gpu_hours_per_day.mean,
                "sim_wasted_gpu_hours_per_day_p5": r.wasted_gpu_hours_per_day.p5,
                "sim_wasted_gpu_hours_per_day_p50": r.wasted_gpu_hours_per_day.p50,
                "sim_wasted_gpu_hours_per_day_p95": r.wasted_gpu_hours_per_day.p95,
                "sim_goodput_mean": r.goodput.mean,
                "sim_goodput_p5": r.goodput.p5,
                "sim_goodput_p50": r.goodput.p50,
                "sim_goodput_p95": r.goodput.p95,
                "sim_failures_per_trial": r.failures_mean,
                "sim_jit_fallbacks_per_trial": r.jit_fallbacks_mean if s.startswith("jit") else None,
            })
    return rows


def crossovers(params: ModelParams, gpus: Sequence[int],
               rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Analytic crossover world sizes (exact integer N, over 1..max(100000, N))
    and simulated ones (bracketed by consecutive table world sizes) for each
    pair in :data:`CROSSOVER_PAIRS`."""
    hi = max(PLOT_MAX_GPUS, max(gpus))
    analytic: list[Crossover] = []
    for a, b in CROSSOVER_PAIRS:
        analytic.extend(find_crossovers(params, a, b, 1, hi))
    simulated: list[dict[str, Any]] = []
    mean = {(r["n_gpus"], r["strategy"]): r["sim_wasted_gpu_hours_per_day_mean"] for r in rows}
    ns = sorted(set(gpus))
    for a, b in CROSSOVER_PAIRS:
        for n0, n1 in zip(ns, ns[1:], strict=False):
            d0 = mean[(n0, a)] - mean[(n0, b)]
            d1 = mean[(n1, a)] - mean[(n1, b)]
            if d0 != 0 and d1 != 0 and (d0 < 0) != (d1 < 0):
                below, above = (a, b) if d0 < 0 else (b, a)
                simulated.append({"a": a, "b": b, "between_gpus": [n0, n1],
                                  "below": below, "above": above})
    return {"analytic": [asdict(c) for c in analytic], "simulated": simulated}


CROSSOVER_REPLICAS: tuple[int, ...] = (1, 2, 4, 8)
"""HSDP replicas per shard whose JIT vs periodic crossover is shown by default (beside
plain data parallel and every R measured); R = 1 is full sharding (FSDP, ZeRO-3), where
every failure leaves a shard without a replica."""


def layout_params(base: ModelParams, costs: MeasuredCosts | None, replicas: int | None,
                  io: dict[str, float] | None = None, keep: frozenset[str] = frozenset(),
                  ) -> tuple[ModelParams, dict[str, float], str]:
    """Model parameters of a job of ``replicas`` per shard (None: plain data parallel):
    ``base`` (flags and defaults) <- the records costs of that layout
    (:meth:`MeasuredCosts.for_layout`) <- ``io`` (:meth:`IoCosts.overrides`), except the
    fields named in ``keep`` (given as flags: they win). Returns the parameters, the
    records overrides applied and a label of where the costs came from.

    Raises:
        InputError: a parameter the model cannot take (one line).
    """
    over, label = costs.for_layout(replicas) if costs is not None else ({}, "flags and defaults")
    over = {k: v for k, v in over.items() if k not in keep}
    io = {k: v for k, v in (io or {}).items() if k not in keep}
    if io:
        label = f"{label} + io table" if over.keys() - io.keys() else "io table"
    try:
        p = replace(base, **{**over, **io}, replicas_per_shard=replicas)
        p.validate()
    except ValueError as exc:
        msg = str(exc)
        name, _, rest = msg.partition(" ")
        if name in over or name in io:  # a value read from a table: say so
            msg = f"{name} ({label}) {rest}"
        elif name.isidentifier() and hasattr(base, name):  # a flag's value: name the flag
            msg = f"--{name.replace('_', '-')} {rest}"
        raise InputError(msg) from None
    return p, over, label


def replica_counts(costs: MeasuredCosts | None, shown: Sequence[int] = CROSSOVER_REPLICAS,
                   main: int | None = None) -> list[int]:
    """The HSDP replica counts of the crossover table: ``shown``, every R measured in
    ``costs`` and ``main`` (the model's own), ascending, once each."""
    got = {int(r) for r in shown} | (set(costs.replicas) if costs is not None else set())
    return sorted(got | ({main} if main is not None else set()))


def crossovers_by_replicas(layouts: Sequence[tuple[int | None, ModelParams, str]],
                           gpus: Sequence[int], a: str = "jit",
                           b: str = "periodic") -> list[dict[str, Any]]:
    """The analytic ``a`` vs ``b`` crossovers for each layout: ``(R, params, costs)``
    with ``R`` the replicas per shard (None: plain data parallel), ``params`` the
    model parameters of that layout (its measured costs) and ``costs`` where they
    came from (a label). :func:`jitbench.reports.model.find_crossovers` over
    ``1..max(100000, max(gpus))`` GPUs, world sizes a multiple of R (an HSDP job is
    ``R x S`` GPUs); R enters the model through :func:`jitbench.reports.model.topology`
    (which failures leave a shard without a replica, so JIT falls back to the last
    periodic checkpoint), the costs through every term.

    One dict per layout: ``layout`` (``ddp``, ``hsdp R=2``), ``replicas_per_shard``,
    ``costs``, ``a``, ``b``, ``from_gpus`` and ``to_gpus`` (the world sizes scanned),
    ``first`` (the cheaper at ``from_gpus``; None when equal) and ``crossovers``
    (:class:`~jitbench.reports.model.Crossover` dicts, ascending).
    """
    hi = max(PLOT_MAX_GPUS, max(gpus))
    out: list[dict[str, Any]] = []
    for reps, params, costs in layouts:
        p = replace(params, replicas_per_shard=reps)
        k = reps or 1
        found = find_crossovers(p, a, b, 1, hi, multiple_of=k)
        d = unclipped_waste_fraction(a, k, p) - unclipped_waste_fraction(b, k, p)
        out.append({"layout": "ddp" if reps is None else f"hsdp R={reps}",
                    "replicas_per_shard": reps, "costs": costs, "a": a, "b": b,
                    "from_gpus": k, "to_gpus": hi,
                    "first": a if d < 0 else b if d > 0 else None,
                    "crossovers": [asdict(c) for c in found]})
    return out


def describe_crossovers(row: dict[str, Any]) -> str:
    """One line for a :func:`crossovers_by_replicas` row: who is cheaper from where
    (``periodic cheaper from N = 1, jit from N = 12``; ``periodic cheaper throughout
    N = 1-100,000``)."""
    first = row["first"] or (row["crossovers"][0]["below"] if row["crossovers"] else None)
    if first and not row["crossovers"]:
        return f"{first} cheaper throughout N = {row['from_gpus']:,}-{row['to_gpus']:,}"
    parts = [f"{first} cheaper from N = {row['from_gpus']:,}" if first
             else f"{row['a']} and {row['b']} equal at N = {row['from_gpus']:,}"]
    parts += [f"{c['above']} from N = {c['n_gpus']:,}" for c in row["crossovers"]]
    return ", ".join(parts)


def write_plot(path: Path | BinaryIO, params: ModelParams, gpus: Sequence[int],
               rows: list[dict[str, Any]]) -> None:
    """PNG of wasted GPU-hours/day and goodput vs world size (log x): analytic
    curves over 8..100000 GPUs (wider if the table is), simulated means with
    p5-p95 bars at the table's world sizes."""
    from matplotlib.figure import Figure  # no pyplot: no global backend state

    lo = min(PLOT_MIN_GPUS, min(gpus))
    hi = max(PLOT_MAX_GPUS, max(gpus))
    grid = np.unique(np.round(np.geomspace(lo, hi, 160)).astype(int))
    fig = Figure(figsize=(11, 4.5), layout="constrained")
    ax_w, ax_g = fig.subplots(1, 2)
    colors = dict(zip(MODEL_STRATEGIES, ("tab:green", "tab:blue", "tab:red", "tab:orange"),
                      strict=True))
    for s in MODEL_STRATEGIES:
        est = [estimate(s, int(n), params) for n in grid]
        ax_w.plot(grid, [e.wasted_gpu_hours_per_day for e in est], color=colors[s],
                  label=f"{s} (analytic)")
        ax_g.plot(grid, [e.goodput for e in est], color=colors[s], label=f"{s} (analytic)")
        sr = [r for r in rows if r["strategy"] == s]
        x = np.array([r["n_gpus"] for r in sr], dtype=float)
        for ax, key in ((ax_w, "sim_wasted_gpu_hours_per_day"), (ax_g, "sim_goodput")):
            mid = np.array([r[f"{key}_mean"] for r in sr])
            err = np.vstack([mid - np.array([r[f"{key}_p5"] for r in sr]),
                             np.array([r[f"{key}_p95"] for r in sr]) - mid]).clip(min=0)
            ax.errorbar(x, mid, yerr=err, fmt="o", ms=4, capsize=3, color=colors[s],
                        label=f"{s} (simulated, p5-p95)")
    ax_w.set(xscale="log", yscale="log", xlabel="world size N (GPUs)",
             ylabel="wasted GPU-hours per day", title="Wasted GPU time (lines: analytic model)")
    lows = [e.goodput for s in MODEL_STRATEGIES for e in (estimate(s, int(n), params) for n in grid)]
    lows += [r["sim_goodput_p5"] for r in rows]
    bottom = max(0.0, math.floor((min(lows) - 0.005) * 100) / 100)  # zoom in on high goodput
    ax_g.set(xscale="log", xlabel="world size N (GPUs)", ylabel="goodput (useful / total GPU time)",
             title="Goodput", ylim=(bottom, 1.0 + (1.0 - bottom) * 0.02))
    for ax in (ax_w, ax_g):
        ax.grid(True, which="both", alpha=0.3)
    ax_g.legend(fontsize=7, loc="lower left")
    fig.suptitle(f"MTBF {params.mtbf_hours_per_gpu:,.0f} h/GPU, step {params.step_s:.3g} s, "
                 f"checkpoint {params.checkpoint_s:.3g} s, restart {params.restart_s:.3g} s, "
                 f"detect {params.detect_s:.3g} s, save {params.save_s:.3g} s, "
                 f"restore {params.restore_s:.3g} s", fontsize=9)
    fig.savefig(path, dpi=120)


