"""The step clock of ``jitbench overhead`` on a script, and the script arms' plan."""

from __future__ import annotations

import json

import pytest
import torch

from jitbench.errors import SpecError
from jitbench.harness.overhead import (
    OverheadConfig,
    script_launch_spec,
    script_steps_needed,
)
from jitbench.harness.script import ScriptSpec
from jitbench.harness.steptimer import StepTimer, read_step_times, timer_path


def _sgd(lr):
    p = torch.nn.Parameter(torch.ones(3))
    p.grad = torch.ones(3)
    return torch.optim.SGD([p], lr=lr)


def test_the_timer_counts_the_first_training_optimizer_only(tmp_path):
    timer = StepTimer(timer_path(tmp_path, 0, 0))
    init, opt, other = _sgd(0.0), _sgd(0.1), _sgd(0.1)
    timer._post(init, (), {})  # DCP's state initialization (lr 0): not a step
    for _ in range(3):
        timer._post(opt, (), {})
        timer._post(other, (), {})  # a second optimizer: the first defines the steps
    timer._post(init, (), {})  # lr 0 after the first timed step counts no more
    assert len(timer.t_mono) == len(timer.cpu_s) == 3
    assert timer.t_mono == sorted(timer.t_mono)
    timer.write()
    begin, cpu = read_step_times(tmp_path)
    assert sorted(begin) == [2, 3, 4] and begin[2] == timer.t_mono[0]
    assert cpu[4] == timer.cpu_s[2]


def test_the_timer_hooks_every_optimizer_step(tmp_path):
    timer = StepTimer(timer_path(tmp_path, 0, 0))
    handle = timer.install()
    opt = _sgd(0.5)
    try:
        for _ in range(2):
            opt.step()
    finally:
        handle.remove()
    opt.step()
    assert len(timer.t_mono) == 2


def test_step_times_of_a_restarted_launch_are_refused(tmp_path):
    for attempt in (0, 1):
        timer_path(tmp_path, 0, attempt).parent.mkdir(parents=True, exist_ok=True)
        timer_path(tmp_path, 0, attempt).write_text(json.dumps({"t_mono": [1.0],
                                                                "cpu_s": [0.5]}))
    with pytest.raises(ValueError, match="restarted"):
        read_step_times(tmp_path)
    with pytest.raises(ValueError, match="no step times"):
        read_step_times(tmp_path / "absent")


def test_script_arms_and_their_launches(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    cfg = OverheadConfig(strategies=["own", "jit"], segment_steps=5, warmup_steps=3,
                         script=True)
    cfg.validate()
    assert cfg.mode == "launches" and cfg.labels() == ["none", "own", "jit", "none-aa"]
    assert script_steps_needed(cfg) == 8
    with pytest.raises(SpecError, match="got 'periodic:5'"):
        OverheadConfig(strategies=["periodic:5"], segment_steps=5, script=True).validate()
    base = ScriptSpec(script=str(script), args=["--x", "{run_dir}"], max_restarts=3)
    plain, own, jit, aa = (script_launch_spec(base, s)
                           for s in ("none", "own", "jit", "none-aa"))
    assert not plain.hooks and not aa.hooks and own.hooks and jit.hooks
    assert (own.strategy, jit.strategy) == ("own", "jit")
    for s in (plain, own, jit):
        assert s.step_timer and s.max_restarts == 0 and not s.faults
        assert not s.save_final_state and s.args == base.args


def test_a_launch_without_hooks_takes_no_faults(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    with pytest.raises(SpecError, match="without hooks"):
        ScriptSpec(script=str(script), hooks=False).validate()
