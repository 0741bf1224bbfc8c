"""``jitbench sweep --resume`` continues the sweep that its directory records, and no
other: a different matrix or setting is refused in one line naming each field that
differs (exit 2, nothing launched, ``sweep.json`` unchanged), and the rows already
recorded are never dropped. Nothing is launched: :func:`jitbench.harness.run.run` is a
stub that writes a summary.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from jitbench.errors import ExitStatus, SpecError
from jitbench.harness import sweep as sweep_mod
from jitbench.harness.sweep import SweepConfig
from tests.conftest import one_line


class _Out:
    def __init__(self, summary):
        self.summary = summary


@pytest.fixture
def launched(monkeypatch):
    """The faults of the launches (``reference`` for a reference), in order; a launch
    of the fault in ``run.stop`` is interrupted, one of the fault in ``run.late`` ends
    by itself with a Ctrl-C after it (``late_interrupt``)."""
    from jitbench.harness import run as run_mod

    calls: list[str] = []

    def fake_run(spec, run_dir, reference=True, reference_from=None, overwrite=False,
                 timeout_s=None):
        run_dir.mkdir(parents=True, exist_ok=True)
        fault = spec.faults[0].kind if spec.faults else "reference"
        calls.append(fault)
        s = {"faults": [], "completed": True, "state_equal": True, "replay_ok": True,
             "strategy": spec.strategy,
             "workload": spec.workload.name, "seed": spec.workload.seed,
             "interrupted": fault in (getattr(fake_run, "stop", None),
                                      getattr(fake_run, "late", None)),
             "late_interrupt": fault == getattr(fake_run, "late", None)}
        (run_dir / "summary.json").write_text(json.dumps(s))
        return _Out(s)

    monkeypatch.setattr(run_mod, "run", fake_run)
    yield calls
    fake_run.stop = fake_run.late = None


def _cfg(**kw) -> SweepConfig:
    base = {"workloads": ["gpt"], "strategies": ["jit"], "faults": ["kill", "term"],
            "steps": 4, "fault_step": 2}
    return SweepConfig(**{**base, **kw})


@pytest.mark.parametrize("kw, needle", [
    ({"sizes": {"gpt": "tiny"}}, '(--sizes {} -> {"gpt": "tiny"})'),
    ({"seeds": [0, 1]}, "(--seeds [0] -> [0, 1])"),
    ({"faults": ["kill"]}, '(--faults ["kill", "term"] -> ["kill"])'),
    ({"strategies": ["jit", "none"]}, '(--strategies ["jit"] -> ["jit", "none"])'),
    ({"workloads": ["resnet"]}, '(--workloads ["gpt"] -> ["resnet"])'),
    ({"repeats": 2, "steps": 6}, "(--repeats 1 -> 2; --steps 4 -> 6)"),
])
def test_resume_refuses_another_matrix(launched, tmp_path, kw, needle):
    out = tmp_path / "sw"
    sweep_mod.run_sweep(_cfg(), out)
    recorded = (out / "sweep.json").read_text()
    csv = (out / "results.csv").read_text()
    launched.clear()
    with pytest.raises(SpecError) as e:
        sweep_mod.run_sweep(_cfg(**kw), out, resume=True)
    msg = str(e.value)
    assert "\n" not in msg and needle in msg and "another matrix" in msg, msg
    assert launched == []  # nothing ran
    assert (out / "sweep.json").read_text() == recorded  # the record is unchanged
    assert (out / "results.csv").read_text() == csv


def test_resume_of_an_interrupted_sweep_checks_its_recorded_config(launched, tmp_path):
    """The config recorded when the sweep started is the one checked; with it, the
    sweep continues and keeps every row; only the per-launch timeout may change."""
    from jitbench.harness import run as run_mod

    out = tmp_path / "sw"
    run_mod.run.stop = "term"
    with pytest.raises(KeyboardInterrupt):
        sweep_mod.run_sweep(_cfg(), out)
    run_mod.run.stop = None
    with pytest.raises(SpecError, match=r"\(--fault-step 2 -> 3\)"):
        sweep_mod.run_sweep(_cfg(fault_step=3), out, resume=True)
    launched.clear()
    res = sweep_mod.run_sweep(_cfg(timeout_s=1200.0), out, resume=True)
    assert launched == ["term"]
    assert list(res.table["fault"]) == ["kill", "term"]
    assert list(pd.read_csv(out / "results.csv")["fault"]) == ["kill", "term"]
    assert json.loads((out / "sweep.json").read_text())["complete"] is True


def test_resume_never_drops_a_recorded_row(launched, tmp_path):
    """A results table with a row outside the matrix (an older sweep.json, an edited
    one) is refused rather than rewritten without that row; a sweep.json without a
    config or unreadable is refused too."""
    out = tmp_path / "sw"
    sweep_mod.run_sweep(_cfg(), out)
    t = pd.read_csv(out / "results.csv")
    extra = t.iloc[[0]].assign(seed=7)
    pd.concat([t, extra]).to_csv(out / "results.csv", index=False)
    (out / "results.parquet").unlink()
    with pytest.raises(SpecError, match=r"row 3 \(gpt jit kill seed 7 repeat 0\) is no cell"):
        sweep_mod.run_sweep(_cfg(), out, resume=True)
    assert len(pd.read_csv(out / "results.csv")) == 3
    (out / "sweep.json").write_text(json.dumps({"complete": True}))
    with pytest.raises(SpecError, match="records no sweep config"):
        sweep_mod.run_sweep(_cfg(), out, resume=True)
    (out / "sweep.json").write_text("{not json")
    with pytest.raises(SpecError, match="cannot read"):
        sweep_mod.run_sweep(_cfg(), out, resume=True)


def test_resume_with_another_matrix_is_one_line_exit_2(jb, launched, tmp_path):
    out = tmp_path / "cli"
    args = ("sweep", "--workloads", "gpt", "--strategies", "jit", "--faults", "kill",
            "--steps", "4", "--fault-step", "2", "--out", str(out))
    code, _ = jb(*args)
    assert code == 0
    code, err = jb(*args, "--resume", "--seeds", "0,1", "--sizes", "gpt=tiny")
    assert code == ExitStatus.INPUT
    line = one_line(err)
    assert "--seeds [0] -> [0, 1]" in line and '--sizes {} -> {"gpt": "tiny"}' in line, line
    assert len(pd.read_csv(out / "results.csv")) == 1
    code, _ = jb(*args, "--resume")
    assert code == 0


def _listing(d) -> dict:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("case", ["run_dir", "other_files", "absent", "empty", "overwrite"])
def test_resume_refuses_a_directory_with_no_sweep_to_continue(jb, launched, tmp_path, case):
    """``--resume`` continues a sweep and nothing else: a non-empty directory without
    ``sweep.json`` (a run directory, anyone's files) is not taken over, an absent or
    empty one holds nothing to resume, and ``--overwrite`` beside it contradicts it:
    one line, exit 2, nothing launched or written."""
    out = tmp_path / "target"
    if case == "run_dir":
        out.mkdir()
        (out / "spec.json").write_text('{"steps": 4}')
        (out / "events").mkdir()
        (out / "events" / "rank0.jsonl").write_text("{}\n")
    elif case == "other_files":
        out.mkdir()
        (out / "notes.txt").write_text("mine")
    elif case == "empty":
        out.mkdir()
    elif case == "overwrite":
        sweep_mod.run_sweep(_cfg(), out)
        launched.clear()
    before = _listing(out) if out.exists() else None
    args = ("sweep", "--workloads", "gpt", "--strategies", "jit", "--faults", "kill,term",
            "--steps", "4", "--fault-step", "2", "--out", str(out), "--resume")
    code, err = jb(*args, *(["--overwrite"] if case == "overwrite" else []))
    assert code == ExitStatus.INPUT, err
    line = one_line(err)
    needle = {"run_dir": "no sweep.json", "other_files": "no sweep.json",
              "absent": "does not exist", "empty": "is empty",
              "overwrite": "--resume and --overwrite contradict"}[case]
    assert needle in line, line
    assert launched == []
    assert (_listing(out) if out.exists() else None) == before


class _Clock:
    """``time`` for :mod:`jitbench.harness.sweep` whose monotonic clock advances 10 s a
    call, so the sessions' wall times are known."""

    def __init__(self):
        import time

        self.t, self.strftime = 0.0, time.strftime

    def monotonic(self) -> float:
        self.t += 10.0
        return self.t


def test_resume_keeps_created_and_adds_each_session_s_wall_time(launched, tmp_path,
                                                                 monkeypatch):
    """An interrupted session's wall time is recorded, a resume adds its own (the
    total is ``wall_s``, each session an entry of ``sessions``), resuming a complete
    sweep runs nothing and adds no session, and ``created`` stays the first session's."""
    from jitbench.harness import run as run_mod

    monkeypatch.setattr(sweep_mod, "time", _Clock())
    out = tmp_path / "sw"
    run_mod.run.stop = "term"
    with pytest.raises(KeyboardInterrupt):
        sweep_mod.run_sweep(_cfg(), out)
    run_mod.run.stop = None
    rec = json.loads((out / "sweep.json").read_text())
    assert [x["ended"] for x in rec["sessions"]] == ["interrupted"]
    first_wall, created = rec["wall_s"], rec["created"]
    assert first_wall > 0 and rec["sessions"][0]["wall_s"] == first_wall
    res = sweep_mod.run_sweep(_cfg(), out, resume=True)
    rec = json.loads((out / "sweep.json").read_text())
    assert [x["ended"] for x in rec["sessions"]] == ["interrupted", "complete"]
    assert rec["created"] == created
    assert rec["wall_s"] == pytest.approx(sum(x["wall_s"] for x in rec["sessions"]))
    assert res.wall_s == pytest.approx(rec["wall_s"]) and res.wall_s > first_wall
    assert res.session_wall_s == pytest.approx(rec["sessions"][1]["wall_s"])
    total = rec["wall_s"]
    before = (out / "sweep.json").read_text()
    launched.clear()
    res = sweep_mod.run_sweep(_cfg(), out, resume=True)  # already complete: nothing to run
    assert res.already_complete and launched == [] and res.session_wall_s == 0.0
    assert (out / "sweep.json").read_text() == before  # no 0 s session
    assert res.wall_s == pytest.approx(total) and list(res.table["fault"]) == ["kill", "term"]


def test_resume_of_an_older_sweep_json_keeps_its_wall_time(launched, tmp_path):
    """A ``sweep.json`` written before sessions were recorded (``wall_s`` 32.9 and
    ``created`` only) counts as one complete session of that time; it records both
    fault_step and fault_start_step, and neither field the matrix leaves unused is
    compared."""
    out = tmp_path / "sw"
    sweep_mod.run_sweep(_cfg(), out)
    rec = json.loads((out / "sweep.json").read_text())
    del rec["sessions"]
    rec.update({"wall_s": 32.9, "created": "2026-01-02T03:04:05+0000", "complete": False})
    rec["config"].update({"fault_start_step": 7, "fault_count": None})
    (out / "sweep.json").write_text(json.dumps(rec))
    res = sweep_mod.run_sweep(_cfg(), out, resume=True)
    rec = json.loads((out / "sweep.json").read_text())
    assert rec["created"] == "2026-01-02T03:04:05+0000"
    assert rec["sessions"][0] == {"started": "2026-01-02T03:04:05+0000", "wall_s": 32.9,
                                  "ended": "complete"}
    assert res.wall_s >= 32.9 and rec["wall_s"] == pytest.approx(res.wall_s)


def test_resume_of_a_complete_sweep_says_so_and_adds_no_session(jb, launched, tmp_path):
    out = tmp_path / "sw"
    args = ("sweep", "--workloads", "gpt", "--strategies", "jit", "--faults", "kill",
            "--steps", "4", "--fault-step", "2", "--out", str(out))
    assert jb(*args)[0] == 0
    before = _listing(out)
    launched.clear()
    code, err = jb(*args, "--resume")
    assert code == 0, err
    assert one_line(err) == f"sweep already complete in {out} (1 runs); nothing to resume"
    assert launched == [] and _listing(out) == before
    # another matrix is still refused, complete or not
    code, err = jb(*args, "--resume", "--seeds", "0,1")
    assert code == ExitStatus.INPUT and "(--seeds [0] -> [0, 1])" in one_line(err), err


def test_resume_names_options_and_only_the_fields_the_matrix_uses(launched, tmp_path):
    """A Poisson sweep records no fault_step or fault_rank, a single-fault one no
    fault_start_step or fault_count; a refusal names the options (--fault-step)."""
    out = tmp_path / "one"
    sweep_mod.run_sweep(_cfg(), out)
    config = json.loads((out / "sweep.json").read_text())["config"]
    assert "fault_start_step" not in config and "fault_count" not in config
    assert config["fault_step"] == 2 and config["fault_rank"] == 1
    out = tmp_path / "poisson"
    poisson = _cfg(fault_mtbf_steps=2.0, steps=12, fault_step=14, fault_start_step=4)
    sweep_mod.run_sweep(poisson, out)
    config = json.loads((out / "sweep.json").read_text())["config"]
    assert "fault_step" not in config and "fault_rank" not in config
    assert config["fault_start_step"] == 4
    with pytest.raises(SpecError) as e:
        sweep_mod.run_sweep(_cfg(fault_mtbf_steps=2.0, steps=12, fault_start_step=1), out,
                            resume=True)
    msg = str(e.value)
    assert "(--fault-step 4 -> 1)" in msg and "fault_step" not in msg, msg


@pytest.mark.parametrize("kind", ["stop", "late"])
def test_an_interrupted_sweep_writes_the_table_of_its_finished_cells(launched, tmp_path,
                                                                      kind):
    """Ctrl-C in the second of three cells: the first cell's row is written (results.csv
    and .parquet, which report and gate read) and sweep.json says complete false, 1 (or,
    after a late Ctrl-C, 2) of 3 cells. A late Ctrl-C stopped nothing: its cell is kept
    and not rerun. --resume runs the rest and rewrites the table whole."""
    from jitbench.harness import run as run_mod
    from jitbench.records import load_results

    out = tmp_path / "sw"
    cfg = _cfg(faults=["kill", "term", "exit"])
    setattr(run_mod.run, kind, "term")
    with pytest.raises(sweep_mod.SweepInterrupted) as e:
        sweep_mod.run_sweep(cfg, out)
    setattr(run_mod.run, kind, None)
    done = 2 if kind == "late" else 1
    assert (e.value.done, e.value.total, e.value.late) == (done, 3, kind == "late")
    assert launched == ["reference", "kill", "term"]  # the sweep stopped there
    rec = json.loads((out / "sweep.json").read_text())
    assert rec["complete"] is False and (rec["runs"], rec["cells"]) == (done, 3)
    t = load_results(out, require=("workload", "strategy", "fault", "spec_hash"))
    assert list(t["fault"]) == ["kill", "term"][:done]
    assert list(pd.read_parquet(out / "results.parquet")["fault"]) == list(t["fault"])
    if kind == "late":  # the row of a finished cell is judged as any finished run
        assert not t["interrupted"].iloc[1] and t["late_interrupt"].iloc[1]
    launched.clear()
    res = sweep_mod.run_sweep(cfg, out, resume=True)
    assert launched == (["exit"] if kind == "late" else ["term", "exit"])
    assert list(res.table["fault"]) == ["kill", "term", "exit"]
    assert list(pd.read_csv(out / "results.csv")["fault"]) == ["kill", "term", "exit"]
    rec = json.loads((out / "sweep.json").read_text())
    assert rec["complete"] is True and (rec["runs"], rec["cells"]) == (3, 3)


def test_a_late_ctrl_c_after_the_reference_keeps_it(launched, tmp_path):
    from jitbench.harness import run as run_mod

    out = tmp_path / "sw"
    run_mod.run.late = "reference"
    with pytest.raises(sweep_mod.SweepInterrupted) as e:
        sweep_mod.run_sweep(_cfg(), out)
    run_mod.run.late = None
    assert (e.value.done, e.value.late) == (0, True) and launched == ["reference"]
    assert not (out / "results.csv").exists()
    launched.clear()
    sweep_mod.run_sweep(_cfg(), out, resume=True)
    assert launched == ["kill", "term"]  # the reference was kept


def test_the_cli_line_of_an_interrupted_sweep(jb, launched, tmp_path):
    """One line with the cells done and where their results are; report-style reading of
    a sweep interrupted before any cell finished says so rather than naming a column."""
    from jitbench.errors import InputError
    from jitbench.harness import run as run_mod
    from jitbench.records import load_results

    out = tmp_path / "sw"
    args = ("sweep", "--workloads", "gpt", "--strategies", "jit", "--faults", "kill,term",
            "--steps", "4", "--fault-step", "2", "--out", str(out))
    run_mod.run.late = "kill"
    code, err = jb(*args)
    assert code == ExitStatus.INTERRUPTED, err
    assert err.strip().splitlines()[-1] == (
        "interrupted once its last launch had ended (that run is finished and kept): sweep "
        f"stopped after 1 of 2 cells; their results are in {out / 'results.csv'} "
        "(sweep.json: complete false); --resume runs the rest"), err
    run_mod.run.late = None
    out2 = tmp_path / "sw2"
    run_mod.run.stop = "kill"
    code, err = jb(*args[:-1], str(out2))
    assert code == ExitStatus.INTERRUPTED, err
    assert err.strip().splitlines()[-1].startswith(
        "interrupted: sweep stopped after 0 of 2 cells; no results table yet"), err
    with pytest.raises(InputError, match=r"sweep interrupted after 0 of 2 cells; --resume "
                                         r"runs the rest"):
        load_results(out2)
    # report says so too, rather than that there is nothing to report
    code, err = jb("report", str(out2))
    assert code == ExitStatus.INPUT and "sweep interrupted after 0 of 2 cells" in err, err
    assert not (out2 / "report.html").exists()


def test_a_sweep_interrupted_before_tables_were_kept_is_named_as_such(tmp_path):
    """An interrupted sweep.json written before interrupted sweeps kept their table
    (complete false, no runs count), its runs' records below it: reading it says the
    sweep was interrupted, not that a column is missing."""
    from jitbench.errors import InputError
    from jitbench.records import load_results

    out = tmp_path / "sw"
    (out / "refs" / "gpt-s0").mkdir(parents=True)
    (out / "refs" / "gpt-s0" / "records.csv").write_text("workload,strategy\ngpt,none\n")
    (out / "sweep.json").write_text(json.dumps({"complete": False, "config": {}}))
    with pytest.raises(InputError, match=r"sweep interrupted before its results table was "
                                         r"written; --resume runs the rest and writes it"):
        load_results(out)
