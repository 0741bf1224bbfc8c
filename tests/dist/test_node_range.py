"""Three agents for ``--nnodes 2:3``: torch elastic's node range, passed to torchrun.

Every agent joins the first round (torch completes a round when MAX have joined), so
the job trains at MAX nodes (world size ``nproc x 3``). A worker killed on one node
makes every agent re-rendezvous; the job completes in 2 attempts, bitwise equal to
its reference. (Three agents for ``--nnodes 2``, the third a torch standby, fail with
torch 2.14.1: see the README, "Several nodes".)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import free_port

pytestmark = [pytest.mark.distributed, pytest.mark.slow, pytest.mark.heavy,
              pytest.mark.timeout(420)]



def test_three_agents_of_a_node_range_recover_from_a_kill(tmp_path: Path):
    args = ["--nnodes", "2:3", "--nproc", "1", "--rdzv-endpoint", f"127.0.0.1:{free_port()}",
            "--run-dir", str(tmp_path / "run"), "--steps", "12", "--size", "tiny",
            "--fault", "kill", "--fault-rank", "1", "--fault-step", "4", "--hang-first-s", "15",
            "--max-restarts", "3", "--timeout-s", "180", "--json"]
    cmd = [sys.executable, "-m", "jitbench.cli", "run", *args]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=dict(os.environ)) for _ in range(3)]
    try:
        outs = [p.communicate(timeout=400) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, (_out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-2000:]
    spec = json.loads((tmp_path / "run" / "spec.json").read_text())
    assert (spec["min_nodes"], spec["nnodes"]) == (2, 3)
    for out, _err in outs:
        summary = json.loads(out)
        assert summary["world_size"] == 3 and summary["attempts"] == 2
        assert summary["end_reason"] == "completed"
        assert summary["state_equal"] is True and summary["replayed_steps"] <= 1
    ranks = {f.name.split("_rank")[1] for f in (tmp_path / "run" / "events").iterdir()}
    assert ranks == {"00000.jsonl", "00001.jsonl", "00002.jsonl"}


def test_an_agent_beyond_max_is_refused_before_it_joins(tmp_path: Path):
    """Issue 14 §4: a third agent for ``--nnodes 2`` started while the job trains is
    refused up front (exit 2, one line naming the nodes that hold the places, nothing
    written); the two nodes of the job train on and complete."""
    run = tmp_path / "run"
    args = ["--nnodes", "2", "--nproc", "1", "--rdzv-endpoint", f"127.0.0.1:{free_port()}",
            "--run-dir", str(run), "--steps", "1500", "--size", "tiny", "--fault", "none",
            "--no-reference", "--rdzv-timeout-s", "60", "--timeout-s", "300", "--json"]
    cmd = [sys.executable, "-m", "jitbench.cli", "run", *args]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    try:
        deadline = time.monotonic() + 240
        while not any('"event": "step"' in f.read_text() for f in
                      (run / "events").glob("attempt*_rank00000.jsonl")):
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs)
            time.sleep(0.5)
        before = sorted(str(p.relative_to(run)) for p in run.rglob("*") if p.is_file()
                        and "events" not in p.parts and "agent" not in p.name)
        third = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        outs = [p.communicate(timeout=300) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    lines = [x for x in third.stderr.splitlines() if x.strip()]
    assert third.returncode == 2 and len(lines) == 1, third.stderr[-2000:]
    assert "--nnodes 2: the rendezvous at 127.0.0.1:" in lines[0]
    assert "already has 2 nodes of at most 2" in lines[0] and "; not started (" in lines[0]
    assert json.loads((run / "spec.json").read_text())["nnodes"] == 2
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-2000:]
        summary = json.loads(out)
        assert summary["end_reason"] == "completed" and summary["attempts"] == 1
    after = sorted(str(p.relative_to(run)) for p in run.rglob("*") if p.is_file()
                   and "events" not in p.parts and "agent" not in p.name)
    assert set(before) <= set(after)  # the refused agent removed nothing of the job's
