"""The strategy protocol: what a checkpointing/recovery strategy does, and when.

The :class:`~jitbench.runtime.core.Runtime` (the facade) owns the step loop,
the state lock, the boundary snapshot, the watchdog and the exit path; a
strategy decides *what to do* at the points the facade calls it:

=====================  ==========================================================
hook                   called
=====================  ==========================================================
``restore_from``       by :meth:`Runtime.restore` on every rank, before the
                       checkpoint directory is read: a state from elsewhere (a
                       peer's memory) or None
``on_restore``         at the end of a restore (fresh start included)
``on_optimizer_step``  on the main thread at the optimizer's pre-hook, still in
                       the ``compute`` phase, before the state is held
``at_boundary``        after each step's end event, at the boundary (main thread)
``before_redo``        after an in-process recovery (``on_failure`` returned None),
                       before the failed step runs again (main thread)
``on_failure``         once per failure, with a consistent state to work from
                       (after :meth:`Runtime.restore`, with a registered model);
                       any thread: the main thread (an exception escaped the
                       step) or the watchdog (hang, SIGTERM, a check)
``leave``              :meth:`Runtime.set_strategy` switches to another strategy
``finish``             :meth:`Runtime.finish`, before the final state and barrier
``on_exit``            the process is ending (after a failure): stop background
                       work that would otherwise commit without its event
=====================  ==========================================================

Class attributes: ``snapshot_each_step`` (the facade refreshes the boundary
snapshot at every step end while it holds the state, so a failure save reads the
last boundary; ``benchmarks/runtime-step-cost.txt`` measures its cost). Whether
restore looks in the checkpoint directory (``reads_checkpoints``) and the replay
promise (``replay_bound``) are the registry entry's
(:data:`jitbench.runtime.strategies.REGISTRY`: ``restores``, ``replay_bound``), so
the harness, which reads the registry without importing a strategy, and the
runtime agree.

A strategy reads the live :class:`~jitbench.runtime.config.RuntimeConfig` it
was built with (the facade's own: ``periodic:auto`` writes the interval it
chose into it, and every checkpoint's manifest records it).

Adding a strategy is one module holding one subclass plus one registry line.
Two that recover in process, and the hooks they use (both build on
:class:`~jitbench.runtime.strategies.jit_inprocess.InProcessRecovery`, which
implements ``on_failure`` and ``before_redo``):

- ``jit-inprocess`` (survivors keep their processes): ``snapshot_each_step``
  like ``jit``; ``on_failure`` agrees on the new membership, ``before_redo``
  re-forms the process group and feeds the newcomer the current boundary,
  then :meth:`Runtime.steps` yields the failed step again; the JIT part is
  written after the transfer, in the background, as the backstop.
- ``inmem:N`` (copies of the state in a peer's host memory every N steps):
  ``at_boundary`` copies :meth:`Runtime.boundary_state` every N steps and sends
  it to its peer in the background; ``on_restore`` copies the restored state;
  after a failure every member adopts the newest surviving copy and
  :meth:`Runtime.steps` continues from the step after it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from jitbench.runtime.config import EXIT_FAILURE, RuntimeConfig
from jitbench.runtime.strategies import REGISTRY

if TYPE_CHECKING:
    from jitbench.runtime.core import RestoreResult, Runtime

__all__ = ["Loaded", "Strategy", "overrides"]


@dataclass
class Loaded:
    """A checkpoint state that a strategy found outside the checkpoint directory."""

    state: dict
    """The complete state (:data:`jitbench.runtime.state.REQUIRED_KEYS`)."""
    manifest: dict
    """Its manifest (``meta``: ``optimizer_state_keys``, ``median_step_s``, ``config``)."""
    step: int
    """Optimizer steps completed in ``state``."""
    kind: str
    """What it is, as restore events report it (e.g. ``memory``: an in-memory copy)."""
    source: str
    """Where it came from (e.g. the peer's rank), for the restore event."""


class Strategy:
    """Base class and protocol of every strategy; every hook's default does nothing.

    Args:
        config: the runtime's live settings (``interval``, ``mtbf_s``, ...).

    Raises:
        ValueError: the settings do not suit the strategy (:meth:`validate`).
    """

    name: ClassVar[str] = ""
    """The registry name (``jit``, ``periodic``, ...)."""
    snapshot_each_step: ClassVar[bool] = False
    """Refresh the boundary snapshot at every step end (see the module docstring)."""
    def __init__(self, config: RuntimeConfig) -> None:
        self.validate(config)
        self.config = config

    @classmethod
    def validate(cls, config: RuntimeConfig) -> None:
        """Refuse settings the strategy cannot run with.

        Raises:
            ValueError: one line naming what is missing.
        """

    @property
    def reads_checkpoints(self) -> bool:
        """Restore loads the newest valid checkpoint of the checkpoint directory (False:
        a fresh start, or a state from elsewhere): the registry entry's ``restores``
        (True for a name the registry does not know)."""
        entry = REGISTRY.get(self.name)
        return entry.restores if entry is not None else True

    @property
    def replay_bound(self) -> str:
        """What the strategy promises to replay per failure: the registry entry's
        ``replay_bound`` (``one``, ``interval``, ``interval-async``, ``all``, ``none``;
        :class:`jitbench.runtime.strategies.Entry`)."""
        return REGISTRY[self.name].replay_bound

    def restore_from(self, rt: Runtime) -> Loaded | None:
        """A state from a source other than the checkpoint directory, or None (read
        the directory). Must give the same step on every rank, or None on every rank."""
        return None

    def on_restore(self, rt: Runtime, restored: RestoreResult, manifest: dict | None) -> None:
        """The restore has loaded ``restored`` (``step`` 0: fresh start, ``manifest`` None)."""

    def on_optimizer_step(self, rt: Runtime) -> None:
        """Main thread, at the optimizer's pre-hook, before the state is held."""

    def hooks_optimizer_step(self, rt: Runtime) -> bool:
        """Whether :meth:`on_optimizer_step` has work for ``rt`` as registered now (asked
        when the strategy is set and at each ``register``); False spares the call at
        every step (several µs right after a CPU training step). Default: whether the
        class (or the instance) overrides it."""
        return overrides(self, "on_optimizer_step", Strategy)

    def at_boundary(self, rt: Runtime, step: int) -> None:
        """Step ``step`` has completed and its end event is written (main thread); called
        only where :meth:`hooks_boundary` said so."""

    def hooks_boundary(self, rt: Runtime) -> bool:
        """Whether :meth:`at_boundary` has work for ``rt`` (asked when the strategy is set
        and at each ``register``, as :meth:`hooks_optimizer_step`); False spares the call
        at every step. Default: whether the class (or the instance) overrides it."""
        return overrides(self, "at_boundary", Strategy)

    def on_failure(self, rt: Runtime, trigger: str, phase: str) -> int | None:
        """React to a failure (``trigger``: ``hang``, ``sigterm``, ``exception``, ...;
        ``phase``: the runtime's phase when it was declared).

        Returns:
            The process's exit status (the facade then ends the process), or None:
            the strategy recovered in process and training goes on with the failed
            step re-executed (see :meth:`Runtime.steps`).
        """
        return EXIT_FAILURE

    def leaves_on(self, trigger: str) -> bool:
        """Whether a failure with ``trigger`` ends this process (every failure does,
        unless the strategy recovers in process from a peer's failure). While such a
        failure is handled by another thread, the main thread starts no new step: it
        would post collectives for a rank that is leaving, and its peers would run
        ahead of the failure into later steps."""
        return True

    def before_redo(self, rt: Runtime) -> int | None:
        """After :meth:`on_failure` returned None, before the failed step runs again, on
        the main thread, outside the failed step's ``with`` block (its exception and
        the frames it held are released). Returns an exit status to end the process
        instead, or None."""
        return None

    def leave(self, rt: Runtime) -> None:
        """:meth:`Runtime.set_strategy` is switching away from this strategy."""

    def finish(self, rt: Runtime) -> None:
        """End of training, before the final state is written and the final barrier."""

    def on_exit(self, rt: Runtime) -> None:
        """The process is ending after a failure; must not block for long."""


def overrides(strategy: Strategy, name: str, owner: type) -> bool:
    """Whether ``strategy``'s method ``name`` is another function than ``owner``'s: a
    subclass's override, or a function set on the instance (what the ``hooks_*``
    flags ask, so that a subclass's work is never skipped for its parent's flag)."""
    fn = getattr(strategy, name)
    return getattr(fn, "__func__", fn) is not getattr(owner, name)
