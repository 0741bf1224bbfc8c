"""Every fault kind of ``jitbench faults`` under ``jit-inprocess``: recovered in process,
or refused up front with the reason (issue 10, "Every fault kind").

The table is the fault catalog itself, so a new kind joins the matrix by name
and fails here until its behaviour under in-process recovery is stated below.
Heavy (one multi-process run per kind, two with a first-step hang bound):
``nox -s heavy``.
"""

from __future__ import annotations

import pytest

from jitbench import faults
from jitbench.faults import FaultSpec
from jitbench.harness.spec import SpecError
from tests.conftest import small_spec
from tests.dist.test_inprocess import _assert_clean_recovery, _run

pytestmark = [pytest.mark.distributed, pytest.mark.slow, pytest.mark.heavy,
              pytest.mark.timeout(300)]

STEP = 5
"""Past the first steps, so the hang bound is calibrated from measured steps."""

RECOVERED = {"kill", "term", "segfault", "exception", "exit", "nccl-hang", "nccl-timeout",
             "desync", "xid"}
"""A failure of one rank that the survivors recover in process (one failure, bitwise)."""
NO_FAILURE = {"slow", "amp-backoff"}
"""A straggler, a loss-scale backoff: the job goes on, nothing to recover."""
NETWORK = {"link-flap", "link-slow", "partition"}
"""Act on a namespaced node's own link: refused on a plain host with the reason (several
namespaced nodes: tests/dist/test_netns.py)."""
WRITES = {"eio", "enospc", "torn-write", "corrupt"}
"""Storage faults act on checkpoint files: refused alone (jit-inprocess writes only its
backstop after a recovery), accepted with a failing fault that makes one."""


def test_the_matrix_covers_the_catalog():
    assert {f["name"] for f in faults.catalog()} == RECOVERED | NO_FAILURE | WRITES | NETWORK


@pytest.mark.parametrize("kind", sorted(RECOVERED))
def test_recovered_in_process(tmp_path, shared_reference, kind):
    s, run_dir = _run(tmp_path, shared_reference, [FaultSpec(kind, 1, STEP)], spares=1)
    _assert_clean_recovery(s, run_dir, 1)


def test_a_straggler_is_not_a_failure(tmp_path, shared_reference):
    s, _ = _run(tmp_path, shared_reference,
                [FaultSpec("slow", 1, STEP, params={"delay_s": 0.2, "steps": 2})], spares=1)
    assert s["num_failures"] == 0 and s["state_equal"] is True and s["attempts"] == 1


def test_a_loss_scale_backoff_is_not_a_failure(tmp_path, shared_reference):
    s, _ = _run(tmp_path, shared_reference, [FaultSpec("amp-backoff", 1, STEP)], spares=1,
                extra={"amp": "fp16"})
    assert s["num_failures"] == 0 and s["state_equal"] is True and s["attempts"] == 1


@pytest.mark.parametrize("kind", sorted(NETWORK))
def test_network_faults_on_a_plain_host_are_refused_with_the_reason(kind):
    spec = small_spec(12, faults=[FaultSpec(kind, 1, STEP)], strategy="jit-inprocess")
    with pytest.raises(SpecError, match="namespaced node"):
        spec.validate()


@pytest.mark.parametrize("kind", sorted(WRITES))
def test_storage_faults_alone_are_refused_with_the_reason(kind):
    spec = small_spec(12, faults=[FaultSpec(kind, 0, STEP)], strategy="jit-inprocess")
    with pytest.raises(SpecError, match="under jit-inprocess a checkpoint is written only"):
        spec.validate()


@pytest.mark.parametrize("kind", ["eio", "torn-write"])
def test_a_write_fault_hits_the_backstop_after_a_recovery(tmp_path, shared_reference, kind):
    """Rank 1 is killed; rank 0, the source, writes the JIT backstop after the transfer,
    and that write fails (eio: the job trains on, in process; torn-write: rank 0 dies in
    the write, and a second in-process recovery follows)."""
    s, run_dir = _run(tmp_path, shared_reference,
                      [FaultSpec("kill", 1, STEP), FaultSpec(kind, 0, STEP)], spares=2)
    assert s["state_equal"] is True and s["attempts"] == 1
    assert s["num_failures"] == (1 if kind == "eio" else 2)
    assert all(f["in_process"] and f["replayed_steps"] <= 1 for f in s["failures"])
    fired = {p.name.split(".attempt")[0] for p in (run_dir / "faults_fired").iterdir()}
    assert fired == {f"kill@1:{STEP}", f"{kind}@0:{STEP}"}
