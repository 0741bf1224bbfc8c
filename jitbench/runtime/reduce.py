"""Gradient reduction for DDP that is bitwise reproducible across restarts.

After a restart, DDP's first iteration uses its initial bucket layout while an
uninterrupted run uses the rebuilt one, and gloo's ring all-reduce sums in a
layout-dependent order, so a resumed run at 4+ ranks is not bitwise equal to
an uninterrupted one (docs/design.md, "Known traps"). :func:`ordered_allreduce_hook`
all-gathers each bucket and sums the ranks' gradients in rank order, which is
independent of the bucket layout: ``g = (((g_0 + g_1) + g_2) + ...) / world``.
It costs ``world_size`` times the bucket's memory and an all-gather instead of
an all-reduce; jitbench turns it on for correctness runs and records it in the
run spec (``deterministic_reduce``).

DDP comm hooks: PyTorch docs, "DDP Communication Hooks"
(``DistributedDataParallel.register_comm_hook``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import torch
import torch.distributed as dist
from torch._C import _distributed_c10d as _c10d

BucketHook = Callable[[object, "dist.GradBucket"], torch.futures.Future]


def ordered_allreduce_hook(process_group: dist.ProcessGroup | None,
                           bucket: dist.GradBucket,
                           timeout_s: float | None = None) -> torch.futures.Future:
    """DDP comm hook: average a gradient bucket, summing ranks in rank order.

    Args:
        process_group: the group to reduce over (None: the default group).
        bucket: the flattened gradient bucket, shape ``(n,)``.
        timeout_s: per-operation timeout of this collective (s); None: the
            process group's. The collective then fails with a timeout error.

    Returns:
        A future holding the averaged bucket, shape ``(n,)``, same dtype.
    """
    group = process_group if process_group is not None else dist.group.WORLD
    world = dist.get_world_size(group)
    buf = bucket.buffer()
    gathered = [torch.empty_like(buf) for _ in range(world)]
    if timeout_s is None:
        work = dist.all_gather(gathered, buf, group=group, async_op=True)
    else:
        opts = _c10d.AllgatherOptions()  # not re-exported by torch.distributed (2.14)
        opts.timeout = timedelta(seconds=timeout_s)
        work = group.allgather([gathered], [buf], opts)
    fut = work.get_future()

    def _sum(f: torch.futures.Future) -> torch.Tensor:
        f.value()  # re-raises the collective's error (a dead peer); never sum stale buffers
        out = gathered[0].clone()
        for g in gathered[1:]:
            out.add_(g)
        return out.div_(world)

    return fut.then(_sum)


def allreduce_hook(process_group: dist.ProcessGroup | None,
                   bucket: dist.GradBucket,
                   timeout_s: float | None = None) -> torch.futures.Future:
    """DDP comm hook equal to DDP's default: ``all_reduce(bucket / world)``.

    Args:
        process_group: the group to reduce over (None: the default group).
        bucket: the flattened gradient bucket, shape ``(n,)``.
        timeout_s: per-operation timeout of this collective (s); None: the group's.
    """
    group = process_group if process_group is not None else dist.group.WORLD
    buf = bucket.buffer().div_(dist.get_world_size(group))
    if timeout_s is None:
        work = dist.all_reduce(buf, group=group, async_op=True)
    else:
        opts = dist.AllreduceOptions()
        opts.timeout = timedelta(seconds=timeout_s)
        work = group.allreduce([buf], opts)
    fut = work.get_future()
    return fut.then(lambda f: f.value()[0])


def broadcast_buffers(module: torch.nn.Module, src: int = 0,
                      group: dist.ProcessGroup | None = None) -> int:
    """Copy rank ``src``'s buffers (e.g. BatchNorm running statistics) to every rank.

    DDP's default (``forward_sync_buffers=True``, formerly ``broadcast_buffers``)
    broadcasts rank 0's buffers at the *start* of every forward, so between steps each rank holds its own
    statistics and rank 0's are known to rank 0 only: when rank 0 dies, no
    survivor holds the buffers the next step would have used, and a JIT
    checkpoint written by a survivor is not the fault-free state. Calling this
    once per step after the backward pass (before the optimizer step) and
    constructing DDP with ``forward_sync_buffers=False`` gives the same
    computation (every forward starts from rank 0's buffers) while the state at
    every iteration boundary is replicated. Buffers are flattened per dtype, so
    this is one broadcast per dtype.

    Args:
        module: the unwrapped module.
        src: the authoritative rank (DDP's is 0).
        group: process group (None: the default group).

    Returns:
        The number of buffers broadcast (0: nothing to do, no collective issued).
    """
    bufs = [b for b in module.buffers() if b.numel()]
    if not bufs:
        return 0
    by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
    for b in bufs:
        by_dtype.setdefault(b.dtype, []).append(b)
    for _, same in sorted(by_dtype.items(), key=lambda kv: str(kv[0])):  # same order on every rank
        flat = torch.cat([b.detach().reshape(-1) for b in same])
        dist.broadcast(flat, src=src, group=group)
        offset = 0
        for b in same:
            n = b.numel()
            b.detach().copy_(flat[offset:offset + n].view_as(b))
            offset += n
    return len(bufs)


def no_forward_buffer_sync() -> dict[str, bool]:
    """DDP keyword arguments that turn off the per-forward buffer broadcast.

    torch >= 2.14 names it ``forward_sync_buffers`` and deprecates
    ``broadcast_buffers``; older releases (the GPU image's 2.11, for one) know
    only ``broadcast_buffers``. Same behaviour under either name.
    """
    import inspect

    from torch.nn.parallel import DistributedDataParallel

    params = inspect.signature(DistributedDataParallel.__init__).parameters
    key = "forward_sync_buffers" if "forward_sync_buffers" in params else "broadcast_buffers"
    return {key: False}
