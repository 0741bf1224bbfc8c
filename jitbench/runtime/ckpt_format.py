"""The on-disk checkpoint format shared by every writer: errors, part names,
manifest constants, durable writes and the I/O fault hook.

:mod:`jitbench.runtime.checkpoint` (replicated ``.pt`` parts, listing,
validation, retention), :mod:`jitbench.runtime.dcp_format` (the DCP
directories of ``periodic-async``) and :mod:`jitbench.runtime.async_ckpt`
(the background writer) all build on this module; it imports none of them.

Fault injection: :func:`set_io_hook` installs a callable that the write and
load paths of checkpoint parts call before each I/O step (``write`` of each
chunk of :data:`CHUNK_BYTES`, ``fsync``, ``rename``, ``dirsync``, ``read``).
It may raise :class:`OSError` (the write then fails exactly as a real one:
:class:`CheckpointWriteError` carries the errno, nothing is left visible) or
end the process (a torn write). jitbench's storage faults use it; without a
hook the paths are unchanged.
"""

from __future__ import annotations

import errno
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MANIFEST_VERSION = 2
FORMAT = "jitbench-replicated"
"""Manifest ``format``: every part is a complete copy of the replicated state."""
COMMIT_TIME = "commit_t_wall"
"""Manifest field: wall time (s since the epoch, the writer's clock) taken right before
the manifest's durable write begins. The manifest's rename (the commit) follows within
that write, so a part whose ``commit_t_wall`` is later than an instant was not committed
at that instant. Manifests written before the field existed have none: readers use the
manifest file's ``st_mtime`` instead (its content is written, and its mtime set, right
before the rename; a copy that does not preserve mtimes makes it later, never earlier)."""
PART_RE = re.compile(r"^(?P<kind>[a-z]+)_step(?P<step>\d{8})_rank(?P<rank>\d{5})\.json$")
CHUNK_BYTES = 1 << 16
"""Parts are written in chunks of this many bytes (one ``write`` hook call each)."""

IoHook = Callable[[str, Path, int, int], None]
"""``hook(op, path, done_bytes, total_bytes)``; ``op`` is ``write`` (before each
chunk; ``done_bytes`` already in the file), ``fsync``, ``rename``, ``dirsync``
(of a file of ``total_bytes``) or ``read`` (before loading a part)."""
_io_hook: IoHook | None = None


DESCEND = object()
"""Returned by a :func:`map_state` visitor: not a leaf it replaces; look inside."""


def map_state(obj: Any, visit: Callable[[Any], Any]) -> Any:
    """``obj`` (a nested state of dicts, lists and tuples) rebuilt with every value that
    ``visit`` replaces: ``visit(x)`` gives ``x``'s replacement, or :data:`DESCEND` to
    rebuild a dict, list or tuple from its mapped items (any other value is kept as is).
    Values are visited depth first, in dict order, parents before their items.
    """

    def walk(x: Any) -> Any:
        y = visit(x)
        if y is not DESCEND:
            return y
        if isinstance(x, dict):
            return {k: walk(v) for k, v in x.items()}
        if isinstance(x, list):
            return [walk(v) for v in x]
        if isinstance(x, tuple):
            return tuple(walk(v) for v in x)
        return x

    return walk(obj)


def set_io_hook(hook: IoHook | None) -> IoHook | None:
    """Install the fault-injection hook of the part write/load paths (None: remove);
    returns the previous one."""
    global _io_hook
    prev, _io_hook = _io_hook, hook
    return prev


def io_hook() -> IoHook | None:
    """The installed fault-injection hook (None: none)."""
    return _io_hook


class CheckpointError(RuntimeError):
    """A checkpoint could not be written, or a part failed validation."""


class CheckpointCorrupt(CheckpointError):
    """A committed part does not validate (truncated, corrupt, torn manifest): skip it."""


class CheckpointMismatch(CheckpointError):
    """A part belongs to another job (world size or run id differ): refuse the directory."""


class CheckpointWriteError(CheckpointError):
    """Writing a checkpoint part failed (``errno`` holds the OS error, e.g. ENOSPC, EIO)."""

    def __init__(self, message: str, err: int | None = None) -> None:
        super().__init__(message)
        self.errno = err


@dataclass(frozen=True)
class Part:
    """A committed checkpoint part on disk (not yet validated)."""

    kind: str
    """``jit``, ``periodic`` or ``async`` (a DCP directory, see :mod:`jitbench.runtime.dcp_format`)."""
    step: int
    """Number of optimizer steps completed in the saved state."""
    rank: int
    """The rank that wrote it."""
    path: Path
    """The ``.pt`` file (``async``: the ``.dcp`` directory)."""
    manifest_path: Path


def part_name(kind: str, step: int, rank: int) -> str:
    """File stem of a part, e.g. ``jit_step00000012_rank00001``."""
    return f"{kind}_step{step:08d}_rank{rank:05d}"


def commit_stamp() -> dict:
    """``{COMMIT_TIME: now}`` for a manifest about to be written (see :data:`COMMIT_TIME`)."""
    return {COMMIT_TIME: time.time()}


def make_dirs(path: Path) -> None:
    """Create a checkpoint directory (and its parents) if missing.

    Raises:
        CheckpointWriteError: an OS error (its errno kept), e.g. a path under a regular
            file (ENOTDIR), a read-only or full filesystem.
    """
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CheckpointWriteError(
            f"creating checkpoint directory {path} failed: "
            f"{os.strerror(exc.errno or errno.EIO)}", exc.errno) from exc


def fsync_dir(path: Path) -> None:
    """fsync a directory so a rename inside it is durable (POSIX rename semantics)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_durable(path: Path, data: bytes, hook: IoHook | None = None) -> None:
    """Write ``data`` to ``path`` atomically: ``<name>.tmp``, fsync, rename, fsync the directory.

    ``hook`` (see :data:`IoHook`) is called before each I/O step.

    Raises:
        CheckpointWriteError: an OS error (its errno kept); the ``.tmp`` file is removed.
    """
    tmp = path.with_name(path.name + ".tmp")
    at = hook or (lambda *_: None)
    total = len(data)
    try:
        with open(tmp, "wb") as fh:
            view = memoryview(data)
            for off in range(0, max(total, 1), CHUNK_BYTES):
                at("write", tmp, off, total)
                fh.write(view[off:off + CHUNK_BYTES])
            fh.flush()
            at("fsync", tmp, total, total)
            os.fsync(fh.fileno())
        at("rename", path, total, total)
        os.replace(tmp, path)
        at("dirsync", path, total, total)
        fsync_dir(path.parent)
    except OSError as exc:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise CheckpointWriteError(
            f"writing {path.name} failed: {os.strerror(exc.errno or errno.EIO)}", exc.errno) from exc
