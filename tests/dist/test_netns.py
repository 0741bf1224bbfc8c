"""Nodes that are really separate: network namespaces on a bridge (jitbench.harness.netns),
one ``jitbench run`` (one elastic agent) per namespace, and the network faults.

Skipped, with the reason, where ``ip netns add`` fails (no root, no iproute2).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jitbench.harness import netns
from jitbench.harness.launch import run_processes

pytestmark = [pytest.mark.distributed, pytest.mark.slow, pytest.mark.timeout(420)]

WHY = netns.available()
needs_netns = pytest.mark.skipif(WHY is not None, reason=f"no network namespaces here: {WHY}")
REPO = str(Path(__file__).resolve().parents[2])
ENV = {"PYTHONPATH": REPO}


@pytest.fixture
def nodes2():
    """Two namespaced nodes; afterwards nothing of them is left (checked)."""
    n = netns.Nodes(2)
    with n:
        yield n
    assert n.leftovers() == []


def _fire(nodes, i: int, kind: str, params: dict) -> subprocess.CompletedProcess:
    code = ("import sys, json; from jitbench.faults import make_fault, FaultSpec; "
            f"make_fault(FaultSpec({kind!r}, params=json.loads(sys.argv[1]))).fire({{}})")
    return subprocess.run(nodes.command(i, [sys.executable, "-c", code, json.dumps(params)],
                                        ENV), capture_output=True, text=True, timeout=60)


def _wait_state(nodes, i: int, state: str, within_s: float) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < within_s:
        if nodes.link_state(i) == state:
            return time.monotonic() - t0
        time.sleep(0.05)
    raise AssertionError(f"node {i} link not {state} within {within_s} s")


@needs_netns
def test_partition_and_flap_act_on_the_node_link_only(nodes2):
    assert nodes2.link_state(0) == nodes2.link_state(1) == "UP"
    p = _fire(nodes2, 1, "partition", {"duration_s": 1.0})
    assert p.returncode == 0, p.stderr[-1000:]
    assert nodes2.link_state(1) == "DOWN" and nodes2.link_state(0) == "UP"
    _wait_state(nodes2, 1, "UP", 10)  # the helper brings it back after the firing process left
    p = _fire(nodes2, 0, "link-flap", {"down_s": 0.5, "up_s": 0.5, "cycles": 2})
    assert p.returncode == 0, p.stderr[-1000:]
    assert nodes2.link_state(0) == "DOWN"
    _wait_state(nodes2, 0, "UP", 5)
    _wait_state(nodes2, 0, "DOWN", 5)
    _wait_state(nodes2, 0, "UP", 5)


def _qdisc(nodes, i: int) -> str:
    return subprocess.run(["ip", "netns", "exec", nodes.namespaces[i], "tc", "qdisc", "show",
                           "dev", nodes.ifaces[i]], capture_output=True, text=True,
                          timeout=15).stdout


@needs_netns
def test_link_slow_adds_and_removes_netem_or_names_the_missing_module(nodes2):
    p = _fire(nodes2, 1, "link-slow", {"delay_ms": 20, "loss_pct": 1, "duration_s": 1.0})
    if p.returncode != 0:  # a kernel without sch_netem (this machine's): one named error
        assert "Specified qdisc kind is unknown" in p.stderr and "sch_netem" in p.stderr
        assert "netem" not in _qdisc(nodes2, 1)
        return
    assert "netem" in _qdisc(nodes2, 1) and "delay 20ms" in _qdisc(nodes2, 1)
    deadline = time.monotonic() + 10
    while "netem" in _qdisc(nodes2, 1) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "netem" not in _qdisc(nodes2, 1)


def _start_nodes(nodes, run_dir: Path, extra: list[str]) -> list[subprocess.Popen]:
    args = ["--nnodes", "2", "--nproc", "1", "--rdzv-endpoint", nodes.rdzv_endpoint(),
            "--run-dir", str(run_dir), "--steps", "10", "--size", "tiny", "--strategy", "jit",
            "--hang-first-s", "15", "--json", *extra]
    cmd = [sys.executable, "-m", "jitbench.cli", "run", *args]
    return [subprocess.Popen(nodes.command(i, cmd, ENV), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for i in range(2)]


def _events(run_dir: Path, kind: str) -> dict[int, dict]:
    from jitbench.runtime.events import read_events

    return {e["rank"]: e for e in read_events(run_dir / "events")
            if e["event"] == kind and e["attempt"] == 0}


@needs_netns
@pytest.mark.heavy
def test_partition_mid_run_recovers(nodes2, tmp_path):
    """Rank 1's node loses its link for 8 s at step 4: both ranks declare a hang at the
    2 s floor and save their JIT parts, both agents re-rendezvous once the link is
    back, and the second attempt completes, bitwise equal to the reference (torch
    2.14.1, gloo; about 2 minutes here, the reference run included)."""
    run_dir = tmp_path / "run"
    procs = _start_nodes(nodes2, run_dir, [
        "--fault", "partition", "--fault-rank", "1", "--fault-step", "4",
        "--fault-param", "duration_s=8", "--timeout-s", "240"])
    outs = [p.communicate(timeout=330) for p in procs]
    for p, (_out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-3000:]
    summary = json.loads(outs[0][0])
    assert summary["world_size"] == 2 and summary["attempts"] == 2
    assert summary["state_equal"] is True and summary["replayed_steps"] <= 1
    assert summary["trigger"] == "hang" and summary["fired"][0]["kind"] == "partition"
    fault, failed = _events(run_dir, "fault"), _events(run_dir, "failure")
    assert fault[1]["iface"] == nodes2.ifaces[1]
    # the partitioned rank too declares its hang while its link is still down
    assert failed[1]["trigger"] == "hang" and failed[1]["t_wall"] - fault[1]["t_wall"] < 8
    assert nodes2.link_state(1) == "UP"
    assert run_processes(run_dir) == []  # no agent or worker of either node is left


@needs_netns
@pytest.mark.heavy
def test_partition_for_good_stops_with_the_reason(nodes2, tmp_path):
    """Rank 1's node loses its link for good at step 4: no replica of its shard is
    left. Both ranks declare a hang and save; node 0's agent waits in the
    re-rendezvous for ``--rdzv-timeout-s`` and ends with torch's
    RendezvousTimeoutError, which node 0's summary names. The partitioned node's agent
    cannot reach the store on node 0 and would wait until its harness's --timeout-s;
    the test ends it by removing the nodes (what is left of a lost node)."""
    run_dir = tmp_path / "run"
    procs = _start_nodes(nodes2, run_dir, [
        "--fault", "partition", "--fault-rank", "1", "--fault-step", "4",
        "--rdzv-timeout-s", "20", "--timeout-s", "200"])
    try:
        out, err = procs[0].communicate(timeout=200)
    finally:
        nodes2.remove()
        for p in procs:
            p.kill()
            p.communicate(timeout=30)
    assert procs[0].returncode == 3, err[-3000:]  # the job did not complete
    summary = json.loads(out)
    assert summary["completed"] is False and summary["attempts"] == 1
    assert "rendezvous failed: RendezvousTimeoutError" in summary["end_reason"]
    assert "partition on rank 1 at step 4 (hang)" in summary["end_reason"]
    assert set(_events(run_dir, "save")) == {0, 1}  # both JIT parts were written
    assert run_processes(run_dir) == []
