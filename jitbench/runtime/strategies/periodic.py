"""Baseline ``periodic:N`` (synchronous checkpoint every N steps) and
``periodic:auto`` (N from the Young/Daly optimum, measured at run time).

Every ``interval`` steps rank 0 writes the boundary state and every rank
waits in a barrier (:meth:`Runtime.save_periodic`, guarded by
``sync_bound_s``). A failed write is a failure of the job: rank 0 tells its
peers and leaves; the previous checkpoint stays the newest committed one.

``periodic:auto`` (``interval`` 0 and ``mtbf_s`` set): ``auto_probe_step``
steps after a start or restore, rank 0 times one real checkpoint write of
the current state (to ``<ckpt_dir>/.probe/``, deleted after; not a
checkpoint) and every rank takes the interval
``N = max(1, round(sqrt(2 * cost_s * mtbf_s) / step_s))`` (Young 1974; see
:mod:`jitbench.runtime.interval`). Later checkpoints record N in their
manifest, so a restored job keeps it.
"""

from __future__ import annotations

import os
import shutil
import time
from typing import TYPE_CHECKING

import torch

from jitbench.runtime import checkpoint as ckpt
from jitbench.runtime import interval as yd
from jitbench.runtime.config import RuntimeConfig
from jitbench.runtime.strategies.base import Strategy

if TYPE_CHECKING:
    from jitbench.runtime.core import RestoreResult, Runtime

__all__ = ["Periodic"]


class Periodic(Strategy):
    """Synchronous checkpoint every ``interval`` steps (or the Young interval).

    Raises:
        ValueError: neither an interval >= 1 nor an MTBF (``periodic:auto``).
    """

    name = "periodic"

    def __init__(self, config: RuntimeConfig) -> None:
        super().__init__(config)
        self._probe_at = config.auto_probe_step

    @classmethod
    def validate(cls, config: RuntimeConfig) -> None:
        if config.interval < 1 and not config.mtbf_s:
            raise ValueError("periodic checkpointing needs an interval >= 1 or an MTBF (auto)")

    def on_restore(self, rt: Runtime, restored: RestoreResult, manifest: dict | None) -> None:
        prior = (manifest or {}).get("meta", {}).get("config", {})
        if (self.config.interval < 1 and prior.get("strategy") == "periodic"
                and prior.get("interval", 0) > 0):
            self.config.interval = prior["interval"]  # periodic:auto's earlier choice
        self._probe_at = restored.step + self.config.auto_probe_step

    def at_boundary(self, rt: Runtime, step: int) -> None:
        interval = self.config.interval
        if interval > 0 and step % interval == 0:
            rt.save_periodic(step)
        elif interval < 1 and step >= self._probe_at:
            self._probe_interval(rt, step)

    def _probe_interval(self, rt: Runtime, step: int) -> None:
        """``periodic:auto``: rank 0 times one checkpoint write, derives the interval
        from Young's formula and gives every rank its choice (see the module docstring)."""
        c = self.config
        msg: list = [None, None, rt.median_step_s()]
        with rt.checkpoint_phase():
            if rt.rank == 0:
                probe_dir = os.path.join(c.ckpt_dir, ".probe")
                t0 = time.monotonic()
                rt.events.emit("probe", "begin", step=step)
                try:
                    ckpt.write_part(probe_dir, "probe", step, rt.rank, rt.world_size,
                                    rt.boundary.assemble(step, rt.boundary_snapshot()),
                                    rt.manifest_meta())
                    msg[1] = time.monotonic() - t0
                except ckpt.CheckpointWriteError as exc:
                    rt.fail("storage_error", error=str(exc), save=False)
                finally:
                    shutil.rmtree(probe_dir, ignore_errors=True)
                rt.events.emit("probe", "end", step=step, dur_s=msg[1])
                step_s = msg[2] or msg[1]
                msg[0] = yd.steps_for_interval(yd.young_interval_s(msg[1], c.mtbf_s), step_s)
            if torch.distributed.is_available() and torch.distributed.is_initialized():
                torch.distributed.broadcast_object_list(msg, src=0)
        n, cost_s, step_s = msg
        c.interval = n
        rt.events.emit("auto_interval", step=step, interval=n, cost_s=cost_s, step_s=step_s,
                       mtbf_s=c.mtbf_s,
                       young_interval_s=yd.young_interval_s(cost_s, c.mtbf_s),
                       daly_interval_s=yd.daly_interval_s(cost_s, c.mtbf_s),
                       formula="N = max(1, round(sqrt(2 * cost_s * mtbf_s) / step_s)) "
                               "(Young 1974)", durable=True)
        if step % n == 0:
            rt.save_periodic(step)
