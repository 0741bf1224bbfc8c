"""``jitbench launch``: the examples under kill and nccl-hang with ``own``, bad input.

Each example runs with 2 ranks on gloo through the elastic agent with the
hooks installed; its recovery is the script's own (from step 0 for
ddp_tutorial and nanogpt_style, from its newest DCP checkpoint for own_dcp).
One fault-free reference launch per example is shared by its tests.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from jitbench.faults import FaultSpec
from jitbench.harness import metrics
from jitbench.harness.launch import run_processes
from jitbench.harness.script import ScriptSpec, run_script
from tests.conftest import assert_hang_detected

pytestmark = [pytest.mark.distributed, pytest.mark.slow, pytest.mark.timeout(300)]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CASES = {
    # example: (arguments, fault step, the step its own recovery restores)
    "ddp_tutorial.py": (["--steps", "10"], 6, 0),
    "nanogpt_style.py": (["--max-iters", "8"], 5, 0),
    "own_dcp.py": (["--steps", "10", "--ckpt-every", "4", "--ckpt-dir", "{run_dir}/ckpt"], 7, 4),
}


def _spec(example: str, faults: list[FaultSpec] | None = None, **kw) -> ScriptSpec:
    args = CASES[example][0] if example in CASES else []
    kw.setdefault("hang_first_s", 8.0)
    kw.setdefault("hang_floor_s", 1.5)
    return ScriptSpec(script=str(EXAMPLES / example), args=list(args), faults=faults or [],
                      first_step_s=120.0, **kw)


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    """One fault-free launch per example (shared by the module's tests)."""
    cache: dict[str, Path] = {}

    def get(example: str) -> Path:
        if example not in cache:
            d = tmp_path_factory.mktemp("ref") / "run"
            out = run_script(_spec(example), d, reference=False, timeout_s=240)
            assert out.summary["completed"], (d / "agent.log").read_text()[-3000:]
            cache[example] = d
        return cache[example]

    return get


IN_SUITE = {("ddp_tutorial.py", "kill")}
"""The cells the CI suite runs (its time budget); ``nox -s heavy`` runs every cell."""


@pytest.mark.parametrize("example, kind", [
    pytest.param(e, k, marks=() if (e, k) in IN_SUITE else pytest.mark.heavy)
    for e in sorted(CASES) for k in ("kill", "nccl-hang")])
def test_example_recovers_by_itself(tmp_path, references, example, kind):
    _, step, restored = CASES[example]
    out = run_script(_spec(example, [FaultSpec(kind, 1, step)]), tmp_path / "run",
                     reference_from=references(example), timeout_s=240)
    s = out.summary
    assert s["completed"], (out.run_dir / "agent.log").read_text()[-3000:]
    assert s["attempts"] == 2
    assert [(f["kind"], f["rank"], f["step"]) for f in s["fired"]] == [(kind, 1, step)]
    # measured from the events: detection, restart, the script's own restore, recovery
    for k in ("detect_s", "restart_s", "restore_s", "recovery_s"):
        assert s[k] is not None and s[k] > 0, k
    if kind == "nccl-hang":
        assert_hang_detected(s, out.run_dir)
    else:
        assert s["trigger"] in ("collective_error", "sigterm")
    f = s["failures"][0]
    assert f["completed_before"] == step - 1
    assert f["restored_step"] == restored
    assert s["replayed_steps"] == step - 1 - restored
    assert s["restored_kind"] == ("script" if restored else None)
    assert metrics.event_order(out.run_dir) == ["fault", "failure", "restart", "restore",
                                                "step"]
    # the examples are deterministic: their own recovery reproduces the fault-free run
    assert s["state_equal"] is True and s["max_abs_diff"] == 0.0
    assert s["loss_equal"] is True
    assert s["bitwise_promised"] is False and s["replay_ok"] is None
    assert run_processes(out.run_dir) == []


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jitbench.cli.__main__", *args],
                          capture_output=True, text=True, timeout=240, cwd=cwd)


def test_script_that_fails_by_itself_is_not_a_recovery(tmp_path):
    script = tmp_path / "broken.py"
    script.write_text(
        "import torch, torch.distributed as dist\n"
        "from torch.nn.parallel import DistributedDataParallel as DDP\n"
        "dist.init_process_group('gloo')\n"
        "model = DDP(torch.nn.Linear(4, 1))\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for step in range(1, 6):\n"
        "    model(torch.ones(2, 4)).sum().backward()\n"
        "    opt.step()\n"
        "    if step == 3:\n"
        "        raise ValueError('bad batch at step 3')\n")
    p = _cli("launch", "--fault", "none", "--run-dir", str(tmp_path / "run"), "--json",
             "--timeout-s", "200", "--", str(script), cwd=tmp_path)
    assert p.returncode == 3, p.stderr
    s = json.loads(p.stdout)
    assert s["error_kind"] == "script" and s["completed"] is False
    assert "ValueError: bad batch at step 3" in s["error"]
    assert s["num_failures"] == 0 and s["attempts"] == 1  # stopped, not restarted
    assert s["end_reason"].startswith("the script failed by itself (no fault fired)")
    assert "raise ValueError('bad batch at step 3')" in p.stderr  # its last lines
    assert run_processes(tmp_path / "run") == []


def test_script_that_never_steps_is_refused(tmp_path):
    script = tmp_path / "idle.py"
    script.write_text("import time, torch.distributed as dist\n"
                      "dist.init_process_group('gloo')\n"
                      "time.sleep(600)\n")
    p = _cli("launch", "--fault", "none", "--first-step-s", "3", "--run-dir",
             str(tmp_path / "run"), "--timeout-s", "200", "--", str(script), cwd=tmp_path)
    assert p.returncode == 2, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "reached no optimizer step within 3 s" in lines[0]
    assert run_processes(tmp_path / "run") == []


@pytest.mark.parametrize("fault", [["--fault", "none"],
                                   ["--fault", "kill", "--fault-step", "2"]])
def test_script_that_ends_without_a_step_is_refused(tmp_path, fault):
    """A script that ends (exit 0) without an optimizer step is not a training script:
    exit 2 with the reason, as for --first-step-s (a new-user trial: exit 0 with no
    fault, exit 3 'never fired' with one)."""
    script = tmp_path / "nostep.py"
    script.write_text("import torch\nprint('no training here')\n")
    p = _cli("launch", "--nproc", "2", *fault, "--run-dir",
             str(tmp_path / "run"), "--timeout-s", "200", "--", str(script), cwd=tmp_path)
    assert p.returncode == 2, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and ("not a training script: it ended without reaching an "
                                "optimizer step") in lines[0]
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert s["error_kind"] == "input" and s["completed"] is False
    assert s["end_reason"].startswith("not a training script")
    assert not (tmp_path / "run" / "reference").exists()  # nothing to compare: not run
    assert "holds the optimizer only" not in p.stderr  # no optimizer either: no such warning
    # nothing was measured: no table of empty metrics (a new-user trial of 2026-12-05)
    assert p.stdout.strip().splitlines() == [
        f"run directory: {tmp_path / 'run'} (no step completed: nothing measured)"]


@pytest.mark.parametrize("args, message", [
    (["--fault", "kill", "--fault-step", "3", "--", "missing.py"], "does not exist"),
    (["--unknown-flag", "--", "x.py"], "No such option: --unknown-flag"),
    (["--fault", "kill", "--", str(EXAMPLES / "ddp_tutorial.py")], "give --fault-step"),
    (["--strategy", "periodic:4", "--", str(EXAMPLES / "ddp_tutorial.py")],
     "runs under --strategy own (its own recovery) or jit"),
    (["--fault", "corrupt", "--fault-step", "3", "--", str(EXAMPLES / "ddp_tutorial.py")],
     "is a storage fault"),
    # without a step: the kind is refused first, not a step asked for it (a trial)
    (["--fault", "eio", "--", str(EXAMPLES / "ddp_tutorial.py")], "is a storage fault"),
    (["--fault", "none"], "give the script to launch after --"),
], ids=["missing", "unknown-flag", "no-step", "strategy", "storage", "storage-no-step",
        "no-script"])
def test_bad_input_is_one_line_exit_2(tmp_path, args, message):
    p = _cli("launch", "--run-dir", str(tmp_path / "run"), *args, cwd=tmp_path)
    assert p.returncode == 2, p.stderr
    assert p.stderr.count("\n") == 1 and message in p.stderr, p.stderr
    assert not (tmp_path / "run").exists()
