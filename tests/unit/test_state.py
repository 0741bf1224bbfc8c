"""Complete training state: what a checkpoint holds, how it loads, and field cases
C3, C4, C5, C6 and C9 on one in-process rank (no process group).

Each field-case test would fail on the faulty behaviour its case describes;
the comments say which.
"""

from __future__ import annotations

import random
import threading

import numpy as np
import pytest
import torch

from jitbench.runtime import checkpoint as ckpt
from jitbench.runtime.rng import capture_rng, restore_rng
from jitbench.runtime.staging import stage_for_async_save
from jitbench.runtime.state import REQUIRED_KEYS
from tests.conftest import Trainer


def _part(ckpt_dir):
    parts = ckpt.list_parts(ckpt_dir)
    assert parts, "no checkpoint written"
    return parts[0]


def _rewrite(part, mutate) -> None:
    """Load a part, change its state, and commit it again (valid checksums)."""
    state, manifest = ckpt.load_part(part)
    mutate(state)
    for f in (part.path, part.manifest_path):
        f.unlink()
    ckpt.write_part(part.path.parent, part.kind, part.step, part.rank, manifest["world_size"],
                    state, manifest["meta"], run_id=manifest["run_id"])


def _opt_moments(opt: torch.optim.Optimizer) -> dict:
    return {i: {k: v.clone() for k, v in s.items()}
            for i, s in enumerate(opt.state[p] for g in opt.param_groups for p in g["params"])}


def _equal_moments(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        a[i].keys() == b[i].keys() and all(torch.equal(a[i][k], b[i][k]) for k in a[i]) for i in a)


# ------------------------------------------------------------------------------ C4
def test_c4_adamw_state_round_trip(tmp_path):
    """AdamW: train 20, checkpoint, load into a fresh optimizer, train 15 more.

    Faulty behaviour caught: moments or step counts not saved / not loaded
    (exp_avg, exp_avg_sq, step differ; the loss trajectory diverges), and a
    missing optimizer key accepted silently.
    """
    with Trainer(tmp_path / "ref" / "ckpt", steps=35) as ref:
        ref.train(35)
    with Trainer(tmp_path / "a" / "ckpt", steps=35) as a:
        a.train(20)
        before = _opt_moments(a.wl.optimizer)
        assert {"exp_avg", "exp_avg_sq", "step"} <= set(before[0])
        a.save()
    with Trainer(tmp_path / "a" / "ckpt", steps=35) as b:
        assert not b.wl.optimizer.state  # freshly built
        res = b.restore()
        assert res.step == 20 and res.kind == "periodic"
        assert _equal_moments(before, _opt_moments(b.wl.optimizer))
        b.train(35)
    for s in range(21, 36):
        assert b.records[s]["loss"] == ref.records[s]["loss"], s  # bitwise
    for p, q in zip(b.wl.model.parameters(), ref.wl.model.parameters(), strict=True):
        assert torch.equal(p, q)

    # a missing optimizer moment fails the load loudly, naming it
    part = _part(tmp_path / "a" / "ckpt")
    _rewrite(part, lambda st: st["optimizer"]["state"][3].pop("exp_avg_sq"))
    with Trainer(tmp_path / "a" / "ckpt", steps=35) as c:
        with pytest.raises(ckpt.CheckpointError, match="parameter 3 lacks exp_avg_sq"):
            c.restore()


@pytest.mark.parametrize("key", REQUIRED_KEYS)
def test_missing_top_level_key_is_a_checkpoint_error(tmp_path, key):
    with Trainer(tmp_path / "ckpt", steps=6) as t:
        t.train(2)
        t.save()
    _rewrite(_part(tmp_path / "ckpt"), lambda st: st.pop(key))
    with Trainer(tmp_path / "ckpt", steps=6) as t:
        with pytest.raises(ckpt.CheckpointError, match=f"lacks {key}"):
            t.restore()


@pytest.mark.parametrize("mutate, needle", [
    (lambda st: st["rng"].pop("numpy"), "RNG stream"),
    (lambda st: st["optimizer"].__setitem__("state", {}), "optimizer state is empty"),
    (lambda st: st.__setitem__("scheduler", None), "no LR scheduler state"),
    (lambda st: st.__setitem__("scaler", {"scale": 1.0}), "holds grad-scaler state"),
    (lambda st: st["model"].pop("wpe.weight"), "does not fit the model"),
    (lambda st: st["data"].__setitem__("grad_accum", 4), "grad_accum 4"),
    (lambda st: st.__setitem__("data", {}), "no data position"),
])
def test_incomplete_or_foreign_state_fails_loudly(tmp_path, mutate, needle):
    """Every part of the state is checked before anything is trusted."""
    with Trainer(tmp_path / "ckpt", steps=6) as t:
        t.train(2)
        t.save()
    _rewrite(_part(tmp_path / "ckpt"), mutate)
    with Trainer(tmp_path / "ckpt", steps=6) as t:
        with pytest.raises(ckpt.CheckpointError, match=needle):
            t.restore()


def test_checkpoint_holds_every_stream_and_position(tmp_path):
    with Trainer(tmp_path / "ckpt", steps=8, grad_accum=2, extra={"amp": "fp16"}) as t:
        t.train(3)
        t.save()
    state, manifest = ckpt.load_part(_part(tmp_path / "ckpt"))
    assert set(state) == set(REQUIRED_KEYS)
    assert {"python", "numpy", "torch", "cuda"} <= set(state["rng"])
    assert state["step"] == 3 and manifest["step"] == 3 and manifest["world_size"] == 1
    assert state["data"]["micro_batches_done"] == 6 and state["data"]["micro"] == 0
    assert state["data"]["grad_accum"] == 2
    assert "scale" in state["scaler"] and "_growth_tracker" in state["scaler"]
    assert state["scheduler"]["last_epoch"] == 3
    assert state["scheduler"]["lr_lambdas"][0] == {"warmup": 1, "total": 8, "min_ratio": 0.1}
    assert all(s["step"].item() == 3 for s in state["optimizer"]["state"].values())
    assert manifest["run_id"] == "unit" and manifest["parts_needed"] == 1
    assert manifest["tensors"]["model.wte.weight"] == [[256, 64], "float32"]
    assert len(manifest["sha256"]) == 64


def test_small_state_comes_from_the_boundary_not_the_live_objects(tmp_path):
    """A failure save during the compute phase must not see a scheduler step, a
    GradScaler.update after a skipped step, or an lr change made in that step.
    (Only ``jit`` keeps a boundary snapshot at every step end; the other
    strategies read the state at a boundary.)"""
    with Trainer(tmp_path / "ckpt", steps=8, strategy="jit", extra={"amp": "fp16"}) as t:
        t.train(3)
        bound = t.rt.boundary_state()
        sched = dict(bound["scheduler"])
        scale = bound["scaler"]["scale"]
        lr = bound["optimizer"]["param_groups"][0]["lr"]
        # what a step in progress does outside the optimizer step
        t.wl.scheduler.step()
        t.wl.scaler.update(new_scale=scale / 2)
        t.wl.optimizer.param_groups[0]["lr"] = 123.0
        now = t.rt.boundary_state()
        assert now["scheduler"] == sched and now["scaler"]["scale"] == scale
        assert now["optimizer"]["param_groups"][0]["lr"] == lr


def test_amp_fp16_scaler_round_trip_and_trajectory(tmp_path):
    """fp16 autocast + GradScaler (growth every 2 steps, so the scale moves and
    overflowing steps are skipped): the scale is saved and restored, and the
    resumed run is bitwise the uninterrupted one."""
    kw = {"steps": 14, "extra": {"amp": "fp16", "amp_growth_interval": 2}}
    with Trainer(tmp_path / "ref" / "ckpt", **kw) as ref:
        ref.train(14)
    scales = [ref.records[s]["scale"] for s in range(1, 15)]
    assert len(set(scales)) > 2  # the scale grew and backed off
    with Trainer(tmp_path / "a" / "ckpt", **kw) as a:
        a.train(7)
        a.save()
    with Trainer(tmp_path / "a" / "ckpt", **kw) as b:
        b.restore()
        assert b.wl.scaler.get_scale() == ref.records[7]["scale"]
        b.train(14)
    assert [b.records[s]["loss"] for s in range(8, 15)] == \
        [ref.records[s]["loss"] for s in range(8, 15)]
    assert [b.records[s]["scale"] for s in range(8, 15)] == scales[7:]


def test_amp_bf16_trains_without_a_scaler_state(tmp_path):
    with Trainer(tmp_path / "ckpt", steps=6, extra={"amp": "bf16"}) as t:
        t.train(2)
        t.save()
        assert not t.wl.scaler.is_enabled()
    state, _ = ckpt.load_part(_part(tmp_path / "ckpt"))
    assert state["scaler"] == {}
    with Trainer(tmp_path / "ckpt", steps=6, extra={"amp": "bf16"}) as t:
        assert t.restore().step == 2
        t.train(6)


# ------------------------------------------------------------------------------ C5
@pytest.mark.parametrize("schedule", ["warmup-cosine", "step-decay"])
def test_c5_lr_at_every_step_after_resume(tmp_path, schedule):
    """LR at every global step after a resume equals the uninterrupted run's,
    resuming mid-epoch and exactly at an epoch boundary.

    Faulty behaviour caught: a scheduler not saved/loaded (warmup restarts, a
    decay is lost or applied twice), or loaded before the optimizer (whose
    ``param_groups`` then overwrite the scheduled lr).
    """
    kw = {"steps": 16, "batch_size": 4, "extra": {"schedule": schedule, "max_bytes": 1_300}}
    with Trainer(tmp_path / "ref" / "ckpt", **kw) as ref:
        ref.train(16)
        per_epoch = ref.wl.sampler.batches_per_epoch
    assert per_epoch == 5  # 20 windows of 64 bytes / 4 per batch
    want = [ref.records[s]["lr"] for s in range(1, 17)]
    assert len(set(want)) > 2
    if schedule == "step-decay":
        # ``lr`` is the rate after the step, used by the next: the first step of
        # epoch 1 (step per_epoch + 1) runs at half the rate
        assert want[per_epoch - 2] == 2 * want[per_epoch - 1]
    for resume_at in (7, per_epoch):  # mid-epoch; last step of epoch 0 (boundary)
        d = tmp_path / f"r{resume_at}" / "ckpt"
        with Trainer(d, **kw) as a:
            a.train(resume_at)
            a.save()
        with Trainer(d, **kw) as b:
            b.restore()
            assert b.wl.optimizer.param_groups[0]["lr"] == want[resume_at - 1]
            b.train(16)
        assert [b.records[s]["lr"] for s in range(resume_at + 1, 17)] == want[resume_at:]


# ------------------------------------------------------------------------------ C6
def _dropout_masks(t: Trainer) -> list:
    masks: list = []

    def hook(mod, inp, out):
        masks.append((out == 0).clone())

    t.wl.model.drop.register_forward_hook(hook)
    return masks


def _streams() -> tuple:
    return (torch.get_rng_state().clone(), random.getstate(),
            np.random.get_state(legacy=False)["state"]["key"].copy())


def _build_data_iterator() -> None:
    """What building a torch DataLoader iterator does to the global streams:
    ``_BaseDataLoaderIter.__init__`` draws its base seed from torch's stream;
    many loaders also touch python's and numpy's."""
    it = iter(torch.utils.data.DataLoader(range(8), batch_size=2, shuffle=True))
    next(it)
    random.random()
    np.random.rand()


def test_c6_rng_restore_then_build_iterator_shifts_no_stream(tmp_path):
    """GPT with dropout: restore, *then* build the data iterator (which draws).

    The dropout masks and the torch/python/numpy RNG bytes at the first resumed
    step equal the uninterrupted run's. Faulty behaviour caught: RNG restored
    inside ``restore()`` (before the iterator's draws), shown by the control.
    """
    kw = {"steps": 8, "extra": {"dropout": 0.2}}
    seen: dict = {}

    def at_step(t, step):
        seen.setdefault(id(t), {})[step] = _streams()

    with Trainer(tmp_path / "ref" / "ckpt", **kw) as ref:
        ref_masks = _dropout_masks(ref)
        ref.train(8, on_step=at_step)
    with Trainer(tmp_path / "a" / "ckpt", **kw) as a:
        a.train(4)
        a.save()
    with Trainer(tmp_path / "a" / "ckpt", **kw) as b:
        masks = _dropout_masks(b)
        res = b.restore()
        assert res.step == 4 and res.rng_pending
        _build_data_iterator()
        b.train(8, on_step=at_step)
    r, got = seen[id(ref)][5], seen[id(b)][5]
    assert torch.equal(r[0], got[0]) and r[1] == got[1] and np.array_equal(r[2], got[2])
    assert b.records[5]["rng"] == ref.records[5]["rng"]
    assert len(masks) == 4 and all(torch.equal(m, rm) for m, rm in zip(masks, ref_masks[4:],
                                                                      strict=True))
    assert [b.records[s]["loss"] for s in range(5, 9)] == [ref.records[s]["loss"]
                                                          for s in range(5, 9)]

    # control: the faulty order (set the streams, then build the iterator) shifts them
    state, _ = ckpt.load_part(_part(tmp_path / "a" / "ckpt"))
    restore_rng(state["rng"])
    _build_data_iterator()
    shifted = _streams()
    assert not torch.equal(shifted[0], r[0]) and shifted[1] != r[1]


def test_rng_capture_covers_every_stream_and_restores_exactly():
    random.seed(5)
    np.random.seed(6)
    torch.manual_seed(7)
    snap = capture_rng()
    a = (random.random(), np.random.rand(), torch.rand(2), np.random.randn())
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    restore_rng(snap)
    b = (random.random(), np.random.rand(), torch.rand(2), np.random.randn())
    assert a[0] == b[0] and a[1] == b[1] and torch.equal(a[2], b[2]) and a[3] == b[3]


# ------------------------------------------------------------------------------ C3
def test_c3_async_save_stages_the_state_at_request_time(tmp_path):
    """An asynchronous save requested at step k, an optimizer step at once, then
    the write completes: the saved tensors are the state at the request.

    Faulty behaviour caught: the writer serialising live tensors (on CPU,
    ``tensor.to("cpu")`` is no copy), shown by the control.
    """
    with Trainer(tmp_path / "ckpt", steps=10) as t:
        t.train(4)
        expect = {k: v.clone() for k, v in t.wl.model.state_dict().items()}
        expect_m = _opt_moments(t.wl.optimizer)
        live = t.rt.boundary_state()
        staged = stage_for_async_save(live)  # the request
        go = threading.Event()
        out = tmp_path / "async.pt"

        def writer():  # the asynchronous write, after the optimizer stepped
            go.wait()
            torch.save(staged, out)

        th = threading.Thread(target=writer)
        th.start()
        t.train(5)  # one more optimizer step while the save is in flight
        go.set()
        th.join()
        saved = torch.load(out, weights_only=True)
        assert all(torch.equal(saved["model"][k], v) for k, v in expect.items())
        got_m = {i: saved["optimizer"]["state"][i] for i in saved["optimizer"]["state"]}
        assert _equal_moments(expect_m, got_m)
        assert saved["step"] == 4
        # control: the live state has moved on
        assert not all(torch.equal(live["model"][k], v) for k, v in expect.items())
        assert not all(torch.equal(v.to("cpu"), expect[k]) for k, v in live["model"].items())

        # buffers are reused in place for the next save of the same layout
        again = stage_for_async_save(t.rt.boundary_state(), into=staged)
        assert again["model"]["wte.weight"].data_ptr() == staged["model"]["wte.weight"].data_ptr()
        assert torch.equal(again["model"]["wte.weight"], t.wl.model.wte.weight)


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_c3_dcp_async_save_of_the_boundary_state_is_taken_at_request_time(tmp_path):
    """The same property through ``torch.distributed.checkpoint.async_save`` (what
    ``periodic-async`` uses), single process: the default stager copies at the
    request in torch 2.14.1; this test guards that assumption."""
    import torch.distributed.checkpoint as dcp

    with Trainer(tmp_path / "ckpt", steps=10) as t:
        t.train(4)
        st = t.rt.boundary_state()
        sd = {"model": st["model"], "moments": {str(i): dict(s) for i, s in
                                                st["optimizer"]["state"].items()}}
        expect = stage_for_async_save(sd)
        fut = dcp.async_save(sd, checkpoint_id=str(tmp_path / "dcp"), no_dist=True)
        t.train(5)  # the optimizer steps while the save is in flight
        fut.result()
        out = stage_for_async_save(sd)  # same layout, to load into
        dcp.load(out, checkpoint_id=str(tmp_path / "dcp"), no_dist=True)
        assert all(torch.equal(out["model"][k], v) for k, v in expect["model"].items())
        assert all(torch.equal(out["moments"][i][k], v) for i, m in expect["moments"].items()
                   for k, v in m.items())
        assert not torch.equal(sd["model"]["wte.weight"], expect["model"]["wte.weight"])


# ------------------------------------------------------------------------------ C9
class _Counting:
    """Wraps the GPT dataset; counts items loaded (each load stands for an expensive read)."""

    def __init__(self, data) -> None:
        self.data, self.loads = data, 0
        self.num_samples = data.num_samples

    def get(self, ids):
        self.loads += len(ids)
        return self.data.get(ids)


@pytest.mark.parametrize("resume_step", [10, 50_000])
def test_c9_resume_cost_does_not_grow_with_the_step(tmp_path, resume_step, monkeypatch):
    """Restart -> first step at step 10 and at step 50,000 loads the same
    number of items and draws the same number of sampler indices.

    Faulty behaviour caught: fast-forwarding a data iterator through the
    skipped batches (loads and index draws grow with the resume step).
    """
    from torch.utils.data import DistributedSampler

    counts = {"indices": 0}
    orig_iter = DistributedSampler.__iter__

    def counting_iter(self):
        for i in orig_iter(self):
            counts["indices"] += 1
            yield i

    monkeypatch.setattr(DistributedSampler, "__iter__", counting_iter)
    kw = {"steps": 60_000, "grad_accum": 2, "extra": {"max_bytes": 20_000}}
    with Trainer(tmp_path / "ckpt", **kw) as t:
        t.train(1)
        # a checkpoint at the resume step (the state of step 1 relabelled)
        t.rt.write_checkpoint("periodic", resume_step, t.rt.boundary.take(resume_step))
    counts["indices"] = 0
    with Trainer(tmp_path / "ckpt", **kw) as r:  # the restart
        r.wl.data = _Counting(r.wl.data)
        assert r.restore().step == resume_step
        r.train(resume_step + 1)  # the first step after the restart
        loads, indices = r.wl.data.loads, counts["indices"]
        epoch_len = r.wl.sampler._sampler.num_samples
    assert loads == 2 * 2  # one step: grad_accum x batch_size items, whatever the step
    assert indices == epoch_len  # one epoch's permutation, not resume_step x batches


def test_a_function_lr_lambda_is_flagged(tmp_path):
    """LambdaLR checkpoints a callable object's fields (WarmupCosine) but nothing of
    a function: the runtime says so in the event log."""
    from jitbench.runtime.config import RuntimeConfig
    from jitbench.runtime.core import Runtime
    from jitbench.runtime.events import EventLog, read_events

    rt = Runtime(RuntimeConfig(ckpt_dir=str(tmp_path / "ck"), hang_first_s=600),
                 EventLog(tmp_path / "ev" / "attempt000_rank00000.jsonl", 0, 0), 0, 1)
    try:
        m = torch.nn.Linear(2, 2)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        rt.register(m, opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 0.5 ** i))
    finally:
        rt.close()
    warns = [e for e in read_events(tmp_path / "ev") if e["event"] == "warning"]
    assert len(warns) == 1 and "not checkpointed" in warns[0]["message"]


def test_stuck_before_collective_after_a_rollback(tmp_path):
    """A rank is stuck when it reached its gradient collective and did not post it.
    After a rollback (inmem: the failed step 5 was posted, steps from 4 are redone) the
    old mark must not hide it: reaching step 4's collective without posting it is
    stuck (stress review of e3c8b16: with the stale mark, the hung survivor reported
    'posted 5' and a healthy newcomer was judged hung)."""
    from jitbench.runtime.config import RuntimeConfig
    from jitbench.runtime.core import Runtime
    from jitbench.runtime.events import EventLog

    rt = Runtime(RuntimeConfig(ckpt_dir=str(tmp_path / "ck"), hang_first_s=600),
                 EventLog(tmp_path / "ev" / "attempt000_rank00000.jsonl", 0, 0), 0, 1)
    try:
        rt._begin(5)
        rt.enter_collective(5)
        assert rt.stuck_before_collective  # reached, not posted
        rt.mark_collective(5)
        assert not rt.stuck_before_collective and rt.posted == 5
        rt._begin(4)  # rolled back to the boundary after step 3: step 4 again
        assert not rt.stuck_before_collective and rt.posted == 3
        rt.enter_collective(4)
        assert rt.stuck_before_collective
        rt.mark_collective(4)
        rt._begin(5)
        assert not rt.stuck_before_collective and rt.posted == 4
    finally:
        rt.close()
