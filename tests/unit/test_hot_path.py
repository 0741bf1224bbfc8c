"""The runtime's per-step hot path: the event log's writer thread and durability,
numpy's RNG capture that skips an unmoved stream, and the small-state copy."""

from __future__ import annotations

import json
import random
import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from jitbench.runtime import rng as rng_mod
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


def test_step_events_are_the_lines_emit_writes_in_order(tmp_path):
    """step_begin/step_end (the training thread's per-step path, queued as tuples) write
    the lines emit would, keys in its order, interleaved with emitted events as called;
    a durable event writes them first; info is frozen at the call; a closed log drops."""
    a, b = EventLog(tmp_path / "a.jsonl", 2, 1), EventLog(tmp_path / "b.jsonl", 2, 1)
    ids = [1]
    a.step_begin(7, 10.5)
    a.emit("fault", kind="x")
    a.step_begin(8, 11.0, cpu_s=3.25)
    a.set_base(gen=4)
    a.step_end(8, 12.0, 0.5, 1e-5, {"loss": 2.0, "ids": ids})
    ids.append(2)
    a.emit("exit", code=1, durable=True)
    got = _lines(a.path)  # on disk before close: the durable event drained the tuples
    a.close()
    a.step_end(9, 13.0, 0.5, 1e-5, {})
    assert _lines(a.path) == got
    b.emit("step", "begin", step=7)
    b.emit("fault", kind="x")
    b.emit("step", "begin", step=8, cpu_s=3.25)
    b.set_base(gen=4)
    b.emit("step", "end", step=8, dur_s=0.5, rt_s=1e-5, loss=2.0, ids=[1])
    b.emit("exit", code=1, durable=True)
    b.close()
    want = _lines(b.path)
    assert [list(e) for e in got] == [list(e) for e in want]  # same keys, same order
    drop = ("t_wall", "t_mono", "pid")
    assert ([{k: v for k, v in e.items() if k not in drop} for e in got]
            == [{k: v for k, v in e.items() if k not in drop} for e in want])
    assert [e["t_mono"] for e in got if e["event"] == "step"] == [10.5, 11.0, 12.0]
    assert got[3]["ids"] == [1] and got[3]["gen"] == 4 and "gen" not in got[2]


def test_a_step_s_info_never_overrides_the_event_nor_loses_the_batch(tmp_path):
    """A step's info key that names one of the event's own fields (phase, step, rank) is
    written beside it as info.<key>; a key JSON cannot write (a tuple, also nested in an
    emitted field) is written as its str instead of killing the writer's batch (the
    step's begin line, queued before it, was lost with it)."""
    log = EventLog(tmp_path / "a.jsonl", 2, 0)
    log.step_begin(1, 1.0)
    log.step_end(1, 2.0, 0.5, 1e-5, {"phase": "warmup", "step": 9, "rank": 7, (1, 2): 3,
                                     "loss": 1.5})
    log.emit("probe", nested={(3,): [{(4, 5): 6}]})
    log.step_begin(2, 3.0)
    log.close()
    begin, end, probe, begin2 = _lines(tmp_path / "a.jsonl")
    assert (begin["phase"], begin["step"], begin2["step"]) == ("begin", 1, 2)
    assert (end["event"], end["phase"], end["step"], end["rank"]) == ("step", "end", 1, 2)
    assert (end["info.phase"], end["info.step"], end["info.rank"]) == ("warmup", 9, 7)
    assert end["(1, 2)"] == 3 and end["loss"] == 1.5
    assert probe["nested"] == {"(3,)": [{"(4, 5)": 6}]}


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


def test_numpy_capture_sees_a_reseed_that_returns_to_a_key_with_another_gauss():
    """Field case of the hypothesis test below: seed(3) and two normals, a capture, then
    seed(3) and one normal give the same key and position with has_gauss 1 instead of
    0; the capture compared only key and position (since 2026-11) and returned the
    stale has_gauss 0. The cached Gaussian is compared too now, and a capture that
    holds one is still returned again while nothing moved."""
    np.random.seed(3)
    np.random.standard_normal()
    np.random.standard_normal()
    assert capture_rng_raw()[1]["has_gauss"] == 0
    np.random.seed(3)
    g = np.random.standard_normal()
    got, now = capture_rng_raw()[1], np.random.get_state(legacy=False)
    assert (got["state"]["pos"], got["has_gauss"], got["gauss"]) == (
        now["state"]["pos"], now["has_gauss"], now["gauss"]) and got["has_gauss"] == 1
    assert capture_rng_raw()[1] is got  # unmoved, Gaussian cached: no new get_state
    np.random.standard_normal()
    assert capture_rng_raw()[1]["has_gauss"] == 0
    np.random.seed(3)
    assert np.random.standard_normal() == g


def test_numpy_capture_without_a_readable_gauss_is_full_each_time(monkeypatch):
    """Where the RandomState's cached Gaussian cannot be read in place (another numpy's
    layout), every capture calls get_state: correct, only slower."""
    monkeypatch.setattr(rng_mod, "_gauss_view", lambda rs, addr: None)
    monkeypatch.setattr(rng_mod, "_np_seen", (None,) * 6)
    np.random.seed(3)
    a = capture_rng_raw()[1]
    assert rng_mod._np_seen[1] is None and capture_rng_raw()[1] is not a
    np.random.standard_normal()
    np.random.standard_normal()
    capture_rng_raw()
    np.random.seed(3)
    np.random.standard_normal()
    assert capture_rng_raw()[1]["has_gauss"] == 1


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
    # float hyper-parameters and a tuple of them shared, a list after them copied
    opt = torch.optim.AdamW(model.parameters(), lr=0.01, betas=(0.9, 0.95))
    b.register(Registered(model=model, optimizer=opt), 0)
    opt.param_groups[0]["milestones"] = [1, 2]
    b.refresh(1)
    g = b.snapshot["param_groups"][0]
    opt.param_groups[0]["milestones"].append(3)
    assert g["milestones"] == [1, 2] and g["betas"] is opt.param_groups[0]["betas"]


def test_capture_sees_a_move_of_exactly_one_twist_of_each_stream():
    """624 words drawn leave the Twister's position where it was and change every word
    of its key: the unmoved-stream check compares all 625 words, so it sees the move
    (a check of the position alone would return the stale capture)."""
    random.seed(11)
    np.random.seed(11)
    py0, np0 = capture_rng_raw()[:2]
    for _ in range(624):
        random.getrandbits(32)
    np.random.randint(0, 2**32, size=624, dtype=np.uint32)
    py1, np1 = capture_rng_raw()[:2]
    assert py1[1][-1] == py0[1][-1]  # the same position ...
    assert py1 != py0 and py1 == random.getstate()  # ... yet seen to move
    now = np.random.get_state(legacy=False)
    assert np1["state"]["pos"] == np0["state"]["pos"]
    assert not np.array_equal(np1["state"]["key"], np0["state"]["key"])
    assert np.array_equal(np1["state"]["key"], now["state"]["key"])


def _training(sched_factory):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
    opt = torch.optim.AdamW(model.parameters(), lr=0.1, betas=(0.9, 0.95))
    sched = sched_factory(opt)
    b = Boundary()
    b.register(Registered(model=model, optimizer=opt, scheduler=sched), 0)

    def step():
        model(torch.randn(8, 4)).sum().backward()
        opt.step()
        opt.zero_grad()
        sched.step()
    return model, opt, sched, b, step


SCHEDULERS = {
    "LambdaLR": lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, _Halving()),
    "StepLR": lambda opt: torch.optim.lr_scheduler.StepLR(opt, 2, 0.5),
    "SequentialLR": lambda opt: torch.optim.lr_scheduler.SequentialLR(
        opt, [torch.optim.lr_scheduler.ConstantLR(opt, 0.5, total_iters=2),
              torch.optim.lr_scheduler.ExponentialLR(opt, 0.9)], milestones=[2]),
}


class _Halving:
    """An LR multiplier object (LambdaLR checkpoints its fields)."""

    def __init__(self) -> None:
        self.base = 1.0

    def __call__(self, i: int) -> float:
        return self.base * 0.5 ** i


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_refreshed_snapshot_assembles_the_boundary_state(name):
    """The per-step refresh (fields of the scheduler, hyper-parameters, buffers, RNG)
    assembles what ``state_dict`` calls made at the boundary return, after the live
    objects moved on; SequentialLR, which holds schedulers, takes the state_dict path."""
    from jitbench.runtime.state import fields_scheduler

    model, opt, sched, b, step = _training(SCHEDULERS[name])
    assert (fields_scheduler(sched) is None) == (name == "SequentialLR")
    for _ in range(3):
        step()
    b.refresh(3)
    want_sched = copy_small(sched.state_dict())
    want_groups = [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups]
    want_bn = model[1].running_mean.clone()
    want_torch = torch.get_rng_state()
    step()  # everything moves on: last_epoch, _last_lr, lr, BatchNorm, RNG
    opt.param_groups[0]["weight_decay"] = 0.5
    got = b.assemble(3, b.snapshot)
    assert got["scheduler"] == want_sched and got["scheduler"] != sched.state_dict()
    assert [{k: v for k, v in g.items() if k != "params"}
            for g in got["optimizer"]["param_groups"]] == want_groups
    assert torch.equal(got["model"]["1.running_mean"], want_bn)
    assert torch.equal(got["rng"]["torch"], want_torch)
    # the assembled state loads back into a fresh scheduler as the boundary's
    _, opt2, sched2, _, _ = _training(SCHEDULERS[name])
    sched2.load_state_dict(got["scheduler"])
    assert sched2.state_dict()["last_epoch"] == 3


def test_refresh_equals_take_and_copies_tensor_betas():
    """The written-out refresh makes the snapshot take() makes, and a tensor hyper-parameter
    (Adam's betas as tensors) is a copy, not the live tensor."""
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1,
                            betas=(torch.tensor(0.9), torch.tensor(0.95)))
    b = Boundary()
    b.register(Registered(model=model, optimizer=opt), 0)
    b.refresh(1)
    fresh = b.take(1)
    assert set(b.snapshot) == set(fresh)
    g = b.snapshot["param_groups"][0]
    assert "params" not in g and g["betas"][0] is not opt.param_groups[0]["betas"][0]
    opt.param_groups[0]["betas"][0].fill_(0.5)
    assert g["betas"][0].item() == pytest.approx(0.9)


def test_cuda_streams_are_read_from_each_devices_generator(monkeypatch):
    """With CUDA initialised the capture holds every device's generator state in device
    order, read from torch.cuda.default_generators (what get_rng_state_all returns,
    without its Python per device); where those do not match the device count it calls
    get_rng_state_all. Simulated here: this machine has no GPU."""

    class Gen:
        def __init__(self, i):
            self.i = i

        def get_state(self):
            return torch.tensor([self.i], dtype=torch.uint8)

    monkeypatch.setattr(torch.cuda, "_initialized", True, raising=False)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "default_generators", (Gen(0), Gen(1)), raising=False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    cuda = rng_mod.capture_rng_raw()[3]
    assert [int(t[0]) for t in cuda] == [0, 1]
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 3)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: ["all"])
    assert rng_mod.capture_rng_raw()[3] == ["all"]


def test_the_take_s_cuda_check_follows_cuda_s_initialisation(monkeypatch):
    """The per-step capture reads the CUDA streams once torch says CUDA is initialised:
    the callable rng._watch_cuda queues through torch.cuda._lazy_call (run at CUDA's
    initialisation, or at once) sets the flag; until then a boundary's capture holds no
    CUDA stream and asks torch nothing. Where torch has no _lazy_call the flag stays set
    and every capture asks _cuda_states. Simulated here: this machine has no GPU."""
    queued = []
    monkeypatch.setattr(rng_mod, "_cuda", type("Cuda", (), {
        "_lazy_call": staticmethod(queued.append)})())
    monkeypatch.setattr(rng_mod, "_CUDA_FLAGGED", True)
    monkeypatch.setattr(rng_mod, "_CUDA_ON", True)
    asked = []
    monkeypatch.setattr(rng_mod, "_cuda_states", lambda: asked.append(1) or ["dev0"])
    rng_mod._watch_cuda()
    assert rng_mod._CUDA_ON is False and queued == [rng_mod._cuda_initialised]
    _, _, _, b, step = _training(SCHEDULERS["LambdaLR"])
    step()
    b.refresh(1)
    assert b.snapshot["rng"][3] == () and asked == []
    queued[0]()  # torch initialises CUDA
    step()
    b.refresh(2)
    assert b.snapshot["rng"][3] == ["dev0"] and asked == [1]
    monkeypatch.setattr(rng_mod, "_cuda", object())  # no _lazy_call
    monkeypatch.setattr(rng_mod, "_CUDA_ON", False)
    rng_mod._watch_cuda()
    assert rng_mod._CUDA_ON is False  # left as it was: only _lazy_call's callable sets it
    monkeypatch.setattr(rng_mod, "_CUDA_ON", True)
    rng_mod._watch_cuda()
    assert rng_mod._CUDA_ON is True


def test_a_replaced_snapshot_is_updated_in_place_and_what_was_assembled_stays():
    """take(into=...) updates the snapshot it replaces and returns it: each key holds
    the new boundary's value (the step, the hyper-parameters the scheduler set, the
    scheduler's fields), the RNG tuple is kept while no stream moved and replaced when
    one did, and a state assembled from the snapshot before (a checkpoint's) keeps the
    old boundary's values."""
    _, opt, sched, b, step = _training(SCHEDULERS["LambdaLR"])
    step()
    b.refresh(1)
    snap, rng1 = b.snapshot, b.snapshot["rng"]
    groups1, sched1 = snap["param_groups"], snap["scheduler"]
    old = b.assemble(1, snap)
    lr1 = opt.param_groups[0]["lr"]
    step()
    b.refresh(2)
    assert b.snapshot is snap and snap["step"] == 2
    assert snap["rng"] is rng1  # no stream moved but torch's, whose image is overwritten
    assert snap["param_groups"] is not groups1 and snap["scheduler"] is not sched1
    assert snap["param_groups"][0]["lr"] == opt.param_groups[0]["lr"] != lr1
    assert snap["scheduler"]["last_epoch"] == sched.last_epoch == 2
    assert old["optimizer"]["param_groups"][0]["lr"] == lr1 == groups1[0]["lr"]
    assert old["scheduler"]["last_epoch"] == 1 and old["step"] == 1
    fresh = b.take(2)
    assert set(snap) == set(fresh)
    live = ("rng", "param_groups", "scheduler", "buffers")
    assert {k: v for k, v in snap.items() if k not in live} \
        == {k: v for k, v in fresh.items() if k not in live}
    assert all(torch.equal(snap["buffers"][k], v) for k, v in fresh["buffers"].items())
    snap["scaler"] = {"scale": 1024.0}  # written in since (Runtime.amend_snapshot)
    random.random()  # python's stream moves
    step()
    b.refresh(3)
    assert snap["rng"] is not rng1 and snap["rng"][0] is not rng1[0]
    assert snap["scaler"] is None  # as a new snapshot holds without a registered scaler
    assert snap["rng"][0] == random.getstate() and rng1[0] != random.getstate()


def _saved_states() -> tuple:
    """python's, numpy's and torch's CPU streams after seed(5) and one Gaussian (a cached
    one in each)."""
    py, npst, ts = random.getstate(), np.random.get_state(), torch.get_rng_state()
    random.seed(5)
    random.gauss()
    np.random.seed(5)
    np.random.standard_normal()
    torch.manual_seed(5)
    torch.randn(1, dtype=torch.float64)
    out = random.getstate(), np.random.get_state(), torch.get_rng_state()
    random.setstate(py)
    np.random.set_state(npst)
    torch.set_rng_state(ts)
    return out


_SAVED = _saved_states()

_DRAWS = {
    "py setstate": lambda: random.setstate(_SAVED[0]),
    "np set_state": lambda: np.random.set_state(_SAVED[1]),
    "py random": lambda: random.random(),
    "py one twist": lambda: [random.getrandbits(32) for _ in range(624)],
    "py gauss": lambda: random.gauss(),
    "py seed": lambda: random.seed(3),
    "np rand": lambda: np.random.rand(2),
    "np one twist": lambda: np.random.randint(0, 2**32, size=624, dtype=np.uint32),
    "np normal": lambda: np.random.standard_normal(),
    "np seed": lambda: np.random.seed(3),
    "torch set_rng_state": lambda: torch.set_rng_state(_SAVED[2]),
    "torch rand": lambda: torch.rand(3),
    "torch one twist": lambda: torch.randint(0, 2, (624,)),
    "torch normal cached": lambda: torch.randn(1, dtype=torch.float64),
    "torch normals": lambda: torch.randn(20),
    "torch dropout": lambda: torch.nn.functional.dropout(torch.ones(64), 0.5),
    "torch seed": lambda: torch.manual_seed(3),
    "torch float normal set": lambda: torch.set_rng_state(
        rng_mod._with_float_normal(torch.get_rng_state(), 0.25)),
    "nothing": lambda: None,
}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(sorted(_DRAWS)), max_size=12))
def test_capture_equals_both_streams_after_any_draws(draws):
    """The unmoved-stream checks compare five sampled words of each Twister (position and
    four key words), not all 625, and numpy's cached Gaussian; torch's CPU stream is a
    copy of its generator's memory: after any sequence of draws, twists, reseeds, cached
    normals and set states, the capture still equals what random.getstate,
    np.random.get_state and torch.get_rng_state return."""
    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)
    for name in draws:
        _DRAWS[name]()
        raw = capture_rng_raw()
        py, npst = raw[:2]
        assert torch.equal(rng_state(raw)["torch"], torch.get_rng_state()), name
        assert py == random.getstate(), name
        now = np.random.get_state(legacy=False)
        assert np.array_equal(npst["state"]["key"], now["state"]["key"]), name
        assert (npst["state"]["pos"], npst["has_gauss"], npst["gauss"]) == (
            now["state"]["pos"], now["has_gauss"], now["gauss"]), name


def test_torch_stream_is_a_copy_of_its_generator_that_converts_to_get_state():
    """torch's CPU stream is captured as a copy of its generator's state (bytes), found in
    the generator's memory on this platform; it converts to exactly what get_state
    returned at the capture, however the stream moved since, and restoring it repeats
    the draws (a normal cached at the capture included)."""
    torch.manual_seed(7)
    torch.randn(1, dtype=torch.float64)  # a cached normal: part of the state
    want = torch.get_rng_state()
    raw = capture_rng_raw()
    if sys.platform == "linux":  # where the layout is found: the copy, not get_state's tensor
        assert type(raw[2]) is bytes and rng_mod._torch_engine is not None
    draws = torch.randn(5, dtype=torch.float64), torch.rand(700)
    state = rng_state(raw)
    assert torch.equal(state["torch"], want)
    restore_rng(state)
    again = torch.randn(5, dtype=torch.float64), torch.rand(700)
    assert all(torch.equal(a, b) for a, b in zip(draws, again, strict=True))


def test_torch_stream_without_its_layout_is_get_state_s_tensor(monkeypatch):
    """Where the generator's layout is not found (another build or platform), every
    capture of torch's CPU stream is get_state's tensor, and the checkpoint holds it."""
    monkeypatch.setattr(rng_mod, "_torch_looked", False)
    monkeypatch.setattr(rng_mod, "_torch_engine", None)
    monkeypatch.setattr(rng_mod, "_engine_address", lambda gen: None)
    torch.manual_seed(3)
    raw = capture_rng_raw()
    assert isinstance(raw[2], torch.Tensor) and rng_mod._torch_engine is None
    assert torch.equal(rng_state(raw)["torch"], torch.get_rng_state())
    b = Boundary()
    b.register(Registered(model=torch.nn.Linear(2, 2), optimizer=torch.optim.SGD(
        torch.nn.Linear(2, 2).parameters(), lr=0.1)), 0)
    assert isinstance(b.snapshot["rng"][2], torch.Tensor)


@pytest.mark.skipif(sys.platform != "linux", reason="the generator's layout is read on Linux")
def test_a_replaced_snapshot_s_torch_image_is_overwritten_in_place_and_no_other():
    """take(into=...) writes torch's stream into the image of the snapshot it replaces
    (no new 2.5 KB object per step); each snapshot still converts to get_state's tensor
    at its own boundary; a snapshot taken without ``into``, or one whose RNG is a
    checkpoint's, gets an image of its own, and the replaced one is the only one written."""
    model, opt, sched, b, step = _training(SCHEDULERS["LambdaLR"])
    step()
    b.refresh(1)
    first = b.snapshot["rng"][2]
    assert type(first) is memoryview and first.obj is not None
    step()
    b.refresh(2)
    assert b.snapshot["rng"][2] is first  # the same image, overwritten
    want = torch.get_rng_state()
    assert torch.equal(rng_state(b.snapshot["rng"])["torch"], want)
    side = b.take(2)  # not a replacement: its own image
    assert side["rng"][2] is not first
    step()
    b.refresh(3)
    assert b.snapshot["rng"][2] is first
    assert torch.equal(rng_state(side["rng"])["torch"], want)  # untouched by the refresh
    assert torch.equal(rng_state(b.snapshot["rng"])["torch"], torch.get_rng_state())
    restored = b.take(3, rng=capture_rng())  # a checkpoint's RNG (a dict)
    fresh = b.take(3, into=restored)
    assert type(fresh["rng"][2]) is memoryview and fresh["rng"][2] is not first
    assert torch.equal(rng_state(fresh["rng"])["torch"], torch.get_rng_state())


@pytest.mark.skipif(sys.platform != "linux", reason="the generator's layout is read on Linux")
def test_a_torn_or_foreign_copy_of_torch_s_stream_is_refused():
    """A copy whose position is outside 1..624 (torn by a draw on another thread during
    the copy) or of another size is refused with a ValueError, never loaded."""
    capture_rng_raw()  # finds the layout
    image = bytearray(bytes(rng_mod._torch_engine))
    image[8:12] = (0).to_bytes(4, "little")  # left_ = 0
    with pytest.raises(ValueError, match="position 0"):
        rng_mod._image_state(bytes(image))
    with pytest.raises(ValueError, match="not an image"):
        rng_mod._image_state(b"\0" * 100)
    # a capture that holds such a copy still gives a checkpoint: the stream's state now
    torch.manual_seed(4)
    raw = (*capture_rng_raw()[:2], bytes(image), [])
    assert torch.equal(rng_state(raw)["torch"], torch.get_rng_state())


@pytest.mark.skipif(sys.platform != "linux", reason="the generator's layout is read on Linux")
def test_cached_normals_are_copied_bit_for_bit():
    """A cached float normal that is a signalling NaN (set through set_rng_state; no draw
    caches one) survives the conversion: its bytes are copied, not repacked."""
    raw = bytearray(torch.get_rng_state().numpy().tobytes())
    raw[5048:5053] = bytes((0x01, 0x00, 0x80, 0x7F, 1))  # float sNaN, is_valid
    torch.set_rng_state(torch.frombuffer(raw, dtype=torch.uint8))
    want = torch.get_rng_state()
    assert want.numpy().tobytes()[5048:5052] == bytes((0x01, 0x00, 0x80, 0x7F))
    assert torch.equal(rng_state(capture_rng_raw())["torch"], want)
