"""The contract between a reference workload and the training loop.

A workload owns its model, optimizer, LR scheduler and data. Its data is
*positioned* by the global step: the minibatch of step ``s`` (1-based) and
micro-batch ``m`` is computed from ``(seed, epoch, position)`` without
iterating through earlier batches, so a restored run starts at step 50,000 as
fast as at step 1 (field case C9) and the sample-id stream after a restore is
the uninterrupted run's.

RNG streams are replicated across data-parallel ranks (every rank seeds python,
numpy and torch with the same seed, as Megatron-LM does by default for
data-parallel replicas), so any healthy replica's RNG state is also the failed
rank's. Only the data differs per rank, and that comes from
:class:`torch.utils.data.DistributedSampler`, which is a pure function of
``(seed, epoch, rank)``.
"""

from __future__ import annotations

import abc
import contextlib
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.utils.data import DistributedSampler

from jitbench.errors import DataError


@dataclass
class WorkloadConfig:
    """What to train; every field is part of the run spec."""

    name: str = "gpt"
    """Workload name: ``gpt`` or ``resnet``."""
    size: str | None = None
    """Model size by name (``gpt``: tiny/small/medium/gpt2, default small;
    ``resnet``: resnet18/resnet50, default resnet18)."""
    data: str | None = None
    """A user's data: a text file (gpt) or an ImageFolder directory (resnet). None: the embedded default."""
    batch_size: int = 8
    """Micro-batch size per rank (samples)."""
    grad_accum: int = 1
    """Micro-batches per optimizer step (gradient accumulation)."""
    steps: int = 60
    """Total optimizer steps; the LR schedule is laid out over these."""
    seed: int = 0
    """Seed for model init, dropout, and the data shuffle."""
    lr: float | None = None
    """Peak learning rate; None takes the workload's default."""
    extra: dict = field(default_factory=dict)
    """Workload-specific options (documented by each workload)."""


@dataclass
class Batch:
    """One micro-batch on one rank."""

    inputs: torch.Tensor
    targets: torch.Tensor
    sample_ids: list[int]
    """Dataset indices of the samples, in order (for ``sample_stream_equal``)."""


class PositionedSampler:
    """Per-rank sample ids of any (step, micro-batch) without iterating.

    Wraps :class:`torch.utils.data.DistributedSampler` (shuffled, ``drop_last``):
    the flat micro-batch index ``q = (step - 1) * grad_accum + micro`` maps to
    ``epoch = q // batches_per_epoch`` and ``position = q % batches_per_epoch``.
    Each epoch keeps its full length and its own shuffle (field case C7).

    Raises:
        DataError: when the dataset holds fewer samples than one global minibatch.
    """

    def __init__(self, num_samples: int, batch_size: int, grad_accum: int, rank: int,
                 world_size: int, seed: int) -> None:
        self.batch_size = batch_size
        self.grad_accum = grad_accum
        self.num_samples = num_samples
        self.rank, self.world_size, self.seed = rank, world_size, seed
        self._sampler = DistributedSampler(
            range(num_samples), num_replicas=world_size, rank=rank, shuffle=True, seed=seed,
            drop_last=True)
        self.batches_per_epoch = self._sampler.num_samples // batch_size
        if self.batches_per_epoch < 1:
            raise DataError(
                f"dataset has {num_samples} samples, fewer than one minibatch of "
                f"{batch_size} x {world_size} ranks")
        self._epoch: int | None = None
        self._indices: list[int] = []

    def position(self, step: int, micro: int = 0) -> tuple[int, int]:
        """(epoch, position within the epoch) of a 1-based step's micro-batch."""
        q = (step - 1) * self.grad_accum + micro
        return q // self.batches_per_epoch, q % self.batches_per_epoch

    def state(self, completed_steps: int) -> dict:
        """Where the data stands after ``completed_steps`` optimizer steps (for checkpoints).

        ``epoch`` and ``position`` (micro-batches into the epoch) of the next
        micro-batch, ``micro`` (its index in the accumulation window; always 0
        at an optimizer-step boundary), ``micro_batches_done`` (global
        micro-batch count), and the sampler's configuration, so a checkpoint is
        never resumed with another batch size, accumulation, world or shuffle.
        The same on every rank (no rank in it): any survivor's part restores all.
        """
        q = completed_steps * self.grad_accum
        return {"step": completed_steps, "epoch": q // self.batches_per_epoch,
                "position": q % self.batches_per_epoch, "micro": 0, "micro_batches_done": q,
                "grad_accum": self.grad_accum, "batch_size": self.batch_size,
                "num_samples": self.num_samples, "world_size": self.world_size,
                "seed": self.seed,
                "batches_per_epoch": self.batches_per_epoch}

    def check_state(self, saved: dict) -> None:
        """Check that a saved data position is where this sampler would be.

        The sampler is positioned by the global step (nothing to seek); what
        can go wrong is a checkpoint taken under another configuration.

        Raises:
            DataError: a field differs (names it) or the state is malformed.
        """
        try:
            want = self.state(int(saved["step"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"saved data position is malformed ({exc!r})") from exc
        diff = [f"{k} {saved.get(k)!r} (now {v!r})" for k, v in want.items() if saved.get(k) != v]
        if diff:
            raise DataError("saved data position differs: " + ", ".join(diff))

    def ids(self, step: int, micro: int = 0) -> list[int]:
        """Dataset indices of a 1-based step's micro-batch on this rank."""
        epoch, pos = self.position(step, micro)
        if epoch != self._epoch:
            self._sampler.set_epoch(epoch)
            self._indices = list(iter(self._sampler))
            self._epoch = epoch
        return self._indices[pos * self.batch_size:(pos + 1) * self.batch_size]


class Workload(abc.ABC):
    """A built workload on one rank: model, optimizer, scheduler and positioned data."""

    name: str
    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    sampler: PositionedSampler
    scaler: torch.amp.GradScaler | None = None
    """AMP grad scaler (None without mixed precision); checkpointed with the state."""

    def autocast(self) -> contextlib.AbstractContextManager:
        """Context for the forward pass (mixed precision when the workload uses it)."""
        return contextlib.nullcontext()

    @abc.abstractmethod
    def batch(self, step: int, micro: int = 0) -> Batch:
        """The micro-batch ``micro`` of 1-based optimizer step ``step`` on this rank."""

    @abc.abstractmethod
    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        """Scalar training loss of ``model`` (possibly DDP-wrapped) on ``batch``."""

    def set_rank(self, rank: int) -> None:
        """Take this rank's data shard (a spare built the workload before it knew its rank;
        model, optimizer and RNG streams are the same on every rank)."""
        s = self.sampler
        if hasattr(self, "rank"):
            self.rank = rank
        self.sampler = PositionedSampler(s.num_samples, s.batch_size, s.grad_accum, rank,
                                         s.world_size, s.seed)

    def data_state(self, step: int) -> dict:
        """Data-loader position after ``step`` completed steps (saved in checkpoints)."""
        return self.sampler.state(step)

    def load_data_state(self, saved: dict) -> None:
        """Position the data loader from a checkpoint (here: check it, see
        :meth:`PositionedSampler.check_state`). Raises :class:`DataError`."""
        self.sampler.check_state(saved)

    def describe(self) -> dict:
        """A JSON-able description for the run spec and checkpoints."""
        return {"name": self.name, "params": sum(p.numel() for p in self.model.parameters())}
