"""Storage faults: checkpoint writes that fail, are torn, or are silently corrupted.

``enospc``, ``eio`` and ``torn-write`` act inside the real checkpoint write
path: :func:`install_io_hook` installs :func:`jitbench.runtime.checkpoint.set_io_hook`,
which ``write_part`` calls before each I/O operation of a part's commit
(``write`` of each 64 KiB chunk, ``fsync``, ``rename``, ``dirsync``; the same
again for the manifest) and ``load_part`` before loading (``read``). They fire
at the first such operation at or after their step (``step`` of the save in
progress) that meets their condition.

``enospc``
    The checkpoint filesystem is full (field case C11: room for about 1.5
    checkpoints). An unprivileged test cannot mount a small filesystem, so it
    is emulated: from the first part written at or after step k, the
    directory's capacity is its usage then plus ``room_ckpts`` times that
    part's size, and a chunk write that would take the directory's usage (all
    files in it, the partial temp file included, as ``du`` counts) past the
    capacity raises ``OSError(ENOSPC)``, as ``write(2)`` does. Retention that
    frees space frees it here too. The writer gets
    :class:`~jitbench.runtime.checkpoint.CheckpointWriteError` (errno 28), the
    temp file is removed, older parts stay. A periodic save failing on rank 0
    posts a notice to its peers (they are in the checkpoint barrier: they leave
    at once with "No space left on device" as the reason) and ends the rank.
    The emulation lasts for the attempt it fired in (the restarted job finds
    space again, as after an operator cleans up).
``eio``
    A disk or network-filesystem I/O error (a failing drive, an NFS server
    gone). Produced by raising ``OSError(EIO)`` at ``op=fsync`` of the part's
    data file (where write-back errors surface on Linux) or at a ``write``
    once ``at_frac`` of it is written. Same outcome as ``enospc`` with errno 5.
``torn-write``
    The writing rank dies in the middle of a checkpoint write (field case
    C2): a node crash, an OOM kill, SIGKILL at the end of a grace period.
    Produced with SIGKILL at one I/O operation of the commit sequence, chosen
    by ``frac`` (default: drawn from the run's seed and the fault's id, so it
    is replayable): operation ``floor(frac x n)`` of the ``n = chunks + 7``
    operations (data chunks, fsync, rename, dirsync, then the manifest's
    write, fsync, rename, dirsync). Whatever the instant, the checkpoint path
    holds the previous complete part or the new complete one (the manifest's
    rename is the commit); a torn temp file is never a visible part. Peers see
    the writer's collective (the checkpoint barrier, or their own save's end)
    fail; resume picks the newest valid part. Moved to a JIT save it is "a
    second fault while the JIT checkpoint is being written".
``corrupt``
    Silent corruption of a committed checkpoint (bit rot, a buggy copy tool,
    a torn page on a filesystem without checksums). Produced at the start of
    step k by flipping (XOR 0xFF) ``nbytes`` bytes at offsets drawn from the
    seed in every part of the newest committed step, in place, leaving the
    manifest. Nothing fails then; at the next restore the SHA-256 check
    rejects those parts, the restore falls back to the newest valid one and
    its ``restore`` end event lists them in ``skipped`` (the summary in
    ``restore_skipped``).

Sources: Linux ``write(2)`` and ``fsync(2)`` man pages (ENOSPC: "the device
containing the file has no room for the data"; EIO: "a low-level I/O error
occurred"; write-back errors are reported by a later ``fsync``), "PostgreSQL's
fsync() surprise", LWN.net, 2018 (https://lwn.net/Articles/752063/).
"""

from __future__ import annotations

import errno
import os
import re
import signal
from pathlib import Path
from typing import Any

from jitbench.faults.base import Fault, FaultSpec, Injector, Param
from jitbench.runtime import ckpt_format as ckpt

_STEP_RE = re.compile(r"_step(\d{8})_rank")


def install_io_hook(injector: Injector) -> None:
    """Route the checkpoint write/load path's I/O operations to ``injector``:
    writes to the ``write`` point at the step in progress, loads to the
    ``restore`` point at the step the restore resumes at."""

    def hook(op: str, path: Path, done: int, total: int) -> None:
        if op == "read":
            m = _STEP_RE.search(path.name)
            injector.at("restore", int(m[1]) + 1 if m else 1, op=op, path=path, done=done,
                        total=total)
        else:
            injector.at("write", injector.step, op=op, path=path, done=done, total=total)

    ckpt.set_io_hook(hook)


def dir_usage_bytes(d: Path) -> int:
    """Bytes of the regular files directly in ``d`` (what the emulated disk holds)."""
    total = 0
    try:
        with os.scandir(d) as it:
            for e in it:
                try:
                    if e.is_file(follow_symlinks=False):
                        total += e.stat(follow_symlinks=False).st_size
                except FileNotFoundError:
                    continue
    except FileNotFoundError:
        pass
    return total


def is_data_write(path: Path) -> bool:
    """Whether an I/O hook call's ``path`` is checkpoint *data* (not a manifest): a
    replicated part's ``.pt`` file (or its ``.tmp``), or a DCP directory of
    ``periodic-async`` (``async_*.dcp.tmp``, its files, or the renamed ``.dcp``)."""
    n, parent = path.name, path.parent.name
    if n.startswith(("jit_", "periodic_")) and n.endswith((".pt.tmp", ".pt")):
        return True
    if n.startswith("async_") and n.endswith((".dcp.tmp", ".dcp")):
        return True
    return parent.startswith("async_") and parent.endswith(".dcp.tmp")


class FillFilesystem(Fault):
    """Emulated full filesystem: ENOSPC once the directory outgrows its capacity."""

    name = "enospc"
    family = "storage"
    movable = False
    point = "write"
    summary = ("checkpoint filesystem full from step k (room_ckpts parts of room): the "
               "write fails with ENOSPC (C11)")
    params = {"room_ckpts": Param(float, 0.5, "free space when armed, in sizes of the first "
                                  "part written (e.g. 1.5)", low=0.0)}

    def __init__(self, spec: FaultSpec) -> None:
        super().__init__(spec)
        self.capacity_bytes: int | None = None

    def due(self, ctx: dict[str, Any]) -> bool:
        if ctx.get("op") != "write":
            return False
        path: Path = ctx["path"]
        if path.parent.name.endswith(".tmp"):
            # a file of a directory part being committed (periodic-async's DCP part):
            # ``done`` counts the part's bytes so far, the rest is the checkpoint dir's
            used = dir_usage_bytes(path.parent.parent) + ctx["done"]
        else:
            try:
                in_tmp = path.stat().st_size
            except OSError:
                in_tmp = 0
            used = dir_usage_bytes(path.parent) - in_tmp + ctx["done"]
        if self.capacity_bytes is None:
            self.capacity_bytes = used + int(self.p["room_ckpts"] * ctx["total"])
        chunk = min(ckpt.CHUNK_BYTES, max(0, ctx["total"] - ctx["done"]))
        return used + chunk > self.capacity_bytes

    def event_fields(self, ctx: dict[str, Any]) -> dict:
        return {"file": ctx["path"].name, "done_bytes": ctx["done"],
                "total_bytes": ctx["total"], "capacity_bytes": self.capacity_bytes}

    def fire(self, ctx: dict[str, Any]) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(ctx["path"]))


class FailStorageIo(Fault):
    """EIO at the fsync (or a write) of the next checkpoint part's data file."""

    name = "eio"
    family = "storage"
    movable = False
    point = "write"
    summary = "the next checkpoint write from step k fails with EIO (at fsync by default)"
    params = {
        "op": Param(str, "fsync", "operation that fails", choices=("fsync", "write")),
        "at_frac": Param(float, 0.5, "fraction of the file written when a write fails "
                         "(op write)", low=0.0, high=1.0, high_open=True),
    }

    def due(self, ctx: dict[str, Any]) -> bool:
        if ctx.get("op") != self.p["op"] or not is_data_write(ctx["path"]):
            return False  # the data, not the manifest
        return self.p["op"] != "write" or ctx["done"] >= self.p["at_frac"] * ctx["total"]

    def event_fields(self, ctx: dict[str, Any]) -> dict:
        return {"file": ctx["path"].name, "op": ctx["op"], "done_bytes": ctx["done"],
                "total_bytes": ctx["total"]}

    def fire(self, ctx: dict[str, Any]) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO), str(ctx["path"]))


class TearWrite(Fault):
    """SIGKILL the writer at one I/O operation of a checkpoint commit."""

    name = "torn-write"
    family = "storage"
    movable = False
    point = "write"
    summary = ("SIGKILL the writing rank at a (seeded) random instant inside its next "
               "checkpoint write from step k (C2)")
    params = {"frac": Param(float, None, "instant as a fraction of the commit's I/O "
                            "operations; default drawn from the seed", low=0.0, high=1.0,
                            high_open=True)}

    MANIFEST_OPS = 4
    """write (one chunk), fsync, rename, dirsync."""

    def __init__(self, spec: FaultSpec) -> None:
        super().__init__(spec)
        self._n_ops: int | None = None
        self._index = -1
        self._target = -1

    @staticmethod
    def commit_ops(total_bytes: int) -> int:
        """I/O operations of one replicated part's commit (data file of ``total_bytes``;
        a ``periodic-async`` commit counts one write per file instead)."""
        chunks = max(1, -(-total_bytes // ckpt.CHUNK_BYTES))
        return chunks + 3 + TearWrite.MANIFEST_OPS

    def due(self, ctx: dict[str, Any]) -> bool:
        path: Path = ctx["path"]
        if self._n_ops is None:
            if ctx["op"] == "write" and ctx["done"] == 0 and path.name.endswith(".pt.tmp"):
                self._n_ops = self.commit_ops(ctx["total"])
            elif ctx["op"] == "write" and is_data_write(path) and path.parent.is_dir() \
                    and path.parent.name.endswith(".dcp.tmp"):
                # periodic-async: one write per file DCP wrote, fsync, rename, dirsync
                files = sum(1 for f in path.parent.iterdir() if f.is_file())
                self._n_ops = files + 3 + self.MANIFEST_OPS
            else:
                return False  # start counting at the first write of a commit's data
            frac = self.p["frac"] if self.p["frac"] is not None else self.rng(ctx).random()
            self._target = min(self._n_ops - 1, int(frac * self._n_ops))
        self._index += 1
        return self._index >= self._target

    def event_fields(self, ctx: dict[str, Any]) -> dict:
        return {"file": ctx["path"].name, "op": ctx["op"], "done_bytes": ctx["done"],
                "total_bytes": ctx["total"], "op_index": self._index, "ops": self._n_ops}

    def fire(self, ctx: dict[str, Any]) -> None:
        ctx["events"].close()
        os.kill(os.getpid(), signal.SIGKILL)


class CorruptCheckpoint(Fault):
    """Flip bytes in every part of the newest committed checkpoint step."""

    name = "corrupt"
    family = "storage"
    movable = False
    point = "step"
    fails_job = False
    summary = ("flip bytes in the newest committed checkpoint at step k; restore falls back "
               "to the newest valid one")
    params = {"nbytes": Param(int, 64, "bytes flipped per part", low=1)}

    def __init__(self, spec: FaultSpec) -> None:
        super().__init__(spec)
        self._targets: list[ckpt.Part] = []

    def event_fields(self, ctx: dict[str, Any]) -> dict:
        from jitbench.runtime.checkpoint import list_parts  # torch: only when it fires

        parts = list_parts(ctx["ckpt_dir"])
        newest = parts[0].step if parts else None
        self._targets = [p for p in parts if p.step == newest]
        return {"corrupted": [p.path.name for p in self._targets], "corrupted_step": newest}

    def fire(self, ctx: dict[str, Any]) -> None:
        rng = self.rng(ctx)
        for part in self._targets:
            size = part.path.stat().st_size
            if size == 0:
                continue
            fd = os.open(part.path, os.O_RDWR)
            try:
                for off in sorted(rng.sample(range(size), min(self.p["nbytes"], size))):
                    b = os.pread(fd, 1, off)
                    os.pwrite(fd, bytes([b[0] ^ 0xFF]), off)
                os.fsync(fd)
            finally:
                os.close(fd)
