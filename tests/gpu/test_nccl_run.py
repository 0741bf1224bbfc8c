"""``jitbench run --backend nccl`` end to end (skipped without CUDA devices).

One device: a fault-free single-rank run under jit on NCCL (the CUDA path of
the runtime: boundary events, the pre-step device wait, a periodic save through
the side-stream copy). Two devices or more: the main job, a hung rank on NCCL,
recovered from the JIT checkpoint with at most one replayed step and the final
state bitwise equal to the fault-free run.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

N_DEV = torch.cuda.device_count() if torch.cuda.is_available() else 0

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(N_DEV < 1, reason="no CUDA device")]


def _run(tmp_path, *args: str) -> dict:
    p = subprocess.run([sys.executable, "-m", "jitbench.cli", "run", "--backend", "nccl",
                        "--run-dir", str(tmp_path / "run"), "--json", *args],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout)


def test_single_rank_on_nccl(tmp_path):
    s = _run(tmp_path, "--nproc", "1", "--fault", "none", "--steps", "12",
             "--strategy", "periodic:4")
    assert s["completed"] and s["final_step"] == 12 and s["checkpoint_saves"] >= 2


@pytest.mark.skipif(N_DEV < 2, reason="a fault needs 2 ranks, NCCL one device per rank")
@pytest.mark.parametrize("fault", ["nccl-hang", "kill"])
def test_main_job_on_nccl(tmp_path, fault):
    s = _run(tmp_path, "--fault", fault, "--steps", "30")
    assert s["completed"] and s["state_equal"] is True
    assert s["max_replayed_steps_per_failure"] <= 1
    if fault == "nccl-hang":
        assert s["detect_s"] < 30
