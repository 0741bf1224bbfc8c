"""The JIT checkpointing runtime, user-level API.

A training script hands the runtime its state and marks its step loop::

    rt = Runtime(RuntimeConfig(strategy="jit", ckpt_dir="ckpt"), events=log)
    rt.register(model=ddp.module, optimizer=opt, scheduler=sched)
    start = rt.restore()                    # newest valid checkpoint, or 0
    for step in range(start + 1, steps + 1):
        with rt.step(step):                 # everything of the step, its batch included
            loss = compute(batch(step)); loss.backward()
            opt.step(); opt.zero_grad(); sched.step()
    rt.finish()

Mechanism (Gupta et al., "Just-In-Time Checkpointing: Low Cost Error
Recovery from Deep Learning Training Failures", EuroSys 2024): in data-parallel
training every replica holds the same parameters and optimizer state, which
change only in the optimizer step after the gradient all-reduce. When a peer
fails, a healthy replica blocks (or errors) in the next collective while still
holding the state of the last iteration boundary; the runtime saves that state
*then*, exits so the elastic agent restarts the job, and on start restores the
newest valid checkpoint, so at most one minibatch is re-executed per failure.

What the runtime tracks per step (cheap: no tensor copies of parameters or
optimizer moments):

- ``compute`` phase (from :meth:`Runtime.step` entry to the optimizer's
  pre-hook): parameters and optimizer moments equal the last boundary; RNG
  streams, model buffers (BatchNorm statistics), the LR scheduler, the AMP
  grad scaler (``GradScaler.update`` runs after a *skipped* optimizer step, in
  this phase), the optimizer's hyper-parameters (``param_groups``: lr, betas),
  the data position and the user's extra state may already have moved, so
  under ``jit`` their boundary values are snapshotted at every step end (a few
  KB; buffers copied in place, RNG states kept raw: about 80-90 µs per step for
  the reference workloads, the ``rt_s`` of step-end events). The other
  strategies keep no per-step snapshot: they read the state at a boundary.
- ``mutating`` phase (optimizer pre-hook to step end): the state is changing;
  no save can happen; the main thread holds the state lock.
- ``boundary``: between steps; the live state is consistent.

Baselines beside ``jit``: ``periodic`` (rank 0 writes every ``interval``
steps; ``interval`` 0 with ``mtbf_s``: Young's interval from a probe write,
:mod:`jitbench.runtime.interval`), ``periodic-async`` (DCP ``async_save``,
:mod:`jitbench.runtime.async_ckpt`) and ``none``.

Failure triggers (each ends in :meth:`Runtime._fail`, which saves once and
exits the process with :data:`EXIT_FAILURE_SAVED` or :data:`EXIT_FAILURE`):

- an exception escaping the step (a collective raising because a peer died);
- the watchdog thread: the step makes no progress within
  ``max(hang_floor_s, hang_factor x median step time)``; the main thread is
  blocked in the collective then, so the watchdog thread does the save;
- SIGTERM (the elastic agent signals survivors as soon as one worker exits and
  sends SIGKILL after a grace period, 30 s in torch 2.14's
  ``PContext.close``): the signal is forwarded through
  :func:`signal.set_wakeup_fd` to the watchdog thread, which saves even while
  the main thread is blocked in C++;
- a check added with :meth:`Runtime.add_check` (a health probe saw a fatal
  Xid) or a peer's notice (:class:`~jitbench.runtime.notice.PeerNotices`,
  installed with :meth:`Runtime.set_notices`: a peer left because of a fatal
  Xid or a failed checkpoint write), so survivors save at once.

On gloo a blocked all-reduce cannot be aborted from the side (DESIGN.md,
"Known traps"), so the saving thread ends the process itself with
:func:`os._exit` after the checkpoint and the event log are durable. On CUDA
the saving thread copies the state to the host on a side stream after an
event recorded at the boundary, never on the training stream that waits for
the hung NCCL kernel (:mod:`jitbench.runtime.device_copy`); ``os._exit`` then
skips the process group's destructor, which would wait for that kernel.

What a checkpoint holds (:data:`REQUIRED_KEYS`; JIT and periodic alike):
``model`` (``state_dict``, buffers from the boundary), ``optimizer`` (all
moments and step counts, hyper-parameters from the boundary), ``scheduler``,
``scaler`` (``GradScaler.state_dict``: scale, growth tracker), ``rng``
(python, numpy, torch CPU, every CUDA device), ``data`` (the workload's
position: epoch, position in the epoch, micro-batch, and the sampler's
configuration), ``step`` (optimizer steps completed) and ``extra``. Loading
checks every key and fails with :class:`CheckpointError` naming what is
missing (never a ``KeyError``).

Restore order: model, optimizer, scheduler, scaler, data, extra; the RNG
streams are set *at the start of the first step after the restore*
(:meth:`Runtime.step`), so whatever the script does between
:meth:`Runtime.restore` and its first step (building a data iterator draws a
seed from the torch stream, a DataLoader's ``RandomSampler`` draws another)
cannot shift any stream by a draw (field case C6).
"""

from __future__ import annotations

import copy
import os
import random
import select
import signal
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from jitbench.runtime import checkpoint as ckpt
from jitbench.runtime.device_copy import BoundaryEvents, DeviceCopyError, cuda_devices, host_copy
from jitbench.runtime.events import EventLog

EXIT_FAILURE_SAVED = 75
"""Exit status of a rank that detected a failure and committed a JIT checkpoint."""
EXIT_FAILURE = 76
"""Exit status of a rank that detected a failure and had nothing consistent to save."""

STRATEGIES = ("jit", "periodic", "periodic-async", "none")
REQUIRED_KEYS = ("model", "optimizer", "scheduler", "scaler", "rng", "data", "step", "extra")


@dataclass
class RuntimeConfig:
    """How the runtime checkpoints and detects failures."""

    strategy: str = "jit"
    """``jit`` (save on failure), ``periodic`` (synchronous, every ``interval`` steps),
    ``periodic-async`` (DCP ``async_save`` every ``interval`` steps) or ``none``."""
    interval: int = 0
    """Steps between periodic checkpoints (also a safety net under ``jit`` if > 0).
    ``periodic`` with 0 and ``mtbf_s`` set: chosen at run time (``periodic:auto``)."""
    mtbf_s: float | None = None
    """The job's mean time between failures (s, whole job) for ``periodic:auto``: after
    ``auto_probe_step`` steps rank 0 times one real checkpoint (cost ``o``) and sets
    ``interval = round(sqrt(2 o mtbf_s) / step_s)`` (Young 1974; see
    :mod:`jitbench.runtime.interval`)."""
    auto_probe_step: int = 3
    """``periodic:auto``: steps (after a start or restore) before the probe checkpoint."""
    ckpt_dir: str = "ckpt"
    """Directory of checkpoint parts (shared by all ranks)."""
    hang_floor_s: float = 2.0
    """Lower bound of the hang-detection bound (s)."""
    hang_factor: float = 10.0
    """Hang bound = max(hang_floor_s, hang_factor x median step time)."""
    hang_first_s: float = 30.0
    """Hang bound (s) before any step time is known (first step, warm-up)."""
    sync_bound_s: float = 120.0
    """Hang bound (s) for checkpoint barriers and the final barrier."""
    keep_steps: int = 2
    """Committed checkpoint steps kept on disk (older ones pruned after a newer commits)."""
    save_lock_timeout_s: float = 10.0
    """How long a failure save waits for the main thread to leave the optimizer step (s)."""
    device_copy_timeout_s: float = 30.0
    """How long a save waits for the GPU to finish the work of the last boundary
    before copying the state to the host on a side stream (s; CUDA only, see
    :mod:`jitbench.runtime.device_copy`)."""
    poll_s: float = 0.05
    """Watchdog tick (s)."""
    writer_ranks: str = "all"
    """Which survivors write a JIT part: ``all`` (every survivor its own copy)."""
    run_id: str = ""
    """Identity of the training job (e.g. a hash of its config), recorded in every
    manifest; restore refuses a directory holding parts of another run id."""


@dataclass
class _Registered:
    model: nn.Module | None = None
    optimizer: torch.optim.Optimizer | None = None
    scheduler: Any = None
    scaler: Any = None
    data_state: Callable[[int], dict] | None = None
    extra_state: Callable[[], dict] | None = None
    load_extra: Callable[[dict], None] | None = None
    load_data: Callable[[dict], None] | None = None


@dataclass
class RestoreResult:
    """What :meth:`Runtime.restore` found and loaded."""

    step: int = 0
    """Optimizer steps completed in the restored state (0: fresh start)."""
    kind: str | None = None
    """``jit`` or ``periodic``; None for a fresh start."""
    source: str | None = None
    """File name of the part loaded."""
    skipped: list = field(default_factory=list)
    """``[name, reason]`` of newer parts that failed validation."""
    data: dict = field(default_factory=dict)
    """The data position saved with the state."""
    rng_pending: bool = False
    """The saved RNG streams are set at the start of the next :meth:`Runtime.step`."""


def capture_rng_raw() -> tuple:
    """Every RNG stream's state as its own API returns it, unconverted (the per-step
    hot path; :func:`rng_state` converts it when a checkpoint is written). Each
    part is a copy: ``random.getstate`` and ``np.random.get_state`` build new
    objects, ``torch.get_rng_state`` returns a new tensor."""
    cuda = (torch.cuda.get_rng_state_all()
            if torch.cuda.is_available() and torch.cuda.is_initialized() else [])
    return random.getstate(), np.random.get_state(legacy=False), torch.get_rng_state(), cuda


def capture_rng() -> dict:
    """Every RNG stream of this process: python, numpy, torch CPU, CUDA (if initialised)."""
    return rng_state(capture_rng_raw())


def rng_state(raw: tuple) -> dict:
    """The checkpoint form (tensors and primitive values) of :func:`capture_rng_raw`'s output."""
    py, npst, torch_state, cuda = raw
    state = {
        "python": [py[0], list(py[1]), py[2]],
        "numpy": {"bit_generator": npst["bit_generator"],
                  "key": torch.from_numpy(npst["state"]["key"].astype(np.int64)),
                  "pos": int(npst["state"]["pos"]), "has_gauss": int(npst["has_gauss"]),
                  "gauss": float(npst["gauss"])},
        "torch": torch_state,
        "cuda": list(cuda),
    }
    return state


def restore_rng(state: dict) -> None:
    """Set every RNG stream from :func:`capture_rng`'s output (no draw in between)."""
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    n = state["numpy"]
    np.random.set_state({"bit_generator": n["bit_generator"],
                         "state": {"key": n["key"].numpy().astype(np.uint32), "pos": n["pos"]},
                         "has_gauss": n["has_gauss"], "gauss": n["gauss"]})
    torch.set_rng_state(state["torch"])
    if state.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def rng_digest() -> str:
    """SHA-256 (hex, first 16 digits) of every RNG stream's state in this process.

    Equal digests at the start of a step mean every stream (python, numpy,
    torch CPU, CUDA) will produce the same draws; the harness records it per
    step to check that a restore shifted no stream (field case C6).
    """
    import hashlib

    st = capture_rng()
    h = hashlib.sha256()
    h.update(repr(st["python"]).encode())
    n = st["numpy"]
    h.update(n["key"].numpy().tobytes())
    h.update(repr((n["bit_generator"], n["pos"], n["has_gauss"], n["gauss"])).encode())
    h.update(st["torch"].numpy().tobytes())
    for c in st["cuda"]:
        h.update(c.numpy().tobytes())
    return h.hexdigest()[:16]


class Runtime:
    """Per-rank JIT checkpointing runtime (see the module docstring).

    Construct it in the main thread, early (it installs a SIGTERM handler and
    starts the watchdog thread).

    Args:
        config: checkpointing and detection settings.
        events: the rank's event log.
        rank: global rank (default: ``$RANK``).
        world_size: world size (default: ``$WORLD_SIZE``).

    Raises:
        ValueError: unknown strategy, or ``periodic`` without a positive interval.
    """

    def __init__(self, config: RuntimeConfig, events: EventLog, rank: int | None = None,
                 world_size: int | None = None) -> None:
        if config.strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {config.strategy!r}; one of {STRATEGIES}")
        if config.strategy == "periodic" and config.interval < 1 and not config.mtbf_s:
            raise ValueError("periodic checkpointing needs an interval >= 1 or an MTBF (auto)")
        if config.strategy == "periodic-async" and config.interval < 1:
            raise ValueError("periodic-async checkpointing needs an interval >= 1")
        self.config = config
        self.events = events
        self.rank = int(os.environ.get("RANK", 0)) if rank is None else rank
        self.world_size = (int(os.environ.get("WORLD_SIZE", 1)) if world_size is None
                           else world_size)
        self.reg = _Registered()
        self._state_lock = threading.Lock()
        self._holds_state_lock = False
        self._fail_lock = threading.Lock()
        self._failing = False
        self._save_done = threading.Event()
        self._exit_code: int | None = None  # set by the thread that ends the process
        self._phase = "init"  # no JIT save before restore() has finished (nothing to lose yet)
        self._step = 0  # step in progress (compute/mutating) or last completed (boundary)
        self._completed = 0
        self._phase_since = time.monotonic()
        self._bound_s: float | None = None  # override for the current phase
        self._step_times: deque[float] = deque(maxlen=50)
        self._prior_step_s: float | None = None
        self._snapshot: dict | None = None
        self._pending_rng: dict | None = None
        self._live_buffers: list | None = None  # (name, tensor) cached by _take_snapshot
        self._boundary = BoundaryEvents([])  # CUDA: one event per device, set by register()
        self._async = None  # AsyncCheckpointer, created on rank 0 at the first async save
        self._auto_probe_at = config.auto_probe_step
        self._stop = threading.Event()
        self._checks: list[Callable[[], str | dict | None]] = []
        self._prev_signals: tuple | None = None
        self._notices: Any = None
        self._install_signals()
        self._watchdog = threading.Thread(target=self._watch, name="jitbench-watchdog",
                                          daemon=True)
        self._watchdog.start()

    # ------------------------------------------------------------------ setup
    def register(self, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any = None,
                 scaler: Any = None, data_state: Callable[[int], dict] | None = None,
                 extra_state: Callable[[], dict] | None = None,
                 load_extra: Callable[[dict], None] | None = None,
                 load_data: Callable[[dict], None] | None = None) -> None:
        """Hand the runtime the training state.

        Args:
            model: the *unwrapped* module (``ddp.module``); its ``state_dict`` is saved.
            optimizer: saved with all moments and step counts; its step pre-hook
                marks the start of the ``mutating`` phase.
            scheduler: LR scheduler (``state_dict``/``load_state_dict``), optional.
            scaler: AMP ``GradScaler``, optional (a disabled one saves ``{}``).
            data_state: ``f(completed_steps) -> dict`` data-loader position (epoch,
                position, micro-batch) after that many steps.
            extra_state / load_extra: user state to save and to load back.
            load_data: ``f(saved_data_state)`` positions (or checks) the data
                loader on restore; it raises if the saved position cannot be
                honoured (e.g. another batch size), which fails the restore.
        """
        self.reg = _Registered(model, optimizer, scheduler, scaler, data_state, extra_state,
                               load_extra, load_data)
        import types

        if any(isinstance(fn, types.FunctionType) for fn in getattr(scheduler, "lr_lambdas", ())):
            # LambdaLR saves a callable object's fields but nothing of a function or
            # lambda: a closure over mutable state would come back as built, not as saved
            self.events.emit("warning", where="register",
                             message="an LR lambda is a plain function: its closure is not "
                                     "checkpointed (use a callable object, like WarmupCosine)")
        optimizer.register_step_pre_hook(self._on_optimizer_step)
        self._boundary = BoundaryEvents(cuda_devices(
            [*model.parameters(), *model.buffers(),
             *(t for st in optimizer.state.values() for t in st.values()
               if isinstance(t, torch.Tensor))]))
        self._snapshot = self._take_snapshot()

    def add_check(self, check: Callable[[], str | dict | None]) -> None:
        """Add a callable polled by the watchdog every tick; a returned string is
        a failure reason (e.g. a health probe saw a fatal Xid, a peer posted a notice).
        A returned dict is a failure too: ``trigger`` (default ``notice``), ``save``
        (default True: write a JIT part), ``notify`` (default False: tell the peers),
        the rest goes into the ``failure`` event."""
        self._checks.append(check)

    def set_notices(self, notices: Any) -> None:
        """Use ``notices`` (:class:`~jitbench.runtime.notice.PeerNotices`): poll it every
        tick, and post to it on failures raised with ``notify`` (a fatal Xid, a
        failed periodic write), so the peers leave at once with the reason."""
        self._notices = notices
        self.add_check(notices.check)

    def _install_signals(self) -> None:
        r, w = os.pipe()
        os.set_blocking(w, False)
        self._wake_r = r
        self._wake_w = w
        try:
            prev_fd = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
            # A Python-level handler keeps SIGTERM from killing the process at
            # once; the C handler also writes the signal number to the pipe,
            # which the watchdog thread reads even while the main thread is
            # blocked in a collective.
            prev_term = signal.signal(signal.SIGTERM, lambda *_: None)
            self._prev_signals = (prev_fd, prev_term)
        except ValueError:  # not the main thread: signals stay as they are
            pass

    # ------------------------------------------------------------ step loop
    @contextmanager
    def step(self, step: int) -> Iterator[dict]:
        """Mark one optimizer step; yields a dict whose items go into the step's end event.

        Everything the step does (fetching its batch, forward, backward,
        optimizer and scheduler steps) belongs inside. An exception escaping
        the block is a failure: the runtime saves (if the state is consistent)
        and ends the process.
        """
        info: dict = {}
        self._begin(step)
        try:
            yield info
        except BaseException as exc:  # noqa: BLE001 - every escape is a failure
            trigger = "collective_error" if _is_collective_error(exc) else "exception"
            self._fail(trigger, error=f"{type(exc).__name__}: {exc}"[:500])
        self._end(step, info)

    def _begin(self, step: int) -> None:
        if self._pending_rng is not None:  # deferred from restore(): nothing can shift it now
            restore_rng(self._pending_rng)
            self._pending_rng = None
        # cpu_s: this process's CPU time (s), for CPU-time overheads (jitbench overhead)
        self.events.emit("step", "begin", step=step, cpu_s=time.process_time())
        self._step = step
        self._phase_since = time.monotonic()
        self._phase = "compute"

    def _on_optimizer_step(self, *_: Any) -> None:
        if self._phase == "mutating":
            return
        if threading.current_thread() is not threading.main_thread():
            return
        if self.config.strategy == "jit":
            # CUDA: wait here, still in the compute phase and without the lock, until
            # the gradient collective has finished on the device. Otherwise the host
            # runs ahead of a hung NCCL kernel: it queues this optimizer step behind
            # it, moves the step counter, scheduler and CPU-resident optimizer
            # counters on, and a JIT save would pair them with device tensors that
            # never got this update. With the wait, a hang keeps the main thread
            # here, at the last boundary on host and device alike.
            self._boundary.sync()
        self._state_lock.acquire()  # blocks for good if a failure save holds it
        self._holds_state_lock = True
        self._phase = "mutating"

    def _end(self, step: int, info: dict) -> None:
        t_end = time.monotonic()
        dur = t_end - self._phase_since
        if self._phase != "mutating":  # no optimizer step ran: still take the lock
            self._state_lock.acquire()
            self._holds_state_lock = True
        try:
            if self.config.strategy == "jit":  # only a JIT failure save reads it every step
                self._snapshot = self._take_snapshot(step=step, into=self._snapshot)
            self._completed = step
            self._step_times.append(dur)
            self._phase = "boundary"
            self._phase_since = time.monotonic()
        finally:
            self._holds_state_lock = False
            self._state_lock.release()
        # rt_s: the runtime's own time at this step end (lock, snapshot): its hot path
        self.events.emit("step", "end", step=step, dur_s=dur, rt_s=time.monotonic() - t_end,
                         **info)
        c = self.config
        if c.interval > 0 and step % c.interval == 0:
            if c.strategy in ("periodic", "jit"):
                self.save_periodic(step)
            elif c.strategy == "periodic-async":
                self.save_async(step)
        elif c.strategy == "periodic" and c.interval < 1 and step >= self._auto_probe_at:
            self._probe_interval(step)

    def set_strategy(self, strategy: str, interval: int = 0) -> None:
        """Switch the strategy at an iteration boundary (between two ``step`` blocks).

        Used by the steady-state overhead benchmark, which runs segments of
        one process under different strategies. An async save in flight is
        waited for first.

        Raises:
            ValueError: unknown strategy or a missing interval.
        """
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {strategy!r}; one of {STRATEGIES}")
        if strategy in ("periodic", "periodic-async") and interval < 1:
            raise ValueError(f"{strategy} needs an interval >= 1")
        if self._async is not None:
            self._async.wait()
        with self._state_lock:
            self._snapshot = self._boundary_snapshot()
            self.config.strategy, self.config.interval = strategy, interval

    def _boundary_snapshot(self) -> dict:
        """The snapshot of the last boundary (call it at a boundary). Under ``jit`` it
        is kept current at every step end; the other strategies take none per step,
        so it is taken now, unless the one from ``restore``/``register`` is still
        current (its RNG is the restored one, set only at the next step's start)."""
        snap = self._snapshot
        if snap is not None and (self.config.strategy == "jit"
                                 or snap.get("step") == self._completed):
            return snap
        return self._take_snapshot()

    def _take_snapshot(self, rng: dict | None = None, step: int | None = None,
                       into: dict | None = None) -> dict:
        """Boundary copies of everything small that a step may change outside the
        optimizer step (see the module docstring): RNG, buffers, scheduler,
        scaler, optimizer hyper-parameters, data position, extra state.

        The RNG streams are kept raw (:func:`capture_rng_raw`; converted when a
        checkpoint is written). ``into``: the previous snapshot, whose buffer
        tensors are overwritten in place with one ``torch._foreach_copy_`` (the
        per-step hot path under ``jit``). The buffer list is cached by a call
        without ``into`` (``register``, ``restore``): buffers must be updated in
        place, as BatchNorm's are; a script that replaces a buffer tensor calls
        :meth:`register` again.
        """
        r = self.reg
        step = self._completed if step is None else step
        live = self._live_buffers
        if into is not None and live is not None and len(into["buffers"]) == len(live):
            buffers = into["buffers"]
            if live:
                dst, src = list(buffers.values()), [b for _, b in live]
                try:
                    torch._foreach_copy_(dst, src)
                except (AttributeError, RuntimeError):  # no foreach kernel: one copy each
                    for d, b in zip(dst, src, strict=True):
                        d.copy_(b)
        else:
            m = r.model
            self._live_buffers = [(n, b.detach()) for n, b in m.named_buffers()] if m else []
            buffers = {n: b.clone() for n, b in self._live_buffers}
        groups = None
        if r.optimizer is not None:
            groups = [copy.deepcopy({k: v for k, v in g.items() if k != "params"})
                      for g in r.optimizer.param_groups]
        snap = {
            "rng": rng if rng is not None else capture_rng_raw(),
            "buffers": buffers,
            "param_groups": groups,
            "scheduler": (copy.deepcopy(r.scheduler.state_dict())
                          if r.scheduler is not None else None),
            "scaler": copy.deepcopy(r.scaler.state_dict()) if r.scaler is not None else None,
            "data": copy.deepcopy(r.data_state(step)) if r.data_state else {},
            "extra": copy.deepcopy(r.extra_state()) if r.extra_state else {},
            "step": step,
        }
        self._boundary.mark()  # CUDA: the work queued so far is this boundary's state
        return snap

    # ---------------------------------------------------------- checkpoints
    def _state(self, step: int, snapshot: dict) -> dict:
        """The complete checkpoint state at the boundary after ``step``."""
        r = self.reg
        if snapshot.get("step", step) != step:
            raise ckpt.CheckpointError(f"snapshot of step {snapshot.get('step')} saved as {step}")
        model_sd = dict(r.model.state_dict())
        for name, b in snapshot["buffers"].items():
            if name in model_sd:
                model_sd[name] = b
        opt_sd = r.optimizer.state_dict()
        rng = snapshot["rng"]
        if snapshot.get("param_groups") is not None:
            opt_sd["param_groups"] = [{**hp, "params": g["params"]} for hp, g in
                                      zip(snapshot["param_groups"], opt_sd["param_groups"],
                                          strict=True)]
        return {
            "model": model_sd,
            "optimizer": opt_sd,
            "scheduler": snapshot["scheduler"],
            "scaler": snapshot["scaler"],
            "rng": rng_state(rng) if isinstance(rng, tuple) else rng,
            "data": snapshot["data"],
            "step": step,
            "extra": snapshot["extra"],
        }

    def boundary_state(self) -> dict:
        """The complete state at the last iteration boundary (what a checkpoint
        holds; tensors are live references, copy them before the next step, e.g.
        with :func:`jitbench.runtime.staging.stage_for_async_save`)."""
        return self._state(self._completed, self._boundary_snapshot())

    def _meta(self) -> dict:
        opt_keys = sorted({k for s in self.reg.optimizer.state.values() for k in s})
        return {"optimizer_state_keys": opt_keys, "median_step_s": self._median_step(),
                "config": asdict(self.config)}

    def _write(self, kind: str, step: int, snapshot: dict) -> ckpt.Part:
        t0 = time.monotonic()
        self.events.emit("save", "begin", kind=kind, step=step, durable=True)
        try:
            try:
                state = host_copy(self._state(step, snapshot), self._boundary,
                                  self.config.device_copy_timeout_s)
            except DeviceCopyError as exc:
                raise ckpt.CheckpointWriteError(str(exc)) from exc
            part = ckpt.write_part(self.config.ckpt_dir, kind, step, self.rank, self.world_size,
                                   state, self._meta(), run_id=self.config.run_id)
        except ckpt.CheckpointWriteError as exc:
            self.events.emit("save", "end", kind=kind, step=step, ok=False, error=str(exc),
                             errno=exc.errno, durable=True)
            raise
        self.events.emit("save", "end", kind=kind, step=step, ok=True, part=part.path.name,
                         bytes=part.path.stat().st_size, dur_s=time.monotonic() - t0,
                         durable=True)
        return part

    def save_periodic(self, step: int) -> None:
        """Synchronous periodic checkpoint after ``step`` (rank 0 writes; all ranks wait).

        The barrier runs in the ``checkpoint`` phase, guarded by ``sync_bound_s``.

        Raises:
            CheckpointWriteError: on rank 0 when the write fails; the failure is
                also a failure of the job (the barrier then fails on the peers).
        """
        self._phase, self._phase_since = "checkpoint", time.monotonic()
        try:
            if self.rank == 0:
                try:
                    snap = self._boundary_snapshot()
                    self._write("periodic", step, snap)
                    ckpt.prune(self.config.ckpt_dir, self.config.keep_steps)
                except ckpt.CheckpointWriteError as exc:
                    self._fail("storage_error", error=str(exc), save=False, notify=True,
                               errno=exc.errno)
            if torch.distributed.is_available() and torch.distributed.is_initialized():
                torch.distributed.barrier()
        except BaseException as exc:  # noqa: BLE001
            self._fail("collective_error" if _is_collective_error(exc) else "exception",
                       error=f"{type(exc).__name__}: {exc}"[:500])
        self._phase, self._phase_since = "boundary", time.monotonic()

    def save_async(self, step: int) -> None:
        """Asynchronous periodic checkpoint after ``step``: rank 0 stages a copy of
        the state and DCP writes it in the background (:mod:`jitbench.runtime.async_ckpt`);
        other ranks do nothing. A failed write is an ``ok: false`` save event; the
        previous checkpoint stays the newest committed one and training goes on."""
        if self.rank != 0:
            return
        from jitbench.runtime.async_ckpt import AsyncCheckpointer

        if self._async is None:
            self._async = AsyncCheckpointer(self.config.ckpt_dir, self.rank, self.world_size,
                                            self.events, self.config.keep_steps,
                                            run_id=self.config.run_id)
        try:
            self._async.request(step, self._state(step, self._boundary_snapshot()), self._meta())
        except Exception as exc:  # noqa: BLE001 - staging failed: no save, keep training
            self.events.emit("error", where="async save", error=repr(exc)[:500])

    def _probe_interval(self, step: int) -> None:
        """``periodic:auto``: rank 0 times one checkpoint write of the current state
        (to ``<ckpt_dir>/.probe/``, deleted after; not a checkpoint), derives the
        interval from Young's formula and gives every rank its choice. Later
        checkpoints record the interval, so a restored job keeps it."""
        import shutil

        from jitbench.runtime import interval as yd

        self._phase, self._phase_since = "checkpoint", time.monotonic()
        msg: list = [None, None, self._median_step()]
        try:
            if self.rank == 0:
                probe_dir = os.path.join(self.config.ckpt_dir, ".probe")
                t0 = time.monotonic()
                self.events.emit("probe", "begin", step=step)
                try:
                    ckpt.write_part(probe_dir, "probe", step, self.rank, self.world_size,
                                    self._state(step, self._boundary_snapshot()), self._meta())
                    msg[1] = time.monotonic() - t0
                except ckpt.CheckpointWriteError as exc:
                    self._fail("storage_error", error=str(exc), save=False)
                finally:
                    shutil.rmtree(probe_dir, ignore_errors=True)
                self.events.emit("probe", "end", step=step, dur_s=msg[1])
                step_s = msg[2] or msg[1]
                msg[0] = yd.steps_for_interval(yd.young_interval_s(msg[1], self.config.mtbf_s),
                                               step_s)
            if torch.distributed.is_available() and torch.distributed.is_initialized():
                torch.distributed.broadcast_object_list(msg, src=0)
        except BaseException as exc:  # noqa: BLE001
            self._fail("collective_error" if _is_collective_error(exc) else "exception",
                       error=f"{type(exc).__name__}: {exc}"[:500])
        self._phase, self._phase_since = "boundary", time.monotonic()
        n, cost_s, step_s = msg
        self.config.interval = n
        self.events.emit("auto_interval", step=step, interval=n, cost_s=cost_s, step_s=step_s,
                         mtbf_s=self.config.mtbf_s,
                         young_interval_s=yd.young_interval_s(cost_s, self.config.mtbf_s),
                         daly_interval_s=yd.daly_interval_s(cost_s, self.config.mtbf_s),
                         formula="N = max(1, round(sqrt(2 * cost_s * mtbf_s) / step_s)) "
                                 "(Young 1974)", durable=True)
        if step % n == 0:
            self.save_periodic(step)

    def restore(self) -> RestoreResult:
        """Load the newest valid checkpoint into the registered objects.

        Rank 0 chooses the part and broadcasts its name (or its refusal) so
        every rank loads the same step (survivors may have saved different
        steps) or every rank fails alike. Corrupt parts are skipped for older
        valid ones; a directory holding parts of another job (world size, run
        id) is refused. The RNG streams are set at the start of the next
        :meth:`step`, so nothing the script draws in between shifts them.

        Returns:
            A :class:`RestoreResult` (``step == 0``: fresh start).

        Raises:
            CheckpointError: the directory belongs to another job, or the chosen
                part lacks a required key, an optimizer moment, a scheduler or
                scaler state the registered objects need, or does not fit the
                model / optimizer / data loader (one line naming what).
        """
        self.events.emit("restore", "begin", durable=True)
        self._phase = "init"
        t0 = time.monotonic()
        res = RestoreResult()
        choice: list = [None, [], None]
        if self.config.strategy != "none" and self.rank == 0:
            skipped: list = []
            try:
                found = ckpt.newest_valid(self.config.ckpt_dir, self.world_size, skipped,
                                          run_id=self.config.run_id)
                choice = [found[0].path.name if found else None,
                          [[p.path.name, why] for p, why in skipped], None]
            except ckpt.CheckpointError as exc:
                choice = [None, [], str(exc)]
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.broadcast_object_list(choice, src=0)
        name, res.skipped, refusal = choice
        try:
            if refusal is not None:
                raise ckpt.CheckpointMismatch(
                    f"checkpoint directory {self.config.ckpt_dir} is not this job's: {refusal}")
            if name is not None:
                part = next((p for p in ckpt.list_parts(self.config.ckpt_dir)
                             if p.path.name == name), None)
                if part is None:
                    raise ckpt.CheckpointError(f"{name}: chosen by rank 0 but not visible here")
                state, manifest = ckpt.load_part(part, self.world_size, self.config.run_id)
                self._apply(state, manifest, part.step)
                res.step, res.kind, res.source, res.data = part.step, part.kind, name, state["data"]
                res.rng_pending = True
                self._prior_step_s = manifest.get("meta", {}).get("median_step_s")
                prior = manifest.get("meta", {}).get("config", {})
                if (self.config.strategy == "periodic" and self.config.interval < 1
                        and prior.get("strategy") == "periodic" and prior.get("interval", 0) > 0):
                    self.config.interval = prior["interval"]  # periodic:auto's earlier choice
                snap = self._take_snapshot(rng=state["rng"], step=part.step)
                with self._state_lock:
                    self._completed = self._step = part.step
                    self._pending_rng = state["rng"]
                    self._snapshot = snap
            else:
                self._snapshot = self._take_snapshot(step=0)
        except ckpt.CheckpointError as exc:
            self.events.emit("restore", "end", ok=False, error=str(exc)[:500],
                             dur_s=time.monotonic() - t0, durable=True)
            raise
        self._auto_probe_at = res.step + self.config.auto_probe_step
        self._phase, self._phase_since = "boundary", time.monotonic()
        self.events.emit("restore", "end", step=res.step, kind=res.kind, source=res.source,
                         skipped=res.skipped, dur_s=time.monotonic() - t0, durable=True)
        return res

    def _apply(self, state: dict, manifest: dict, step: int) -> None:
        """Check ``state`` against the registered objects, then load it (RNG excluded).

        Raises:
            CheckpointError: what is missing or does not fit, in one line.
        """
        check_state(state, manifest, step, self.reg)
        r = self.reg
        where = "model"
        try:
            r.model.load_state_dict(state["model"], strict=True)
            where = "optimizer"
            r.optimizer.load_state_dict(state["optimizer"])
            if r.scheduler is not None:
                where = "scheduler"
                r.scheduler.load_state_dict(state["scheduler"])
            if r.scaler is not None:
                where = "scaler"
                r.scaler.load_state_dict(state["scaler"])
            if r.load_data is not None:
                where = "data position"
                r.load_data(state["data"])
            if r.load_extra is not None:
                where = "extra state"
                r.load_extra(state["extra"])
        except ckpt.CheckpointError:
            raise
        except Exception as exc:  # noqa: BLE001 - a state that does not fit is a bad checkpoint
            msg = " ".join(str(exc).split())[:300]
            raise ckpt.CheckpointError(
                f"checkpoint of step {step} does not fit the {where}: {type(exc).__name__}: "
                f"{msg}") from exc

    def finish(self, final_state_path: str | None = None) -> None:
        """End of training: let an async save in flight commit, optionally write the
        final state (rank 0; the same complete state a checkpoint holds, for the
        bitwise ``state_equal`` oracle), meet at a barrier, stop the watchdog and
        emit ``done``."""
        self._phase, self._phase_since = "checkpoint", time.monotonic()
        if self._async is not None:
            self._async.wait(self.config.sync_bound_s)
        if final_state_path and self.rank == 0:
            ckpt._write_durable(_as_path(final_state_path),
                                _to_bytes(self._state(self._completed, self._boundary_snapshot())))
        try:
            if torch.distributed.is_available() and torch.distributed.is_initialized():
                torch.distributed.barrier()
        except BaseException as exc:  # noqa: BLE001
            self._fail("collective_error", error=f"{type(exc).__name__}: {exc}"[:500], save=False)
        self._phase = "done"
        self._stop.set()
        # let the watchdog finish its tick: a check may be inside a C++ call (a store
        # client's round trip) that must not outlive the objects torn down at exit
        if threading.current_thread() is not self._watchdog:
            self._watchdog.join(timeout=15.0)
        self.events.emit("done", step=self._completed, durable=True)

    def close(self) -> None:
        """Stop the watchdog and give back SIGTERM and the wakeup fd (idempotent).

        For scripts and tests that go on after training in the same process;
        a worker that exits after :meth:`finish` need not call it.
        """
        self._phase = "done"
        self._stop.set()
        if self._watchdog.is_alive() and threading.current_thread() is not self._watchdog:
            self._watchdog.join(timeout=2 * self.config.poll_s + 1)
        if self._prev_signals is not None and threading.current_thread() is threading.main_thread():
            prev_fd, prev_term = self._prev_signals
            self._prev_signals = None
            signal.set_wakeup_fd(prev_fd)
            signal.signal(signal.SIGTERM, prev_term if prev_term is not None else signal.SIG_DFL)
            for fd in (self._wake_r, self._wake_w):
                try:
                    os.close(fd)
                except OSError:
                    pass

    # -------------------------------------------------------------- failure
    def _median_step(self) -> float | None:
        if len(self._step_times) >= 3:
            return statistics.median(list(self._step_times)[1:])
        return self._prior_step_s

    def hang_bound_s(self) -> float:
        """Current hang-detection bound (s) for the ``compute`` phase."""
        med = self._median_step()
        if med is None:
            return self.config.hang_first_s
        return max(self.config.hang_floor_s, self.config.hang_factor * med)

    def _watch(self) -> None:
        while not self._stop.is_set():
            try:
                ready, _, _ = select.select([self._wake_r], [], [], self.config.poll_s)
            except (OSError, ValueError):
                ready = []
            if ready:
                try:
                    sigs = os.read(self._wake_r, 64)
                except OSError:
                    sigs = b""
                if signal.SIGTERM in sigs:
                    self.events.emit("signal", signum=int(signal.SIGTERM), durable=True)
                    self._fail("sigterm")
            phase, since = self._phase, self._phase_since
            if phase in ("compute", "checkpoint"):
                bound = self.hang_bound_s() if phase == "compute" else self.config.sync_bound_s
                waited = time.monotonic() - since
                if waited > bound:
                    self._fail("hang", waited_s=waited, bound_s=bound, phase=phase)
            for check in self._checks:
                reason = check()
                if isinstance(reason, dict):
                    info = dict(reason)
                    self._fail(info.pop("trigger", "notice"), save=info.pop("save", True),
                               **info)
                elif reason:
                    self._fail("notice", reason=reason)

    def _fail(self, trigger: str, save: bool = True, notify: bool = False, **info: Any) -> None:
        """Declare a failure: tell the peers (``notify``, with notices set), save a
        JIT checkpoint once (if the strategy is ``jit`` and the state is
        consistent), then end the process."""
        with self._fail_lock:
            first = not self._failing
            self._failing = True
        if not first:
            # Another thread is already saving: it ends the process with its own exit
            # code and event. Wait for that; only if it never comes, leave silently
            # (a second exit event would contradict the first).
            self._save_done.wait(self.config.save_lock_timeout_s + 60)
            time.sleep(10.0)
            os._exit(self._exit_code if self._exit_code is not None else EXIT_FAILURE)
        phase = self._phase
        code = EXIT_FAILURE
        try:
            self.events.emit("failure", trigger=trigger, in_phase=phase, step=self._step,
                             completed=self._completed, hang_bound_s=self.hang_bound_s(),
                             durable=True, **info)
            if notify and self._notices is not None:
                reason = str(info.get("reason") or info.get("error") or trigger)
                acks = self._notices.post(trigger, reason)
                self.events.emit("notice", "point", trigger=trigger, reason=reason, acks=acks,
                                 durable=True)
            if (save and self.config.strategy == "jit" and self.reg.model is not None
                    and phase != "init"):  # before restore() ends there is nothing new to save
                code = self._save_jit(phase)
        except BaseException as exc:  # noqa: BLE001 - the process must still exit
            self.events.emit("error", where="failure handling", error=repr(exc)[:500])
        finally:
            self._save_done.set()
            self._exit(code)

    def _save_jit(self, phase: str) -> int:
        on_main = threading.current_thread() is threading.main_thread()
        if on_main and self._holds_state_lock:
            self.events.emit("save", "skip", kind="jit", reason="failure inside the optimizer step",
                             durable=True)
            return EXIT_FAILURE
        if not self._state_lock.acquire(timeout=self.config.save_lock_timeout_s):
            self.events.emit("save", "skip", kind="jit",
                             reason="optimizer step did not finish", durable=True)
            return EXIT_FAILURE
        try:
            # compute/checkpoint/boundary: parameters and optimizer equal the last
            # boundary; RNG and buffers come from its snapshot.
            step = self._completed
            try:
                self._write("jit", step, self._snapshot)
            except ckpt.CheckpointWriteError:
                return EXIT_FAILURE
            return EXIT_FAILURE_SAVED
        finally:
            self._state_lock.release()

    def _exit(self, code: int) -> None:
        self._exit_code = code
        try:
            if self._async is not None:  # no async commit without its event from here on
                self._async.freeze()
            self.events.emit("exit", code=code, durable=True)
            self.events.close()
        finally:
            os._exit(code)


def check_state(state: dict, manifest: dict, step: int, reg: _Registered) -> None:
    """Refuse a loaded checkpoint state that is not complete for the registered objects.

    Checks every key of :data:`REQUIRED_KEYS`, the RNG streams, the step, that
    a registered scheduler / enabled scaler / data loader has its saved state,
    and that every parameter's optimizer state holds every moment the
    manifest lists (and every moment any other parameter holds).

    Raises:
        CheckpointError: one line naming what is missing.
    """
    if not isinstance(state, dict):
        raise ckpt.CheckpointError(f"checkpoint of step {step} is not a dict")
    missing = [k for k in REQUIRED_KEYS if k not in state]
    if missing:
        raise ckpt.CheckpointError(f"checkpoint of step {step} lacks {', '.join(missing)}")
    if state["step"] != step:
        raise ckpt.CheckpointError(f"checkpoint file of step {step} holds step {state['step']}")
    rng = state["rng"]
    lack = [k for k in ("python", "numpy", "torch") if not isinstance(rng, dict) or k not in rng]
    if lack:
        raise ckpt.CheckpointError(f"checkpoint of step {step} lacks the RNG stream(s) "
                                   f"{', '.join(lack)}")
    opt = state["optimizer"]
    if not isinstance(opt, dict) or "state" not in opt or "param_groups" not in opt:
        raise ckpt.CheckpointError(f"checkpoint of step {step}: optimizer state lacks "
                                   "state/param_groups")
    want = set(manifest.get("meta", {}).get("optimizer_state_keys", []))
    for pstate in opt["state"].values():
        want |= set(pstate)
    if want and not opt["state"]:
        raise ckpt.CheckpointError(f"checkpoint of step {step}: optimizer state is empty, the "
                                   f"manifest lists {', '.join(sorted(want))}")
    for idx, pstate in opt["state"].items():
        lack = sorted(want - set(pstate))
        if lack:
            raise ckpt.CheckpointError(
                f"checkpoint of step {step}: optimizer state of parameter {idx} lacks "
                f"{', '.join(lack)}")
    if reg.scheduler is not None and not isinstance(state["scheduler"], dict):
        raise ckpt.CheckpointError(f"checkpoint of step {step} has no LR scheduler state "
                                   "but a scheduler is registered")
    scaler_on = reg.scaler is not None and getattr(reg.scaler, "is_enabled", lambda: True)()
    saved_scaler = state["scaler"] or {}
    if scaler_on and "scale" not in saved_scaler:
        raise ckpt.CheckpointError(f"checkpoint of step {step} has no grad-scaler state "
                                   "but an enabled GradScaler is registered")
    if not scaler_on and saved_scaler:
        raise ckpt.CheckpointError(f"checkpoint of step {step} holds grad-scaler state but "
                                   "no enabled GradScaler is registered (an AMP run's "
                                   "checkpoint)")
    if (reg.data_state is not None or reg.load_data is not None) and not state["data"]:
        raise ckpt.CheckpointError(f"checkpoint of step {step} has no data position")


def _is_collective_error(exc: BaseException) -> bool:
    dist_error = getattr(torch.distributed, "DistError", ())
    if dist_error and isinstance(exc, dist_error):
        return True
    text = str(exc).lower()
    return any(s in text for s in ("gloo", "nccl", "connection closed", "connection reset",
                                   "broken pipe", "timed out", "timeout"))


def _as_path(p: str):
    from pathlib import Path

    path = Path(p)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _to_bytes(state: dict) -> bytes:
    import io

    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getvalue()
