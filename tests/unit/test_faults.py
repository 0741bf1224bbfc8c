"""The fault library without launching jobs: registry, parameters, injector
triggers, storage faults in the real checkpoint write path, notices, the GPU
health check."""

from __future__ import annotations

import errno
import importlib
import json
import os
import signal
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
import torch

from jitbench.faults import FAULTS, FaultSpec, Injector, make_fault
from jitbench.faults.base import FAMILIES, POINTS, Fault, Param
from jitbench.faults.collective import collective_timeouts
from jitbench.faults.gpu import rank_probe
from jitbench.faults.storage import TearWrite, dir_usage_bytes, install_io_hook
from jitbench.faults.xid import SimulatedProbe
from jitbench.harness.spec import RunSpec, SpecError
from jitbench.runtime import checkpoint as ckpt
from jitbench.runtime.config import EXIT_FAILURE
from jitbench.runtime.events import EventLog, read_events
from jitbench.runtime.health import GpuHealth
from jitbench.runtime.notice import PeerNotices
from jitbench.workloads import WorkloadConfig

ISSUE_KINDS = {"kill", "term", "segfault", "exception", "exit", "nccl-hang", "nccl-timeout",
               "desync", "slow", "xid", "enospc", "eio", "torn-write", "corrupt",
               "amp-backoff", "partition", "link-flap", "link-slow"}


def test_registry_has_every_fault_with_docs():
    assert set(FAULTS) == ISSUE_KINDS
    for name, cls in FAULTS.items():
        assert cls.name == name and cls.family in FAMILIES and cls.point in POINTS
        assert cls.summary and "\n" not in cls.summary
        mod = importlib.import_module(cls.__module__)
        # the module docstring documents the real failure, how, and what peers see
        assert f"``{name}``" in mod.__doc__, name
        for p in cls.all_params().values():
            assert p.doc


def test_param_types_and_ranges():
    p = Param(float, 0.5, "delay (s)", low=0.0)
    assert p.coerce("d", 2) == 2.0
    for bad, msg in ((True, "must be float"), ("1", "must be float"), (-1, ">= 0"),
                     (float("nan"), "finite")):
        with pytest.raises(ValueError, match=msg):
            p.coerce("d", bad)
    i = Param(int, 1, "code", low=1, high=255)
    with pytest.raises(ValueError, match="<= 255"):
        i.coerce("code", 256)
    with pytest.raises(ValueError, match="must be int"):
        i.coerce("code", 1.5)
    assert Param(bool, False, "x").parse("x", "yes") is True
    with pytest.raises(ValueError, match="one of"):
        Param(str, "a", "m", choices=("a", "b")).coerce("m", "c")


def test_resolve_rejects_unknown_keys_and_fills_defaults():
    with pytest.raises(ValueError, match="unknown parameter 'delay'"):
        FAULTS["slow"].resolve({"delay": 1})
    assert FAULTS["slow"].resolve({}) == {"delay_s": 0.5, "steps": 5, "at": None}
    assert FAULTS["nccl-timeout"].resolve({"timeout_s": 0.5})["delay_s"] == 1.0
    with pytest.raises(ValueError, match="must exceed timeout_s"):
        FAULTS["nccl-timeout"].resolve({"timeout_s": 1.0, "delay_s": 0.5})
    assert make_fault(FaultSpec("kill", 1, 3, params={"at": "restore"})).point == "restore"
    assert make_fault(FaultSpec("slow", 1, 3, params={"at": "micro:1"})).point == "micro:1"
    assert make_fault(FaultSpec("kill", 1, 3)).point == "collective"
    with pytest.raises(ValueError, match="at must be step, collective, optimizer, micro:M or restore"):
        make_fault(FaultSpec("exception", 1, 3, params={"at": "write"}))
    with pytest.raises(ValueError, match="unknown parameter 'at'"):
        make_fault(FaultSpec("torn-write", 1, 3, params={"at": "collective"}))


@pytest.mark.parametrize("fault, needle", [
    (FaultSpec("slow", 1, 2, params={"delay_s": 3.0}), "below the hang floor"),
    (FaultSpec("slow", 1, 8, params={"steps": 5}), "runs past the last step"),
    (FaultSpec("nccl-timeout", 1, 2, params={"timeout_s": 2.0}), "must be below the hang"),
    (FaultSpec("xid", 1, 2, params={"code": "79"}), "code must be int"),
    (FaultSpec("exit", 1, 2, params={"code": 0}), "code must be >= 1"),
])
def test_spec_validation_of_fault_parameters(fault, needle):
    spec = RunSpec(faults=[fault], hang_floor_s=1.5)
    spec.workload.steps = 10
    with pytest.raises(SpecError, match=needle):
        spec.validate()


def test_nccl_timeout_is_judged_against_the_floor_not_a_lower_first_step_bound():
    """The first-step bound is never below the floor (hang.first_bound_s), so a tiny
    --hang-first-s does not refuse a timeout the floor allows."""
    fault = FaultSpec("nccl-timeout", 1, 3, params={"timeout_s": 1.0})
    spec = RunSpec(faults=[fault], hang_first_s=0.0001, hang_floor_s=5.0)
    spec.workload.steps = 10
    spec.validate()
    spec.hang_floor_s = 1.0
    with pytest.raises(SpecError, match=r"below the hang bound's floor \(1 s\)"):
        spec.validate()


def test_spec_rejects_storage_faults_without_checkpoints_and_duplicate_ids():
    spec = RunSpec(faults=[FaultSpec("torn-write", 0, 2)], strategy="none")
    with pytest.raises(SpecError, match="writes no checkpoints"):
        spec.validate()
    spec = RunSpec(faults=[FaultSpec("kill", 1, 2), FaultSpec("kill", 1, 2)])
    with pytest.raises(SpecError, match="two faults have the id"):
        spec.validate()


def test_write_faults_under_periodic_target_the_writing_rank():
    """Under periodic:N rank 0 alone writes: a write fault on rank 1 never fires."""
    for kind in ("eio", "enospc", "torn-write"):
        with pytest.raises(SpecError, match="only rank 0 writes checkpoints"):
            RunSpec(faults=[FaultSpec(kind, 1, 5)], strategy="periodic:4",
                    workload=WorkloadConfig(steps=20)).validate()
        RunSpec(faults=[FaultSpec(kind, 0, 5)], strategy="periodic-async:4",
                workload=WorkloadConfig(steps=20)).validate()
    RunSpec(faults=[FaultSpec("corrupt", 1, 9)], strategy="periodic:4",
            workload=WorkloadConfig(steps=20)).validate()  # any rank can corrupt a file


@pytest.mark.parametrize("plan, ok", [
    ([FaultSpec("eio", 0, 5)], False),                                  # nothing is written
    ([FaultSpec("eio", 0, 5), FaultSpec("kill", 1, 4)], False),         # written before k
    ([FaultSpec("eio", 0, 5), FaultSpec("kill", 1, 6)], True),          # the JIT save at 6
    ([FaultSpec("torn-write", 0, 5), FaultSpec("nccl-hang", 1, 5)], True),
    ([FaultSpec("corrupt", 0, 7)], False),
    ([FaultSpec("corrupt", 0, 7), FaultSpec("kill", 1, 8)], False),     # no checkpoint by 7
    ([FaultSpec("corrupt", 0, 7), FaultSpec("kill", 1, 3)], True),
    ([FaultSpec("enospc", 0, 5), FaultSpec("kill", 1, 1, time_s=2.0)], True),
])
def test_storage_faults_under_jit_need_a_failure_that_writes(plan, ok):
    """Under jit only a peer's failure writes a checkpoint: a storage fault that
    no failure can reach would never fire, and the run would look fault-free."""
    spec = RunSpec(faults=plan, strategy="jit", workload=WorkloadConfig(steps=20))
    if ok:
        spec.validate()
    else:
        with pytest.raises(SpecError, match="under jit a checkpoint is written only when"):
            spec.validate()


# ------------------------------------------------------------------ injector
class _Record(Fault):
    name, family, point, summary = "record", "process", "step", "test fault"

    def __init__(self, spec, log):
        super().__init__(spec)
        self.log = log

    def fire(self, ctx):
        self.log.append((self.spec.id, ctx["step"], ctx["attempt"]))


class _Window(_Record):
    def window_steps(self):
        return 3


def _injector(tmp_path, faults, attempt=0, rank=1):
    ev = EventLog(tmp_path / "ev" / f"attempt{attempt:03d}_rank{rank:05d}.jsonl", rank, attempt)
    return Injector(faults, rank, attempt, tmp_path / "fired", ev), ev


def test_injector_fires_once_per_run_at_its_step(tmp_path):
    log = []
    plan = [_Record(FaultSpec("record", 1, 3), log), _Record(FaultSpec("record", 0, 3), log)]
    inj, ev = _injector(tmp_path, plan)
    for step in range(1, 6):
        inj.at("collective", step)  # wrong point: nothing
        inj.at("step", step)
    assert log == [("record@1:3", 3, 0)]
    inj2, ev2 = _injector(tmp_path, [_Record(FaultSpec("record", 1, 3), log)], attempt=1)
    inj2.at("step", 3)  # a restarted attempt replays step 3: not again
    assert len(log) == 1
    ev.close()
    ev2.close()
    faults = [e for e in read_events(tmp_path / "ev") if e["event"] == "fault"]
    assert [(e["fault_id"], e["step"], e["fails_job"]) for e in faults] == [("record@1:3", 3,
                                                                            True)]
    assert len(list((tmp_path / "fired").glob("record*"))) == 1


def test_every_attempt_fires_in_each_attempt(tmp_path):
    log = []
    for attempt in range(3):
        inj, ev = _injector(tmp_path, [_Record(FaultSpec("record", 1, 2, every_attempt=True),
                                               log)], attempt)
        inj.at("step", 2)
        inj.at("step", 2)
        ev.close()
    assert [a for _, _, a in log] == [0, 1, 2]


def test_time_trigger_and_window(tmp_path):
    log = []
    plan = [_Record(FaultSpec("record", 1, 1, time_s=0.2), log),
            _Window(FaultSpec("record", 1, 2, id="win"), log)]
    inj, ev = _injector(tmp_path, plan)
    t0 = time.time()
    inj.at("step", 1)
    assert abs(inj.train_start() - t0) < 1.0
    inj.at("step", 2)
    time.sleep(0.25)
    for step in range(3, 7):
        inj.at("step", step)
        inj.at("step", step)  # the window acts once per step
    ev.close()
    assert log == [("win", 2, 0), ("win", 3, 0), ("record@1:t0.2", 3, 0), ("win", 4, 0)]
    fault = next(e for e in read_events(tmp_path / "ev") if e.get("fault_id") == "record@1:t0.2")
    assert fault["elapsed_s"] >= 0.2 and fault["time_s"] == 0.2


def test_collective_timeouts_apply_until_fired():
    a = make_fault(FaultSpec("nccl-timeout", 1, 4, params={"timeout_s": 0.5}))
    b = make_fault(FaultSpec("kill", 1, 6))
    assert collective_timeouts([a, b], set()) == {4: 0.5}
    assert collective_timeouts([a, b], {a.spec.id}) == {}


# ------------------------------------------------------------------- storage
def _state(n_floats: int = 60_000) -> dict:
    return {"w": torch.arange(n_floats, dtype=torch.float32), "step": 3}


def _write_with(tmp_path, fault_spec, step=6, attempt=0):
    f = make_fault(fault_spec)
    inj, ev = _injector(tmp_path, [f], attempt=attempt, rank=0)
    inj.context["ckpt_dir"] = tmp_path / "ckpt"
    inj.step = step
    install_io_hook(inj)
    try:
        return ckpt.write_part(tmp_path / "ckpt", "periodic", step, 0, 2, _state())
    finally:
        ckpt.set_io_hook(None)
        ev.close()


@pytest.mark.parametrize("kind, params, code", [
    ("enospc", {}, errno.ENOSPC), ("eio", {}, errno.EIO), ("eio", {"op": "write"}, errno.EIO)])
def test_write_faults_raise_through_the_real_write_path(tmp_path, kind, params, code):
    ckpt.write_part(tmp_path / "ckpt", "periodic", 3, 0, 2, _state())
    with pytest.raises(ckpt.CheckpointWriteError) as ei:
        _write_with(tmp_path, FaultSpec(kind, 0, 4, params=params))
    assert ei.value.errno == code and os.strerror(code) in str(ei.value)
    files = sorted(p.name for p in (tmp_path / "ckpt").iterdir())
    assert files == ["periodic_step00000003_rank00000.json", "periodic_step00000003_rank00000.pt"]
    ev = [e for e in read_events(tmp_path / "ev") if e["event"] == "fault"]
    assert len(ev) == 1 and ev[0]["kind"] == kind


def test_enospc_emulates_room_for_one_and_a_half_checkpoints(tmp_path):
    d = tmp_path / "ckpt"
    f = make_fault(FaultSpec("enospc", 0, 1, params={"room_ckpts": 1.5}))
    inj, ev = _injector(tmp_path, [f], rank=0)
    install_io_hook(inj)
    try:
        inj.step = 3
        first = ckpt.write_part(d, "periodic", 3, 0, 2, _state())  # fits
        size = first.path.stat().st_size
        inj.step = 6
        with pytest.raises(ckpt.CheckpointWriteError) as ei:
            ckpt.write_part(d, "periodic", 6, 0, 2, _state())
    finally:
        ckpt.set_io_hook(None)
        ev.close()
    assert ei.value.errno == errno.ENOSPC
    assert f.capacity_bytes == pytest.approx(1.5 * size, rel=0.01)
    assert [p.step for p in ckpt.list_parts(d)] == [3]  # the previous one still loads
    ckpt.load_part(ckpt.list_parts(d)[0], 2)
    assert dir_usage_bytes(d) < 1.1 * size and not list(d.glob("*.tmp"))


def _wait_child(pid: int, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError(f"the writer child {pid} hung")


def _torn_child(d: Path, frac: float, out: Path, state: dict) -> None:
    f = TearWrite(FaultSpec("torn-write", 0, 1, params={"frac": frac}))

    def hook(op, path, done, total):
        if f.due({"op": op, "path": path, "done": done, "total": total, "seed": 0}):
            out.write_text(json.dumps([op, path.name, done, f._index, f._n_ops]))
            os.kill(os.getpid(), signal.SIGKILL)

    ckpt.set_io_hook(hook)
    ckpt.write_part(d, "periodic", 6, 0, 2, state)  # no tensor op here: after fork, an
    os._exit(0)  # op that uses the parent's OpenMP pool would deadlock


def test_c2_torn_write_at_every_instant_leaves_previous_or_new_complete(tmp_path):
    """C2 over the whole class: SIGKILL the writer at each I/O operation of the
    commit; the directory holds the previous or the new complete checkpoint,
    never a visible truncated one, and resume picks the newest valid."""
    d0 = tmp_path / "base"
    state = _state()
    ckpt.write_part(d0, "periodic", 3, 0, 2, state)
    total = len(ckpt.list_parts(d0)) and ckpt.list_parts(d0)[0].path.stat().st_size
    n = TearWrite.commit_ops(total)
    assert n >= 4 + 7  # several data chunks, then fsync, rename, dirsync, manifest (4 ops)
    ops_seen = []
    for i in range(n):
        d = tmp_path / f"d{i}"
        d.mkdir()
        for p in d0.iterdir():
            (d / p.name).write_bytes(p.read_bytes())
        out = tmp_path / f"op{i}.json"
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            try:
                _torn_child(d, (i + 0.5) / n, out, state)
            finally:
                os._exit(1)
        status = _wait_child(pid, 60.0)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, i
        op, name, _done, index, n_ops = json.loads(out.read_text())
        assert (index, n_ops) == (i, n)
        ops_seen.append((op, name.split(".", 1)[1]))
        skipped: list = []
        part, _ = ckpt.newest_valid(d, 2, skipped)
        assert skipped == [], (i, skipped)  # no visible part is truncated
        # the commit is the manifest's rename: before it the previous, after it the new one
        assert part.step == (6 if i == n - 1 else 3), (i, op, name)
        ckpt.load_part(part, 2)
    assert ops_seen[0] == ("write", "pt.tmp") and ops_seen[-1] == ("dirsync", "json")
    assert {o for o, _ in ops_seen} == {"write", "fsync", "rename", "dirsync"}


def test_torn_write_instant_is_seeded(tmp_path):
    def target(seed):
        f = TearWrite(FaultSpec("torn-write", 0, 1))
        f.due({"op": "write", "path": Path("x.pt.tmp"), "done": 0, "total": 10 ** 6,
               "seed": seed})
        return f._target

    assert target(1) == target(1)
    assert len({target(s) for s in range(20)}) > 3


def test_corrupt_flips_bytes_of_the_newest_step(tmp_path):
    d = tmp_path / "ckpt"
    for step in (3, 6):
        for rank in (0, 1):
            ckpt.write_part(d, "jit", step, rank, 2, _state())
    f = make_fault(FaultSpec("corrupt", 0, 7))
    inj, ev = _injector(tmp_path, [f], rank=0)
    inj.context.update(ckpt_dir=d, seed=0)
    inj.at("step", 7)
    ev.close()
    skipped: list = []
    part, _ = ckpt.newest_valid(d, 2, skipped)
    assert part.step == 3 and len(skipped) == 2
    assert all("SHA-256 mismatch" in why for _, why in skipped)
    fault = next(e for e in read_events(tmp_path / "ev") if e["event"] == "fault")
    assert fault["corrupted_step"] == 6 and len(fault["corrupted"]) == 2
    assert fault["fails_job"] is False


# ---------------------------------------------------------- notices, probes
def test_peer_notices_through_a_real_store():
    import torch.distributed as dist

    master = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                           timeout=timedelta(seconds=10))
    stores = [dist.PrefixStore("jitbench/attempt0",
                               dist.TCPStore("127.0.0.1", master.port, is_master=False,
                                             timeout=timedelta(seconds=10)))
              for _ in range(3)]
    ranks = [PeerNotices(s, r, 3, ack_timeout_s=5.0) for r, s in enumerate(stores)]
    assert all(n.check() is None for n in ranks)
    got: dict = {}

    def survivor(r):
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and r not in got:
            res = ranks[r].check()
            if res:
                got[r] = res
            time.sleep(0.01)

    threads = [threading.Thread(target=survivor, args=(r,)) for r in (0, 2)]
    for t in threads:
        t.start()
    acks = ranks[1].post("xid", "fatal Xid 79")
    for t in threads:
        t.join()
    assert acks == 2
    assert got[0]["reason"] == "rank 1: fatal Xid 79" and got[2]["peer_trigger"] == "xid"
    assert ranks[0].check() is None  # reported once
    other = PeerNotices(dist.PrefixStore("jitbench/attempt1", stores[0]), 0, 3)
    assert other.check() is None  # the next attempt starts clean


def test_gpu_health_logs_non_fatal_and_fails_on_fatal(tmp_path):
    ev = EventLog(tmp_path / "ev" / "attempt000_rank00001.jsonl", 1, 0)
    probe = rank_probe([FaultSpec("xid", 1, 2)], 1, 0, "nccl", ev)
    assert isinstance(probe, SimulatedProbe) and "xid fault" in probe.reason
    check = GpuHealth(probe, ev)
    assert check() is None
    probe.inject(63)
    assert check() is None
    probe.inject(79)
    res = check()
    assert res["trigger"] == "xid" and res["save"] is False and res["notify"] is True
    assert "Xid 79" in res["reason"]
    ev.close()
    gev = [e for e in read_events(tmp_path / "ev") if e["event"] == "gpu_event"]
    assert [(e["xid"], e["fatal"]) for e in gev] == [(63, False), (79, True)]
    probe_ev = [e for e in read_events(tmp_path / "ev") if e["event"] == "health_probe"]
    assert probe_ev[0]["source"] == "simulated"
    gloo = rank_probe([], 0, 0, "gloo")
    assert gloo.source == "simulated" and "gloo" in gloo.reason


def test_amp_backoff_acts_at_every_execution_of_its_step_event_once(tmp_path):
    """A perturbation the reference keeps: it acts whenever step k runs (a replay
    in a restarted attempt included), never at another step, and its ``fault``
    event and marker are written once per run."""
    spec = FaultSpec("amp-backoff", 1, 3)
    for attempt in (0, 1):
        ev = EventLog(tmp_path / "ev" / f"attempt{attempt:03d}_rank00001.jsonl", 1, attempt)
        inj = Injector([make_fault(spec)], 1, attempt, tmp_path / "fired", ev)
        for step in (2, 3, 4):
            g = torch.zeros(5)
            inj.at("step", step)
            inj.at("collective", step, grads=g)
            assert torch.isinf(g[0]).item() == (step == 3) and not torch.isinf(g[1:]).any()
        ev.close()
    evs = [e for e in read_events(tmp_path / "ev") if e["event"] == "fault"]
    assert len(evs) == 1 and evs[0]["fails_job"] is False and evs[0]["step"] == 3


def test_amp_backoff_is_refused_without_fp16_and_kept_by_the_reference():
    extra = {"max_bytes": 2000, "amp": "fp16"}
    f = FaultSpec("amp-backoff", 1, 2)
    for amp in ("off", "bf16"):
        spec = RunSpec(workload=WorkloadConfig(name="gpt", size="tiny", steps=4,
                                               extra={**extra, "amp": amp}), faults=[f])
        with pytest.raises(SpecError, match=f"needs --amp fp16.*amp {amp}$"):
            spec.validate()
    spec = RunSpec(workload=WorkloadConfig(name="gpt", size="tiny", steps=4, extra=extra),
                   faults=[f, FaultSpec("kill", 0, 3)])
    spec.validate()
    ref = spec.without_faults()
    assert [x.kind for x in ref.faults] == ["amp-backoff"]
    assert ref.training_key() == spec.training_key()
    plain = RunSpec(workload=spec.workload)
    assert plain.training_key() != spec.training_key()  # a backoff changes the training
    with pytest.raises(SpecError, match="step trigger"):
        RunSpec(workload=spec.workload,
                faults=[FaultSpec("amp-backoff", 1, 2, time_s=1.0)]).validate()


def test_peer_notices_poll_never_holds_the_watchdog():
    """A store call that blocks (a partitioned node: the TCPStore round trip waits for
    the link) costs one poll at most ``check_wait_s``; later polls return at once."""
    release = threading.Event()

    class Blocked:
        def add(self, key, n):
            release.wait()
            return 1

        def check(self, keys):
            return True

        def get(self, key):
            return b'{"trigger": "xid", "reason": "late"}'

    n = PeerNotices(Blocked(), 0, 2, check_wait_s=0.2)
    t0 = time.monotonic()
    assert n.check() is None
    assert n.check() is None and n.stalled == 1
    assert time.monotonic() - t0 < 1.0
    release.set()  # the link is back: the round trip completes, the next poll reports it
    deadline = time.monotonic() + 5
    while (res := n.check()) is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert res["reason"] == "rank 1: late" and n.check() is None


def test_new_notices_close_the_old_ones_and_their_poller_thread(tmp_path):
    """An in-process recovery sets the next generation's notices: the old ones are no
    longer polled and their poller thread ends (a survivor held one more thread per
    recovery than a newcomer)."""
    from jitbench.runtime.config import RuntimeConfig
    from jitbench.runtime.core import Runtime

    class Quiet:
        def add(self, key, n):
            return 0

    rt = Runtime(RuntimeConfig(strategy="none", ckpt_dir=str(tmp_path / "ck"), poll_s=0.01),
                 EventLog(tmp_path / "e.jsonl", 0, 0), 0, 2)
    try:
        old, new = PeerNotices(Quiet(), 0, 2), PeerNotices(Quiet(), 0, 2)
        rt.set_notices(old)
        # its poller runs at once, not at the watchdog's first tick: the thread count
        # right after a recovery does not depend on whether the watchdog ticked since
        assert old._poller is not None and old._poller.is_alive()
        rt.set_notices(new)
        # set_notices returns once the old poller has ended (its store answers)
        assert not old._poller.is_alive() and old.check() is None
        assert new._poller is not None and new._poller.is_alive()
        assert old.check not in rt.watchdog._checks and new.check in rt.watchdog._checks
    finally:
        rt.close()


# ------------------------------------------------------- a rank that is leaving
class _AtWrite(_Record):
    extra_points = ("write",)


class _ProcessEnded(BaseException):
    """Stands for the end of a process whose training thread is held at a point."""


def _leaving_until_end(polls: list, leaving=lambda: True, end_after: int = 3):
    """A ``leaving`` callable that says ``leaving()`` and, once a held point has polled
    it ``end_after`` times, ends the "process" (raises :class:`_ProcessEnded`)."""

    def check() -> bool:
        now = leaving()
        polls.append(now)
        if now and len(polls) > end_after:
            raise _ProcessEnded
        return now

    return check


@pytest.mark.parametrize("point", ["step", "collective", "optimizer", "micro:0"])
def test_a_leaving_rank_holds_a_due_fault_and_leaves_it_to_the_next_attempt(tmp_path, point):
    """Issue 14 §5, campaign 23: a rank that is leaving (SIGTERMed, its watchdog ending
    the process) reaches the next step's injection point. The point holds until the
    process ends: no marker, no event, no firing; the next attempt fires the fault."""
    log, polls = [], []
    spec = FaultSpec("record", 1, 4, params={"at": point})
    ev = EventLog(tmp_path / "ev" / "attempt000_rank00001.jsonl", 1, 0)
    inj = Injector([_Record(spec, log)], 1, 0, tmp_path / "fired", ev,
                   leaving=_leaving_until_end(polls))
    inj.step = 4
    t0 = time.monotonic()
    with pytest.raises(_ProcessEnded):
        inj.at(point, 4)
    assert time.monotonic() - t0 >= 0.1  # it slept at the point (HOLD_POLL_S apart)
    assert inj.held == 1 and len(polls) == 4 and log == []
    ev.close()
    assert list((tmp_path / "fired").iterdir()) == []
    assert [e for e in read_events(tmp_path / "ev") if e["event"] == "fault"] == []
    inj1, ev1 = _injector(tmp_path, [_Record(spec, log)], attempt=1)  # the restart
    inj1.at(point, 4)
    inj1.at(point, 4)
    ev1.close()
    assert log == [(spec.id, 4, 1)]
    faults = [e for e in read_events(tmp_path / "ev") if e["event"] == "fault"]
    assert [(e["fault_id"], e["attempt"]) for e in faults] == [(spec.id, 1)]
    assert [p.name for p in (tmp_path / "fired").iterdir()] == [f"{spec.id}.attempt001"]


def test_a_leaving_rank_holds_only_where_a_fault_is_due_and_fires_at_write_points(tmp_path):
    """Points with nothing due go on (no call of ``leaving``); ``write`` points fire
    while leaving (a second fault during the leaving rank's own JIT save); a held
    point goes on once the process no longer leaves (an in-process recovery)."""
    log = []
    leaving = threading.Event()
    leaving.set()
    calls = []
    plan = [_Record(FaultSpec("record", 1, 5, id="train"), log),
            _AtWrite(FaultSpec("record", 1, 2, id="save", params={"at": "write"}), log)]
    ev = EventLog(tmp_path / "ev" / "attempt000_rank00001.jsonl", 1, 0)
    inj = Injector(plan, 1, 0, tmp_path / "fired", ev,
                   leaving=lambda: calls.append(1) or leaving.is_set())
    inj.at("step", 4)
    inj.at("collective", 4)
    assert calls == [] and log == []
    inj.at("write", 4)
    assert log == [("save", 4, 0)]
    held = threading.Thread(target=inj.at, args=("step", 5), daemon=True)
    held.start()
    time.sleep(0.3)
    assert held.is_alive() and log == [("save", 4, 0)] and inj.held == 1
    assert not (tmp_path / "fired" / "train.attempt000").exists()
    leaving.clear()
    held.join(5)
    assert not held.is_alive() and log == [("save", 4, 0), ("train", 5, 0)]
    ev.close()
    assert sorted(e["fault_id"] for e in read_events(tmp_path / "ev")
                  if e["event"] == "fault") == ["save", "train"]


def test_a_rank_that_is_not_leaving_fires_as_before(tmp_path):
    log = []
    spec = FaultSpec("record", 1, 3, params={"at": "micro:0"})
    ev = EventLog(tmp_path / "ev" / "attempt000_rank00001.jsonl", 1, 0)
    inj = Injector([_Record(spec, log)], 1, 0, tmp_path / "fired", ev, leaving=lambda: False)
    for step in range(1, 6):
        inj.at("micro:0", step)
    ev.close()
    assert log == [(spec.id, 3, 0)] and inj.held == 0
    assert [e["fault_id"] for e in read_events(tmp_path / "ev") if e["event"] == "fault"] \
        == [spec.id]
    assert (tmp_path / "fired" / f"{spec.id}.attempt000").exists()


def _runtime_with_faults(tmp_path, plan, exits):
    """A runtime (strategy none, ``exit_fn`` records) with ``plan`` attached as the
    worker attaches it (:func:`jitbench.faults.attach.attach`)."""
    from jitbench.faults.attach import attach
    from jitbench.runtime.config import RuntimeConfig
    from jitbench.runtime.core import Runtime

    class Quiet:
        def add(self, key, n):
            return 0

    ev = EventLog(tmp_path / "ev" / "attempt000_rank00000.jsonl", 0, 0)
    rt = Runtime(RuntimeConfig(strategy="none", ckpt_dir=str(tmp_path / "ck"),
                               hang_first_s=600), ev, 0, 2, exit_fn=exits.append)
    att = attach(rt, plan, rank=0, attempt=0, world_size=2, device_index=0, backend="gloo",
                 seed=0, run_dir=tmp_path, ckpt_dir=tmp_path / "ck", events=ev,
                 notice_store=Quiet())
    ckpt.set_io_hook(None)
    return rt, att.injector, ev


def test_the_runtime_leaving_holds_the_next_steps_fault(tmp_path):
    """Campaign 23 in one process: the watchdog thread handles SIGTERM (the runtime
    decides to leave and runs its exit path, here an ``exit_fn`` that returns), then
    the training thread reaches step 4's micro:0 point with a fault due there."""
    exits: list = []
    spec = FaultSpec("exception", 0, 4, params={"at": "micro:0"})
    rt, inj, ev = _runtime_with_faults(tmp_path, [spec], exits)
    try:
        assert rt.leaving is False and inj.leaving() is False
        watchdog = threading.Thread(target=rt.fail, args=("sigterm",), kwargs={"save": False})
        watchdog.start()
        watchdog.join(30)
        assert rt.leaving is True and inj.leaving() is True and exits == [EXIT_FAILURE]
        polls: list = []
        inj.leaving = _leaving_until_end(polls, lambda: rt.leaving)
        with pytest.raises(_ProcessEnded):
            inj.at("micro:0", 4)
        assert inj.held == 1 and not any((tmp_path / "faults_fired").iterdir())
    finally:
        rt.close()
    assert [e for e in read_events(tmp_path / "ev") if e["event"] == "fault"] == []


def test_the_exit_path_waits_for_a_fault_being_committed(tmp_path, monkeypatch):
    """Lock order: an injection that checked ``leaving`` (false) and is between its
    marker and its event holds the runtime's leave lock; a failure declared meanwhile
    on another thread waits for it, so the process ends after the event (which the
    exit's closing of the log would otherwise drop) and never between the two."""
    from jitbench.faults.process import InjectedError, RaiseException

    exits: list = []
    spec = FaultSpec("exception", 0, 4, params={"at": "micro:0"})
    rt, inj, ev = _runtime_with_faults(tmp_path, [spec], exits)
    inside, go = threading.Event(), threading.Event()

    def slow_fields(self, ctx):  # called after the marker, before the event
        inside.set()
        assert go.wait(30)
        return {}

    monkeypatch.setattr(RaiseException, "event_fields", slow_fields)
    raised: list = []

    def train():
        try:
            inj.at("micro:0", 4)
        except InjectedError as exc:
            raised.append(exc)

    marker = tmp_path / "faults_fired" / f"{spec.id}.attempt000"
    try:
        training = threading.Thread(target=train)
        training.start()
        assert inside.wait(30) and marker.exists()
        watchdog = threading.Thread(target=rt.fail, args=("sigterm",), kwargs={"save": False})
        watchdog.start()
        time.sleep(0.3)
        assert watchdog.is_alive() and exits == [] and not rt.leaving  # waits for the commit
        go.set()
        training.join(30)
        watchdog.join(30)
        assert raised and exits == [EXIT_FAILURE] and rt.leaving
    finally:
        go.set()
        rt.close()
    evs = read_events(tmp_path / "ev")
    names = [e["event"] for e in evs if e["event"] in ("fault", "failure", "exit")]
    assert names == ["fault", "failure", "exit"]
