"""``jitbench model``: analytic and simulated wasted GPU-hours and goodput vs world size.

The CLI calls :func:`model_main`; everything here is a plain function so it
can be tested and reused without the CLI. The rows, crossovers and plot it
prints are :mod:`jitbench.reports.projection`'s (shared with the report).
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from jitbench import records
from jitbench.errors import InputError
from jitbench.reports.evidence import check_evidence
from jitbench.reports.model import SECONDS_PER_HOUR, ModelParams
from jitbench.reports.projection import (  # noqa: F401 (RESULT_COLUMNS: the CLI reads it)
    CROSSOVER_REPLICAS,
    RESULT_COLUMNS,
    IoCosts,
    MeasuredCosts,
    build_rows,
    costs_from_records,
    crossovers,
    crossovers_by_replicas,
    describe_crossovers,
    io_costs_from_table,
    is_io_table,
    layout_params,
    replica_counts,
    write_plot,
)

MAX_GPUS = 1_000_000
"""Largest world size modelled (the simulator's failure traces grow with N; the
range of interest is 8 to 100,000 GPUs)."""


@dataclass
class FromResults:
    """What ``--from-results`` gave: the costs of a records table and of an io table."""

    records: MeasuredCosts | None = None
    """Medians of a records/results table, by layout (``ddp``, ``hsdp:RxS``)."""
    io: IoCosts | None = None
    """Seconds per GB of state of a ``jitbench io`` table."""
    info: dict[str, Any] = field(default_factory=dict)
    """For the JSON output: the records table's ``path``, ``rows``,
    ``world_size_median``, ``layouts`` (rows per layout) and ``io`` (the io table's
    path, state size and s/GB)."""


def harness_stopped_rows(df: pd.DataFrame) -> pd.Series:
    """Which rows of a records table are runs the harness stopped (``--timeout-s``,
    Ctrl-C or SIGTERM). A row's non-empty ``harness_stopped`` decides; only where that
    column is absent or the row's cell empty (tables written before it) do
    ``timed_out`` or ``interrupted`` true stand for it. They also count a stopped
    fault-free reference, so beside ``harness_stopped`` they would drop runs whose
    own launch completed. Their detection and recovery figures measure the stop (a
    hang never detected reads as detected by the stop's SIGTERM), so
    ``--from-results`` leaves them out."""

    def stopped(row: dict) -> bool:
        v = row.get("harness_stopped")
        if not records.empty_cell(v):
            return records.is_bool(v, True)
        return any(records.is_bool(row.get(c), True) for c in ("timed_out", "interrupted"))

    return pd.Series([stopped(r) for r in df.to_dict("records")], index=df.index,
                     dtype=bool)


def load_from_results(paths: Sequence[Path]) -> FromResults:
    """Read each ``--from-results`` path: at most one records table (CSV or Parquet,
    one row per run, or the table of a sweep or run directory, or every run's
    records below a directory: :func:`jitbench.records.load_results`) and at most
    one ``jitbench io`` table (the CSV of ``jitbench io --csv``: it has the columns
    ``what``, ``mb``, ``seconds``).

    Records: runs the harness stopped are left out (:func:`harness_stopped_rows`;
    ``info["excluded_harness_stopped"]`` counts them), and
    ``info["evidence_unchecked_rows"]`` counts the rows whose run directory was not
    found, so their ``failures.csv`` was not checked against them (the command prints
    it in a note line); for each column of
    :data:`RESULT_COLUMNS` present, the median over rows
    where it is a finite number (NaN-tolerant), per layout of the ``parallel``
    column (:func:`~jitbench.reports.projection.costs_from_records`; absent: every
    row ``ddp``). Where a ``strategy`` column exists, ``step_time_s`` prefers
    ``none`` rows, ``save_s`` prefers ``jit*`` rows and ``checkpoint_s`` prefers
    ``periodic:*`` rows, falling back to all rows. io: seconds per GB of the JIT
    save, the restore, the periodic checkpoint and the split saves
    (:func:`~jitbench.reports.projection.io_costs_from_table`).

    Raises:
        InputError: a missing/unreadable file, a table that is neither a records
            table with a cost nor an io table with a usable row, two tables of one
            kind, a bad ``parallel`` cell, a negative (or zero step) value, a records
            row its own evidence contradicts
            (:func:`jitbench.reports.evidence.check_evidence`), or a table whose every
            run the harness stopped.
    """
    out = FromResults()
    for path in paths:
        path = Path(path)
        try:
            df = records.load_results(path, require=())
        except InputError as exc:
            raise InputError(f"--from-results: {exc}") from None
        shown = (records.find_table(path) or path) if path.is_dir() else path
        if is_io_table(df):
            if out.io is not None:
                raise InputError(f"--from-results: {shown}: a second jitbench io table "
                                 f"(the first: {out.info['io']['path']}); give one")
            out.io = io_costs_from_table(df, str(shown))
            out.info["io"] = {"path": str(shown), "measured_state_gb": out.io.state_gb,
                              "s_per_gb": out.io.s_per_gb,
                              "split_save_s_per_gb": out.io.split_save_s_per_gb,
                              "split_restore_s_per_gb": out.io.split_restore_s_per_gb}
            continue
        if out.records is not None:
            raise InputError(f"--from-results: {shown}: a second records table (the first: "
                             f"{out.info['path']}); give one, or a directory holding the runs")
        try:  # a row its own evidence contradicts is no cost to model from
            unchecked = check_evidence(df, str(shown), path)
        except InputError as exc:
            raise InputError(f"--from-results: {exc}") from None
        stopped = harness_stopped_rows(df)
        if len(df) and stopped.all():
            raise InputError(f"--from-results: {shown}: every run in it was stopped by the "
                             "harness (--timeout-s, Ctrl-C): none measured a recovery")
        df = df[~stopped]
        out.records = costs_from_records(df, str(shown))
        out.info.update({"path": str(shown), "rows": len(df), "layouts": out.records.rows,
                         "excluded_harness_stopped": int(stopped.sum()),
                         "evidence_unchecked_rows": unchecked, "evidence_rows": len(stopped)})
        if "world_size" in df.columns:
            ws = pd.to_numeric(df["world_size"], errors="coerce").dropna()
            if len(ws):
                out.info["world_size_median"] = float(ws.median())
    return out


def _fmt_interval(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "-"
    if seconds >= 2 * SECONDS_PER_HOUR:
        return f"{seconds / SECONDS_PER_HOUR:.1f} h"
    if seconds >= 120:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


def _fmt_hours(x: float) -> str:
    """Three significant figures, with k/M from 1,000 on (GPU-hours)."""
    if not math.isfinite(x):
        return "-"
    if x == 0:
        return "0"
    scale, suffix = next((s, u) for s, u in ((1e6, "M"), (1e3, "k"), (1.0, ""))
                         if abs(x) >= s or s == 1.0)
    v = x / scale
    return f"{v:.{max(0, 2 - math.floor(math.log10(abs(v))))}f}{suffix}"


def _clean(obj: Any) -> Any:
    """JSON-safe copy: non-finite floats -> None, numpy scalars -> Python."""
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def _print_table(rows: list[dict[str, Any]], cross: dict[str, list[dict[str, Any]]],
                 params: ModelParams, sources: dict[str, str], horizon_hours: float,
                 trials: int, seed: int, by_replicas: list[dict[str, Any]] | None = None,
                 loaded: FromResults | None = None, io_scale: dict[str, Any] | None = None,
                 ) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(file=sys.stdout)
    if not console.is_terminal:  # files/pipes: do not squeeze the table into 80 columns
        console = Console(file=sys.stdout, width=150)
    # two tables of six columns (each fits an 80-column terminal) rather than
    # one of ten that rich would squeeze and cut
    waste = Table(title="Wasted GPU-hours per day: analytic model | simulation")
    good = Table(
        title="Goodput (useful fraction of GPU time): analytic model | simulation",
        caption=escape(f"simulated: mean and [p5, p95] over {trials} trials x {horizon_hours:g} h, "
                 f"seed {seed}. periodic runs at its Young/Daly optimum; the jit interval is its "
                 "fallback checkpoint. The model is first order: it overstates waste when "
                 "failures are not rare against recovery and checkpoint intervals."),
    )
    for table, names in ((waste, ("GPUs", "strategy", "interval", "model", "sim",
                                  "sim [p5, p95]")),
                         (good, ("GPUs", "strategy", "fail/day", "model", "sim",
                                 "sim [p5, p95]"))):
        for name in names:
            table.add_column(escape(name), justify="left" if name == "strategy" else "right",
                             no_wrap=True)
    prev = None
    for r in rows:
        if prev is not None and r["n_gpus"] != prev:
            waste.add_section()
            good.add_section()
        prev = r["n_gpus"]
        head = (f"{r['n_gpus']:,}", r["strategy"])
        waste.add_row(*map(escape, (
            *head, _fmt_interval(r["interval_s"]),
            _fmt_hours(r["analytic_wasted_gpu_hours_per_day"]),
            _fmt_hours(r["sim_wasted_gpu_hours_per_day_mean"]),
            f"[{_fmt_hours(r['sim_wasted_gpu_hours_per_day_p5'])}, "
            f"{_fmt_hours(r['sim_wasted_gpu_hours_per_day_p95'])}]")))
        good.add_row(*map(escape, (
            *head, f"{r['failures_per_day']:.3g}",
            f"{100 * r['analytic_goodput']:.2f}%",
            f"{100 * r['sim_goodput_mean']:.2f}%",
            f"[{100 * r['sim_goodput_p5']:.2f}, {100 * r['sim_goodput_p95']:.2f}]%")))
    console.print(waste)
    console.print(good)
    if cross["analytic"]:
        for c in cross["analytic"]:
            console.print(f"analytic crossover {c['a']} vs {c['b']}: {c['below']} wastes less "
                          f"below N = {c['n_gpus']:,} GPUs, {c['above']} from there on")
    else:
        console.print("analytic crossovers: none in range")
    for c in cross["simulated"]:
        lo, hi = c["between_gpus"]
        console.print(f"simulated crossover {c['a']} vs {c['b']}: between N = {lo:,} and "
                      f"{hi:,} ({c['below']} below, {c['above']} above)")
    if by_replicas:
        console.print(f"analytic crossover {by_replicas[0]['a']} vs {by_replicas[0]['b']} by "
                      "layout (hsdp R: R replicas per shard, N a multiple of R):", markup=False)
        for b in by_replicas:
            console.print(f"  {b['layout']}{' (measured)' if b.get('measured') else ''}, costs "
                          f"from {b['costs']}: {describe_crossovers(b)}", markup=False)
    info = loaded.info if loaded is not None else {}
    measured = [k for k, v in sources.items() if v == "results"]
    if info.get("excluded_harness_stopped"):
        console.print(f"left out {info['excluded_harness_stopped']} run(s) of "
                      f"{info['path']} the harness stopped (--timeout-s, Ctrl-C): their "
                      "detection and recovery times measure the stop", markup=False)
    if measured:
        layouts = ", ".join(f"{k} {n} rows" for k, n in (info.get("layouts") or {}).items())
        reps = params.replicas_per_shard
        console.print(f"from results ({layouts}; the table above: "
                      f"{'ddp' if reps is None else f'hsdp R={reps}'}): "
                      + ", ".join(f"{k} = {getattr(params, k):.4g}" for k in measured),
                      markup=False)
    if loaded is not None and loaded.io is not None and io_scale is not None:
        io = loaded.io
        from_io = [k for k, v in sources.items() if v == "io"]
        split = ", ".join(f"R={r} {v:.3g}" for r, v in io.split_save_s_per_gb.items())
        writers = io_scale["split_writers"]
        console.print(
            f"from io table {info['io']['path']} (state {io.state_gb:.3g} GB measured, "
            f"scaled to {io_scale['state_gb']:.3g} GB; save by "
            f"{'1 writer' if writers is None else f'{writers} split writers'}): "
            + (", ".join(f"{k} = {getattr(params, k):.4g}" for k in from_io) or "every cost "
               "given as a flag")
            + "; s/GB: " + ", ".join(f"{k} {v:.3g}" for k, v in io.s_per_gb.items())
            + (f"; split save s/GB by writers: {split}" if split else ""), markup=False)


def model_main(
    gpus: list[int],
    mtbf_hours_per_gpu: float,
    step_s: float,
    checkpoint_s: float,
    restart_s: float,
    detect_s: float,
    save_s: float,
    restore_s: float,
    from_results: Path | Sequence[Path] | None,
    horizon_hours: float,
    trials: int,
    seed: int,
    as_json: bool,
    out_dir: Path | None,
    *,
    async_stall_fraction: float = 0.1,
    jit_overhead_fraction: float = 0.0,
    fallback_interval_hours: float = 6.0,
    gpus_per_host: int = 8,
    replicas_per_shard: int | None = None,
    weibull_shape: float | None = None,
    explicit: frozenset[str] = frozenset(),
    state_gb: float | None = None,
    split_writers: int | None = None,
    crossover_replicas: Sequence[int] = CROSSOVER_REPLICAS,
) -> int:
    """Print wasted GPU-hours per day and goodput of jit, jit-transparent,
    periodic (Young/Daly optimum) and periodic-async for each world size in
    ``gpus``, analytic and simulated side by side, and their crossovers.

    Durations in seconds, ``mtbf_hours_per_gpu`` and ``horizon_hours`` in
    hours, ``state_gb`` in GB (10^9 bytes). ``from_results`` (one path or several:
    a records table and/or a ``jitbench io`` table, see :func:`load_from_results`)
    overrides the step, save, restore, restart, detect and checkpoint costs with
    its medians, except those named in ``explicit`` (parameters the user gave on
    the command line: a flag wins over an io table, which wins over the records
    for the save, restore and checkpoint costs):

    - records rows of ``jitbench run --parallel hsdp:RxS`` give the costs of a job
      of R replicas per shard; a table of such rows only sets the model's
      ``replicas_per_shard`` to its (smallest) R, unless ``replicas_per_shard`` is
      given;
    - an io table gives seconds per GB, times ``state_gb`` (default: the state
      size the io table measured); ``split_writers`` R takes the save (and
      restore) of R split writers instead of one writer's.

    Beside the table, the analytic ``jit`` vs ``periodic`` crossover for plain
    data parallel and each HSDP replica count in ``crossover_replicas``, every
    measured R and ``replicas_per_shard``, each with its layout's costs
    (:func:`~jitbench.reports.projection.crossovers_by_replicas`). ``as_json``:
    one JSON object on stdout instead of the table. ``out_dir``: also write
    ``model.csv`` and ``model.png`` there. Returns 0, or 2 on bad input (one line
    on stderr).
    """
    try:
        if not gpus:
            raise InputError("--gpus: give at least one world size")
        bad = [g for g in gpus if int(g) != g or not 1 <= g <= MAX_GPUS]
        if bad:
            raise InputError(f"--gpus: world sizes must be integers in 1..{MAX_GPUS:,} "
                             f"(got {bad[0]})")
        ns = sorted({int(g) for g in gpus})
        if trials < 1:
            raise InputError(f"--trials must be >= 1 (got {trials})")
        if seed < 0:
            raise InputError(f"--seed must be >= 0 (got {seed})")
        if not (math.isfinite(horizon_hours) and horizon_hours > 0):
            raise InputError(f"--horizon-hours must be > 0 (got {horizon_hours})")
        if weibull_shape is not None and not weibull_shape > 0:
            raise InputError(f"weibull shape must be > 0 (got {weibull_shape})")
        bad_r = [r for r in crossover_replicas if int(r) != r or not 1 <= r <= MAX_GPUS]
        if bad_r:
            raise InputError(f"--crossover-replicas: replicas per shard must be integers in "
                             f"1..{MAX_GPUS:,} (got {bad_r[0]})")
        if split_writers is not None and split_writers < 1:
            raise InputError(f"--split-writers must be >= 1 (got {split_writers})")
        flags = ModelParams(
            mtbf_hours_per_gpu=float(mtbf_hours_per_gpu), step_s=float(step_s),
            checkpoint_s=float(checkpoint_s), restart_s=float(restart_s),
            detect_s=float(detect_s), save_s=float(save_s), restore_s=float(restore_s),
            async_stall_fraction=float(async_stall_fraction),
            jit_overhead_fraction=float(jit_overhead_fraction),
            fallback_interval_s=float(fallback_interval_hours) * SECONDS_PER_HOUR,
            gpus_per_host=gpus_per_host, replicas_per_shard=replicas_per_shard,
        )
        if from_results is None:
            paths: list[Path] = []
        elif isinstance(from_results, str | Path):
            paths = [Path(from_results)]
        else:
            paths = [Path(p) for p in from_results]
        loaded = load_from_results(paths)
        if loaded.io is None and (state_gb is not None or split_writers is not None):
            flag = "--state-gb" if state_gb is not None else "--split-writers"
            raise InputError(f"{flag} needs a jitbench io table in --from-results (its "
                             "seconds per GB of state are what is scaled)")
        io_over: dict[str, float] = {}
        io_scale: dict[str, Any] | None = None
        if loaded.io is not None:
            io_over = loaded.io.overrides(state_gb, split_writers)
            io_scale = {"state_gb": loaded.io.state_gb if state_gb is None else state_gb,
                        "split_writers": split_writers, "costs_s": io_over}
            loaded.info["io"].update(io_scale)

        main_reps = replicas_per_shard
        if main_reps is None and loaded.records is not None:
            main_reps = loaded.records.main_replicas()
        params, over, _ = layout_params(flags, loaded.records, main_reps, io_over, explicit)
        sources = {k: "flag" for k in RESULT_COLUMNS.values()}
        sources.update({k: "results" for k in over})
        sources.update({k: "io" for k in io_over if k not in explicit})
        results_info: dict[str, Any] | None = loaded.info or None
        if results_info is not None:
            results_info["replicas_per_shard"] = main_reps
        measured_reps = set(loaded.records.replicas) if loaded.records is not None else set()
        layouts: list[tuple[int | None, ModelParams, str]] = []
        for r in [None, *replica_counts(loaded.records, crossover_replicas, main_reps)]:
            p, _, label = layout_params(flags, loaded.records, r, io_over, explicit)
            layouts.append((r, p, label))
        if out_dir is not None:
            out_dir = Path(out_dir)
            if out_dir.exists() and not out_dir.is_dir():
                raise InputError(f"--out: {out_dir} exists and is not a directory")
            try:
                out_dir.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise InputError(f"--out: cannot create {out_dir}: {exc.strerror}") from None
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    rows = build_rows(ns, params, horizon_hours, trials, seed, weibull_shape)
    cross = crossovers(params, ns, rows)
    by_replicas = crossovers_by_replicas(layouts, ns)
    for b in by_replicas:
        b["measured"] = b["replicas_per_shard"] in measured_reps
    files: dict[str, str] = {}
    if out_dir is not None:
        csv_path, png_path = out_dir / "model.csv", out_dir / "model.png"
        try:
            pd.DataFrame(rows).to_csv(csv_path, index=False)
            write_plot(png_path, params, ns, rows)
        except OSError as exc:
            print(f"error: --out: cannot write to {out_dir}: {exc.strerror}", file=sys.stderr)
            return 2
        files = {"csv": str(csv_path), "png": str(png_path)}

    if as_json:
        param_dict = {k: v for k, v in asdict(params).items() if k != "causes"}
        obj = {
            "params": param_dict,
            "sources": sources,
            "from_results": results_info,
            "simulation": {"horizon_hours": horizon_hours, "trials": trials, "seed": seed,
                           "inter_arrival": "exponential" if weibull_shape is None
                           else f"weibull(shape={weibull_shape:g})"},
            "rows": rows,
            "crossovers": cross,
            "crossovers_by_replicas": by_replicas,
            "files": files,
        }
        print(json.dumps(_clean(obj), allow_nan=False))
    else:
        _print_table(rows, cross, params, sources, horizon_hours, trials, seed, by_replicas,
                     loaded, io_scale)
        for kind, path in files.items():
            print(f"wrote {kind}: {path}")
    if loaded.info.get("evidence_unchecked_rows"):  # a check that did not run is said
        from jitbench.reports.evidence import unchecked_note

        print(unchecked_note(f"--from-results {loaded.info['path']}",
                             loaded.info["evidence_unchecked_rows"],
                             loaded.info["evidence_rows"]), file=sys.stderr)
    return 0
