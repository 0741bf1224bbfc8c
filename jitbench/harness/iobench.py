"""State at disk speed: the disk's own bandwidth against jitbench's checkpoint paths.

One run (:func:`run_io_bench`, ``jitbench io``) measures, on one checkpoint
directory and with the state of one model size (GPT-2 124M with AdamW: about
1.5 GB):

- ``disk write``: the disk's sequential write bandwidth as the checkpoint path
  pays it: a file of the state's size written with ``os.write`` in blocks of
  :data:`BLOCK_BYTES`, ``fsync``, close, then an ``fsync`` of the directory;
- ``disk read``: that file read back with ``os.readv`` in the same blocks, after
  ``posix_fadvise(POSIX_FADV_DONTNEED)`` on it (its pages are clean after the
  fsync, so the kernel drops them from the page cache: the read comes from the
  device; POSIX.1-2008 ``posix_fadvise``, Linux ``mm/fadvise.c``);
- ``jit save``: :func:`jitbench.runtime.checkpoint.write_part` of the state
  (``torch.save`` to memory, write + fsync + rename + directory fsync, SHA-256,
  manifest written the same way), as one survivor writes its JIT part;
- ``restore``: :func:`~jitbench.runtime.checkpoint.load_part` (read, size and
  SHA-256 check, ``torch.load(weights_only=True)``, layout check) with the part's
  pages dropped first, and ``restore as run`` which adds the choice of the part
  (:func:`~jitbench.runtime.checkpoint.newest_valid`, which reads and hashes the
  part too) as :meth:`jitbench.runtime.core.Runtime.restore` does on rank 0;
- ``periodic``: the synchronous baseline's save, the same ``write_part``: its
  blocking time is its total time;
- ``periodic-async``: :class:`~jitbench.runtime.async_ckpt.AsyncCheckpointer`
  (DCP ``async_save``): blocking = the staging copy (``request``'s stall), total =
  until the part is committed (``wait``);
- ``split R``: R writers (threads of this process) each write slice r of R of
  the state (``write_part(..., slice_of=(r, R))``) into the same directory at
  once; the time is until the last commits. ``split restore R`` loads and merges
  the R slices.

Every figure is the median of ``repeats``; MB are 10^6 bytes; a ratio is the
row's MB/s over the disk's (write rows over ``disk write``, read rows over
``disk read``). Threads share one process, so the split rows show what one
machine's disk and cores give R writers; on R machines writing to a shared
filesystem each writer serialises and hashes only its slice.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

BLOCK_BYTES = 8 << 20
"""Block of the raw disk measurement (8 MiB)."""
MB = 1e6
"""Bytes per MB in every figure (decimal, as disk vendors quote)."""

WRITE_ROWS = ("jit save", "periodic (blocking = total)", "periodic-async blocking",
              "periodic-async total")
"""Rows whose ratio is to the disk's write bandwidth (and the ``split`` rows)."""


@dataclass
class Row:
    """One measurement: ``what``, ``mb`` (10^6 bytes moved), ``seconds`` (median)."""

    what: str
    mb: float
    seconds: float
    mb_s: float = 0.0
    ratio: float | None = None
    """MB/s over the disk's bandwidth in the same direction (None: the disk rows)."""
    repeats: list[float] | None = None
    """Every repeat's seconds."""


def mb_s(nbytes: int | float, seconds: float) -> float:
    """Throughput in MB/s (10^6 bytes per second); 0 for a zero time."""
    return nbytes / MB / seconds if seconds > 0 else 0.0


def make_row(what: str, nbytes: int | float, times: list[float]) -> Row:
    """A row of the median of ``times`` (s) for ``nbytes`` moved."""
    med = statistics.median(times)
    return Row(what, nbytes / MB, med, mb_s(nbytes, med), None, list(times))


def add_ratios(rows: list[Row]) -> list[Row]:
    """Set every row's ratio to the disk's bandwidth: rows named ``restore``/``split restore``
    over ``disk read``, the others over ``disk write``; the disk rows keep None.

    Raises:
        ValueError: a disk row is missing.
    """
    disk = {r.what: r.mb_s for r in rows if r.what in ("disk write", "disk read")}
    if set(disk) != {"disk write", "disk read"}:
        raise ValueError("the disk write and disk read rows are both needed")
    for r in rows:
        if r.what in disk:
            continue
        ref = disk["disk read" if "restore" in r.what else "disk write"]
        r.ratio = r.mb_s / ref if ref > 0 else None
    return rows


def drop_cache(path: Path) -> None:
    """Drop ``path``'s clean pages from the page cache (``POSIX_FADV_DONTNEED``; every file
    of a directory). Dirty pages are not dropped: call it after an fsync."""
    files = [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else [path]
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def disk_write(path: Path, nbytes: int, block: bytes) -> float:
    """Write ``nbytes`` to ``path`` in ``block``-sized ``os.write`` calls, fsync, close,
    fsync the directory; returns the seconds."""
    from jitbench.runtime.ckpt_format import fsync_dir

    view = memoryview(block)
    t0 = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        left = nbytes
        while left > 0:
            left -= os.write(fd, view[:min(left, len(view))])
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(path.parent)
    return time.perf_counter() - t0


def disk_read(path: Path, block_bytes: int = BLOCK_BYTES) -> float:
    """Drop ``path`` from the page cache, then read it whole in ``block_bytes`` reads;
    returns the seconds."""
    drop_cache(path)
    buf = bytearray(block_bytes)
    t0 = time.perf_counter()
    fd = os.open(path, os.O_RDONLY)
    try:
        while os.readv(fd, [buf]) > 0:
            pass
    finally:
        os.close(fd)
    return time.perf_counter() - t0


def make_state(size: str, seed: int = 0) -> dict:
    """The checkpoint state of a GPT ``size``: model, AdamW with both moments (one step
    with zero gradients creates them), scheduler, step, as a runtime part holds them."""
    import torch

    from jitbench.workloads.gpt import GPT, SIZES

    torch.manual_seed(seed)
    model = GPT(SIZES[size])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return {"model": model.state_dict(), "optimizer": opt.state_dict(), "scheduler": {},
            "scaler": {}, "rng": {}, "data": {"step": 1}, "extra": {}, "step": 1}


def _timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _clear(d: Path) -> None:
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)


def _split_save(d: Path, state: dict, count: int) -> tuple[float, int]:
    """R writer threads write their slices at once; returns (seconds to the last commit,
    bytes of all slices)."""
    from jitbench.runtime import checkpoint as ckpt

    errors: list[BaseException] = []

    def write(r: int) -> None:
        try:
            ckpt.write_part(d, "jit", 1, r, count, state, slice_of=(r, count), run_id="io")
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(r,)) for r in range(count)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    dt = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return dt, sum(p.stat().st_size for p in d.glob("*.pt"))


def run_io_bench(ckpt_dir: Path, state: dict, repeats: int = 3,
                 replicas: tuple[int, ...] = (1, 2, 4),
                 progress: Callable[[str], None] | None = None) -> list[Row]:
    """Measure every row of the module docstring on ``ckpt_dir`` (emptied and reused;
    left empty) with ``state``; returns the rows with ratios (:func:`add_ratios`).

    Raises:
        OSError, CheckpointError: the directory cannot be written or read.
    """
    from jitbench.runtime import checkpoint as ckpt
    from jitbench.runtime.async_ckpt import AsyncCheckpointer
    from jitbench.runtime.events import EventLog

    say = progress or (lambda _: None)
    d = Path(ckpt_dir)
    _clear(d)
    # one writer for every repeat: its staging buffers are reused, as in training
    events = EventLog(Path(tempfile.mkdtemp(prefix="jitbench-io-")) / "events.jsonl", 0, 0)
    writer = AsyncCheckpointer(d, 0, 1, events, run_id="io")
    # the state's size on disk: one JIT part
    part = ckpt.write_part(d, "jit", 1, 0, 1, state, run_id="io")
    nbytes = part.path.stat().st_size
    block = os.urandom(BLOCK_BYTES)
    t: dict[str, list[float]] = {}
    sizes: dict[str, int] = {}

    def add(what: str, seconds: float, moved: int) -> None:
        t.setdefault(what, []).append(seconds)
        sizes[what] = moved

    for i in range(repeats):
        say(f"repeat {i + 1}/{repeats}: disk")
        _clear(d)
        raw = d / "raw.bin"
        add("disk write", disk_write(raw, nbytes, block), nbytes)
        add("disk read", disk_read(raw), nbytes)
        raw.unlink()
        say(f"repeat {i + 1}/{repeats}: jit save, restore")
        _clear(d)
        t0 = time.perf_counter()
        p = ckpt.write_part(d, "jit", 1, 0, 1, state, run_id="io")
        add("jit save", time.perf_counter() - t0, nbytes)
        drop_cache(d)
        add("restore (load_part)", _timed(lambda p=p: ckpt.load_part(p, 1, "io")), nbytes)
        drop_cache(d)

        def restore_as_run() -> None:
            found = ckpt.newest_valid(d, 1, run_id="io")
            assert found is not None
            ckpt.load_part(found[0], 1, "io")

        add("restore as run (newest_valid + load_part)", _timed(restore_as_run), nbytes)
        say(f"repeat {i + 1}/{repeats}: periodic, periodic-async")
        _clear(d)
        add("periodic (blocking = total)", _timed(
            lambda: ckpt.write_part(d, "periodic", 1, 0, 1, state, run_id="io")), nbytes)
        _clear(d)
        t0 = time.perf_counter()
        with warnings.catch_warnings():  # DCP: "assuming the intent is to save in a single process"
            warnings.simplefilter("ignore", UserWarning)
            stall = writer.request(1, state)
            writer.wait()
        total = time.perf_counter() - t0
        if writer.committed[-1:] != [1]:
            raise ckpt.CheckpointError("the periodic-async save did not commit")
        async_bytes = sum(f.stat().st_size for f in d.glob("*.dcp/*") if f.is_file())
        add("periodic-async blocking", stall, async_bytes)
        add("periodic-async total", total, async_bytes)
        writer.committed.clear()
        for r in replicas:
            say(f"repeat {i + 1}/{repeats}: split {r}")
            _clear(d)
            dt, moved = _split_save(d, state, r)
            add(f"split save R={r}", dt, moved)
            drop_cache(d)
            first = ckpt.list_parts(d)[0]
            add(f"split restore R={r}", _timed(
                lambda first=first, r=r: ckpt.load_part(first, r, "io")), moved)
    _clear(d)
    rows = [make_row(what, sizes[what], times) for what, times in t.items()]
    return add_ratios(rows)


def machine() -> dict:
    """The machine the figures were measured on: cores, RAM (GiB), load averages, torch."""
    info: dict[str, Any] = {"cpus": os.cpu_count()}
    try:
        pages, page = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        info["ram_gib"] = round(pages * page / 2**30, 1)
    except (ValueError, OSError):
        pass
    try:
        info["loadavg"] = list(os.getloadavg())
    except OSError:
        pass
    return info


def filesystem(path: Path) -> dict:
    """The filesystem of ``path``: type and mount point (``/proc/self/mounts``, the longest
    mount prefix), free bytes (``statvfs``)."""
    real = os.path.realpath(path)
    best = ("", "?", "?")
    try:
        with open("/proc/self/mounts") as fh:
            for line in fh:
                dev, mnt, fstype = line.split()[:3]
                if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) \
                        and len(mnt) >= len(best[0]):
                    best = (mnt, fstype, dev)
    except OSError:
        pass
    st = os.statvfs(real)
    return {"path": real, "mount": best[0], "type": best[1], "device": best[2],
            "free_gb": round(st.f_bavail * st.f_frsize / 1e9, 1)}


def rows_dicts(rows: list[Row]) -> list[dict]:
    """The rows as plain dicts (JSON, CSV)."""
    return [asdict(r) for r in rows]
