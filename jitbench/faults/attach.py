"""Wire the fault library into a worker: injector, health probe, notices, I/O hook.

:func:`attach` is what :mod:`jitbench.harness.worker` calls once per process;
everything a fault needs at run time is set up here, so the worker only calls
:meth:`~jitbench.faults.base.Injector.at` at its injection points and asks
:attr:`Attached.collective_timeouts` for the per-step collective timeout.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jitbench.faults import make_fault
from jitbench.faults.base import FaultSpec, Injector
from jitbench.faults.collective import collective_timeouts
from jitbench.faults.gpu import rank_probe
from jitbench.faults.storage import install_io_hook
from jitbench.runtime.events import EventLog
from jitbench.runtime.health import GpuHealth, HealthProbe
from jitbench.runtime.notice import PeerNotices


@dataclass
class Attached:
    """The fault machinery of one rank in one attempt."""

    injector: Injector
    probe: HealthProbe
    notices: PeerNotices
    collective_timeouts: dict[int, float]
    """``{step: timeout_s}`` for the gradient collective (``nccl-timeout``)."""


def attach(rt: Any, plan: list[FaultSpec], *, rank: int, attempt: int, world_size: int,
           device_index: int, backend: str, seed: int, run_dir: str | os.PathLike,
           ckpt_dir: str | os.PathLike, events: EventLog, notice_store: Any) -> Attached:
    """Set up this rank's faults under the runtime ``rt``.

    Args:
        rt: the :class:`~jitbench.runtime.core.Runtime` (gets the notices and the
            GPU health check; its ``leaving`` and ``leave_lock`` make the injector
            hold a fault that falls due while the process is ending, so a dying
            process never consumes it). A stand-in needs ``set_notices``,
            ``add_check``, ``leaving`` and ``leave_lock``.
        plan: the run's faults (all ranks).
        notice_store: a store client with its own connection, namespaced per
            attempt (for :class:`~jitbench.runtime.notice.PeerNotices`).
    """
    faults = [make_fault(f) for f in plan]
    notices = PeerNotices(notice_store, rank, world_size)
    rt.set_notices(notices)
    probe = rank_probe(plan, rank, device_index, backend, events)
    rt.add_check(GpuHealth(probe, events))
    injector = Injector(faults, rank, attempt, Path(run_dir) / "faults_fired", events,
                        context={"probe": probe, "ckpt_dir": Path(ckpt_dir), "seed": seed,
                                 "world_size": world_size},
                        leaving=lambda: rt.leaving, leave_lock=rt.leave_lock)
    install_io_hook(injector)
    fired = {f.spec.id for f in faults if injector.has_fired(f)}
    return Attached(injector, probe, notices, collective_timeouts(faults, fired))
