"""GPU faults: an Xid error reported by the driver, delivered through the health probe.

``xid``
    What it stands for: the NVIDIA driver reports a GPU fault through its Xid
    mechanism (see :mod:`jitbench.runtime.health.xid` for the table and its sources),
    e.g. 79 "GPU has fallen off the bus", 48 double-bit ECC, 94/95 contained/
    uncontained ECC. How it is produced: the target rank injects the code into
    its :class:`~jitbench.faults.xid.SimulatedProbe`, the same ``poll()``
    interface through which :class:`~jitbench.runtime.health.nvml.NvmlProbe` delivers
    real events, so the runtime's reaction is the code path a real Xid takes.
    For a fatal code the rank's main thread then blocks where it stands (a
    GPU that stopped: its kernels never complete, its collectives hang).
    What the ranks see: the rank's watchdog polls the probe (every
    ``poll_s``, 50 ms) through :class:`~jitbench.runtime.health.check.GpuHealth`;
    a fatal Xid makes the rank
    post a notice to the job's store (:class:`~jitbench.runtime.notice.PeerNotices`,
    a key under the attempt's PrefixStore), wait briefly for its peers to
    acknowledge it, and leave *without* writing a JIT part (its device state
    is untrusted; exit 76). Its peers' watchdogs see the notice on their next
    tick and save at once (trigger ``notice``), instead of waiting for the
    hang bound. Non-fatal codes (13, 31, 43, 45, 63, 68, 92, ...) are logged as
    ``gpu_event`` events and training goes on.

Probe choice (:func:`rank_probe`): the simulated probe when this rank has an
``xid`` fault planned, or when the backend is gloo (no GPU in use); otherwise
:func:`~jitbench.runtime.health.nvml.make_probe`, which reads NVML and falls back
to the simulated probe, saying why, where there is no driver. The probe's source
and reason are logged as a ``probe`` event at start.
"""

from __future__ import annotations

import threading
from typing import Any

from jitbench.faults.base import Fault, FaultSpec, Param
from jitbench.faults.xid import SimulatedProbe
from jitbench.runtime.events import EventLog
from jitbench.runtime.health import HealthProbe, describe_xid, make_probe


class SimulateXid(Fault):
    """Deliver Xid ``code`` through the rank's simulated health probe."""

    name = "xid"
    family = "gpu"
    point = "step"
    summary = ("a GPU Xid error (--xid CODE, default 79) through the health probe; fatal: "
               "the rank leaves, peers are told and save at once")
    params = {"code": Param(int, 79, "Xid code (see jitbench.runtime.health.xid.XID_TABLE)", low=1)}

    def fails(self) -> bool:
        return describe_xid(self.p["code"]).fatal

    def event_fields(self, ctx: dict[str, Any]) -> dict:
        info = describe_xid(self.p["code"])
        return {"xid": self.p["code"], "fatal": info.fatal, "meaning": info.meaning}

    def fire(self, ctx: dict[str, Any]) -> None:
        probe = ctx.get("probe")
        if not isinstance(probe, SimulatedProbe):
            raise RuntimeError("the xid fault needs the rank's SimulatedProbe")
        probe.inject(self.p["code"])
        if self.fails():
            threading.Event().wait()  # the device stopped: this rank's work never completes


def plans_xid(plan: list[FaultSpec], rank: int) -> bool:
    """Whether an ``xid`` fault targets ``rank``."""
    return any(f.kind == SimulateXid.name and f.rank == rank for f in plan)


def rank_probe(plan: list[FaultSpec], rank: int, device_index: int, backend: str,
               events: EventLog | None = None) -> HealthProbe:
    """This rank's GPU health probe (see the module docstring); logs a ``probe`` event."""
    if plans_xid(plan, rank):
        probe: HealthProbe = SimulatedProbe(device_index, reason="an xid fault is planned "
                                            "for this rank")
    elif backend != "nccl":
        probe = SimulatedProbe(device_index, reason=f"backend {backend}: no GPU in use")
    else:
        probe = make_probe(device_index, fallback=SimulatedProbe)
    if events is not None:
        events.emit("health_probe", source=probe.source, reason=probe.reason, device=device_index,
                    durable=True)
    return probe
