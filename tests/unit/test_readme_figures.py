"""README's figure blocks against the committed benchmark files (benchmarks/readme_figures.py),
and the parsers of the measurement scripts (main_job.py, suite_time.py). No runs: fast."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

from jitbench import hang

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"


sys.path.insert(0, str(BENCH))  # the scripts import benchmarks/provenance.py


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


figs = _load("readme_figures")
main_job = _load("main_job")
suite_time = _load("suite_time")


def test_readme_blocks_are_what_the_benchmark_files_render():
    stale = figs.stale((ROOT / "README.md").read_text(), figs.render_all(BENCH))
    assert not stale, ("README.md's figure blocks differ from benchmarks/ (run python "
                       "benchmarks/readme_figures.py):\n" + "\n".join(stale.values()))


def test_check_names_a_deliberately_altered_block(tmp_path, capsys):
    readme = tmp_path / "README.md"
    text = (ROOT / "README.md").read_text()
    start = text.index("<!-- figures:peers -->")
    end = text.index("<!-- /figures:peers -->")
    block = text[start:end]
    altered = block.replace("| jit | kill |", "| jit | kill | 9", 1)
    assert altered != block
    readme.write_text(text[:start] + altered + text[end:])
    assert figs.main(["--check", "--readme", str(readme)]) == 1
    out = capsys.readouterr().out
    assert "stale block: peers" in out and "stale block: main-job" not in out
    assert readme.read_text() != text  # --check writes nothing
    assert figs.main(["--readme", str(readme)]) == 0  # the rewrite repairs it
    assert readme.read_text() == text
    assert figs.main(["--check", "--readme", str(readme)]) == 0


def test_missing_benchmark_file_is_one_line_and_status_2(tmp_path, capsys):
    bench = tmp_path / "benchmarks"
    shutil.copytree(BENCH, bench)
    (bench / "suite-cpu.json").unlink()
    assert figs.main(["--check", "--benchmarks", str(bench)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "suite-cpu.json" in err and "Traceback" not in err
    (bench / "peers-cpu.csv").write_text("strategy,fault\njit,kill\n")
    shutil.copy(BENCH / "suite-cpu.json", bench / "suite-cpu.json")
    assert figs.main(["--check", "--benchmarks", str(bench)]) == 2
    assert "lacks the column(s)" in capsys.readouterr().err


def test_missing_marker_is_status_2(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text((ROOT / "README.md").read_text().replace("<!-- /figures:suite -->", ""))
    assert figs.main(["--readme", str(readme)]) == 2
    assert "figures:suite" in capsys.readouterr().err


def test_main_job_block_states_the_first_step_bound_from_hang_py(monkeypatch):
    doc = json.loads((BENCH / "main-job-cpu.json").read_text())
    text = figs.main_job(BENCH)
    assert f"`--hang-first-s`, {hang.FIRST_S:g} s" in text
    assert "benchmarks/main-job-cpu.json" in text and doc["date"] in text
    assert f"{doc['machine']['cpus']} cores" in text and doc["machine"]["torch"] in text
    assert f"commit {doc['commit']}" in text
    monkeypatch.setattr(figs.hang, "FIRST_S", 99.0)  # the bound follows hang.py
    assert "`--hang-first-s`, 99 s" in figs.main_job(BENCH)


def test_main_job_medians():
    rows = [{"detect_s": 2.0, "recovery_s": 5.0, "replayed_steps": 0, "state_equal": True,
             "sample_stream_equal": True},
            {"detect_s": 2.2, "recovery_s": 9.0, "replayed_steps": 0, "state_equal": True,
             "sample_stream_equal": True},
            {"detect_s": 2.1, "recovery_s": 6.0, "replayed_steps": 1, "state_equal": False,
             "sample_stream_equal": True}]
    med = main_job.medians(rows)
    assert med["detect_s"] == 2.1 and med["recovery_s"] == 6.0 and med["replayed_steps"] == 0
    assert med["state_equal"] is False and med["sample_stream_equal"] is True
    assert med["restart_s"] is None


@pytest.mark.parametrize("line,expect", [
    ("===== 648 passed, 1 failed, 3 skipped, 2 warnings in 1327.40s (0:22:07) =====",
     {"passed": 648, "failed": 1, "skipped": 3, "seconds": 1327.4}),
    ("== 5 passed in 0.12s ==", {"passed": 5, "failed": 0, "seconds": 0.12}),
    ("= 1 failed, 2 errors in 3.00s =", {"passed": 0, "failed": 1, "errors": 2}),
])
def test_suite_time_parses_pytest_final_line(line, expect):
    got = suite_time.parse_final_line(f"collected 9 items\n...\n{line}\n")
    assert {k: got[k] for k in expect} == expect


def test_suite_time_without_final_line_is_status_2(tmp_path, capsys):
    log = tmp_path / "log.txt"
    log.write_text("collected 3 items\nKeyboardInterrupt\n")
    assert suite_time.main([str(tmp_path / "s.json"), "--log", str(log)]) == 2
    assert suite_time.main([str(tmp_path / "s.json"), "--log", str(tmp_path / "none")]) == 2
    assert not (tmp_path / "s.json").exists()
    assert "cannot read" in capsys.readouterr().err


def test_stress_chunks_append_and_total(tmp_path):
    """A stress log becomes the record's next chunk; totals sum every chunk and a
    violation makes ``total`` exit 1."""

    import stress_chunks

    record = tmp_path / "stress.txt"
    record.write_text("# chunk 1: 200 campaigns, 0 violations, commit abc, seed 1, 2026-11-30, "
                      "median 12.6 s/campaign, strategies jit 200\n[   1] ok ...\n")
    log = tmp_path / "log.jsonl"
    log.write_text("\n".join(json.dumps(r) for r in [
        {"campaign": "jit: kill@rank0:step1", "wall_s": 10.0, "violations": [], "base": 0},
        {"campaign": "periodic:3: exit@rank1:step2, kill@rank0:step4", "wall_s": 14.0,
         "violations": ["state: max_abs_diff 0.1"], "base": 1}]) + "\n")
    head = stress_chunks.append(log, record, "7", commit="def")
    assert head.startswith("# chunk 2: 2 campaigns, 1 violations, commit def, seed 7, ")
    assert "median 12.0 s/campaign, strategies jit 1, periodic:3 1; faults kill 2, exit 1" in head
    assert stress_chunks.total(record) == (2, 202, 1)
    assert "        state: max_abs_diff 0.1" in record.read_text()  # the violation is kept
    assert stress_chunks.main(["total", "--record", str(record)]) == 1
    assert stress_chunks.main(["total", "--record", str(tmp_path / "absent")]) == 2


def test_stress_chunks_recheck_appends_the_verdicts_of_now(tmp_path, monkeypatch, capsys):
    """``recheck`` judges each logged run again (here a stand-in for
    ``campaign.recheck`` that finds the second run now clean), prints the campaign
    whose verdict changed, appends one line to the record that ``total`` lists, and
    refuses a log whose size is not the chunk's."""

    import stress_chunks

    from jitbench.harness import campaign

    record = tmp_path / "stress.txt"
    record.write_text("# chunk 1: 2 campaigns, 1 violations, commit abc, seed 1, 2026-11-30, "
                      "median 12.6 s/campaign, strategies jit 2\n")
    log = tmp_path / "log.jsonl"
    log.write_text("\n".join(json.dumps(r) for r in [
        {"campaign": "jit: kill@rank0:step1", "violations": [], "run_dir": "r1"},
        {"campaign": "inmem:3: term@rank1:step6", "violations": ["replay: replayed 1"],
         "run_dir": "r2"}]) + "\n")
    now = {"r1": [], "r2": []}
    monkeypatch.setattr(campaign, "recheck", lambda d: (now[d], "0.1.0+abc"))
    line, bad = stress_chunks.recheck(log, record, 1, commit="fed")
    assert bad == 0
    assert line.startswith("# recheck of chunk 1 at commit fed, ")
    assert line.endswith(": 2 campaigns, 0 violations (1 at run time)")
    assert "[   2] inmem:3: term@rank1:step6: at run time ['replay: replayed 1'], now ok" \
        in capsys.readouterr().out
    assert stress_chunks.rechecks(record) == [(1, "fed", 2, 0)]
    (tmp_path / "stress-cpu.txt").write_text(record.read_text())
    assert "| 1 | abc | 2026-11-30 | 2 | 1 | 12.6 | 0 at fed |" in figs.stress(tmp_path)
    assert stress_chunks.total(record) == (1, 2, 1)  # the chunk's header keeps its run-time count
    assert stress_chunks.main(["total", "--record", str(record)]) == 1
    assert "chunk 1 rechecked at fed: 2 campaigns, 0 violations" in capsys.readouterr().out
    log.write_text(log.read_text().replace('"violations": []', '"violations": ["ports: 1 left"]'))
    line, bad = stress_chunks.recheck(log, record, None, commit="fed+dirty")
    assert bad == 1  # only the run could see a port left behind: it stands
    record.write_text(record.read_text() + line.replace("chunk ?", "chunk 1") + "\n")
    assert stress_chunks.rechecks(record)[-1] == (1, "fed+dirty", 2, 1)
    now["r1"] = ["state: differs"]  # a run that fails now: exit 1
    assert stress_chunks.main(["recheck", str(log), "--record", str(record)]) == 1
    assert len(stress_chunks.rechecks(record)) == 2  # without --chunk nothing is appended
    before = record.read_text()
    assert stress_chunks.main(["recheck", str(log), "--chunk", "2", "--record",
                               str(record)]) == 2  # no chunk 2
    log.write_text(log.read_text().splitlines()[0] + "\n")
    assert stress_chunks.main(["recheck", str(log), "--chunk", "1", "--record",
                               str(record)]) == 2  # 1 campaign, chunk 1 has 2
    assert record.read_text() == before
    assert "holds 1 campaigns, chunk 1 2" in capsys.readouterr().err
    for bad in ("1", "[1, 2]", '{"campaign": "x", "violations": [], "run_dir": null}', "garbage"):
        log.write_text(bad + "\n")  # one line naming the file and line, exit 2
        assert stress_chunks.main(["recheck", str(log), "--record", str(record)]) == 2
        assert f"{log}:1: not" in capsys.readouterr().err
        assert stress_chunks.main(["append", str(log), "--seed", "1", "--record",
                                   str(record)]) == 2
        assert f"{log}:1: not" in capsys.readouterr().err
    assert record.read_text() == before


def test_a_readme_that_cannot_be_written_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    """A stale README whose rewrite fails (read-only file system, immutable file): one
    line naming it and the OS error, exit 2 (1 means --check found stale blocks)."""
    readme = tmp_path / "README.md"
    text = (ROOT / "README.md").read_text()
    readme.write_text(text.replace("| jit | kill |", "| jit | kill | 9", 1))

    def refuse(self, *a, **kw):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(Path, "write_text", refuse)
    assert figs.main(["--readme", str(readme)]) == 2
    err = capsys.readouterr().err
    assert f"cannot write {readme}: Operation not permitted" in err and "Traceback" not in err
