"""Declared faults, their parameters, and the per-rank injector.

A fault is data (:class:`FaultSpec`): its kind, the rank it hits, its trigger
and its parameters. The worker calls :meth:`Injector.at` at named injection
points:

``step``
    the start of a step (main thread, inside the runtime's step);
``collective``
    inside the first gradient collective of a step (the DDP comm hook,
    before this rank posts its collective);
``optimizer``
    inside the optimizer step: after the gradient collective has completed,
    before the parameters change (the peers have their gradients and may finish
    the step);
``write``
    before each I/O operation of a checkpoint part's commit (any thread; the
    JIT save runs on the watchdog thread when the main thread is blocked);
``restore``
    when a part is about to be loaded at start-up (the step is the one the
    restore resumes at: the part's step + 1).

Triggers: a fault fires at the first injection point of its kind whose step
is >= ``FaultSpec.step`` and, if ``time_s`` is set, once ``time_s`` seconds
of wall time have passed since training started (the first step of attempt 0,
shared by all ranks and attempts through a file in the run directory); the
fault may further wait for its own condition (:meth:`Fault.due`, e.g. a torn
write waits for its chosen I/O operation). For a plain step trigger this is
exactly "at step k". A fault fires once per run: before acting, the injector
commits a marker file in the run directory and writes a durable ``fault``
event, so a restarted attempt that replays the step does not fire it again
(``every_attempt`` faults fire in every attempt, to model a rank that always
fails). Faults with a window (``slow``) act again at each of their next steps
of the same attempt.

A process that is leaving (the runtime's :attr:`~jitbench.runtime.core.Runtime.leaving`:
SIGTERM arrived, a failure that ends it was declared, its exit path began) may
end at any instant, so a fault due at a training-path point (``step``,
``collective``, ``optimizer``, ``micro:M``) is not committed there: the point
holds (sleeps until the process ends, or until it is no longer leaving after
an in-process recovery) and the fault stays pending for the next attempt. The
leaving check, the marker and the ``fault`` event are one unit under the
runtime's :attr:`~jitbench.runtime.core.Runtime.leave_lock`, which the exit
path takes before the event log closes: a marker is never left without its
event. ``write`` and ``restore`` points are not held (a leaving rank's own JIT
save is where a second fault during the save fires).
"""

from __future__ import annotations

import abc
import math
import os
import random
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from jitbench.runtime.events import EventLog

POINTS = ("step", "collective", "optimizer", "write", "restore")
UNHELD_POINTS = ("write", "restore")
"""Points that fire while the process is leaving (every other point is on the training
path: ``step``, ``collective``, ``optimizer``, ``micro:M``, and holds)."""
HOLD_POLL_S = 0.05
"""How often (s) a held injection point checks whether the process still leaves."""
FAMILIES = ("process", "collective", "gpu", "storage", "numeric", "network")


@dataclass
class FaultSpec:
    """One scheduled fault."""

    kind: str
    """Fault name, e.g. ``kill``, ``nccl-hang`` (``jitbench faults`` lists them)."""
    rank: int = 1
    """Global rank that the fault hits."""
    step: int = 1
    """Optimizer step (1-based) at which it fires (with ``time_s``: the earliest step)."""
    every_attempt: bool = False
    """Fire again in every restarted attempt (a rank that always fails)."""
    params: dict = field(default_factory=dict)
    """Kind-specific parameters (see each fault's ``params``; defaults filled in)."""
    id: str = ""
    """Stable identifier (default ``<kind>@<rank>:<step>``, or ``...:t<time_s>``)."""
    time_s: float | None = None
    """Fire once this many seconds (wall time) have passed since training started."""

    def __post_init__(self) -> None:
        if not self.id:
            at = f"t{self.time_s:g}" if self.time_s is not None else str(self.step)
            self.id = f"{self.kind}@{self.rank}:{at}"


def check_value(name: str, value: Any, kind: type, *, low: float | None = None,
                high: float | None = None, high_open: bool = False,
                choices: tuple = ()) -> Any:
    """Check one typed value from a flag, a spec or a scenario file.

    ``kind`` is ``int``, ``float``, ``str`` or ``bool``; a bool is never
    taken for a number, an int is taken for a float (returned as float), a
    float must be finite. ``low``/``high`` bound the value (``high``
    exclusive if ``high_open``); ``choices`` lists the allowed values.

    Raises:
        ValueError: wrong type or impossible value, as one line naming ``name``.
    """
    ok = (isinstance(value, bool) if kind is bool else
          isinstance(value, int) and not isinstance(value, bool) if kind is int else
          isinstance(value, (int, float)) and not isinstance(value, bool) if kind is float else
          isinstance(value, kind))
    if not ok:
        raise ValueError(f"{name} must be {kind.__name__}, got {type(value).__name__} {value!r}")
    if kind is float:
        value = float(value)
        if not math.isfinite(value):
            raise ValueError(f"{name} must be finite, got {value}")
    if choices and value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(str, choices))}, got {value!r}")
    if low is not None and value < low:
        raise ValueError(f"{name} must be >= {low:g}, got {value!r}")
    if high is not None and (value >= high if high_open else value > high):
        raise ValueError(f"{name} must be {'<' if high_open else '<='} {high:g}, got {value!r}")
    return value


@dataclass(frozen=True)
class Param:
    """One fault parameter: its type, default, unit-carrying doc and valid range."""

    type: type
    """``int``, ``float``, ``str`` or ``bool``."""
    default: Any
    """Value when not given (None: the fault derives it, e.g. from the seed)."""
    doc: str
    low: float | None = None
    """Smallest valid value (inclusive)."""
    high: float | None = None
    """Largest valid value (inclusive unless ``high_open``)."""
    high_open: bool = False
    choices: tuple = ()

    def coerce(self, name: str, value: Any) -> Any:
        """Check ``value``; returns it (ints accepted for floats).

        Raises:
            ValueError: wrong type or impossible value, as one line.
        """
        if value is None and self.default is None:
            return None
        return check_value(name, value, self.type, low=self.low, high=self.high,
                           high_open=self.high_open, choices=self.choices)

    def parse(self, name: str, text: str) -> Any:
        """Parse a command-line string (``--fault-param name=text``) and check it."""
        try:
            if self.type is bool:
                low = text.strip().lower()
                if low not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError
                value: Any = low in ("true", "1", "yes")
            elif self.type is int:
                value = int(text)
            elif self.type is float:
                value = float(text)
            else:
                value = text
        except ValueError:
            raise ValueError(f"{name} must be {self.type.__name__}, got {text!r}") from None
        return self.coerce(name, value)


class Fault(abc.ABC):
    """A fault family member: what it simulates, where it fires, what it does.

    Subclasses set the class attributes and implement :meth:`fire`; their
    module docstring says what real failure the fault stands for, how it is
    produced and what the other ranks see.
    """

    name: ClassVar[str]
    family: ClassVar[str]
    """``process``, ``collective``, ``gpu``, ``storage``, ``numeric`` or ``network``."""
    point: ClassVar[str]
    """Default injection point (see the module docstring)."""
    movable: ClassVar[bool] = True
    """The ``at`` parameter may move it to ``step``, ``collective``, ``optimizer`` or
    ``micro:M`` (before micro-batch M of the accumulation window)."""
    extra_points: ClassVar[tuple[str, ...]] = ()
    """Further points ``at`` may choose (process faults: ``write``, ``restore``)."""
    summary: ClassVar[str]
    """One line for ``jitbench faults``."""
    recoverable: ClassVar[bool] = True
    """JIT checkpointing recovers from it with at most one minibatch replayed."""
    fails_job: ClassVar[bool] = True
    """The fault makes the job fail (starts a failure episode in the metrics)."""
    in_reference: ClassVar[bool] = False
    """A perturbation of the training, not an interruption (``amp-backoff``): the
    fault-free reference run keeps it (:meth:`jitbench.harness.spec.RunSpec.without_faults`)
    and it acts at every execution of exactly its step (in every attempt, a replay of
    the step included), its ``fault`` event written once per run, at the first."""
    params: ClassVar[dict[str, Param]] = {}
    """Kind-specific parameters."""

    def __init__(self, spec: FaultSpec) -> None:
        self.spec = spec
        self.p = self.resolve(spec.params)
        self.point = self.p.get("at") or type(self).point

    @classmethod
    def all_params(cls) -> dict[str, Param]:
        """The fault's parameters, ``at`` (its injection point) included where it may move."""
        out = dict(cls.params)
        if cls.movable:
            out["at"] = Param(str, None, "injection point: step, collective, optimizer, micro:M"
                              + "".join(f", {p}" for p in cls.extra_points)
                              + f" (default {cls.point})")
        return out

    @classmethod
    def point_ok(cls, at: str, grad_accum: int | None = None) -> bool:
        """Whether ``at`` is an injection point this fault may move to (``micro:M``
        needs ``M < grad_accum`` when that is given)."""
        if at in ("step", "collective", "optimizer") or at in cls.extra_points:
            return True
        m = re.fullmatch(r"micro:(\d+)", at)
        return bool(m) and (grad_accum is None or int(m[1]) < grad_accum)

    @classmethod
    def resolve(cls, params: dict) -> dict:
        """Validated parameters with defaults filled in.

        Raises:
            ValueError: an unknown key, a wrong type or an impossible value (one line).
        """
        known = cls.all_params()
        unknown = sorted(set(params) - set(known))
        if unknown:
            allowed = ", ".join(sorted(known)) or "none"
            raise ValueError(f"{cls.name}: unknown parameter {unknown[0]!r} (allowed: {allowed})")
        out = {}
        for name, prm in known.items():
            try:
                out[name] = prm.coerce(name, params[name]) if name in params else prm.default
            except ValueError as exc:
                raise ValueError(f"{cls.name}: {exc}") from None
        if out.get("at") is not None and not cls.point_ok(out["at"]):
            raise ValueError(f"{cls.name}: at must be step, collective, optimizer, micro:M"
                             + "".join(f" or {p}" for p in cls.extra_points)
                             + f", got {out['at']!r}")
        cls.check_params(out)
        return out

    @classmethod
    def check_params(cls, p: dict) -> None:
        """Cross-parameter checks (raise ValueError with one line)."""
        return None

    @classmethod
    def check_run(cls, spec: FaultSpec, run: Any) -> str | None:
        """A reason this fault cannot work in ``run`` (a RunSpec), or None."""
        return None

    def fails(self) -> bool:
        """This instance makes the job fail (``fails_job``; per code for Xids)."""
        return self.fails_job

    def window_steps(self) -> int:
        """Steps the fault acts on, from its first (1: a one-off)."""
        return 1

    def due(self, ctx: dict[str, Any]) -> bool:
        """Whether to fire at this injection (the trigger already matched)."""
        return True

    def event_fields(self, ctx: dict[str, Any]) -> dict:
        """Extra fields of the ``fault`` event (computed just before firing)."""
        return {}

    def rng(self, ctx: dict[str, Any]) -> random.Random:
        """A random stream of this fault, fixed by the run's seed and the fault id."""
        return random.Random(f"{ctx.get('seed', 0)}/{self.spec.id}")

    @abc.abstractmethod
    def fire(self, ctx: dict[str, Any]) -> None:
        """Act (may not return: kill, hang)."""

    def repeat(self, ctx: dict[str, Any]) -> None:
        """Act again at a later step of the window (default: :meth:`fire`)."""
        self.fire(ctx)


class Injector:
    """Fires this rank's scheduled faults at the injection points.

    Args:
        faults: the run's fault plan (all ranks; this rank keeps its own).
        rank: this rank.
        attempt: restart count.
        state_dir: run directory folder for fired markers (shared by all ranks);
            the training start time is kept beside it, in ``train_start``.
        events: this rank's event log.
        context: fixed items handed to every :meth:`Fault.fire` (probe,
            checkpoint directory, seed, world size, ...).
        leaving: whether this process has decided to end (the runtime's
            :attr:`~jitbench.runtime.core.Runtime.leaving`; default: never). While
            it is true a training-path point holds instead of committing a fault
            (module docstring); called only when a fault is due, under ``leave_lock``.
        leave_lock: the lock the leaving path takes to make ``leaving`` true and
            before the process ends (the runtime's
            :attr:`~jitbench.runtime.core.Runtime.leave_lock`); the injector holds
            it while it checks ``leaving``, writes a fault's marker and its
            ``fault`` event (default: a lock of its own). Reentrant locks only.
    """

    def __init__(self, faults: list[Fault], rank: int, attempt: int, state_dir: str | os.PathLike,
                 events: EventLog, context: dict[str, Any] | None = None,
                 leaving: Callable[[], bool] | None = None,
                 leave_lock: threading.RLock | None = None) -> None:
        self.faults = [f for f in faults if f.spec.rank == rank]
        self.rank, self.attempt = rank, attempt
        self.dir = Path(state_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.events = events
        self.context = dict(context or {})
        self.step = 0
        self.leaving: Callable[[], bool] = leaving if leaving is not None else _never
        self.held = 0
        """Times a training-path point held a due fault because the process was leaving."""
        self._lock = leave_lock if leave_lock is not None else threading.RLock()
        self._done: set[int] = {i for i, f in enumerate(self.faults) if self.has_fired(f)}
        self._active: list[tuple[Fault, int]] = []
        self._repeated: dict[int, int] = {}
        self._t0: float | None = None

    def _marker(self, f: Fault) -> Path:
        return self.dir / f"{f.spec.id.replace('/', '_')}.attempt{self.attempt:03d}"

    def has_fired(self, f: Fault) -> bool:
        if f.spec.every_attempt:
            return self._marker(f).exists()
        return any(self.dir.glob(f"{_glob_escape(f.spec.id.replace('/', '_'))}.attempt*"))

    # ------------------------------------------------------------- time base
    def train_start(self, create: bool = False) -> float | None:
        """Wall time (s, epoch) training started: the first step of attempt 0 of
        any rank (``create``: this rank is at its first step; the first rank to
        get there writes the time, everyone else and later attempts read it)."""
        if self._t0 is None:
            path = self.dir.parent / "train_start"
            if create and not path.exists():
                tmp = self.dir.parent / f"train_start.{self.rank}.{self.attempt}.tmp"
                tmp.write_text(repr(time.time()))
                try:
                    os.link(tmp, path)  # atomic: the first rank wins
                except FileExistsError:
                    pass
                finally:
                    tmp.unlink(missing_ok=True)
            try:
                self._t0 = float(path.read_text())
            except (OSError, ValueError):
                return None
        return self._t0

    def elapsed_s(self) -> float | None:
        """Seconds (wall time) since training started, or None before it started."""
        t0 = self.train_start()
        return None if t0 is None else time.time() - t0

    # ---------------------------------------------------------------- firing
    def at(self, point: str, step: int, **ctx: Any) -> None:
        """Fire every due fault for ``point`` at ``step`` (in plan order)."""
        if point == "step" and self._t0 is None:
            self.train_start(create=True)
        for f, first in list(self._active):
            if f.point == point and first < step < first + f.window_steps():
                key = id(f)
                if self._repeated.get(key) != step:
                    self._repeated[key] = step
                    f.repeat(self._ctx(point, step, ctx))
        for i, f in enumerate(self.faults):
            if f.in_reference and f.point == point and step == f.spec.step:
                self._perturb(f, point, step, ctx)
                continue
            if f.in_reference or i in self._done or f.point != point or step < f.spec.step:
                continue
            if f.spec.time_s is not None:
                el = self.elapsed_s()
                if el is None or el < f.spec.time_s:
                    continue
            full = self._ctx(point, step, ctx)
            if not self._commit(i, f, point, step, full):
                continue
            if f.window_steps() > 1:
                self._active.append((f, step))
            f.fire(full)

    def _commit(self, i: int, f: Fault, point: str, step: int, full: dict) -> bool:
        """Consume fault ``i`` if it is due here: its marker and its durable ``fault``
        event, as one unit under the leave lock. A training-path point of a leaving
        process holds (outside the lock) until the process ends or stops leaving, then
        looks again. Returns whether the fault is to fire now."""
        while True:
            with self._lock:
                if i in self._done:
                    return False
                if not self._holds(point):
                    if not f.due(full):
                        return False
                    self._done.add(i)
                    self._write_marker(f)
                    self.events.emit("fault", kind=f.name, fault_id=f.spec.id, step=step,
                                     point=point, scheduled_step=f.spec.step,
                                     time_s=f.spec.time_s, elapsed_s=self.elapsed_s(),
                                     fails_job=f.fails(), params=f.p, durable=True,
                                     **f.event_fields(full))
                    return True
            self._hold()

    def _holds(self, point: str) -> bool:
        """Whether a fault due at ``point`` must wait: a training-path point while the
        process is leaving (call under the lock)."""
        if point in UNHELD_POINTS or not self.leaving():
            return False
        self.held += 1
        return True

    def _hold(self) -> None:
        """Sleep while the process is leaving (it ends meanwhile; after an in-process
        recovery it no longer leaves and the point goes on)."""
        while self.leaving():
            time.sleep(HOLD_POLL_S)

    def _write_marker(self, f: Fault) -> None:
        fd = os.open(self._marker(f), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _perturb(self, f: Fault, point: str, step: int, ctx: dict) -> None:
        """Act for an :attr:`~Fault.in_reference` fault at an execution of its step;
        the marker and the ``fault`` event only the first time in the run."""
        full = self._ctx(point, step, ctx)
        while True:
            with self._lock:
                if not self._holds(point):
                    if not self.has_fired(f):
                        self._write_marker(f)
                        self.events.emit("fault", kind=f.name, fault_id=f.spec.id, step=step,
                                         point=point, scheduled_step=f.spec.step, time_s=None,
                                         elapsed_s=self.elapsed_s(), fails_job=f.fails(),
                                         params=f.p, durable=True, **f.event_fields(full))
                    break
            self._hold()
        f.fire(full)

    def _ctx(self, point: str, step: int, ctx: dict) -> dict:
        return {**self.context, "step": step, "rank": self.rank, "attempt": self.attempt,
                "events": self.events, "point": point, **ctx}


def _never() -> bool:
    return False


def _glob_escape(text: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in text)
