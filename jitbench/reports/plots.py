"""matplotlib figures of a sweep, its runs and an overhead measurement.

Every figure is built from records (the results table, ``overhead.csv``) or
from a run's phases table (:mod:`jitbench.phases`, derived once from its
events), never from typed-in numbers. Colours are fixed per
strategy family (:func:`strategy_color`) and per recovery phase
(:data:`PHASE_COLORS`) so every figure reads the same way. Each function
returns a :class:`matplotlib.figure.Figure` (Agg backend; no display needed).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

STRATEGY_COLORS = {"jit": "#1b9e77", "periodic": "#d95f02", "periodic-async": "#7570b3",
                   "periodic-auto": "#e7298a", "none": "#6b6b6b", "jit-inprocess": "#66a61e",
                   "torchft": "#e6ab02", "nvrx": "#a6761d", "nvrx-sections": "#a6761d",
                   "inmem": "#1f78b4", "own": "#b15928"}
"""Colour of each strategy family (ColorBrewer Dark2, then Paired for ``inmem`` and
``own``, a launched script's own recovery)."""
PHASES = ("detect_s", "save_s", "restart_s", "reform_s", "transfer_s", "restore_s",
          "replay_s", "other_s")
"""Recovery phases in the order they happen: a whole-job restart has ``restart_s``, an
in-process recovery ``reform_s`` (failure to the new group formed) and ``transfer_s``
(the boundary state broadcast from a healthy replica) in its place."""
PHASE_LABELS = {"detect_s": "detect", "save_s": "save", "restart_s": "restart",
                "reform_s": "re-form group", "transfer_s": "state transfer",
                "restore_s": "restore", "replay_s": "replay", "other_s": "other (gaps, "
                                                                           "first new step)"}
PHASE_COLORS = {"detect_s": "#e76f51", "save_s": "#2a9d8f", "restart_s": "#8d99ae",
                "reform_s": "#b5838d", "transfer_s": "#6d597a",
                "restore_s": "#e9c46a", "replay_s": "#f4a261", "other_s": "#d9d9d9"}
RANK_COLORS = ("#264653", "#e63946", "#457b9d", "#f4a261", "#2a9d8f", "#9b5de5", "#f15bb5",
               "#00bbf9")

plt.rcParams.update({
    "figure.dpi": 110, "savefig.dpi": 110, "font.size": 9.5, "axes.titlesize": 10.5,
    "axes.titleweight": "bold", "axes.labelsize": 9.5, "axes.spines.top": False,
    "axes.spines.right": False, "axes.grid": True, "grid.alpha": 0.25, "legend.fontsize": 8.5,
    "legend.frameon": False,
})


def strategy_family(strategy: str) -> str:
    """``periodic:5`` -> ``periodic``; ``periodic:auto`` -> ``periodic-auto``."""
    s = str(strategy)
    if s == "periodic:auto":
        return "periodic-auto"
    return s.split(":", 1)[0]


def strategy_color(strategy: str) -> str:
    """The fixed colour of a strategy (by family)."""
    return STRATEGY_COLORS.get(strategy_family(strategy), "#333333")


def strategy_order(strategies) -> list[str]:
    """jit and jit-inprocess first, then periodic, periodic-async, auto, the peers, a
    launched script's own recovery, none (stable within a family; unknown names last)."""
    rank = {"jit": 0, "jit-inprocess": 1, "periodic": 2, "periodic-async": 3,
            "periodic-auto": 4, "inmem": 5, "torchft": 6, "nvrx": 7, "nvrx-sections": 8,
            "own": 9, "none": 10}
    return sorted(dict.fromkeys(strategies), key=lambda s: (rank.get(strategy_family(s), 11), s))


# ----------------------------------------------------------------- timeline
def timeline_data(run_dir: str | Path) -> dict:
    """What a run's timeline shows, from its phases table (:func:`jitbench.phases.load`;
    times in s since the run's first event).

    Returns ``{"ranks": {rank: [(t, step), ...]}, "faults": [t], "detect": [t],
    "saves": [(t0, t1, kind)], "restarts": [(t0, t1)], "reforms": [(t0, t1)],
    "transfers": [(t0, t1)], "restores": [(t0, t1)], "attempts": n}``: step ends per
    rank, every injected fault, each failure's detection, every save, each failure's
    restart (last event of the failed attempt -> the last rank of the next attempt
    initialised) or, recovered in process, its re-forming of the process group and
    state transfer, and each restarted attempt's restores (first begin -> last end).
    """
    from jitbench import phases

    t = phases.load(run_dir)
    if t.empty:
        return {"ranks": {}, "faults": [], "detect": [], "saves": [], "restarts": [],
                "reforms": [], "transfers": [], "restores": [], "attempts": 0}
    rows = t.to_dict("records")
    start = min(r["t0"] for r in rows if r["phase"] == "attempt")

    def has(v) -> bool:
        return v is not None and v == v

    def pick(scope: str, phase: str) -> list[dict]:
        return [r for r in rows if r["scope"] == scope and r["phase"] == phase]

    ranks: dict[int, list] = defaultdict(list)
    for r in pick("rank", "step"):
        if has(r["t1"]):
            ranks[int(r["rank"])].append((r["t1"] - start, int(r["step"])))
    restores: dict[tuple[int, int], list] = defaultdict(list)
    for r in pick("rank", "restore"):
        if has(r["t0"]) and (r["attempt"] > 0 or r.get("gen", 0) > 0):  # not a first start's
            restores[(int(r["attempt"]), int(r.get("gen") or 0))].append(r)
    return {"ranks": dict(ranks),
            "faults": [r["t0"] - start for r in pick("rank", "fault")],
            "detect": [r["t1"] - start for r in pick("failure", "detect")],
            "saves": [(r["t0"] - start, r["t1"] - start, r["kind"]) for r in pick("rank", "save")
                      if has(r["t0"])],
            "restarts": [(r["t0"] - start, r["t1"] - start) for r in pick("failure", "restart")],
            "reforms": [(r["t0"] - start, r["t1"] - start) for r in pick("failure", "reform")
                        if has(r["t0"]) and has(r["t1"])],
            "transfers": [(r["t0"] - start, r["t1"] - start)
                          for r in pick("failure", "transfer") if has(r["t0"]) and has(r["t1"])],
            "restores": [(min(r["t0"] for r in rs) - start, max(r["t1"] for r in rs) - start)
                         for _, rs in sorted(restores.items())],
            "attempts": len(pick("run", "attempt"))}


MARK_COLORS = {"fault": "#d62828", "detect": "#f77f00", "save": "#1b9e77",
               "restart": "#adb5bd", "reform": "#b5838d", "transfer": "#6d597a",
               "restore": "#e9c46a", "checkpoint": "#4895ef"}


def _draw_timeline(ax, data: dict, title: str) -> None:
    for rank, pts in sorted(data["ranks"].items()):
        pts = sorted(pts)
        first = rank == min(data["ranks"])
        # rank 0 as open rings, the others as dots inside them: lockstep ranks stay visible
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o" if first else ".",
                ms=4.2 if first else 2.4, mfc="none" if first else None, mew=0.8,
                color=RANK_COLORS[rank % len(RANK_COLORS)], label=f"rank {rank}")
    for t0, t1 in data["restarts"]:
        ax.axvspan(t0, t1, color=MARK_COLORS["restart"], alpha=0.3, lw=0)
    for t0, t1 in data.get("reforms", []):
        ax.axvspan(t0, t1, color=MARK_COLORS["reform"], alpha=0.35, lw=0)
    for t0, t1 in data.get("transfers", []):
        ax.axvspan(t0, max(t1, t0 + 0.05), color=MARK_COLORS["transfer"], alpha=0.6, lw=0)
    for t0, t1 in data["restores"]:
        ax.axvspan(t0, t1, color=MARK_COLORS["restore"], alpha=0.8, lw=0)
    for t0, t1, kind in data["saves"]:
        c = MARK_COLORS["save"] if kind == "jit" else MARK_COLORS["checkpoint"]
        ax.axvspan(t0, max(t1, t0 + 0.05), color=c, alpha=0.55 if kind == "jit" else 0.35, lw=0)
    for t in data["faults"]:
        ax.axvline(t, color=MARK_COLORS["fault"], lw=1.4)
    for t in data["detect"]:
        ax.axvline(t, color=MARK_COLORS["detect"], lw=1.2, ls="--")
    ax.set_title(title, fontsize=9.5)
    ax.set_xlabel("time since start (s)")
    ax.set_ylabel("step completed")
    ax.set_ylim(bottom=0)
    ax.set_xlim(left=0)


def timeline_legend() -> list:
    return [Line2D([], [], color=RANK_COLORS[0], marker="o", mfc="none", ls="",
                   label="rank 0 step end"),
            Line2D([], [], color=RANK_COLORS[1], marker=".", ls="", label="rank 1 step end"),
            Line2D([], [], color=MARK_COLORS["fault"], lw=1.4, label="fault injected"),
            Line2D([], [], color=MARK_COLORS["detect"], lw=1.2, ls="--",
                   label="failure detected"),
            Patch(color=MARK_COLORS["save"], alpha=0.55, label="JIT save"),
            Patch(color=MARK_COLORS["checkpoint"], alpha=0.35,
                  label="periodic / async checkpoint"),
            Patch(color=MARK_COLORS["restart"], alpha=0.3, label="restart"),
            Patch(color=MARK_COLORS["reform"], alpha=0.35, label="re-form group"),
            Patch(color=MARK_COLORS["transfer"], alpha=0.6, label="state transfer"),
            Patch(color=MARK_COLORS["restore"], alpha=0.8, label="restore")]


def timelines_figure(cells: list[tuple[str, str, Path]], ncols: int = 4,
                     suptitle: str | None = None):
    """A grid of run timelines: ``cells`` is ``[(row label, column label, run_dir)]``;
    rows are laid out in order of first appearance, as are columns."""
    rows = list(dict.fromkeys(c[0] for c in cells))
    cols = list(dict.fromkeys(c[1] for c in cells))
    ncols = len(cols)
    fig, axes = plt.subplots(len(rows), ncols, figsize=(max(3.3 * ncols, 9.0), 2.6 * len(rows) + 1.2),
                             squeeze=False, sharey=True)
    where = {(r, c): d for r, c, d in cells}
    for i, r in enumerate(rows):
        for j, c in enumerate(cols):
            ax = axes[i][j]
            if (r, c) not in where:
                ax.axis("off")
                continue
            _draw_timeline(ax, timeline_data(where[(r, c)]), f"{c} · {r}")
            for side in ("left", "bottom"):
                ax.spines[side].set_color(strategy_color(c))
                ax.spines[side].set_linewidth(2)
            if j:
                ax.set_ylabel("")
    fig.legend(handles=timeline_legend(), loc="lower center", ncol=5, bbox_to_anchor=(0.5, 0))
    if suptitle:
        fig.suptitle(suptitle, fontweight="bold", x=0.01, ha="left")
    fig.tight_layout(rect=(0, 0.1, 1, 0.97))
    return fig


# ------------------------------------------------------------ recovery phases
def phase_table(t):
    """Median of each recovery phase per (workload, fault, strategy) over repeats (s);
    ``other_s`` = ``recovery_s`` minus the named phases (gaps, the first new step).
    ``save_s`` counts for ``jit`` (``jit:backstop=N`` too) only (the others saved
    before the fault, or, in process, write their backstop after the recovery)."""
    import pandas as pd

    d = t.copy()
    for k in PHASES[:-1]:
        if k not in d:
            d[k] = 0.0
        d[k] = pd.to_numeric(d[k], errors="coerce").fillna(0.0)
    # a periodic strategy's save_s is its last checkpoint *before* the fault: not a
    # recovery phase (only a JIT save happens inside the recovery window)
    d.loc[d["strategy"].map(strategy_family) != "jit", "save_s"] = 0.0  # jit:backstop=N too
    d["recovery_s"] = pd.to_numeric(d["recovery_s"], errors="coerce")
    d["other_s"] = (d["recovery_s"] - d[list(PHASES[:-1])].sum(axis=1)).clip(lower=0.0)
    return d.groupby(["workload", "fault", "strategy"], sort=False)[
        [*PHASES, "recovery_s"]].median().reset_index()


def _facets(t) -> tuple[list[str], list[str]]:
    return list(dict.fromkeys(t["workload"])), list(dict.fromkeys(t["fault"]))


def recovery_phases_figure(t):
    """Stacked bars: the recovery phases (s) per strategy, one panel per workload x fault."""
    p = phase_table(t)
    wls, faults = _facets(p)
    fig, axes = plt.subplots(len(wls), len(faults), figsize=(5.2 * len(faults), 3.2 * len(wls) + 0.6),
                             squeeze=False)
    for i, w in enumerate(wls):
        for j, f in enumerate(faults):
            ax = axes[i][j]
            sub = p[(p["workload"] == w) & (p["fault"] == f)]
            order = strategy_order(sub["strategy"])
            sub = sub.set_index("strategy").loc[order]
            bottom = [0.0] * len(order)
            for ph in PHASES:
                vals = sub[ph].tolist()
                ax.bar(order, vals, bottom=bottom, color=PHASE_COLORS[ph], edgecolor="white",
                       lw=0.6, label=PHASE_LABELS[ph])
                bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
            for k, total in enumerate(sub["recovery_s"].tolist()):
                if total == total:
                    ax.text(k, total, f"{total:.1f} s", ha="center", va="bottom", fontsize=8.5)
            ax.set_title(f"{w} · {f}")
            ax.set_ylabel("recovery time (s)")
            ax.margins(y=0.15)
            for lab in ax.get_xticklabels():
                lab.set_color(strategy_color(lab.get_text()))
                lab.set_fontweight("bold")
    handles = [Patch(color=PHASE_COLORS[ph], label=PHASE_LABELS[ph]) for ph in PHASES]
    fig.legend(handles=handles, loc="lower center", ncol=4, bbox_to_anchor=(0.5, 0))
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    return fig


# --------------------------------------------------------------- replay, waste
def _grouped_bars(t, column: str, ylabel: str, fmt: str, extra=None):
    import pandas as pd

    d = t.copy()
    d[column] = pd.to_numeric(d[column], errors="coerce")
    g = d.groupby(["workload", "fault", "strategy"], sort=False)[column].median().reset_index()
    groups = list(dict.fromkeys(zip(g["workload"], g["fault"], strict=True)))
    strategies = strategy_order(g["strategy"])
    fig, ax = plt.subplots(figsize=(max(7.0, 1.6 * len(groups) * max(1, len(strategies)) / 2.2),
                                    3.6))
    width = 0.8 / max(1, len(strategies))
    for k, s in enumerate(strategies):
        xs, ys = [], []
        for gi, (w, f) in enumerate(groups):
            row = g[(g["workload"] == w) & (g["fault"] == f) & (g["strategy"] == s)]
            if len(row):
                xs.append(gi + (k - (len(strategies) - 1) / 2) * width)
                ys.append(float(row[column].iloc[0]))
        bars = ax.bar(xs, ys, width=width * 0.95, color=strategy_color(s), label=s)
        for b, y in zip(bars, ys, strict=True):
            if y == y:
                ax.text(b.get_x() + b.get_width() / 2, y, fmt.format(y), ha="center",
                        va="bottom", fontsize=7.5)
    ax.set_xticks(range(len(groups)), [f"{w} · {f}" for w, f in groups])
    ax.set_ylabel(ylabel)
    ax.margins(y=0.15)
    ax.legend(ncol=len(strategies), loc="upper left")
    if extra:
        extra(ax)
    fig.tight_layout()
    return fig


def replay_figure(t):
    """Replayed steps per failure per strategy (median over repeats), grouped by workload x fault."""
    fig = _grouped_bars(t, "replayed_steps", "steps replayed per failure", "{:.0f}")
    fig.axes[0].set_title("Replayed work: steps completed before the fault and executed again")
    return fig


def wasted_figure(t):
    """Wasted GPU-seconds per run per strategy (median over repeats)."""
    fig = _grouped_bars(t, "wasted_gpu_s", "wasted GPU-seconds (rank-s)", "{:.1f}")
    fig.axes[0].set_title("Wasted GPU-seconds: checkpoint stalls + detection, restart, "
                          "restore, replay")
    return fig


# ------------------------------------------------------------------- overhead
def overhead_figure(summary, segments=None):
    """Steady-state overhead per strategy: the estimate as a bar with its 95% bootstrap
    interval (black error bar; the IQR of the per-repeat ratios when an older
    measurement has none), min-max of the repeats dotted, the repeats as dots, the A/A
    control's interval as a grey band and the +/-0.5% band."""
    import pandas as pd

    s = pd.DataFrame(summary)
    ci = "overhead_pct_lo" in s.columns
    lo_k, hi_k = ("overhead_pct_lo", "overhead_pct_hi") if ci else ("overhead_pct_q25",
                                                                    "overhead_pct_q75")
    ctrl = s[s["strategy"] == "none-aa"]
    s = s[~s["strategy"].isin(["none", "none-aa"])]
    order = strategy_order(s["strategy"])
    s = s.set_index("strategy").loc[order]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.5 * len(order) + 2), 3.6))
    if len(ctrl):
        c = ctrl.iloc[0]
        lo, hi = ((c[lo_k], c[hi_k]) if ci else
                  (min(c["overhead_pct_min"], 0), max(c["overhead_pct_max"], 0)))
        ax.axhspan(lo, hi, color="#adb5bd", alpha=0.3, lw=0,
                   label=f"A/A control (none vs none): {c['overhead_pct']:+.2f}%, "
                         + ("95% CI" if ci else "min-max"))
    ax.axhspan(-0.5, 0.5, color="#1b9e77", alpha=0.25, lw=0, label="±0.5% (JIT target)")
    ax.axhline(0, color="black", lw=0.8)
    for k, st in enumerate(order):
        r = s.loc[st]
        c = strategy_color(st)
        ax.bar(k, r["overhead_pct"], color=c, alpha=0.85, width=0.6)
        ax.errorbar(k, r["overhead_pct"], yerr=[[max(r["overhead_pct"] - r[lo_k], 0)],
                                                [max(r[hi_k] - r["overhead_pct"], 0)]],
                    color="black", capsize=6, lw=1.6)
        ax.vlines(k, r["overhead_pct_min"], r["overhead_pct_max"], color="black", lw=0.8,
                  ls=":")
        ax.text(k + 0.33, r["overhead_pct"], f"{r['overhead_pct']:+.2f}%", va="center",
                fontsize=8.5)
        if segments is not None:
            seg = pd.DataFrame(segments)
            base = seg[seg["strategy"] == "none"].set_index("repeat")["step_s"]
            mine = seg[seg["strategy"] == st].set_index("repeat")["step_s"]
            pct = (100 * (mine / base - 1)).dropna()
            ax.plot([k - 0.15] * len(pct), pct, "o", ms=3, color="black", alpha=0.5)
    ax.set_xticks(range(len(order)), order)
    for lab in ax.get_xticklabels():
        lab.set_color(strategy_color(lab.get_text()))
        lab.set_fontweight("bold")
    ax.set_ylabel("step time vs none (%)")
    ax.set_title("Steady-state overhead: estimate, " + ("95% bootstrap CI" if ci else "IQR")
                 + " (bar), min-max (dotted), repeats (dots)")
    ax.margins(y=0.08)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2)
    fig.tight_layout()
    return fig


def close(fig) -> None:
    plt.close(fig)
