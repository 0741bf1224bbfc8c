"""The CLI: bad input gets one clear line and exit status 2, never a traceback; option
groups and help texts."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import pytest
import typer

from jitbench.harness.spec import RunSpec, SpecError, Strategy
from tests.conftest import one_line


def _cli(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jitbench.cli", *args], capture_output=True,
                          text=True, timeout=120, cwd=cwd)


@pytest.mark.parametrize("args, needle", [
    (["run", "--fault", "meteor"], "unknown fault 'meteor'"),
    (["run", "--strategy", "sometimes"], "unknown strategy 'sometimes'"),
    (["run", "--strategy", "periodic:0"], "the interval N must be an integer >= 1"),
    (["run", "--fault-rank", "2"], "fault rank 2 is outside the world of 2 ranks"),
    (["run", "--fault-step", "60"], "fault step 60 must be in 1..59"),
    (["run", "--data", "/nonexistent/corpus.txt"], "does not exist"),
    (["run", "--workload", "lstm"], "unknown workload 'lstm'"),
    (["run", "--size", "huge"], "unknown gpt size 'huge'"),
    (["run", "--nproc", "0"], "--nproc must be >= 1"),
])
def test_bad_input_is_one_line_exit_2(args, needle, tmp_path):
    p = _cli(*args, "--run-dir", str(tmp_path / "r"), cwd=tmp_path)
    assert p.returncode == 2, p.stderr
    assert needle in p.stderr
    assert "Traceback" not in p.stderr + p.stdout
    assert len(p.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()  # nothing started


def test_empty_and_directory_data_paths(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    p = _cli("run", "--data", str(empty), cwd=tmp_path)
    assert p.returncode == 2 and "is empty" in p.stderr
    p = _cli("run", "--data", str(tmp_path), cwd=tmp_path)
    assert p.returncode == 2 and "not a file" in p.stderr


def test_non_empty_run_dir_is_never_overwritten(tmp_path):
    d = tmp_path / "r"
    d.mkdir()
    (d / "summary.json").write_text("{}")
    p = _cli("run", "--run-dir", str(d), cwd=tmp_path)
    assert p.returncode == 2 and "exists and is not empty" in p.stderr
    assert (d / "summary.json").read_text() == "{}"


def test_unknown_flag_is_a_usage_error(tmp_path):
    p = _cli("run", "--frobnicate", cwd=tmp_path)
    assert p.returncode == 2 and "Traceback" not in p.stderr


def test_faults_lists_every_fault():
    p = _cli("faults", "--json")
    assert p.returncode == 0
    import json

    names = {r["name"] for r in json.loads(p.stdout)}
    assert {"kill", "nccl-hang"} <= names


def test_strategy_parse():
    assert Strategy.parse("periodic:5") == Strategy("periodic", 5)
    assert str(Strategy.parse("JIT")) == "jit"
    with pytest.raises(SpecError):
        Strategy.parse("periodic:-1")


def test_spec_json_round_trip():
    from jitbench.faults import FaultSpec

    spec = RunSpec(faults=[FaultSpec("kill", 1, 3)], strategy="periodic:2")
    again = RunSpec.from_dict(__import__("json").loads(spec.to_json()))
    assert again == spec and again.without_faults().faults == []


def test_model_command_prints_json_table(tmp_path):
    import json

    p = _cli("model", "--gpus", "512,16384", "--trials", "5", "--horizon-hours", "200",
             "--json", "--out", str(tmp_path))
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    rows = doc["rows"]
    strategies = {r["strategy"] for r in rows}
    assert {"jit", "periodic", "periodic-async"} <= strategies
    assert (tmp_path / "model.csv").exists() and (tmp_path / "model.png").exists()


def test_model_command_flags_win_over_measured_costs():
    import json
    from pathlib import Path

    base = Path(__file__).parents[2] / "benchmarks" / "baseline-cpu.csv"
    p = _cli("model", "--gpus", "1024", "--trials", "2", "--horizon-hours", "50", "--json",
             "--from-results", str(base), "--step-s", "2")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["params"]["step_s"] == 2.0 and doc["sources"]["step_s"] == "flag"
    assert doc["sources"]["save_s"] == "results"


def test_model_command_bad_gpus():
    p = _cli("model", "--gpus", "8,x")
    assert p.returncode == 2 and "--gpus" in p.stderr and "Traceback" not in p.stderr


def test_overwrite_never_deletes_a_directory_that_is_not_a_run(tmp_path):
    d = tmp_path / "precious"
    (d / "sub").mkdir(parents=True)
    (d / "sub" / "keep").write_text("x")
    p = _cli("run", "--run-dir", str(d), "--overwrite", cwd=tmp_path)
    assert p.returncode == 2 and "not a jitbench run directory" in p.stderr
    assert (d / "sub" / "keep").read_text() == "x"


@pytest.mark.parametrize("marker, text", [
    ("spec.json", '{"name": "my-app"}'),  # another project's spec.json
    ("spec.json", "not json"),
    ("sweep.json", '{"complete": true}'),
    ("overhead.json", '["complete"]'),
])
def test_overwrite_needs_a_marker_jitbench_wrote(tmp_path, marker, text):
    """A new-user trial: ``run --overwrite`` deleted a project whose ``spec.json`` was
    its own (exit 0, its sources gone): the marker's name alone was checked."""
    from jitbench.errors import RunDirError
    from jitbench.harness.run import prepare_dir

    d = tmp_path / "proj"
    (d / "src").mkdir(parents=True)
    (d / "src" / "main.py").write_text("code")
    (d / marker).write_text(text)
    with pytest.raises(RunDirError, match=f"its {marker} is not jitbench's"):
        prepare_dir(d, overwrite=True, marker=marker)
    assert (d / "src" / "main.py").read_text() == "code" and (d / marker).read_text() == text


def test_overwrite_never_deletes_the_working_directory(tmp_path, monkeypatch):
    """A new-user trial: ``run --run-dir . --overwrite`` inside a run directory deleted
    the run, then failed (exit 2 or 3): nothing old kept, nothing new written."""
    from jitbench.errors import RunDirError
    from jitbench.harness.run import prepare_dir

    run = tmp_path / "run"
    (run / "events").mkdir(parents=True)
    (run / "spec.json").write_text('{"strategy": "jit", "faults": []}')
    for cwd, given in ((run, Path(".")), (run, run), (run / "events", run)):
        monkeypatch.chdir(cwd)
        with pytest.raises(RunDirError, match="which holds the working directory"):
            prepare_dir(given, overwrite=True)
        assert (run / "spec.json").is_file() and (run / "events").is_dir()
    monkeypatch.chdir(tmp_path)  # from outside it, the earlier run is replaced
    prepare_dir(run, overwrite=True)
    assert run.is_dir() and not any(run.iterdir())


@pytest.mark.parametrize("flag, value", [("--hang-factor", "0"), ("--hang-floor-s", "-1"),
                                         ("--hang-first-s", "0"), ("--timeout-s", "-5")])
def test_non_positive_durations_are_bad_input(flag, value, tmp_path):
    p = _cli("run", flag, value, "--run-dir", str(tmp_path / "r"), cwd=tmp_path)
    assert p.returncode == 2 and flag in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "r").exists()



@dataclass
class _Group:
    size: Annotated[int, typer.Option(help="A size.")] = 3
    name: Annotated[str | None, typer.Option("--the-name", help="A name.")] = None


def test_option_groups_flatten_dataclasses_onto_the_command_line():
    from typer.testing import CliRunner

    from jitbench.cli.options import option_groups

    got = {}

    @option_groups
    def cmd(group: _Group, verbose: Annotated[bool, typer.Option()] = False) -> None:
        """A command."""
        got.update(group=group, verbose=verbose)

    app = typer.Typer()
    app.command()(cmd)
    app.command("other")(lambda: None)
    r = CliRunner().invoke(app, ["cmd", "--size", "5", "--the-name", "x", "--verbose"])
    assert r.exit_code == 0, r.output
    assert got == {"group": _Group(5, "x"), "verbose": True}
    CliRunner().invoke(app, ["cmd"])
    assert got == {"group": _Group(), "verbose": False}
    help_text = CliRunner().invoke(app, ["cmd", "--help"]).output
    assert "--size" in help_text and "--the-name" in help_text and "A command." in help_text

def test_strategy_help_comes_from_the_registry():
    from typer.testing import CliRunner

    from jitbench.cli import app
    from jitbench.runtime.strategies import usage

    for cmd in ("run", "sweep"):
        r = CliRunner().invoke(app, [cmd, "--help"], terminal_width=400)
        assert r.exit_code == 0 and usage() in " ".join(r.output.split()), r.output


@pytest.mark.parametrize("args, says", [
    (["validate", ""], "RESULTS is blank"),
    (["report", " "], "DIRECTORY is blank"),
    (["gate", "--baseline", "", "x"], "--baseline is blank"),
    (["run", "--data", "", "--steps", "2"], "--data is blank"),
    (["launch", "--", ""], "the script to launch is blank"),
    (["launch", "--", "python", ""], "the script to launch is blank"),
    (["launch", "--", "python3", "-m", " "], "the script to launch is blank"),
    (["faults", ""], "a blank argument was given"),
    (["io", "--ckpt-dir", ""], "--ckpt-dir is blank"),
])
def test_a_blank_value_is_refused_before_anything_is_read(jb, tmp_path, monkeypatch, args,
                                                           says):
    """A blank path (an unset shell variable) is one line, exit 2, before any work: a new-user
    trial found ``validate ""`` validating every run under the working directory (exit 0),
    ``report ""`` reading it, and ``run --data ""`` naming a path of no name."""
    run = tmp_path / "r"
    run.mkdir()
    (run / "records.csv").write_text("workload,strategy,fault\ngpt,jit,kill\n")
    monkeypatch.chdir(tmp_path)
    code, err = jb(*args)
    assert code == 2 and says in one_line(err) and "unset shell variable" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]
    assert sorted(p.name for p in run.iterdir()) == ["records.csv"]


def test_a_launched_scripts_own_blank_argument_is_its_own(jb, tmp_path):
    """After the script, blank arguments belong to it (it may take one): not refused here."""
    from jitbench.cli import blank_value

    assert blank_value(["launch", "--", "train.py", "", "--name", ""]) is None
    assert blank_value(["launch", "--", "python", "train.py", ""]) is None
    assert blank_value(["launch", "--", "-m", "pkg.train", ""]) is None
    assert blank_value(["launch", "--run-dir", "", "--", "train.py"]) is not None
    # sweep's own advice for a script without arguments beside others: not refused
    assert blank_value(["sweep", "--out", "x", "--script", "a.py", "--script-args", "",
                        "--script", "b.py", "--script-args", "--steps 3"]) is None


@pytest.mark.parametrize("module", ["jitbench", "jitbench.cli"])
def test_python_dash_m_runs_the_cli(module, tmp_path):
    """``python -m jitbench`` is the console script too (a new user tried it first)."""
    p = subprocess.run([sys.executable, "-m", module, "run", "--fault", "meteor"],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert p.returncode == 2 and "unknown fault 'meteor'" in p.stderr, p.stderr
