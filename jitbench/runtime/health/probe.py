"""The GPU health probe protocol: events, the probe interface, a probe that reports nothing.

A probe delivers the health events of one device through ``poll()``:
:class:`~jitbench.runtime.health.nvml.NvmlProbe` reads them from the driver
(NVML), jitbench's fault injector delivers simulated ones through the same
interface (:class:`jitbench.faults.xid.SimulatedProbe`), and
:class:`SilentProbe` stands in where neither is available. The runtime polls
a probe from its watchdog (:class:`~jitbench.runtime.health.check.GpuHealth`),
so a real and a simulated Xid take the same code path.

Times: ``t_wall`` is ``time.time()`` (s, epoch), ``t_mono`` is
``time.monotonic()`` (s). For NVML events they are taken when ``poll()``
receives the event (NVML event data carries no timestamp); for simulated
events they are taken at ``inject()``, i.e. the moment the fault was injected.
Timeouts are in milliseconds (``timeout_ms``), as in NVML.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from typing import Any

from jitbench.runtime.health.xid import XidInfo

__all__ = ["GpuEvent", "HealthProbe", "ProbeUnavailable", "SilentProbe", "empty_snapshot"]


@dataclass(frozen=True)
class GpuEvent:
    """One GPU health event.

    device_index: NVML device index (the simulated probe: as injected).
    kind: "xid" (an Xid critical error), "dbe" (double-bit ECC event; carries
    xid=48, the Xid the driver logs for a DBE), "sbe" (single-bit ECC event,
    xid None), "gpu_lost" (NVML says the GPU is lost; carries xid=79), or
    "other:0x..." (an unexpected NVML event type).
    xid: the Xid code or None. info: its :class:`XidInfo`.
    t_wall: ``time.time()`` in s; t_mono: ``time.monotonic()`` in s (see
    module docstring for when they are taken). source: "nvml" | "simulated".
    """

    device_index: int
    kind: str
    xid: int | None
    info: XidInfo
    t_wall: float
    t_mono: float
    source: str

    @property
    def fatal(self) -> bool:
        return self.info.fatal

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form (for the event log)."""
        d = asdict(self)
        d["fatal"] = self.fatal
        return d


class ProbeUnavailable(RuntimeError):
    """Raised by :class:`NvmlProbe` when NVML or the device cannot be used."""


class HealthProbe(ABC):
    """A source of GPU health events for one device.

    Thread-safety: ``poll`` is meant to be called from one watchdog thread;
    ``snapshot`` and ``close`` may be called from any thread.
    """

    #: "nvml" or "simulated".
    source: str = ""
    #: Why this probe was chosen (set by :func:`make_probe`), human readable.
    reason: str = ""
    device_index: int = 0

    @abstractmethod
    def poll(self, timeout_ms: int) -> list[GpuEvent]:
        """Wait up to ``timeout_ms`` milliseconds for events and return them.

        Returns as soon as at least one event is available (together with any
        others already pending), or an empty list when the timeout passes.
        Never raises for NVML errors; returns [] after ``close()``.
        """

    @abstractmethod
    def snapshot(self) -> dict[str, Any]:
        """Current health counters (JSON-serialisable).

        Keys: source, device_index, t_wall (s), ecc_mode {current, pending},
        ecc {total|dram|sram: {volatile|aggregate: {corrected, uncorrected}}}
        (counts), remapped_rows {corrected, uncorrected, pending, failure},
        recovery_action {code, name}, errors {dotted key: error string}.
        A value that could not be read is None and its key is in ``errors``.
        """

    @abstractmethod
    def close(self) -> None:
        """Release resources. Idempotent."""

    def __enter__(self) -> HealthProbe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def empty_snapshot(source: str, device_index: int) -> dict[str, Any]:
    """A :meth:`HealthProbe.snapshot` with every counter unknown (None)."""
    def pair() -> dict[str, Any]:
        return {"corrected": None, "uncorrected": None}

    return {
        "source": source,
        "device_index": device_index,
        "t_wall": time.time(),
        "ecc_mode": {"current": None, "pending": None},
        "ecc": {
            loc: {"volatile": pair(), "aggregate": pair()} for loc in ("total", "dram", "sram")
        },
        "remapped_rows": {"corrected": None, "uncorrected": None, "pending": None, "failure": None},
        "recovery_action": {"code": None, "name": None},
        "errors": {},
    }


class SilentProbe(HealthProbe):
    """A probe that reports nothing: no NVML here (``reason`` says why).

    ``poll`` waits its timeout (so a polling loop does not spin) and returns [];
    ``snapshot`` has every counter unknown, with the reason under ``errors``.
    """

    source = "none"

    def __init__(self, device_index: int = 0, reason: str = "no health source") -> None:
        self.device_index = int(device_index)
        self.reason = reason
        self._closed = threading.Event()

    def poll(self, timeout_ms: int) -> list[GpuEvent]:
        if not self._closed.is_set():
            self._closed.wait(max(0, int(timeout_ms)) / 1000.0)
        return []

    def snapshot(self) -> dict[str, Any]:
        snap = empty_snapshot(self.source, self.device_index)
        snap["errors"]["probe"] = self.reason
        return snap

    def close(self) -> None:
        self._closed.set()
