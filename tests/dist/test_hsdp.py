"""``--parallel hsdp:2x2`` end to end (4 ranks, gloo, tiny GPT sharded with FSDP2).

Rank ``r`` holds shard ``r % 2`` of replica ``r // 2``. A failure of one rank leaves a
replica of each shard: the survivors write one part per shard and the restart loads
every shard back, bitwise equal to the fault-free run. Both replicas of shard 0 failing
at once leaves shard 0 with no copy: the restore falls back to the backstop's periodic
checkpoint and the summary says which shard was missing.
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
from jitbench.harness.run import run as run_spec
from jitbench.runtime.events import read_events
from tests.conftest import small_spec

pytestmark = [pytest.mark.distributed, pytest.mark.slow, pytest.mark.timeout(400)]

STEPS = 6
HSDP = "hsdp:2x2"


def _spec(faults: list[FaultSpec], strategy: str = "jit", steps: int = STEPS):
    return small_spec(steps, faults=faults, strategy=strategy, nproc=4, parallel=HSDP)


def _fired(run_dir: Path) -> list[tuple]:
    return sorted((e["kind"], e["rank"], e["step"]) for e in read_events(run_dir / "events")
                  if e["event"] == "fault")


def _restored_sources(run_dir: Path) -> dict[int, str]:
    """``{rank: part loaded}`` of the restart (attempt 1)."""
    return {e["rank"]: e["source"] for e in read_events(run_dir / "events")
            if e["event"] == "restore" and e["phase"] == "end" and e["attempt"] == 1}


def _check_jit_recovery(tmp_path, shared_reference, kind: str) -> None:
    spec = _spec([FaultSpec(kind, 1, 3)])
    out = run_spec(spec, tmp_path / "run", reference_from=shared_reference(spec),
                   timeout_s=300)
    s, run_dir = out.summary, out.run_dir
    assert s["completed"], (run_dir / "agent.log").read_text()[-3000:]
    assert s["state_equal"] is True and s["max_abs_diff"] == 0.0
    assert s["replayed_steps"] <= 1 and s["restored_kind"] == "jit"
    assert s["failures"][0]["restored_step"] == 2 and s["failures"][0]["fallback"] is None
    assert _fired(run_dir) == [(kind, 1, 3)]
    assert metrics.event_order(run_dir) == ["fault", "failure", "save", "restart", "restore",
                                            "step"]
    manifests = [json.loads(m.read_text()) for m in sorted((run_dir / "ckpt").glob("jit_*.json"))]
    # each writer wrote its own shard (rank r holds shard r % 2): the survivors of a kill;
    # a hung rank's own watchdog saves too (its state is still the boundary's)
    writers = [0, 2, 3] if kind == "kill" else [0, 1, 2, 3]
    assert [(m["rank"], m["format"], m["shard"], m["shards"]) for m in manifests] == [
        (r, "jitbench-sharded", r % 2, 2) for r in writers]
    # every restarted rank loaded a part of its own shard
    src = _restored_sources(run_dir)
    assert sorted(src) == [0, 1, 2, 3]
    for rank, name in src.items():
        rank_of_part = int(name.split("_rank")[1][:5])
        assert rank_of_part % 2 == rank % 2, (rank, name)
    assert not run_processes(run_dir)


def test_hsdp_kill_restores_every_shard(tmp_path, shared_reference):
    _check_jit_recovery(tmp_path, shared_reference, "kill")


@pytest.mark.heavy
def test_hsdp_nccl_hang_restores_every_shard(tmp_path, shared_reference):
    _check_jit_recovery(tmp_path, shared_reference, "nccl-hang")


@pytest.mark.heavy
def test_both_replicas_of_a_shard_fail_falls_back_to_the_backstop(tmp_path):
    """Two faults at once from a scenario file (both replicas of shard 0, at the start of
    step 6): shard 0 has no JIT part, so the restart loads the backstop of step 3."""
    scenario = tmp_path / "both.toml"
    scenario.write_text('[[fault]]\nkind = "kill"\nrank = 0\nstep = 6\nat = "step"\n\n'
                        '[[fault]]\nkind = "kill"\nrank = 2\nstep = 6\nat = "step"\n')
    run_dir = tmp_path / "r"
    p = subprocess.run(
        [sys.executable, "-m", "jitbench.cli", "run", "--parallel", HSDP, "--nproc", "4",
         "--size", "tiny", "--steps", "8", "--strategy", "jit", "--backstop", "periodic:3",
         "--scenario", str(scenario), "--hang-floor-s", "1.5", "--hang-first-s", "8",
         "--run-dir", str(run_dir), "--json"], capture_output=True, text=True, timeout=380)
    assert p.returncode == 0, p.stderr[-2000:]
    s = json.loads(p.stdout)
    assert s["completed"] and s["state_equal"] is True
    f = s["failures"][0]
    assert f["restored_kind"] == "periodic" and f["restored_step"] == 3
    assert f["replayed_steps"] == 2 == f["expected_replayed_steps"]
    assert "shard 0 of 2 missing" in f["fallback"] and "backstop periodic:3" in f["fallback"]
    assert _fired(run_dir) == [("kill", 0, 6), ("kill", 2, 6)]
    # the survivors (shard 1) wrote their JIT parts; each was skipped for the missing shard
    skipped = {name for name, _ in f["skipped_parts"]}
    assert skipped == {"jit_step00000005_rank00001.pt", "jit_step00000005_rank00003.pt"}
    assert not run_processes(run_dir)
