"""How the workload's model is spread over the ranks: ``ddp`` or ``hsdp:RxS``.

``ddp`` (default): every rank holds a full replica, gradients are averaged by
DDP with jitbench's rank-ordered reduction (:mod:`jitbench.runtime.reduce`).

``hsdp:RxS``: hybrid sharding with PyTorch's FSDP2 (``fully_shard``) over a 2-D
device mesh ``(replicate, shard)`` of ``R`` replica groups x ``S`` shards
(``init_device_mesh(device, (R, S), mesh_dim_names=("replicate", "shard"))``):
rank ``r`` holds shard ``r % S`` of replica ``r // S`` (the layout of
:func:`jitbench.reports.model.topology`). Each transformer block is one FSDP
unit, then the root (embeddings, final LayerNorm and the tied head). Gradients
are reduce-scattered inside a replica's shard group, then all-reduced across
the replicas of each shard (FSDP2's own collectives: gloo on CPU, NCCL on GPU).
Every rank still trains on its own data (the data-parallel degree is ``R x S``).

JIT under HSDP needs one healthy replica of each shard: every survivor writes
its shard (:mod:`jitbench.runtime.sharded`), and a step is restorable when every
shard index has a part; when a shard has lost every replica, the restore falls
back to the newest complete older checkpoint (``--backstop periodic:N``) and the
summary's ``fallback`` says which shard was missing.

Parsing (:func:`parse`) needs no torch; :func:`shard_model` imports it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from jitbench.errors import SpecError

__all__ = ["HSDP_FAULTS_REFUSED", "HSDP_STRATEGIES", "Parallel", "parse", "shard_model"]

HSDP_STRATEGIES = ("jit", "periodic", "none")
"""Strategies wired for ``hsdp`` (``jit`` without ``split``; ``periodic:N``, not auto)."""
HSDP_FAULTS_REFUSED = {
    "nccl-timeout": "its per-operation timeout is set in DDP's comm hook; FSDP2 posts its "
                    "own collectives",
    "desync": "it posts DDP's gradient collective shape; FSDP2 posts its own collectives",
    "amp-backoff": "it writes into DDP's first gradient bucket (and hsdp runs without fp16)",
}
"""Fault kinds refused under ``hsdp``, with why."""


@dataclass(frozen=True)
class Parallel:
    """A parsed ``--parallel`` value."""

    kind: str = "ddp"
    """``ddp`` or ``hsdp``."""
    replicas: int = 0
    """R: replica groups (``hsdp``; 0 for ``ddp``, where every rank is a replica)."""
    shards: int = 1
    """S: ranks one replica's state is sharded over (``hsdp``; 1 for ``ddp``)."""

    def __str__(self) -> str:
        return self.kind if self.kind == "ddp" else f"hsdp:{self.replicas}x{self.shards}"

    @property
    def sharded(self) -> bool:
        """Whether the parameters are sharded (``hsdp``)."""
        return self.kind == "hsdp"

    def check(self, world_size: int, workload: str) -> None:
        """Refuse a layout the job cannot take.

        Raises:
            SpecError: ``R x S`` is not the world size, or a workload other than gpt
                under ``hsdp`` (one line).
        """
        if not self.sharded:
            return
        if workload != "gpt":
            raise SpecError(f"--parallel {self}: sharding is wired for the gpt workload "
                            f"only (its transformer blocks are the FSDP units), not {workload}")
        if self.replicas * self.shards != world_size:
            raise SpecError(f"--parallel {self}: R x S = {self.replicas * self.shards} ranks, "
                            f"the job has {world_size} (--nproc x --nnodes)")


def parse(text: str) -> Parallel:
    """``ddp`` or ``hsdp:RxS`` (R, S >= 1, e.g. ``hsdp:2x2``).

    Raises:
        SpecError: anything else (one line).
    """
    t = text.strip().lower()
    if t == "ddp":
        return Parallel()
    m = re.fullmatch(r"hsdp:(\d+)x(\d+)", t)
    if not m:
        raise SpecError(f"--parallel must be ddp or hsdp:RxS (R replica groups x S shards, "
                        f"e.g. hsdp:2x2), got {text!r}")
    r, s = int(m[1]), int(m[2])
    if r < 1 or s < 1:
        raise SpecError(f"--parallel {text}: R and S must be >= 1")
    return Parallel("hsdp", r, s)


def shard_model(model: Any, par: Parallel, device: Any) -> Any:
    """Apply FSDP2 ``fully_shard`` to ``model`` in place: each of ``model.blocks`` (one
    unit each), then the root, over the ``(replicate, shard)`` mesh of ``par``.

    Build the optimizer *after* this: the parameters are replaced by DTensors.
    Returns the device mesh.
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(device.type, (par.replicas, par.shards),
                            mesh_dim_names=("replicate", "shard"))
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return mesh
