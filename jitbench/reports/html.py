"""``jitbench report``: one self-contained HTML file and a markdown file.

Reads records only: a sweep's ``results.parquet`` (or a single run's
``records``; :func:`jitbench.records.load_results`), each run's ``phases.parquet``
for its timeline, and an overhead
measurement's ``overhead.csv``/``overhead_segments.csv``. The HTML embeds
every plot as a base64 PNG and its CSS inline, so it opens with no network
and can be mailed or attached to a CI job. The page is rendered from the
Jinja2 template ``templates/report.html.j2`` (autoescaped); every table, in
the HTML and the markdown, from the column lists of :mod:`jitbench.reports.table`. The markdown holds the same tables
and links the PNGs, written beside it into ``<name>_files/``, which it marks as its
own (:data:`FILES_MARKER`): the report replaces no file it did not write.
"""

from __future__ import annotations

import base64
import io
import json
import re
import time
from collections.abc import Callable
from pathlib import Path

from markupsafe import Markup

from jitbench import records
from jitbench.errors import SpecError
from jitbench.reports.table import (
    OVERHEAD_COLUMNS,
    REPORT,
    RESULT_COLUMNS,
    SCALE_COLUMNS,
    VALIDATION_COLUMNS,
    cell,
    fmt,
    good,
    markdown_table,
    truth,
)

METRIC_NOTES = [
    ("detect_s", "fault injected -> first survivor declares the failure"),
    ("save_s", "JIT save begin -> durable (slowest rank); periodic: the last checkpoint "
               "before the fault; async: request -> commit"),
    ("restart_s", "last process of the failed attempt gone -> every new rank initialised"),
    ("restore_s", "checkpoint load, begin -> end (slowest rank); a launched script's "
                  "(script: rows): its process group ready -> its first step (under jit: "
                  "the fast-forward's load of the JIT checkpoint)"),
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


REPORT_COLUMNS = (*records.KEY_COLUMNS, "repeat", "recovery_s", "wasted_gpu_s", "replayed_steps")
"""Columns the report's tables and figures read: every records table has them (empty
for a run without a failure; ``repeat`` added to a run's records on loading)."""


def _load_table(d: Path):
    """The results of a sweep dir or the one-row records of a run dir
    (:func:`jitbench.records.load_results`), and how many of its rows have no run
    directory there (their ``failures.csv`` unchecked:
    :func:`jitbench.reports.evidence.check_evidence`); ``(None, 0)`` if neither is
    there. A table without a column of :data:`REPORT_COLUMNS` is refused in one line,
    like one without a key column (:class:`jitbench.errors.InputError`), before
    anything is written."""
    from jitbench.reports.evidence import check_evidence

    if records.find_table(d) is None:
        return None, 0
    t = records.load_results(d, require=REPORT_COLUMNS)
    return t, check_evidence(t, str(records.find_table(d)), d)


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
                return summ, segs, _read_meta(cand / "overhead.json",
                                              "overhead measurement's description")
    return None, None, {}


BY_REPLICAS_NOTE = (
    "jit vs periodic crossover (analytic): plain data parallel (ddp) and hybrid sharding "
    "with R replicas of each shard (hsdp R, world sizes a multiple of R; R = 1 is full "
    "sharding). A failure that leaves a shard without a replica gives JIT nothing to save: "
    "it falls back to the last periodic checkpoint. Costs from the runs of that layout "
    "(an R not measured: every hsdp run's).")
"""The note above the report's crossover-by-layout table."""


def _model_sections(d: Path, t, figures: list) -> tuple[dict, list[str]]:
    """Template context and markdown of the model sections (validation, at scale);
    appends the at-scale figure to ``figures``."""
    from jitbench.reports import scale
    from jitbench.reports.validate import TOLERANCE_PCT

    ctx: dict = {"validation": None, "scale": None}
    md: list[str] = []
    vt = scale.validation(d)
    if vt is not None:
        rows = vt.to_dict("records")
        ok = sum(bool(r["within_tolerance"]) for r in rows)
        ctx["validation"] = {"rows": rows, "ok": ok, "tolerance": f"{TOLERANCE_PCT:.0f}"}
        md += ["## Model vs measurement", "",
               f"Predicted vs measured wasted GPU-seconds per group with failures "
               f"(target within {TOLERANCE_PCT:.0f}%: {ok}/{len(rows)} groups).", "",
               markdown_table(rows, VALIDATION_COLUMNS), ""]
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
        rows = [r for r in sc.rows if r["strategy"] != "jit-transparent"]
        by_r = [{"layout": b["layout"] + (" (measured)" if b["measured"] else ""),
                 "costs": b["costs"], "text": b["text"]} for b in sc.by_replicas]
        ctx["scale"] = {"crossovers": cross, "figure": idx, "rows": rows, "by_replicas": by_r,
                        "layout": sc.layout}
        md += ["## From this machine to 100,000 GPUs", "",
               f"Crossovers (analytic, {sc.layout}): {cross}.", ""]
        if by_r:
            md += [f"Where sharding moves the {BY_REPLICAS_NOTE}", "",
                   "| layout | costs from | jit vs periodic |", "|---|---|---|",
                   *[f"| {b['layout']} | {b['costs']} | {b['text']} |" for b in by_r], ""]
        md += [f"<!--fig{idx}-->", "", markdown_table(rows, SCALE_COLUMNS), ""]
    return ctx, md


def _template():
    """The report's Jinja2 template (package data, autoescaping on)."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    return env.get_template("report.html.j2")


SECTIONS = (("recovery", "Recovery"), ("replay", "Replayed work"), ("waste", "Wasted work"),
            ("overhead", "Steady-state overhead"), ("timeline", "Timelines"))
"""The report's figure sections, in order (the model sections follow them)."""
TEMPLATES = Path(__file__).parent / "templates"
"""Package data: ``report.html.j2`` (the page) and ``report.css`` (inlined into it)."""
CSS = TEMPLATES / "report.css"


FILES_MARKER = ".jitbench-report"
"""The file a report writes first into its figures folder ``<name>_files/``: a folder
that holds files but not this one is not the report's, and is never written into."""
FILES_MARKER_TEXT = "jitbench report figures: this folder is rewritten by jitbench report\n"
"""What :data:`FILES_MARKER` says to whoever opens it."""
FIGURE_NAME = re.compile(r"fig\d{2,}\.png")
"""The name of a figure the report writes (``fig00.png``, ...)."""


def _owns_files_dir(files_dir: Path, html_path: Path) -> bool:
    """Whether the report for ``html_path`` may write into ``files_dir``: absent or
    empty, marked as a report's (:data:`FILES_MARKER`), or written before that marker
    existed: nothing but figure files beside a jitbench report (``html_path`` or the
    markdown of the same name)."""
    try:
        names = [e.name for e in files_dir.iterdir()]
    except FileNotFoundError:
        return True
    except OSError:
        return False  # a file of that name, or unreadable: not the report's folder
    if not names or (files_dir / FILES_MARKER).is_file():
        return True
    # a report kept as markdown only (its HTML deleted) still owns its folder
    return ((_is_report(html_path) or _is_report(html_path.with_suffix(".md")))
            and all(FIGURE_NAME.fullmatch(n) for n in names))


def _is_report(path: Path) -> bool:
    """Whether ``path`` is a report this module wrote (HTML: its title; markdown: its
    first line), so writing the report again may replace it."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    if path.suffix.lower() == ".md":
        return head.startswith(b"# jitbench report\n")
    return head.lower().startswith(b"<!doctype html>") and b"<title>jitbench report</title>" in head


def write_report(directory: Path, out_path: Path | None = None, overhead_dir: Path | None = None,
                 max_timelines: int = 16,
                 preflight: Callable[[Path, Path, Path], None] | None = None,
                 on_note: Callable[[str], None] | None = None) -> tuple[Path, Path]:
    """Write ``report.html`` (self-contained) and ``report.md`` for a sweep or run directory.

    ``preflight(html_path, markdown_path, figures_dir)``, when given, is called once the
    inputs are read and the outputs found to be a report's or new, before any figure is
    drawn (seconds): the CLI refuses there, in one line, an output it cannot write.
    ``on_note(line)``, when given, receives each note line once the report is written:
    how many rows have no run directory, so that their ``failures.csv`` was not checked
    (the report says it under its results table too).

    Returns:
        ``(html_path, markdown_path)``.

    Raises:
        SpecError: the directory holds neither results, records nor an overhead
            measurement; ``out_path`` is a directory, a markdown file, or (it or the
            markdown beside it) an existing file that is not a jitbench report, or its
            figures folder ``<name>_files/`` holds files and is not a report's
            (:func:`_owns_files_dir`: no :data:`FILES_MARKER`, and not only the figures
            of an earlier report kept beside it); ``sweep.json`` is unreadable.
    """
    from jitbench.reports import plots

    d = Path(directory)
    if not d.is_dir():
        raise SpecError(f"{directory} is not a directory")
    if out_path is not None and Path(out_path).is_dir():
        raise SpecError(f"--out {out_path} is a directory; give the HTML file to write")
    if overhead_dir is not None and _load_overhead(overhead_dir)[0] is None:
        raise SpecError(f"--overhead {overhead_dir}: no overhead.csv there")
    t, unchecked = _load_table(d)
    osum, osegs, ometa = _load_overhead(overhead_dir, d)
    if t is None and osum is None:
        records.check_unfinished_sweep(d, str(directory))  # interrupted before any cell
        raise SpecError(f"{directory}: no results.parquet, records.csv or overhead.csv to report")
    html_path = Path(out_path) if out_path else d / "report.html"
    if html_path.suffix.lower() == ".md":
        raise SpecError(f"--out {out_path}: give the HTML file to write; the markdown is "
                        f"written beside it ({html_path.stem}.md), so it would replace the HTML")
    md_path = html_path.with_suffix(".md")
    for target in (html_path, md_path):  # nothing recorded is lost to a report
        if target.exists() and not _is_report(target):
            raise SpecError(f"--out {out_path or html_path}: {target} exists and is not a "
                            f"jitbench report; give a new file name (the report never "
                            f"replaces other files)")
    files_dir = html_path.with_name(html_path.stem + "_files")
    if not _owns_files_dir(files_dir, html_path):
        raise SpecError(f"--out {out_path or html_path}: {files_dir} exists and is not a "
                        f"jitbench report's figures folder; give a new file name (the "
                        f"report never replaces other files)")
    if preflight is not None:
        preflight(html_path, md_path, files_dir)
    meta = _sweep_meta(d)
    figures: list[tuple[str, str, str, bytes]] = []  # (section, title, caption, png)
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
            rep = r.get("repeat", 0)
            # a timeline of the first repeat only (an unrecorded repeat counts as it)
            if rep is not None and rep == rep and rep != 0:
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
                        "Each strategy's step time over none's, summed over the repeats of "
                        "a balanced (Williams) segment order, minus one. Bar: the estimate; "
                        "black error bar: its 95% bootstrap interval over the repeats; "
                        "dotted: min-max of the per-repeat ratios; dots: the repeats. Grey "
                        "band: the A/A control's interval (a second none segment per repeat): "
                        "a verdict is given only when it contains 0; green band: ±0.5%.",
                        _png(plots.overhead_figure(osum.to_dict("records"),
                                                   osegs.to_dict("records")
                                                   if osegs is not None else None))))

    model, mmd = _model_sections(d, t, figures)
    # the figures folder is made (and marked) only now that every figure is drawn: a
    # report that fails before leaves nothing behind
    try:
        files_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecError(f"cannot write the report into {html_path.parent}: "
                        f"{exc.strerror}") from None
    _save(files_dir / FILES_MARKER, FILES_MARKER_TEXT.encode())
    for old in files_dir.iterdir():  # an earlier report's figures this one does not redraw
        if FIGURE_NAME.fullmatch(old.name) and int(old.name[3:-4]) >= len(figures):
            old.unlink(missing_ok=True)
    for i, (_, _, _, png) in enumerate(figures):
        _save(files_dir / f"fig{i:02d}.png", png)
    figs = [{"section": sec, "title": ftitle, "caption": caption, "index": i,
             "b64": base64.b64encode(png).decode()}
            for i, (sec, ftitle, caption, png) in enumerate(figures)]

    title = "jitbench report"
    ctx: dict = {"title": title, "css": Markup(CSS.read_text(encoding="utf-8")),
                 "source": str(d.resolve()), "sweep": None,
                 "generated": time.strftime("%Y-%m-%d %H:%M:%S"), "results": None,
                 "cards": [], "sections": [], "metric_notes": METRIC_NOTES, "comparison": [], "stopped": [],
                 "decisions": [], "unchecked": None, "incomplete": None,
                 "result_columns": RESULT_COLUMNS, "overhead_columns": OVERHEAD_COLUMNS,
                 "validation_columns": VALIDATION_COLUMNS, "scale_columns": SCALE_COLUMNS,
                 "by_replicas_note": BY_REPLICAS_NOTE,
                 "good": good, "color": plots.strategy_color,
                 "text": lambda c, r: cell(c, r, REPORT), **model}
    if ctx["scale"] is not None:
        ctx["scale"]["figure"] = figs[ctx["scale"]["figure"]]
    scripts = script_lines(meta)
    if meta:
        mach = meta.get("machine") or {}
        ctx["sweep"] = {"wall": f"{meta.get('wall_s') or 0:.0f}", "runs": meta.get("runs"),
                        "code": meta.get("code_version"), "host": mach.get("host"),
                        "cpus": mach.get("cpus"), "torch": mach.get("torch"),
                        "created": meta.get("created"), "scripts": scripts}
    md = [f"# {title}", "", f"source: `{d.resolve()}`", ""]
    ctx["incomplete"] = records.sweep_incomplete(meta)
    if ctx["incomplete"]:  # a partial table is said to be one, above everything
        md += [f"**{ctx['incomplete']}**", ""]
    if scripts:
        md += ["Scripts launched (workload: command):", ""]
        md += [f"- `{label}`: `{command}`" for label, command in scripts] + [""]
    if t is not None and len(t):
        n = len(t)
        # a peer that does not promise the fault-free state is not counted against it,
        # nor a run never compared (an empty state_equal: no reference, or one cut short)
        import pandas as pd

        def _flags(col: str) -> tuple[pd.Series, pd.Series]:
            """(true, non-empty) of a flag column, per row (all empty without it)."""
            if col not in t:
                no = pd.Series(False, index=t.index)
                return no, no
            vals = t[col].map(truth)
            return vals.map(lambda v: v is True), vals.map(lambda v: v is not None)

        promised = ((t["bitwise_promised"] != False) if "bitwise_promised" in t  # noqa: E712
                    else pd.Series(True, index=t.index))
        is_eq, compared = _flags("state_equal")
        eq, n_eq = int((is_eq & promised).sum()), int((compared & promised).sum())
        # nor a launched script's own recovery, which promises no replay bound
        judged = ((t["replay_promised"] != False) if "replay_promised" in t  # noqa: E712
                  else pd.Series(True, index=t.index))
        is_ok, checked = _flags("replay_ok")
        rok, n_r = int((is_ok & judged).sum()), int((checked & judged).sum())

        def _card(k: int, of: int) -> tuple[str, str]:
            """``k/of`` marked good or bad, or an unmarked dash when nothing was judged."""
            return (f"{k}/{of}", "ok" if k == of else "bad") if of else (REPORT["none"], "")

        cards = [("runs", str(n), ""), ("state_equal", *_card(eq, n_eq)),
                 ("replay invariant", *_card(rok, n_r))]
        for s in plots.strategy_order(t["strategy"]):
            rec = t[t["strategy"] == s]["recovery_s"].median()
            cards.append((f"median recovery · {s}", f"{fmt(rec, 1, none=REPORT['none'])} s", ""))
        ctx["cards"], ctx["results"] = cards, t.to_dict("records")
        md += ["## Results", "", markdown_table(t, RESULT_COLUMNS), ""]
        if unchecked:  # a check that did not run is said, not skipped in silence
            ctx["unchecked"] = unchecked_text(unchecked, n)
            md += [ctx["unchecked"], ""]
        ctx["stopped"] = stop_lines(t)
        if ctx["stopped"]:  # why a row's comparison or figures are missing, said per row
            md += ["## Runs stopped or not compared", ""]
            md += [f"- **{label}**: {why}" for label, why in ctx["stopped"]] + [""]
        ctx["comparison"] = comparison_lines(t)
        if ctx["comparison"]:
            md += ["## Strategies side by side", ""] + [f"- {x}" for x in ctx["comparison"]]
            md += [""]
        ctx["decisions"] = run_decisions(d, t)
        if ctx["decisions"]:
            md += ["## Recovery decisions", ""]
            md += [f"- **{label}**: " + "; ".join(lines) for label, lines in ctx["decisions"]]
            md += [""]

    for sec, heading in SECTIONS:
        mine = [f for f in figs if f["section"] == sec]
        if sec == "overhead" and osum is not None:
            wall = f"{ometa.get('wall_s') or 0:.0f}" if ometa else None
            ctx["sections"].append({"heading": heading, "figures": mine,
                                    "overhead": osum.to_dict("records"),
                                    "meta": {**ometa, "wall": wall} if ometa else None})
            md += [f"## {heading}", "", markdown_table(osum, OVERHEAD_COLUMNS), ""]
        elif mine:
            ctx["sections"].append({"heading": heading, "figures": mine, "overhead": None})
            md += [f"## {heading}", ""]
        for f in mine:
            md += [f"![{f['title']}]({files_dir.name}/fig{f['index']:02d}.png)", "",
                   f["caption"], ""]
    for f in figs:  # the model sections' figure
        mmd = [f"![{f['title']}]({files_dir.name}/fig{f['index']:02d}.png)\n\n{f['caption']}"
               if b == f"<!--fig{f['index']}-->" else b for b in mmd]
    md += mmd
    md += ["## Metrics", ""] + [f"- `{k}`: {v}" for k, v in METRIC_NOTES]
    _save(html_path, _template().render(**ctx).encode("utf-8"))
    _save(md_path, ("\n".join(md) + "\n").encode("utf-8"))
    if ctx["incomplete"] and on_note is not None:
        on_note(f"note: {directory}: {ctx['incomplete']}")
    if unchecked and on_note is not None:
        from jitbench.reports.evidence import unchecked_note

        on_note(unchecked_note(str(records.find_table(d)), unchecked, len(t)))
    return html_path, md_path


def unchecked_text(unchecked: int, rows: int) -> str:
    """The report's sentence under its results table for ``unchecked`` of ``rows`` rows
    whose run directory was not found."""
    return (f"Evidence not checked: {unchecked} of {rows} row{'s' if rows != 1 else ''} have "
            "no run directory beside the table, so their num_failures and replayed steps "
            "were not checked against the run's failures.csv (their other fields were).")


META_TYPES: dict[str, tuple[type, ...]] = {
    "wall_s": (int, float), "machine": (dict,), "scripts": (list,), "runs": (int,),
    "code_version": (str,), "created": (str,)}
"""The keys of ``sweep.json`` and ``overhead.json`` the report reads, and their JSON
types (a key may be absent or null)."""


def _read_meta(p: Path, what: str) -> dict:
    """The JSON object in ``p`` ({} when there is none), with every key of
    :data:`META_TYPES` it has of that type, and each of its ``scripts`` an object.

    Raises:
        SpecError: unreadable, not JSON, not an object, or a key of another type (one
            line naming ``p`` and ``what`` it describes; exit 2).
    """
    if not p.exists():
        return {}
    try:
        meta = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else f"not valid JSON: {exc}"
        raise SpecError(f"{p}: cannot read the {what} ({why})") from None
    if not isinstance(meta, dict):
        raise SpecError(f"{p}: the {what} is not a JSON object")
    for key, types in META_TYPES.items():
        v = meta.get(key)
        if v is not None and (not isinstance(v, types) or isinstance(v, bool)):
            raise SpecError(f"{p}: {key} is {v!r}, not a JSON {types[0].__name__} "
                            f"(a corrupt {what})")
    if not all(isinstance(sc, dict) for sc in meta.get("scripts") or []):
        raise SpecError(f"{p}: an entry of scripts is not a JSON object (a corrupt {what})")
    return meta


def _sweep_meta(d: Path) -> dict:
    """A sweep directory's ``sweep.json`` ({} when there is none; :func:`_read_meta`)."""
    return _read_meta(d / "sweep.json", "sweep's description")


def script_lines(meta: dict) -> list[tuple[str, str]]:
    """``(workload, command)`` of each launched script of a sweep (``sweep.json``'s
    ``scripts``: ``jitbench sweep --script PATH --script-args ARGS``), the command as
    ``python PATH ARGS`` a shell would read; empty for a sweep without scripts."""
    import shlex

    out = []
    for sc in meta.get("scripts") or []:
        words = [str(sc.get("script")), *[str(a) for a in sc.get("args") or []]]
        out.append((str(sc.get("workload")), shlex.join(["python", *words])))
    return out


def run_decisions(root: Path, t) -> list[tuple[str, list[str]]]:
    """``(run label, lines)`` of every run in ``t`` whose ``summary.json`` records
    recovery decisions (``decisions``: resumes, skipped parts, restores further back
    than promised, fallbacks), in table order; runs without a summary are left out."""
    out = []
    for _, r in t.iterrows():
        rd = _run_dir(root, r.get("run_dir", root))
        try:
            lines = json.loads((rd / "summary.json").read_text()).get("decisions") if rd else None
        except (OSError, ValueError):
            lines = None
        if lines:
            label = f"{r.get('workload')} · {r.get('strategy')} · {r.get('fault')}"
            if "repeat" in r and r.get("repeat") == r.get("repeat"):  # not NaN
                label += f" · repeat {int(r['repeat'])}"
            out.append((label, [str(x) for x in lines]))
    return out


def _label(r) -> str:
    """``workload · strategy · fault · repeat N`` of a row (what it has of them)."""
    label = " · ".join(str(r.get(k)) for k in ("workload", "strategy", "fault")
                       if k in r and not records.empty_cell(r.get(k)))
    rep = r.get("repeat")
    if not records.empty_cell(rep):
        try:
            label += f" · repeat {int(float(rep))}"
        except (TypeError, ValueError):
            label += f" · repeat {rep}"
    return label


def stop_lines(t) -> list[tuple[str, str]]:
    """``(run label, why)`` of every row of ``t`` that the harness or a signal stopped,
    that Ctrl-C or SIGTERM reached, or whose final state was not compared, in table
    order: its ``end_reason`` (where not simply ``completed``), ``interrupted`` (Ctrl-C
    or SIGTERM stopped a launch), ``late_interrupt`` (one that came once the run had
    ended and stopped nothing), ``harness_stopped`` (``--timeout-s``, Ctrl-C or
    SIGTERM ended a launch), and why ``state_equal`` is empty: the reference cut short
    (``reference_cut_short``, ``reference_complete`` false) or no comparison recorded.
    A row that completed and was compared is left out."""
    out = []
    for r in (t.to_dict("records") if t is not None else []):
        why: list[str] = []
        end = r.get("end_reason")
        end = "" if records.empty_cell(end) else str(end).strip()
        if end and end != "completed":
            why.append(f"ended: {end}")
        late = records.is_bool(r.get("late_interrupt"), True)  # interrupted is true too
        if records.is_bool(r.get("interrupted"), True) and not late and "interrupted" not in end:
            why.append("interrupted (Ctrl-C or SIGTERM)")
        if late:
            why.append("late interrupt: Ctrl-C or SIGTERM came once the run had ended "
                       "(it stopped nothing; the records are complete)")
        if records.is_bool(r.get("harness_stopped"), True) and "stopped by the harness" not in end:
            why.append("stopped by the harness (--timeout-s, Ctrl-C or SIGTERM)")
        cut = r.get("reference_cut_short")
        compared = not records.empty_cell(r.get("state_equal"))
        if not compared and "state_equal" in r and not records.is_bool(
                r.get("bitwise_promised"), False):
            if not records.empty_cell(cut):
                text = records.reference_not_compared(str(cut).strip())
                if text not in end:
                    why.append(text)
            elif records.is_bool(r.get("reference_complete"), False):
                why.append("the fault-free reference did not run to its end, so the final "
                           "states were not compared")
            elif not end or end == "completed":
                why.append("state_equal was not compared (no fault-free reference recorded)")
        if why:
            out.append((_label(r), "; ".join(why)))
    return out


def comparison_lines(t) -> list[str]:
    """One generated line per workload and fault kind: which strategy wasted the
    fewest GPU-seconds, which stalled least (``stall_s``) and recovered fastest
    (``recovery_s``), medians over repeats at this machine's world size, and which
    strategies did not keep the fault-free state (peers that train on with fewer
    replicas), with their ``max_abs_diff``. Empty without a fault column."""
    if t is None or not len(t) or "fault" not in t.columns:
        return []
    out = []
    for (w, f), g in t[t["fault"] != "none"].groupby(["workload", "fault"], sort=False):
        med = g.groupby("strategy").median(numeric_only=True)
        if len(med) < 2:
            continue
        parts = []
        for col, what, unit in (("wasted_gpu_s", "wasted the fewest GPU-seconds", "GPU-s"),
                                ("stall_s", "resumed training soonest (stall)", "s"),
                                ("recovery_s", "had the whole world training again first",
                                 "s")):
            if col in med and med[col].notna().any():
                best = med[col].idxmin()
                parts.append(f"{best} {what} ({med[col][best]:.2f} {unit})")
        if "state_equal" in g:
            diff = g[g["state_equal"] == False]  # noqa: E712
            if len(diff) and "max_abs_diff" in g:
                parts.append("not the fault-free state: " + ", ".join(
                    f"{st} (max_abs_diff {d:.3g})" for st, d in
                    diff.groupby("strategy")["max_abs_diff"].max().items()))
            elif len(diff):  # a table without the column: the strategies still named
                parts.append("not the fault-free state: "
                             + ", ".join(sorted(set(diff["strategy"].astype(str)))))
        ws_med = g["world_size"].median() if "world_size" in g else None
        ws = int(ws_med) if ws_med is not None and ws_med == ws_med else None
        parts += _at_scale(med, ws)
        out.append(f"{w} · {f}" + (f" at {ws} ranks" if ws else "") + ": "
                   + "; ".join(parts) + ".")
    return out


SCALE_GPUS = (1024, 16384)
"""World sizes of the per-row verdict at scale."""


def _at_scale(med, ws: int | None) -> list[str]:
    """Which strategy would waste the fewest GPU-hours per day at :data:`SCALE_GPUS`,
    from each strategy's measured costs (:func:`jitbench.reports.model.measured_estimate`
    with the model's default MTBF per GPU): per failure, its ``wasted_gpu_s`` less its
    checkpoint stalls, per rank; steady, its checkpoint stalls over its training time."""
    from jitbench.reports.model import ModelParams, measured_estimate

    need = ("wasted_gpu_s", "train_wall_s")
    if not ws or any(c not in med for c in need):
        return []
    mtbf = ModelParams().mtbf_hours_per_gpu
    out = []
    for n in SCALE_GPUS:
        est = {}
        for st, r in med.iterrows():
            stall = float(r.get("checkpoint_stall_gpu_s", 0.0) or 0.0)
            if r["wasted_gpu_s"] != r["wasted_gpu_s"] or not r["train_wall_s"] > 0:
                continue
            per_failure = max(0.0, float(r["wasted_gpu_s"]) - stall) / ws
            steady = stall / ws / float(r["train_wall_s"])
            est[st] = measured_estimate(st, n, mtbf, steady, per_failure)
        if len(est) >= 2:
            best = min(est, key=lambda k: est[k].wasted_gpu_hours_per_day)
            out.append(f"at {n:,} GPUs (model, MTBF {mtbf:,.0f} h per GPU, costs as measured) "
                       f"{best} would waste the least ({est[best].wasted_gpu_hours_per_day:.1f} "
                       "GPU-h/day)")
    return out


def _save(path: Path, data: bytes) -> None:
    """Write one report file; an OS error (full disk, no permission) is one line."""
    try:
        path.write_bytes(data)
    except OSError as exc:
        raise SpecError(f"cannot write {path}: {exc.strerror}") from None
