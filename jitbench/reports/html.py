"""``jitbench report``: one self-contained HTML file and a markdown file.

Reads records only: a sweep's ``results.parquet`` (or a single run's
``records``; :func:`jitbench.records.load_results`), each run's ``phases.parquet``
for its timeline, and an overhead
measurement's ``overhead.csv``/``overhead_segments.csv``. The HTML embeds
every plot as a base64 PNG and its CSS inline, so it opens with no network
and can be mailed or attached to a CI job. The markdown holds the same tables
and links the PNGs, written beside it into ``<name>_files/``.
"""

from __future__ import annotations

import base64
import html
import io
import json
import time
from pathlib import Path

from jitbench import records
from jitbench.errors import InputError, SpecError
from jitbench.reports.table import fmt

CSS = """
body{font-family:-apple-system,BlinkMacSystemFont,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;
 color:#1f2933;background:#f5f7fa;margin:0}
main{max-width:1280px;margin:0 auto;padding:24px 32px 48px}
h1{font-size:26px;margin:8px 0 2px} h2{font-size:19px;margin:34px 0 8px;border-bottom:2px solid #e4e7eb;
 padding-bottom:4px} .sub{color:#616e7c;font-size:13px;margin-bottom:18px}
.cards{display:flex;gap:14px;flex-wrap:wrap;margin:14px 0}
.card{background:#fff;border-radius:10px;padding:12px 16px;box-shadow:0 1px 3px rgba(0,0,0,.08);
 min-width:150px} .card .v{font-size:22px;font-weight:700} .card .k{font-size:12px;color:#616e7c}
.ok{color:#1b7f4b} .bad{color:#c62828}
table{border-collapse:collapse;background:#fff;font-size:12.5px;box-shadow:0 1px 3px rgba(0,0,0,.08);
 border-radius:8px;overflow:hidden} th,td{padding:5px 9px;text-align:right;border-bottom:1px solid #eef0f3}
th{background:#323f4b;color:#fff;font-weight:600;position:sticky;top:0} td.l,th.l{text-align:left}
tr:nth-child(even) td{background:#fafbfc} .pill{display:inline-block;padding:1px 8px;border-radius:9px;
 color:#fff;font-weight:600;font-size:11.5px}
figure{background:#fff;margin:12px 0;padding:10px;border-radius:10px;box-shadow:0 1px 3px rgba(0,0,0,.08)}
figure img{max-width:100%;display:block;margin:auto} figcaption{font-size:12.5px;color:#52606d;margin:6px 4px 0}
.note{font-size:12.5px;color:#52606d;max-width:980px} code{background:#eef0f3;padding:0 3px;border-radius:3px}
dl{font-size:12.5px;display:grid;grid-template-columns:190px 1fr;gap:3px 14px} dt{font-weight:600}
"""

METRIC_NOTES = [
    ("detect_s", "fault injected -> first survivor declares the failure"),
    ("save_s", "JIT save begin -> durable (slowest rank); periodic: the last checkpoint "
               "before the fault; async: request -> commit"),
    ("restart_s", "last process of the failed attempt gone -> every new rank initialised"),
    ("restore_s", "checkpoint load, begin -> end (slowest rank)"),
    ("replay_s / replayed_steps", "re-executing steps that had completed before the fault"),
    ("recovery_s", "fault -> first step completed that had not completed before the fault"),
    ("expected replay", "steps since the newest committed checkpoint: what a restore that "
                        "picks it must replay (the replay invariant)"),
    ("wasted_gpu_s", "rank-seconds not spent on new progress: checkpoint stalls, detection, "
                     "restart, restore, replay"),
    ("goodput", "useful step time / wall time of training"),
    ("state_equal", "final model + optimizer state bitwise equal to the fault-free reference "
                    "(max_abs_diff beside it)"),
    ("overhead_pct", "step time under a strategy over step time with no checkpointing, minus "
                     "one, from interleaved segments of one launch (median over repeats)"),
]


def _png(fig) -> bytes:
    from jitbench.reports import plots

    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    plots.close(fig)
    return buf.getvalue()


def _fmt(v, digits: int = 2) -> str:
    return fmt(v, digits, none="–", yes="✓", no="✗")


def _load_table(d: Path):
    """The results of a sweep dir or the one-row records of a run dir
    (:func:`jitbench.records.load_results`); None if neither is there."""
    table = records.find_table(d)
    if table is None:
        return None
    try:
        return records.load_results(d)
    except InputError as exc:  # the CLI catches SpecError (an InputError) until it
        raise SpecError(str(exc)) from None  # catches every JitbenchError


def _run_dir(root: Path, recorded: str) -> Path | None:
    p = Path(str(recorded))
    if (p / "events").is_dir():
        return p
    for cand in (root / "runs" / p.name, root / p.name, root):
        if (cand / "events").is_dir():
            return cand
    return None


def _load_overhead(*dirs: Path | None):
    import pandas as pd

    for d in dirs:
        if d is None:
            continue
        for cand in (d, d / "overhead"):
            if (cand / "overhead.csv").exists():
                summ = pd.read_csv(cand / "overhead.csv")
                segs = (pd.read_csv(cand / "overhead_segments.csv")
                        if (cand / "overhead_segments.csv").exists() else None)
                meta = (json.loads((cand / "overhead.json").read_text())
                        if (cand / "overhead.json").exists() else {})
                return summ, segs, meta
    return None, None, {}


def _pill(strategy: str) -> str:
    from jitbench.reports.plots import strategy_color

    return (f'<span class="pill" style="background:{strategy_color(strategy)}">'
            f'{html.escape(str(strategy))}</span>')


RESULT_COLS = [("workload", "workload"), ("strategy", "strategy"), ("fault", "fault"),
               ("repeat", "rep"), ("detect_s", "detect s"), ("save_s", "save s"),
               ("restart_s", "restart s"), ("restore_s", "restore s"), ("replay_s", "replay s"),
               ("recovery_s", "recovery s"), ("replayed_steps", "replayed"),
               ("expected_replayed_steps", "expected"), ("wasted_gpu_s", "wasted GPU-s"),
               ("goodput", "goodput"), ("state_equal", "state equal"),
               ("max_abs_diff", "max |diff|")]


def _results_html(t) -> str:
    head = "".join(f'<th class="{"l" if k in ("workload", "strategy", "fault") else ""}">'
                   f"{html.escape(lab)}</th>" for k, lab in RESULT_COLS)
    rows = []
    for _, r in t.iterrows():
        cells = []
        for k, _ in RESULT_COLS:
            v = r.get(k)
            if k == "strategy":
                cells.append(f'<td class="l">{_pill(v)}</td>')
            elif k in ("workload", "fault"):
                cells.append(f'<td class="l">{html.escape(str(v))}</td>')
            elif k == "state_equal":
                good = bool(v) if v == v and v is not None else False
                cells.append(f'<td class="{"ok" if good else "bad"}"><b>{_fmt(good)}</b></td>')
            elif k == "replayed_steps":
                ok = r.get("replay_ok")
                ok = bool(ok) if ok == ok and ok is not None else False
                cells.append(f'<td class="{"ok" if ok else "bad"}">{_fmt(v)}</td>')
            elif k == "max_abs_diff":
                cells.append(f"<td>{_fmt(v, 3)}</td>")
            else:
                cells.append(f"<td>{_fmt(v)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def _md_table(rows, cols, left=(), digits=lambda k: 2) -> str:
    """A markdown table of ``rows`` (dicts or pandas rows) with ``cols`` ``(key,
    label)``: ``left`` keys left-aligned, the rest right; ``digits(key)`` decimals."""
    lines = ["| " + " | ".join(lab for _, lab in cols) + " |",
             "|" + "|".join("---" if k in left else "---:" for k, _ in cols) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(_fmt(r.get(k), digits(k)) for k, _ in cols) + " |")
    return "\n".join(lines)


def _results_md(t) -> str:
    return _md_table((r for _, r in t.iterrows()), RESULT_COLS, ("workload", "strategy", "fault"),
                     lambda k: 3 if k == "max_abs_diff" else 2)


OVERHEAD_COLS = [("strategy", "strategy"), ("repeats", "repeats"), ("step_s", "step s (median)"),
                 ("overhead_pct", "overhead % (median)"), ("overhead_pct_q25", "q25 %"),
                 ("overhead_pct_q75", "q75 %"), ("overhead_pct_min", "min %"),
                 ("overhead_pct_max", "max %"), ("cpu_overhead_pct", "CPU-time overhead %"),
                 ("rt_us", "runtime hot path µs/step"),
                 ("within_noise", "within noise")]


def _overhead_html(s) -> str:
    head = "".join(f'<th class="{"l" if k == "strategy" else ""}">{html.escape(lab)}</th>'
                   for k, lab in OVERHEAD_COLS)
    rows = []
    for _, r in s.iterrows():
        cells = []
        for k, _ in OVERHEAD_COLS:
            v = r.get(k)
            if k == "strategy" and v == "none-aa":
                cells.append('<td class="l">none (A/A control)</td>')
            elif k == "strategy":
                cells.append(f'<td class="l">{_pill(v)}</td>')
            elif k == "step_s":
                cells.append(f"<td>{_fmt(v, 4)}</td>")
            elif k.startswith("overhead_pct") or k == "cpu_overhead_pct":
                cells.append(f"<td>{_fmt(v) if v != v or v is None else f'{v:+.2f}'}</td>")
            elif k == "rt_us":
                cells.append(f"<td>{_fmt(v, 0)}</td>")
            else:
                cells.append(f"<td>{_fmt(v)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def _overhead_md(s) -> str:
    return _md_table((r for _, r in s.iterrows()), OVERHEAD_COLS, ("strategy",),
                     lambda k: 4 if k == "step_s" else 2)


VALIDATION_COLS = [("workload", "workload"), ("strategy", "strategy"), ("fault", "fault"),
                   ("runs", "runs"),
                   ("failures", "failures"), ("measured_wasted_gpu_s", "measured wasted GPU-s"),
                   ("predicted_wasted_gpu_s", "predicted wasted GPU-s"),
                   ("error_pct", "error %"), ("within_tolerance", "within tolerance"),
                   ("phases_from", "phase costs from")]
SCALE_COLS = [("n_gpus", "GPUs"), ("strategy", "strategy"), ("interval_s", "interval s"),
              ("failures_per_day", "failures/day"),
              ("analytic_wasted_gpu_hours_per_day", "wasted GPU-h/day (analytic)"),
              ("sim_wasted_gpu_hours_per_day_mean", "wasted GPU-h/day (simulated)"),
              ("analytic_goodput", "goodput (analytic)"), ("sim_goodput_mean",
                                                           "goodput (simulated)")]


def _df_html(rows, cols) -> str:
    """An HTML table of ``rows`` (dicts) with ``cols`` ``(key, label)``; text left, numbers right."""
    head = "".join(f"<th>{html.escape(lab)}</th>" for _, lab in cols)
    body = []
    for r in rows:
        cells = []
        for k, _ in cols:
            v = r.get(k)
            if k == "strategy":
                cells.append(f'<td class="l">{_pill(v)}</td>')
            elif isinstance(v, bool):
                cells.append(f'<td class="{"ok" if v else "bad"}"><b>{_fmt(v)}</b></td>')
            elif isinstance(v, str):
                cells.append(f'<td class="l">{html.escape(v)}</td>')
            elif k == "n_gpus":
                cells.append(f"<td>{int(v):,}</td>")
            else:
                cells.append(f"<td>{_fmt(v, 3 if 'goodput' in k else 2)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _df_md(rows, cols) -> str:
    return _md_table(rows, cols, ("workload", "strategy", "fault", "phases_from"),
                     lambda k: 3 if "goodput" in k else 2)


def _model_sections(d: Path, t, figures: list) -> tuple[list[str], list[str]]:
    """HTML and markdown of the model sections (validation, at scale); appends the
    at-scale figure to ``figures`` and refers to it by its index."""
    from jitbench.reports import scale
    from jitbench.reports.validate import TOLERANCE_PCT

    body: list[str] = []
    md: list[str] = []
    vt = scale.validation(d)
    if vt is not None:
        rows = vt.to_dict("records")
        ok = sum(bool(r["within_tolerance"]) for r in rows)
        body += ["<h2>Model vs measurement</h2>",
                 '<p class="note">For each group of runs with failures, the wasted-work model '
                 "(Young/Daly for periodic, one recovery plus half a minibatch per failure for "
                 "JIT) predicts the wasted GPU-seconds from measured phase medians (of the "
                 "group's other runs when it has several: out of sample) "
                 "and its number of failures; beside it the wasted GPU-seconds measured from "
                 f"the events. Target: within {TOLERANCE_PCT:.0f}% ({ok}/{len(rows)} groups). "
                 "Seeded Poisson campaigns: <code>jitbench sweep --fault-mtbf-steps</code>.</p>",
                 _df_html(rows, VALIDATION_COLS)]
        md += ["## Model vs measurement", "",
               f"Predicted vs measured wasted GPU-seconds per group with failures "
               f"(target within {TOLERANCE_PCT:.0f}%: {ok}/{len(rows)} groups).", "",
               _df_md(rows, VALIDATION_COLS), ""]
    sc = scale.at_scale(t) if t is not None and len(t) else None
    if sc is not None:
        p = sc.params
        measured = ", ".join(sc.measured)
        defaults = ", ".join(f"{k} {v:g} s" for k, v in p.items()
                             if k not in sc.measured and k != "mtbf_hours_per_gpu")
        caption = (f"Lines: analytic model; points: simulated mean with p5-p95 over "
                   f"{scale.SCALE_TRIALS} seeded one-day traces. Costs measured in these results: "
                   f"{measured}" + (f"; not measured, the model's defaults: {defaults}"
                                    if defaults else "")
                   + f". Per-GPU MTBF {p['mtbf_hours_per_gpu']:,.0f} h (Llama 3 report, 419 "
                   "interruptions in 54 days on 16,384 GPUs); failure causes weighted as its "
                   "Table 5. JIT's waste at scale is dominated by the failures it cannot cover "
                   "(every replica of some state lost), which fall back to its infrequent "
                   "periodic checkpoint (6 h by default)"
                   + ("; periodic's by its checkpoint cost, tiny for the small models measured "
                      "here." if "checkpoint_s" in sc.measured else "."))
        figures.append(("scale", "Wasted work and goodput vs world size", caption, sc.png))
        idx = len(figures) - 1
        pairs: dict[tuple[str, str], list[dict]] = {}
        for c in sc.crossovers:
            pairs.setdefault((c["a"], c["b"]), []).append(c)
        cross = "; ".join(
            f"{a} vs {b}: " + ", ".join([f"{cs[0]['below']} cheaper below {cs[0]['n_gpus']:,} GPUs"]
                                        + [f"{c['above']} from {c['n_gpus']:,}" for c in cs])
            for (a, b), cs in pairs.items()) or "none in 1-100,000 GPUs"
        body += ["<h2>From this machine to 100,000 GPUs</h2>",
                 f'<p class="note">Crossovers (analytic): {html.escape(cross)}.</p>',
                 f"<!--fig{idx}-->",
                 _df_html([r for r in sc.rows if r["strategy"] != "jit-transparent"],
                          SCALE_COLS)]
        md += ["## From this machine to 100,000 GPUs", "", f"Crossovers (analytic): {cross}.",
               "", f"<!--fig{idx}-->", "",
               _df_md([r for r in sc.rows if r["strategy"] != "jit-transparent"], SCALE_COLS), ""]
    return body, md


def write_report(directory: Path, out_path: Path | None = None, overhead_dir: Path | None = None,
                 max_timelines: int = 16) -> tuple[Path, Path]:
    """Write ``report.html`` (self-contained) and ``report.md`` for a sweep or run directory.

    Returns:
        ``(html_path, markdown_path)``.

    Raises:
        SpecError: the directory holds neither results, records nor an overhead measurement.
    """
    from jitbench.reports import plots

    d = Path(directory)
    if not d.is_dir():
        raise SpecError(f"{directory} is not a directory")
    if out_path is not None and Path(out_path).is_dir():
        raise SpecError(f"--out {out_path} is a directory; give the HTML file to write")
    if overhead_dir is not None and _load_overhead(overhead_dir)[0] is None:
        raise SpecError(f"--overhead {overhead_dir}: no overhead.csv there")
    t = _load_table(d)
    osum, osegs, ometa = _load_overhead(overhead_dir, d)
    if t is None and osum is None:
        raise SpecError(f"{directory}: no results.parquet, records.csv or overhead.csv to report")
    html_path = Path(out_path) if out_path else d / "report.html"
    if html_path.suffix.lower() == ".md":
        raise SpecError(f"--out {out_path}: give the HTML file to write; the markdown is "
                        f"written beside it ({html_path.stem}.md), so it would replace the HTML")
    md_path = html_path.with_suffix(".md")
    files_dir = html_path.with_name(html_path.stem + "_files")
    try:
        files_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecError(f"cannot write the report into {html_path.parent}: "
                        f"{exc.strerror}") from None
    figures: list[tuple[str, str, str, bytes]] = []  # (section, title, caption, png)

    meta: dict = {}
    if (d / "sweep.json").exists():
        meta = json.loads((d / "sweep.json").read_text())
    if t is not None and len(t):
        t = t.copy()
        order = {s: i for i, s in enumerate(plots.strategy_order(t["strategy"]))}
        t["_o"] = t["strategy"].map(order)
        t = t.sort_values(["workload", "fault", "_o", "repeat"], kind="stable").drop(columns="_o")
        failed = t[t["recovery_s"].notna()] if "recovery_s" in t else t
        if len(failed) and "fault" in t and (t["fault"] != "none").any():
            figures.append(("recovery", "Recovery time by phase",
                            "Median over repeats of each phase, stacked; the label is "
                            "recovery_s (fault -> first new step completed).",
                            _png(plots.recovery_phases_figure(failed))))
            figures.append(("replay", "Replayed work per failure",
                            "Steps completed before the fault and executed again: JIT replays "
                            "at most one, periodic the steps since its last committed "
                            "checkpoint, none everything.",
                            _png(plots.replay_figure(failed))))
            figures.append(("waste", "Wasted GPU-seconds per run",
                            "world size x (recovery + the interrupted step's lost work - one "
                            "step) + checkpoint stalls.", _png(plots.wasted_figure(failed))))
        cells: dict[str, list] = {}
        for _, r in t.iterrows():
            if int(r.get("repeat", 0) or 0) != 0:
                continue
            rd = _run_dir(d, r.get("run_dir", d))
            if rd is None:
                continue
            cells.setdefault(str(r["workload"]), []).append((str(r["fault"]), str(r["strategy"]),
                                                             rd))
        drawn = 0
        for w, cs in cells.items():
            cs = cs[:max(0, max_timelines - drawn)]
            if not cs:
                break
            drawn += len(cs)
            figures.append(("timeline", f"Timelines: {w}",
                            "Each dot is a rank finishing a step. Red line: fault injected; "
                            "orange dashed: failure detected; green: JIT save; grey band: "
                            "restart; yellow: restore; blue: periodic/async checkpoints. "
                            "A drop of the step count after the restart is replayed work.",
                            _png(plots.timelines_figure(cs, suptitle=None))))
    if osum is not None:
        figures.append(("overhead", "Steady-state overhead",
                        "Each strategy's step time over the adjacent none segment's in the same "
                        "repeat, minus one. Bar: median; black error bar: interquartile range; "
                        "dotted: min-max; dots: the repeats. Grey band: the A/A control (a "
                        "second none segment per repeat), i.e. the measurement's noise; green "
                        "band: ±0.5%.",
                        _png(plots.overhead_figure(osum.to_dict("records"),
                                                   osegs.to_dict("records")
                                                   if osegs is not None else None))))

    mbody, mmd = _model_sections(d, t, figures)
    for i, (_, _, _, png) in enumerate(figures):
        _save(files_dir / f"fig{i:02d}.png", png)

    # ------------------------------------------------------------ HTML
    title = "jitbench report"
    sub = [f"source: <code>{html.escape(str(d.resolve()))}</code>"]
    if meta:
        mach = meta.get("machine", {})
        sub.append(f"sweep wall time {meta.get('wall_s', 0):.0f} s · {meta.get('runs')} runs · "
                   f"code {html.escape(str(meta.get('code_version')))} · "
                   f"{html.escape(str(mach.get('host')))} ({mach.get('cpus')} CPUs, torch "
                   f"{html.escape(str(mach.get('torch')))}) · {html.escape(str(meta.get('created')))}")
    sub.append(f"generated {time.strftime('%Y-%m-%d %H:%M:%S')}")
    body = [f"<h1>{title}</h1>", f'<div class="sub">{"<br>".join(sub)}</div>']
    md = [f"# {title}", "", f"source: `{d.resolve()}`", ""]
    if t is not None and len(t):
        n = len(t)
        eq = int((t["state_equal"] == True).sum())  # noqa: E712
        rok = int((t.get("replay_ok") == True).sum()) if "replay_ok" in t else 0  # noqa: E712
        cards = [("runs", str(n), ""),
                 ("state_equal", f"{eq}/{n}", "ok" if eq == n else "bad"),
                 ("replay invariant", f"{rok}/{n}", "ok" if rok == n else "bad")]
        for s in plots.strategy_order(t["strategy"]):
            rec = t[t["strategy"] == s]["recovery_s"].median()
            cards.append((f"median recovery · {s}", f"{_fmt(rec, 1)} s", ""))
        body.append('<div class="cards">' + "".join(
            f'<div class="card"><div class="v {c}">{html.escape(v)}</div>'
            f'<div class="k">{html.escape(k)}</div></div>' for k, v, c in cards) + "</div>")
        body.append("<h2>Results</h2>")
        body.append('<p class="note">One row per run (times in seconds). Replayed is green when '
                    "the run replayed exactly the steps since its newest committed checkpoint "
                    "(and at most one under JIT).</p>")
        body.append(_results_html(t))
        md += ["## Results", "", _results_md(t), ""]
    def fig_html(i: int, ftitle: str, caption: str, png: bytes) -> str:
        b64 = base64.b64encode(png).decode()
        return (f'<figure><img alt="{html.escape(ftitle)}" src="data:image/png;base64,{b64}">'
                f"<figcaption><b>{html.escape(ftitle)}.</b> {html.escape(caption)}"
                "</figcaption></figure>")

    sections = [("recovery", "Recovery"), ("replay", "Replayed work"), ("waste", "Wasted work"),
                ("overhead", "Steady-state overhead"), ("timeline", "Timelines")]
    for sec, heading in sections:
        figs = [(i, f) for i, f in enumerate(figures) if f[0] == sec]
        if sec == "overhead" and osum is not None:
            body.append(f"<h2>{heading}</h2>")
            if ometa:
                body.append(f'<p class="note">{html.escape(str(ometa.get("workload")))} x'
                            f'{ometa.get("world_size")} ranks, {ometa.get("repeats")} repeats of '
                            f'{ometa.get("segment_steps")}-step segments per strategy, '
                            f'interleaved in one launch ({ometa.get("wall_s", 0):.0f} s). The '
                            "runtime hot path is the runtime's own time per step (lock, "
                            "snapshot), measured directly: free of the machine's noise.</p>")
            body.append(_overhead_html(osum))
            md += [f"## {heading}", "", _overhead_md(osum), ""]
        elif figs:
            body.append(f"<h2>{heading}</h2>")
            md += [f"## {heading}", ""]
        for i, (_, ftitle, caption, png) in figs:
            body.append(fig_html(i, ftitle, caption, png))
            md += [f"![{ftitle}]({files_dir.name}/fig{i:02d}.png)", "", caption, ""]
    for i, (_, ftitle, caption, png) in enumerate(figures):  # the model sections' figures
        mbody = [fig_html(i, ftitle, caption, png) if b == f"<!--fig{i}-->" else b for b in mbody]
        mmd = [f"![{ftitle}]({files_dir.name}/fig{i:02d}.png)\n\n{caption}"
               if b == f"<!--fig{i}-->" else b for b in mmd]
    body += mbody
    md += mmd
    body.append("<h2>Metrics</h2><dl>" + "".join(
        f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>" for k, v in METRIC_NOTES) + "</dl>")
    md += ["## Metrics", ""] + [f"- `{k}`: {v}" for k, v in METRIC_NOTES]
    page = (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
            f'<meta name="viewport" content="width=device-width,initial-scale=1">'
            f"<style>{CSS}</style></head><body><main>{''.join(body)}</main></body></html>")
    _save(html_path, page.encode("utf-8"))
    _save(md_path, ("\n".join(md) + "\n").encode("utf-8"))
    return html_path, md_path


def _save(path: Path, data: bytes) -> None:
    """Write one report file; an OS error (full disk, no permission) is one line."""
    try:
        path.write_bytes(data)
    except OSError as exc:
        raise SpecError(f"cannot write {path}: {exc.strerror}") from None
