"""End-to-end recovery on gloo: kill and hang at several steps, every strategy.

Each test runs the elastic agent with 2 ranks of a tiny GPT and compares the
final state bitwise with one fault-free reference run of the same spec.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from jitbench.faults import FaultSpec
from jitbench.harness import campaign, metrics
from jitbench.harness.launch import run_processes
from jitbench.harness.run import run as run_spec
from jitbench.runtime.events import read_events
from tests.conftest import assert_hang_detected, small_spec

pytestmark = [pytest.mark.distributed, pytest.mark.slow, pytest.mark.timeout(240)]

STEPS = 12


@pytest.fixture(scope="module")
def references(shared_reference):
    """Fault-free reference runs, one per strategy (shared by the session)."""
    return lambda strategy: shared_reference(small_spec(STEPS, strategy=strategy))


def _run(tmp_path, references, kind, step, strategy="jit"):
    spec = small_spec(STEPS, faults=[FaultSpec(kind, 1, step)], strategy=strategy)
    out = run_spec(spec, tmp_path / "run", reference_from=references(strategy))
    s = out.summary
    assert s["completed"], (out.run_dir / "agent.log").read_text()[-3000:]
    return s, out.run_dir


def _assert_fired_once(run_dir: Path, kind: str, step: int) -> None:
    evs = read_events(run_dir / "events")
    fired = [e for e in evs if e["event"] == "fault"]
    assert [(e["kind"], e["rank"], e["step"]) for e in fired] == [(kind, 1, step)]
    # one fired-marker per fault (the folder also holds the train_start time stamp)
    assert len(list((run_dir / "faults_fired").glob("*.attempt*"))) == 1


@pytest.mark.parametrize("kind", ["kill", "nccl-hang"])
@pytest.mark.parametrize("step", [pytest.param(1, marks=pytest.mark.heavy), 5,
                                  pytest.param(STEPS - 1, marks=pytest.mark.heavy)])
def test_jit_recovers_bitwise(tmp_path, references, kind, step):
    s, run_dir = _run(tmp_path, references, kind, step)
    assert s["state_equal"] is True and s["max_abs_diff"] == 0.0
    assert s["sample_stream_equal"] is True
    assert s["replayed_steps"] <= 1
    assert s["restored_kind"] == "jit"
    assert s["attempts"] == 2
    _assert_fired_once(run_dir, kind, step)
    assert metrics.event_order(run_dir) == ["fault", "failure", "save", "restart", "restore",
                                            "step"]
    f = s["failures"][0]
    assert f["restored_step"] == step - 1
    if kind == "nccl-hang":
        assert_hang_detected(s, run_dir)
    else:
        assert s["trigger"] == f["trigger"]
    # every phase was measured and adds up inside the recovery time
    for k in ("detect_s", "save_s", "restart_s", "restore_s", "recovery_s"):
        assert s[k] is not None and s[k] >= 0, k
    assert s["detect_s"] + s["save_s"] + s["restore_s"] <= s["recovery_s"]
    assert not run_processes(run_dir)  # this run's agent and workers only (others may run)


def test_hang_detected_in_seconds_not_backend_timeout(tmp_path, references):
    s, run_dir = _run(tmp_path, references, "nccl-hang", 6)
    spec = small_spec(STEPS)
    # measured step times are tens of ms, so the bound is the floor (1.5 s);
    # the process-group timeout is 300 s
    assert_hang_detected(s, run_dir)
    assert s["detect_s"] < spec.hang_floor_s + 2.0
    assert s["detect_s"] < spec.pg_timeout_s / 10


@pytest.mark.parametrize("kind", ["kill", pytest.param("nccl-hang", marks=pytest.mark.heavy)])
def test_periodic_replays_since_last_checkpoint(tmp_path, references, kind):
    s, run_dir = _run(tmp_path, references, kind, 8, strategy="periodic:3")
    f = s["failures"][0]
    # steps 1..7 completed; last periodic checkpoint after step 6
    assert f["completed_before"] == 7
    assert f["restored_step"] == 6 and f["restored_kind"] == "periodic"
    assert s["replayed_steps"] == 1
    assert s["state_equal"] is True and s["sample_stream_equal"] is True
    assert s["checkpoint_saves"] >= 3
    # judged again from what the run left (campaign.recheck, stress_chunks.py recheck):
    # the same verdict, and a changed final state is found
    assert campaign.recheck(run_dir) == ([], s["code_version"])
    state = torch.load(run_dir / "final" / "state.pt", weights_only=True)
    _perturb_first_float(state)
    torch.save(state, run_dir / "final" / "state.pt")
    violations, _ = campaign.recheck(run_dir)
    assert [v for v in violations if v.startswith("state: ")], violations


def _perturb_first_float(x) -> bool:
    """Add 1 to the first element of the first floating-point tensor in ``x``."""
    if isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel():
        x.view(-1)[0] += 1
        return True
    items = x.values() if isinstance(x, dict) else x if isinstance(x, (list, tuple)) else ()
    return any(_perturb_first_float(v) for v in items)


@pytest.mark.heavy  # CI suite time budget: nox -s heavy
def test_periodic_replays_several_steps(tmp_path, references):
    s, _ = _run(tmp_path, references, "kill", 10, strategy="periodic:4")
    f = s["failures"][0]
    assert (f["completed_before"], f["restored_step"], s["replayed_steps"]) == (9, 8, 1)
    s2, _ = _run(tmp_path / "b", references, "kill", 8, strategy="periodic:4")
    f2 = s2["failures"][0]
    assert (f2["completed_before"], f2["restored_step"], s2["replayed_steps"]) == (7, 4, 3)
    assert s2["state_equal"] is True


def test_none_replays_everything(tmp_path, references):
    s, _ = _run(tmp_path, references, "kill", 7, strategy="none")
    f = s["failures"][0]
    assert f["restored_step"] == 0 and f["restored_kind"] is None
    assert s["replayed_steps"] == 6
    assert s["state_equal"] is True and s["sample_stream_equal"] is True
