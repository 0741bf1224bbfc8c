"""Reference workloads (GPT, ResNet) and their data.

:func:`build_workload` turns a :class:`WorkloadConfig` into a live
:class:`Workload` on one rank.
"""

from __future__ import annotations

import torch

from jitbench.workloads.base import Batch, DataError, PositionedSampler, Workload, WorkloadConfig

WORKLOADS = ("gpt", "resnet")

__all__ = ["WORKLOADS", "Batch", "DataError", "PositionedSampler", "Workload", "WorkloadConfig",
           "build_workload"]


def build_workload(cfg: WorkloadConfig, rank: int, world_size: int,
                   device: torch.device) -> Workload:
    """Build the named workload on one rank (seed torch first for identical init on all ranks).

    Raises:
        ValueError: unknown workload or size.
        DataError: unusable data.
    """
    torch.manual_seed(cfg.seed)
    if cfg.name == "gpt":
        from jitbench.workloads.gpt import GPTWorkload

        return GPTWorkload(cfg, rank, world_size, device)
    if cfg.name == "resnet":
        from jitbench.workloads.resnet import build_resnet

        return build_resnet(cfg, rank, world_size, device)
    raise ValueError(f"unknown workload {cfg.name!r}; one of {', '.join(WORKLOADS)}")
