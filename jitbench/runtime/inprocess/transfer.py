"""The boundary state, sent from one healthy replica to every other member.

After a failure the new generation's members resume from the source's
boundary (:class:`~jitbench.runtime.inprocess.membership.Decision`). The
source holds a checkpoint-form state (nested dicts, lists and tuples of
tensors and plain values: model, optimizer, scheduler, scaler, RNG streams,
data position, step); :func:`broadcast_state` sends it over the new process
group in two collectives per (dtype, device) group of tensors plus one for the
structure:

1. the structure, with every tensor replaced by a placeholder (its dtype,
   shape and offset), through ``torch.distributed.broadcast_object_list``;
2. the tensors of each dtype, packed into one contiguous buffer, through
   ``torch.distributed.broadcast`` (one large message instead of hundreds of
   small ones: the transfer runs at the link's bandwidth).

Receivers rebuild the same structure with tensors of the same dtype, shape
and values (bitwise: a copy, no arithmetic). Tensors travel on the device of
the process group's backend (CPU for gloo; the rank's current CUDA device for
NCCL) and are returned there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from jitbench.runtime.device_copy import map_tensors

__all__ = ["broadcast_state"]


@dataclass(frozen=True)
class _Slot:
    dtype: str
    shape: tuple[int, ...]
    offset: int
    numel: int


def _pack(obj: Any, groups: dict[str, list[torch.Tensor]], sizes: dict[str, int]) -> Any:
    """``obj`` with each tensor replaced by its :class:`_Slot` in one buffer per dtype."""

    def slot(t: torch.Tensor) -> _Slot:
        t = t.detach()
        key = str(t.dtype).removeprefix("torch.")
        off = sizes.get(key, 0)
        groups.setdefault(key, []).append(t.reshape(-1))
        sizes[key] = off + t.numel()
        return _Slot(key, tuple(t.shape), off, t.numel())

    return map_tensors(obj, slot)


def _unpack(obj: Any, bufs: dict[str, torch.Tensor]) -> Any:
    if isinstance(obj, _Slot):
        return bufs[obj.dtype][obj.offset:obj.offset + obj.numel].view(obj.shape).clone()
    if isinstance(obj, dict):
        return {k: _unpack(v, bufs) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_unpack(v, bufs) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_unpack(v, bufs) for v in obj)
    return obj


def _device(group: Any) -> torch.device:
    backend = dist.get_backend(group)
    if backend == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def broadcast_state(state: Any, src: int, group: Any = None) -> tuple[Any, int]:
    """Send ``state`` from rank ``src`` to every rank of ``group``; return it everywhere.

    Args:
        state: on ``src``, the checkpoint-form state (tensors of any dtype and
            shape inside dicts, lists and tuples; other values must pickle);
            ignored elsewhere (pass None).
        src: the sending rank (global rank in ``group``).
        group: the process group (None: the default one).

    Returns:
        ``(state, nbytes)``: the state on every rank (on ``src`` the object
        passed in, elsewhere a rebuilt copy whose tensors live on the backend's
        device) and the tensor bytes sent.

    Raises:
        RuntimeError: a collective failed (a member died during the transfer).
    """
    is_src = dist.get_rank(group) == src
    dev = _device(group)
    if is_src:
        groups: dict[str, list[torch.Tensor]] = {}
        sizes: dict[str, int] = {}
        skeleton = _pack(state, groups, sizes)
        header = [(skeleton, sizes)]
    else:
        header = [None]
    dist.broadcast_object_list(header, src=src, group=group,
                               device=dev if dev.type == "cuda" else None)
    skeleton, sizes = header[0]
    bufs: dict[str, torch.Tensor] = {}
    nbytes = 0
    for key in sorted(sizes):
        dtype = getattr(torch, key)
        if is_src:
            buf = torch.cat([t.to(dev) for t in groups[key]]) if groups[key] else \
                torch.empty(0, dtype=dtype, device=dev)
        else:
            buf = torch.empty(sizes[key], dtype=dtype, device=dev)
        dist.broadcast(buf, src=src, group=group)
        bufs[key] = buf
        nbytes += buf.numel() * buf.element_size()
    if is_src:
        return state, nbytes
    return _unpack(skeleton, bufs), nbytes
