"""Checkpoint files: atomic commit, manifest, validation, retention.

One checkpoint *part* is one file written by one rank; in data-parallel
training every part is a complete copy of the replicated state (model,
optimizer, scheduler, scaler, RNG streams, data position, step), so any one
valid part of a step restores the whole job.

Commit protocol (a part is visible only when complete):

1. write ``<name>.pt.tmp`` and fsync it;
2. rename it to ``<name>.pt`` and fsync the directory;
3. write the manifest ``<name>.json.tmp`` (step, world size, kind, run id,
   byte size, SHA-256 of the file, shape and dtype of every tensor), fsync,
   rename to ``<name>.json``, fsync the directory. The manifest's rename is the
   commit.

A checkpoint of a step needs exactly one committed part (``parts_needed: 1``
in the manifest): every part is a full copy of the replicated state, so there
is no multi-part commit to coordinate. Split parts (below) are the exception:
there the step counts only when every slice has a committed, valid part, which
the reader checks (:func:`gather_slices`) instead of a commit marker.

Split parts (``write_part(..., slice_of=(i, n))``, :data:`FORMAT_SPLIT`): the
writers of a step share the state instead of each writing all of it; writer
``i`` of ``n`` writes slice ``i`` (:func:`split_state`: the leaves of the nested
state dict in their order, cut into ``n`` contiguous runs of about equal bytes),
as its own part with its own manifest (``parts_needed: n``, ``slice: i``,
``slices: n``, size, SHA-256 and tensor layout of that slice). Such a step is
restorable only when every slice has a valid part: :func:`gather_slices` finds
them and names the missing one, :func:`load_part` merges them
(:func:`merge_states`). Only committed slices count, so each slice is still
committed by its own manifest's rename.

Sharded parts (``write_part(..., shard_of=(j, S))``, :data:`FORMAT_SHARDED`): under
hybrid sharding (HSDP, :mod:`jitbench.runtime.sharded`) rank ``r`` holds shard
``j = r % S`` of the parameters and optimizer moments; its part holds that shard's
local tensors plus the small replicated state (step, RNG, scheduler, data) and its
manifest says ``shard: j``, ``shards: S``, ``parts_needed: S``. A step is restorable
only when every shard index has a valid part (written by any replica of it):
:func:`gather_shards` finds them and names the first missing shard, and every
restarted rank loads its own shard's part (:func:`load_part` with ``shard``).

Fault injection: :func:`set_io_hook` (:mod:`jitbench.runtime.ckpt_format`)
installs a callable that the write and load paths call before each I/O step.

Parts of kind ``async`` are DCP directories (:mod:`jitbench.runtime.dcp_format`);
:func:`validate_part` and :func:`load_part` read both formats, so restore has
one loader.

Loading validates before trusting: the manifest must parse, the file size and
SHA-256 must match, and the file is read with ``torch.load(weights_only=True)``
(PyTorch docs, "torch.load": only tensors, primitive types and dicts are
unpickled); the loaded tensors must then have the shapes and dtypes the
manifest lists. Two kinds of bad part are told apart:

- :class:`CheckpointCorrupt` (truncated, flipped bytes, unreadable, torn
  manifest): restore skips it and falls back to the next older valid part;
- :class:`CheckpointMismatch` (written by a job of another world size or
  another run): restore refuses the whole directory, loudly, because training
  on would silently continue someone else's job.

Retention removes an old checkpoint only after a newer one has committed, and
never the newest committed one.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from jitbench.runtime import dcp_format
from jitbench.runtime.ckpt_format import (
    CHUNK_BYTES,
    COMMIT_TIME,
    FORMAT,
    MANIFEST_VERSION,
    PART_RE,
    CheckpointCorrupt,
    CheckpointError,
    CheckpointMismatch,
    CheckpointWriteError,
    IoHook,
    Part,
    commit_stamp,
    fsync_dir,
    io_hook,
    make_dirs,
    part_name,
    set_io_hook,
    write_durable,
)

__all__ = [
    "CHUNK_BYTES", "COMMIT_TIME", "FORMAT", "FORMAT_SPLIT", "MANIFEST_VERSION", "CheckpointCorrupt", "CheckpointError",
    "CheckpointMismatch", "CheckpointWriteError", "FORMAT_SHARDED", "IoHook", "Part", "check_owner",
    "commit_stamp", "committed", "fsync_dir", "gather_shards", "gather_slices", "shard_of_part", "list_parts", "load_part", "merge_states", "newest_valid", "part_name", "prune", "read_manifest",
    "set_io_hook", "split_state", "tensor_layout", "validate_part", "write_durable", "write_part",
]


def tensor_layout(obj: Any, prefix: str = "") -> dict[str, list]:
    """``{dotted.key: [shape, dtype]}`` of every tensor in a nested state dict."""
    out: dict[str, list] = {}
    if isinstance(obj, torch.Tensor):
        out[prefix] = [list(obj.shape), str(obj.dtype).removeprefix("torch.")]
    elif isinstance(obj, dict):
        for k, v in obj.items():
            out.update(tensor_layout(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            out.update(tensor_layout(v, f"{prefix}.{i}" if prefix else str(i)))
    return out


FORMAT_SPLIT = "jitbench-split"
"""Manifest ``format`` of a split part: one slice of the state (see the module docstring)."""
FORMAT_SHARDED = "jitbench-sharded"
"""Manifest ``format`` of a sharded part: one shard index of an HSDP job's state (see the
module docstring)."""


def _leaves(obj: dict, prefix: tuple = ()) -> list[tuple[tuple, Any]]:
    """``[(key path, value)]`` of a nested dict, depth first in insertion order; a value
    that is not a non-empty dict (a tensor, a list, a number, ``{}``) is a leaf."""
    out: list[tuple[tuple, Any]] = []
    for k, v in obj.items():
        if isinstance(v, dict) and v:
            out += _leaves(v, (*prefix, k))
        else:
            out.append(((*prefix, k), v))
    return out


def _nbytes(value: Any) -> int:
    """Bytes a leaf weighs for slicing: a tensor's storage bytes, else 1 (small values)."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    return 1


def split_state(state: dict, index: int, count: int) -> dict:
    """Slice ``index`` of ``count`` of a nested state dict (a nested dict of the same shape
    holding only that slice's leaves).

    The leaves (:func:`_leaves`) in their order are cut into ``count`` contiguous runs of
    about ``total / count`` bytes each: a leaf belongs to the slice its byte midpoint
    falls in. Every replica of a data-parallel job holds the same keys and shapes, so
    every writer computes the same cut; a leaf larger than ``total / count`` makes the
    cut uneven, and a slice may be empty (a state with fewer leaves than slices).

    Raises:
        ValueError: ``count < 1`` or ``index`` outside ``[0, count)``.
    """
    if count < 1 or not 0 <= index < count:
        raise ValueError(f"slice {index} of {count} does not exist")
    leaves = _leaves(state)
    total = sum(_nbytes(v) for _, v in leaves) or 1
    out: dict = {}
    done = 0
    for path, value in leaves:
        size = _nbytes(value)
        owner = min(count - 1, int((done + size / 2) * count // total))
        done += size
        if owner != index:
            continue
        node = out
        for k in path[:-1]:
            node = node.setdefault(k, {})
        node[path[-1]] = value
    return out


def merge_states(slices: list[dict]) -> dict:
    """The state the slices of :func:`split_state` were cut from (their leaves merged;
    key order follows the slices' order, which :func:`split_state` keeps).

    Raises:
        CheckpointCorrupt: two slices hold the same leaf (they do not come from one cut).
    """
    out: dict = {}
    for part in slices:
        for path, value in _leaves(part):
            node = out
            for k in path[:-1]:
                node = node.setdefault(k, {})
                if not isinstance(node, dict):
                    raise CheckpointCorrupt(f"slices overlap at {'.'.join(map(str, path))}")
            if path[-1] in node:
                raise CheckpointCorrupt(f"slices overlap at {'.'.join(map(str, path))}")
            node[path[-1]] = value
    return out


_crc_lock = threading.Lock()
_crc_users = [0, True]  # [writers inside _no_zip_crc32, the setting before the first]


@contextmanager
def _no_zip_crc32() -> Iterator[None]:
    """``torch.save`` without the zip records' CRC-32 (``torch.utils.serialization.config
    .save.compute_crc32 = False``, torch >= 2.6): the part's SHA-256 already covers every
    byte, and the CRC costs about a third of the serialisation (gpt2 state, 1.03 GB:
    2.5 s instead of 3.7-4.3 s on the 2-core development machine). Reference-counted, so
    concurrent writers (split slices) restore the setting once, after the last; a torch
    without the setting serialises as before."""
    try:
        from torch.utils.serialization import config
    except ImportError:
        yield
        return
    with _crc_lock:
        if _crc_users[0] == 0:
            _crc_users[1] = config.save.compute_crc32
            config.save.compute_crc32 = False
        _crc_users[0] += 1
    try:
        yield
    finally:
        with _crc_lock:
            _crc_users[0] -= 1
            if _crc_users[0] == 0:
                config.save.compute_crc32 = _crc_users[1]


def write_part(ckpt_dir: str | os.PathLike, kind: str, step: int, rank: int, world_size: int,
               state: dict, meta: dict | None = None, run_id: str = "",
               slice_of: tuple[int, int] | None = None,
               shard_of: tuple[int, int] | None = None) -> Part:
    """Serialise ``state`` and commit it as one checkpoint part.

    Args:
        ckpt_dir: checkpoint directory (created if missing).
        kind: ``jit`` or ``periodic``.
        step: optimizer steps completed in ``state``.
        rank: the writing rank.
        world_size: the job's world size (recorded; restore checks it).
        state: a nested dict of tensors and primitive values.
        meta: extra JSON-able fields for the manifest (e.g. the run's config).
        run_id: identity of the training job (restore refuses parts of another).
        slice_of: ``(i, n)``: write only slice ``i`` of ``n`` of ``state``
            (:func:`split_state`) as a split part; None: the whole state.
        shard_of: ``(j, S)``: ``state`` is shard ``j`` of ``S`` of a sharded (HSDP)
            job, written whole as a sharded part (:data:`FORMAT_SHARDED`).

    Returns:
        The committed :class:`Part`.

    Raises:
        CheckpointWriteError: the write failed (ENOSPC, EIO, ...); nothing is
            left visible and older parts are untouched.
    """
    d = Path(ckpt_dir)
    make_dirs(d)
    stem = part_name(kind, step, rank)
    split: dict = {}
    if slice_of is not None:
        index, count = slice_of
        state = split_state(state, index, count)
        split = {"format": FORMAT_SPLIT, "parts_needed": count, "slice": index, "slices": count}
    elif shard_of is not None:
        index, count = shard_of
        split = {"format": FORMAT_SHARDED, "parts_needed": count, "shard": index,
                 "shards": count}
    buf = io.BytesIO()
    with _no_zip_crc32():
        torch.save(state, buf)
    data = buf.getbuffer()  # no copy: the serialised bytes are written and hashed in place
    path = d / f"{stem}.pt"
    hook = io_hook()
    # SHA-256 in a thread of its own while the bytes are written: hashlib and the
    # writes release the GIL, so the hash overlaps the disk (same bytes, same digest)
    digest: list[str] = []
    hasher = threading.Thread(target=lambda: digest.append(hashlib.sha256(data).hexdigest()),
                              name="jitbench-ckpt-sha256", daemon=True)
    hasher.start()
    try:
        write_durable(path, data, hook)
    except CheckpointWriteError:
        try:  # failed after the rename (dir fsync): drop the uncommitted file too
            path.unlink()
        except OSError:
            pass
        raise
    finally:
        hasher.join()
    manifest = {
        "manifest_version": MANIFEST_VERSION, "format": FORMAT, "parts_needed": 1,
        "kind": kind, "step": step, "rank": rank, "world_size": world_size, "run_id": run_id,
        "bytes": len(data), "sha256": digest[0],
        "tensors": tensor_layout(state), "torch": torch.__version__, "meta": meta or {},
        **split, **commit_stamp(),
    }
    mpath = d / f"{stem}.json"
    try:
        write_durable(mpath, json.dumps(manifest, sort_keys=True).encode(), hook)
    except CheckpointWriteError:
        try:
            path.unlink()
        except OSError:
            pass
        raise
    return Part(kind, step, rank, path, mpath)


def list_parts(ckpt_dir: str | os.PathLike) -> list[Part]:
    """Committed parts (those with a manifest), newest step first."""
    d = Path(ckpt_dir)
    if not d.is_dir():
        return []
    parts = []
    for m in d.iterdir():
        mm = PART_RE.match(m.name)
        if mm:
            # async parts are DCP directories (jitbench.runtime.dcp_format)
            data = m.with_suffix(".dcp" if mm["kind"] == "async" else ".pt")
            parts.append(Part(mm["kind"], int(mm["step"]), int(mm["rank"]), data, m))
    parts.sort(key=lambda p: (-p.step, p.kind != "jit", p.rank))
    return parts


def committed(ckpt_dir: str | os.PathLike) -> list[dict]:
    """Every committed part of ``ckpt_dir`` as the directory says it now, newest step first.

    A part is committed when its manifest has been renamed into place (the commit
    protocol above), whatever its writer logged. Each entry is ``{"name": data file
    name (as in restore's ``source`` and ``skipped``), "step", "kind", "rank", "t":
    commit time}``, with the time from the manifest's :data:`COMMIT_TIME` (wall
    clock, s since the epoch), else the manifest file's ``st_mtime`` (a manifest
    written before the field existed, or one too damaged to parse: still committed,
    and restore skips it if it does not validate). Parts whose manifest vanished
    meanwhile (pruned) are left out. An absent directory has none.

    Raises:
        OSError: the directory exists but cannot be listed.
    """
    out = []
    for part in list_parts(ckpt_dir):
        try:
            t = os.stat(part.manifest_path).st_mtime
        except FileNotFoundError:
            continue
        try:
            t = float(read_manifest(part).get(COMMIT_TIME, t))
        except (CheckpointCorrupt, TypeError, ValueError):
            pass
        out.append({"name": part.path.name, "step": part.step, "kind": part.kind,
                    "rank": part.rank, "t": t})
    return out


def read_manifest(part: Part) -> dict:
    """The parsed manifest of a part.

    Raises:
        CheckpointCorrupt: unreadable or unparsable, or it names another part.
    """
    try:
        manifest = json.loads(part.manifest_path.read_text())
    except (OSError, ValueError) as exc:
        raise CheckpointCorrupt(f"{part.manifest_path.name}: unreadable manifest ({exc})") from exc
    if not isinstance(manifest, dict):
        raise CheckpointCorrupt(f"{part.manifest_path.name}: manifest is not an object")
    if manifest.get("step") != part.step or manifest.get("kind") != part.kind:
        raise CheckpointCorrupt(f"{part.manifest_path.name}: manifest does not match its name")
    return manifest


def check_owner(part: Part, manifest: dict, world_size: int | None = None,
                run_id: str | None = None) -> None:
    """Refuse a part of another job.

    Raises:
        CheckpointMismatch: the manifest's world size or run id differ from the
            given ones (None: not checked).
    """
    if world_size is not None and manifest.get("world_size") != world_size:
        raise CheckpointMismatch(
            f"{part.path.name}: written by a job of world size {manifest.get('world_size')},"
            f" this job has {world_size}")
    if run_id is not None and manifest.get("run_id", "") != run_id:
        raise CheckpointMismatch(
            f"{part.path.name}: written by another run (run id {manifest.get('run_id')!r},"
            f" this run is {run_id!r})")


def _read_verified(part: Part, manifest: dict) -> bytes:
    """The bytes of a ``.pt`` part, checked against its manifest's size and SHA-256.

    Raises:
        CheckpointCorrupt: unreadable, truncated or corrupt.
    """
    try:
        data = part.path.read_bytes()
    except OSError as exc:
        raise CheckpointCorrupt(f"{part.path.name}: unreadable ({exc.strerror})") from exc
    if len(data) != manifest.get("bytes"):
        raise CheckpointCorrupt(f"{part.path.name}: {len(data)} bytes, manifest says "
                                f"{manifest.get('bytes')} (truncated)")
    if hashlib.sha256(data).hexdigest() != manifest.get("sha256"):
        raise CheckpointCorrupt(f"{part.path.name}: SHA-256 mismatch (corrupt)")
    return data


def _check_split(part: Part, manifest: dict) -> tuple[int, int] | None:
    """``(slice, slices)`` of a split part's manifest, None for a whole part.

    Raises:
        CheckpointCorrupt: a split manifest whose slice fields are not ``0 <= slice < slices``.
    """
    if manifest.get("format") != FORMAT_SPLIT:
        return None
    i, n = manifest.get("slice"), manifest.get("slices")
    if not (isinstance(i, int) and isinstance(n, int) and 0 <= i < n
            and manifest.get("parts_needed") == n):
        raise CheckpointCorrupt(f"{part.manifest_path.name}: bad slice fields "
                                f"(slice {i!r} of {n!r})")
    return i, n


def shard_of_part(part: Part, manifest: dict) -> tuple[int, int] | None:
    """``(shard, shards)`` of a sharded part's manifest, None for any other part.

    Raises:
        CheckpointCorrupt: a sharded manifest whose fields are not ``0 <= shard < shards``.
    """
    if manifest.get("format") != FORMAT_SHARDED:
        return None
    j, n = manifest.get("shard"), manifest.get("shards")
    if not (isinstance(j, int) and isinstance(n, int) and 0 <= j < n
            and manifest.get("parts_needed") == n):
        raise CheckpointCorrupt(f"{part.manifest_path.name}: bad shard fields "
                                f"(shard {j!r} of {n!r})")
    return j, n


def validate_part(part: Part, world_size: int | None = None, run_id: str | None = None) -> dict:
    """Check a part against its manifest and return the manifest (a split part: this
    slice alone; :func:`gather_slices` checks that the others exist).

    Raises:
        CheckpointCorrupt: unreadable manifest, size or SHA-256 mismatch, wrong step.
        CheckpointMismatch: a world size other than ``world_size`` or a run id
            other than ``run_id`` (None: not checked).
    """
    manifest = read_manifest(part)
    check_owner(part, manifest, world_size, run_id)
    if part.path.suffix == ".dcp":
        dcp_format.validate_dir(part.path, manifest)
        return manifest
    _check_split(part, manifest)
    shard_of_part(part, manifest)
    _read_verified(part, manifest)
    return manifest


def _gather(part: Part, n: int, key: str, position: Callable[[Part, dict], tuple | None],
            world_size: int | None, run_id: str | None,
            data: dict[int, bytes] | None = None) -> tuple[dict[int, tuple[Part, dict]],
                                                            dict[int, str]]:
    """The committed siblings of ``part`` (same directory, kind and step) that hold one of
    its ``n`` pieces, validated: ``({index: (part, manifest)}, {index: why not valid})``.

    ``position(part, manifest)`` gives a sibling's ``(index, count)`` (None: not a piece);
    ``key`` is the manifest field of the index (``shard`` or ``slice``), read to say
    which piece a corrupt sibling was. The first sibling that validates holds its
    index; ``data`` (if given) receives each chosen piece's verified bytes.

    Raises:
        CheckpointMismatch: a sibling belongs to another job.
    """
    chosen: dict[int, tuple[Part, dict]] = {}
    why: dict[int, str] = {}
    for other in list_parts(part.path.parent):
        if other.kind != part.kind or other.step != part.step or other.path.suffix != ".pt":
            continue
        try:
            m = read_manifest(other)
            check_owner(other, m, world_size, run_id)
            pos = position(other, m)
            if pos is None or pos[1] != n or pos[0] in chosen:
                continue
            raw = _read_verified(other, m)
        except CheckpointCorrupt as exc:
            try:
                idx = int(json.loads(other.manifest_path.read_text()).get(key))
            except (OSError, ValueError, TypeError, AttributeError):
                continue
            why.setdefault(idx, str(exc))
            continue
        chosen[pos[0]] = (other, m)
        if data is not None:
            data[pos[0]] = raw
    return chosen, why


def gather_shards(part: Part, manifest: dict, world_size: int | None = None,
                  run_id: str | None = None) -> list[tuple[Part, dict]]:
    """One valid part per shard index of the sharded checkpoint ``part`` belongs to, in
    shard order: the committed parts of the same directory, kind and step whose
    manifests say the same shard count (and belong to this job); where several
    replicas wrote one shard, the first that validates counts.

    Raises:
        CheckpointCorrupt: ``part`` is not sharded, or a shard has no valid part: the
            message names the first missing shard, e.g. ``jit step 12: shard 0 of 2
            missing (no replica of it wrote a valid part)``.
        CheckpointMismatch: a sibling belongs to another job.
    """
    shape = shard_of_part(part, manifest)
    if shape is None:
        raise CheckpointCorrupt(f"{part.path.name}: not a sharded part")
    n = shape[1]
    chosen, why = _gather(part, n, "shard", shard_of_part, world_size, run_id)
    for j in range(n):
        if j not in chosen:
            reason = why.get(j, "no replica of it wrote a valid part")
            raise CheckpointCorrupt(f"{part.kind} step {part.step}: shard {j} of {n} "
                                    f"missing ({reason})")
    return [chosen[j] for j in range(n)]


def gather_slices(part: Part, manifest: dict, world_size: int | None = None,
                  run_id: str | None = None,
                  data: dict[int, bytes] | None = None) -> list[tuple[Part, dict]]:
    """Every slice of the split checkpoint ``part`` belongs to, validated, in slice order.

    The slices are the committed parts of the same directory, kind and step whose
    manifests say the same slice count (and belong to this job); where several
    parts hold one slice, the first that validates counts. ``data`` (if given)
    receives each chosen slice's verified bytes, by slice index.

    Raises:
        CheckpointCorrupt: ``part`` is not a split part, or a slice has no valid
            part: the message names the first missing slice (and why its parts,
            if any, did not validate), e.g. ``jit step 12: slice 1 of 2 missing``.
        CheckpointMismatch: a sibling belongs to another job.
    """
    shape = _check_split(part, manifest)
    if shape is None:
        raise CheckpointCorrupt(f"{part.path.name}: not a split part")
    n = shape[1]
    chosen, why = _gather(part, n, "slice", _check_split, world_size, run_id, data)
    for i in range(n):
        if i not in chosen:
            reason = f" ({why[i]})" if i in why else ""
            raise CheckpointCorrupt(f"{part.kind} step {part.step}: slice {i} of {n} "
                                    f"missing{reason}")
    return [chosen[i] for i in range(n)]


def _load_bytes(name: str, data: bytes, manifest: dict) -> dict:
    """``torch.load(weights_only=True)`` of verified bytes, checked against the manifest's
    tensor layout.

    Raises:
        CheckpointCorrupt: does not unpickle, is not a dict, or its tensors differ.
    """
    try:
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unpickling error means "invalid"
        raise CheckpointCorrupt(f"{name}: does not load ({exc})") from exc
    if not isinstance(state, dict):
        raise CheckpointCorrupt(f"{name}: holds a {type(state).__name__}, not a dict")
    if "tensors" in manifest and tensor_layout(state) != manifest["tensors"]:
        raise CheckpointCorrupt(f"{name}: tensor shapes/dtypes differ from the manifest")
    return state


def load_part(part: Part, world_size: int | None = None,
              run_id: str | None = None, shard: int | None = None) -> tuple[dict, dict]:
    """Validate and load one part; returns ``(state, manifest)``.

    The file is read once, checked (size, SHA-256), unpickled from those bytes with
    ``weights_only=True``, and every tensor's shape and dtype must equal the
    manifest's layout. A split part loads every slice (:func:`gather_slices`) and
    returns the merged state with a manifest whose ``tensors`` is the merged layout.
    A sharded part loads the part of shard index ``shard`` of the same step instead
    (:func:`gather_shards`; ``shard`` None: the part itself).

    Raises:
        CheckpointCorrupt: validation failed, the file does not unpickle under
            ``weights_only=True``, its tensors differ from the manifest, or (split)
            a slice is missing.
        CheckpointMismatch: see :func:`validate_part`.
    """
    manifest = read_manifest(part)
    check_owner(part, manifest, world_size, run_id)
    hook = io_hook()
    if part.path.suffix == ".dcp":
        dcp_format.validate_dir(part.path, manifest)
        if hook is not None:
            hook("read", part.path, 0, int(manifest.get("bytes", 0)))
        return dcp_format.load_dir(part.path, manifest), manifest
    sharded = shard_of_part(part, manifest)
    if sharded is not None and shard is not None and sharded[0] != shard:
        if not 0 <= shard < sharded[1]:
            raise CheckpointMismatch(f"{part.path.name}: {sharded[1]} shards, this rank "
                                     f"holds shard {shard}")
        part, manifest = gather_shards(part, manifest, world_size, run_id)[shard]
    if _check_split(part, manifest) is not None:
        raw: dict[int, bytes] = {}
        slices = gather_slices(part, manifest, world_size, run_id, raw)
        states = []
        for i, (p, m) in enumerate(slices):
            if hook is not None:
                hook("read", p.path, 0, int(m.get("bytes", 0)))
            states.append(_load_bytes(p.path.name, raw.pop(i), m))
        state = merge_states(states)
        return state, {**manifest, "tensors": tensor_layout(state)}
    data = _read_verified(part, manifest)
    if hook is not None:
        hook("read", part.path, 0, int(manifest.get("bytes", 0)))
    return _load_bytes(part.path.name, data, manifest), manifest


def newest_valid(ckpt_dir: str | os.PathLike, world_size: int | None = None,
                 skipped: list[tuple[Part, str]] | None = None,
                 run_id: str | None = None) -> tuple[Part, dict] | None:
    """The newest committed part that validates, or None. A split part counts only
    when every slice of its step validates (:func:`gather_slices`), a sharded part
    only when every shard index does (:func:`gather_shards`); its siblings are
    then not tried again (those of an incomplete sharded step are each reported
    skipped, with the missing shard).

    Corrupt parts (and split parts of an incomplete step, with the missing slice
    named) are reported through ``skipped`` as ``(part, reason)`` so the caller can
    say it fell back.

    Raises:
        CheckpointMismatch: any committed part belongs to another job (world
            size or run id differ): the directory is not this job's.
    """
    parts = list_parts(ckpt_dir)
    for part in parts:  # refuse a foreign directory before trusting any of it
        try:
            manifest = read_manifest(part)
        except CheckpointCorrupt:
            continue
        check_owner(part, manifest, world_size, run_id)
    split_done: set[tuple[str, int, int]] = set()
    incomplete: dict[tuple[str, int, int], str] = {}  # sharded steps missing a shard: why
    for part in parts:
        try:
            manifest = validate_part(part, world_size, run_id)
            sharded = None if part.path.suffix == ".dcp" else shard_of_part(part, manifest)
            if sharded is not None:
                key = (part.kind, part.step, -sharded[1])
                if key in incomplete:  # every part of that step is skipped, for that reason
                    raise CheckpointCorrupt(incomplete[key])
                try:
                    gather_shards(part, manifest, world_size, run_id)
                except CheckpointCorrupt as exc:
                    incomplete[key] = str(exc)
                    raise
                return part, manifest
            shape = None if part.path.suffix == ".dcp" else _check_split(part, manifest)
            if shape is not None:
                key = (part.kind, part.step, shape[1])
                if key in split_done:
                    continue
                split_done.add(key)
                gather_slices(part, manifest, world_size, run_id)
            return part, manifest
        except CheckpointCorrupt as exc:
            if skipped is not None:
                skipped.append((part, str(exc)))
    return None


_TMP_STEP = re.compile(r"_step(\d{8})_rank\d{5}\.")


def remove_stale_tmp(ckpt_dir: str | os.PathLike, before_step: int) -> list[str]:
    """Remove ``.tmp`` files and directories of steps older than ``before_step``: what a
    writer killed mid-write (a torn write) left behind. A write of an older step can
    no longer be in progress once a newer step is committed, so nothing live is
    touched (writes of the same step, e.g. every survivor's JIT part, are left alone).

    Returns:
        The names removed.
    """
    out = []
    try:
        entries = list(Path(ckpt_dir).iterdir())
    except OSError:
        return out
    for f in entries:
        m = _TMP_STEP.search(f.name)
        if not f.name.endswith(".tmp") or m is None or int(m.group(1)) >= before_step:
            continue
        try:
            if f.is_dir():
                shutil.rmtree(f)
            else:
                f.unlink()
            out.append(f.name)
        except OSError:
            pass
    return out


def prune(ckpt_dir: str | os.PathLike, keep_steps: int = 2) -> list[Part]:
    """Remove parts of all but the ``keep_steps`` newest committed steps, and the
    ``.tmp`` leftovers of steps older than the newest (:func:`remove_stale_tmp`).

    The manifest is removed first (uncommit), then the data file. Returns the
    removed parts. Never removes a part of the newest committed step.
    """
    parts = list_parts(ckpt_dir)
    steps = sorted({p.step for p in parts}, reverse=True)
    if steps:
        remove_stale_tmp(ckpt_dir, steps[0])
    keep = set(steps[:max(1, keep_steps)])
    removed = []
    for p in parts:
        if p.step not in keep:
            for f in (p.manifest_path, p.path):
                try:
                    if f.is_dir():  # a DCP part
                        shutil.rmtree(f)
                    else:
                        f.unlink()
                except FileNotFoundError:
                    pass
            removed.append(p)
    return removed
