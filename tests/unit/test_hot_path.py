"""The runtime's per-step hot path: the event log's writer thread and durability,
numpy's RNG capture that skips an unmoved stream, and the small-state copy."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from jitbench.runtime.events import EventLog, read_events
from jitbench.runtime.rng import capture_rng, capture_rng_raw, restore_rng, rng_state
from jitbench.runtime.state import Boundary, Registered, copy_small


def _lines(path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_durable_event_writes_everything_before_it_in_order(tmp_path):
    log = EventLog(tmp_path / "events" / "attempt000_rank00000.jsonl", 0, 0)
    for i in range(50):
        log.emit("step", "end", step=i)
    log.emit("exit", code=3, durable=True)
    # on disk when emit returns, before close, in emit order
    got = _lines(log.path)
    assert [e.get("step") for e in got[:50]] == list(range(50))
    assert got[-1]["event"] == "exit" and len(got) == 51
    log.close()
    log.emit("late")  # after close: dropped, no error
    assert len(read_events(tmp_path / "events")) == 51


def test_fields_are_frozen_at_emit(tmp_path):
    log = EventLog(tmp_path / "e.jsonl", 0, 0)
    ids, t = [1, 2], torch.tensor(1.5)
    log.emit("step", ids=ids, loss=t, pair=(1, 2), nested={"a": [1]})
    ids.append(3)
    t.add_(1)
    log.close()
    (rec,) = _lines(log.path)
    assert rec["ids"] == [1, 2] and rec["loss"] == 1.5 and rec["pair"] == [1, 2]
    assert rec["nested"] == {"a": [1]}


def test_rebind_keeps_earlier_events_in_the_old_file(tmp_path):
    log = EventLog(tmp_path / "a.jsonl", -1, 0)
    log.emit("spare")
    log.rebind(tmp_path / "b.jsonl", 3, 1)
    log.emit("step", step=1)
    log.close()
    assert [e["event"] for e in _lines(tmp_path / "a.jsonl")] == ["spare"]
    (b,) = _lines(tmp_path / "b.jsonl")
    assert b["rank"] == 3 and b["attempt"] == 1


def test_numpy_capture_sees_every_move_of_the_stream():
    np.random.seed(7)
    a = rng_state(capture_rng_raw())
    b = rng_state(capture_rng_raw())  # unmoved: the same values
    assert torch.equal(a["numpy"]["key"], b["numpy"]["key"]) and a["numpy"]["pos"] == b["numpy"]["pos"]
    np.random.rand(3)
    c = rng_state(capture_rng_raw())
    assert c["numpy"]["pos"] != a["numpy"]["pos"]
    # a cached Gaussian: drawing it moves neither key nor position, only has_gauss
    np.random.seed(1)
    np.random.standard_normal()
    d = capture_rng()
    assert d["numpy"]["has_gauss"] == 1
    np.random.standard_normal()
    e = capture_rng()
    assert e["numpy"]["has_gauss"] == 0 and e["numpy"]["pos"] == d["numpy"]["pos"]
    # restoring the earlier state is seen too, and draws the same
    restore_rng(d)
    assert capture_rng()["numpy"]["has_gauss"] == 1
    x = np.random.standard_normal()
    restore_rng(d)
    assert np.random.standard_normal() == x
    random.random()


def test_copy_small_is_a_deep_copy():
    t = torch.zeros(2)
    src = {"lr": 0.1, "betas": (0.9, 0.99), "t": t, "l": [{"x": [1]}], "s": {1, 2}}
    out = copy_small(src)
    assert out == {**src, "t": out["t"]} and torch.equal(out["t"], t)
    src["l"][0]["x"].append(2)
    src["s"].add(3)
    t.add_(1)
    assert out["l"] == [{"x": [1]}] and out["s"] == {1, 2} and out["t"].sum() == 0
    assert out["betas"] is src["betas"]  # immutable: shared


def test_python_capture_sees_every_move_of_the_stream():
    random.seed(5)
    a = capture_rng_raw()[0]
    assert capture_rng_raw()[0] == a == random.getstate()
    random.random()
    b = capture_rng_raw()[0]
    assert b != a and b == random.getstate()
    random.gauss()  # leaves a cached second value in gauss_next
    c = capture_rng_raw()[0]
    assert c == random.getstate() and c[2] is not None
    random.gauss()  # consumes it: the Twister state unchanged, gauss_next gone
    d = capture_rng_raw()[0]
    assert d == random.getstate() and d[2] is None and d[1] == c[1]
    full = capture_rng()
    x = random.random()
    restore_rng(full)
    assert capture_rng_raw()[0] == random.getstate() and random.random() == x


def test_copy_small_fast_paths_still_copy_what_is_mutable():
    """Lists of scalars are copied (C-level ``list.copy``), tuples of scalars shared,
    and a tuple that holds a tensor is rebuilt around a clone."""
    lrs, t = [0.1, 0.2], torch.ones(1)
    out = copy_small({"lrs": lrs, "betas": (t, 0.99)})
    lrs.append(0.3)
    t.add_(1)
    assert out["lrs"] == [0.1, 0.2] and out["betas"][0].item() == 1.0


def test_hyper_parameters_exclude_params_and_copy_a_tensor_lr():
    """The boundary's param groups: every key but ``params``, a tensor learning rate
    (as ``capturable`` optimizers take) cloned, a change after the boundary unseen."""
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=torch.tensor(0.01), betas=(0.9, 0.95))
    b = Boundary()
    b.register(Registered(model=model, optimizer=opt), 0)
    g = b.snapshot["param_groups"][0]
    assert "params" not in g and g["betas"] == (0.9, 0.95) and g["weight_decay"] == 0.01
    opt.param_groups[0]["lr"].fill_(0.5)
    opt.param_groups[0]["weight_decay"] = 0.0
    assert g["lr"].item() == pytest.approx(0.01) and g["weight_decay"] == 0.01
    assert set(g) == set(opt.param_groups[0]) - {"params"}
