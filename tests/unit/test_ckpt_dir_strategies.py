"""``--ckpt-dir`` follows what the strategy does with a checkpoint directory, as its
registry entry says (``restores``, ``writes``; new-user trial): the pre-check of a
directory against the planned faults applies only to a strategy that restores from it;
a strategy that neither restores from nor writes to one refuses ``--ckpt-dir`` in one
line (exit 2) instead of ignoring it. Nothing is launched.
"""

from __future__ import annotations

import pytest

from jitbench.errors import SpecError
from jitbench.faults import FaultSpec
from jitbench.harness.run import check_ckpt_dir
from jitbench.harness.spec import RunSpec
from jitbench.runtime import strategies
from jitbench.workloads import WorkloadConfig
from tests.conftest import one_line
from tests.unit.test_run_trial import _ckpt_dir_at

NEVER_READ = [e.name for e in strategies.REGISTRY.values() if not e.restores]


def test_the_registry_says_which_strategies_restore_from_the_directory():
    assert sorted(NEVER_READ) == ["none", "torchft"]
    for name, entry in strategies.REGISTRY.items():
        cls = strategies.load(name)
        # the runtime's restore reads the same attribute the harness checks with
        assert cls.__new__(cls).reads_checkpoints is entry.restores, name


@pytest.mark.parametrize("name", NEVER_READ)
def test_ckpt_dir_with_a_strategy_that_never_uses_it_is_refused(tmp_path, monkeypatch, name):
    monkeypatch.setattr(strategies, "check_available", lambda n: None)  # an extra not here
    spec = RunSpec(workload=WorkloadConfig(steps=60), nproc=2, strategy=name,
                   ckpt_dir=str(tmp_path / "ck"))
    with pytest.raises(SpecError) as e:
        spec.validate()
    assert str(e.value) == (f"--ckpt-dir {tmp_path / 'ck'}: strategy {name} neither restores "
                            "from a checkpoint directory nor writes to one, so the option "
                            "would be ignored; drop --ckpt-dir (or resume with a strategy "
                            "that checkpoints: jit, periodic:N)")
    spec.ckpt_dir = None
    spec.validate()  # without the option: runs


def test_run_none_with_ckpt_dir_is_one_line_and_exit_2(jb, tmp_path):
    ck = _ckpt_dir_at(tmp_path, 10)
    code, err = jb("run", "--strategy", "none", "--fault", "kill", "--fault-step", "4",
                   "--ckpt-dir", str(ck), "--run-dir", str(tmp_path / "r"))
    assert code == 2 and "strategy none neither restores" in one_line(err), err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("strategy", ["jit", "periodic:5", "jit-inprocess", "inmem:2"])
def test_a_strategy_that_restores_is_still_checked_against_its_faults(tmp_path, strategy):
    ck = _ckpt_dir_at(tmp_path, 10)
    spec = RunSpec(workload=WorkloadConfig(steps=60), nproc=2, strategy=strategy,
                   ckpt_dir=str(ck), faults=[FaultSpec("kill", 1, 6)])
    spec.validate()
    with pytest.raises(SpecError, match=f"newest checkpoint in {ck} is of step 10"):
        check_ckpt_dir(spec)


def test_a_strategy_that_writes_but_never_restores_keeps_its_ckpt_dir(tmp_path,
                                                                       monkeypatch):
    """Such a strategy starts afresh whatever the directory holds: a fault before its
    newest checkpoint fires where planned, so the directory is not refused for it (it
    is still checked as a place to write: another job's checkpoints are refused)."""
    monkeypatch.setitem(strategies.REGISTRY, "write-only", strategies.Entry(
        "write-only", "jitbench.runtime.strategies.periodic:Periodic", "test: writes only",
        interval="required", replay_bound="all", writes="rank0", restores=False))
    ck = _ckpt_dir_at(tmp_path, 10)
    spec = RunSpec(workload=WorkloadConfig(steps=60), nproc=2, strategy="write-only:5",
                   ckpt_dir=str(ck), faults=[FaultSpec("kill", 1, 6)])
    spec.validate()
    check_ckpt_dir(spec)
    other = RunSpec(workload=WorkloadConfig(steps=60, seed=1), nproc=2,
                    strategy="write-only:5", ckpt_dir=str(ck))
    with pytest.raises(SpecError, match="holds another job's checkpoints"):
        check_ckpt_dir(other)
