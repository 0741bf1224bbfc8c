"""``jitbench launch --strategy jit``: transparent JIT checkpointing of unmodified scripts.

Each example (and ``scripts/amp_epochs.py``, which adds an enabled GradScaler,
StepLR, dropout, a shuffled DistributedSampler with a partial last batch over
several epochs and per-rank Python RNG streams) runs with 2 ranks on gloo
through the elastic agent. Under ``jit`` the survivors save at the failure and
the restart fast-forwards the script's loop to the saved step: the final
model, optimizer, scheduler and scaler state and every step's loss equal the
fault-free run's bitwise, and at most one minibatch is replayed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jitbench import phases
from jitbench.faults import FaultSpec
from jitbench.harness.launch import run_processes
from jitbench.harness.script import ScriptSpec, run_script

pytestmark = [pytest.mark.distributed, pytest.mark.slow, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = {
    "ddp_tutorial.py": (ROOT / "examples" / "ddp_tutorial.py", ["--steps", "10"]),
    "nanogpt_style.py": (ROOT / "examples" / "nanogpt_style.py", ["--max-iters", "8"]),
    "own_dcp.py": (ROOT / "examples" / "own_dcp.py",
                   ["--steps", "10", "--ckpt-every", "4", "--ckpt-dir", "{run_dir}/own"]),
    "amp_epochs.py": (Path(__file__).parent / "scripts" / "amp_epochs.py", []),
}
CASES = [
    # script, fault kind, rank, step
    ("ddp_tutorial.py", "kill", 1, 6),
    ("ddp_tutorial.py", "nccl-hang", 1, 6),
    ("nanogpt_style.py", "kill", 1, 5),
    ("nanogpt_style.py", "nccl-hang", 0, 5),
    ("own_dcp.py", "kill", 1, 7),
    ("own_dcp.py", "nccl-hang", 1, 7),
    ("amp_epochs.py", "kill", 0, 5),  # the restarted rank 0 keeps its own python stream
    ("amp_epochs.py", "nccl-hang", 1, 11),
]
IN_SUITE = {("nanogpt_style.py", "kill")}
"""The cells the CI suite runs (its time budget); ``nox -s heavy`` runs every cell."""


def _spec(name: str, faults: list[FaultSpec] | None = None, args: list[str] | None = None,
          strategy: str = "jit") -> ScriptSpec:
    script, default_args = SCRIPTS[name]
    return ScriptSpec(script=str(script), args=list(default_args if args is None else args),
                      faults=faults or [], strategy=strategy, first_step_s=120.0,
                      hang_first_s=8.0, hang_floor_s=1.5)


@pytest.mark.parametrize("name, kind, rank, step", [
    pytest.param(*c, marks=() if c[:2] in IN_SUITE else pytest.mark.heavy) for c in CASES])
def test_transparent_jit_is_bitwise_with_one_minibatch(tmp_path, name, kind, rank, step):
    out = run_script(_spec(name, [FaultSpec(kind, rank, step)]), tmp_path / "run",
                     timeout_s=240)
    s = out.summary
    assert s["completed"], (out.run_dir / "agent.log").read_text()[-3000:]
    assert s["attempts"] == 2
    assert [(f["kind"], f["rank"], f["step"]) for f in s["fired"]] == [(kind, rank, step)]
    f = s["failures"][0]
    # the survivors saved the last boundary; the restart restored it, not step 0
    assert s["restored_kind"] == "jit" and f["restored_step"] == f["completed_before"]
    assert f["completed_before"] >= step - 1
    assert s["replayed_steps"] <= 1 and s["replay_ok"] is True
    assert s["bitwise_promised"] is True and s["warnings"] == []
    assert s["state_equal"] is True and s["max_abs_diff"] == 0.0
    assert s["loss_equal"] is True
    # the restarted loop ran to the saved step without training: one fast-forward
    # per rank, from the script's own state to the checkpoint's step
    evs = phases.read_events(out.run_dir)
    ff = [e for e in evs if e["event"] == "fast_forward" and e["phase"] == "end"]
    assert sorted(e["rank"] for e in ff) == [0, 1]
    assert {e["step"] for e in ff} == {f["restored_step"]}
    assert run_processes(out.run_dir) == []


def test_what_the_hooks_cannot_follow_is_said_in_one_line(tmp_path):
    """ReduceLROnPlateau and a second optimizer of the same parameters: one warning
    line each (stderr of the CLI, ``warnings`` of the summary), and no bitwise promise."""
    import subprocess
    import sys

    script, _ = SCRIPTS["amp_epochs.py"]
    p = subprocess.run([sys.executable, "-m", "jitbench.cli.__main__", "launch", "--strategy",
                        "jit", "--fault", "none", "--no-reference", "--json", "--run-dir",
                        str(tmp_path / "run"), "--timeout-s", "200", "--", str(script),
                        "--plateau", "--extra-optimizer", "--epochs", "1"],
                       capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    s = json.loads(p.stdout)
    assert s["completed"] is True and s["bitwise_promised"] is False
    assert len(s["warnings"]) == 2, s["warnings"]
    assert any(w.startswith("ReduceLROnPlateau reads the loss") for w in s["warnings"])
    assert any(w.startswith("2 optimizers hold the DDP module's parameters") for w in
               s["warnings"])
    log = (tmp_path / "run" / "agent.log").read_text()
    assert log.count("jitbench: warning: ") == 2  # rank 0 says each once
