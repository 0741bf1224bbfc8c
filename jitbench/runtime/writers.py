"""Which survivors share a split JIT checkpoint (``RuntimeConfig.writer_ranks = "split"``).

When a peer fails, every survivor saves; under ``split`` they divide the state
instead of each writing all of it, so each must know who else survives. They
agree through the job's store (the attempt's ``PrefixStore`` the runtime's
notices use): each survivor sets ``jit/<step>/alive/<rank>``, counts itself in
``jit/<step>/count``, and waits until every rank of the world has counted
itself (no one died: a hang seen by all) or ``grace_s`` has passed since it
arrived; the ranks whose key is then set are the writers, in rank order, and
this rank writes slice ``writers.index(rank)`` of ``len(writers)``.

Survivors that detect the failure far apart can see different sets (a late one
also sees the early ones, the early ones do not see it): each slice's manifest
records its count, and restore takes a step only when every slice of one count
is there (:func:`jitbench.runtime.checkpoint.gather_slices`), so the early
group's slices still restore. A survivor that dies while writing its slice
loses the step (the price of splitting: no one else has that slice);
``jit:backstop=N`` bounds what is then replayed.
"""

from __future__ import annotations

import time
from typing import Any

__all__ = ["agree_writers"]


def agree_writers(store: Any, step: int, rank: int, world_size: int,
                  grace_s: float = 2.0, poll_s: float = 0.02) -> list[int]:
    """The survivors that write the split checkpoint of ``step``, in rank order (this
    rank included); see the module docstring.

    Args:
        store: a ``torch.distributed.Store`` (``set``, ``add``, ``check``).
        grace_s: how long to wait for the other survivors (s).

    Raises:
        Exception: whatever the store raises (the caller falls back to a full copy).
    """
    prefix = f"jit/{step}"
    store.set(f"{prefix}/alive/{rank}", "1")
    store.add(f"{prefix}/count", 1)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if int(store.add(f"{prefix}/count", 0)) >= world_size:
            break
        time.sleep(poll_s)
    return [r for r in range(world_size) if r == rank or store.check([f"{prefix}/alive/{r}"])]
