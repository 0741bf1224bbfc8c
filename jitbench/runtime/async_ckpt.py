"""Asynchronous periodic checkpoints (baseline ``periodic-async:N``).

Every N steps rank 0 hands the state to
:func:`torch.distributed.checkpoint.async_save` (DCP; PyTorch docs,
"Distributed Checkpoint - torch.distributed.checkpoint", ``async_save``) and
returns to training while a background thread writes it.

What is saved is the state *at the moment of the request*: the request
first copies every tensor into host staging buffers
(:func:`jitbench.runtime.staging.stage_for_async_save`, reused from one save
to the next; on GPU this is the device-to-host copy), then hands the copy to
``async_save`` with a stager that passes it on as it is (``_Staged``: DCP's
default stager would copy it a second time). The optimizer keeps stepping on
the live tensors, the writer thread reads only the copy. The main thread's
stall is this staging copy plus, when the previous save is still writing, the
wait for it (at most one save is in flight, as in torchtitan's async
checkpointing; the staging buffers are reused only after it completed).

Commit rule (the same as :mod:`jitbench.runtime.checkpoint`): DCP writes into
``<stem>.dcp.tmp/``; when the writer's future completes, the directory is
renamed to ``<stem>.dcp`` and a manifest ``<stem>.json`` (step, world size,
size and SHA-256 of every file, the layout of every tensor) is written
atomically; the manifest's rename is the commit. A save that is still writing
when the process dies leaves only a ``.tmp`` directory, which restore never
looks at, so restore picks the newest *completed* checkpoint.

The on-disk format (and its reader) is :mod:`jitbench.runtime.dcp_format`.

Fault injection: the background thread calls the I/O hook of
:mod:`jitbench.runtime.ckpt_format` as the other writers do, once DCP's upload has
completed and before anything is durable: ``write`` once per file DCP wrote (with
the bytes written up to it and the save's total: a torn write dies with the
directory still ``.tmp``), then ``fsync`` (of the ``.tmp`` directory), ``rename``
and ``dirsync``. DCP's own file writes happen inside its writer, which
offers no per-chunk hook; an OS error there fails the save the same way.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import torch.distributed.checkpoint as dcp

from jitbench.runtime import checkpoint as ckpt
from jitbench.runtime.dcp_format import (
    KIND,
    SKELETON_KEY,
    file_digests,
    skeleton_tensor,
    split_state,
)
from jitbench.runtime.events import EventLog
from jitbench.runtime.staging import stage_for_async_save


class _Staged:
    """DCP ``AsyncStager`` for a state that is already a private staged copy: hands
    it on unchanged (``torch.distributed.checkpoint.staging.AsyncStager`` protocol)."""

    _synchronize_after_execute = False

    @property
    def should_synchronize_after_execute(self) -> bool:
        return False

    def stage(self, state_dict: dict) -> dict:
        return state_dict

    def synchronize_staging(self) -> None:
        pass

    def close(self) -> None:
        pass


def _hooked_files(d: Path, at) -> None:
    """Call ``at("write", file, done, total)`` for each file of ``d`` (see the module
    docstring); ``done`` counts the bytes written up to and including that file."""
    files = sorted(f for f in d.iterdir() if f.is_file())
    sizes = [f.stat().st_size for f in files]
    total, done = sum(sizes), 0
    for f, size in zip(files, sizes, strict=True):
        done += size
        at("write", f, done, total)


def _fsync_files(d: Path) -> None:
    for f in d.iterdir():
        if f.is_file():
            fd = os.open(f, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    ckpt.fsync_dir(d)


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            path.unlink()
        except FileNotFoundError:
            pass


class AsyncCheckpointer:
    """Writes periodic checkpoints with DCP ``async_save`` (one in flight at a time).

    Args:
        ckpt_dir: checkpoint directory (shared by all ranks).
        rank: the writing rank (recorded in the part name).
        world_size: recorded in the manifest (restore checks it).
        events: the rank's event log (``stage`` begin/end on the main thread;
            ``save`` begin at the request, ``save`` end at the commit, from the
            writer thread).
        keep_steps: committed steps kept after each commit (older ones pruned).
        run_id: identity of the training job, recorded in the manifest (restore
            refuses parts of another job).
    """

    def __init__(self, ckpt_dir: str | os.PathLike, rank: int, world_size: int, events: EventLog,
                 keep_steps: int = 2, run_id: str = "") -> None:
        self.dir = Path(ckpt_dir)
        self.run_id = run_id
        self.rank, self.world_size, self.events, self.keep_steps = rank, world_size, events, keep_steps
        self._inflight: Future | None = None
        self._staged: Any = None  # staging buffers, reused once the save reading them is done
        self._commit_lock = threading.Lock()
        self._frozen = False
        self._done = threading.Event()
        self._done.set()
        self.committed: list[int] = []
        """Steps committed by this process, in order."""

    def request(self, step: int, state: dict, meta: dict | None = None) -> float:
        """Stage a copy of ``state`` now and write it in the background.

        Returns:
            The main thread's stall (s): the wait for the previous save plus staging.
        """
        t0 = time.monotonic()
        self.events.emit("stage", "begin", kind=KIND, step=step)
        waited_s = self.wait()
        self.dir.mkdir(parents=True, exist_ok=True)
        stem = ckpt.part_name(KIND, step, self.rank)
        tmp, final, manifest = (self.dir / f"{stem}.dcp.tmp", self.dir / f"{stem}.dcp",
                                self.dir / f"{stem}.json")
        for p in (manifest, final, tmp):  # a previous attempt's leftovers of the same step
            _remove(p)
        self._staged = stage_for_async_save(state, into=self._staged)  # the copy: stall
        tensors, skeleton = split_state(self._staged)
        payload = {**tensors, SKELETON_KEY: skeleton_tensor(skeleton)}
        layout = {k: [list(t.shape), str(t.dtype).removeprefix("torch.")]
                  for k, t in payload.items()}
        self.events.emit("save", "begin", kind=KIND, step=step, durable=True)
        self._done.clear()
        try:
            fut = dcp.async_save(payload, storage_writer=dcp.FileSystemWriter(str(tmp)),
                                 no_dist=True, async_stager=_Staged())
        except BaseException:
            self._done.set()
            raise
        # the writer reads self._staged only: the live state may change now
        upload = fut.upload_completion if hasattr(fut, "upload_completion") else fut
        self._inflight = upload
        stall_s = time.monotonic() - t0
        self.events.emit("stage", "end", kind=KIND, step=step, dur_s=stall_s, waited_s=waited_s)
        # the commit (fsync, rename, manifest) runs in a thread of its own: a callback
        # added to an upload that has already finished runs at once, in this (the
        # training) thread, which would then wait for the fsyncs
        upload.add_done_callback(lambda f: threading.Thread(
            target=self._commit, args=(f, step, tmp, final, manifest, layout, meta or {}, t0),
            name="jitbench-async-commit", daemon=True).start())
        return stall_s

    def _commit(self, fut: Future, step: int, tmp: Path, final: Path, mpath: Path, layout: dict,
                meta: dict, t0: float) -> None:
        at = ckpt.io_hook() or (lambda *_: None)
        try:
            fut.result()
            _hooked_files(tmp, at)
            at("fsync", tmp, 0, 0)
            _fsync_files(tmp)
            at("rename", final, 0, 0)
            os.replace(tmp, final)
            at("dirsync", final, 0, 0)
            ckpt.fsync_dir(self.dir)
            files = file_digests(final)
            manifest = {"manifest_version": ckpt.MANIFEST_VERSION, "kind": KIND,
                        "format": ckpt.FORMAT, "storage": "dcp", "parts_needed": 1,
                        "step": step, "rank": self.rank, "world_size": self.world_size,
                        "run_id": self.run_id, "bytes": sum(s for s, _ in files.values()), "files": files,
                        "tensors": layout, "meta": meta}
            with self._commit_lock:  # the commit and its event, or neither (see freeze)
                if self._frozen:
                    return
                manifest.update(ckpt.commit_stamp())
                ckpt.write_durable(mpath, json.dumps(manifest, sort_keys=True).encode())
                self.committed.append(step)
                self.events.emit("save", "end", kind=KIND, step=step, ok=True, part=final.name,
                                 bytes=manifest["bytes"], dur_s=time.monotonic() - t0,
                                 durable=True)
            ckpt.prune(self.dir, self.keep_steps)
        except BaseException as exc:  # noqa: BLE001 - a failed async save leaves the last good one
            _remove(tmp)  # nothing half-written stays behind
            self.events.emit("save", "end", kind=KIND, step=step, ok=False,
                             error=f"{type(exc).__name__}: {exc}"[:500], durable=True)
        finally:
            self._done.set()

    def freeze(self, timeout_s: float = 10.0) -> None:
        """The process is ending (failure): commit nothing from now on. A commit already
        writing its manifest finishes first, with its ``save`` end event, so every
        committed checkpoint has its event before the event log closes (metrics
        derive the newest committed step from events). The lock stays held."""
        if self._commit_lock.acquire(timeout=timeout_s):
            self._frozen = True

    def wait(self, timeout_s: float | None = None) -> float:
        """Block until the in-flight save has committed (or failed); returns the wait (s)."""
        t0 = time.monotonic()
        self._done.wait(timeout_s)
        return time.monotonic() - t0

    @property
    def busy(self) -> bool:
        """A save is being written."""
        return not self._done.is_set()
