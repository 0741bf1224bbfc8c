"""``jit:split=1`` end to end (3 ranks, gloo): the survivors share the JIT checkpoint and
the restart merges their slices, bitwise equal to the fault-free reference; gpt2 on CPU."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def _cli(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "jitbench.cli", *args], capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.heavy
@pytest.mark.timeout(600)
def test_survivors_split_the_jit_checkpoint(tmp_path):
    run = tmp_path / "r"
    p = _cli("run", "--size", "tiny", "--strategy", "jit:split=1", "--nproc", "3",
             "--fault", "kill", "--steps", "12", "--fault-step", "5", "--run-dir", str(run),
             "--json")
    assert p.returncode == 0, p.stderr[-2000:]
    s = json.loads(p.stdout)
    assert s["completed"] and s["state_equal"] is True and s["restored_kind"] == "jit"
    manifests = [json.loads(m.read_text()) for m in sorted((run / "ckpt").glob("jit_*.json"))]
    assert [(m["rank"], m["slice"], m["slices"]) for m in manifests] == [(0, 0, 2), (2, 1, 2)]


@pytest.mark.heavy
@pytest.mark.timeout(3000)
def test_gpt2_kill_on_cpu(tmp_path):
    """The command of benchmarks/gpt2-cpu.txt (about 8 minutes on 2 cores, 7 GB per rank)."""
    p = _cli("run", "--size", "gpt2", "--fault", "kill", "--steps", "6", "--fault-step", "3",
             "--batch-size", "1", "--hang-first-s", "600", "--hang-floor-s", "120",
             "--run-dir", str(tmp_path / "g"), "--json", timeout=2900)
    assert p.returncode == 0, p.stderr[-2000:]
    s = json.loads(p.stdout)
    assert s["completed"] and s["state_equal"] is True and s["replayed_steps"] == 0
