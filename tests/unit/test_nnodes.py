"""``--nnodes N`` and torch elastic's ``--nnodes MIN:MAX``: parsing, refusals, the spec,
torchrun's arguments and the end reason of a failed rendezvous (no launch)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from jitbench.cli.options import parse_nnodes
from jitbench.cli.run import DetectionOptions, FaultOptions, JobOptions, TrainingOptions, build_spec
from jitbench.errors import SpecError
from jitbench.harness.launch import agent_command
from jitbench.harness.run import agent_error
from jitbench.harness.spec import RunSpec

ENDPOINT = "127.0.0.1:29400"


@pytest.mark.parametrize("text, want", [
    ("1", (1, 1)), ("2", (2, 2)), ("2:3", (2, 3)), (" 3:3 ", (3, 3)), ("1:4", (1, 4)), (2, (2, 2)),
])
def test_parse_nnodes(text, want):
    assert parse_nnodes(text) == want


@pytest.mark.parametrize("text, message", [
    ("3:2", "needs MIN <= MAX, got '3:2'"),
    ("0", "the minimum must be >= 1"),
    ("0:2", "the minimum must be >= 1"),
    ("-1", "must be N or MIN:MAX"),
    ("2:", "must be N or MIN:MAX"),
    (":3", "must be N or MIN:MAX"),
    ("1:2:3", "must be N or MIN:MAX"),
    ("two", "must be N or MIN:MAX"),
    ("", "must be N or MIN:MAX"),
])
def test_parse_nnodes_refuses(text, message):
    with pytest.raises(SpecError, match=message):
        parse_nnodes(text)


def _spec(nnodes: str, **job) -> RunSpec:
    return build_spec(FaultOptions(fault="kill", fault_step=4), TrainingOptions(steps=12),
                      JobOptions(nproc=1, nnodes=nnodes, **job), DetectionOptions())


def test_a_range_trains_at_max_and_passes_the_range_to_torchrun(tmp_path):
    spec = _spec("2:3", rdzv_endpoint=ENDPOINT)
    assert (spec.min_nodes, spec.nnodes, spec.world_size) == (2, 3, 3)
    assert spec.nnodes_range == "2:3"
    cmd = agent_command(spec, tmp_path)
    assert cmd[cmd.index("--nnodes") + 1] == "2:3"
    fixed = _spec("3", rdzv_endpoint=ENDPOINT)
    assert (fixed.min_nodes, fixed.nnodes_range) == (3, "3")
    # the range does not change the training: same fingerprint, same reference
    assert spec.fingerprint() == fixed.fingerprint()
    assert spec.training_key() == fixed.training_key()
    # a spec.json of before the range still loads (min_nodes absent: N:N)
    old = RunSpec(nnodes=2, nproc=1, rdzv_endpoint=ENDPOINT)
    assert old.min_nodes is None and old.nnodes_range == "2"


@pytest.mark.parametrize("nnodes, job, message", [
    ("1:2", {}, "several nodes need --rdzv-endpoint"),
    ("2", {}, "several nodes need --rdzv-endpoint"),
    ("3:2", {"rdzv_endpoint": ENDPOINT}, "needs MIN <= MAX"),
])
def test_build_spec_refuses(nnodes, job, message):
    with pytest.raises(SpecError, match=message):
        _spec(nnodes, **job)


def test_spec_refuses_a_min_outside_the_range():
    with pytest.raises(SpecError, match="1 <= MIN <= MAX, got 3:2"):
        RunSpec(nnodes=2, min_nodes=3, nproc=1, rdzv_endpoint=ENDPOINT).validate()


@pytest.mark.parametrize("nnodes, message", [
    ("3:2", "--nnodes MIN:MAX needs MIN <= MAX, got '3:2'"),
    ("0:2", "--nnodes: the minimum must be >= 1, got '0:2'"),
])
def test_cli_refuses_a_bad_range_in_one_line(tmp_path, nnodes, message):
    p = subprocess.run([sys.executable, "-m", "jitbench.cli", "run", "--nnodes", nnodes,
                        "--rdzv-endpoint", ENDPOINT, "--run-dir", str(tmp_path / "r")],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert p.returncode == 2, p.stderr
    assert message in p.stderr
    assert "Traceback" not in p.stderr + p.stdout and len(p.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()


# what three agents of a two-node job wrote with torch 2.14.1 (see the README, "Several
# nodes"): the standby's peers time out on a rendezvous store key, then the failed node's
# agent meets the rendezvous they closed
THREE_AGENTS = """\
[W1201 05:11:20.185810601 socket.cpp:494] [c10d] waitForInput: socket timed out after 60000ms
torch.distributed.DistStoreError: wait timeout after 60000ms, keys: /torch.rendezvous.t.1/MASTER_ADDR
torch.distributed.elastic.rendezvous.api.RendezvousClosedError
"""


def test_the_root_rendezvous_failure_is_named_before_a_closed_rendezvous(tmp_path: Path):
    log = tmp_path / "agent.log"
    log.write_text(THREE_AGENTS)
    assert agent_error(log) == ("rendezvous failed: DistStoreError: wait timeout after 60000ms, "
                                "keys: /torch.rendezvous.t.1/MASTER_ADDR")
    log.write_text("torch.distributed.elastic.rendezvous.api.RendezvousClosedError\n")
    assert agent_error(log) == ("rendezvous failed: RendezvousClosedError: another agent "
                                "closed it (it failed or the job ended)")
    log.write_text("torch.distributed.DistStoreError: Socket Timeout on key /jitbench/x\n")
    assert agent_error(log) == "DistStoreError: Socket Timeout on key /jitbench/x"
