"""``jitbench report`` never replaces a file it did not write, its figures folder
``<name>_files/`` included: it marks the folder as its own and refuses (one line, exit
2, like a non-report ``--out``) a non-empty folder that is not; its own earlier
output, marked or from before the marker, is rewritten."""

from __future__ import annotations

from pathlib import Path

import pytest

from jitbench.reports.html import FILES_MARKER
from tests.conftest import one_line


@pytest.fixture
def results(tmp_path) -> Path:
    d = tmp_path / "run"
    d.mkdir()
    # one fault-free run's records: no figures, so the report is quick
    (d / "records.csv").write_text("workload,strategy,faults,state_equal,recovery_s,"
                                   "wasted_gpu_s,replayed_steps\n"
                                   "gpt,jit,[],True,,,\n")
    return d


def test_a_figures_folder_of_the_users_is_refused_and_kept(jb, results):
    """A new-user trial: ``report RUN --out RUN/keep.html`` replaced the user's
    ``RUN/keep_files/fig00.png`` with a plot."""
    mine = results / "keep_files" / "fig00.png"
    mine.parent.mkdir()
    mine.write_bytes(b"my own picture")
    code, err = jb("report", str(results), "--out", str(results / "keep.html"))
    line = one_line(err)
    assert code == 2 and "keep_files exists and is not a jitbench report's figures folder" \
        in line and "the report never replaces other files" in line
    assert mine.read_bytes() == b"my own picture"
    assert not (results / "keep.html").exists() and not (results / "keep.md").exists()
    assert sorted(p.name for p in mine.parent.iterdir()) == ["fig00.png"]


def test_the_default_figures_folder_is_checked_too(jb, results):
    (results / "report_files").mkdir()
    (results / "report_files" / "notes.txt").write_text("mine\n")
    code, err = jb("report", str(results))
    assert code == 2 and "report_files exists and is not a jitbench report's" in one_line(err)
    assert (results / "report_files" / "notes.txt").read_text() == "mine\n"
    (results / "other_files").write_text("a file, not a folder\n")
    code, err = jb("report", str(results), "--out", str(results / "other.html"))
    assert code == 2 and "other_files exists and is not a jitbench report's" in one_line(err)


def test_the_report_rewrites_its_own_figures_folder(jb, results):
    out = results / "keep.html"
    for _ in range(2):  # the second run finds its own marked folder
        code, err = jb("report", str(results), "--out", str(out))
        assert code == 0, err
    assert (results / "keep_files" / FILES_MARKER).is_file()
    # an empty folder is taken (and marked)
    empty = results / "new_files"
    empty.mkdir()
    code, err = jb("report", str(results), "--out", str(results / "new.html"))
    assert code == 0, err
    assert (empty / FILES_MARKER).is_file()


def test_a_report_written_before_the_marker_is_still_rewritten(jb, results):
    """An earlier version's output: figures only, beside its jitbench report."""
    out = results / "old.html"
    code, err = jb("report", str(results), "--out", str(out))
    assert code == 0, err
    (results / "old_files" / FILES_MARKER).unlink()
    (results / "old_files" / "fig00.png").write_bytes(b"an old plot")
    code, err = jb("report", str(results), "--out", str(out))
    assert code == 0, err
    # the same folder with a file of the user's in it is not the report's
    (results / "old_files" / FILES_MARKER).unlink()
    (results / "old_files" / "mine.txt").write_text("x")
    code, err = jb("report", str(results), "--out", str(out))
    assert code == 2 and "old_files exists and is not" in one_line(err)


@pytest.mark.parametrize("drop", ["recovery_s", "wasted_gpu_s", "replayed_steps", "repeat"])
def test_a_table_without_a_column_the_figures_read_is_refused_in_one_line(jb, tmp_path, drop):
    """A hand-made table with a faulted row and no ``recovery_s`` column ended in
    ``KeyError: 'recovery_s'`` from the phase figure (and the same for the other columns
    the figures and the sort read); every records table has them, so one without is
    not a jitbench table: one line, exit 2, nothing written."""
    d = tmp_path / "hand"
    d.mkdir()
    cols = {"workload": "gpt", "strategy": "jit", "fault": "kill", "state_equal": "True",
            "repeat": "0", "recovery_s": "9.5", "wasted_gpu_s": "19.0", "replayed_steps": "0",
            "detect_s": "2.0"}
    del cols[drop]
    (d / "results.csv").write_text(",".join(cols) + "\n" + ",".join(cols.values()) + "\n")
    code, err = jb("report", str(d))
    line = one_line(err)
    assert code == 2 and f"no column {drop}" in line, err
    assert sorted(p.name for p in d.iterdir()) == ["results.csv"]


def test_a_report_kept_as_markdown_only_still_owns_its_folder(jb, results):
    """An earlier report's folder without the marker (written before it existed) is
    rewritten when only its markdown was kept (the self-contained HTML deleted)."""
    code, _ = jb("report", str(results))
    assert code == 0
    (results / "report_files" / FILES_MARKER).unlink()
    (results / "report_files" / "fig00.png").write_bytes(b"an old figure")
    (results / "report.html").unlink()
    code, err = jb("report", str(results))
    assert code == 0, err
    assert (results / "report.html").exists() and (results / "report_files" / FILES_MARKER).exists()


def test_the_outputs_are_checked_before_any_figure_is_drawn(jb, tmp_path, monkeypatch):
    """A review: an unwritable markdown or figures folder beside the HTML was found only
    after every figure was drawn (seconds), with the figures folder already rewritten.
    write_report hands its three outputs to ``preflight`` first; the CLI refuses there."""
    import shutil

    from jitbench.errors import SpecError
    from jitbench.reports import html

    good = tmp_path / "good"
    good.mkdir()
    shutil.copy(Path(__file__).parents[2] / "benchmarks" / "baseline-cpu.csv",
                good / "results.csv")  # runs with failures: figures to draw
    seen = []

    def refuse(h, m, f):
        seen.append((h, m, f))
        raise SpecError("refused by preflight")

    def never(*a, **k):
        raise AssertionError("a figure was drawn before the outputs were checked")

    monkeypatch.setattr(html, "_png", never)
    out = tmp_path / "out" / "r.html"
    out.parent.mkdir()
    with pytest.raises(SpecError, match="refused by preflight"):
        html.write_report(good, out, preflight=refuse)
    assert seen == [(out, out.with_suffix(".md"), out.parent / "r_files")]
    assert not any(out.parent.iterdir())  # nothing written
    # the CLI's preflight: a directory that takes no new file, named in one line
    code, err = jb("report", str(good), "--out", "/proc/r.html")
    assert code == 2 and one_line(err).startswith(
        "error: --out: cannot write /proc/r.html: /proc takes no new file")


def test_the_report_of_an_interrupted_sweeps_table_says_it_is_partial(jb, results):
    """An interrupted sweep keeps the table of its finished cells (sweep.json: complete
    false, runs of cells): its report says it covers those only, on stderr and at the
    top of the HTML and markdown; a complete sweep's says nothing of the kind."""
    import json

    (results / "sweep.json").write_text(json.dumps({"complete": False, "runs": 1,
                                                    "cells": 3, "config": {}}))
    code, err = jb("report", str(results))
    assert code == 0, err
    partial = "Sweep interrupted: 1 of 3 cells finished"
    assert partial in err
    assert partial in (results / "report.html").read_text()
    assert partial in (results / "report.md").read_text()
    (results / "sweep.json").write_text(json.dumps({"complete": True, "runs": 3,
                                                    "cells": 3, "config": {}}))
    code, err = jb("report", str(results))
    assert code == 0 and "interrupted" not in (results / "report.md").read_text(), err
