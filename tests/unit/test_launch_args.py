"""``jitbench launch``: the words after ``--``, the options and the spec checks (no launch)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from jitbench.cli.launch import ScriptOptions, build_spec, parse_command
from jitbench.cli.run import DetectionOptions, FaultOptions
from jitbench.errors import InputError, SpecError
from jitbench.faults import FaultSpec
from jitbench.harness.script import ScriptSpec, unsupported_fault

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "ddp_tutorial.py")


@pytest.mark.parametrize("words, want", [
    (["train.py", "--lr", "1"], ("train.py", None, ["--lr", "1"])),
    (["python", "train.py"], ("train.py", None, [])),
    (["python3", "train.py", "-x"], ("train.py", None, ["-x"])),
    ([sys.executable, "train.py"], ("train.py", None, [])),
    (["-m", "pkg.train", "--steps", "3"], (None, "pkg.train", ["--steps", "3"])),
    (["python", "-m", "pkg.train"], (None, "pkg.train", [])),
])
def test_parse_command(words, want):
    script, module, args = parse_command(words)
    assert (Path(script).name if script else None, module, args) == want
    if script:
        assert Path(script).is_absolute()


@pytest.mark.parametrize("words, message", [
    ([], "give the script to launch after --"),
    (["python"], "give the script to launch after --"),
    (["-m"], "-m needs a module"),
    (["-u", "train.py"], "is not a script"),
])
def test_parse_command_refuses(words, message):
    with pytest.raises(InputError, match=message):
        parse_command(words)


def _build(command, **kw):
    names = set(FaultOptions.__dataclass_fields__)
    faults = FaultOptions(**{k: kw.pop(k) for k in list(kw) if k in names})
    return build_spec(command, faults, ScriptOptions(**kw), DetectionOptions())


def test_build_spec_places_the_fault():
    spec = _build([EXAMPLE, "--steps", "12", "--ckpt-dir", "{run_dir}/ck"], fault="kill",
                  fault_step=4)
    assert spec.script == EXAMPLE and spec.strategy == "own"
    assert [(f.kind, f.rank, f.step) for f in spec.faults] == [("kill", 1, 4)]
    assert spec.script_args(Path("/r")) == ["--steps", "12", "--ckpt-dir", "/r/ck"]
    with_steps = _build([EXAMPLE], fault="nccl-hang", steps=30)
    assert with_steps.faults[0].step == 10  # a third of the way in, as run


@pytest.mark.parametrize("kw, error, message", [
    ({"fault": "kill"}, InputError, "give --fault-step"),
    ({"fault": "none", "strategy": "periodic:5"}, SpecError, "runs under --strategy own"),
    ({"fault": "eio", "fault_step": 3}, SpecError, "storage fault"),
    ({"fault": "kill", "fault_step": 3, "fault_param": ["at=restore"]}, SpecError,
     "injection point restore"),
    ({"fault": "kill", "fault_step": 3, "fault_rank": 2}, SpecError, "rank"),
    ({"fault": "kill", "fault_step": 12, "steps": 12}, SpecError, "fault step 12"),
    ({"fault": "none", "first_step_s": 0.0}, SpecError, "--first-step-s must be"),
    ({"fault": "none", "nnodes": 2}, SpecError, "--rdzv-endpoint"),
])
def test_build_spec_refuses(kw, error, message):
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        _build([EXAMPLE], **kw)



@pytest.mark.parametrize("kw, message", [
    ({"fault_step": 0}, "fault step 0 must be >= 1"),
    ({"fault_step": -3}, "fault step -3 must be >= 1"),
    ({"fault_step": 0, "fault_every": 2, "fault_count": 2}, "fault step 0 must be >= 1"),
    ({"fault_step": 1, "fault_every": 1}, "unknown step count is more than 1000 faults"),
    ({"fault_step": 1, "mtbf_steps": 1.0},
     "give a fault count (the run's step count is not known)"),
    # a count given and too large: the count is named, not asked for (a review)
    ({"fault_step": 3, "fault_every": 5, "fault_count": 2000},
     "a fault count of 2000 every 5 steps is more than 1000 faults in one plan; give a "
     "count of at most 1000"),
    ({"fault_step": 1, "mtbf_steps": 100.0, "fault_count": 2000},
     "a fault count of 2000 is more than that; give at most 1000"),
])
def test_a_step_without_steps_is_checked_from_below_only(kw, message):
    # launch does not know the script's steps: no message names a step count it made up
    with pytest.raises((InputError, SpecError)) as err:
        _build([EXAMPLE], fault="kill", **kw)
    assert message in str(err.value)
    assert "1000000000" not in str(err.value) and "999999999" not in str(err.value)
    assert _build([EXAMPLE], fault="kill", fault_step=5 * 10**9).faults[0].step == 5 * 10**9


def test_a_schedule_without_steps_needs_no_fault_step():
    """--fault-every starts at its interval and a Poisson schedule at step 1: neither
    needs the run's length, so a launch without --steps takes them without --fault-step
    (a trial: each was refused with 'give --fault-step'); an unknown fault is named
    before a step is asked for."""
    every = _build([EXAMPLE], fault="kill", fault_every=3, fault_count=2)
    assert [(f.kind, f.step) for f in every.faults] == [("kill", 3), ("kill", 6)]
    poisson = _build([EXAMPLE], fault="kill", mtbf_steps=5.0, fault_count=3)
    assert len(poisson.faults) == 3 and all(f.step >= 1 for f in poisson.faults)
    timed = _build([EXAMPLE], fault="kill", mtbf_s=1.0, fault_count=2)
    assert len(timed.faults) == 2 and all(f.time_s is not None for f in timed.faults)
    with pytest.raises(InputError, match="unknown step count is more than 1000 faults"):
        _build([EXAMPLE], fault="kill", fault_every=1)
    with pytest.raises(InputError, match="unknown fault 'bogus'"):
        _build([EXAMPLE], fault="bogus")
    with pytest.raises(InputError, match="give --fault-step"):
        _build([EXAMPLE], fault="kill")
    # a count without a schedule: what it needs is named, not a step it does not need
    with pytest.raises(InputError, match="--fault-count needs --fault-every"):
        _build([EXAMPLE], fault="kill", fault_count=3)


def test_a_scenario_step_without_steps_is_checked_from_below_only(tmp_path):
    scenario = tmp_path / "s.toml"
    scenario.write_text("[[fault]]\nkind='kill'\nstep=0\n")
    with pytest.raises(InputError, match=r"step 0 must be >= 1$"):
        _build([EXAMPLE], fault=None, scenario=scenario)
    with pytest.raises(SpecError, match=r"fault step 0 must be in 1\.\.11 \(the run has 12"):
        _build([EXAMPLE], fault="kill", fault_step=0, steps=12)


def test_missing_script_and_module_are_refused(tmp_path):
    with pytest.raises(SpecError, match="does not exist"):
        ScriptSpec(script=str(tmp_path / "nope.py")).validate()
    with pytest.raises(SpecError, match="is not a file"):
        ScriptSpec(script=str(tmp_path)).validate()
    with pytest.raises(SpecError, match="not importable"):
        ScriptSpec(module="jitbench_no_such_module_x").validate()


def test_every_non_storage_fault_is_injectable():
    """Except amp-backoff, which perturbs jitbench's own fp16 training."""
    from jitbench.faults import FAULTS

    for kind, cls in FAULTS.items():
        why = unsupported_fault(FaultSpec(kind, 1, 2))
        assert (why is not None) == (cls.family == "storage" or cls.in_reference), kind


def test_spec_round_trips(tmp_path):
    spec = ScriptSpec(script=EXAMPLE, args=["--steps", "3"], faults=[FaultSpec("kill", 1, 2)])
    (tmp_path / "spec.json").write_text(spec.to_json())
    back = ScriptSpec.load(tmp_path / "spec.json")
    assert back == spec and back.without_faults().faults == []
    assert back.training_key() == spec.without_faults().training_key()


def test_every_agent_keeps_its_logs_in_the_run_directory(tmp_path):
    """Without --log-dir every elastic agent leaves a torchelastic_* directory in the
    system temp directory (1,643 of them had piled up on the development machine)."""
    from jitbench.harness.launch import AGENT_LOGS, agent_command, torchrun_args
    from jitbench.harness.replicas import replica_command
    from jitbench.harness.spec import RunSpec

    run_dir = tmp_path / "run"
    want = ["--log-dir", str(run_dir / AGENT_LOGS)]
    spec = RunSpec()
    for cmd in (torchrun_args(2, 1, 3, run_dir), agent_command(spec, run_dir),
                replica_command(spec, run_dir)):
        i = cmd.index("--log-dir")
        assert cmd[i:i + 2] == want


@pytest.mark.parametrize(("code", "noted"), [(99999, True), (79, False), (None, False)])
def test_an_xid_code_outside_the_table_is_named_as_unknown(capsys, code, noted):
    plan = FaultOptions(fault="xid", fault_step=3, xid=code).plan(10, 2, 0)
    assert [f.kind for f in plan] == ["xid"]
    err = capsys.readouterr().err
    assert (f"Xid {code} is not in jitbench's Xid table" in err) is noted
    assert ("fatal by policy" in err) is noted


def test_progress_counts_a_restored_step(tmp_path):
    """A run resumed at its last step trains no step: the bar shows the restored one."""
    from jitbench.harness.launch import _rank0_progress

    events = tmp_path / "events"
    events.mkdir()
    lines = [{"event": "restore", "phase": "begin", "attempt": 0},
             {"event": "restore", "phase": "end", "step": 16, "kind": "final", "attempt": 0}]
    (events / "attempt000_rank00000.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    state: dict = {"step": 0, "attempt": 0}
    _rank0_progress(events, {}, state)
    assert state["step"] == 16 and state["last"] == "restore"
