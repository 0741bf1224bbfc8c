"""The ``resnet`` reference workload: a torchvision ResNet on small images.

Model
    An unmodified torchvision ResNet (``torchvision.models.resnet18`` or
    ``resnet50``, https://docs.pytorch.org/vision/stable/models/resnet.html) built
    with ``weights=None`` (random init, never a download) and ``num_classes`` set
    from the data. Input ``(B, 3, R, R)`` float32 with ``R = 32`` by default; the
    stem (stride-2 conv + max-pool) and three stride-2 stages reduce 32x32 to 1x1
    before the global average pool, which is fine for a benchmark workload.
    BatchNorm running statistics are buffers; under DDP they are broadcast from
    rank 0 at every forward (DDP's default ``forward_sync_buffers=True``).

    Measured on this project's dev machine (torch 2.14.1, CPU, one thread,
    ``torch.set_num_threads(1)``): resnet18 (11.2 M parameters, 10 classes), 32x32,
    batch 16, forward + backward + SGD step: about 0.08 s/step; resnet50 (23.5 M):
    about 0.22 s/step.

Optimisation
    ``torch.optim.SGD(lr, momentum=0.9, weight_decay=5e-4)`` with peak ``lr`` =
    ``cfg.lr`` or 0.01, and ``torch.optim.lr_scheduler.StepLR(step_size=ceil(steps / 3),
    gamma=0.1)``: the training loop calls ``scheduler.step()`` once per optimizer
    step, so the LR is divided by 10 after each third of ``cfg.steps``.
    The default 0.01 was measured on the digits at batch 16 (resnet18, one
    rank, 40 steps; mean training loss per 5 steps): at 0.05 the loss rises
    from 3.6 to 7.7 before falling (held-out loss in eval mode reaches ~4,900);
    at 0.02 it falls unevenly (2.8, 1.9, 2.5, 1.6, ...); at 0.01 it falls from
    2.6 to 0.4-0.8 without a rise.

Data
    See :mod:`jitbench.workloads.images`: scikit-learn's bundled digits by default
    (1,797 samples, 10 classes, bilinearly upsampled from 8x8), or an ImageFolder
    directory given as ``cfg.data``, loaded eagerly at build time. Batches are
    positioned by :class:`~jitbench.workloads.base.PositionedSampler` (a shuffled
    ``DistributedSampler`` with ``drop_last``; one shuffle per epoch), so
    ``batch(step, micro)`` is a pure function of ``(seed, rank, world_size, step,
    micro)``. No augmentation, so training uses no randomness after the init.

Determinism
    The model is initialised inside ``torch.random.fork_rng`` after
    ``torch.manual_seed(cfg.seed)``: the init is the same on every rank and in every
    build with the same seed, and building does not disturb the caller's global RNG
    state. Every op used is deterministic on CPU for a fixed thread count, so two
    builds with the same seed give bitwise identical losses for the same steps.

``cfg.extra`` options
    ``resolution`` (int, default 32): image side length in pixels (>= 8).
    Unknown keys raise ``ValueError``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
import torchvision
from torch import nn

from jitbench import errors
from jitbench.workloads.base import Batch, PositionedSampler, Workload, WorkloadConfig
from jitbench.workloads.images import ImageData, load_images

__all__ = ["DEFAULT_LR", "DEFAULT_SIZE", "SIZES", "ResNetWorkload", "build_resnet"]

SIZES: dict[str, Callable[..., nn.Module]] = {
    "resnet18": torchvision.models.resnet18,
    "resnet50": torchvision.models.resnet50,
}
"""``cfg.size`` names -> torchvision constructors."""
DEFAULT_SIZE = "resnet18"
"""Size used when ``cfg.size`` is None or empty."""
DEFAULT_LR = 0.01
"""Peak SGD learning rate when ``cfg.lr`` is None."""
MOMENTUM = 0.9
WEIGHT_DECAY = 5e-4
LR_GAMMA = 0.1
EXTRA_KEYS = {"resolution": 32}
"""Accepted ``cfg.extra`` keys and their defaults."""


class ResNetWorkload(Workload):
    """A torchvision ResNet classifier with SGD + StepLR on in-memory images (one rank).

    Attributes:
        name: ``"resnet"``.
        size: The torchvision constructor name (``resnet18``/``resnet50``).
        data: The whole dataset (:class:`~jitbench.workloads.images.ImageData`, CPU).
        device: Where the model lives and where batches are put.
        model: The ResNet on ``device`` (not DDP-wrapped; the training loop wraps it).
        optimizer: SGD over ``model.parameters()``.
        scheduler: StepLR, stepped once per optimizer step.
        sampler: Per-rank positioned sampler over ``len(data)`` samples.
    """

    name = "resnet"

    def __init__(self, cfg: WorkloadConfig, rank: int, world_size: int, device: torch.device,
                 data: ImageData, size: str) -> None:
        self.cfg = cfg
        self.size = size
        self.data = data
        self.device = torch.device(device)
        self.rank = rank
        self.world_size = world_size
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.seed)
            model = SIZES[size](weights=None, num_classes=len(data.classes))
        self.model = model.to(self.device)
        self.lr = float(cfg.lr) if cfg.lr is not None else DEFAULT_LR
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=self.lr, momentum=MOMENTUM,
                                         weight_decay=WEIGHT_DECAY)
        self.lr_step_size = max(1, math.ceil(cfg.steps / 3))
        self.scheduler = torch.optim.lr_scheduler.StepLR(
            self.optimizer, step_size=self.lr_step_size, gamma=LR_GAMMA)
        self.sampler = PositionedSampler(len(data), cfg.batch_size, cfg.grad_accum, rank,
                                         world_size, cfg.seed)

    def batch(self, step: int, micro: int = 0) -> Batch:
        """Micro-batch ``micro`` of 1-based ``step`` on this rank.

        Returns:
            ``Batch(inputs=(B, 3, R, R) float32, targets=(B,) int64, sample_ids)`` with
            ``B = cfg.batch_size``, tensors on ``self.device``, ``sample_ids`` the
            dataset indices in order.
        """
        if step < 1:
            raise ValueError(f"step is 1-based, got {step}")
        if not 0 <= micro < self.cfg.grad_accum:
            raise ValueError(f"micro must be in [0, {self.cfg.grad_accum}), got {micro}")
        ids = self.sampler.ids(step, micro)
        inputs, targets = self.data.get(ids)
        return Batch(inputs=inputs.to(self.device), targets=targets.to(self.device),
                     sample_ids=list(ids))

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        """Mean cross-entropy (nats per sample, scalar) of ``model(batch.inputs)``."""
        return F.cross_entropy(model(batch.inputs), batch.targets)

    def describe(self) -> dict:
        """Name, size, parameter count, dataset name and sample/class counts, resolution."""
        d = super().describe()
        d.update({
            "size": self.size,
            "dataset": self.data.name,
            "num_samples": len(self.data),
            "num_classes": len(self.data.classes),
            "resolution": self.data.resolution,
            "lr": self.lr,
            "lr_step_size": self.lr_step_size,
            "batches_per_epoch": self.sampler.batches_per_epoch,
        })
        return d


def _final_spatial(resolution: int) -> int:
    """Side of ResNet's last feature map: stem conv, max-pool and 3 stages each halve (ceil)."""
    s = resolution
    for _ in range(5):
        s = (s + 1) // 2
    return s


def build_resnet(cfg: WorkloadConfig, rank: int, world_size: int,
                 device: torch.device) -> ResNetWorkload:
    """Build the ``resnet`` workload for one data-parallel rank.

    Args:
        cfg: ``size`` in :data:`SIZES` (None/empty: ``resnet18``); ``data`` None
            (digits) or an ImageFolder directory; ``extra`` may hold ``resolution``.
        rank: This rank, in ``[0, world_size)``.
        world_size: Number of data-parallel ranks (no process group is needed).
        device: Device for the model and the batches.

    Raises:
        ValueError: unknown size or ``extra`` key, a non-positive batch size,
            accumulation or step count, a bad resolution, or a batch too small for
            BatchNorm.
        DataError: the data is missing, empty, unreadable or corrupt, or holds
            fewer samples than one global minibatch.
    """
    size = cfg.size or DEFAULT_SIZE
    if size not in SIZES:
        raise ValueError(errors.unknown("resnet size", size, SIZES))
    unknown = set(cfg.extra) - set(EXTRA_KEYS)
    if unknown:
        raise ValueError(f"unknown resnet option(s) {sorted(unknown)} in extra; "
                         f"valid: {sorted(EXTRA_KEYS)}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} not in [0, {world_size})")
    for field_name in ("batch_size", "grad_accum", "steps"):
        value = getattr(cfg, field_name)
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{field_name} must be a positive integer, got {value!r}")
    resolution = cfg.extra.get("resolution", EXTRA_KEYS["resolution"])
    if not isinstance(resolution, int) or isinstance(resolution, bool) or resolution < 8:
        raise ValueError(f"resolution must be an integer >= 8 pixels, got {resolution!r}")
    if cfg.batch_size * _final_spatial(resolution) ** 2 < 2:
        raise ValueError(f"batch_size {cfg.batch_size} at resolution {resolution} leaves one "
                         "value per channel in the last BatchNorm; use batch_size >= 2")
    data = load_images(cfg.data, resolution)
    return ResNetWorkload(cfg, rank, world_size, device, data, size)
