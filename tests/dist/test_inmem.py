"""``inmem:N`` (in-memory copies in a peer's host memory) end to end on gloo.

Each run is compared bitwise with one fault-free reference of the same training
(shared by the session). What ``inmem`` promises, checked here: a failure is
recovered in process (one attempt, survivors keep their processes) from a
surviving in-memory copy, every rank rolls back to that copy and replays exactly
the steps since it (computed here from the fault step and N), and the run stays
bitwise equal to the fault-free one; when both copies of the state are lost
(both ranks of a 2-rank job killed at once) the job restarts from its newest
committed disk checkpoint and the summary says so (restored kind ``disk``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from jitbench.faults import FaultSpec
from jitbench.harness import metrics
from jitbench.harness.campaign import expected_order
from jitbench.harness.launch import run_processes
from jitbench.harness.run import run as run_spec
from jitbench.runtime.events import read_events
from tests.conftest import small_spec

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

STEPS = 12


def _run(tmp_path, shared_reference, faults, strategy, spares=None):
    spec = small_spec(STEPS, faults=faults, strategy=strategy, nproc=2, spares=spares)
    out = run_spec(spec, tmp_path / "run", reference_from=shared_reference(spec),
                   timeout_s=240)
    s = out.summary
    assert s["completed"], (out.run_dir / "agent.log").read_text()[-3000:]
    return s, out.run_dir


def _expected(step: int, at: str, n: int) -> tuple[int, int]:
    """``(completed_before, copy_step)`` of a fault on rank 1 at ``step``: killed or hung at
    the gradient collective, every rank completed ``step - 1``; killed inside its optimizer
    step, its peer completed ``step`` (its gradient arrived). The last copy is the last
    multiple of N completed (a copy of step 0 is taken at the start)."""
    done = step if at == "optimizer" else step - 1
    return done, done // n * n


@pytest.mark.timeout(300)
@pytest.mark.parametrize("strategy, kind, step, at, spares", [
    ("inmem:2", "kill", 6, "collective", 1),      # copy at 4, replays step 5
    pytest.param("inmem:2", "kill", 5, "collective", 0,  # copy at 4, nothing to replay;
                 marks=pytest.mark.heavy),                # its own agent restarts it
    pytest.param("inmem:2", "nccl-hang", 8, "collective", 1,  # copy at 6, replays step 7
                 marks=pytest.mark.heavy),
    pytest.param("inmem:1", "kill", 6, "collective", 1,  # a copy at every step
                 marks=pytest.mark.heavy),
    pytest.param("inmem:1", "nccl-hang", 5, "collective", 1, marks=pytest.mark.heavy),
    pytest.param("inmem:4", "kill", 7, "optimizer", 1,  # peer finished 7, copy at 4: replays 5-7
                 marks=pytest.mark.heavy),
], ids=lambda v: str(v))
def test_one_failure_rolls_back_to_the_last_in_memory_copy(tmp_path, shared_reference,
                                                           strategy, kind, step, at, spares):
    n = int(strategy.split(":")[1])
    s, run_dir = _run(tmp_path, shared_reference,
                      [FaultSpec(kind, 1, step, params={"at": at})], strategy, spares)
    done, copy = _expected(step, at, n)
    assert s["state_equal"] is True and s["max_abs_diff"] == 0.0
    assert s["sample_stream_equal"] is True
    assert s["num_failures"] == 1 and s["attempts"] == 1  # survivors kept their processes
    assert s["restored_kind"] == "memory"
    assert s["replayed_steps"] == done - copy == s["expected_replayed_steps"]
    assert s["replay_ok"] is True and s["replayed_steps"] <= n
    f = s["failures"][0]
    assert f["in_process"] and f["completed_before"] == done, f
    assert f["restored_step"] == copy == f["memory_copy_step"], f
    for k in ("detect_s", "reform_s", "transfer_s", "restore_s", "stall_s", "recovery_s",
              "wasted_gpu_s"):
        assert f[k] is not None and f[k] >= 0, (k, f)
    assert f["restart_s"] is None
    assert f["reform_s"] + f["transfer_s"] <= f["recovery_s"]
    evs = read_events(run_dir / "events")
    # every member restored from memory; the survivor sent the copy its failed peer had
    # sent into its memory, unless that copy was older than its own
    restores = [e for e in evs if e["event"] == "restore" and e["phase"] == "end"
                and e.get("gen") == 1]
    assert {e["kind"] for e in restores} == {"memory"} and len(restores) == 2, restores
    assert restores[0]["source"].startswith("rank 0 memory"), restores
    # the copies went into the peer's memory, off the training thread, and only the
    # own copy stalled it (stage spans, counted in checkpoint_stall_gpu_s)
    sent = [e for e in evs if e["event"] == "copy" and e["phase"] == "end" and e.get("ok")]
    assert {e["step"] for e in sent} >= set(range(0, STEPS + 1, n))
    assert s["checkpoint_stall_gpu_s"] > 0
    assert not run_processes(run_dir)
    assert metrics.event_order(run_dir) == expected_order(strategy, 1)


@pytest.mark.heavy  # CI suite time budget: nox -s heavy
@pytest.mark.timeout(400)
def test_both_copies_lost_falls_back_to_disk(tmp_path, shared_reference):
    """Both ranks of a 2-rank job killed at the same step: rank 1's copy in rank 0's memory
    dies with rank 0, and the other way round. The waiting spare finds the generation
    gone and leads its failure; the job restarts as a whole from the newest committed
    disk checkpoint (every copy, disk=1), and the summary says so."""
    step, n = 7, 2
    s, run_dir = _run(tmp_path, shared_reference,
                      [FaultSpec("kill", 0, step), FaultSpec("kill", 1, step)],
                      f"inmem:{n}:disk=1", spares=1)
    assert s["state_equal"] is True and s["max_abs_diff"] == 0.0
    assert s["num_failures"] == 1 and s["attempts"] == 2  # a whole-job restart
    assert s["restored_kind"] == "disk" and s["trigger"] == "lost"
    f = s["failures"][0]
    assert not f["in_process"] and f["completed_before"] == step - 1
    # the newest committed disk checkpoint (written in the background: it may be one
    # copy behind), and exactly the steps since it replayed
    assert f["restored_step"] == f["last_commit_step"] and f["restored_step"] % n == 0
    assert 0 < f["restored_step"] <= step - 1
    assert s["replayed_steps"] == step - 1 - f["restored_step"] == s["expected_replayed_steps"]
    assert s["replay_ok"] is True
    for k in ("detect_s", "restart_s", "restore_s", "recovery_s"):
        assert f[k] is not None and f[k] >= 0, (k, f)
    evs = read_events(run_dir / "events")
    lost = [e for e in evs if e["event"] == "membership" and e["phase"] == "end"
            and e["rank"] == -1]
    assert len(lost) == 1 and lost[0]["fallback"] and lost[0]["dead"] == [0, 1], lost
    assert not run_processes(run_dir)


@pytest.mark.heavy  # CI suite time budget: nox -s heavy
@pytest.mark.timeout(300)
def test_one_failure_leaves_no_more_resources_on_survivors(tmp_path, shared_reference):
    """At the end of training the survivor holds what the newcomer holds, no more: no
    connection to the dead peer's memory, no second courier."""
    s, run_dir = _run(tmp_path, shared_reference, [FaultSpec("kill", 0, 4)], "inmem:2")
    assert s["state_equal"] is True and s["attempts"] == 1
    res = [e for e in read_events(Path(run_dir) / "events") if e["event"] == "resources"]
    assert len(res) == 2
    counts = {(e["threads"], e["tcp_established"], e["tcp_listen"]) for e in res}
    assert len(counts) == 1, res
