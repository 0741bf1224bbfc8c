"""Two 'nodes' on one host: two harnesses join one c10d rendezvous and a shared run dir."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import free_port

pytestmark = [pytest.mark.distributed, pytest.mark.slow, pytest.mark.timeout(300)]



def test_two_nodes_recover_from_a_kill(tmp_path: Path):
    args = ["--nnodes", "2", "--nproc", "1", "--rdzv-endpoint", f"127.0.0.1:{free_port()}",
            "--run-dir", str(tmp_path / "run"), "--steps", "10", "--size", "tiny",
            "--fault", "kill", "--fault-rank", "1", "--fault-step", "4", "--hang-first-s", "15",
            "--timeout-s", "200", "--json"]
    cmd = [sys.executable, "-m", "jitbench.cli", "run", *args]
    env = dict(os.environ)
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env) for _ in range(2)]
    outs = [p.communicate(timeout=280) for p in procs]
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-2000:]
    summary = json.loads(outs[0][0])
    assert summary["world_size"] == 2 and summary["attempts"] == 2
    assert summary["state_equal"] is True and summary["replayed_steps"] <= 1
    ranks = {f.name.split("_rank")[1] for f in (tmp_path / "run" / "events").iterdir()}
    assert ranks == {"00000.jsonl", "00001.jsonl"}
