"""Pieces of transparent JIT (:mod:`jitbench.harness.transparent`) that need no ranks."""

from __future__ import annotations

import io
import random
from types import SimpleNamespace

import pytest
import torch

from jitbench.harness.transparent import (
    TransparentJit,
    _as_leaf,
    _Schedulers,
    _tensors_key,
    stream_digests,
)


def _jit(fast_forwarding: bool) -> tuple[TransparentJit, list]:
    said: list = []
    hooks = SimpleNamespace(rt=None, warn=lambda key, msg, **kw: said.append((key, msg, kw)),
                            begun=True)
    jit = TransparentJit(hooks)
    jit.fast_forwarding, jit.start, jit.target = fast_forwarding, 4, 9
    return jit, said


def test_checkpoint_writes_are_skipped_only_in_the_fast_forward(tmp_path):
    calls: list = []

    def save(obj, f):
        calls.append(f)

    jit, said = _jit(fast_forwarding=True)
    wrapped = jit._write(save, "torch.save", 1)
    assert wrapped({"w": 1}, str(tmp_path / "a.pt")) is None and calls == []
    assert said[0][0] == "ff_torch.save" and "step 9" in said[0][1] and "step 4" in said[0][1]
    buf = io.BytesIO()
    wrapped({"w": 1}, buf)  # not a checkpoint file: written
    assert calls == [buf]
    jit.fast_forwarding = False
    wrapped({"w": 1}, str(tmp_path / "b.pt"))
    assert calls[-1] == str(tmp_path / "b.pt")


def test_async_save_skipped_in_the_fast_forward_returns_a_done_future():
    jit, _ = _jit(fast_forwarding=True)
    fut = jit._write(lambda *a, **k: pytest.fail("wrote"), "torch.distributed.checkpoint."
                     "async_save", None)({"w": 1}, checkpoint_id="x")
    assert fut.done() and fut.result() is None


def test_reads_before_the_first_step_mark_an_own_checkpoint():
    jit, _ = _jit(fast_forwarding=False)
    jit.hooks.begun = False
    assert jit._read(lambda p: p)("ckpt") == "ckpt" and jit.loaded_own is True


def test_several_schedulers_round_trip():
    opt = torch.optim.SGD([torch.nn.Parameter(torch.ones(2))], lr=1.0)
    a = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    b = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.9)
    both = _Schedulers([a, b])
    for _ in range(3):
        opt.step()
        a.step()
        b.step()
    saved = both.state_dict()
    a.step()
    b.step()
    both.load_state_dict(saved)
    assert a.last_epoch == 3 and b.last_epoch == 3
    with pytest.raises(ValueError, match="2 LR schedulers saved, 1 built"):
        _Schedulers([a]).load_state_dict(saved)


def test_output_cache_key_follows_shapes_and_mode():
    x, y = torch.ones(4, 3), torch.ones(2, 3)
    assert _tensors_key((x,), {}, True) == _tensors_key((torch.zeros(4, 3),), {}, True)
    assert _tensors_key((x,), {}, True) != _tensors_key((y,), {}, True)
    assert _tensors_key((x,), {}, True) != _tensors_key((x,), {}, False)
    assert _tensors_key((x,), {"t": x}, True) != _tensors_key((x,), {}, True)


def test_fast_forward_outputs_are_fresh_leaves():
    out = torch.ones(3) * 2
    leaf = _as_leaf(out)
    assert leaf.requires_grad and leaf.is_leaf and leaf is not out
    leaf.sum().backward()  # the script's backward runs and reaches no parameter
    assert torch.equal(leaf.grad, torch.ones(3))
    idx = torch.arange(3)
    assert _as_leaf(idx) is idx  # integer outputs are passed as they are


def test_stream_digests_name_the_stream_that_moved():
    before = stream_digests()
    random.random()
    after = stream_digests()
    assert {k for k in before if before[k] != after[k]} == {"python"}
    torch.rand(1)
    assert {k for k, v in stream_digests().items() if v != after[k]} == {"torch"}
