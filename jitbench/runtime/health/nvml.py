"""The NVML health probe: real Xid and ECC events of one GPU (nvidia-ml-py).

NVML API reference, https://docs.nvidia.com/deploy/nvml-api/ (event sets:
``nvmlEventSetCreate``, ``nvmlDeviceRegisterEvents``, ``nvmlEventSetWait_v2``;
``nvmlDeviceGetTotalEccErrors``, ``nvmlDeviceGetMemoryErrorCounter``,
``nvmlDeviceGetRemappedRows``, ``nvmlDeviceGetFieldValues`` with
``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION``). The meaning of each code is
:mod:`jitbench.runtime.health.xid`'s.

:func:`make_probe` builds an :class:`NvmlProbe` where there is a driver and
falls back to another probe, saying why, where there is none.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from jitbench.runtime.health.probe import (
    GpuEvent,
    HealthProbe,
    ProbeUnavailable,
    SilentProbe,
    empty_snapshot,
)
from jitbench.runtime.health.xid import SBE_INFO, XidInfo, describe_xid

log = logging.getLogger(__name__)

__all__ = ["PROBE_ENV", "NvmlProbe", "make_probe"]

PROBE_ENV = "JITBENCH_GPU_PROBE"
"""Environment variable read by :func:`make_probe` when ``simulate`` is None:
``simulated`` forces the fallback probe, ``nvml`` prefers the real one."""
_GPU_LOST_NOTE = "NVML returned GPU_IS_LOST while waiting for events"


def _import_pynvml() -> Any:
    import pynvml  # nvidia-ml-py

    return pynvml


def _err(e: BaseException) -> str:
    try:
        return f"{type(e).__name__}: {e}"
    except Exception:  # pragma: no cover - str() of an NVMLError can itself fail
        return type(e).__name__


def _recovery_action_names(nv: Any) -> dict[int, str]:
    prefix = "NVML_GPU_RECOVERY_ACTION_"
    return {
        getattr(nv, n): n[len(prefix) :]
        for n in dir(nv)
        if n.startswith(prefix) and isinstance(getattr(nv, n), int)
    }


_VALUE_FIELDS = {
    0: "dVal",
    1: "uiVal",
    2: "ulVal",
    3: "ullVal",
    4: "sllVal",
    5: "siVal",
    6: "usVal",
}


class NvmlProbe(HealthProbe):
    """Health probe for one GPU, reading NVML events (nvidia-ml-py).

    ``device_index`` is the NVML index, which is not the CUDA index when
    ``CUDA_VISIBLE_DEVICES`` or ``CUDA_DEVICE_ORDER`` remap devices; pass
    ``uuid`` ("GPU-..."; e.g. from ``torch.cuda.get_device_properties(i).uuid``)
    to pick the device unambiguously.

    Registers ``nvmlEventTypeXidCriticalError | nvmlEventTypeDoubleBitEccError``
    (plus ``nvmlEventTypeSingleBitEccError`` with ``include_sbe``), restricted
    to what ``nvmlDeviceGetSupportedEventTypes`` reports; if registering the
    mask fails, each type is tried alone. ``registered`` lists what took;
    ``errors`` records every NVML call that failed (name -> message).

    Raises :class:`ProbeUnavailable` when NVML cannot be initialised or the
    device not found (use :func:`make_probe` for a probe that never raises).
    """

    source = "nvml"

    #: Upper bound on events returned by one poll().
    MAX_EVENTS_PER_POLL = 64

    def __init__(
        self, device_index: int = 0, *, uuid: str | None = None, include_sbe: bool = False
    ) -> None:
        self.device_index = int(device_index)
        self.errors: dict[str, str] = {}
        self.registered: list[str] = []
        self.reason = ""
        self._lock = threading.Lock()  # serialises event-set use against close()
        self._closed = threading.Event()
        self._event_set: Any = None
        self._lost_reported = False
        try:
            self._nv = _import_pynvml()
        except ImportError as e:
            raise ProbeUnavailable(f"nvidia-ml-py (pynvml) is not installed: {e}") from e
        nv = self._nv
        try:
            nv.nvmlInit()
        except Exception as e:
            raise ProbeUnavailable(f"nvmlInit failed (no NVIDIA driver/GPU?): {_err(e)}") from e
        try:
            if uuid is not None:
                u = str(uuid)
                if not u.startswith(("GPU-", "MIG-")):
                    u = "GPU-" + u
                self._handle = nv.nvmlDeviceGetHandleByUUID(u)
            else:
                self._handle = nv.nvmlDeviceGetHandleByIndex(self.device_index)
        except Exception as e:
            self._shutdown()
            which = f"uuid {uuid}" if uuid is not None else f"index {self.device_index}"
            raise ProbeUnavailable(f"NVML device {which} not available: {_err(e)}") from e
        if uuid is not None:
            idx = self._call("nvmlDeviceGetIndex", self._handle)
            if isinstance(idx, int):
                self.device_index = idx
        self._register_events(include_sbe)
        drv = self._call("nvmlSystemGetDriverVersion")
        self.reason = f"NVML available (driver {drv}), device {self.device_index}"

    # -- helpers ---------------------------------------------------------

    def _call(self, name: str, *args: Any, key: str | None = None) -> Any:
        """Call ``pynvml.<name>(*args)``; on any failure record it and return None."""
        try:
            fn = getattr(self._nv, name)
        except AttributeError:
            self.errors[key or name] = "not provided by the installed nvidia-ml-py"
            return None
        try:
            return fn(*args)
        except Exception as e:
            self.errors[key or name] = _err(e)
            return None

    def _register_events(self, include_sbe: bool) -> None:
        nv = self._nv
        wanted = {
            "XidCriticalError": getattr(nv, "nvmlEventTypeXidCriticalError", 0x8),
            "DoubleBitEccError": getattr(nv, "nvmlEventTypeDoubleBitEccError", 0x2),
        }
        if include_sbe:
            wanted["SingleBitEccError"] = getattr(nv, "nvmlEventTypeSingleBitEccError", 0x1)
        supported = self._call("nvmlDeviceGetSupportedEventTypes", self._handle)
        if isinstance(supported, int):
            for name, bit in list(wanted.items()):
                if not supported & bit:
                    self.errors[f"register.{name}"] = "not in nvmlDeviceGetSupportedEventTypes"
                    del wanted[name]
        if not wanted:
            return
        es = self._call("nvmlEventSetCreate")
        if es is None:
            return
        mask = 0
        for bit in wanted.values():
            mask |= bit
        try:
            nv.nvmlDeviceRegisterEvents(self._handle, mask, es)
            self.registered = list(wanted)
        except Exception as e:
            self.errors["nvmlDeviceRegisterEvents"] = _err(e)
            for name, bit in wanted.items():
                try:
                    nv.nvmlDeviceRegisterEvents(self._handle, bit, es)
                    self.registered.append(name)
                except Exception as e2:
                    self.errors[f"register.{name}"] = _err(e2)
        if self.registered:
            self._event_set = es
        else:
            self._call("nvmlEventSetFree", es)

    def _decode(self, data: Any, t_wall: float, t_mono: float) -> GpuEvent:
        nv = self._nv
        etype = int(data.eventType)
        edata = int(data.eventData)
        if etype & getattr(nv, "nvmlEventTypeXidCriticalError", 0x8):
            kind, xid, info = "xid", edata, describe_xid(edata)
        elif etype & getattr(nv, "nvmlEventTypeDoubleBitEccError", 0x2):
            kind, xid, info = "dbe", 48, describe_xid(48)
        elif etype & getattr(nv, "nvmlEventTypeSingleBitEccError", 0x1):
            kind, xid, info = "sbe", None, SBE_INFO
        else:
            kind, xid = f"other:0x{etype:x}", None
            info = XidInfo(
                None,
                f"NVML event type 0x{etype:x} (data {edata})",
                "log",
                False,
                False,
                "unexpected NVML event type",
            )
        return GpuEvent(self.device_index, kind, xid, info, t_wall, t_mono, "nvml")

    def _gpu_lost_event(self) -> GpuEvent:
        info = describe_xid(79)
        return GpuEvent(
            self.device_index,
            "gpu_lost",
            79,
            XidInfo(79, info.meaning, info.action, True, True, _GPU_LOST_NOTE),
            time.time(),
            time.monotonic(),
            "nvml",
        )

    # -- HealthProbe -----------------------------------------------------

    def poll(self, timeout_ms: int) -> list[GpuEvent]:
        timeout_ms = max(0, int(timeout_ms))
        if self._closed.is_set():
            return []
        if self._event_set is None:
            # Nothing registered: honour the wait so a polling loop does not spin.
            self._closed.wait(timeout_ms / 1000.0)
            return []
        nv = self._nv
        # Compare NVML return codes, not exception class names (those vary by version).
        timeout_code = getattr(nv, "NVML_ERROR_TIMEOUT", 10)
        lost_code = getattr(nv, "NVML_ERROR_GPU_IS_LOST", 15)
        out: list[GpuEvent] = []
        with self._lock:
            if self._closed.is_set() or self._event_set is None:
                return []
            t0 = time.monotonic()
            failed = False
            wait_ms = timeout_ms
            while len(out) < self.MAX_EVENTS_PER_POLL:
                try:
                    data = nv.nvmlEventSetWait_v2(self._event_set, wait_ms)
                except Exception as e:
                    code = getattr(e, "value", None)
                    if code == timeout_code:
                        break
                    failed = True
                    if code == lost_code:
                        if not self._lost_reported:
                            self._lost_reported = True
                            out.append(self._gpu_lost_event())
                    else:
                        self.errors["nvmlEventSetWait_v2"] = _err(e)
                    break
                out.append(self._decode(data, time.time(), time.monotonic()))
                wait_ms = 0  # drain what is already pending, do not wait again
        if failed and not out:
            # A failing wait (e.g. GPU lost) returns at once; do not let callers spin.
            left = timeout_ms / 1000.0 - (time.monotonic() - t0)
            if left > 0:
                self._closed.wait(left)
        return out

    def snapshot(self) -> dict[str, Any]:
        nv = self._nv
        snap = empty_snapshot("nvml", self.device_index)
        errs: dict[str, str] = snap["errors"]
        h = self._handle

        def q(key: str, name: str, *args: Any) -> Any:
            try:
                fn = getattr(nv, name)
            except AttributeError:
                errs[key] = f"{name} not provided by the installed nvidia-ml-py"
                return None
            try:
                return fn(*args)
            except Exception as e:
                errs[key] = _err(e)
                return None

        if self._closed.is_set():
            errs["probe"] = "closed"
            return snap
        mode = q("ecc_mode", "nvmlDeviceGetEccMode", h)
        if mode is not None:
            snap["ecc_mode"] = {"current": int(mode[0]), "pending": int(mode[1])}
        etypes = {
            "corrected": getattr(nv, "NVML_MEMORY_ERROR_TYPE_CORRECTED", 0),
            "uncorrected": getattr(nv, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1),
        }
        ctypes_ = {
            "volatile": getattr(nv, "NVML_VOLATILE_ECC", 0),
            "aggregate": getattr(nv, "NVML_AGGREGATE_ECC", 1),
        }
        locs = {
            "dram": getattr(nv, "NVML_MEMORY_LOCATION_DRAM", 2),
            "sram": getattr(nv, "NVML_MEMORY_LOCATION_SRAM", 7),
        }
        for cname, ctype in ctypes_.items():
            for ename, etype in etypes.items():
                v = q(f"ecc.total.{cname}.{ename}", "nvmlDeviceGetTotalEccErrors", h, etype, ctype)
                snap["ecc"]["total"][cname][ename] = None if v is None else int(v)
                for lname, loc in locs.items():
                    v = q(
                        f"ecc.{lname}.{cname}.{ename}",
                        "nvmlDeviceGetMemoryErrorCounter",
                        h,
                        etype,
                        ctype,
                        loc,
                    )
                    snap["ecc"][lname][cname][ename] = None if v is None else int(v)
        rr = q("remapped_rows", "nvmlDeviceGetRemappedRows", h)
        if rr is not None:
            corr, unc, pending, failure = rr
            snap["remapped_rows"] = {
                "corrected": int(corr),
                "uncorrected": int(unc),
                "pending": bool(pending),
                "failure": bool(failure),
            }
        snap["recovery_action"] = self._recovery_action(errs)
        return snap

    def _recovery_action(self, errs: dict[str, str]) -> dict[str, Any]:
        nv = self._nv
        out: dict[str, Any] = {"code": None, "name": None}
        fid = getattr(nv, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", None)
        if fid is None:
            errs["recovery_action"] = (
                "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION not provided by the installed nvidia-ml-py"
            )
            return out
        try:
            vals = nv.nvmlDeviceGetFieldValues(self._handle, [fid])
            v = vals[0]
            ret = int(v.nvmlReturn)
            if ret != getattr(nv, "NVML_SUCCESS", 0):
                errs["recovery_action"] = _err(nv.NVMLError(ret))
                return out
            attr = _VALUE_FIELDS.get(int(v.valueType), "uiVal")
            code = int(getattr(v.value, attr))
        except Exception as e:
            errs["recovery_action"] = _err(e)
            return out
        out["code"] = code
        out["name"] = _recovery_action_names(nv).get(code, f"UNKNOWN_{code}")
        return out

    def _shutdown(self) -> None:
        try:
            self._nv.nvmlShutdown()
        except Exception as e:
            self.errors["nvmlShutdown"] = _err(e)

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        with self._lock:  # waits for a poll() in progress (bounded by its timeout)
            es, self._event_set = self._event_set, None
            if es is not None:
                self._call("nvmlEventSetFree", es)
            self._shutdown()


Fallback = Callable[[int, str], HealthProbe]
"""``fallback(device_index, reason)``: the probe :func:`make_probe` returns without NVML."""


def make_probe(
    device_index: int = 0,
    simulate: bool | None = None,
    *,
    uuid: str | None = None,
    include_sbe: bool = False,
    fallback: Fallback = SilentProbe,
) -> HealthProbe:
    """Return a health probe for one device; never raises for a missing NVML.

    simulate=True: always the ``fallback`` probe. simulate=None: read
    :data:`PROBE_ENV` ("simulated" forces the fallback), else try
    :class:`NvmlProbe`. simulate=False: try :class:`NvmlProbe` and log a
    warning if it falls back. Whenever :class:`NvmlProbe` cannot be built the
    result is ``fallback(device_index, reason)`` with the reason why (e.g.
    "nvmlInit failed (no NVIDIA driver/GPU?): NVMLError_LibraryNotFound: ...").

    Args:
        fallback: the probe used without NVML: :class:`SilentProbe` (reports
            nothing) by default; jitbench's fault injector passes its
            simulated probe (:class:`jitbench.faults.xid.SimulatedProbe`).
    """
    if simulate is None:
        env = os.environ.get(PROBE_ENV, "").strip().lower()
        if env in ("simulated", "sim", "simulate", "1", "true"):
            return fallback(device_index, f"{PROBE_ENV}={env}")
    if simulate:
        return fallback(device_index, "simulate=True requested")
    try:
        return NvmlProbe(device_index, uuid=uuid, include_sbe=include_sbe)
    except ProbeUnavailable as e:
        reason = str(e)
    except Exception as e:  # never let the probe take the rank down
        reason = f"NvmlProbe failed: {_err(e)}"
    probe = fallback(device_index, reason)
    (log.warning if simulate is False else log.info)(
        "GPU health probe: using %s for device %d: %s", type(probe).__name__, device_index,
        reason
    )
    return probe
