"""Bad input everywhere: one clear line, exit status 2, nothing recorded lost.

These call the console entry point in-process (no torch start-up per case);
every case is rejected before anything is launched.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from jitbench import cli
from jitbench.errors import IncomparableError, ScheduleError
from jitbench.runtime import checkpoint as ckpt
from tests.conftest import one_line


@pytest.mark.parametrize("args, needle", [
    (["--steps", "0"], "--steps must be >= 1"),
    (["--batch-size", "0"], "batch size and gradient accumulation must be >= 1"),
    (["--grad-accum", "0"], "batch size and gradient accumulation must be >= 1"),
    (["--max-restarts", "-1"], "--max-restarts must be >= 0"),
    (["--amp", "fp8"], "gpt amp must be off, bf16 or fp16"),
    (["--schedule", "linear"], "gpt schedule must be one of"),
    (["--workload", "resnet", "--amp", "bf16"], "apply to the gpt workload only"),
    (["--fault-step", "0"], "fault step 0 must be in 1..59"),
    (["--fault-rank", "-1"], "fault rank -1 is outside the world"),
    (["--nproc", "1", "--fault-rank", "0"], "a fault needs at least 2 ranks"),
    (["--fault", "none", "--fault-step", "5"], "--fault-step needs a --fault"),
    (["--fault", "none", "--every-attempt"], "--every-attempt needs a --fault"),
    (["--mtbf", "30m"], "--mtbf sizes the interval of periodic:auto"),
    (["--steps", "1"], "a fault needs a run of at least 2 steps"),
    (["--bogus"], "error: No such option: --bogus (see 'jitbench run --help')"),
    (["--steps", "many"], "Invalid value for '--steps'"),
    (["--hang-floor-s", "inf"], "--hang-floor-s must be a finite number > 0"),
    (["--fault-mtbf-steps", "1e-12"], "--fault-mtbf-steps: an MTBF of 1e-12 steps"),
    # click keeps an option's last value: a second --fault was dropped silently
    (["--fault", "kill", "--fault", "nccl-hang"],
     "--fault was given 2 times; it takes one value (several faults: --scenario FILE)"),
    (["--steps", "8", "--steps=9"], "--steps was given 2 times; it takes one value"),
])
def test_bad_flags(jb, tmp_path, args, needle):
    code, err = jb("run", *args, "--run-dir", str(tmp_path / "r"))
    assert code == 2 and needle in one_line(err)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("cmd", ["run", "sweep", "overhead"])
def test_nccl_backend_is_refused_without_enough_cuda_devices(jb, tmp_path, cmd):
    """One rank per CUDA device: refused up front (no CUDA here; on a GPU
    machine, 4096 ranks per node), before anything is created."""
    out = tmp_path / "out"
    where = ["--run-dir", str(out)] if cmd == "run" else ["--out", str(out)]
    code, err = jb(cmd, "--backend", "nccl", "--nproc", "4096", *where)
    assert code == 2 and one_line(err).startswith("error: --backend nccl")
    assert not out.exists()
    code, err = jb(cmd, "--backend", "mpi", *where)
    assert code == 2 and "unknown backend 'mpi'; one of gloo, nccl" in one_line(err)


@pytest.mark.parametrize("args, needle", [
    (["--size", "tiny", "--", "SCRIPT"], "--size is a built-in workload's"),
    (["--", "MISSING"], "does not exist"),
    (["--strategies", "periodic:2", "--", "SCRIPT"], "own (jitbench's hooks) and jit "
     "(transparent JIT), got 'periodic:2'"),
    (["--", "-m"], "-m needs a module"),
    (["--strategies", ""], "--strategies is blank"),
    (["--strategies", " , "], "--strategies is empty"),
    (["--strategies", "", "--", "SCRIPT"], "--strategies is blank"),
])
def test_overhead_of_a_script_bad_input(jb, tmp_path, args, needle):
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    args = [str(script) if a == "SCRIPT" else str(tmp_path / "no.py") if a == "MISSING"
            else a for a in args]
    code, err = jb("overhead", "--out", str(tmp_path / "oh"), *args)
    assert code == 2 and needle in one_line(err)
    assert not (tmp_path / "oh").exists()


def test_data_paths(jb, tmp_path, monkeypatch):
    tiny = tmp_path / "tiny.txt"
    tiny.write_text("x" * 100)  # one 128-byte window needs 129 bytes
    code, err = jb("run", "--data", str(tiny), "--run-dir", str(tmp_path / "r"))
    assert code == 2 and "shorter than one window" in one_line(err)
    few = tmp_path / "few.txt"
    few.write_text("y" * 129 * 3)  # 3 windows < one global minibatch of 8 x 2
    code, err = jb("run", "--data", str(few), "--run-dir", str(tmp_path / "r"))
    assert code == 2 and "fewer than one minibatch" in one_line(err)
    unreadable = tmp_path / "secret.txt"
    unreadable.write_text("z" * 10_000)

    def denied(*a, **k):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(cli.run, "open", denied, raising=False)  # root reads everything
    code, err = jb("run", "--data", str(unreadable), "--run-dir", str(tmp_path / "r"))
    monkeypatch.delattr(cli.run, "open")
    assert code == 2 and "is unreadable: Permission denied" in one_line(err)
    assert not (tmp_path / "r").exists()


def test_corrupt_image_for_resnet(jb, tmp_path):
    root = tmp_path / "images"
    (root / "cat").mkdir(parents=True)
    (root / "cat" / "a.png").write_bytes(b"\x89PNG\r\n\x1a\n not really an image")
    code, err = jb("run", "--workload", "resnet", "--data", str(root), "--run-dir",
                   str(tmp_path / "r"))
    assert code == 2 and "cannot read image" in one_line(err)
    code, err = jb("run", "--workload", "resnet", "--data", str(tmp_path / "none"))
    assert code == 2 and "does not exist" in one_line(err)
    (tmp_path / "empty").mkdir()
    code, err = jb("run", "--workload", "resnet", "--data", str(tmp_path / "empty"))
    assert code == 2 and "is empty" in one_line(err)


def test_run_directory_is_never_overwritten_or_misused(jb, tmp_path):
    d = tmp_path / "r"
    d.mkdir()
    (d / "summary.json").write_text('{"kept": true}')
    code, err = jb("run", "--run-dir", str(d))
    assert code == 2 and "exists and is not empty" in one_line(err)
    # --overwrite with bad input: validation comes first, nothing is removed
    code, err = jb("run", "--run-dir", str(d), "--overwrite", "--steps", "0")
    assert code == 2 and (d / "summary.json").read_text() == '{"kept": true}'
    f = tmp_path / "file"
    f.write_text("x")
    code, err = jb("run", "--run-dir", str(f))
    assert code == 2 and "is not a directory" in one_line(err)
    code, err = jb("run", "--run-dir", str(f / "sub"))
    assert code == 2 and "cannot create run directory" in one_line(err)
    assert f.read_text() == "x"
    # --overwrite never deletes the --ckpt-dir the run is to resume from
    (d / "spec.json").write_text('{"strategy": "jit", "faults": []}')
    (d / "ckpt").mkdir()
    (d / "ckpt" / "notes.txt").write_text("mine")
    code, err = jb("run", "--run-dir", str(d), "--overwrite", "--ckpt-dir", str(d / "ckpt"))
    assert code == 2 and "lies inside the run directory that --overwrite" in one_line(err)
    assert (d / "ckpt" / "notes.txt").read_text() == "mine"


def _spec_fingerprint(**kw) -> str:
    from jitbench.harness.spec import RunSpec
    from jitbench.workloads import WorkloadConfig

    wl = WorkloadConfig(**kw)
    return RunSpec(workload=wl, nproc=2).fingerprint()


@pytest.mark.parametrize("world, same_run, needle", [
    (4, True, "world size 4, this job has 2"),
    (2, False, "written by another run"),
])
def test_checkpoint_directory_of_another_job(jb, tmp_path, world, same_run, needle):
    run_id = _spec_fingerprint(steps=60) if same_run else _spec_fingerprint(steps=61)
    part = ckpt.write_part(tmp_path / "ck", "periodic", 5, 0, world, {"step": 5}, run_id=run_id)
    before = part.path.read_bytes()
    code, err = jb("run", "--ckpt-dir", str(tmp_path / "ck"), "--run-dir", str(tmp_path / "r"))
    assert code == 2 and "holds another job's checkpoints" in one_line(err)
    assert needle in err
    assert part.path.read_bytes() == before and not (tmp_path / "r").exists()


def _earlier_job(tmp_path, seed=3):
    from jitbench.harness.spec import RunSpec
    from jitbench.workloads import WorkloadConfig

    return RunSpec(workload=WorkloadConfig(steps=61, seed=seed), nproc=2,
                   ckpt_dir=str(tmp_path / "ck"))


def test_checkpoint_directory_of_another_job_names_the_setting_that_differs(jb, tmp_path):
    from jitbench.harness.run import JOB_FILE, claim_ckpt_dir

    earlier = _earlier_job(tmp_path)
    assert claim_ckpt_dir(earlier) is False and not (tmp_path / "ck").exists()  # nothing written
    ckpt.write_part(tmp_path / "ck", "periodic", 5, 0, 2, {"step": 5}, run_id=earlier.fingerprint())
    assert claim_ckpt_dir(earlier) is True  # what the earlier job's launch did after it
    assert json.loads((tmp_path / "ck" / JOB_FILE).read_text())["run_id"] == earlier.fingerprint()
    assert sorted(p.name for p in (tmp_path / "ck").iterdir() if "tmp" in p.name) == []
    code, err = jb("run", "--ckpt-dir", str(tmp_path / "ck"), "--run-dir", str(tmp_path / "r"))
    assert code == 2 and "holds another job's checkpoints" in one_line(err)
    assert "differs: workload.seed 3 there, 0 here; workload.steps 61 there, 60 here" in err


def test_a_stale_job_file_names_no_setting(jb, tmp_path):
    """job.json of a job whose parts were deleted: the parts there now are another
    job's, so the refusal names no difference rather than the wrong one."""
    from jitbench.harness.run import claim_ckpt_dir

    stale, other = _earlier_job(tmp_path, seed=3), _earlier_job(tmp_path, seed=5)
    part = ckpt.write_part(tmp_path / "ck", "periodic", 5, 0, 2, {"step": 5},
                           run_id=stale.fingerprint())
    assert claim_ckpt_dir(stale)
    part.path.unlink()
    part.manifest_path.unlink()
    ckpt.write_part(tmp_path / "ck", "periodic", 5, 0, 2, {"step": 5}, run_id=other.fingerprint())
    code, err = jb("run", "--ckpt-dir", str(tmp_path / "ck"), "--run-dir", str(tmp_path / "r"))
    assert code == 2 and "holds another job's checkpoints" in one_line(err)
    assert "differs" not in err


def test_the_job_file_is_best_effort(tmp_path, monkeypatch):
    """A directory that takes no file (read-only: resumed from only) is no error, and
    a file already naming the training is not rewritten (several nodes of one job)."""
    import os

    from jitbench.harness.run import JOB_FILE, claim_ckpt_dir

    job = _earlier_job(tmp_path)
    ckpt.write_part(tmp_path / "ck", "periodic", 5, 0, 2, {"step": 5}, run_id=job.fingerprint())

    def refuse(*_a, **_k):
        raise OSError(30, "Read-only file system")

    with monkeypatch.context() as m:
        m.setattr(os, "replace", refuse)
        assert claim_ckpt_dir(job) is False
    assert sorted(p.name for p in (tmp_path / "ck").iterdir() if JOB_FILE in p.name) == []
    assert claim_ckpt_dir(job) is True
    monkeypatch.setattr(os, "replace", refuse)
    assert claim_ckpt_dir(job) is True  # already this training's: no write at all


def test_checkpoint_directory_that_is_a_file(jb, tmp_path):
    (tmp_path / "ck").write_text("x")
    code, err = jb("run", "--ckpt-dir", str(tmp_path / "ck"), "--run-dir", str(tmp_path / "r"))
    assert code == 2 and "is not a directory" in one_line(err)


@pytest.mark.parametrize("where, needle", [
    ("afile/ck", "Not a directory"),  # its parent is a file
    ("/proc/jitbench-ck", "No such file or directory"),  # a file system that takes no dir
])
def test_checkpoint_directory_that_cannot_be_written(jb, tmp_path, where, needle):
    """Refused before launch with the OS error (each attempt's first save failed: a
    failed job, exit 3, or under jit a JIT save lost and exit 4)."""
    (tmp_path / "afile").write_text("x")
    ck = where if where.startswith("/") else str(tmp_path / where)
    code, err = jb("run", "--strategy", "periodic:1", "--ckpt-dir", ck,
                   "--run-dir", str(tmp_path / "r"))
    assert code == 2 and needle in one_line(err) and "cannot be created" in err
    assert not (tmp_path / "r").exists()


def test_an_absent_checkpoint_directory_passes_and_nothing_is_made(jb, tmp_path):
    """An absent --ckpt-dir that can be made passes the check, which makes nothing
    (a --ckpt-dir inside the --run-dir it precedes, as a multi-node job shares one);
    an existing one that takes no new file is refused (with checkpoints too: every save
    would fail)."""
    from jitbench.harness.run import check_ckpt_dir
    from jitbench.harness.spec import RunSpec

    check_ckpt_dir(RunSpec(ckpt_dir=str(tmp_path / "a" / "b")))
    assert list(tmp_path.iterdir()) == []
    code, err = jb("run", "--ckpt-dir", str(tmp_path / "r" / "ck"), "--run-dir",
                   str(tmp_path / "r"), "--steps", "0")  # refused later, for --steps
    assert code == 2 and "--steps must be >= 1" in one_line(err)
    assert not (tmp_path / "r").exists()
    check_ckpt_dir(RunSpec(ckpt_dir=str(tmp_path)))  # existing, empty, writable: passes
    assert list(tmp_path.iterdir()) == []
    code, err = jb("run", "--ckpt-dir", "/proc", "--run-dir", str(tmp_path / "r"))
    assert code == 2 and "takes no new file" in one_line(err) and "/proc" in err
    assert not (tmp_path / "r").exists()


def test_fault_injection_point_must_exist():
    from jitbench.faults import FaultSpec
    from jitbench.harness.spec import RunSpec, SpecError
    from jitbench.workloads import WorkloadConfig

    wl = WorkloadConfig(grad_accum=2)
    RunSpec(workload=wl, faults=[FaultSpec("kill", 1, 3, params={"at": "micro:1"})]).validate()
    for at in ("micro:2", "sideways"):
        with pytest.raises(SpecError, match="injection point"):
            RunSpec(workload=wl, faults=[FaultSpec("kill", 1, 3, params={"at": at})]).validate()


def test_unknown_gpt_option_in_a_spec():
    from jitbench.harness.spec import RunSpec, SpecError
    from jitbench.workloads import WorkloadConfig

    with pytest.raises(SpecError, match=r"unknown gpt option\(s\) \['colour'\]"):
        RunSpec(workload=WorkloadConfig(extra={"colour": "red"})).validate()
    with pytest.raises(SpecError, match="dropout must be a number"):
        RunSpec(workload=WorkloadConfig(extra={"dropout": "lots"})).validate()


def test_spec_json_with_ckpt_dir_round_trips(tmp_path):
    from jitbench.harness.spec import RunSpec

    spec = RunSpec(ckpt_dir=str(tmp_path))
    again = RunSpec.from_dict(json.loads(spec.to_json()))
    assert again == spec and again.without_faults().ckpt_dir is None
    assert spec.fingerprint() == again.fingerprint() == RunSpec().fingerprint()


@pytest.mark.parametrize("summary, code, needle", [
    ({"completed": True, "state_equal": True, "max_replayed_steps_per_failure": 1}, 0, ""),
    ({"completed": False, "agent_exit": 1, "attempts": 4}, 3, "did not complete"),
    ({"completed": False, "timed_out": True}, 3, "stopped after --timeout-s"),
    ({"completed": True, "state_equal": False, "max_abs_diff": 0.5}, 4, "differs"),
    ({"completed": True, "state_equal": True, "max_replayed_steps_per_failure": 2}, 4,
     "replayed 2 steps"),
    ({"completed": False, "error_kind": "checkpoint", "error": "ckpt/x: world size 4"}, 2,
     "world size 4"),
    ({"completed": False, "interrupted": True}, 130, "interrupted; records kept"),
])
def test_exit_statuses_reach_the_shell(jb, tmp_path, monkeypatch, summary, code, needle):
    """Every documented status leaves the process (click returns, not raises, them)."""
    from jitbench.harness import run as run_mod

    class Outcome:
        pass

    def fake_run(spec, run_dir, **kw):
        o = Outcome()
        o.summary = {"interrupted": False, "timed_out": False, "error_kind": None,
                     "agent_exit": 0, "attempts": 1, **summary}
        return o

    monkeypatch.setattr(run_mod, "run", fake_run)
    monkeypatch.setattr("jitbench.reports.table.summary_table", lambda s: "table")
    got, err = jb("run", "--run-dir", str(tmp_path / "r"), "--timeout-s", "9")
    assert got == code and needle in err


def test_scenario_files(jb, tmp_path):
    """Scenario files that are not files, not text, or not a plan (the grammar's own
    errors are covered in test_schedule.py)."""
    r = str(tmp_path / "r")
    code, err = jb("run", "--scenario", str(tmp_path / "none.toml"), "--run-dir", r)
    assert code == 2 and "does not exist" in one_line(err)
    (tmp_path / "dir.toml").mkdir()
    code, err = jb("run", "--scenario", str(tmp_path / "dir.toml"), "--run-dir", r)
    assert code == 2 and "is not a file" in one_line(err)
    (tmp_path / "bin.toml").write_bytes(b"\xff\xfe\x00kind")
    code, err = jb("run", "--scenario", str(tmp_path / "bin.toml"), "--run-dir", r)
    assert code == 2 and "not a UTF-8 text file" in one_line(err)
    (tmp_path / "far.toml").write_text("[[fault]]\nkind='kill'\nrank=1\nstep=100\n")
    code, err = jb("run", "--scenario", str(tmp_path / "far.toml"), "--steps", "12",
                   "--run-dir", r)
    assert code == 2 and "step 100 must be in 1..11" in one_line(err)
    (tmp_path / "micro.toml").write_text("[[fault]]\nkind='kill'\nstep=3\nat='micro:4'\n")
    code, err = jb("run", "--scenario", str(tmp_path / "micro.toml"), "--grad-accum", "2",
                   "--run-dir", r)
    assert code == 2 and "micro:4" in one_line(err)
    assert not (tmp_path / "r").exists()


def test_benchmark_commands_refuse_bad_tables_and_options(jb, tmp_path):
    """Found by a new-user pass: each used to end in an internal error (exit 1),
    a silent pass, or 'incomparable' (exit 6) instead of bad input (exit 2)."""
    garbage = tmp_path / "g.csv"
    garbage.write_bytes(b"garbage\x00\x01")
    other = tmp_path / "other.csv"
    other.write_text("workload,strategy,error_pct\ngpt,jit,1.0\n")
    sweep = tmp_path / "sw"
    sweep.mkdir()
    (sweep / "results.csv").write_text(other.read_text())
    base = tmp_path / "base.csv"
    base.write_text("workload,strategy,fault,state_equal,spec_hash\ngpt,jit,kill,True,ab12\n")
    good = tmp_path / "good"
    good.mkdir()
    shutil.copy(Path(__file__).parents[2] / "benchmarks" / "baseline-cpu.csv",
                good / "results.csv")
    cases = [
        (("report", str(sweep)), "not a jitbench results table"),
        (("report", str(sweep), "--out", str(tmp_path)), "is a directory"),
        (("report", str(sweep), "--overhead", str(tmp_path / "nope")), "no overhead.csv"),
        (("gate", "--baseline", str(base), str(garbage)), "not a jitbench sweep results table"),
        (("gate", "--baseline", str(base), str(other)), "no column fault, state_equal"),
        (("gate", "--baseline", str(base), str(base), "--tolerance", "nan"), "--tolerance"),
        (("gate", "--baseline", str(base), str(base), "--floor-s", "-1"), "--floor-s"),
        (("sweep", "--resume", "--out", str(garbage)), "is not a directory"),
        (("sweep", "--seeds", "-1", "--out", str(tmp_path / "s")), "--seeds must be"),
        (("run", "--seed", "-1", "--run-dir", str(tmp_path / "r")), "--seed must be"),
        (("validate", str(other)), "not a jitbench records or results table (no column"),
        (("report", str(good), "--out", str(tmp_path / "r.md")), "the markdown is written"),
        (("report", str(good), "--out", "/proc/nope/r.html"),
         "--out: cannot write /proc/nope/r.html: its directory /proc/nope does not exist"),
        # a missing directory is refused, not created (as validate and io refuse theirs)
        (("report", str(good), "--out", str(tmp_path / "typo" / "r.html")),
         f"its directory {tmp_path / 'typo'} does not exist"),
        (("report", str(good), "--out", "/proc/r.html"), "/proc takes no new file"),
    ]
    for args, needle in cases:
        code, err = jb(*args)
        assert code == 2 and needle in one_line(err), (args, err)
    assert garbage.read_bytes() == b"garbage\x00\x01"  # nothing recorded lost
    assert not (tmp_path / "typo").exists()


@pytest.mark.parametrize("exc, code, needle", [
    (IncomparableError("schema 1 vs 2"), 6,
     "error: schema 1 vs 2"),
    (ScheduleError("bad plan"), 2, "error: bad plan"),
    (KeyboardInterrupt(), 130, None),  # typer turns it into exit 130 itself, silently
    (RuntimeError("boom"), 1, "internal error: RuntimeError: boom (rerun with --debug)"),
])
def test_main_maps_errors_to_exit_statuses(jb, monkeypatch, exc, code, needle):
    """Every JitbenchError exits with its exit_status and one line; anything else is a bug."""
    from jitbench.reports import modelcmd

    def fail(*a, **k):
        raise exc

    monkeypatch.setattr(modelcmd, "model_main", fail)
    got, err = jb("model")
    assert got == code and (needle is None or one_line(err) == needle)


def test_new_user_pass_of_2026_12_02(jb, tmp_path, capsys):
    """Found by a new-user pass: ``report --out`` replaced a run's own records with HTML
    (exit 0); ``gate`` on a run directory said 'incomparable' (exit 6); ``launch`` of a
    missing script asked for --fault-step first; plain ``jitbench`` squeezed its help into
    one error line; ``model`` named Python fields instead of its flags; ``sweep --out``
    called its directory a run directory."""
    good = tmp_path / "good"
    good.mkdir()
    shutil.copy(Path(__file__).parents[2] / "benchmarks" / "baseline-cpu.csv",
                good / "results.csv")
    keep = good / "results.csv"
    before = keep.read_bytes()
    notes = tmp_path / "notes.md"
    notes.write_text("my notes\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / "records.csv").write_text("workload,strategy,faults,state_equal\ngpt,jit,[],True\n")
    cases = [
        (("report", str(good), "--out", str(keep)), "exists and is not a jitbench report"),
        (("report", str(good), "--out", str(tmp_path / "notes.html")),
         "notes.md exists and is not a jitbench report"),
        (("gate", "--baseline", str(good), str(run)),
         "a run's records (records.csv); gate compares the results of a sweep"),
        (("gate", "--baseline", str(good), str(run / "records.csv")),
         "not a jitbench sweep results table (no column spec_hash)"),
        (("launch", "--", str(tmp_path / "nope.py")), "nope.py does not exist"),
        (("launch", "--", "-m", "no_such_module_xyz"), "is not importable here"),
        (("model", "--step-s", "-1"), "--step-s must be a finite number > 0"),
        (("model", "--mtbf-hours-per-gpu", "0"), "--mtbf-hours-per-gpu must be"),
        (("sweep", "--out", str(good)), f"sweep directory {good} exists and is not empty"),
    ]
    for args, needle in cases:
        code, err = jb(*args)
        assert code == 2 and needle in one_line(err), (args, err)
    assert keep.read_bytes() == before and notes.read_text() == "my notes\n"
    # a report may replace its own earlier output
    out = tmp_path / "r.html"
    for _ in range(2):
        code, err = jb("report", str(good), "--out", str(out))
        assert code == 0, err
    assert out.read_text().startswith("<!doctype html>")
    assert out.with_suffix(".md").read_text().startswith("# jitbench report\n")
    # plain `jitbench`: the whole help, as click lays it out, and the usage status
    code, err = jb()
    assert code == 2 and "Usage: jitbench" in err and "Commands" in err
    assert "error:" not in err and len(err.strip().splitlines()) > 5


@pytest.mark.parametrize("args,needle", [
    (("run", "--fault", "nccl-hnag"), "unknown fault 'nccl-hnag'; did you mean 'nccl-hang'?"),
    (("run", "--strategy", "periodc:3"),
     "unknown strategy 'periodc:3'; did you mean 'periodic:3'? use jit"),
    (("run", "--strategy", "Periodic-asnyc:4"), "did you mean 'periodic-async:4'?"),
    (("run", "--workload", "resnt"), "unknown workload 'resnt'; did you mean 'resnet'?"),
    (("run", "--backend", "glo"), "unknown backend 'glo'; did you mean 'gloo'?"),
    (("run", "--workload", "resnet", "--size", "resnet81"), "did you mean 'resnet18'?"),
    (("sweep", "--faults", "kil,nccl-hang"), "unknown fault 'kil'; did you mean 'kill'?"),
    (("report", ".", "--max-timelines", "-1"), "--max-timelines"),
])
def test_a_misspelt_name_gets_the_closest_one_and_negatives_are_refused(jb, args, needle):
    """New-user pass of 2026-12-02: a misspelt fault or strategy listed every name but
    suggested none; ``report --max-timelines -1`` drew no timeline instead of refusing."""
    code, err = jb(*args)
    assert code == 2 and needle in one_line(err), err


@pytest.mark.parametrize("name", ["qqq", "zzzzzz"])
def test_no_suggestion_when_nothing_is_close(jb, name):
    code, err = jb("run", "--fault", name)
    assert code == 2 and "did you mean" not in one_line(err) and "one of none," in err


def test_a_launched_scripts_own_repeated_arguments_are_not_refused():
    """Only jitbench's options are counted: a script's arguments after ``--`` are its own."""
    assert cli.repeated_option(["launch", "--fault", "kill", "--", "t.py", "--lr", "1",
                                "--lr", "2", "--steps", "1", "--steps", "2"]) is None
    assert cli.repeated_option(["launch", "--steps", "1", "--steps", "2", "--", "t.py"]) \
        == "--steps was given 2 times; it takes one value"


def test_a_checkpoint_directory_that_takes_no_new_file_is_refused_with_checkpoints(
        tmp_path, monkeypatch):
    """An existing --ckpt-dir with committed checkpoints that takes no new file (a read-only
    copy) is refused before launch: the run would resume, every save would fail, and the
    replay after it read as a broken promise (a new-user trial: exit 4)."""
    import tempfile as tf

    from jitbench.harness import run as run_mod
    from jitbench.harness.run import check_ckpt_dir
    from jitbench.harness.spec import RunSpec, SpecError

    d = tmp_path / "ck"
    d.mkdir()
    real = tf.mkdtemp

    def refuse(*a, dir=None, **k):
        if dir is not None and Path(dir) == d:
            raise PermissionError(1, "Operation not permitted")
        return real(*a, dir=dir, **k)

    monkeypatch.setattr(run_mod.tempfile, "mkdtemp", refuse)
    monkeypatch.setattr(run_mod, "_manifests", lambda path: [("part-of-step-3", {})])
    with pytest.raises(SpecError, match=r"takes no new file \(Operation not permitted\): every "
                                        r"save of the run would fail \(to resume from these"):
        check_ckpt_dir(RunSpec(ckpt_dir=str(d)))
    monkeypatch.setattr(run_mod, "_manifests", lambda path: [])
    with pytest.raises(SpecError, match="holds no checkpoint and takes no new file"):
        check_ckpt_dir(RunSpec(ckpt_dir=str(d)))


@pytest.mark.parametrize("args, needle", [
    (("sweep", "--strategies", "jit,,none"), "--strategies: empty item in 'jit,,none'"),
    (("sweep", "--faults", "kill,"), "--faults: empty item in 'kill,'"),
    (("sweep", "--seeds", "1,,2"), "--seeds: empty item in '1,,2'"),
    (("sweep", "--workloads", ",gpt"), "--workloads: empty item in ',gpt'"),
    (("sweep", "--sizes", "gpt=tiny,"), "--sizes: empty item in 'gpt=tiny,'"),
    (("overhead", "--strategies", "none,,jit"), "--strategies: empty item in 'none,,jit'"),
    (("model", "--gpus", "8,,64"), "--gpus: empty item in '8,,64'"),
    (("io", "--replicas", "1,,2"), "--replicas: expected comma-separated integers"),
])
def test_an_empty_item_in_a_comma_list_is_refused(jb, tmp_path, monkeypatch, args, needle):
    """New-user pass of 2026-12-05: ``--strategies "jit,,none"`` silently ran two
    strategies; a doubled or trailing comma is a typo to name, not an item to drop."""
    monkeypatch.chdir(tmp_path)
    code, err = jb(*args)
    assert code == 2 and needle in one_line(err), err
    assert list(tmp_path.iterdir()) == []  # nothing launched, nothing written
