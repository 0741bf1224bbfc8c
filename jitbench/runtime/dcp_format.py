"""The DCP checkpoint part of ``periodic-async``: a directory written by
:func:`torch.distributed.checkpoint.async_save`, read back without unpickling.

Loading never unpickles arbitrary objects: the state is split into its
tensors (saved by DCP as tensors) and a skeleton (every non-tensor value, with
placeholders where the tensors were) serialised with :func:`torch.save` into a
``uint8`` tensor and read back with ``torch.load(weights_only=True)``. DCP's
own handling of non-tensor values would unpickle them with
``weights_only=False``.

The writer is :mod:`jitbench.runtime.async_ckpt`; the reader
(:func:`validate_dir`, :func:`load_dir`) is what
:mod:`jitbench.runtime.checkpoint` dispatches to for parts of kind ``async``.
"""

from __future__ import annotations

import hashlib
import io
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp

from jitbench.runtime.ckpt_format import DESCEND, CheckpointCorrupt, map_state

KIND = "async"
"""Checkpoint kind (part names ``async_stepSSSSSSSS_rankRRRRR``)."""
SKELETON_KEY = "__skeleton__"
_PLACEHOLDER = "__dcp_tensor__"


def split_state(state: Any) -> tuple[dict[str, torch.Tensor], Any]:
    """Split a nested state into ``({key: tensor}, skeleton)``.

    The skeleton is ``state`` with every tensor replaced by ``{"__dcp_tensor__": key}``.
    The tensors are the live ones (not copies).
    """
    tensors: dict[str, torch.Tensor] = {}

    def visit(x: Any) -> Any:
        if not isinstance(x, torch.Tensor):
            return DESCEND
        key = f"t{len(tensors):06d}"
        tensors[key] = x.detach()
        return {_PLACEHOLDER: key}

    skeleton = map_state(state, visit)
    return tensors, skeleton


def join_state(tensors: dict[str, torch.Tensor], skeleton: Any) -> Any:
    """Inverse of :func:`split_state`."""

    def visit(x: Any) -> Any:
        if isinstance(x, dict) and len(x) == 1 and _PLACEHOLDER in x:
            return tensors[x[_PLACEHOLDER]]
        return DESCEND

    return map_state(skeleton, visit)


def skeleton_tensor(skeleton: Any) -> torch.Tensor:
    """``skeleton`` serialised with :func:`torch.save` as a 1-D ``uint8`` tensor."""
    buf = io.BytesIO()
    torch.save(skeleton, buf)
    return torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)


def file_digests(d: Path) -> dict[str, list]:
    """``{file name: [size in bytes, SHA-256 hex]}`` of every file in directory ``d``."""
    out = {}
    for f in sorted(d.iterdir()):
        if f.is_file():
            h = hashlib.sha256()
            with open(f, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    h.update(chunk)
            out[f.name] = [f.stat().st_size, h.hexdigest()]
    return out


def validate_dir(path: Path, manifest: dict) -> None:
    """Check every file of a DCP part against its manifest.

    Raises:
        CheckpointError: a file is missing, or its size or SHA-256 differs.
    """
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        raise CheckpointCorrupt(f"{path.name}: manifest lists no files")
    if not path.is_dir():
        raise CheckpointCorrupt(f"{path.name}: missing")
    digests = file_digests(path)
    for name, (size, sha) in files.items():
        if name not in digests:
            raise CheckpointCorrupt(f"{path.name}/{name}: missing")
        if digests[name][0] != size:
            raise CheckpointCorrupt(f"{path.name}/{name}: {digests[name][0]} bytes, manifest "
                                       f"says {size} (truncated)")
        if digests[name][1] != sha:
            raise CheckpointCorrupt(f"{path.name}/{name}: SHA-256 mismatch (corrupt)")


def load_dir(path: Path, manifest: dict) -> dict:
    """Load a validated DCP part into a plain state dict (CPU tensors).

    Raises:
        CheckpointError: the layout is unusable or DCP cannot read it.
    """
    try:
        template = {k: torch.empty(shape, dtype=getattr(torch, dtype))
                    for k, (shape, dtype) in manifest["tensors"].items()}
        dcp.load(template, storage_reader=dcp.FileSystemReader(str(path)), no_dist=True)
        blob = template.pop(SKELETON_KEY)
        skeleton = torch.load(io.BytesIO(blob.numpy().tobytes()), map_location="cpu",
                              weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any read error means "invalid"
        raise CheckpointCorrupt(f"{path.name}: does not load ({exc})") from exc
    return join_state(template, skeleton)
