"""Staging a state for an asynchronous save (field case C3).

An asynchronous checkpoint returns to training before its bytes are written.
If the writer serialises the *live* tensors, the optimizer step that runs
meanwhile changes what lands on disk, and the checkpoint holds a mix of two
steps. The fix is to copy every tensor into a staging buffer at the moment the
save is requested, and let the writer read only the copy.

On CPU this copy is not optional: ``tensor.to("cpu")`` of a CPU tensor returns
the same storage, so an "offload to host" staging step that relies on a
device-to-host transfer copies nothing for a CPU job (gloo) and the save races
the optimizer.

Use it with any writer, e.g. ``torch.distributed.checkpoint.async_save``::

    staged = stage_for_async_save(runtime.boundary_state())   # blocking copy, ~memcpy speed
    future = dcp.async_save(staged, checkpoint_id=...)        # training goes on
    ...
    staged = stage_for_async_save(runtime.boundary_state(), into=staged)  # reuse the buffers

Reusing buffers (``into=``) is safe only once the previous save that read them
has completed (wait on its future first).
"""

from __future__ import annotations

import copy
from typing import Any

import torch

__all__ = ["stage_for_async_save"]


def stage_for_async_save(state: Any, into: Any = None, pin_memory: bool = False) -> Any:
    """A deep copy of ``state`` whose tensors live in host staging buffers.

    Args:
        state: a nested structure of dicts, lists, tuples, tensors and plain
            values (a checkpoint state, e.g. :meth:`Runtime.boundary_state`).
        into: a structure returned by an earlier call for a state of the same
            layout; its tensors are overwritten in place (no allocation) and it
            is returned. Tensors whose shape or dtype changed get new buffers.
        pin_memory: allocate new buffers in pinned host memory (for a fast
            device-to-host copy on CUDA; ignored without CUDA).

    Returns:
        The staged copy: same structure, every tensor a CPU tensor that shares
        no storage with ``state`` (shape and dtype unchanged); every other value
        deep-copied, so later mutation of ``state`` (an optimizer step, a
        scheduler step changing ``param_groups``) does not change it.
    """
    pin = pin_memory and torch.cuda.is_available()
    return _stage(state, into, pin)


def _stage(obj: Any, into: Any, pin: bool) -> Any:
    if isinstance(obj, torch.Tensor):
        src = obj.detach()
        if (isinstance(into, torch.Tensor) and into.shape == src.shape
                and into.dtype == src.dtype and into.device.type == "cpu"):
            into.copy_(src)
            return into
        buf = torch.empty(src.shape, dtype=src.dtype, device="cpu", pin_memory=pin)
        buf.copy_(src)
        return buf
    if isinstance(obj, dict):
        old = into if isinstance(into, dict) else {}
        return {k: _stage(v, old.get(k), pin) for k, v in obj.items()}
    if isinstance(obj, list):
        old = into if isinstance(into, list) and len(into) == len(obj) else [None] * len(obj)
        return [_stage(v, o, pin) for v, o in zip(obj, old, strict=True)]
    if isinstance(obj, tuple):
        old = into if isinstance(into, tuple) and len(into) == len(obj) else (None,) * len(obj)
        return tuple(_stage(v, o, pin) for v, o in zip(obj, old, strict=True))
    return copy.deepcopy(obj)
