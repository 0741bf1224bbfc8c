"""Append-only JSONL event log, one file per rank and attempt.

Each line is one JSON object::

    {"event": "step", "phase": "end", "t_wall": 1764467000.12, "t_mono": 8123.4,
     "rank": 0, "attempt": 0, "pid": 4242, "host": "node0", "step": 12, ...}

``phase`` is ``begin``, ``end`` or ``point`` (the MLPerf-logging convention of
marking the start, end or a point of something). ``t_wall`` is
:func:`time.time` (s since the epoch; comparable across nodes only as far as
their clocks agree); ``t_mono`` is :func:`time.monotonic` (s; CLOCK_MONOTONIC,
comparable across processes on one host).

Writing is off the caller's thread: :meth:`EventLog.emit` stamps the event,
freezes its fields (:func:`_freeze`: containers copied, tensors read) and
queues it (a few µs on the training thread instead of 25-30 µs for encoding
and writing a line there; :meth:`EventLog.step_begin` and :meth:`EventLog.step_end`
queue a step's two events as tuples, made into the same lines by the writer:
the training thread's per-step path); a writer thread encodes the queued events in order
every :data:`FLUSH_S` (20 ms) and writes them with one ``os.write``. A ``durable=True``
event is written *by the emitting thread*, together with everything queued
before it, and fsynced before :meth:`~EventLog.emit` returns, as is
everything at :meth:`~EventLog.close` and :meth:`~EventLog.flush` and at
interpreter exit (:mod:`atexit`). Every path that ends a process on purpose
(a failure's ``exit`` event, a fault's ``fault`` event before it fires)
emits a durable event first, so no line of it is lost; a SIGKILL from outside
loses what the writer thread had not written yet (the last 20 ms at most)
and may tear the last line; readers skip a torn last line.

Event names used by jitbench (the harness derives every metric from them):
``process`` (point, at start), ``init`` (begin/end: process group and model),
``restore`` (begin/end), ``step`` (begin/end), ``save`` (begin/end; ``kind`` is
``jit`` or ``periodic``), ``fault`` (point: a fault was injected),
``failure`` (point: this rank declared a failure; ``trigger`` says how),
``signal`` (point), ``exit`` (point: the process is about to exit), ``done``.
"""

from __future__ import annotations

import atexit
import collections
import json
import os
import socket
import threading
import time
import weakref
from pathlib import Path
from typing import Any


def events_path(events_dir: str | os.PathLike, attempt: int, rank: int) -> Path:
    """Path of the JSONL file of one rank in one attempt (restart count)."""
    return Path(events_dir) / f"attempt{attempt:03d}_rank{rank:05d}.jsonl"


class EventLog:
    """Thread-safe append-only JSONL writer for one rank and attempt (written on a
    writer thread; see the module docstring for what is durable when).

    Args:
        path: the file to append to (created with its parent directory).
        rank: global rank written into every event.
        attempt: restart count (``TORCHELASTIC_RESTART_COUNT``).

    Raises:
        OSError: the file cannot be created or opened.
    """

    def __init__(self, path: str | os.PathLike, rank: int, attempt: int) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._lock = threading.Lock()  # _fd, _base; emit's queueing
        self._io = threading.Lock()  # one drain at a time: lines stay in emit order
        # events in emit order: dicts (emit) and step tuples (step_begin, step_end);
        # appended and popped without a lock (deque's append and popleft are atomic)
        self._pending: collections.deque = collections.deque()
        self._wake = threading.Event()
        self._writer: threading.Thread | None = None
        self._base = {"rank": rank, "attempt": attempt, "pid": os.getpid(),
                      "host": socket.gethostname()}
        _LIVE.add(self)

    @property
    def rank(self) -> int:
        """The rank written into every event (changed by :meth:`rebind`)."""
        return self._base["rank"]

    def set_base(self, **fields: Any) -> None:
        """Add or change fields written into every later event (``gen``: the
        generation of an in-process-recovering job)."""
        with self._lock:
            self._base = {**self._base, **fields}

    def rebind(self, path: str | os.PathLike, rank: int, attempt: int) -> None:
        """Continue in another file, as another rank and attempt (a spare that
        was assigned a rank). What was emitted before goes to the old file,
        which is fsynced and closed."""
        new = Path(path)
        new.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(new, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        with self._io:
            self._drain()
            with self._lock:
                old, self._fd = self._fd, fd
                self.path = new
                self._base = {**self._base, "rank": rank, "attempt": attempt}
            if old >= 0:
                os.fsync(old)
                os.close(old)

    def emit(self, event: str, phase: str = "point", *, durable: bool = False,
             **fields: Any) -> dict:
        """Append one event and return it.

        Args:
            event: the event name (see the module docstring).
            phase: ``begin``, ``end`` or ``point``.
            durable: written and fsynced, with every event before it, before this
                returns (for events that must survive a crash); otherwise queued
                for the writer thread.
            **fields: extra JSON-able fields (frozen now: a list or dict changed
                after the call, or a tensor stepped on, is logged as it was).

        Raises:
            OSError: a durable event could not be written or fsynced.
        """
        rec = {"event": event, "phase": phase, "t_wall": time.time(),
               "t_mono": time.monotonic(), **self._base}
        if _ATOMS.issuperset(map(type, fields.values())):  # the common case, in C
            rec.update(fields)
        else:
            for k, v in fields.items():
                rec[k] = v if type(v) in _ATOMS else _freeze(v)
        with self._lock:
            if self._fd < 0:
                return rec
            self._pending.append(rec)
        if durable:
            self.flush(fsync=True)
        elif self._writer is None:
            self._start_writer()
        return rec

    def step_begin(self, step: int, t_mono: float, cpu_s: float | None = None) -> None:
        """Queue the ``step`` begin event of ``step``: what ``emit("step", "begin",
        step=step)`` writes (``cpu_s``, :func:`time.process_time` in s, when given), with
        ``t_mono`` (s, :func:`time.monotonic`) the caller's clock read.

        The training thread's per-step path: a tuple queued without the lock, the dict
        made by the writer thread (:func:`_step_record`). Each operation costs µs right
        after a CPU training step (cold caches): with this instead of ``emit`` (and the
        strategy's flags read once), the step end beyond its snapshot went from 25.9 to
        17.3 µs (``benchmarks/runtime-step-cost.txt``, run 7, medians)."""
        if self._fd >= 0:  # a closed log queues nothing, as emit
            self._pending.append((_wall(), t_mono, self._base, step, cpu_s, None, None, None))
            if self._writer is None:
                self._start_writer()

    def step_end(self, step: int, t_mono: float, dur_s: float, rt_s: float,
                 info: dict) -> None:
        """Queue the ``step`` end event of ``step`` (as :meth:`step_begin`): what
        ``emit("step", "end", step=step, dur_s=dur_s, rt_s=rt_s, **info)`` writes, with
        ``t_mono`` (s) the caller's clock read; ``info``'s values are frozen now
        (:func:`_freeze`), the dict is not copied (the caller hands it over). A key of
        ``info`` that names one of the event's own fields (``phase``, ``step``,
        ``dur_s``, ``rank``, ...) is written as ``info.<key>`` beside it."""
        for v in info.values():  # a loop: cheaper than a cold C builtin here
            if type(v) not in _ATOMS:
                info = {k: v if type(v) in _ATOMS else _freeze(v) for k, v in info.items()}
                break
        if self._fd >= 0:
            self._pending.append((_wall(), t_mono, self._base, step, None, dur_s, rt_s, info))
            if self._writer is None:
                self._start_writer()

    def flush(self, fsync: bool = False) -> None:
        """Write every queued event now, on this thread (and fsync with ``fsync``).

        Raises:
            OSError: the write or the fsync failed.
        """
        with self._io:
            fd = self._drain()
            if fsync and fd >= 0:
                os.fsync(fd)

    def _drain(self) -> int:
        """Encode and write the queued events (hold ``_io``); returns the file descriptor."""
        batch, pop = [], self._pending.popleft
        try:
            while True:
                batch.append(pop())
        except IndexError:  # empty
            pass
        with self._lock:
            fd = self._fd
        if batch and fd >= 0:
            data = "".join([_line(r) + "\n" for r in batch]).encode()
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        return fd

    def _start_writer(self) -> None:
        with self._lock:
            if self._writer is not None or self._fd < 0:
                return
            self._writer = threading.Thread(target=self._write_loop, daemon=True,
                                            name=f"jitbench-events-{self._base['rank']}")
            self._writer.start()

    def _write_loop(self) -> None:
        # not woken per event: a wake-up at the step end would ask the training thread for
        # the GIL right when it runs Python; every FLUSH_S it mostly finds it released
        # (the training thread inside a torch kernel)
        while not self._wake.wait(FLUSH_S):
            if self._pending:
                try:
                    with self._io:
                        self._drain()
                except OSError:  # a full disk: durable events and close() raise it
                    pass

    def close(self) -> None:
        """Write what is queued, fsync and close the file, stop the writer thread
        (idempotent)."""
        with self._io:
            self._drain()
            with self._lock:
                fd, self._fd = self._fd, -1
            if fd >= 0:
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        self._wake.set()  # the writer sees the closed file and ends
        _LIVE.discard(self)


_wall = time.time


def _step_record(t: tuple) -> dict:
    """The event dict of a queued step tuple (:meth:`EventLog.step_begin`,
    :meth:`EventLog.step_end`), keys in ``emit``'s order."""
    t_wall, t_mono, base, step, cpu_s, dur_s, rt_s, info = t
    if info is None:
        rec = {"event": "step", "phase": "begin", "t_wall": t_wall, "t_mono": t_mono, **base,
               "step": step}
        if cpu_s is not None:
            rec["cpu_s"] = cpu_s
        return rec
    rec = {"event": "step", "phase": "end", "t_wall": t_wall, "t_mono": t_mono, **base,
           "step": step, "dur_s": dur_s, "rt_s": rt_s}
    for k, v in info.items():
        if k in rec:  # the caller's "phase", "step", "rank", ...: kept beside the event's own
            rec[f"info.{k}"] = v
        else:
            rec[k] = v
    return rec


def _line(r: dict | tuple) -> str:
    """One queued event (a dict from ``emit``, a step tuple) as its JSON line, no newline.

    Never raises: a key JSON cannot write (a tuple, anywhere in the event) is written as
    its ``str``, so one odd field never costs the writer thread its batch."""
    rec = r if type(r) is dict else _step_record(r)
    try:
        return json.dumps(rec, default=_jsonable)
    except TypeError:  # keys only: every value has a default
        return json.dumps(_str_keys(rec), default=_jsonable)


def _str_keys(v: Any) -> Any:
    """``v`` with every dict key that JSON cannot write (not str, int, float, bool or None)
    made its ``str``, at every depth."""
    if type(v) is dict:
        return {k if type(k) in _ATOMS else str(k): _str_keys(x) for k, x in v.items()}
    if type(v) is list:
        return [_str_keys(x) for x in v]
    return v


FLUSH_S = 0.02
"""How often (s) the writer thread writes the queued events: what a SIGKILL from
outside can lose at most, besides a torn last line."""
_ATOMS = frozenset((int, float, bool, str, type(None)))
_LIVE: weakref.WeakSet = weakref.WeakSet()
"""Open event logs, flushed at interpreter exit."""


def _freeze(v: Any) -> Any:
    """``v`` as it is now, for an event encoded later: lists, tuples and dicts copied
    (tuples as lists, as JSON writes them), atoms kept, anything else converted now
    (:func:`_jsonable`: a tensor's value, a path's string)."""
    t = type(v)
    if t in _ATOMS:
        return v
    if t is list or t is tuple:
        return [_freeze(x) for x in v]
    if t is dict:
        return {k: _freeze(x) for k, x in v.items()}
    if isinstance(v, (int, float, str)):  # an enum, numpy's float64: JSON writes them as is
        return v
    return _jsonable(v)


@atexit.register
def _flush_all() -> None:
    for log in list(_LIVE):
        try:
            log.flush(fsync=True)
        except OSError:
            pass


def _jsonable(obj: Any) -> Any:
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    return repr(obj)


def read_events(events_dir: str | os.PathLike) -> list[dict]:
    """All events of a run directory's ``events/`` folder, sorted by time.

    A torn last line (the writer was killed mid-write) is skipped.
    """
    out: list[dict] = []
    for f in sorted(Path(events_dir).glob("attempt*_rank*.jsonl")):
        with open(f, encoding="utf-8") as fh:
            for line in fh:
                line = line.strip()
                if not line:
                    continue
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
    out.sort(key=lambda e: (e["t_mono"], e["attempt"], e["rank"]))
    return out
