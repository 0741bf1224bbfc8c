"""Declared faults and the per-rank injector.

A fault is data (:class:`FaultSpec`): its kind, the rank(s) it hits, its
trigger (an optimizer step) and parameters. The worker calls
:meth:`Injector.at` at named injection points (``step``: the start of a step;
``collective``: inside the first gradient collective of a step). A fault
fires once per run: before acting, the injector commits a marker file in the
run directory and writes a durable ``fault`` event, so a restarted attempt
that replays the step does not fire it again (``every_attempt`` faults fire in
every attempt, to model a rank that always fails).
"""

from __future__ import annotations

import abc
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from jitbench.runtime.events import EventLog


@dataclass
class FaultSpec:
    """One scheduled fault."""

    kind: str
    """Fault name, e.g. ``kill``, ``nccl-hang`` (``jitbench faults`` lists them)."""
    rank: int = 1
    """Global rank that the fault hits."""
    step: int = 1
    """Optimizer step (1-based) at which it fires."""
    every_attempt: bool = False
    """Fire again in every restarted attempt (a rank that always fails)."""
    params: dict = field(default_factory=dict)
    """Kind-specific parameters."""
    id: str = ""
    """Stable identifier (default ``<kind>@<rank>:<step>``)."""

    def __post_init__(self) -> None:
        if not self.id:
            self.id = f"{self.kind}@{self.rank}:{self.step}"


class Fault(abc.ABC):
    """A fault family member: what it simulates, where it fires, what it does."""

    name: ClassVar[str]
    point: ClassVar[str]
    """Injection point: ``step`` or ``collective``."""
    summary: ClassVar[str]
    """One line for ``jitbench faults``."""
    recoverable: ClassVar[bool] = True
    """JIT checkpointing recovers from it with at most one minibatch replayed."""

    def __init__(self, spec: FaultSpec) -> None:
        self.spec = spec

    @abc.abstractmethod
    def fire(self, ctx: dict[str, Any]) -> None:
        """Act (may not return: kill, hang)."""


class Injector:
    """Fires this rank's scheduled faults at the injection points.

    Args:
        faults: the run's fault plan (all ranks; this rank keeps its own).
        rank: this rank.
        attempt: restart count.
        state_dir: run directory folder for fired markers (shared by all ranks).
        events: this rank's event log.
    """

    def __init__(self, faults: list[Fault], rank: int, attempt: int, state_dir: str | os.PathLike,
                 events: EventLog) -> None:
        self.faults = [f for f in faults if f.spec.rank == rank]
        self.rank, self.attempt = rank, attempt
        self.dir = Path(state_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.events = events
        self.step = 0

    def _marker(self, f: Fault) -> Path:
        return self.dir / f"{f.spec.id.replace('/', '_')}.attempt{self.attempt:03d}"

    def _fired(self, f: Fault) -> bool:
        if f.spec.every_attempt:
            return self._marker(f).exists()
        return any(self.dir.glob(f"{f.spec.id.replace('/', '_')}.attempt*"))

    def at(self, point: str, step: int, **ctx: Any) -> None:
        """Fire every due fault for ``point`` at ``step`` (in plan order)."""
        for f in self.faults:
            if f.point == point and f.spec.step == step and not self._fired(f):
                marker = self._marker(f)
                fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                os.fsync(fd)
                os.close(fd)
                self.events.emit("fault", kind=f.name, fault_id=f.spec.id, step=step,
                                 point=point, durable=True, **f.spec.params)
                f.fire({"step": step, "rank": self.rank, "events": self.events, **ctx})
