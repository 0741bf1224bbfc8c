"""Field cases C5, C6, C7 and C8 end to end: 2 ranks on gloo through the elastic
agent, several faults per run, every step compared with the fault-free run.

Two runs serve the module (several faults each, to share start-up):

- ``epochs``: tiny GPT with dropout 0.1, warmup-cosine LR, 3 minibatches per
  epoch (31 windows of 64 bytes, 15 per rank, batch 4). Faults: SIGKILL rank
  1 in epoch 0 (step 2); hang rank 0 at step 4, the first step of epoch 1, so
  the JIT state is exactly the end of epoch 0; SIGKILL rank 0 in epoch 2
  (step 8).
- ``accum``: tiny GPT, 4 micro-batches per optimizer step, fp16 autocast with
  a GradScaler that grows every 2 steps, step-decay LR halving at every epoch
  (8 micro-batches = 2 optimizer steps per epoch). Faults: SIGKILL rank 0 at
  the end of a window (its collective, step 2); SIGKILL rank 1 mid-window
  (before micro-batch 2 of step 4); hang rank 0 at a window boundary that is
  also an epoch boundary (before micro-batch 0 of step 5).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from torch.utils.data import DistributedSampler

from jitbench.faults import FaultSpec
from jitbench.harness import campaign, metrics
from jitbench.harness.run import run as run_spec
from jitbench.runtime import checkpoint as ckpt
from jitbench.runtime.events import read_events
from tests.conftest import small_spec

pytestmark = [pytest.mark.distributed, pytest.mark.slow, pytest.mark.timeout(600)]


def _go(tmp_path_factory, shared_reference, spec, name):
    ref = shared_reference(spec)
    out = run_spec(spec, tmp_path_factory.mktemp(name) / "run", reference_from=ref,
                   timeout_s=400)
    s = out.summary
    assert s["completed"], (out.run_dir / "agent.log").read_text()[-4000:]
    return s, out.run_dir, ref


EPOCH_SPEC = small_spec(12, faults=[FaultSpec("kill", 1, 2), FaultSpec("nccl-hang", 0, 4),
                                    FaultSpec("kill", 0, 8)],
                        extra={"max_bytes": 2000, "dropout": 0.1})


@pytest.fixture(scope="module")
def epochs(tmp_path_factory, shared_reference):
    return _go(tmp_path_factory, shared_reference, EPOCH_SPEC, "epochs")


ACCUM_SPEC = small_spec(8, grad_accum=4, batch_size=2,
                        faults=[FaultSpec("kill", 0, 2),
                                FaultSpec("kill", 1, 4, params={"at": "micro:2"}),
                                FaultSpec("nccl-hang", 0, 5, params={"at": "micro:0"})],
                        extra={"max_bytes": 2100, "amp": "fp16", "amp_growth_interval": 2,
                               "schedule": "step-decay"})


@pytest.fixture(scope="module")
def accum(tmp_path_factory, shared_reference):
    return _go(tmp_path_factory, shared_reference, ACCUM_SPEC, "accum")


def _per_step(run_dir: Path, key: str) -> dict[tuple[int, int, int], object]:
    """``{(attempt, rank, step): value}`` of every executed step."""
    return {(e["attempt"], r, e["step"]): e.get(key)
            for r, evs in metrics.executions(run_dir).items() for e in evs}


def _ref_per_step(ref: Path, key: str) -> dict[tuple[int, int], object]:
    return {(r, e["step"]): e.get(key) for r, evs in metrics.executions(ref).items() for e in evs}


def _first_steps_after_restore(summary: dict) -> list[int]:
    return [f["restored_step"] + 1 for f in summary["failures"]]


def test_every_invariant_holds_in_both_runs(epochs, accum):
    for (s, run_dir, ref), spec in ((epochs, EPOCH_SPEC), (accum, ACCUM_SPEC)):
        assert campaign.check(s, spec, run_dir, ref, bound_s=400) == []


# ------------------------------------------------------------------------------ C7
def test_c7_sample_ids_with_faults_in_epoch_0_at_a_boundary_and_in_epoch_2(epochs):
    """Sample ids before each fault plus those after resume equal the fault-free
    stream, except the replayed minibatch; each later epoch keeps its full length
    and its own shuffle.

    Faulty behaviour caught: a sampler restarted at position 0 or at epoch 0
    after a restore, an epoch shortened by a resume, or one shuffle for every epoch.
    """
    s, run_dir, ref = epochs
    assert [f["restored_step"] for f in s["failures"]] == [1, 3, 7]
    assert metrics.stream_violations(run_dir, ref, 12, max_replay=1) == []
    assert s["sample_stream_equal"] is True
    batch, per_epoch = 4, 3
    eff = metrics.sample_streams(run_dir)  # last execution of each step per rank
    for rank in (0, 1):
        sampler = DistributedSampler(range(31), num_replicas=2, rank=rank, shuffle=True,
                                     seed=0, drop_last=True)
        epochs_seen = []
        for e in range(4):
            ids = [i for st in range(e * per_epoch + 1, (e + 1) * per_epoch + 1)
                   for i in eff[rank][st]]
            sampler.set_epoch(e)
            assert ids == list(sampler)[: per_epoch * batch], (rank, e)  # full length, own order
            epochs_seen.append(ids)
        assert len({tuple(x) for x in epochs_seen}) == 4  # every epoch its own shuffle


# ------------------------------------------------------------------------------ C6
def test_c6_rng_and_dropout_equal_at_the_first_resumed_step_on_2_ranks(epochs):
    """RNG digests (python, numpy, torch) at the start of every step, and the
    loss (which depends on every dropout mask), equal the fault-free run's on
    both ranks, in particular at the first step after each restore.

    Faulty behaviour caught: a restore that shifts a stream by a draw, or
    restores one rank's streams and not another's.
    """
    s, run_dir, ref = epochs
    rng, ref_rng = _per_step(run_dir, "rng"), _ref_per_step(ref, "rng")
    loss, ref_loss = _per_step(run_dir, "loss"), _ref_per_step(ref, "loss")
    assert all(v is not None for v in rng.values())
    for (attempt, rank, step), digest in rng.items():
        assert digest == ref_rng[rank, step], (attempt, rank, step)
        assert loss[attempt, rank, step] == ref_loss[rank, step], (attempt, rank, step)
    firsts = _first_steps_after_restore(s)
    assert firsts == [2, 4, 8]
    for a, first in enumerate(firsts, start=1):
        for rank in (0, 1):
            assert rng[a, rank, first] == ref_rng[rank, first]
    assert s["state_equal"] is True and s["max_abs_diff"] == 0.0  # final RNG streams included


# ------------------------------------------------------------------------------ C5
def test_c5_warmup_cosine_lr_at_every_step_after_faults(epochs):
    """Faults mid-epoch and at an epoch boundary: the LR at every global step
    (every execution, both ranks) equals the uninterrupted run's."""
    s, run_dir, ref = epochs
    lr, ref_lr = _per_step(run_dir, "lr"), _ref_per_step(ref, "lr")
    assert len(set(ref_lr.values())) > 5
    for (attempt, rank, step), v in lr.items():
        assert v == ref_lr[rank, step], (attempt, rank, step)


def test_c5_step_decay_lr_at_every_step_after_faults(accum):
    """Step decay (x0.5 every epoch of 2 optimizer steps); the hang at step 5
    restores exactly at the end of epoch 1."""
    s, run_dir, ref = accum
    lr, ref_lr = _per_step(run_dir, "lr"), _ref_per_step(ref, "lr")
    want = [ref_lr[0, st] for st in range(1, 9)]
    # ``lr`` is the rate after the step (used by the next): it halves after steps 2, 4, 6
    assert want[0] == 2 * want[1] == 2 * want[2] == 4 * want[3]
    for (attempt, rank, step), v in lr.items():
        assert v == ref_lr[rank, step], (attempt, rank, step)
    assert [f["restored_step"] for f in s["failures"]] == [1, 3, 4]


# ------------------------------------------------------------------------------ C8
def test_c8_micro_batch_positions_with_faults_mid_window_and_at_a_boundary(accum):
    """Gradient accumulation of 4: after faults at the end of a window, mid-window
    (before micro-batch 2) and at a window boundary (before micro-batch 0), the
    micro-batch indices and the positions of the optimizer steps equal the
    reference's, and every optimizer step averaged 4 micro-batches.

    Faulty behaviour caught: a resume that continues a half-consumed window
    (stepping after fewer micro-batches) or restarts the micro-batch count.
    """
    s, run_dir, ref = accum
    micro = _per_step(run_dir, "micro")
    ref_micro = _ref_per_step(ref, "micro")
    for (attempt, rank, step), m in micro.items():
        assert m == [4 * (step - 1) + k for k in range(4)], (attempt, rank, step)
        assert m == ref_micro[rank, step]
    fired = {e["fault_id"]: e for e in read_events(run_dir / "events") if e["event"] == "fault"}
    assert fired["kill@1:4"]["point"] == "micro:2" and fired["nccl-hang@0:5"]["point"] == "micro:0"
    # JIT parts hold an optimizer-step boundary: micro 0, 4 micro-batches per completed step
    parts = [p for p in ckpt.list_parts(run_dir / "ckpt") if p.kind == "jit"]
    assert sorted({p.step for p in parts}) == [1, 3, 4]
    for p in parts:
        state, _ = ckpt.load_part(p)
        assert state["data"]["micro"] == 0 and state["data"]["micro_batches_done"] == 4 * p.step
        assert state["data"]["grad_accum"] == 4
    # optimizer steps: one per completed step, as many as the reference (AdamW step counts)
    assert s["state_equal"] is True and s["max_abs_diff"] == 0.0


def test_amp_grad_scaler_state_survives_recovery(accum):
    """fp16 + GradScaler: the loss scale at every executed step equals the
    reference's (it grows every 2 steps and backs off on overflow), so the
    scaler state was saved in the JIT parts and restored."""
    s, run_dir, ref = accum
    scale, ref_scale = _per_step(run_dir, "scale"), _ref_per_step(ref, "scale")
    assert len(set(ref_scale.values())) > 2
    for (attempt, rank, step), v in scale.items():
        assert v == ref_scale[rank, step], (attempt, rank, step)
    part = next(p for p in ckpt.list_parts(run_dir / "ckpt") if p.kind == "jit")
    state, _ = ckpt.load_part(part)
    assert state["scaler"]["scale"] == ref_scale[0, part.step]
