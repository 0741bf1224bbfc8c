"""Reference workloads (GPT, ResNet) and their data.

:func:`build_workload` turns a :class:`WorkloadConfig` into a live
:class:`Workload` on one rank.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from jitbench import errors
from jitbench.workloads.base import Batch, DataError, PositionedSampler, Workload, WorkloadConfig

WORKLOADS = ("gpt", "resnet")

__all__ = ["WORKLOADS", "Batch", "DataError", "PositionedSampler", "Workload", "WorkloadConfig",
           "build_workload"]


def build_workload(cfg: WorkloadConfig, rank: int, world_size: int,
                   device: torch.device,
                   prepare_model: Callable[[nn.Module], object] | None = None) -> Workload:
    """Build the named workload on one rank (seed torch first for identical init on all ranks).

    ``prepare_model`` (gpt only) is applied to the built model before the optimizer is
    built on its parameters (FSDP2's ``fully_shard`` replaces them by DTensors).

    Raises:
        ValueError: unknown workload or size, or ``prepare_model`` for resnet.
        DataError: unusable data.
    """
    torch.manual_seed(cfg.seed)
    if cfg.name == "gpt":
        from jitbench.workloads.gpt import GPTWorkload

        return GPTWorkload(cfg, rank, world_size, device, prepare_model)
    if prepare_model is not None:
        raise ValueError(f"workload {cfg.name!r} cannot be sharded (gpt only)")
    if cfg.name == "resnet":
        from jitbench.workloads.resnet import build_resnet

        return build_resnet(cfg, rank, world_size, device)
    raise ValueError(errors.unknown("workload", cfg.name, WORKLOADS))
