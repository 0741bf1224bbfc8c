"""``jit``: just-in-time checkpointing (Gupta et al., EuroSys 2024), whole-job restart.

In data-parallel training every replica holds the same parameters and
optimizer state, which change only in the optimizer step after the gradient
all-reduce. When a peer fails, a healthy replica blocks (or errors) in the
next collective while still holding the state of the last iteration
boundary; this strategy saves that state *then* (every survivor writes its
own part; with ``RuntimeConfig(writer_ranks="split")`` the survivors share it,
each writing 1/R, :mod:`jitbench.runtime.writers`), the facade ends the process so the elastic agent restarts the
job, and the restart restores the newest valid checkpoint, so at most one
minibatch is re-executed per failure.

Per step it keeps the boundary snapshot current (``snapshot_each_step``: RNG
streams, buffers, scheduler, scaler, hyper-parameters, data position; a few
KB, measured by ``benchmarks/runtime_step_cost.py``, the ``rt_s`` of
step-end events).

Backstop (``jit:backstop=N``, ``jitbench run --strategy jit --backstop
periodic:N``): rank 0 also writes a synchronous periodic checkpoint every N
steps (:meth:`Runtime.save_periodic`, every rank waits in its barrier), the
low-frequency safety net the JIT paper recommends for a failure that loses
every copy of the JIT checkpoint (the only healthy replica dies while writing
it): the restart then replays at most N steps instead of everything since
the newest older checkpoint. It costs one periodic checkpoint every N steps;
a failed backstop write is a failure of the job, as under ``periodic:N``.
A user script's ``RuntimeConfig(interval=N)`` does the same.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jitbench.runtime.checkpoint import CheckpointWriteError
from jitbench.runtime.config import EXIT_FAILURE, EXIT_FAILURE_SAVED, RuntimeConfig
from jitbench.runtime.strategies.base import Strategy, overrides
from jitbench.runtime.writers import agree_writers

if TYPE_CHECKING:
    from jitbench.runtime.core import Runtime

__all__ = ["WRITER_RANKS", "JustInTime"]

WRITER_RANKS = ("all", "split")
"""Values of ``RuntimeConfig.writer_ranks`` (see :class:`RuntimeConfig`)."""


class JustInTime(Strategy):
    """Save the last boundary when a failure is declared (see the module docstring)."""

    name = "jit"
    snapshot_each_step = True

    def on_optimizer_step(self, rt: Runtime) -> None:
        # CUDA: wait here, still in the compute phase and without the lock, until
        # the gradient collective has finished on the device. Otherwise the host
        # runs ahead of a hung NCCL kernel: it queues this optimizer step behind
        # it, moves the step counter, scheduler and CPU-resident optimizer
        # counters on, and a JIT save would pair them with device tensors that
        # never got this update. With the wait, a hang keeps the main thread
        # here, at the last boundary on host and device alike.
        rt.boundary.device_events.sync()

    def hooks_optimizer_step(self, rt: Runtime) -> bool:
        # the wait has work only where the state lives on a GPU; a subclass's own
        # on_optimizer_step always runs
        return (overrides(self, "on_optimizer_step", JustInTime)
                or bool(rt.boundary.device_events.devices))

    @property
    def backstop(self) -> int:
        """Steps between the backstop's periodic checkpoints (0: none): the registry
        option ``backstop`` (``jit:backstop=N``), else ``RuntimeConfig.interval``. Read
        when the strategy is set (``Runtime.set_strategy``, ``register``:
        :meth:`hooks_boundary`) and at every boundary where it is not 0."""
        return int(self.config.options.get("backstop") or self.config.interval or 0)

    def hooks_boundary(self, rt: Runtime) -> bool:
        # only the backstop has work at a boundary (its interval is fixed while this
        # strategy is set: set_strategy asks again); a subclass's own at_boundary
        # always runs
        return overrides(self, "at_boundary", JustInTime) or self.backstop > 0

    def at_boundary(self, rt: Runtime, step: int) -> None:
        every = self.backstop
        if every > 0 and step % every == 0:
            rt.save_periodic(step)

    @classmethod
    def validate(cls, config: RuntimeConfig) -> None:
        super().validate(config)
        if config.writer_ranks not in WRITER_RANKS:
            raise ValueError(f"writer_ranks must be one of {', '.join(WRITER_RANKS)}, "
                             f"got {config.writer_ranks!r}")

    def my_slice(self, rt: Runtime) -> tuple[int, int] | None:
        """``(i, n)``: the slice this survivor writes under ``writer_ranks = "split"`` or
        ``jit:split=1`` (:func:`jitbench.runtime.writers.agree_writers`); None: a full copy (``all``, a
        single survivor, no notices' store, or the store failed)."""
        notices = getattr(rt, "_notices", None)
        split = self.config.writer_ranks == "split" or self.config.options.get("split")
        if not split or notices is None or rt.world_size < 2:
            return None
        try:
            writers = agree_writers(notices.store, rt.completed, rt.rank, rt.world_size,
                                    self.config.split_grace_s)
        except Exception as exc:  # noqa: BLE001 - the store is gone: write a full copy
            rt.events.emit("error", where="split writers", error=repr(exc)[:300])
            return None
        rt.events.emit("writers", "point", step=rt.completed, writers=writers)
        return (writers.index(rt.rank), len(writers)) if len(writers) > 1 else None

    def on_failure(self, rt: Runtime, trigger: str, phase: str) -> int:
        """Write this rank's JIT part of the last boundary.

        Returns:
            :data:`EXIT_FAILURE_SAVED` when the part committed, else
            :data:`EXIT_FAILURE` (the failure came inside the optimizer step, the
            optimizer step did not finish within ``save_lock_timeout_s``, or the
            write failed).
        """
        with rt.consistent_state() as why:
            if why is not None:
                rt.events.emit("save", "skip", kind="jit", reason=why, durable=True)
                return EXIT_FAILURE
            # parameters and optimizer equal the last boundary; RNG and buffers
            # come from its snapshot
            try:
                rt.write_checkpoint("jit", rt.completed, rt.boundary.snapshot,
                                    slice_of=self.my_slice(rt))
            except CheckpointWriteError:
                return EXIT_FAILURE
            return EXIT_FAILURE_SAVED
