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
from tests.unit.test_phases import _events as _attempt  # one event file

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


@pytest.mark.parametrize("start", ["999", "12", "0", "-4"])
def test_a_poisson_start_step_outside_the_run_is_refused_as_such(jb, tmp_path, start):
    """With --fault-mtbf-steps, --fault-step is the step the draw starts at: one outside
    1..steps-1 places no fault whatever the seed, so the line says the start step is
    outside the run (naming the step given, not a shifted one), never "pick another
    seed"; step 0 is refused as everywhere else. One line, exit 2, nothing run."""
    code, err = jb("run", "--fault", "kill", "--fault-mtbf-steps", "3", "--fault-step",
                   start, "--steps", "12", "--run-dir", str(tmp_path / "r"))
    line = one_line(err)
    assert code == 2, err
    assert (f"--fault-step {start} (the step --fault-mtbf-steps starts drawing faults at) "
            "is outside the run: it must be in 1..11 (the run has 12 steps)") in line, line
    assert "seed" not in line
    assert not (tmp_path / "r").exists()
    with pytest.raises(ScheduleError, match=f"start step {start} is outside the run"):
        from jitbench.faults.schedule import poisson

        poisson(["kill"], [1], 12, 0, mtbf_steps=3.0, start_step=int(start))


def test_an_empty_poisson_draw_names_the_window_from_its_start_step(jb, tmp_path):
    """The draw of --fault-mtbf-steps 3 from --fault-step 11 of a 12-step run covers
    steps 11..11 only: the refusal names that window, not 1..11."""
    code, err = jb("run", "--fault", "kill", "--fault-mtbf-steps", "3", "--fault-step",
                   "11", "--steps", "12", "--run-dir", str(tmp_path / "r"))
    line = one_line(err)
    assert code == 2 and "places no fault in steps 11..11 of the 12-step run" in line, line
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


# -- completed_before of every attempt ------------------------------------------------


def _every_attempt_run(tmp_path, attempts=3, trigger="collective_error"):
    """``--fault kill --every-attempt --fault-step 4 --max-restarts 2``: attempt 0 runs
    steps 1-3 and rank 1 is killed in step 4; rank 0 saves step 3; each later attempt
    restores step 3 and is killed in step 4 again."""
    for a in range(attempts):
        t = 100.0 * a
        for rank in (0, 1):
            items = [("init", "end", t + 0.5, {})]
            if a:
                items += [("restore", "begin", t + 0.6, {}),
                          ("restore", "end", t + 0.7, {"step": 3, "kind": "jit"})]
            else:
                for s in (1, 2, 3):
                    items += [("step", "begin", t + s, {"step": s}),
                              ("step", "end", t + s + 0.5, {"step": s, "dur_s": 0.5})]
            items.append(("step", "begin", t + 4.0, {"step": 4}))
            if rank == 1:
                items.append(("fault", "point", t + 4.2, {"kind": "kill", "step": 4,
                                                          "fault_id": "kill@1:4"}))
            else:
                items += [("failure", "point", t + 4.5, {"trigger": trigger}),
                          ("save", "begin", t + 4.6, {"kind": "jit", "step": 3}),
                          ("save", "end", t + 4.9, {"kind": "jit", "step": 3, "ok": True,
                                                    "part": "p3"})]
            _attempt(tmp_path / "events", a, rank, items)


def test_completed_before_counts_the_restored_steps_of_every_attempt(tmp_path):
    from jitbench import phases
    from jitbench.harness.metrics import compute

    _every_attempt_run(tmp_path)
    m = compute(tmp_path, 12, 2)
    assert [f.completed_before for f in m.failures] == [3, 3, 3]
    assert [f.expected_replayed_steps for f in m.failures] == [0, 0, 0]
    assert [f.replayed_steps for f in m.failures] == [0, 0, None]
    t = phases.derive(phases.read_events(tmp_path), 2)
    replay = t[(t["scope"] == "failure") & (t["phase"] == "replay")]
    assert list(replay["step"]) == [3, 3]


# -- a launch the harness stopped: no detection, harness_stopped ---------------------


def _hang_run(tmp_path, detected_at=None):
    """Rank 1 hangs in step 4 (t 4.2); the harness stops the launch at t 20 (its
    ``harness_stop.json``), and rank 0 declares the failure on the stop's SIGTERM at
    t 20.5; with ``detected_at``, its watchdog declared the hang before."""
    for rank in (0, 1):
        items = [("init", "end", 0.5, {})]
        for s in (1, 2, 3):
            items += [("step", "begin", s, {"step": s}),
                      ("step", "end", s + 0.5, {"step": s, "dur_s": 0.5})]
        items.append(("step", "begin", 4.0, {"step": 4}))
        if rank == 1:
            items.append(("fault", "point", 4.2, {"kind": "nccl-hang", "step": 4,
                                                  "fault_id": "nccl-hang@1:4"}))
        else:
            if detected_at is not None:
                items.append(("failure", "point", detected_at, {"trigger": "peer_hang"}))
            items.append(("failure", "point", 20.5, {"trigger": "sigterm"}))
        _attempt(tmp_path / "events", 0, rank, items)
    (tmp_path / "harness_stop.json").write_text(json.dumps(
        {"why": "timeout", "t_wall": 20.0, "t_mono": 20.0}))


@pytest.mark.parametrize("detected_at, detect_s, trigger", [
    (None, None, None), (10.2, 10.2 - 4.2, "peer_hang")])
def test_a_launch_the_harness_stopped_reports_no_detection_of_its_own(
        tmp_path, detected_at, detect_s, trigger):
    from jitbench import phases
    from jitbench.harness.metrics import compute

    _hang_run(tmp_path, detected_at)
    stop = phases.harness_stop(tmp_path)
    assert stop == {"why": "timeout", "t_wall": 20.0, "t_mono": 20.0}
    evs = phases.without_stop_failures(phases.read_events(tmp_path), stop)
    m = compute(tmp_path, 12, 2, events=evs, phase_table=phases.derive(evs, 2), stop=stop)
    (f,) = m.failures
    assert f.harness_stopped and f.trigger == trigger
    assert f.detect_s == pytest.approx(detect_s) if detect_s else f.detect_s is None
    # without the stop's record (a run that ended by itself) the sigterm counts as before
    m = compute(tmp_path, 12, 2, events=phases.read_events(tmp_path))
    assert not m.failures[0].harness_stopped and m.failures[0].detect_s is not None


def test_mark_stop_records_the_first_stop_only(tmp_path):
    from jitbench import phases
    from jitbench.harness.launch import STOP_FILE, mark_stop

    assert STOP_FILE == phases.STOP_FILE and phases.harness_stop(tmp_path) is None
    mark_stop(tmp_path, "timeout")
    first = phases.harness_stop(tmp_path)
    mark_stop(tmp_path, "interrupt")
    assert phases.harness_stop(tmp_path) == first and first["why"] == "timeout"
    mark_stop(None, "timeout")  # a launcher without a run directory: nothing


def _summarize_hang(tmp_path, ref=None, timeout_s=8.0):
    from jitbench.faults import FaultSpec
    from jitbench.harness.launch import LaunchResult
    from jitbench.harness.run import summarize
    from jitbench.harness.spec import RunSpec
    from jitbench.workloads import WorkloadConfig

    spec = RunSpec(workload=WorkloadConfig(steps=12), faults=[FaultSpec("nccl-hang", 1, 4)])
    res = LaunchResult(-15, 9.43, False, tmp_path / "agent.log", timed_out=True)
    return summarize(spec, tmp_path, res, ref, timeout_s=timeout_s)


def test_the_summary_of_a_stopped_hang_names_the_timeout_as_configured(tmp_path):
    _hang_run(tmp_path)
    s = _summarize_hang(tmp_path)
    assert s["harness_stopped"] and s["detect_s"] is None and s["trigger"] is None
    assert s["failures"][0]["harness_stopped"] is True
    assert s["end_reason"] == ("stopped by the harness: --timeout-s 8 s ran out (launch "
                               "stopped after 9.4 s)")
    assert s["timeout_s"] == 8.0


# -- a reference cut short is said so and never compared ------------------------------


def _finished_run(d):
    import torch

    for rank in (0, 1):
        items = [("init", "end", 0.5, {})]
        for s in (1, 2):
            items += [("step", "begin", s, {"step": s}),
                      ("step", "end", s + 0.5, {"step": s, "dur_s": 0.5})]
        items.append(("done", "point", 3.0, {"step": 2}))
        _attempt(d / "events", 0, rank, items)
    (d / "final").mkdir(parents=True)
    torch.save({"w": torch.ones(3)}, d / "final" / "state.pt")


@pytest.mark.parametrize("cut", [None, "interrupted", "timed_out"])
def test_a_reference_cut_short_is_named_and_not_compared(tmp_path, cut):
    from jitbench.harness.launch import LaunchResult
    from jitbench.harness.run import summarize
    from jitbench.harness.spec import RunSpec
    from jitbench.workloads import WorkloadConfig

    run_dir = tmp_path / "run"
    _finished_run(run_dir)
    _finished_run(run_dir / "reference")  # a partial reference's state: same bytes here
    ref = LaunchResult(0 if cut is None else -15, 1.0, cut == "interrupted",
                       timed_out=cut == "timed_out")
    spec = RunSpec(workload=WorkloadConfig(steps=2))
    s = summarize(spec, run_dir, LaunchResult(0, 3.0), ref)
    if cut is None:
        assert s["reference_complete"] and s["state_equal"] is True
        assert s["end_reason"] == "completed" and s["reference_cut_short"] is None
        return
    assert s["reference_complete"] is False and s["state_equal"] is None
    assert s["sample_stream_equal"] is None and s["reference_cut_short"]
    assert s["end_reason"].startswith("completed; the fault-free reference was ")
    assert "not compared" in s["end_reason"]


def test_the_exit_line_says_the_reference_was_interrupted(tmp_path):
    from jitbench.cli.run import outcome_status
    from jitbench.errors import ExitStatus

    s = {"interrupted": True, "completed": True,
         "reference_cut_short": "interrupted (Ctrl-C or SIGTERM)"}
    status, line = outcome_status(s, "jit", tmp_path, None)
    assert status == ExitStatus.INTERRUPTED
    assert "the fault-free reference was interrupted (Ctrl-C or SIGTERM)" in line


def test_a_completed_run_whose_reference_failed_is_exit_3(tmp_path):
    """A fault-free reference that failed on its own leaves the oracle unrun: the run
    is not a pass (exit 3, the reference's log named), under a strategy that promises
    the fault-free state; one that does not (torchft) is not judged on it."""
    from jitbench.cli.run import outcome_status
    from jitbench.errors import ExitStatus

    s = {"completed": True, "state_equal": None, "replay_ok": True,
         "reference_cut_short": "stopped by a failure (agent exit 1)"}
    status, line = outcome_status(s, "jit", tmp_path, None)
    assert status == ExitStatus.RUN_FAILED, line
    assert "the fault-free reference was stopped by a failure (agent exit 1)" in line
    assert str(tmp_path / "reference" / "agent.log") in line
    status, _ = outcome_status({**s, "bitwise_promised": False}, "torchft", tmp_path, None)
    assert status == ExitStatus.OK
    status, _ = outcome_status({**s, "reference_cut_short": None}, "jit", tmp_path, None)
    assert status == ExitStatus.OK


# -- model --from-results leaves out runs the harness stopped -------------------------


def test_model_from_results_leaves_out_runs_the_harness_stopped(tmp_path, capsys):
    import pandas as pd

    from jitbench.errors import InputError
    from jitbench.reports.modelcmd import load_from_results

    table = tmp_path / "records.csv"
    pd.DataFrame({
        "strategy": ["jit", "jit", "jit", "jit"],
        "detect_s": [2.0, 2.0, 50.0, 60.0],
        "restart_s": [4.0, 4.0, 4.0, 4.0],
        "harness_stopped": [False, False, True, None],
        "timed_out": [False, False, True, True],  # an older row: no harness_stopped
    }).to_csv(table, index=False)
    got = load_from_results([table])
    assert got.records.ddp["detect_s"] == 2.0
    assert got.info["excluded_harness_stopped"] == 2 and got.info["rows"] == 2
    pd.DataFrame({"strategy": ["jit"], "detect_s": [50.0], "interrupted": [True]}).to_csv(
        table, index=False)
    with pytest.raises(InputError, match="every run in it was stopped by the harness"):
        load_from_results([table])


def test_a_sweep_whose_every_poisson_draw_is_empty_is_refused():
    """A sweep seed with no arrival is a fault-free sample of the Poisson process and
    kept; a matrix in which no seed's draw places a fault would measure no recovery:
    refused before anything starts, naming the seeds."""
    from jitbench.errors import SpecError
    from jitbench.harness.sweep import SweepConfig

    def cfg(steps, mtbf, seeds):
        return SweepConfig(workloads=["gpt"], strategies=["jit"], faults=["kill"],
                           steps=steps, fault_mtbf_steps=mtbf, seeds=seeds)

    with pytest.raises(SpecError) as err:
        cfg(6, 1000, [0, 1]).validate()
    assert "every seed (0, 1)" in str(err.value) and "sweep would be fault-free" in str(err.value)
    ok = cfg(30, 10, [0, 1])
    ok.validate()
    # a seed whose draw is empty beside one that is not: the matrix runs both
    mixed = [s for s in range(40) if not cfg(12, 40, [s])._faults("kill", s)]
    full = [s for s in range(40) if cfg(12, 40, [s])._faults("kill", s)]
    assert mixed and full
    cfg(12, 40, [mixed[0], full[0]]).validate()


@pytest.mark.parametrize("damage", ["missing", "truncated"])
def test_the_ckpt_dir_check_resumes_where_the_runtime_restore_would(tmp_path, damage):
    """The newest manifest's data file missing or unreadable: the runtime's restore
    skips it and resumes after the older step (``checkpoint.newest_valid``), so the
    pre-check measures the fault against that step, not the skipped one."""
    from jitbench.faults import FaultSpec
    from jitbench.harness.run import check_ckpt_dir, resume_step
    from jitbench.harness.spec import RunSpec, SpecError
    from jitbench.runtime import checkpoint as ckpt
    from jitbench.workloads import WorkloadConfig

    ck = _ckpt_dir_at(tmp_path, 10)
    newest = next(p.path for p in ckpt.list_parts(ck) if p.step == 10)
    if damage == "missing":
        newest.unlink()
    else:
        newest.write_bytes(newest.read_bytes()[:5])
    spec = RunSpec(workload=WorkloadConfig(steps=60), nproc=2, ckpt_dir=str(ck),
                   faults=[FaultSpec("kill", 1, 8)])
    assert resume_step(ck, spec) == 5
    check_ckpt_dir(spec)  # fires at step 8, after the step-5 resume: accepted
    spec.faults = [FaultSpec("kill", 1, 5)]
    with pytest.raises(SpecError, match=f"newest checkpoint in {ck} is of step 5"):
        check_ckpt_dir(spec)


def test_a_reference_stopped_by_the_timeout_names_the_limit(tmp_path):
    """A reference the harness stopped on --timeout-s names the limit as given and its
    launch's wall time, as the main run's end reason does, in ``reference_cut_short``
    and so in the end reason and the exit line."""
    from jitbench.harness.launch import LaunchResult
    from jitbench.harness.run import reference_cut_short, summarize
    from jitbench.harness.spec import RunSpec
    from jitbench.workloads import WorkloadConfig

    run_dir = tmp_path / "run"
    _finished_run(run_dir)
    _finished_run(run_dir / "reference")
    ref = LaunchResult(-15, 14.2, timed_out=True)
    s = summarize(RunSpec(workload=WorkloadConfig(steps=2)), run_dir, LaunchResult(0, 3.0),
                  ref, timeout_s=14.0)
    phrase = "stopped by the harness: --timeout-s 14 s ran out (launch stopped after 14.2 s)"
    assert s["reference_cut_short"] == phrase
    assert s["end_reason"] == (f"completed; the fault-free reference was {phrase} before "
                               "its end, so the final states were not compared")
    assert reference_cut_short(ref) == ("stopped by the harness: the launch ran past its "
                                        "timeout (launch stopped after 14.2 s)")
