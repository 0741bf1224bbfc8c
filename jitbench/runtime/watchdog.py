"""The runtime's watchdog thread: hang detection, SIGTERM, polled checks.

Every ``poll_s`` (50 ms by default) the thread

- reads the SIGTERM wakeup pipe: the elastic agent signals survivors as soon
  as one worker exits and sends SIGKILL after a grace period (30 s in torch
  2.14's ``PContext.close``). A Python-level handler keeps SIGTERM from
  killing the process at once; the C-level handler also writes the signal
  number to a pipe (:func:`signal.set_wakeup_fd`), which this thread reads
  even while the main thread is blocked in a collective in C++;
- compares the time spent in the current phase with the hang bound
  (:class:`HangBound`): ``compute`` uses ``max(hang_floor_s, hang_factor x
  median step time)`` (``max(hang_first_s, hang_floor_s)`` before any step time
  is known),
  ``checkpoint`` (barriers) uses ``sync_bound_s``;
- calls every check added with :meth:`Watchdog.add_check` (a GPU health probe,
  a peer's failure notice).

Each finding is handed to the runtime's failure path (``fail(trigger, ...)``),
which saves and ends the process; this module does not save.
"""

from __future__ import annotations

import os
import select
import signal
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from jitbench import hang
from jitbench.runtime.config import RuntimeConfig
from jitbench.runtime.events import EventLog

__all__ = ["Check", "HangBound", "Watchdog"]

Check = Callable[[], "str | dict | None"]
"""A callable polled every tick: None (healthy), a failure reason (str) or a dict
(``trigger``, default ``notice``; ``save``, default True; ``notify``, default
False; the rest goes into the ``failure`` event)."""


_NO_STEP = object()
"""The last step time of a :class:`HangBound` that has recorded none."""


class HangBound:
    """The hang-detection bound, adaptive to the measured step time.

    Args:
        config: ``hang_floor_s``, ``hang_factor``, ``hang_first_s`` (s).
    """

    def __init__(self, config: RuntimeConfig) -> None:
        self.config = config
        self.step_times: deque[float] = deque(maxlen=50)
        """Durations (s) of the last 50 steps of this process."""
        self._warm_mark: object = None
        """The last step time when :meth:`expect_warm_up` was called (:data:`_NO_STEP`:
        none yet), or None: not warming."""
        self.prior_step_s: float | None = None
        """Median step time (s) recorded in the restored checkpoint, used until
        three steps of this process are timed."""

    def record(self, step_s: float) -> None:
        """Add one step's duration (s). The runtime's training thread appends to
        :attr:`step_times` itself (a Python call costs µs there, from cold caches),
        each time a new float, which ends a warm-up as this does."""
        self.step_times.append(step_s)
        self._warm_mark = None

    @property
    def warming(self) -> bool:
        """The next step is bounded by the first-step bound as well: no step time was
        recorded since :meth:`expect_warm_up` (the last one is still the object it saw,
        or :meth:`record` was not called)."""
        # a read only: the watchdog thread reads it while the main thread may call
        # expect_warm_up (a stale mark stays, harmless: no new step time is that object)
        mark = self._warm_mark
        return mark is not None and (self.step_times[-1] if self.step_times else _NO_STEP) is mark

    def expect_warm_up(self) -> None:
        """The next step may be a newcomer's first (in-process recovery: survivors wait
        in the collective while a fresh process warms up): bound it by the first-step
        bound (:func:`jitbench.hang.first_bound_s`) too, until one step is recorded."""
        self._warm_mark = self.step_times[-1] if self.step_times else _NO_STEP

    def median_step_s(self) -> float | None:
        """Median step time (s) without the first (warm-up) step; needs three steps,
        else the restored checkpoint's (None: unknown)."""
        if len(self.step_times) >= 3:
            return statistics.median(list(self.step_times)[1:])
        return self.prior_step_s

    def bound_s(self) -> float:
        """Current bound (s) for the ``compute`` phase:
        ``max(hang_floor_s, hang_factor x median step)``, or before any step time is
        known :func:`jitbench.hang.first_bound_s` (``hang_first_s``, never below
        the floor)."""
        first = hang.first_bound_s(self.config.hang_first_s, self.config.hang_floor_s)
        med = self.median_step_s()
        if med is None:
            return first
        bound = max(self.config.hang_floor_s, self.config.hang_factor * med)
        return max(bound, first) if self.warming else bound


class Watchdog:
    """The watchdog thread of one runtime (see the module docstring).

    Construct it in the main thread (it installs the SIGTERM handler there);
    elsewhere signals stay as they are.

    Args:
        config: ``poll_s`` (tick, s), ``sync_bound_s`` and the hang settings.
        events: the rank's event log (``signal`` events).
        progress: returns ``(phase, since)``: the runtime's phase and when it
            began (``time.monotonic()``, s).
        fail: the runtime's failure path, ``fail(trigger, save=True, **info)``.
        on_term: called on the main thread by the SIGTERM handler, before the
            watchdog thread declares the failure (the runtime stops starting steps).
    """

    def __init__(self, config: RuntimeConfig, events: EventLog,
                 progress: Callable[[], tuple[str, float]],
                 fail: Callable[..., None],
                 on_term: Callable[[], None] = lambda: None) -> None:
        self.config = config
        self.events = events
        self._on_term = on_term
        self.hang = HangBound(config)
        self._progress = progress
        self._fail = fail
        self._checks: list[Check] = []
        self._checks_lock = threading.Lock()
        self._stop = threading.Event()
        self._prev_signals: tuple | None = None
        self._install_signals()
        self._thread = threading.Thread(target=self._run, name="jitbench-watchdog", daemon=True)
        self._thread.start()

    def add_check(self, check: Check) -> None:
        """Poll ``check`` every tick (see :data:`Check`). Any thread may add and remove
        checks (the watchdog's own, from a check): the list is replaced, never changed
        in place, under a lock, so a tick iterates over a list nobody changes."""
        with self._checks_lock:
            self._checks = [*self._checks, check]

    def remove_check(self, check: Check) -> None:
        """Stop polling ``check`` (absent: nothing happens)."""
        with self._checks_lock:
            self._checks = [c for c in self._checks if c != check]

    def is_current(self) -> bool:
        """Whether the calling thread is the watchdog thread."""
        return threading.current_thread() is self._thread

    def stop(self, join_timeout_s: float | None = None) -> None:
        """Stop ticking; with ``join_timeout_s``, wait that long for the tick in
        progress (never from the watchdog thread itself)."""
        self._stop.set()
        if join_timeout_s is not None and self._thread.is_alive() and not self.is_current():
            self._thread.join(timeout=join_timeout_s)

    def close(self) -> None:
        """Stop, then give back SIGTERM and the wakeup fd (idempotent; main thread only
        restores signals)."""
        self.stop(2 * self.config.poll_s + 1)
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

    def _install_signals(self) -> None:
        r, w = os.pipe()
        os.set_blocking(w, False)
        self._wake_r = r
        self._wake_w = w
        try:
            prev_fd = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
            # the handler runs on the main thread at once; the watchdog thread, woken
            # through the fd, declares the failure
            prev_term = signal.signal(signal.SIGTERM, lambda *_: self._on_term())
            self._prev_signals = (prev_fd, prev_term)
        except ValueError:  # not the main thread: signals stay as they are
            pass

    def _run(self) -> None:
        while not self._stop.is_set():
            self._tick()

    def _tick(self) -> None:
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
        phase, since = self._progress()
        if phase in ("compute", "checkpoint"):
            bound = self.hang.bound_s() if phase == "compute" else self.config.sync_bound_s
            waited = time.monotonic() - since
            if waited > bound:
                self._fail("hang", waited_s=waited, bound_s=bound, phase=phase)
        for check in self._checks:
            reason: Any = check()
            if isinstance(reason, dict):
                info = dict(reason)
                self._fail(info.pop("trigger", "notice"), save=info.pop("save", True), **info)
            elif reason:
                self._fail("notice", reason=reason)
