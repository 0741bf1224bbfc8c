"""Findings of a new-user trial of ``jitbench run``: plans that place no fault, options
that contradict each other, checkpoints past the planned fault, runs the harness stopped,
an interrupted reference, the timeout in the end reason, ``completed_before`` of later
attempts. Everything here runs in process, without launching workers."""

from __future__ import annotations

import json

import pytest

from jitbench.errors import ScheduleError
from jitbench.faults.schedule import load_scenario, plan_from_options
from tests.conftest import one_line

# -- plans that place no fault in the run: refused before launch (exit 2) -------------


@pytest.mark.parametrize("args, needle", [
    (["--fault", "kill", "--fault-every", "10", "--steps", "6"],
     "--fault-every 10 places no fault in the 6-step run"),
    (["--fault", "kill", "--fault-every", "3", "--fault-step", "6", "--steps", "6"],
     "fault step 6 must be in 1..5"),
    (["--fault", "kill", "--fault-mtbf-steps", "1000", "--steps", "6"],
     "--fault-mtbf-steps: with an MTBF of 1000 steps the seeded draw (seed 0) places no "
     "fault in steps 1..5 of the 6-step run"),
])
def test_a_step_plan_with_no_fault_in_the_run_is_refused(jb, tmp_path, args, needle):
    code, err = jb("run", *args, "--run-dir", str(tmp_path / "r"))
    assert code == 2 and needle in one_line(err), err
    assert not (tmp_path / "r").exists()


def test_a_scenario_poisson_entry_that_draws_no_fault_is_refused(jb, tmp_path):
    p = tmp_path / "s.toml"
    p.write_text("[[poisson]]\nkinds = ['kill']\nmtbf_steps = 1000.0\n")
    code, err = jb("run", "--scenario", str(p), "--steps", "6", "--run-dir",
                   str(tmp_path / "r"))
    assert code == 2 and "poisson #1: with an MTBF of 1000 steps the seeded draw" \
        in one_line(err), err
    assert not (tmp_path / "r").exists()
    p.write_text("[[poisson]]\nkinds = ['kill']\nmtbf_s = 1000.0\nhorizon_s = 1.0\n")
    with pytest.raises(ScheduleError, match=r"places no fault within horizon_s 1 s"):
        load_scenario(p, nproc=2, steps=6, seed=0)


def test_plans_that_place_faults_still_pass():
    assert [f.step for f in plan_from_options("kill", None, None, 12, 2, 0,
                                              every_steps=5)] == [5, 10]
    assert plan_from_options("kill", None, None, 50, 2, 5, mtbf_steps=8.0)
    # a poisson draw that lands: the first arrival of seed 0 at an MTBF of 2 steps
    assert plan_from_options("kill", 0, None, 10, 2, 0, mtbf_steps=2.0)


# -- contradictory options: one line, exit 2, before launch ---------------------------


@pytest.mark.parametrize("args, needle", [
    (["--fault", "none", "--fault-rank", "0"], "--fault-rank needs a --fault (other than none)"),
    (["--fault", "none", "--fault-count", "2"], "--fault-count needs a --fault"),
    (["--fault", "none", "--fault-time-s", "3"], "--fault-time-s needs a --fault"),
    (["--fault", "none", "--fault-mtbf-steps", "3"], "--fault-mtbf-steps needs a --fault"),
    (["--fault", "none", "--fault-param", "at=step"], "--fault-param needs a --fault"),
    (["--fault", "none", "--nproc", "4", "--parallel", "hsdp:2x2",
      "--no-deterministic-reduce"],
     "--no-deterministic-reduce: under --parallel hsdp:2x2 FSDP2 reduces"),
])
def test_contradictory_options_are_refused(jb, tmp_path, args, needle):
    code, err = jb("run", *args, "--run-dir", str(tmp_path / "r"))
    assert code == 2 and needle in one_line(err), err
    assert not (tmp_path / "r").exists()


def test_a_scenario_with_fault_placement_flags_is_refused(jb, tmp_path):
    p = tmp_path / "s.toml"
    p.write_text("[[fault]]\nkind = 'kill'\nrank = 0\nstep = 3\n")
    code, err = jb("run", "--scenario", str(p), "--fault-rank", "1", "--steps", "8",
                   "--run-dir", str(tmp_path / "r"))
    assert code == 2 and "--fault-rank needs a --fault" in one_line(err), err


def test_torchft_refuses_no_deterministic_reduce():
    from jitbench.errors import SpecError
    from jitbench.harness.spec import RunSpec

    spec = RunSpec(strategy="torchft", deterministic_reduce=False)
    try:
        spec.validate()
    except SpecError as exc:
        msg = str(exc)
    else:  # torchft not installed: check_available refuses first
        pytest.fail("torchft with --no-deterministic-reduce was accepted")
    assert "--no-deterministic-reduce" in msg or "torchft" in msg


def test_hsdp_with_the_default_reduce_is_accepted():
    from jitbench.harness.spec import RunSpec

    RunSpec(nproc=4, parallel="hsdp:2x2").validate()


def _json(path):
    return json.loads(path.read_text())


# -- a --ckpt-dir whose newest checkpoint is past the planned fault -------------------


def _ckpt_dir_at(tmp_path, step: int):
    from jitbench.harness.spec import RunSpec
    from jitbench.runtime import checkpoint as ckpt
    from jitbench.workloads import WorkloadConfig

    run_id = RunSpec(workload=WorkloadConfig(steps=60), nproc=2).fingerprint()
    for s in (5, step):
        ckpt.write_part(tmp_path / "ck", "periodic", s, 0, 2, {"step": s}, run_id=run_id)
    return tmp_path / "ck"


def test_a_fault_planned_before_the_newest_checkpoint_is_refused(jb, tmp_path):
    ck = _ckpt_dir_at(tmp_path, 10)
    before = sorted(p.name for p in ck.iterdir())
    code, err = jb("run", "--fault", "kill", "--fault-step", "10", "--ckpt-dir", str(ck),
                   "--run-dir", str(tmp_path / "r"))
    assert code == 2 and ("fault kill@1:10 is planned at step 10, but the newest checkpoint "
                          f"in {ck} is of step 10") in one_line(err), err
    assert not (tmp_path / "r").exists() and sorted(p.name for p in ck.iterdir()) == before


def test_a_fault_after_the_newest_checkpoint_or_at_restore_passes(tmp_path):
    from jitbench.faults import FaultSpec
    from jitbench.harness.run import check_ckpt_dir
    from jitbench.harness.spec import RunSpec
    from jitbench.workloads import WorkloadConfig

    ck = _ckpt_dir_at(tmp_path, 10)
    for f in (FaultSpec("kill", 1, 11), FaultSpec("kill", 1, 3, time_s=2.0),
              FaultSpec("kill", 1, 4, params={"at": "restore"})):
        check_ckpt_dir(RunSpec(workload=WorkloadConfig(steps=60), nproc=2, faults=[f],
                               ckpt_dir=str(ck)))
