"""GPU faults: simulated NVIDIA Xid errors, delivered through the runtime's health probe.

What this module simulates
--------------------------
A GPU that reports a hardware or driver fault through the NVIDIA driver's Xid
mechanism (and the ECC counters behind it). :class:`SimulatedProbe` delivers
injected Xid codes through the same ``poll()`` interface as the runtime's
NVML probe (:class:`jitbench.runtime.health.nvml.NvmlProbe`), so the
runtime's watchdog code path is identical on CPU and GPU. The ``xid`` fault
(:class:`jitbench.faults.gpu.SimulateXid`) feeds it.

The meaning of each code, and whether it is fatal, is the runtime's table
(:mod:`jitbench.runtime.health.xid`, with its NVIDIA sources). Timestamps of
simulated events are taken at :meth:`SimulatedProbe.inject`, i.e. the moment
the fault was injected (``t_wall``: ``time.time()``, ``t_mono``:
``time.monotonic()``, both in s).
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

from jitbench.runtime.health.probe import GpuEvent, HealthProbe, empty_snapshot
from jitbench.runtime.health.xid import SBE_INFO, describe_xid

__all__ = ["SimulatedProbe"]

_DBE_LIKE = {48, 140}  # uncorrectable, device memory (DRAM)
_SRAM_UNCORRECTED = {94, 95}  # contained/uncontained: counted as SRAM here (simulation choice)


class SimulatedProbe(HealthProbe):
    """Same interface as :class:`~jitbench.runtime.health.nvml.NvmlProbe`; events come
    from :meth:`inject`.

    Thread-safe: ``inject`` may be called from any thread while another
    thread blocks in ``poll``; events come out in injection order.
    ``snapshot`` returns plausible counters driven by what was injected
    (only events for this probe's ``device_index`` count):
    48/140/"dbe" add one volatile+aggregate uncorrected error (total, dram);
    94/95 the same in sram; 92/"sbe" one corrected error; 48/94/95/140 also
    mark a row remap pending; 64 sets remap failure; 63 marks a remap pending
    with one corrected row. The recovery action becomes GPU_RESET after a
    fatal event (NODE_REBOOT for 79, 119, 120) and stays NONE otherwise.
    """

    source = "simulated"
    _STOP = object()

    def __init__(self, device_index: int = 0, reason: str = "simulated probe requested") -> None:
        self.device_index = int(device_index)
        self.reason = reason
        self._q: queue.Queue[Any] = queue.Queue()
        self._lock = threading.Lock()
        self._closed = False
        self._snap = empty_snapshot("simulated", self.device_index)
        self._snap["ecc_mode"] = {"current": 1, "pending": 1}
        for loc in self._snap["ecc"].values():
            for pair in loc.values():
                pair.update(corrected=0, uncorrected=0)
        self._snap["remapped_rows"] = {
            "corrected": 0,
            "uncorrected": 0,
            "pending": False,
            "failure": False,
        }
        self._snap["recovery_action"] = {"code": 0, "name": "NONE"}
        self.injected: list[GpuEvent] = []

    def inject(
        self, xid_code: int | None, device_index: int | None = None, kind: str = "xid"
    ) -> GpuEvent:
        """Inject one event; returns it. ``kind``: "xid", "dbe" (xid defaults to
        48), "sbe" (xid None) or "gpu_lost" (xid 79). Timestamps are taken now."""
        dev = self.device_index if device_index is None else int(device_index)
        if kind == "dbe":
            xid_code = 48 if xid_code is None else xid_code
        elif kind == "gpu_lost":
            xid_code = 79
        if kind == "sbe":
            info = SBE_INFO
            xid_code = None
        elif xid_code is None:
            raise ValueError(f"kind {kind!r} needs an xid_code")
        else:
            info = describe_xid(int(xid_code))
            xid_code = int(xid_code)
        ev = GpuEvent(dev, kind, xid_code, info, time.time(), time.monotonic(), "simulated")
        with self._lock:
            if self._closed:
                raise RuntimeError("SimulatedProbe is closed")
            self.injected.append(ev)
            if dev == self.device_index:
                self._count(ev)
            self._q.put(ev)
        return ev

    def _count(self, ev: GpuEvent) -> None:
        s = self._snap
        ecc = s["ecc"]

        def bump(loc: str, what: str) -> None:
            for c in ("volatile", "aggregate"):
                ecc["total"][c][what] += 1
                ecc[loc][c][what] += 1

        x = ev.xid
        if ev.kind == "sbe" or x == 92:
            bump("dram", "corrected")
        if ev.kind == "dbe" or x in _DBE_LIKE:
            bump("dram", "uncorrected")
        if x in _SRAM_UNCORRECTED:
            bump("sram", "uncorrected")
        rr = s["remapped_rows"]
        if ev.kind == "dbe" or x in _DBE_LIKE or x in _SRAM_UNCORRECTED:
            rr["uncorrected"] += 1
            rr["pending"] = True
        if x == 63:
            rr["corrected"] += 1
            rr["pending"] = True
        if x == 64:
            rr["failure"] = True
        if ev.fatal:
            ra = (2, "NODE_REBOOT") if x in (79, 119, 120) else (1, "GPU_RESET")
            if s["recovery_action"]["code"] in (0, None) or ra[0] == 2:
                s["recovery_action"] = {"code": ra[0], "name": ra[1]}

    def poll(self, timeout_ms: int) -> list[GpuEvent]:
        if self._closed:
            return []
        timeout_s = max(0, int(timeout_ms)) / 1000.0
        out: list[GpuEvent] = []
        try:
            item = self._q.get(timeout=timeout_s) if timeout_s > 0 else self._q.get_nowait()
        except queue.Empty:
            return out
        while True:
            if item is self._STOP:
                return out
            out.append(item)
            try:
                item = self._q.get_nowait()
            except queue.Empty:
                return out

    def snapshot(self) -> dict[str, Any]:
        import copy

        with self._lock:
            snap = copy.deepcopy(self._snap)
        snap["t_wall"] = time.time()
        return snap

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._q.put(self._STOP)  # wake a poll() that is waiting
