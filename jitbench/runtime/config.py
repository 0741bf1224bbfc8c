"""The runtime's settings and exit statuses (no torch: a run spec builds them)."""

from __future__ import annotations

from dataclasses import dataclass, field

from jitbench import hang

__all__ = ["EXIT_FAILURE", "EXIT_FAILURE_SAVED", "RuntimeConfig"]

EXIT_FAILURE_SAVED = 75
"""Exit status of a rank that detected a failure and committed a JIT checkpoint."""
EXIT_FAILURE = 76
"""Exit status of a rank that detected a failure and had nothing consistent to save."""


@dataclass
class RuntimeConfig:
    """How the runtime checkpoints and detects failures."""

    strategy: str = "jit"
    """A name of the strategy registry (:mod:`jitbench.runtime.strategies`): ``jit``
    (save on failure), ``periodic`` (synchronous, every ``interval`` steps),
    ``periodic-async`` (DCP ``async_save`` every ``interval`` steps) or ``none``."""
    interval: int = 0
    """Steps between periodic checkpoints (under ``jit``, if > 0 and no ``backstop``
    option is set, the backstop's: a safety net for a lost JIT checkpoint).
    ``periodic`` with 0 and ``mtbf_s`` set: chosen at run time (``periodic:auto``)."""
    mtbf_s: float | None = None
    """The job's mean time between failures (s, whole job) for ``periodic:auto``: after
    ``auto_probe_step`` steps rank 0 times one real checkpoint (cost ``o``) and sets
    ``interval = round(sqrt(2 o mtbf_s) / step_s)`` (Young 1974; see
    :mod:`jitbench.runtime.interval`)."""
    options: dict[str, int] = field(default_factory=dict)
    """The strategy's named options with their defaults filled in (``inmem:N:disk=M``:
    ``{"disk": M}``; ``jit:backstop=N``: ``{"backstop": N}``, rank 0's periodic checkpoint
    every N steps under JIT; :attr:`jitbench.runtime.strategies.Entry.options`)."""
    auto_probe_step: int = 3
    """``periodic:auto``: steps (after a start or restore) before the probe checkpoint."""
    ckpt_dir: str = "ckpt"
    """Directory of checkpoint parts (shared by all ranks)."""
    hang_floor_s: float = hang.FLOOR_S
    """Lower bound of the hang-detection bound (s)."""
    hang_factor: float = hang.FACTOR
    """Hang bound = max(hang_floor_s, hang_factor x median step time)."""
    hang_first_s: float = hang.FIRST_S
    """Hang bound (s) before any step time is known (first step, warm-up)."""
    sync_bound_s: float = 120.0
    """Hang bound (s) for checkpoint barriers and the final barrier."""
    final_checkpoint: bool = False
    """Write a checkpoint of the final state at :meth:`Runtime.finish` (rank 0, kind
    ``final``), so a later job can resume from it; under ``jit`` nothing else is
    written when no peer failed."""
    keep_steps: int = 2
    """Committed checkpoint steps kept on disk (older ones pruned after a newer commits)."""
    save_lock_timeout_s: float = 10.0
    """How long a failure save waits for the main thread to leave the optimizer step (s)."""
    device_copy_timeout_s: float = 30.0
    """How long a save waits for the GPU to finish the work of the last boundary
    before copying the state to the host on a side stream (s; CUDA only, see
    :mod:`jitbench.runtime.device_copy`)."""
    poll_s: float = 0.05
    """Watchdog tick (s)."""
    writer_ranks: str = "all"
    """Which survivors write a JIT part: ``all`` (every survivor its own full copy) or
    ``split`` (the survivors agree through the store of the runtime's notices and each
    writes 1/R of the state as its own verifiable part, R = survivors; see
    :mod:`jitbench.runtime.writers`; without notices, or if the store fails, a full
    copy as under ``all``)."""
    split_grace_s: float = 2.0
    """``writer_ranks = "split"``: how long a survivor waits for the others to announce
    themselves (s)."""
    step_cpu_time: bool = False
    """Record the process's CPU time (s, :func:`time.process_time`, every thread) as
    ``cpu_s`` in each step-begin event, for the CPU-time overheads of ``jitbench
    overhead`` (which sets it in every arm alike). Off by default: the system call
    costs about 8 µs per step on the training thread right after a CPU training step
    (``benchmarks/runtime-step-cost.txt``)."""
    run_id: str = ""
    """Identity of the training job (e.g. a hash of its config), recorded in every
    manifest; restore refuses a directory holding parts of another run id."""
