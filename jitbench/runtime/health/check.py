"""The runtime wiring of a GPU health probe: a watchdog check over it.

``rt.add_check(GpuHealth(probe, rt.events))`` makes the runtime's watchdog
(:mod:`jitbench.runtime.watchdog`) drain the probe every tick (``poll_s``,
50 ms by default): every event is logged as ``gpu_event``; the first fatal
one (:mod:`jitbench.runtime.health.xid`) is a failure with trigger ``xid``:
the rank tells its peers (notices) and leaves *without* writing a JIT part
(its device state is untrusted); the peers save at once.
"""

from __future__ import annotations

from jitbench.runtime.events import EventLog
from jitbench.runtime.health.probe import HealthProbe

__all__ = ["GpuHealth"]


class GpuHealth:
    """A runtime check (:meth:`jitbench.runtime.core.Runtime.add_check`) over a probe.

    Each call drains the probe without waiting, logs every event as
    ``gpu_event`` and, on the first fatal one, returns the failure for the
    runtime: trigger ``xid``, no JIT save, notify the peers. A probe that
    raises is logged as an ``error`` event and skipped for that tick.
    """

    def __init__(self, probe: HealthProbe, events: EventLog) -> None:
        self.probe = probe
        self.events = events

    def __call__(self) -> dict | None:
        try:
            got = self.probe.poll(0)
        except Exception as exc:  # noqa: BLE001 - a broken probe must not kill the watchdog
            self.events.emit("error", where="gpu probe", error=repr(exc)[:300])
            return None
        fatal = None
        for ev in got:
            self.events.emit("gpu_event", kind=ev.kind, xid=ev.xid, fatal=ev.fatal,
                             meaning=ev.info.meaning, action=ev.info.action, source=ev.source,
                             device=ev.device_index, durable=ev.fatal)
            if ev.fatal and fatal is None:
                fatal = ev
        if fatal is None:
            return None
        return {"trigger": "xid", "save": False, "notify": True, "xid": fatal.xid,
                "reason": f"fatal Xid {fatal.xid} on device {fatal.device_index}: "
                          f"{fatal.info.meaning}"}
