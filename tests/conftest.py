"""Shared fixtures: run directories and a helper that runs a spec end to end."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# Every process a test starts (the CLI, the elastic agent's workers) imports jitbench
# from this checkout, like the test process itself, whichever checkout an editable
# install points at (a second clone's `pip install -e` redirects it).
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(REPO), *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]])

from jitbench import cli  # noqa: E402
from jitbench.faults import FaultSpec  # noqa: E402
from jitbench.harness.run import run as run_spec  # noqa: E402
from jitbench.harness.spec import RunSpec  # noqa: E402
from jitbench.workloads import WorkloadConfig  # noqa: E402


def one_rank_runtime(tmp_path: Path, strategy: str = "jit", exit_fn=None, **config):
    """``(rt, model, optimizer)``: a :class:`~jitbench.runtime.core.Runtime` of rank 0 in a
    world of 1 (events under ``tmp_path/ev``, checkpoints under ``tmp_path/ck``, no hang
    bound to speak of) with a registered ``Linear(2, 2)`` and SGD, restored at step 0.
    ``exit_fn``: called with the exit code instead of ending the process. Close ``rt``."""
    import torch

    from jitbench.runtime.config import RuntimeConfig
    from jitbench.runtime.core import Runtime
    from jitbench.runtime.events import EventLog

    config.setdefault("hang_first_s", 600)
    rt = Runtime(RuntimeConfig(strategy=strategy, ckpt_dir=str(tmp_path / "ck"), **config),
                 EventLog(tmp_path / "ev" / "attempt000_rank00000.jsonl", 0, 0), 0, 1,
                 **({} if exit_fn is None else {"exit_fn": exit_fn}))
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rt.register(model, opt)
    if rt.restore().step != 0:
        rt.close()
        raise AssertionError("a fresh runtime restored a checkpoint")
    return rt, model, opt


@pytest.fixture(autouse=True)
def _no_leaked_runtime_signals():
    """Give the pytest process back its SIGINT/SIGTERM handlers and signal wakeup fd
    after each test, closing the watchdogs of runtimes a test left open first.

    A :class:`~jitbench.runtime.watchdog.Watchdog` (started by every in-process
    ``Runtime``) installs a SIGTERM handler and a wakeup fd and, on a SIGTERM, saves and
    ends the process with exit status 75: one a test leaves open would turn a later
    test's own SIGTERM (tests/unit/test_interrupts.py) into the end of the whole suite."""
    import threading

    before = {t for t in threading.enumerate() if t.name == "jitbench-watchdog"}
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    wakeup_fd = signal.set_wakeup_fd(-1)  # read it (the only way), then put it back
    signal.set_wakeup_fd(wakeup_fd)
    yield
    leaked = [t for t in threading.enumerate()
              if t.name == "jitbench-watchdog" and t not in before]
    for t in reversed(leaked):  # the newest first: each gives back what it found
        owner = getattr(getattr(t, "_target", None), "__self__", None)
        if owner is not None and hasattr(owner, "close"):
            owner.close()
    for s, h in handlers.items():
        if signal.getsignal(s) is not h:
            signal.signal(s, h if h is not None else signal.SIG_DFL)
    if leaked:
        signal.set_wakeup_fd(wakeup_fd)


def small_spec(steps: int = 12, faults: list[FaultSpec] | None = None, strategy: str = "jit",
               nproc: int = 2, **kw) -> RunSpec:
    """A tiny GPT spec that runs in seconds on 2 cores."""
    wl = WorkloadConfig(name=kw.pop("workload", "gpt"), size=kw.pop("size", "tiny"),
                        steps=steps, batch_size=kw.pop("batch_size", 4),
                        grad_accum=kw.pop("grad_accum", 1), seed=kw.pop("seed", 0),
                        extra=kw.pop("extra", {"max_bytes": 200_000}))
    kw.setdefault("hang_first_s", 8.0)
    kw.setdefault("hang_floor_s", 1.5)
    return RunSpec(workload=wl, strategy=strategy, faults=faults or [], nproc=nproc, **kw)


@pytest.fixture(scope="session")
def shared_reference(tmp_path_factory):
    """``get(spec) -> reference run directory``: one fault-free run per distinct
    training (:meth:`RunSpec.training_key`), shared by every test of the session
    (``reference_from=``). It trains under ``none``: checkpointing only reads the
    state, so every strategy's recovered run must equal plain training."""
    cache: dict[str, Path] = {}

    def get(spec: RunSpec) -> Path:
        ref = spec.without_faults()
        ref.strategy, ref.mtbf_s = "none", None
        key = ref.training_key()
        if key not in cache:
            d = tmp_path_factory.mktemp("ref") / "run"
            out = run_spec(ref, d, reference=False, timeout_s=300)
            assert out.summary["completed"], (d / "agent.log").read_text()[-3000:]
            cache[key] = d
        return cache[key]

    return get


@pytest.fixture
def run_case(tmp_path: Path):
    """Run a spec with its reference in a fresh directory; returns the summary."""

    def _run(spec: RunSpec, reference: bool = True, timeout_s: float = 240):
        outcome = run_spec(spec, tmp_path / "run", reference=reference, timeout_s=timeout_s)
        return outcome.summary, outcome.run_dir

    return _run


def jitbench_processes() -> list[str]:
    """Command lines of live jitbench worker processes of *any* run on this machine.

    Prefer :func:`jitbench.harness.launch.run_processes` (one run's processes):
    other runs (parallel tests, other users) make this one flaky as an orphan check.
    """
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines()
            if "jitbench.harness.worker" in line and str(os.getpid()) not in line.split()[0]]


# ----------------------------------------------------------------- in-process runtime
class Trainer:
    """One in-process rank (world size 1, no process group) of a GPT workload
    under the runtime, for unit tests of checkpoint contents and restore order.

    ``records`` holds, per executed step: ``loss`` (float), ``lr``, ``rng`` (the
    start-of-step digest) and whatever ``on_step(trainer, step)`` returns.
    Call :meth:`close` (or use it as a context manager) to give back signals.
    """

    def __init__(self, ckpt_dir, steps: int = 30, strategy: str = "periodic", interval: int = 0,
                 run_id: str = "unit", **wl_kw) -> None:
        import torch

        from jitbench.runtime.config import RuntimeConfig
        from jitbench.runtime.core import Runtime
        from jitbench.runtime.events import EventLog
        from jitbench.workloads import WorkloadConfig, build_workload

        extra = {"max_bytes": 20_000, **wl_kw.pop("extra", {})}
        self.cfg = WorkloadConfig(name="gpt", size="tiny", steps=steps,
                                  batch_size=wl_kw.pop("batch_size", 2), extra=extra, **wl_kw)
        torch.set_num_threads(1)
        _seed(self.cfg.seed)
        self.wl = build_workload(self.cfg, 0, 1, torch.device("cpu"))
        self.ckpt_dir = Path(ckpt_dir)
        self.events = EventLog(self.ckpt_dir.parent / f"events-{id(self)}.jsonl", 0, 0)
        conf = RuntimeConfig(strategy=strategy, interval=interval if strategy == "periodic" else 0,
                             ckpt_dir=str(ckpt_dir), hang_first_s=600, hang_floor_s=600,
                             sync_bound_s=600, run_id=run_id)
        if strategy == "periodic" and interval < 1:
            conf.interval = 10**9  # saves only through save()
        # a failure must never end the test process
        self.rt = Runtime(conf, self.events, rank=0, world_size=1, exit_fn=_no_exit)
        wl = self.wl
        self.rt.register(wl.model, wl.optimizer, wl.scheduler, scaler=wl.scaler,
                         data_state=wl.data_state, load_data=wl.load_data_state)
        self.records: dict[int, dict] = {}
        self.step_done = 0

    def restore(self):
        res = self.rt.restore()
        self.step_done = res.step
        return res

    def train(self, until: int, on_step=None) -> None:
        """Run steps ``step_done + 1 .. until`` like the harness worker does."""
        import contextlib

        from jitbench.runtime.rng import rng_digest

        wl, accum = self.wl, self.cfg.grad_accum
        for step in range(self.step_done + 1, until + 1):
            with self.rt.step(step) as info:
                rec = {"rng": rng_digest()}
                if on_step is not None:
                    rec.update(on_step(self, step) or {})
                loss_sum = 0.0
                for micro in range(accum):
                    batch = wl.batch(step, micro)
                    with contextlib.nullcontext():
                        loss = wl.loss(wl.model, batch) / accum
                        (wl.scaler.scale(loss) if wl.scaler is not None else loss).backward()
                    loss_sum += loss.item()
                if wl.scaler is not None:
                    wl.scaler.step(wl.optimizer)
                    wl.scaler.update()
                    rec["scale"] = wl.scaler.get_scale() if wl.scaler.is_enabled() else None
                else:
                    wl.optimizer.step()
                wl.optimizer.zero_grad(set_to_none=True)
                wl.scheduler.step()
                rec.update(loss=loss_sum, lr=wl.scheduler.get_last_lr()[0])
                info.update(loss=loss_sum)
            self.records[step] = rec
            self.step_done = step

    def save(self) -> None:
        """A periodic checkpoint of the last boundary."""
        self.rt.save_periodic(self.step_done)

    def close(self) -> None:
        self.rt.close()
        self.events.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _seed(seed: int) -> None:
    import random

    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _no_exit(code: int) -> None:
    raise RuntimeError(f"the runtime tried to end the process with status {code}")


def free_port() -> int:
    """A TCP port free on loopback now (the OS picks it: bind port 0), for a rendezvous
    endpoint of agents started as separate processes."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def jb(monkeypatch, capsys):
    """``jb(*args) -> (exit status, stderr)`` of ``jitbench ARGS``, in-process (no torch
    start-up per call); asserts no traceback reached stderr."""
    prev = signal.getsignal(signal.SIGTERM)

    def call(*args: str) -> tuple[int, str]:
        monkeypatch.setattr(sys, "argv", ["jitbench", *args])
        try:
            cli.main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        finally:
            signal.signal(signal.SIGTERM, prev)
        err = capsys.readouterr().err
        assert "Traceback" not in err
        return code, err

    return call


def one_line(err: str) -> str:
    """The single non-empty line of ``err`` (asserts there is exactly one)."""
    lines = [x for x in err.strip().splitlines() if x.strip()]
    assert len(lines) == 1, err
    return lines[0]


def assert_hang_detected(summary: dict, run_dir: Path) -> None:
    """A hang was detected by a watchdog: the first ``failure`` of the attempt the
    fault fired in, on any rank, has trigger ``hang``, and the survivors' view (the
    summary's ``trigger``) is that hang, or the closed connection of the hung rank
    when its own watchdog fired first and it left (a race on gloo: both ranks'
    bounds run from their own step begin)."""
    from jitbench.runtime.events import read_events

    evs = read_events(run_dir / "events")
    fault = next(e for e in evs if e["event"] == "fault")
    fails = [e for e in evs if e["event"] == "failure" and e["attempt"] == fault["attempt"]]
    assert fails, "no rank failed"
    first = min(fails, key=lambda e: e["t_mono"])
    assert first["trigger"] == "hang", first
    assert summary["trigger"] in ("hang", "collective_error"), summary["trigger"]
    if summary["trigger"] == "collective_error":
        assert first["rank"] == fault["rank"], first  # the hung rank's watchdog, then it left
