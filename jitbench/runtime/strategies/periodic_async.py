"""Baseline ``periodic-async:N``: DCP ``async_save`` every N steps.

Every ``interval`` steps rank 0 stages a copy of the boundary state and
:class:`~jitbench.runtime.async_ckpt.AsyncCheckpointer` writes it in the
background (other ranks do nothing). A failed write is an ``ok: false`` save
event; the previous checkpoint stays the newest committed one and training
goes on. One writer per process: switching away and back
(:meth:`Runtime.set_strategy`) reuses it and its staging buffers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jitbench.runtime.config import RuntimeConfig
from jitbench.runtime.strategies.base import Strategy

if TYPE_CHECKING:
    from jitbench.runtime.async_ckpt import AsyncCheckpointer
    from jitbench.runtime.core import Runtime

__all__ = ["PeriodicAsync"]


class PeriodicAsync(Strategy):
    """Asynchronous periodic checkpoints (see the module docstring).

    Raises:
        ValueError: an interval below 1.
    """

    name = "periodic-async"

    def __init__(self, config: RuntimeConfig) -> None:
        super().__init__(config)
        self.writer: AsyncCheckpointer | None = None
        """Created on rank 0 at the first save."""

    @classmethod
    def validate(cls, config: RuntimeConfig) -> None:
        if config.interval < 1:
            raise ValueError("periodic-async checkpointing needs an interval >= 1")

    def at_boundary(self, rt: Runtime, step: int) -> None:
        interval = self.config.interval
        if interval > 0 and step % interval == 0:
            self.save(rt, step)

    def save(self, rt: Runtime, step: int) -> None:
        """Request an asynchronous checkpoint of the boundary after ``step`` (rank 0)."""
        if rt.rank != 0:
            return
        from jitbench.runtime.async_ckpt import AsyncCheckpointer

        c = self.config
        if self.writer is None:
            self.writer = AsyncCheckpointer(c.ckpt_dir, rt.rank, rt.world_size, rt.events,
                                            c.keep_steps, run_id=c.run_id)
        try:
            self.writer.request(step, rt.boundary.assemble(step, rt.boundary_snapshot()),
                                rt.manifest_meta())
        except Exception as exc:  # noqa: BLE001 - staging failed: no save, keep training
            rt.events.emit("error", where="async save", error=repr(exc)[:500])

    def leave(self, rt: Runtime) -> None:
        if self.writer is not None:
            self.writer.wait()

    def finish(self, rt: Runtime) -> None:
        if self.writer is not None:
            self.writer.wait(self.config.sync_bound_s)

    def on_exit(self, rt: Runtime) -> None:
        if self.writer is not None:  # no commit without its event from here on
            self.writer.freeze()
