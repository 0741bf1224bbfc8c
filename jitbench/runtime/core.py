"""The runtime facade: the user-level API of JIT checkpointing.

A training script hands the runtime its state and marks its step loop::

    rt = Runtime(RuntimeConfig(strategy="jit", ckpt_dir="ckpt"), events=log)
    rt.register(model=ddp.module, optimizer=opt, scheduler=sched)
    start = rt.restore().step               # newest valid checkpoint, or 0
    for step in rt.steps(start + 1, steps): # or range(start + 1, steps + 1)
        with rt.step(step):                 # everything of the step, its batch included
            loss = compute(batch(step)); loss.backward()
            opt.step(); opt.zero_grad(); sched.step()
    rt.finish()

The facade owns the step loop's phases, the state lock, the boundary
snapshot (:mod:`jitbench.runtime.state`), the watchdog
(:mod:`jitbench.runtime.watchdog`), restore and the exit path; *what* is
saved when is the strategy's (:mod:`jitbench.runtime.strategies`: ``jit``,
``periodic``, ``periodic-async``, ``none``; one object chosen by name from
the registry, see :mod:`jitbench.runtime.strategies.base` for its hooks).

Phases of a step:

- ``compute`` (from :meth:`Runtime.step` entry to the optimizer's pre-hook):
  parameters and optimizer moments equal the last boundary; RNG streams,
  buffers, the LR scheduler, the grad scaler (``GradScaler.update`` runs after
  a *skipped* optimizer step, in this phase), the optimizer's
  hyper-parameters, the data position and the user's extra state may already
  have moved, so strategies that save on failure keep a snapshot of their
  boundary values (``snapshot_each_step``).
- ``mutating`` (optimizer pre-hook to step end): the state is changing; no
  save can happen; the main thread holds the state (below).
- ``boundary``: between steps; the live state is consistent. ``checkpoint``:
  inside a checkpoint barrier (hang bound ``sync_bound_s``).
- ``recovery``: another thread (the watchdog) recovered in process while the
  main thread is still inside the failed step; it ends when the main thread
  returns to re-form (no hang bound: the in-process strategy bounds that wait).

Holding the state: a failure save must never read the live state while the
training thread changes it. The training thread holds it from its optimizer
step's pre-hook to the end of its step end by a plain flag (``_mutating``), not
a lock: the acquire and release of a ``threading.Lock`` cost ~6 µs per step
right after a CPU training step, from cold caches
(``benchmarks/runtime-step-cost.txt``, run 10). Anyone else (a failure save,
:meth:`Runtime.consistent_state`) holds it by the state lock and, under it, a
flag of its own (``_saving``). Each side writes its own flag and then reads
the other's (Dekker's mutual exclusion; E. W. Dijkstra, "Cooperating
sequential processes", 1965): both writes come before both reads, so at least
one side sees the other. A save that sees ``_mutating`` polls until the step
end clears it (``save_lock_timeout_s`` at most); a training thread that sees
``_saving`` clears its flag and waits for the lock. The two flags are
sequentially consistent because of the GIL: one thread runs Python bytecode at
a time, and a switch between threads passes through the GIL's mutex, so a
free-threaded interpreter is refused (:class:`Runtime`).

Failure triggers (each ends in :meth:`Runtime.fail`, which lets the strategy
react once and then ends the process with its exit status,
:data:`~jitbench.runtime.config.EXIT_FAILURE_SAVED` or
:data:`~jitbench.runtime.config.EXIT_FAILURE`):

- an exception escaping the step (a collective raising because a peer died);
- the watchdog: no progress within the hang bound (the main thread is then
  blocked in the collective, so the watchdog thread does the save), SIGTERM
  (the elastic agent signals survivors as soon as one worker exits), a check
  added with :meth:`Runtime.add_check` (a GPU health probe saw a fatal Xid,
  :mod:`jitbench.runtime.health`) or a peer's notice
  (:class:`~jitbench.runtime.notice.PeerNotices`, :meth:`Runtime.set_notices`).

On gloo a blocked all-reduce cannot be aborted from the side (docs/design.md,
"Known traps"), so the failing thread ends the process itself (``exit_fn``,
:func:`os._exit` by default) after the checkpoint and the event log are
durable. On CUDA a save copies the state to the host on a side stream after
an event recorded at the boundary, never on the training stream that waits
for the hung NCCL kernel (:mod:`jitbench.runtime.device_copy`); ``os._exit``
then skips the process group's destructor, which would wait for that kernel.

From the moment a process decides to end (SIGTERM, a failure the strategy
leaves on, the exit path) :attr:`Runtime.leaving` is true; the exit path takes
:attr:`Runtime.leave_lock` before the event log closes, so work done under that
lock (the fault injector committing a fault) is never cut in half by the exit.

Restore order: model, optimizer, scheduler, scaler, data, extra; the RNG
streams are set *at the start of the first step after the restore*
(:meth:`Runtime.step`), so whatever the script does between
:meth:`Runtime.restore` and its first step (building a data iterator draws a
seed from the torch stream, a DataLoader's ``RandomSampler`` draws another)
cannot shift any stream by a draw (field case C6).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from jitbench.runtime import checkpoint as ckpt
from jitbench.runtime import strategies
from jitbench.runtime.config import EXIT_FAILURE, EXIT_FAILURE_SAVED, RuntimeConfig
from jitbench.runtime.device_copy import DeviceCopyError, host_copy
from jitbench.runtime.events import EventLog
from jitbench.runtime.resources import resources
from jitbench.runtime.rng import restore_rng
from jitbench.runtime.sharded import full_state, shard_index
from jitbench.runtime.state import Boundary, Registered, apply_state, copy_small, to_bytes
from jitbench.runtime.strategies.base import Loaded, Strategy
from jitbench.runtime.watchdog import Check, Watchdog

__all__ = ["EXIT_FAILURE", "EXIT_FAILURE_SAVED", "RestoreResult", "Runtime", "RuntimeConfig",
           "StepBlock"]


@dataclass
class RestoreResult:
    """What :meth:`Runtime.restore` found and loaded."""

    step: int = 0
    """Optimizer steps completed in the restored state (0: fresh start)."""
    kind: str | None = None
    """``jit``, ``periodic`` or ``async``; None for a fresh start."""
    source: str | None = None
    """File name of the part loaded."""
    skipped: list = field(default_factory=list)
    """``[name, reason]`` of newer parts that failed validation."""
    data: dict = field(default_factory=dict)
    """The data position saved with the state."""
    rng_pending: bool = False
    """The saved RNG streams are set at the start of the next :meth:`Runtime.step`."""
    committed: list = field(default_factory=list)
    """Rank 0, restoring from the directory: every committed part the directory held
    when it chose (:func:`jitbench.runtime.checkpoint.committed`: name, step, kind,
    rank, commit time); the harness derives what was durable at each failure from it
    (parts pruned later are gone from the directory)."""


class StepBlock:
    """The context manager :meth:`Runtime.step` returns: ``__enter__`` begins the step
    and returns its info dict, ``__exit__`` ends it (or declares the failure).

    A class, not a generator under :func:`contextlib.contextmanager`, whose object,
    ``__enter__`` and ``__exit__`` run several Python frames more per step: 12.3 µs
    [10.5, 14.9] per step right after a CPU training step, from cold caches
    (``benchmarks/runtime-step-cost.txt``, run 10)."""

    __slots__ = ("_rt", "_step", "_info", "_entered")

    def __init__(self, rt: Runtime, step: int) -> None:
        self._rt, self._step, self._info, self._entered = rt, step, {}, False

    def __enter__(self) -> dict:
        """Begin the step; returns its info dict.

        Raises:
            RuntimeError: the block was entered before (one block per step: call
                :meth:`Runtime.step` for each; it is not a decorator either)."""
        if self._entered:
            raise RuntimeError(f"the block of step {self._step} was entered before: "
                               "call rt.step(n) for each step")
        self._entered = True
        self._rt._begin(self._step)
        return self._info

    def __exit__(self, typ: type | None, exc: BaseException | None, tb: Any) -> bool:
        if typ is None:  # the per-step path: one call
            self._rt._end(self._step, self._info)
            return False
        return self._rt._exit_step(self._step, self._info, exc)


class Runtime:
    """Per-rank JIT checkpointing runtime (see the module docstring).

    Construct it in the main thread, early (it installs a SIGTERM handler and
    starts the watchdog thread).

    Args:
        config: checkpointing and detection settings.
        events: the rank's event log.
        rank: global rank (default: ``$RANK``).
        world_size: world size (default: ``$WORLD_SIZE``).
        exit_fn: ends the process with a status after a failure, once the
            event log is closed (default :func:`os._exit`; tests pass one that
            records or raises).

    Raises:
        ValueError: unknown strategy, or settings the strategy refuses
            (``periodic`` without an interval or MTBF, ``periodic-async``
            without an interval).
        RuntimeError: a free-threaded interpreter (the GIL disabled): the runtime
            holds the live state by flags that need the GIL's ordering (*Holding the
            state*, module docstring).

    Attributes:
        strategy: the current :class:`~jitbench.runtime.strategies.base.Strategy`.
        boundary: the registered objects and the last boundary's snapshot
            (:class:`~jitbench.runtime.state.Boundary`).
        watchdog: the :class:`~jitbench.runtime.watchdog.Watchdog` (its ``hang``
            holds the step times).
    """

    def __init__(self, config: RuntimeConfig, events: EventLog, rank: int | None = None,
                 world_size: int | None = None,
                 exit_fn: Callable[[int], Any] = os._exit) -> None:
        if not getattr(sys, "_is_gil_enabled", lambda: True)():
            raise RuntimeError("jitbench's runtime needs the GIL (it holds the training "
                               "state by flags the GIL orders); run it with PYTHON_GIL=1")
        self.strategy: Strategy = strategies.load(config.strategy)(config)
        self._strategies: dict[str, Strategy] = {config.strategy: self.strategy}
        self.config = config
        self.events = events
        self.rank = int(os.environ.get("RANK", 0)) if rank is None else rank
        self.world_size = (int(os.environ.get("WORLD_SIZE", 1)) if world_size is None
                           else world_size)
        self.boundary = Boundary()
        self._exit_fn = exit_fn
        # who holds the live state (Holding the state, module docstring): the training
        # thread by a flag of its own, from its optimizer step to its step end; anyone
        # else (a failure save, consistent_state) by the lock and _saving, set under it
        self._state_lock = threading.Lock()
        self._mutating = False
        self._saving = False
        self._fail_lock = threading.Lock()
        self._failing = False
        self._leaving = threading.Event()  # this process has decided to end (see leaving)
        self._sigterm = False  # SIGTERM arrived: leaving too, set with no lock (_on_sigterm)
        # taken to set _leaving (except in the SIGTERM handler) and before the process
        # ends; the fault injector holds it while it commits a fault (leave_lock)
        self._leave_lock = threading.RLock()
        self._save_done = threading.Event()
        self._exit_code: int | None = None  # set by the thread that ends the process
        self._phase = "init"  # no failure save before restore() has finished (nothing to lose yet)
        self._step = 0  # step in progress (compute/mutating) or last completed (boundary)
        self._completed = 0
        self._redo: int | None = None  # a step recovered in process, to be re-executed
        self._posted = 0  # the last step whose gradient collective this rank posted
        self._entered = 0  # the last step whose gradient collective this rank reached
        self._recoveries = 0  # in-process recoveries so far
        self.failure_info: dict = {}
        """The failure being handled: ``trigger`` and what :meth:`fail` was told (``error``)."""
        self._phase_since = time.monotonic()
        self._pending_rng: dict | None = None
        # the training thread's id (the pre-hook compares it with get_ident, a C call,
        # instead of building thread objects); read here, in the process that trains
        self._main_ident = threading.main_thread().ident
        self._notices: Any = None
        # SIGTERM always ends this process: from the moment it arrives, no new step starts
        # (the handler runs on the main thread between two bytecodes, maybe inside a
        # section that holds a lock: it sets a plain flag, _on_sigterm)
        self.watchdog = Watchdog(config, events, lambda: (self._phase, self._phase_since),
                                 self.fail, on_term=self._on_sigterm)
        # a step's duration into the hang bound: the deque's own append, no Python call
        # (each duration is a new float, which ends a warm-up: HangBound.warming)
        self._record_step = self.watchdog.hang.step_times.append
        self._bind_strategy()

    def _bind_strategy(self) -> None:
        """Read once, at each strategy change and ``register``, what the strategy does at
        a step's optimizer step and end: each flag spares a call or a lookup at every
        step (several µs right after a CPU training step, from cold caches)."""
        strategy = self.strategy
        self._optimizer_step_hooked = strategy.hooks_optimizer_step(self)
        self._boundary_hooked = strategy.hooks_boundary(self)
        self._snapshot_each_step = strategy.snapshot_each_step

    # ------------------------------------------------------------------ setup
    @property
    def completed(self) -> int:
        """Optimizer steps completed (the step of the last boundary)."""
        return self._completed

    @property
    def leaving(self) -> bool:
        """Whether this process has decided to end: true from the moment SIGTERM
        arrives, a failure that ends the process is declared (:meth:`fail`, on any
        thread: the watchdog's hang bound, a check, a notice, an exception of the
        step) or the exit path starts; false again only after the strategy recovered
        in process. Read-only; a few hundred ns.

        A training thread that meets a fault's injection point while this is true
        must not consume the fault (:class:`jitbench.faults.base.Injector` holds
        there): the process may end at any moment, before the fault's event is
        written or the fault acts."""
        return self._sigterm or self._leaving.is_set()

    def _on_sigterm(self) -> None:
        """The SIGTERM handler's work: from now on no new step starts (:attr:`leaving`).

        Runs on the main thread between two bytecodes, inside whatever it was running,
        so it takes no lock: not :attr:`leave_lock`, and not ``_leaving``'s either,
        whose ``Event.set`` waits for the condition lock that the main thread holds
        inside its own ``_set_leaving`` (a collective error declared as SIGTERM
        arrived), forever. A plain attribute store; the watchdog thread, woken
        through the signal's wakeup fd, declares the failure."""
        self._sigterm = True

    @property
    def leave_lock(self) -> threading.RLock:
        """The lock taken to make :attr:`leaving` true (on the failing thread) and
        again on the exit path before the event log closes and the process ends.
        Whoever must finish a short unit of work before the process may end (the
        fault injector writing a fault's fired marker and its ``fault`` event)
        holds it around that work and checks :attr:`leaving` inside: then either
        the work completes before the process decides to leave, or it sees
        :attr:`leaving` and does not start. Hold it only for bounded work (never
        while waiting for another thread: the failing thread would wait too)."""
        return self._leave_lock

    def _set_leaving(self) -> None:
        """Make :attr:`leaving` true under :attr:`leave_lock` (waits for a unit of
        work in progress under it)."""
        with self._leave_lock:
            self._leaving.set()

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
        reg = Registered(model, optimizer, scheduler, scaler, data_state, extra_state,
                         load_extra, load_data)
        for message in self.boundary.register(reg, self._completed):
            self.events.emit("warning", where="register", message=message)
        self._bind_strategy()
        optimizer.register_step_pre_hook(self._on_optimizer_step)

    def add_check(self, check: Check) -> None:
        """Add a callable polled by the watchdog every tick; a returned string is
        a failure reason (e.g. a health probe saw a fatal Xid, a peer posted a notice).
        A returned dict is a failure too: ``trigger`` (default ``notice``), ``save``
        (default True: let the strategy save), ``notify`` (default False: tell the
        peers), the rest goes into the ``failure`` event."""
        self.watchdog.add_check(check)

    def set_notices(self, notices: Any) -> None:
        """Use ``notices`` (:class:`~jitbench.runtime.notice.PeerNotices`): poll it every
        tick, and post to it on failures raised with ``notify`` (a fatal Xid, a
        failed periodic write), so the peers leave at once with the reason. Notices set
        before (an earlier generation's, after an in-process recovery) are no longer
        polled and are closed (their poller thread ends, waited for a bounded time);
        the new ones' poller starts now, so the thread count does not depend on
        whether the watchdog has ticked since."""
        old, self._notices = self._notices, notices
        if old is not None:
            self.watchdog.remove_check(old.check)
            if hasattr(old, "close"):
                old.close()
        if hasattr(notices, "start"):
            notices.start()
        self.add_check(notices.check)

    def set_strategy(self, strategy: str, interval: int = 0,
                     options: dict[str, int] | None = None) -> None:
        """Switch the strategy at an iteration boundary (between two ``step`` blocks).

        Used by the steady-state overhead benchmark, which runs segments of
        one process under different strategies. The strategy left behind
        finishes its background work first (an async save in flight is
        waited for); a strategy switched to again is the same object (an
        async writer keeps its staging buffers). ``options`` are the
        strategy's named options, defaults filled in (``{"backstop": 5}`` for
        ``jit:backstop=5``; None: none), as ``RuntimeConfig.options``.

        Raises:
            ValueError: unknown strategy or settings it refuses (a missing interval).
        """
        cls = strategies.load(strategy)
        opts = dict(options or {})
        cls.validate(dataclasses.replace(self.config, strategy=strategy, interval=interval,
                                         options=opts, mtbf_s=None))
        self.strategy.leave(self)
        with self._state_lock:
            self.boundary.snapshot = self.boundary_snapshot()
            self.config.strategy, self.config.interval = strategy, interval
            self.config.options = opts
            nxt = self._strategies.get(strategy)
            if nxt is None:
                nxt = self._strategies[strategy] = cls(self.config)
            self.strategy = nxt
            self._bind_strategy()

    # ------------------------------------------------------------ step loop
    def steps(self, first: int, last: int) -> Iterator[int]:
        """Step numbers ``first .. last``. After a step that the strategy recovered in
        process (its failure handler returned None), the steps continue from the one
        after the state the recovery left (:attr:`completed` + 1): the failed step
        again when it resumed from the last boundary, earlier ones when it rolled
        back to an older copy (``inmem``)."""
        step = first
        while step <= last:
            self._redo = None
            yield step
            if self._redo != step:
                step += 1
                continue
            # the failed step's exception (and every frame it held: DDP's reducer, the
            # old process group) is gone now; the strategy finishes its recovery here
            if not self._finish_recovery():
                return
            step = self._completed + 1

    def _finish_recovery(self) -> bool:
        """After a failure the strategy recovered in process (on this, the main thread):
        let it re-form (``before_redo``). True: back at the adopted boundary; False: the
        process ends with the strategy's status (or ``exit_fn`` returned, in tests)."""
        code = self.strategy.before_redo(self)
        if code is not None:
            self._save_done.set()
            self._end_process(code)
            return False
        # the adopted boundary: no collective of the new generation reached yet
        self._posted = self._entered = self._completed
        return True

    def recover(self, trigger: str, error: str) -> bool:
        """A failure of work outside a step block, on the main thread, after the state
        was restored or adopted: a newcomer's DDP construction, whose broadcast of rank
        0's module states fails when a member dies meanwhile. ``trigger`` and ``error``
        as :func:`describe_failure` gives them for the exception: the failure is
        declared as one escaping a :meth:`step` block is; where the strategy recovers in
        process, its recovery is finished here, as :meth:`steps` finishes it after a step
        (the model wrapped again on the new generation): continue from
        :attr:`completed` + 1. Otherwise the process ends.

        Call it after the ``except`` block, not inside it: the exception's traceback
        holds the frames of the failed work (a half-built DDP and the old generation's
        process group, which a peer blocked in the old collective waits on until nothing
        refers to it), and the re-form must not begin while they live.

        Returns:
            True once recovered; False only where ``exit_fn`` returned (tests).
        """
        if self.fail(trigger, error=error) is not None:
            return False
        return self._finish_recovery()

    def step(self, step: int) -> StepBlock:
        """Mark one optimizer step: a context manager whose ``as`` value is a dict whose
        items go into the step's end event (read when the block ends: the event log
        keeps the dict itself, so leave it as it is after the block; a key that names
        one of the event's own fields, such as ``phase`` or ``step``, is written as
        ``info.<key>``).

        Everything the step does (fetching its batch, forward, backward,
        optimizer and scheduler steps) belongs inside. An exception escaping
        the block is a failure: the strategy reacts (``jit`` saves if the state
        is consistent) and the process ends, unless the strategy recovered in
        process; then the step does not complete and :meth:`steps` repeats it.
        """
        return StepBlock(self, step)

    def _exit_step(self, step: int, info: dict, exc: BaseException) -> bool:
        """The end of a :meth:`step` block that ``exc`` escaped: the failure. Returns
        True, the exception taken: the process ends, or the strategy recovered in
        process (then :meth:`steps` repeats the step)."""
        trigger, error = describe_failure(exc)
        if self.fail(trigger, error=error) is None:
            self._mutating = False  # recovered, maybe from inside the optimizer step
            self._redo = step
            return True
        self._end(step, info)  # reached only where exit_fn returned (tests)
        return True

    def begin_step(self, step: int) -> None:
        """Mark the start of step ``step`` where the step cannot be a ``with``
        block (:meth:`step`): hooks that find a foreign script's steps call this
        at the step's first forward and :meth:`end_step` after its optimizer step
        (:mod:`jitbench.harness.hooks`). Emits ``step`` begin; the watchdog bounds
        the step from here (``compute`` phase)."""
        self._begin(step)

    def end_step(self, step: int, info: dict | None = None) -> None:
        """Mark the end of step ``step`` begun with :meth:`begin_step`: emits ``step``
        end with ``dur_s`` (s, since the begin) and the items of ``info``, records
        the step time for the hang bound and returns to the ``boundary`` phase."""
        self._end(step, dict(info or {}))

    def resume_at(self, step: int) -> None:
        """The state was restored outside the runtime (a launched script's own
        checkpoint) at ``step`` optimizer steps: count from there (``done`` of a
        process that runs no further step names it)."""
        with self._state_lock:
            self._completed = self._step = step
        self._phase, self._phase_since = "boundary", time.monotonic()

    def _begin(self, step: int) -> None:
        if self._sigterm or self._leaving.is_set():
            # another thread (the watchdog: SIGTERM, a fatal Xid, a notice) is saving and
            # ending this process: start nothing that peers would wait in or run ahead on
            self._save_done.wait(self.config.save_lock_timeout_s + 60)
        if self._pending_rng is not None:  # deferred from restore(): nothing can shift it now
            restore_rng(self._pending_rng)
            self._pending_rng = None
        self._step = step
        # nothing of this step reached or posted yet (a rollback redoes older steps)
        if self._posted >= step:
            self._posted = step - 1
        self._entered = self._posted
        self._phase_since = now = _monotonic()
        self._phase = "compute"
        # CPU-time overheads (jitbench overhead): the process's CPU time at the begin
        self.events.step_begin(step, now, time.process_time() if self.config.step_cpu_time
                               else None)

    def _on_optimizer_step(self, *_: Any) -> None:
        # whether the training thread holds the state is its own flag, never the phase: a
        # failure declared on another thread (SIGTERM, a notice, an Xid) sets the phase to
        # "failure" at any instant, also inside the optimizer step
        # the steps the runtime counts are the training thread's, and only the training
        # thread writes _mutating (the exclusion of a save has two parties, "Holding the
        # state" in the module docstring): another thread's optimizer step holds nothing,
        # in every phase. Asking costs ~6 µs per step from cold caches (get_ident and the
        # comparison of its int, benchmarks/runtime-step-cost.txt, run 10); asking only
        # outside the compute phase let another thread's step write the flag
        if self._mutating or _get_ident() != self._main_ident:
            return  # a second optimizer step in the same step; another thread's optimizer
        if self._optimizer_step_hooked:  # a strategy with work here (a call costs µs)
            self.strategy.on_optimizer_step(self)
        self._mutating = True  # then _saving is read (Holding the state, module docstring)
        if self._saving:  # a failure save holds the state: wait for it (for good, if it ends the process)
            self._wait_for_save()
        self._phase = "mutating"

    def _hold_state(self) -> None:
        """The training thread holds the state (what the pre-hook writes out inline, on
        the per-step path): announce ``_mutating``, then wait for a save that holds it."""
        self._mutating = True
        if self._saving:
            self._wait_for_save()

    def _wait_for_save(self) -> None:
        """The training thread, which announced ``_mutating`` and then saw ``_saving``:
        let go, wait until the save lets go of the state lock (for good, when the save
        ends the process), then hold the state again (under the lock, so that the next
        save sees it): *Holding the state* in the module docstring."""
        self._mutating = False
        with self._state_lock:
            self._mutating = True

    def _end(self, step: int, info: dict) -> None:
        # the training thread's per-step hot path: each call and attribute chain here
        # costs µs right after a CPU training step (benchmarks/runtime-step-cost.txt), so
        # the flags of _bind_strategy are read instead of the strategy's, and the
        # snapshot is Boundary.refresh written out (one call less)
        t_end = _monotonic()
        dur = t_end - self._phase_since
        if not self._mutating:  # no optimizer step ran: still hold the state
            self._hold_state()
        try:
            if self._snapshot_each_step:
                b = self.boundary
                b.snapshot = b.take(step, into=b.snapshot)
            self._completed = step
            self._record_step(dur)
            self._phase = "boundary"
            self._phase_since = now = _monotonic()
        finally:
            self._mutating = False
        # rt_s: the runtime's own time at this step end (snapshot, records): its hot path
        self.events.step_end(step, now, dur, now - t_end, info)
        if self._boundary_hooked:
            self.strategy.at_boundary(self, step)

    def enter_collective(self, step: int) -> None:
        """Record that this rank reached the gradient collective of ``step`` (call it
        from the communication hook first, before anything there may block it; a few
        hundred ns). Reached but not posted (:meth:`mark_collective`) means blocked in
        its own code before the collective, not waiting for a peer:
        :attr:`stuck_before_collective`."""
        self._entered = step

    @property
    def stuck_before_collective(self) -> bool:
        """This rank reached a gradient collective it has not posted: it is blocked in
        its own code (a hung kernel or link before the collective, I/O, the
        communication hook), not waiting in the collective for a peer. In-process
        recovery counts such a rank as hung even when no peer is left to say so."""
        return self._entered > self._posted

    def mark_collective(self, step: int) -> None:
        """Record that this rank posts the gradient collective of ``step`` now (call it
        from the communication hook, right before the collective; a few hundred ns).
        In-process recovery names a hung rank by it: the one that did not post the
        collective its peers wait in."""
        self._posted = step

    @property
    def step_in_progress(self) -> int:
        """The step being executed (compute, optimizer step) or, at a boundary, the
        last one completed."""
        return self._step

    @property
    def posted(self) -> int:
        """The last step whose gradient collective this rank posted (0: none)."""
        return self._posted

    # ---------------------------------------------------- services for strategies
    def boundary_snapshot(self) -> dict:
        """The snapshot of the last boundary (call it at a boundary). Strategies with
        ``snapshot_each_step`` keep it current; for the others it is taken now,
        unless the one from ``restore``/``register`` is still current (its RNG is
        the restored one, set only at the next step's start).

        Not a copy to keep: the next step end overwrites its buffers and its image of
        torch's CPU stream in place (:meth:`~jitbench.runtime.state.Boundary.take`), and
        that image (a memoryview) neither pickles nor deep-copies; what must outlive the
        step, :meth:`~jitbench.runtime.state.Boundary.assemble` converts, as every
        checkpoint does."""
        snap = self.boundary.snapshot
        if snap is not None and (self.strategy.snapshot_each_step
                                 or snap.get("step") == self._completed):
            return snap
        return self.boundary.take(self._completed)

    def boundary_state(self) -> dict:
        """The complete state at the last iteration boundary (what a checkpoint
        holds; tensors are live references, copy them before the next step, e.g.
        with :func:`jitbench.runtime.staging.stage_for_async_save`)."""
        return self.boundary.assemble(self._completed, self.boundary_snapshot())

    def median_step_s(self) -> float | None:
        """Median step time (s) the hang bound uses (None: not known yet)."""
        return self.watchdog.hang.median_step_s()

    def hang_bound_s(self) -> float:
        """Current hang-detection bound (s) for the ``compute`` phase."""
        return self.watchdog.hang.bound_s()

    def manifest_meta(self) -> dict:
        """The ``meta`` of every checkpoint manifest: optimizer state keys, the median
        step time (s) and the runtime's settings (strategy and interval included)."""
        return {"optimizer_state_keys": self.boundary.optimizer_state_keys(),
                "median_step_s": self.median_step_s(), "config": asdict(self.config)}

    @contextmanager
    def consistent_state(self) -> Iterator[str | None]:
        """Hold the live state while it equals the last boundary (see *Holding the state* in this
        module's docstring).

        Yields None with the state held (the training thread waits at its next
        optimizer step or step end), or why the state cannot be had: the failure
        came inside the optimizer step on this (main) thread, or the optimizer step
        did not finish within ``save_lock_timeout_s``.
        """
        if threading.current_thread() is threading.main_thread() and self._mutating:
            yield "failure inside the optimizer step"
            return
        deadline = time.monotonic() + self.config.save_lock_timeout_s
        if not self._state_lock.acquire(timeout=self.config.save_lock_timeout_s):
            yield "optimizer step did not finish"
            return
        try:
            self._saving = True  # then _mutating is read (Holding the state, module docstring)
            while self._mutating:  # the training thread's optimizer step or step end
                if time.monotonic() >= deadline:
                    yield "optimizer step did not finish"
                    return
                time.sleep(0.0005)
            yield None
        finally:
            self._saving = False
            self._state_lock.release()

    @contextmanager
    def checkpoint_phase(self) -> Iterator[None]:
        """Run a checkpoint's collective part (barrier, broadcast) in the
        ``checkpoint`` phase, whose hang bound is ``sync_bound_s``; an exception
        escaping it is a failure of the job."""
        self._phase, self._phase_since = "checkpoint", time.monotonic()
        try:
            yield
        except BaseException as exc:  # noqa: BLE001
            self.fail("collective_error" if is_collective_error(exc) else "exception",
                      error=f"{type(exc).__name__}: {exc}"[:500])
        self._phase, self._phase_since = "boundary", time.monotonic()

    def write_checkpoint(self, kind: str, step: int, snapshot: dict,
                         state: dict | None = None,
                         slice_of: tuple[int, int] | None = None) -> ckpt.Part:
        """Write this rank's part of the boundary after ``step`` (``save`` begin/end events).

        ``state``: the complete state to write, already copied (a background
        write); default: assembled now from the live state and ``snapshot``.
        ``slice_of``: ``(i, n)``: only slice ``i`` of ``n`` (a split part,
        :func:`jitbench.runtime.checkpoint.write_part`). A sharded model's part is
        this rank's shard (:meth:`shard`), whatever ``slice_of`` says.

        Raises:
            CheckpointWriteError: the write failed, or the device never reached the
                boundary (CUDA, ``device_copy_timeout_s``).
        """
        t0 = time.monotonic()
        self.events.emit("save", "begin", kind=kind, step=step, durable=True)
        try:
            try:
                state = host_copy(self.boundary.assemble(step, snapshot) if state is None
                                  else state, self.boundary.device_events,
                                  self.config.device_copy_timeout_s)
            except DeviceCopyError as exc:
                raise ckpt.CheckpointWriteError(str(exc)) from exc
            shard = self.shard()
            part = ckpt.write_part(self.config.ckpt_dir, kind, step, self.rank, self.world_size,
                                   state, self.manifest_meta(), run_id=self.config.run_id,
                                   slice_of=None if shard else slice_of, shard_of=shard)
        except ckpt.CheckpointWriteError as exc:
            self.events.emit("save", "end", kind=kind, step=step, ok=False, error=str(exc),
                             errno=exc.errno, durable=True)
            raise
        self.events.emit("save", "end", kind=kind, step=step, ok=True, part=part.path.name,
                         bytes=part.path.stat().st_size, dur_s=time.monotonic() - t0,
                         durable=True, **({"slice": list(slice_of)} if slice_of and not shard
                                          else {}),
                         **({"shard": list(shard)} if shard else {}))
        return part

    def shard(self) -> tuple[int, int] | None:
        """``(j, S)``: the shard index this rank holds and the shard count of a sharded
        (FSDP2/HSDP) model; None when every rank holds the whole state."""
        if not self.boundary.sharded:
            return None
        return shard_index(self.boundary.reg.model)

    def save_periodic(self, step: int, kind: str = "periodic",
                      unless_committed: bool = False) -> None:
        """Synchronous checkpoint after ``step`` (rank 0 writes; all ranks wait). Under
        sharding the ranks of replica 0 (``rank < S``) write one shard each.

        The barrier runs in the ``checkpoint`` phase, guarded by ``sync_bound_s``.
        A failed write on rank 0 is a failure of the job (the peers are told and
        their barrier fails); older checkpoints stay. ``kind``: the part's kind
        (``periodic``; ``final`` for :attr:`RuntimeConfig.final_checkpoint`);
        ``unless_committed``: write nothing (a ``save`` skip event) when a part of
        ``step`` is already committed.
        """
        shard = self.shard()
        writes = self.rank == 0 if shard is None else self.rank < shard[1]
        with self.checkpoint_phase():
            if writes:
                try:
                    have = ({p["step"] for p in ckpt.committed(self.config.ckpt_dir)}
                            if unless_committed else set())
                except OSError:
                    have = set()
                if step in have:
                    self.events.emit("save", "skip", kind=kind, step=step,
                                     reason="a checkpoint of this step is committed")
                else:
                    try:
                        self.write_checkpoint(kind, step, self.boundary_snapshot())
                        if self.rank == 0:
                            ckpt.prune(self.config.ckpt_dir, self.config.keep_steps)
                    except ckpt.CheckpointWriteError as exc:
                        self.fail("storage_error", error=str(exc), save=False, notify=True,
                                  errno=exc.errno)
            if _dist_ready():
                torch.distributed.barrier()

    # --------------------------------------------------------------- restore
    def restore(self) -> RestoreResult:
        """Load the newest valid checkpoint into the registered objects.

        The strategy may supply the state (``restore_from``); otherwise rank 0
        chooses the part and broadcasts its name (or its refusal) so every
        rank loads the same step (survivors may have saved different steps)
        or every rank fails alike. Corrupt parts are skipped for older valid
        ones; a directory holding parts of another job (world size, run id)
        is refused. The RNG streams are set at the start of the next
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
        manifest: dict | None = None
        try:
            loaded, res = self.find_checkpoint()
            if loaded is not None:
                self._load(loaded, res)
                manifest = loaded.manifest
            else:
                self.boundary.snapshot = self.boundary.take(0)
        except ckpt.CheckpointError as exc:
            self.events.emit("restore", "end", ok=False, error=str(exc)[:500],
                             dur_s=time.monotonic() - t0, durable=True)
            raise
        self.strategy.on_restore(self, res, manifest)
        self._phase, self._phase_since = "boundary", time.monotonic()
        self.events.emit("restore", "end", step=res.step, kind=res.kind, source=res.source,
                         skipped=res.skipped, committed=res.committed,
                         dur_s=time.monotonic() - t0, durable=True)
        return res

    def find_checkpoint(self) -> tuple[Loaded | None, RestoreResult]:
        """The state :meth:`restore` would load, read but not loaded: the strategy's
        (``restore_from``), else the newest valid part of the checkpoint directory,
        chosen by rank 0 and broadcast (a collective: every rank calls it). The
        :class:`RestoreResult` holds ``skipped`` and ``committed``; the rest is filled
        by :meth:`load_checkpoint`.

        Raises:
            CheckpointError: the directory belongs to another job, or the chosen part
                cannot be read (one line).
        """
        res = RestoreResult()
        loaded = self.strategy.restore_from(self)
        if loaded is None:
            loaded = self._load_from_directory(res)
        return loaded, res

    def load_checkpoint(self, loaded: Loaded, res: RestoreResult,
                        rng_now: bool = False) -> RestoreResult:
        """Load a state found by :meth:`find_checkpoint` into the registered objects
        (no ``restore`` events: the caller emits them). The RNG streams are set at the
        start of the next step, or now with ``rng_now`` (a launched script under
        transparent JIT loads at the point of its loop where the state was captured,
        the end of an optimizer step, and draws its next batch before the next step
        begins).

        Raises:
            CheckpointError: the state lacks a key or does not fit (one line).
        """
        self._load(loaded, res)
        self.strategy.on_restore(self, res, loaded.manifest)
        if rng_now and self._pending_rng is not None:
            restore_rng(self._pending_rng)
            self._pending_rng = None
        self._phase, self._phase_since = "boundary", time.monotonic()
        return res

    def amend_snapshot(self, key: str, value: Any, step: int) -> bool:
        """Replace ``key`` of the boundary snapshot of ``step`` with a copy of ``value``
        (a launched script's ``GradScaler.update`` runs after the optimizer step that
        ends the step, so the scaler's boundary value is known only then). Returns
        False, changing nothing, when the snapshot is of another step. The value holds
        for that boundary only: the next step end sets every key of the snapshot again
        (:meth:`~jitbench.runtime.state.Boundary.take`)."""
        with self._state_lock:
            snap = self.boundary.snapshot
            if snap is None or snap.get("step") != step or key not in snap:
                return False
            snap[key] = copy_small(value)
            return True

    def _load_from_directory(self, res: RestoreResult) -> Loaded | None:
        choice: list = [None, [], None]
        if self.strategy.reads_checkpoints and self.rank == 0:
            skipped: list = []
            try:
                res.committed = ckpt.committed(self.config.ckpt_dir)
            except OSError:
                res.committed = []  # newest_valid below says why the directory is unusable
            try:
                found = ckpt.newest_valid(self.config.ckpt_dir, self.world_size, skipped,
                                          run_id=self.config.run_id)
                choice = [found[0].path.name if found else None,
                          [[p.path.name, why] for p, why in skipped], None]
            except ckpt.CheckpointError as exc:
                choice = [None, [], str(exc)]
        if _dist_ready():
            torch.distributed.broadcast_object_list(choice, src=0)
        name, res.skipped, refusal = choice
        if refusal is not None:
            raise ckpt.CheckpointMismatch(
                f"checkpoint directory {self.config.ckpt_dir} is not this job's: {refusal}")
        if name is None:
            return None
        part = next((p for p in ckpt.list_parts(self.config.ckpt_dir) if p.path.name == name),
                    None)
        if part is None:
            raise ckpt.CheckpointError(f"{name}: chosen by rank 0 but not visible here")
        shard = self.shard()
        state, manifest = ckpt.load_part(part, self.world_size, self.config.run_id,
                                         shard=shard[0] if shard else None)
        if shard is not None and isinstance(manifest.get("rank"), int):  # this shard's part
            name = ckpt.part_name(part.kind, part.step, manifest["rank"]) + part.path.suffix
        return Loaded(state, manifest, part.step, part.kind, name)

    def adopt(self, loaded: Loaded) -> RestoreResult:
        """Load a state received from a peer (in-process recovery) into the registered
        objects, as :meth:`restore` loads one from disk (``restore`` begin/end events;
        the RNG streams are set at the start of the next step).

        Raises:
            CheckpointError: the state lacks a key or does not fit (one line).
        """
        self.events.emit("restore", "begin", durable=True)
        t0 = time.monotonic()
        res = RestoreResult()
        try:
            self._load(loaded, res)
        except ckpt.CheckpointError as exc:
            self.events.emit("restore", "end", ok=False, error=str(exc)[:500],
                             dur_s=time.monotonic() - t0, durable=True)
            raise
        self._phase, self._phase_since = "boundary", time.monotonic()
        self.events.emit("restore", "end", step=res.step, kind=res.kind, source=res.source,
                         skipped=[], dur_s=time.monotonic() - t0, durable=True)
        return res

    def _load(self, loaded: Loaded, res: RestoreResult) -> None:
        apply_state(self.boundary.reg, loaded.state, loaded.manifest, loaded.step)
        res.step, res.kind, res.source = loaded.step, loaded.kind, loaded.source
        res.data = loaded.state["data"]
        res.rng_pending = True
        self.watchdog.hang.prior_step_s = loaded.manifest.get("meta", {}).get("median_step_s")
        snap = self.boundary.take(loaded.step, rng=loaded.state["rng"])
        with self._state_lock:
            self._completed = self._step = loaded.step
            self._posted = self._entered = loaded.step  # the collectives up to it are done
            self._pending_rng = loaded.state["rng"]
            self.boundary.snapshot = snap

    # ---------------------------------------------------------------- finish
    def finish(self, final_state_path: str | None = None) -> None:
        """End of training: let the strategy finish (an async save in flight
        commits), optionally write the final state (rank 0; the same complete
        state a checkpoint holds, for the bitwise ``state_equal`` oracle), meet
        at a barrier, stop the watchdog and emit ``done``.

        Between the strategy's finish (its background writers joined) and the
        barrier it emits ``resources``: the threads and sockets this process holds,
        which a survivor of in-process recoveries must not hold more of than a
        newcomer."""
        self._phase, self._phase_since = "checkpoint", time.monotonic()
        self.strategy.finish(self)
        self.events.emit("resources", **resources())
        if self.config.final_checkpoint:  # for a later job to resume from
            self.save_periodic(self._completed, kind="final", unless_committed=True)
            self._phase, self._phase_since = "checkpoint", time.monotonic()
        if final_state_path and self.boundary.sharded:  # gathered by every rank
            state = full_state(self.boundary.assemble(self._completed, self.boundary_snapshot(),
                                                      local=False))
        elif final_state_path and self.rank == 0:
            state = self.boundary_state()
        if final_state_path and self.rank == 0:
            path = Path(final_state_path)
            path.parent.mkdir(parents=True, exist_ok=True)
            ckpt.write_durable(path, to_bytes(state))
        try:
            if _dist_ready():
                torch.distributed.barrier()
        except BaseException as exc:  # noqa: BLE001
            self.fail("collective_error", error=f"{type(exc).__name__}: {exc}"[:500], save=False)
        self._phase = "done"
        # let the watchdog finish its tick: a check may be inside a C++ call (a store
        # client's round trip) that must not outlive the objects torn down at exit
        self.watchdog.stop(join_timeout_s=15.0)
        self.events.emit("done", step=self._completed, durable=True)

    def close(self) -> None:
        """Stop the watchdog and give back SIGTERM and the wakeup fd (idempotent).

        For scripts and tests that go on after training in the same process;
        a worker that exits after :meth:`finish` need not call it. The events queued
        for the writer thread are written before it returns, so the caller can read
        the whole log (:meth:`jitbench.runtime.events.EventLog.flush`).
        """
        self._phase = "done"
        self.watchdog.close()
        self.events.flush()

    # -------------------------------------------------------------- failure
    def fail(self, trigger: str, save: bool = True, notify: bool = False,
             **info: Any) -> int | None:
        """Declare a failure: log it, tell the peers (``notify``, with notices set),
        let the strategy react once (``save``, with a consistent state: after
        :meth:`restore`, with a registered model), then end the process.

        Returns only when the strategy recovered in process (None), or when
        ``exit_fn`` returns (tests).
        """
        # One failure is handled at a time. Another thread already handling one either
        # ends the process (then follow it: wait for its exit; only if it never comes,
        # leave silently, since a second exit event would contradict the first) or
        # recovers in process (then this failure is handled next, in its own right).
        deadline = time.monotonic() + self.config.save_lock_timeout_s + 60
        recoveries = self._recoveries
        main = threading.current_thread() is threading.main_thread()
        while True:
            with self._fail_lock:
                if not self._failing:
                    if self._recoveries != recoveries and not main:
                        # declared by the watchdog about the world before an in-process
                        # recovery that has since happened (a hang of the failed step)
                        return None
                    self._failing = True
                    if self.strategy.leaves_on(trigger):
                        self._set_leaving()
                    break
            if self._save_done.is_set() or time.monotonic() > deadline:
                self._save_done.wait(max(0.0, deadline - time.monotonic()))
                time.sleep(10.0)
                self._set_leaving()
                self._exit_fn(self._exit_code if self._exit_code is not None else EXIT_FAILURE)
                return EXIT_FAILURE
            time.sleep(0.005)
        phase = self._phase
        self._phase = "failure"  # no hang bound while the failure is handled
        code: int | None = EXIT_FAILURE
        self.failure_info = {"trigger": trigger, **info}
        try:
            self.events.emit("failure", trigger=trigger, in_phase=phase, step=self._step,
                             completed=self._completed, hang_bound_s=self.hang_bound_s(),
                             durable=True, **info)
            _say(f"rank {self.rank}: failure ({trigger}) at step {self._step}: "
                 f"{info.get('error') or info.get('reason') or trigger}")
            if notify and self._notices is not None:
                reason = str(info.get("reason") or info.get("error") or trigger)
                acks = self._notices.post(trigger, reason)
                self.events.emit("notice", "point", trigger=trigger, reason=reason, acks=acks,
                                 durable=True)
            if save and self.boundary.reg.model is not None and phase != "init":
                code = self.strategy.on_failure(self, trigger, phase)
        except BaseException as exc:  # noqa: BLE001 - the process must still exit
            self.events.emit("error", where="failure handling", error=repr(exc)[:500])
            code = EXIT_FAILURE
        finally:
            if code is None:
                # recovered in process: on the main thread it is back at the boundary;
                # on another thread (the watchdog) the main thread has still to return
                # from the failed step and re-form ("recovery": no hang bound here, the
                # strategy bounds that wait itself)
                self._phase = "boundary" if main else "recovery"
                self._phase_since = time.monotonic()
                with self._fail_lock:
                    self._recoveries += 1
                    self._failing = False
                    self._leaving.clear()
            else:
                self._save_done.set()
                self._end_process(code)
        return code

    def _end_process(self, code: int) -> None:
        # from here the process ends: an injection committing a fault finishes first
        # (its marker and its event), and none starts after (it sees leaving)
        self._set_leaving()
        self._exit_code = code
        try:
            for strategy in self._strategies.values():
                strategy.on_exit(self)
            self.events.emit("exit", code=code, durable=True)
            self.events.close()
        finally:
            self._exit_fn(code)


_monotonic = time.monotonic
_get_ident = threading.get_ident
"""Module globals for the per-step hot path (one lookup instead of two)."""


def _say(line: str) -> None:
    """One line on stderr (the elastic agent keeps it in the run's ``agent.log``), so
    the root cause of a failure is readable without the events; never raises."""
    import sys

    try:
        sys.stderr.write(f"[jitbench] {line.splitlines()[0] if line else ''}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def describe_failure(exc: BaseException) -> tuple[str, str]:
    """``(trigger, error)`` for a failure that ``exc`` is: ``collective_error`` where it
    comes from a collective (:func:`is_collective_error`), else ``exception``; and
    ``"Type: message"`` cut to 500 characters (the failure event's ``error``)."""
    trigger = "collective_error" if is_collective_error(exc) else "exception"
    return trigger, f"{type(exc).__name__}: {exc}"[:500]


def is_collective_error(exc: BaseException) -> bool:
    """Whether ``exc`` comes from a collective (a peer died or timed out): a
    ``torch.distributed.DistError`` or a message naming gloo/NCCL, a closed or
    reset connection, a broken pipe or a timeout."""
    dist_error = getattr(torch.distributed, "DistError", ())
    if dist_error and isinstance(exc, dist_error):
        return True
    text = str(exc).lower()
    return any(s in text for s in ("gloo", "nccl", "connection closed", "connection reset",
                                   "broken pipe", "timed out", "timeout"))


def _dist_ready() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()
