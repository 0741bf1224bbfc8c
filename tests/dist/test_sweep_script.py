"""``jitbench sweep --script``, end to end on gloo: a user's script beside a built-in
workload in one sweep, then ``jitbench report`` on it with no special flags.

One cell each (gpt tiny and examples/ddp_tutorial.py, jit, kill at step 6 of 10,
one repeat) and their two fault-free references: about 50 s on the 2-core
development machine (85 s while other jobs loaded it to 5.7).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from jitbench.harness.launch import run_processes

pytestmark = [pytest.mark.distributed, pytest.mark.slow, pytest.mark.timeout(400)]

DDP = Path(__file__).resolve().parents[2] / "examples" / "ddp_tutorial.py"


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jitbench.cli", *args], capture_output=True,
                          text=True, timeout=380, cwd=cwd)


@pytest.mark.heavy  # CI suite time budget: nox -s heavy
def test_script_row_beside_a_builtin_workload(tmp_path):
    sw = tmp_path / "sweep"
    p = _cli("sweep", "--workloads", "gpt", "--sizes", "gpt=tiny", "--batch-size", "4",
             "--script", str(DDP), "--script-args", "--steps 10", "--strategies", "jit",
             "--faults", "kill", "--steps", "10", "--fault-step", "6", "--out", str(sw),
             cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    t = pd.read_parquet(sw / "results.parquet")
    assert list(t["workload"]) == ["gpt", "script:ddp_tutorial.py"]
    assert list(t["strategy"]) == ["jit", "jit"] and list(t["fault"]) == ["kill", "kill"]
    row = t.iloc[1]
    # measured from its events, as for gpt: one kill, recovered by transparent JIT
    for col in ("detect_s", "restart_s", "restore_s", "recovery_s", "wasted_gpu_s", "goodput",
                "step_s", "spec_hash", "machine_torch"):
        assert pd.notna(row[col]), col
    assert row["num_failures"] == 1 and row["completed"]
    assert row["state_equal"] and row["max_abs_diff"] == 0.0 and row["replay_ok"]
    assert row["replayed_steps"] <= 1 and row["script"] == str(DDP)
    spec = json.loads(row["spec_json"])
    assert spec["kind"] == "script" and spec["args"] == ["--steps", "10"]
    meta = json.loads((sw / "sweep.json").read_text())
    assert meta["scripts"] == [{"workload": "script:ddp_tutorial.py", "script": str(DDP),
                                "args": ["--steps", "10"]}]
    assert sorted(d.name for d in (sw / "refs").iterdir()) == [
        "gpt-s0", "script_ddp_tutorial.py-s0"]
    run_dir = sw / "runs" / "script_ddp_tutorial.py-jit-kill-s0-r0"
    assert json.loads((run_dir / "summary.json").read_text())["workload"] == \
        "script:ddp_tutorial.py"
    assert run_processes(run_dir) == []

    p = _cli("report", str(sw), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    md = (sw / "report.md").read_text()
    assert f"- `script:ddp_tutorial.py`: `python {DDP} --steps 10`" in md
    lines = [x for x in md.splitlines() if x.startswith("| script:ddp_tutorial.py | jit | kill |")]
    assert len(lines) == 2  # the results table and the model's validation table
    assert lines[0].endswith("| ✓ | 0.000 |")  # state equal, max |diff|
    assert "![Timelines: script:ddp_tutorial.py]" in md
    page = (sw / "report.html").read_text()
    assert "script:ddp_tutorial.py" in page and "gpt" in page


def test_a_script_that_never_steps_stops_the_sweep_as_bad_input(tmp_path):
    """A sweep's fault-free launch of a script that ends without an optimizer step says
    it is not a training script, exit 2 (a new-user trial: exit 3 'did not complete',
    with no error in its summary); no cell is run."""
    script = tmp_path / "nostep.py"
    script.write_text("import torch\n")
    sw = tmp_path / "sweep"
    p = _cli("sweep", "--script", str(script), "--strategies", "own", "--faults", "kill",
             "--steps", "6", "--fault-step", "2", "--out", str(sw), cwd=tmp_path)
    assert p.returncode == 2, p.stderr[-3000:]
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "script:nostep.py: not a training script" in lines[0]
    assert not (sw / "runs").exists() or not any((sw / "runs").iterdir())
