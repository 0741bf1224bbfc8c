"""Sharded training state (FSDP2 / HSDP): the rank's local shards in and out of checkpoints.

Under hybrid sharding (HSDP: PyTorch's FSDP2 ``fully_shard`` over a 2-D device
mesh ``(replicate, shard)`` of ``R x S`` ranks) every parameter and every
optimizer moment is a :class:`~torch.distributed.tensor.DTensor` placed
``(Replicate(), Shard(0))``: rank ``r`` holds shard ``r % S`` (its local tensor,
rows ``[j * ceil(n / S), ...)`` of dim 0) of replica ``r // S``, and the ``R``
ranks of one shard index hold bitwise the same local tensors (their gradients
are reduce-scattered in the shard group, then all-reduced across the replicas).

A JIT checkpoint of such a job is ``S`` parts, one per shard index, each
written by one surviving replica of that shard, with no collective (the
process group is broken at a failure): :func:`localize` replaces every DTensor
of the assembled state by its local tensor, so the part is a plain nested dict
of tensors that :func:`torch.load` reads with ``weights_only=True``; the
manifest records the shard index, the mesh and every tensor's shape.
:func:`globalize` and :func:`shard_optimizer_state` turn a loaded part back
into DTensors placed as the live ones are, so only the same mesh (``R x S``,
same world size) can load it.

Why not DCP (``torch.distributed.checkpoint``), which would load at another
world size: ``dcp.save`` plans the save as a collective over the process
group (gather of every rank's plan, broadcast of the global plan and a
final barrier), and at a failure that group is the broken one; a fresh group
of the survivors would need a rendezvous the survivors of a gloo hang cannot
reach (their main threads stay blocked in the hung collective). Per-shard
parts written without collectives keep the save on the failure path as fast
and as independent as under DDP; converting them to DCP is left to a later
step (each shard's local tensors and offsets are what DCP's ``ChunkStorageMetadata``
holds).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from jitbench.runtime.ckpt_format import DESCEND, CheckpointError, map_state

__all__ = ["full_state", "globalize", "is_sharded", "localize", "shard_index",
           "shard_optimizer_state"]


def _dtensor_type() -> type | None:
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # a torch without DTensor: nothing can be sharded
        return None
    return DTensor


def is_sharded(model: nn.Module | None) -> bool:
    """Whether any parameter of ``model`` is a DTensor (FSDP2 ``fully_shard`` applied)."""
    dt = _dtensor_type()
    if model is None or dt is None:
        return False
    return any(isinstance(p, dt) for p in model.parameters())


def shard_index(model: nn.Module | None) -> tuple[int, int] | None:
    """``(j, S)``: this rank's shard index and the shard count, from the mesh of the first
    DTensor parameter (its last dimension is the shard dimension: ``(replicate, shard)``
    for HSDP, ``(shard,)`` for plain FSDP); None for a model that is not sharded."""
    dt = _dtensor_type()
    if model is None or dt is None:
        return None
    for p in model.parameters():
        if isinstance(p, dt):
            mesh = p.device_mesh
            return mesh.get_local_rank(mesh.ndim - 1), mesh.size(mesh.ndim - 1)
    return None


def localize(obj: Any) -> Any:
    """``obj`` (a nested dict/list/tuple of a state) with every DTensor replaced by its
    local tensor (detached; shares storage with the live shard, no copy)."""
    dt = _dtensor_type()
    if dt is None:
        return obj

    return map_state(obj, lambda x: x.to_local().detach() if isinstance(x, dt) else DESCEND)


def full_state(obj: Any) -> Any:
    """``obj`` with every DTensor replaced by its full (unsharded) tensor.

    A collective: ``DTensor.full_tensor`` all-gathers over the mesh, so every rank
    must call it on the same structure (dict order is the same on every rank).
    """
    dt = _dtensor_type()
    if dt is None:
        return obj

    return map_state(obj, lambda x: x.full_tensor().detach() if isinstance(x, dt) else DESCEND)


def _as_dtensor(local: Any, like: Any, where: str) -> Any:
    """``local`` (a loaded local shard) as a DTensor placed like the live DTensor ``like``.

    Raises:
        CheckpointError: ``local`` is not a tensor or not shaped like ``like``'s local shard.
    """
    from torch.distributed.tensor import DTensor

    want = like.to_local().shape
    if not isinstance(local, torch.Tensor) or local.shape != want:
        got = tuple(local.shape) if isinstance(local, torch.Tensor) else type(local).__name__
        raise CheckpointError(f"{where}: saved shard is {got}, this rank's shard is "
                              f"{tuple(want)} (another mesh?)")
    return DTensor.from_local(local.to(like.device, like.dtype), like.device_mesh,
                              like.placements, run_check=False, shape=like.shape,
                              stride=like.stride())


def globalize(saved: dict, live: dict, where: str = "model") -> dict:
    """A flat state dict (``model.state_dict()`` form) loaded from a part, with each
    value whose live counterpart in ``live`` is a DTensor turned into one placed
    like it (no collective: the local shard is this rank's own).

    Raises:
        CheckpointError: a saved shard's shape differs from this rank's (another mesh).
    """
    dt = _dtensor_type()
    out = dict(saved)
    for key, value in saved.items():
        ref = live.get(key)
        if dt is not None and isinstance(ref, dt):
            out[key] = _as_dtensor(value, ref, f"{where} {key}")
    return out


def shard_optimizer_state(optimizer: torch.optim.Optimizer) -> None:
    """After ``optimizer.load_state_dict`` of a localized state: every per-parameter
    state tensor shaped like its DTensor parameter's local shard (Adam's ``exp_avg``,
    ``exp_avg_sq``) becomes a DTensor placed like the parameter, as FSDP2's optimizer
    state is; scalars (``step``) stay plain tensors.

    Raises:
        CheckpointError: a state tensor with the parameter's rank but not its local shape.
    """
    dt = _dtensor_type()
    if dt is None:
        return
    for group in optimizer.param_groups:
        for p in group["params"]:
            if not isinstance(p, dt) or p not in optimizer.state:
                continue
            st = optimizer.state[p]
            for k, v in list(st.items()):
                if isinstance(v, torch.Tensor) and not isinstance(v, dt) and v.dim() > 0:
                    st[k] = _as_dtensor(v, p, f"optimizer state {k}")
