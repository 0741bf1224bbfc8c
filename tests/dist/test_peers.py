"""The peer systems (issue 11) through a kill and a hang, each held to what it
promises, on gloo with the tiny GPT:

- ``torchft``: the survivor goes on with fewer replicas (no step lost, none
  committed twice), the replacement joins at the survivor's step with the
  survivor's state (equal parameter digests on every later step); the final
  state is honestly *not* the fault-free one (``state_equal`` false, with
  ``max_abs_diff`` and ``loss_diff``).
- ``nvrx``: ft_launcher restarts the job within its configured timeouts
  (a hang is detected by the missed heartbeat, ``hang_floor_s`` here), and the
  restart replays exactly the steps since the last checkpoint, bitwise.

Skipped, with the reason, only when the optional extra ``peers`` is absent.
"""

from __future__ import annotations

import importlib.util

import pytest

from jitbench.faults import FaultSpec
from jitbench.harness.launch import FT_CHECK_INTERVAL_S, run_processes
from jitbench.harness.run import run as run_spec
from jitbench.runtime.events import read_events
from jitbench.runtime.strategies.torchft import LIVENESS_S
from tests.conftest import small_spec

pytestmark = [pytest.mark.distributed, pytest.mark.slow, pytest.mark.timeout(420)]

needs_torchft = pytest.mark.skipif(importlib.util.find_spec("torchft") is None,
                                   reason="torchft not installed: pip install -e '.[peers]'")
needs_nvrx = pytest.mark.skipif(importlib.util.find_spec("nvidia_resiliency_ext") is None,
                                reason="nvidia-resiliency-ext not installed: "
                                       "pip install -e '.[peers]'")

TORCHFT_STEPS = 1200  # tiny GPT steps take 10-30 ms: the survivor trains on alone while
# the replacement starts (2-6 s under load, after the 6 s liveness bound for a hang); with
# 400 steps a loaded machine once saw the survivor finish first (the replacement was late)
FAULT_STEP = 8


def _run(tmp_path, strategy, kind, steps, **kw):
    spec = small_spec(steps, faults=[FaultSpec(kind, 1, FAULT_STEP)], strategy=strategy)
    out = run_spec(spec, tmp_path / "run", timeout_s=360, **kw)
    s = out.summary
    assert s["completed"], (out.run_dir / "agent.log").read_text()[-3000:]
    assert [f["kind"] for f in s["fired"]] == [kind]
    assert not run_processes(out.run_dir)
    return s, out.run_dir, spec


def _torchft_promise(s: dict, run_dir, spec) -> list[dict]:
    """Asserts torchft's promise and the event order; returns the step ends."""
    (f,) = s["failures"]
    assert s["replay_ok"] is True and s["replayed_steps"] == 0
    assert f["restored_kind"] == "heal" and f["restored_step"] >= f["completed_before"]
    evs = read_events(run_dir / "events")
    ends = [e for e in evs if e["event"] == "step" and e["phase"] == "end"]
    per_rank: dict = {}
    for e in ends:  # no step committed twice on a rank, none skipped by a survivor
        per_rank.setdefault(e["rank"], []).append(e["step"])
    assert per_rank[0] == list(range(1, spec.steps + 1))
    assert len(set(per_rank[1])) == len(per_rank[1])
    heal = next(e for e in evs if e["event"] == "restore" and e["phase"] == "end"
                and e.get("kind") == "heal")
    assert heal["rank"] == 1 and heal["attempt"] == 1
    after = [e for e in ends if e["step"] > heal["step"]]
    by_step: dict = {}
    for e in after:
        by_step.setdefault(e["step"], set()).add(e["digest"])
    assert all(len(d) == 1 for d in by_step.values())  # the survivors' state, every step
    fault = next(e for e in evs if e["event"] == "fault")
    failure = next(e for e in evs if e["event"] == "failure" and e["rank"] == 0)
    degraded = [e for e in ends if e["rank"] == 0 and e.get("replicas") == 1]
    assert degraded, "the survivor trained on alone"
    first_joint = min(e["t_mono"] for e in ends if e["step"] == f["restored_step"] + 1)
    assert fault["t_mono"] < failure["t_mono"] < degraded[0]["t_mono"] < heal["t_mono"] \
        < first_joint
    assert 0 < s["stall_s"] <= s["recovery_s"]
    assert s["wasted_gpu_s"] is not None and s["wasted_gpu_s"] >= 0
    return ends


@needs_torchft
def test_torchft_kill_survivor_goes_on_and_replacement_heals(tmp_path):
    s, run_dir, spec = _run(tmp_path, "torchft", "kill", TORCHFT_STEPS)
    assert s["trigger"] == "collective_error"  # the survivor's all-reduce failed
    assert s["detect_s"] < spec.hang_floor_s  # a dead peer closes its connections at once
    _torchft_promise(s, run_dir, spec)
    # honest oracle: steps trained with one replica differ from the fault-free run
    assert s["state_equal"] is False and s["max_abs_diff"] > 0
    assert s["loss_diff"] is not None and s["sample_stream_equal"] is False
    assert s["bitwise_promised"] is False and s["machine"]["peer_torchft"] == "0.2.0"


@needs_torchft
def test_torchft_hang_survivor_freed_by_timeout_hung_replica_replaced(tmp_path):
    s, run_dir, spec = _run(tmp_path, "torchft", "nccl-hang", TORCHFT_STEPS, reference=False)
    # torchft's collective timeout (hang_floor_s) frees the survivor
    assert s["trigger"] == "collective_error"
    assert spec.hang_floor_s - 0.2 <= s["detect_s"] <= spec.hang_floor_s + 2.0
    evs = read_events(run_dir / "events")
    stuck = [e for e in evs if e["event"] == "failure" and e["rank"] == 1]
    assert [e["trigger"] for e in stuck] == ["liveness"]  # the scheduler's probe, not torchft
    # two replicas: the Lighthouse's split-brain rule holds the survivor until the hung
    # process is gone (liveness bound) and its heartbeat has lapsed
    assert s["stall_s"] >= LIVENESS_S - spec.hang_floor_s
    _torchft_promise(s, run_dir, spec)


def _signalled_by_nvrx(s: dict, run_dir) -> None:
    """The hung rank was signalled by its NVRx rank monitor (``failure`` trigger
    ``sigterm``); the survivor then saw either its own monitor's SIGTERM or, when
    the hung rank's monitor fired first, the closed connection (both observed)."""
    hung = [e for e in read_events(run_dir / "events")
            if e["event"] == "failure" and e["rank"] == 1 and e["attempt"] == 0]
    assert [e["trigger"] for e in hung] == ["sigterm"]
    assert s["trigger"] in ("sigterm", "collective_error")


@needs_nvrx
def test_nvrx_kill_restarts_job_from_last_checkpoint_bitwise(tmp_path, shared_reference):
    spec = small_spec(16, faults=[FaultSpec("kill", 1, FAULT_STEP)], strategy="nvrx:3")
    out = run_spec(spec, tmp_path / "run", timeout_s=360, reference_from=shared_reference(spec))
    s = out.summary
    assert s["completed"], (out.run_dir / "agent.log").read_text()[-3000:]
    assert not run_processes(out.run_dir)
    (f,) = s["failures"]
    assert s["attempts"] == 2 and f["restored_kind"] == "periodic" and f["restored_step"] == 6
    assert s["replayed_steps"] == s["expected_replayed_steps"] == 1 and s["replay_ok"]
    assert s["state_equal"] is True and s["sample_stream_equal"] is True
    assert "ft_launcher" in (out.run_dir / "agent.log").read_text()


@needs_nvrx
def test_nvrx_hang_detected_by_missed_heartbeat_within_timeout(tmp_path, shared_reference):
    spec = small_spec(16, faults=[FaultSpec("nccl-hang", 1, FAULT_STEP)], strategy="nvrx:3")
    out = run_spec(spec, tmp_path / "run", timeout_s=360, reference_from=shared_reference(spec))
    s = out.summary
    assert s["completed"], (out.run_dir / "agent.log").read_text()[-3000:]
    assert not run_processes(out.run_dir)
    # detected by NVRx's rank monitor (SIGTERM on a missed heartbeat), not jitbench's
    # watchdog (off under nvrx): within the heartbeat timeout plus one check interval
    _signalled_by_nvrx(s, out.run_dir)
    assert s["detect_s"] <= spec.hang_floor_s + FT_CHECK_INTERVAL_S + 0.5
    assert "Did not get subsequent heartbeat" in (out.run_dir / "agent.log").read_text()
    assert s["replayed_steps"] == s["expected_replayed_steps"] and s["replay_ok"]
    assert s["state_equal"] is True


@needs_nvrx
def test_nvrx_sections_hang_detected_by_the_step_section_timeout(tmp_path, shared_reference):
    spec = small_spec(16, faults=[FaultSpec("nccl-hang", 1, FAULT_STEP)],
                      strategy="nvrx-sections:3")
    out = run_spec(spec, tmp_path / "run", timeout_s=360, reference_from=shared_reference(spec))
    s = out.summary
    assert s["completed"], (out.run_dir / "agent.log").read_text()[-3000:]
    assert not run_processes(out.run_dir)
    _signalled_by_nvrx(s, out.run_dir)  # on the open 'step' section
    assert s["detect_s"] <= spec.hang_floor_s + FT_CHECK_INTERVAL_S + 0.5
    assert "Section 'step' has been open" in (out.run_dir / "agent.log").read_text()
    assert s["replayed_steps"] == s["expected_replayed_steps"] and s["replay_ok"]
    assert s["state_equal"] is True
