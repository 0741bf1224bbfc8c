"""Baselines without processes: strategy parsing, the Young/Daly interval, async
checkpoints (staged at request, committed by manifest), the JIT hot path."""

from __future__ import annotations

import math
import threading
from pathlib import Path

import pytest
import torch

from jitbench.cli.options import parse_duration_s
from jitbench.harness.spec import RunSpec, SpecError, Strategy
from jitbench.runtime import async_ckpt
from jitbench.runtime import checkpoint as ckpt
from jitbench.runtime import interval as yd
from jitbench.runtime.config import RuntimeConfig
from jitbench.runtime.core import Runtime
from jitbench.runtime.events import EventLog, read_events
from jitbench.runtime.rng import capture_rng, rng_state

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


def test_strategy_forms():
    assert Strategy.parse("periodic-async:4") == Strategy("periodic-async", 4)
    auto = Strategy.parse("periodic:auto")
    assert auto.auto and auto.name == "periodic" and str(auto) == "periodic:auto"
    assert str(Strategy.parse("periodic-async:4")) == "periodic-async:4"
    for bad in ("periodic-async:0", "periodic-async:auto", "async:3", "periodic:"):
        with pytest.raises(SpecError):
            Strategy.parse(bad)


def test_auto_needs_mtbf_and_strategy_does_not_change_training_key():
    with pytest.raises(SpecError, match="--mtbf"):
        RunSpec(strategy="periodic:auto").validate()
    RunSpec(strategy="periodic:auto", mtbf_s=60.0).validate()
    with pytest.raises(SpecError, match="> 0"):
        RunSpec(mtbf_s=-1.0).validate()
    a, b = RunSpec(strategy="jit"), RunSpec(strategy="periodic-async:3")
    assert a.training_key() == b.training_key()
    b.workload.steps += 1
    assert a.training_key() != b.training_key()


def test_durations():
    assert parse_duration_s("90") == 90.0 and parse_duration_s("2h") == 7200.0
    assert parse_duration_s("1.5m") == 90.0 and parse_duration_s(None) is None
    for bad in ("0", "-3", "2x", "h"):
        with pytest.raises(SpecError):
            parse_duration_s(bad)


def test_young_daly():
    # Young: sqrt(2 * 10 s * 3600 s) = 268.3 s
    assert yd.young_interval_s(10, 3600) == pytest.approx(math.sqrt(72000))
    # Daly is within a few per cent of Young when o << M, and M when o >= 2M
    assert yd.daly_interval_s(10, 3600) == pytest.approx(
        math.sqrt(72000) * (1 + math.sqrt(10 / 7200) / 3 + (10 / 7200) / 9) - 10)
    assert abs(yd.daly_interval_s(10, 3600) / yd.young_interval_s(10, 3600) - 1) < 0.05
    assert yd.daly_interval_s(50, 20) == 20
    assert yd.steps_for_interval(268.3, 0.5) == 537 and yd.steps_for_interval(0.1, 1.0) == 1
    with pytest.raises(ValueError):
        yd.young_interval_s(0, 10)
    with pytest.raises(ValueError):
        yd.steps_for_interval(1.0, 0.0)


def _model_and_state():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.BatchNorm1d(64))
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    m(torch.randn(8, 64)).sum().backward()
    opt.step()
    state = {"model": m.state_dict(), "optimizer": opt.state_dict(), "step": 7,
             "rng": capture_rng(), "data": {"epoch": 0, "position": 7}, "tup": (1, 2.5)}
    return m, opt, state


def _flat(x, prefix=""):
    if isinstance(x, torch.Tensor):
        return {prefix: x.clone()}
    if isinstance(x, dict):
        return {k2: v2 for k, v in x.items() for k2, v2 in _flat(v, f"{prefix}.{k}").items()}
    if isinstance(x, (list, tuple)):
        return {k2: v2 for i, v in enumerate(x) for k2, v2 in _flat(v, f"{prefix}.{i}").items()}
    return {prefix: x}


def test_async_saves_the_state_at_request_time(tmp_path):
    m, opt, state = _model_and_state()
    want = _flat(state)
    ev = EventLog(tmp_path / "attempt000_rank00000.jsonl", 0, 0)
    ac = async_ckpt.AsyncCheckpointer(tmp_path / "ckpt", 0, 2, ev)
    stall_s = ac.request(7, state, {"k": 1})
    assert stall_s >= 0
    with torch.no_grad():  # the optimizer keeps stepping while the writer works
        for p in m.parameters():
            p.add_(1.0)
        for s in opt.state.values():
            s["exp_avg"].mul_(3.0)
    ac.wait()
    part, _ = ckpt.newest_valid(tmp_path / "ckpt", 2)
    assert (part.kind, part.step, part.path.suffix) == ("async", 7, ".dcp")
    got, manifest = ckpt.load_part(part, 2)
    assert manifest["storage"] == "dcp" and manifest["meta"] == {"k": 1}
    flat = _flat(got)
    assert flat.keys() == want.keys()
    for k, v in want.items():
        if isinstance(v, torch.Tensor):
            assert torch.equal(flat[k], v), k
        else:
            assert flat[k] == v, k
    assert got["tup"] == (1, 2.5) and isinstance(got["optimizer"]["state"], dict)
    names = [(e["event"], e["phase"]) for e in read_events(tmp_path)]
    assert names == [("stage", "begin"), ("save", "begin"), ("stage", "end"), ("save", "end")]


def test_async_checkpoint_is_visible_only_when_complete(tmp_path, monkeypatch):
    _, _, state = _model_and_state()
    ev = EventLog(tmp_path / "attempt000_rank00000.jsonl", 0, 0)
    d = tmp_path / "ckpt"
    ac = async_ckpt.AsyncCheckpointer(d, 0, 2, ev, keep_steps=2)
    ac.request(3, state)
    ac.wait()
    gate = threading.Event()
    real = async_ckpt._fsync_files
    monkeypatch.setattr(async_ckpt, "_fsync_files", lambda p: (gate.wait(30), real(p)))
    ac.request(6, state)  # written by DCP, held before its commit
    assert ac.busy
    assert [p.step for p in ckpt.list_parts(d)] == [3]
    assert ckpt.newest_valid(d, 2)[0].step == 3  # restore picks the newest *completed*
    gate.set()
    ac.wait()
    assert ckpt.newest_valid(d, 2)[0].step == 6
    # a save cut short by a crash leaves only a .tmp directory: ignored
    (d / "async_step00000009_rank00000.dcp.tmp").mkdir()
    (d / "async_step00000009_rank00000.dcp.tmp" / "__0_0.distcp").write_bytes(b"half")
    assert ckpt.newest_valid(d, 2)[0].step == 6
    # a corrupt committed file is skipped with its reason
    f = next((d / "async_step00000006_rank00000.dcp").glob("*.distcp"))
    f.write_bytes(f.read_bytes()[:-10])
    skipped: list = []
    assert ckpt.newest_valid(d, 2, skipped)[0].step == 3
    assert "truncated" in skipped[0][1]
    # retention removes whole DCP directories, never the newest step
    ac.request(12, state)
    ac.wait()
    assert sorted(p.step for p in ckpt.list_parts(d)) == [6, 12]
    assert not (d / "async_step00000003_rank00000.dcp").exists()


def test_failed_async_write_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    _, _, state = _model_and_state()
    ev = EventLog(tmp_path / "attempt000_rank00000.jsonl", 0, 0)
    d = tmp_path / "ckpt"
    ac = async_ckpt.AsyncCheckpointer(d, 0, 2, ev)
    ac.request(2, state)
    ac.wait()

    def boom(p):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(async_ckpt, "_fsync_files", boom)
    ac.request(4, state)
    ac.wait()
    assert [p.step for p in ckpt.list_parts(d)] == [2]
    ends = [e for e in read_events(tmp_path) if e["event"] == "save" and e["phase"] == "end"]
    assert [e["ok"] for e in ends] == [True, False] and "No space" in ends[1]["error"]


@pytest.mark.parametrize("op", ["write", "fsync", "rename"])
def test_async_writer_calls_the_io_hook_and_fails_cleanly(tmp_path, op):
    """The background writer of periodic-async goes through the I/O fault hook like the
    other writers (a storage fault under periodic-async used to be accepted and never
    fire): an OS error at any step fails that save only, leaves no .tmp behind, and
    the previous checkpoint stays the newest valid one."""
    _, _, state = _model_and_state()
    ev = EventLog(tmp_path / "attempt000_rank00000.jsonl", 0, 0)
    d = tmp_path / "ckpt"
    ac = async_ckpt.AsyncCheckpointer(d, 0, 2, ev)
    calls: list[tuple[str, int, int]] = []

    def hook(o, path, done, total):
        calls.append((o, done, total))
        if o == op and armed:
            raise OSError(5, "Input/output error")

    armed = False
    prev = ckpt.set_io_hook(hook)
    try:
        ac.request(2, state)
        ac.wait()
        writes = [c for c in calls if c[0] == "write"]
        assert writes and writes[-1][1] == writes[-1][2] and all(c[2] == writes[0][2] for c in writes)
        assert [c[0] for c in calls if c[0] != "write"][:3] == ["fsync", "rename", "dirsync"]
        armed = True
        ac.request(4, state)
        ac.wait()
    finally:
        ckpt.set_io_hook(prev)
    assert [p.step for p in ckpt.list_parts(d)] == [2] and ckpt.newest_valid(d, 2)[0].step == 2
    assert not list(d.glob("*.tmp"))
    ends = [e for e in read_events(tmp_path) if e["event"] == "save" and e["phase"] == "end"]
    assert [e["ok"] for e in ends] == [True, False] and "Input/output" in ends[1]["error"]


def test_jit_hot_path_snapshot_in_place_equals_a_fresh_one(tmp_path):
    d = str(tmp_path)
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4), torch.nn.Dropout(0.5))
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    rt = Runtime(RuntimeConfig(strategy="jit", ckpt_dir=d), EventLog(f"{d}/attempt000_rank00000.jsonl", 0, 0), 0, 1)
    rt.register(m, opt)
    first = rt.boundary.snapshot["buffers"]["1.running_mean"]
    for step in (1, 2):
        with rt.step(step):
            m(torch.randn(8, 4)).sum().backward()  # moves BN statistics and the RNG
            opt.step()
            opt.zero_grad()
    assert rt.boundary.snapshot["buffers"]["1.running_mean"] is first  # copied in place, not cloned
    assert rt.boundary.snapshot["step"] == 2
    fresh = rt.boundary.take(rt.completed)
    for k, v in fresh["buffers"].items():
        assert torch.equal(rt.boundary.snapshot["buffers"][k], v), k
    a, b = rng_state(rt.boundary.snapshot["rng"]), rng_state(fresh["rng"])
    assert a["python"] == b["python"] and torch.equal(a["torch"], b["torch"])
    assert torch.equal(a["numpy"]["key"], b["numpy"]["key"])
    # under none and periodic the hot path takes no snapshot at all
    rt.set_strategy("none")
    snap = rt.boundary.snapshot
    with rt.step(3):
        m(torch.randn(8, 4)).sum().backward()
        opt.step()
    assert rt.boundary.snapshot is snap and not torch.equal(snap["buffers"]["1.running_mean"],
                                                    m[1].running_mean)
    with pytest.raises(ValueError):
        rt.set_strategy("periodic", 0)
    ends = [e for e in read_events(Path(d)) if e["event"] == "step" and e["phase"] == "end"]
    assert all(e["rt_s"] >= 0 for e in ends)
    rt.close()


def test_async_commit_never_runs_on_the_training_thread(tmp_path, monkeypatch):
    """A small state's upload may finish before its done-callback is added; the callback
    then ran at once, in the caller, and request() waited for the commit's fsyncs (seen
    as a flaky test under load)."""
    from concurrent.futures import Future

    _, _, state = _model_and_state()
    ev = EventLog(tmp_path / "attempt000_rank00000.jsonl", 0, 0)
    ac = async_ckpt.AsyncCheckpointer(tmp_path / "ckpt", 0, 2, ev)

    def finished_upload(payload, storage_writer, **_):  # what DCP would have written
        tmp = tmp_path / "ckpt" / (ckpt.part_name("async", 3, 0) + ".dcp.tmp")
        tmp.mkdir(parents=True, exist_ok=True)
        (tmp / "__0_0.distcp").write_bytes(b"x" * 64)
        done: Future = Future()
        done.set_result(None)
        return done

    gate = threading.Event()
    committed_in = []
    monkeypatch.setattr(async_ckpt.dcp, "async_save", finished_upload)
    monkeypatch.setattr(async_ckpt, "_fsync_files",
                        lambda p: (committed_in.append(threading.current_thread()), gate.wait(30)))
    caller = threading.Thread(target=ac.request, args=(3, state))
    caller.start()
    caller.join(10)
    assert not caller.is_alive()  # request() returned with the commit still held
    gate.set()
    ac.wait(30)
    assert committed_in and committed_in[0] is not caller


def test_a_commit_removes_what_torn_writes_of_older_steps_left(tmp_path):
    """A writer killed mid-write leaves its .tmp (a file, or a DCP directory) forever;
    the next commit of a newer step removes it, and leaves .tmp of its own step (other
    ranks' parts of the same JIT save may be in progress)."""
    _, _, state = _model_and_state()
    d = tmp_path / "ckpt"
    ckpt.write_part(d, "periodic", 3, 0, 2, state)
    (d / "periodic_step00000006_rank00000.pt.tmp").write_bytes(b"half")
    (d / "async_step00000004_rank00000.dcp.tmp").mkdir()
    (d / "async_step00000004_rank00000.dcp.tmp" / "__0_0.distcp").write_bytes(b"half")
    (d / "jit_step00000009_rank00001.pt.tmp").write_bytes(b"being written")
    ckpt.write_part(d, "periodic", 9, 0, 2, state)
    ckpt.prune(d, keep_steps=2)
    assert sorted(f.name for f in d.glob("*.tmp")) == ["jit_step00000009_rank00001.pt.tmp"]
    assert [p.step for p in ckpt.list_parts(d)] == [9, 3]


@pytest.mark.parametrize("cpu_time", [False, True])
def test_step_begin_carries_cpu_time_only_when_asked(tmp_path, cpu_time):
    """``cpu_s`` (process CPU time, for jitbench overhead's CPU-time overheads) is in each
    step-begin event only under ``step_cpu_time``, which an overhead spec (one with
    segments) sets: the system call is per-step cost the other runs need not pay."""
    from jitbench.harness.spec import RunSpec

    d = str(tmp_path)
    m = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    log = EventLog(f"{d}/attempt000_rank00000.jsonl", 0, 0)
    rt = Runtime(RuntimeConfig(strategy="jit", ckpt_dir=d, step_cpu_time=cpu_time), log, 0, 1)
    rt.register(m, opt)
    try:
        with rt.step(1):
            m(torch.randn(3, 2)).sum().backward()
            opt.step()
    finally:
        rt.close()
    log.close()
    begins = [e for e in read_events(tmp_path) if e["event"] == "step" and e["phase"] == "begin"]
    assert len(begins) == 1 and ("cpu_s" in begins[0]) is cpu_time
    assert RunSpec().runtime_config(d).step_cpu_time is False
    assert RunSpec(segments=[{"strategy": "none", "steps": 2}]).runtime_config(d).step_cpu_time


def test_the_optimizer_pre_hook_calls_a_strategy_only_where_it_has_work(tmp_path):
    """jit's pre-hook work (waiting for the device's gradient collective) exists only with
    the state on a GPU: on a CPU model the runtime skips the call; a strategy that
    overrides on_optimizer_step without saying otherwise is called at every step."""
    from jitbench.runtime.strategies.base import Strategy

    d = str(tmp_path)
    m = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    rt = Runtime(RuntimeConfig(strategy="jit", ckpt_dir=d),
                 EventLog(f"{d}/attempt000_rank00000.jsonl", 0, 0), 0, 1)
    rt.register(m, opt)
    assert rt.strategy.hooks_optimizer_step(rt) is False
    calls = []

    class Counting(type(rt.strategy)):
        def on_optimizer_step(self, rt):
            calls.append(rt.step_in_progress)

        hooks_optimizer_step = Strategy.hooks_optimizer_step

    rt.strategy = Counting(rt.config)
    rt.register(m, opt)  # asked again at register
    for step in (1, 2):
        with rt.step(step):
            m(torch.randn(3, 2)).sum().backward()
            opt.step()
            opt.zero_grad()
    assert calls == [1, 2]  # once per step, though register hooked the optimizer twice
