"""Append-only JSONL event log, one file per rank and attempt.

Each line is one JSON object::

    {"event": "step", "phase": "end", "t_wall": 1764467000.12, "t_mono": 8123.4,
     "rank": 0, "attempt": 0, "pid": 4242, "host": "node0", "step": 12, ...}

``phase`` is ``begin``, ``end`` or ``point`` (the MLPerf-logging convention of
marking the start, end or a point of something). ``t_wall`` is
:func:`time.time` (s since the epoch; comparable across nodes only as far as
their clocks agree); ``t_mono`` is :func:`time.monotonic` (s; CLOCK_MONOTONIC,
comparable across processes on one host). Every line is flushed when written
and ``durable=True`` events are fsynced, so a SIGKILL loses at most the line
being written; readers skip a torn last line.

Event names used by jitbench (the harness derives every metric from them):
``process`` (point, at start), ``init`` (begin/end: process group and model),
``restore`` (begin/end), ``step`` (begin/end), ``save`` (begin/end; ``kind`` is
``jit`` or ``periodic``), ``fault`` (point: a fault was injected),
``failure`` (point: this rank declared a failure; ``trigger`` says how),
``signal`` (point), ``exit`` (point: the process is about to exit), ``done``.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any


def events_path(events_dir: str | os.PathLike, attempt: int, rank: int) -> Path:
    """Path of the JSONL file of one rank in one attempt (restart count)."""
    return Path(events_dir) / f"attempt{attempt:03d}_rank{rank:05d}.jsonl"


class EventLog:
    """Thread-safe append-only JSONL writer for one rank and attempt.

    Args:
        path: the file to append to (created with its parent directory).
        rank: global rank written into every event.
        attempt: restart count (``TORCHELASTIC_RESTART_COUNT``).
    """

    def __init__(self, path: str | os.PathLike, rank: int, attempt: int) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._lock = threading.Lock()
        self._base = {"rank": rank, "attempt": attempt, "pid": os.getpid(),
                      "host": socket.gethostname()}

    @property
    def rank(self) -> int:
        """The rank written into every event (changed by :meth:`rebind`)."""
        return self._base["rank"]

    def set_base(self, **fields: Any) -> None:
        """Add or change fields written into every later event (``gen``: the
        generation of an in-process-recovering job)."""
        with self._lock:
            self._base.update(fields)

    def rebind(self, path: str | os.PathLike, rank: int, attempt: int) -> None:
        """Continue in another file, as another rank and attempt (a spare that
        was assigned a rank). The old file is closed."""
        new = Path(path)
        new.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(new, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        with self._lock:
            old, self._fd = self._fd, fd
            self.path = new
            self._base.update(rank=rank, attempt=attempt)
        if old >= 0:
            os.fsync(old)
            os.close(old)

    def emit(self, event: str, phase: str = "point", *, durable: bool = False,
             **fields: Any) -> dict:
        """Append one event and return it.

        Args:
            event: the event name (see the module docstring).
            phase: ``begin``, ``end`` or ``point``.
            durable: fsync after writing (for events that must survive a crash).
            **fields: extra JSON-able fields.
        """
        rec = {"event": event, "phase": phase, "t_wall": time.time(),
               "t_mono": time.monotonic(), **self._base, **fields}
        line = (json.dumps(rec, default=_jsonable) + "\n").encode()
        with self._lock:
            if self._fd < 0:
                return rec
            os.write(self._fd, line)
            if durable:
                os.fsync(self._fd)
        return rec

    def close(self) -> None:
        """Fsync and close the file (idempotent)."""
        with self._lock:
            if self._fd >= 0:
                try:
                    os.fsync(self._fd)
                finally:
                    os.close(self._fd)
                    self._fd = -1


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
