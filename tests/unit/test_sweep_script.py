"""``jitbench sweep --script``: the matrix, the launch specs of a script's cells, the
refusals (one line, exit 2, nothing created), and the report's reading of such rows.

Nothing is launched: the CLI cases stop at validation, or call a stub in place of
:func:`jitbench.harness.sweep.run_sweep`.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from jitbench.cli.sweep import parse_scripts
from jitbench.errors import ExitStatus, SpecError
from jitbench.harness import sweep as sweep_mod
from jitbench.harness.script import ScriptSpec
from jitbench.harness.sweep import SweepConfig, SweepScript, cell_dir, script_labels
from jitbench.records import table_verdict, verdict
from jitbench.reports.table import RESULT_COLUMNS, good
from tests.conftest import one_line

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DDP = str(EXAMPLES / "ddp_tutorial.py")


def test_script_cells_are_launch_specs_beside_the_workloads():
    cfg = SweepConfig(workloads=["gpt"], strategies=["jit"], faults=["kill", "nccl-hang"],
                      seeds=[0, 3], steps=10, fault_step=6,
                      scripts=[SweepScript(DDP, ["--steps", "10", "--seed", "{seed}"]),
                               SweepScript(DDP, ["--steps", "12"])])
    cfg.validate()
    assert cfg.workload_names() == ["gpt", "script:ddp_tutorial.py", "script:ddp_tutorial.py#2"]
    cells = cfg.cells()
    assert len(cells) == 3 * 2 * 2 and cells[0][0] == "gpt" and cells[-1][0].endswith("#2")
    spec = cfg.spec("script:ddp_tutorial.py", "jit", "kill", 3)
    assert isinstance(spec, ScriptSpec)
    assert (spec.script, spec.strategy, spec.nproc, spec.steps, spec.label) == (
        DDP, "jit", 2, 10, "script:ddp_tutorial.py")
    assert spec.args == ["--steps", "10", "--seed", "3"]  # {seed}: the cell's seed
    assert [(f.kind, f.rank, f.step) for f in spec.faults] == [("kill", 1, 6)]
    assert spec.workload == "script:ddp_tutorial.py"
    # the reference: fault-free, under own, the same training (shared by every strategy)
    ref = cfg.spec("script:ddp_tutorial.py", "own", None, 3)
    assert ref.faults == [] and ref.training_key() == spec.training_key()
    assert cell_dir(Path("/s"), "script:ddp_tutorial.py#2", "jit", "kill", 0, 0).name == \
        "script_ddp_tutorial.py_2-jit-kill-s0-r0"
    assert cell_dir(Path("/s"), "gpt", "jit", "kill", 0, 0).name == "gpt-jit-kill-s0-r0"
    assert script_labels([SweepScript("/a/x.py"), SweepScript("/b/y.py")]) == [
        "script:x.py", "script:y.py"]


@pytest.mark.parametrize("kw, needle", [
    ({"strategies": ["jit", "periodic:5"]}, "strategy periodic:5 does not apply to a launched "
                                            "script: --script runs under own or jit only"),
    ({"strategies": ["none"]}, "strategy none does not apply to a launched script"),
    ({"workloads": ["gpt"], "strategies": ["own"]}, "strategy own is a launched script's own "
                                                    "recovery and applies to --script only"),
    ({"faults": ["corrupt"]}, "cannot be injected into a launched script"),
    ({"scripts": [SweepScript("/nonexistent/x.py")]}, "script /nonexistent/x.py does not exist"),
    ({"fault_step": 11}, "fault step 11 must be in 1..9"),
    ({"scripts": [], "workloads": []}, "a sweep needs at least one workload (or --script)"),
])
def test_script_sweep_refusals(kw, needle):
    base = dict(workloads=[], strategies=["own", "jit"], faults=["kill"], steps=10,
                fault_step=6, scripts=[SweepScript(DDP, [])])
    base.update(kw)
    with pytest.raises(SpecError) as exc:
        SweepConfig(**base).validate()
    assert needle in str(exc.value) and "\n" not in str(exc.value)


def test_parse_scripts_pairs_arguments_in_order(tmp_path):
    got = parse_scripts([Path("a.py"), Path("b.py")], ["--steps 10 --name 'x y'", ""])
    assert [(Path(s.path).name, s.args) for s in got] == [
        ("a.py", ["--steps", "10", "--name", "x y"]), ("b.py", [])]
    assert all(Path(s.path).is_absolute() for s in got)
    assert [s.args for s in parse_scripts([Path("a.py")], None)] == [[]]
    with pytest.raises(SpecError, match="give it once per --script"):
        parse_scripts([Path("a.py"), Path("b.py")], ["--steps 10"])
    with pytest.raises(SpecError, match="No closing quotation"):
        parse_scripts([Path("a.py")], ["--name 'x"])


@pytest.mark.parametrize("args, needle", [
    (["--script", DDP, "--strategies", "jit,periodic:5"],
     "error: strategy periodic:5 does not apply to a launched script"),
    (["--script", DDP, "--workloads", "gpt", "--strategies", "own,jit"],
     "error: strategy own is a launched script's own recovery"),
    (["--script", DDP, "--script", DDP, "--script-args", "--steps 10"],
     "error: --script-args belongs to a --script"),
    (["--script", "missing.py"], "does not exist"),
    (["--script", DDP, "--faults", "enospc"], "cannot be injected into a launched script"),
    (["--script-args", "--steps 10"], "error: --script-args belongs to a --script"),
])
def test_cli_refuses_in_one_line_exit_2(jb, tmp_path, args, needle):
    out = tmp_path / "sw"
    code, err = jb("sweep", *args, "--out", str(out))
    assert code == ExitStatus.INPUT and needle in one_line(err), err
    assert not out.exists()


def test_cli_defaults_with_scripts(jb, tmp_path, monkeypatch):
    """--script alone sweeps the script under own and jit; beside --workloads, jit;
    --script-args reaches the spec split as a shell splits it."""
    got = []

    def fake(cfg, out_dir, **kw):
        got.append(cfg)
        return sweep_mod.SweepResult(pd.DataFrame(columns=["workload", "strategy", "fault"]),
                                     out_dir, 0.0)

    monkeypatch.setattr(sweep_mod, "run_sweep", fake)
    code, err = jb("sweep", "--script", DDP, "--script-args", "--steps 10", "--steps", "10",
                   "--fault-step", "6", "--out", str(tmp_path / "a"))
    assert code == 0, err
    cfg = got[-1]
    assert cfg.workloads == [] and cfg.strategies == ["own", "jit"]
    assert [(s.path, s.args) for s in cfg.scripts] == [(DDP, ["--steps", "10"])]
    code, err = jb("sweep", "--workloads", "gpt", "--script", DDP, "--steps", "10",
                   "--fault-step", "6", "--out", str(tmp_path / "b"))
    assert code == 0, err
    assert got[-1].workloads == ["gpt"] and got[-1].strategies == ["jit"]
    code, err = jb("sweep", "--strategies", "jit", "--faults", "kill", "--steps", "4",
                   "--fault-step", "2", "--out", str(tmp_path / "c"))
    assert code == 0, err
    assert got[-1].workloads == ["gpt", "resnet"] and got[-1].scripts == []


def _row(**kw) -> dict:
    row = {"workload": "script:ddp_tutorial.py", "strategy": "own", "fault": "kill",
           "repeat": 0, "completed": True, "state_equal": True, "max_abs_diff": 0.0,
           "replay_ok": None, "replay_promised": False, "bitwise_promised": False,
           "replayed_steps": 5, "expected_replayed_steps": None, "unfired_faults": 0}
    row.update(kw)
    return row


def test_own_rows_are_reported_not_judged():
    """A script's own recovery promises no replay bound and no state: a sweep's strict
    verdict passes it; jit rows of a script, and built-in rows, are judged."""
    assert verdict(_row(), strict=True)[0] == ExitStatus.OK
    assert verdict(_row(state_equal=False, max_abs_diff=1.0), strict=True)[0] == ExitStatus.OK
    jit = _row(strategy="jit", replay_promised=True, bitwise_promised=True)
    assert verdict({**jit, "replay_ok": True, "replayed_steps": 0}, strict=True)[0] == \
        ExitStatus.OK
    assert verdict({**jit, "replay_ok": None}, strict=True)[0] == ExitStatus.INCORRECT
    builtin = {**jit, "workload": "gpt", "replay_ok": None, "replay_promised": float("nan")}
    assert verdict(builtin, strict=True)[0] == ExitStatus.INCORRECT  # missing: promised
    status, lines = table_verdict(pd.DataFrame([_row(), {**jit, "replay_ok": True}]))
    assert status == ExitStatus.OK and lines == []
    replayed = next(c for c in RESULT_COLUMNS if c.name == "replayed_steps")
    assert good(replayed, _row()) is None  # unmarked, not red
    assert good(replayed, {**jit, "replay_ok": True}) is True


def test_report_names_the_scripts_and_counts_only_promises(tmp_path):
    """A sweep table with gpt and script rows: the report writes both in one table, says
    which command each script was, and counts the replay invariant over promised rows."""
    from jitbench.reports.html import write_report

    sw = tmp_path / "sw"
    sw.mkdir()
    base = {"fault": "kill", "repeat": 0, "completed": True, "world_size": 2, "steps": 10,
            "detect_s": 0.1, "restart_s": 3.0, "restore_s": 0.2, "recovery_s": 4.0,
            "wasted_gpu_s": 8.0, "train_wall_s": 9.0, "goodput": 0.5, "step_s": 0.2,
            "max_abs_diff": 0.0, "state_equal": True, "run_dir": str(tmp_path / "none")}
    rows = [{**base, "workload": "gpt", "strategy": "jit", "replay_ok": True,
             "replayed_steps": 0, "expected_replayed_steps": 0, "bitwise_promised": True},
            {**base, "workload": "script:ddp_tutorial.py", "strategy": "jit", "replay_ok": True,
             "replayed_steps": 0, "expected_replayed_steps": 0, "bitwise_promised": True,
             "replay_promised": True, "script": DDP},
            {**base, "workload": "script:ddp_tutorial.py", "strategy": "own", "replay_ok": None,
             "replayed_steps": 5, "expected_replayed_steps": None, "bitwise_promised": False,
             "replay_promised": False, "script": DDP}]
    pd.DataFrame(rows).to_parquet(sw / "results.parquet", index=False)
    (sw / "sweep.json").write_text(json.dumps({
        "wall_s": 1.0, "runs": 3, "machine": {}, "scripts": [
            {"workload": "script:ddp_tutorial.py", "script": DDP,
             "args": ["--steps", "10", "--name", "a b"]}]}))
    html, md = write_report(sw)
    text = md.read_text()
    assert f"- `script:ddp_tutorial.py`: `python {DDP} --steps 10 --name 'a b'`" in text
    assert "| script:ddp_tutorial.py | own | kill |" in text and "| gpt | jit | kill |" in text
    page = html.read_text()
    assert "script:ddp_tutorial.py: <code>python" in page
    assert '<div class="v ok">2/2</div><div class="k">replay invariant' in page
    assert "script:ddp_tutorial.py · kill at 2 ranks: " in text  # its own comparison line


def test_an_interrupted_run_stops_the_sweep_and_resume_runs_it_again(jb, tmp_path, monkeypatch):
    """Ctrl-C or SIGTERM in a cell (the harness returns its summary marked
    ``interrupted``) stops the sweep at once with KeyboardInterrupt (exit 130), gives
    the row to no one, keeps the summary, and ``resume`` runs that cell again, not
    the finished ones; an interrupted reference is also run again."""
    from jitbench.harness import run as run_mod

    launched: list[str] = []
    stop = {"at": "kill"}

    class Out:
        def __init__(self, summary):
            self.summary = summary

    def fake_run(spec, run_dir, reference=True, reference_from=None, overwrite=False,
                 timeout_s=None):
        run_dir.mkdir(parents=True, exist_ok=True)
        fault = spec.faults[0].kind if spec.faults else "reference"
        launched.append(fault)
        s = {"faults": [], "completed": True, "state_equal": True, "strategy": spec.strategy,
             "workload": spec.workload.name, "seed": 0,
             "interrupted": fault == stop["at"]}
        (run_dir / "summary.json").write_text(json.dumps(s))
        return Out(s)

    monkeypatch.setattr(run_mod, "run", fake_run)
    cfg = SweepConfig(workloads=["gpt"], strategies=["jit"], faults=["nccl-hang", "kill", "term"],
                      steps=4, fault_step=2)
    rows: list[dict] = []
    out = tmp_path / "sw"
    with pytest.raises(KeyboardInterrupt):
        sweep_mod.run_sweep(cfg, out, on_run=rows.append)
    assert launched == ["reference", "nccl-hang", "kill"]  # term never started
    assert [r.get("fault") for r in rows if not r.get("reference")] == ["nccl-hang"]
    killed = cell_dir(out, "gpt", "jit", "kill", 0, 0) / "summary.json"
    assert json.loads(killed.read_text())["interrupted"] is True  # the record is kept
    assert json.loads((out / "sweep.json").read_text())["complete"] is False
    copy = tmp_path / "copy"  # an interrupted sweep's directory: --overwrite replaces it
    shutil.copytree(out, copy)
    stop["at"] = None
    sweep_mod.run_sweep(cfg, copy, overwrite=True)
    assert json.loads((copy / "sweep.json").read_text())["complete"] is True
    stop["at"] = "kill"
    stop["at"] = None
    launched.clear()
    res = sweep_mod.run_sweep(cfg, out, resume=True)
    assert launched == ["kill", "term"]  # the finished reference and cell are kept
    assert list(res.table["fault"]) == ["nccl-hang", "kill", "term"]
    ref = next((out / "refs").iterdir()) / "summary.json"
    ref.write_text(json.dumps({**json.loads(ref.read_text()), "interrupted": True}))
    rec = json.loads((out / "sweep.json").read_text())  # as an interrupted sweep left it
    (out / "sweep.json").write_text(json.dumps({**rec, "complete": False}))
    launched.clear()
    sweep_mod.run_sweep(cfg, out, resume=True)
    assert launched == ["reference"]
    stop["at"] = "kill"  # the command: one line, exit 130
    code, err = jb("sweep", "--workloads", "gpt", "--strategies", "jit", "--faults", "kill",
                   "--steps", "4", "--fault-step", "2", "--out", str(tmp_path / "cli"))
    assert code == ExitStatus.INTERRUPTED
    assert err.strip().splitlines()[-1].startswith(
        "interrupted: sweep stopped after 0 of 1 cells; no results table yet")
    assert "VIOLATION" not in err  # the interrupted cell is no row
