"""GPU faults: NVIDIA Xid errors, the GPU health probe, and its simulated twin.

What this module simulates
--------------------------
A GPU that reports a hardware or driver fault through the NVIDIA driver's Xid
mechanism (and the ECC counters behind it). On a machine with a driver the
same interface reads the real events with NVML (``nvidia-ml-py``); without one
:class:`SimulatedProbe` delivers injected Xid codes through exactly the same
``poll()`` so the runtime's watchdog code path is identical on CPU and GPU.

Sources (NVIDIA documentation)
------------------------------
- "Xid Errors", https://docs.nvidia.com/deploy/xid-errors/index.html — the Xid
  listing (meaning and possible causes of each code) and the Xid catalog for
  Ampere and newer GPUs,
  https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html
  (mnemonic, "Resolution Bucket (Immediate Action)": RESTART_APP, RESET_GPU,
  RESTART_BM, CONTACT_SUPPORT, IGNORE ...).
- "Dynamic Page Retirement",
  https://docs.nvidia.com/deploy/dynamic-page-retirement/index.html (Xid 48,
  63, 64).
- "A100 GPU Memory Error Management",
  https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/index.html (row
  remapping, contained vs uncontained errors: Xid 63, 64, 94, 95, and the
  NVML "recovery action" flag).
- NVML API reference, https://docs.nvidia.com/deploy/nvml-api/ (event sets:
  ``nvmlEventSetCreate``, ``nvmlDeviceRegisterEvents``,
  ``nvmlEventSetWait_v2``; ``nvmlDeviceGetTotalEccErrors``,
  ``nvmlDeviceGetMemoryErrorCounter``, ``nvmlDeviceGetRemappedRows``,
  ``nvmlDeviceGetFieldValues`` with ``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION``).

The table below paraphrases those pages; it is not a copy of the catalog,
and the catalog's per-code resolution buckets were not re-checked line by
line against the current spreadsheet when it was written (re-check 32, 61,
69, 74, 140 and 154 first). Where an entry's classification is a judgement
call its ``note`` says so and errs on the side of ``fatal=True`` (a needless restart costs minutes; training
on a corrupt device costs the run).

What "fatal" means here
-----------------------
``fatal=True``: the rank that owns the device must leave the job (its GPU, or
the contents of its memory, can no longer be trusted). Survivors take the JIT
checkpoint; the rank on the faulty device must not contribute its copy.
``fatal=False``: log it. Either the device stays healthy (corrected errors,
row-remap pending), or it is an application error (13, 31, 43, 45, 68): the
CUDA context of the process that caused it is poisoned and *that* process
gets a CUDA error from its own next call, so the probe need not act. Note that
NVML Xid events are per device, not per process: a non-fatal application Xid
may come from another process sharing the GPU.

Unknown Xid codes are treated as fatal (meaning "unknown Xid"), for the same
conservative reason.

Times: ``t_wall`` is ``time.time()`` (s, epoch), ``t_mono`` is
``time.monotonic()`` (s). For NVML events they are taken when ``poll()``
receives the event (NVML event data carries no timestamp); for simulated
events they are taken at ``inject()``, i.e. the moment the fault was injected.
Timeouts are in milliseconds (``timeout_ms``), as in NVML.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from typing import Any

log = logging.getLogger(__name__)

__all__ = [
    "XidInfo",
    "XID_TABLE",
    "FATAL_XIDS",
    "describe_xid",
    "GpuEvent",
    "HealthProbe",
    "NvmlProbe",
    "SimulatedProbe",
    "ProbeUnavailable",
    "make_probe",
    "PROBE_ENV",
]

#: Environment variable read by :func:`make_probe` when ``simulate`` is None:
#: ``simulated`` forces the simulated probe, ``nvml`` prefers the real one.
PROBE_ENV = "JITBENCH_GPU_PROBE"


# --------------------------------------------------------------------------
# Xid table
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class XidInfo:
    """What an Xid code means and what to do about it.

    code: the Xid number (None for events that are not an Xid, e.g. a
    single-bit ECC event). meaning: short description. action: recommended
    action (after the NVIDIA docs). fatal: the owning rank must leave (see
    module docstring). known: the code is in :data:`XID_TABLE`. note: caveats.
    """

    code: int | None
    meaning: str
    action: str
    fatal: bool
    known: bool = True
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _x(code: int, meaning: str, action: str, fatal: bool, note: str = "") -> tuple[int, XidInfo]:
    return code, XidInfo(code, meaning, action, fatal, True, note)


_RESTART_APP = "restart the application (the GPU itself is healthy)"
_RESET_GPU = "leave the job; drain the GPU and reset it (nvidia-smi -r) before reuse"

#: Common Xid codes -> :class:`XidInfo`. See the module docstring for sources.
XID_TABLE: dict[int, XidInfo] = dict(
    [
        _x(
            13,
            "Graphics engine exception (usually an application error, e.g. out-of-range access)",
            _RESTART_APP,
            False,
            "application error: the faulting process gets a CUDA error on its own",
        ),
        _x(
            31,
            "GPU memory page fault (MMU fault; usually an illegal address in the application)",
            _RESTART_APP,
            False,
            "application error; rarely a driver or hardware fault",
        ),
        _x(
            32,
            "Invalid or corrupted push buffer stream",
            _RESET_GPU,
            True,
            "causes per the doc include driver error, system memory corruption, bus error, "
            "thermal and framebuffer corruption; conservative: fatal",
        ),
        _x(
            43,
            "GPU stopped processing (channel reset after an application fault)",
            _RESTART_APP,
            False,
            "application error; the GPU stays usable",
        ),
        _x(
            45,
            "Preemptive cleanup, due to previous errors (channel torn down, e.g. process killed)",
            "none for the device; look for the Xid that preceded it",
            False,
            "follows other errors (e.g. a DBE) or a killed process; the preceding Xid decides",
        ),
        _x(
            48,
            "Double-bit ECC error (uncorrectable memory error, DBE)",
            _RESET_GPU + "; page retirement/row remapping takes effect on reset",
            True,
        ),
        _x(
            61,
            "Internal micro-controller breakpoint/warning",
            _RESET_GPU + "; contact support if it recurs",
            True,
            "uncertain: the doc lists it as a driver/firmware condition that may not stop the "
            "GPU; kept fatal to be conservative",
        ),
        _x(62, "Internal micro-controller halt", _RESET_GPU, True),
        _x(
            63,
            "ECC page retirement or row remapping recording event (remap pending)",
            "keep running; reset the GPU at a convenient time to activate the remap",
            False,
            "a remap is pending, not a failure; the uncorrectable error behind it, if any, "
            "arrives as its own Xid (48/94/95)",
        ),
        _x(
            64,
            "ECC page retirement or row remapper recording failure",
            _RESET_GPU + "; if it recurs after reset the GPU needs RMA",
            True,
        ),
        _x(
            68,
            "Video processor (NVDEC) exception",
            _RESTART_APP,
            False,
            "application/video-engine error; not used by training workloads",
        ),
        _x(
            69,
            "Graphics engine class error",
            _RESET_GPU,
            True,
            "uncertain: causes per the doc are hardware or driver error; conservative: fatal",
        ),
        _x(
            74,
            "NVLink error",
            _RESET_GPU + "; check NVLink/fabric, may need node reboot",
            True,
            "severity depends on the sub-error in the log line; conservative: fatal",
        ),
        _x(
            79,
            "GPU has fallen off the bus",
            "leave the job; the GPU is unreachable: reboot the node / check power and PCIe seating",
            True,
        ),
        _x(
            92,
            "High single-bit ECC error rate",
            "keep running; monitor the corrected-error counters and plan maintenance",
            False,
            "corrected errors: data is intact",
        ),
        _x(
            94,
            "Contained ECC error (uncorrectable, contained to the application that hit it)",
            "leave the job (the process that hit it must restart; others may continue); "
            "reset the GPU at a convenient time to remap the row",
            True,
            "fatal for the rank that owns the device: its state may be corrupt",
        ),
        _x(
            95,
            "Uncontained ECC error (uncorrectable, may affect every process on the GPU)",
            _RESET_GPU,
            True,
        ),
        _x(
            119,
            "GSP RPC timeout (GPU System Processor firmware did not respond)",
            _RESET_GPU + "; reboot the node if the reset fails",
            True,
        ),
        _x(
            120,
            "GSP error (GPU System Processor firmware error)",
            _RESET_GPU + "; reboot the node if the reset fails",
            True,
        ),
        _x(
            140,
            "Unrecovered ECC error (driver could not retire/remap the failing memory)",
            _RESET_GPU,
            True,
            "newer driver branches only; treated like a DBE",
        ),
        _x(
            154,
            "GPU recovery action changed",
            "read the recovery action (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION) and follow it",
            True,
            "uncertain: benign if the new action is NONE; fatal until the action is read",
        ),
    ]
)

#: Xid codes in :data:`XID_TABLE` that are fatal.
FATAL_XIDS: frozenset[int] = frozenset(c for c, i in XID_TABLE.items() if i.fatal)


def describe_xid(code: int) -> XidInfo:
    """Return the :class:`XidInfo` for ``code``.

    Unknown codes give ``XidInfo(code, "unknown Xid", ..., fatal=True,
    known=False)``: a code this table does not know may be a new hardware
    fault, and the cost of a needless restart is bounded while the cost of
    training on a broken device is not.
    """
    code = int(code)
    info = XID_TABLE.get(code)
    if info is not None:
        return info
    return XidInfo(
        code,
        "unknown Xid",
        "treat as fatal: leave the job and check the Xid in the NVIDIA Xid catalog",
        True,
        known=False,
        note="not in jitbench's table; fatal by policy",
    )


_SBE_INFO = XidInfo(
    None,
    "Single-bit ECC error (corrected)",
    "none; monitor counters",
    False,
    True,
    "NVML single-bit ECC event, not an Xid",
)
_GPU_LOST_NOTE = "NVML returned GPU_IS_LOST while waiting for events"


# --------------------------------------------------------------------------
# Events and the probe interface
# --------------------------------------------------------------------------


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


def _empty_snapshot(source: str, device_index: int) -> dict[str, Any]:
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


# --------------------------------------------------------------------------
# Real probe (NVML)
# --------------------------------------------------------------------------


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
            kind, xid, info = "sbe", None, _SBE_INFO
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
        snap = _empty_snapshot("nvml", self.device_index)
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


# --------------------------------------------------------------------------
# Simulated probe
# --------------------------------------------------------------------------

_DBE_LIKE = {48, 140}  # uncorrectable, device memory (DRAM)
_SRAM_UNCORRECTED = {94, 95}  # contained/uncontained: counted as SRAM here (simulation choice)


class SimulatedProbe(HealthProbe):
    """Same interface as :class:`NvmlProbe`; events come from :meth:`inject`.

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
        self._snap = _empty_snapshot("simulated", self.device_index)
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
            info = _SBE_INFO
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


# --------------------------------------------------------------------------
# Factory
# --------------------------------------------------------------------------


def make_probe(
    device_index: int = 0,
    simulate: bool | None = None,
    *,
    uuid: str | None = None,
    include_sbe: bool = False,
) -> HealthProbe:
    """Return a health probe for one device; never raises for a missing NVML.

    simulate=True: always :class:`SimulatedProbe`. simulate=None: read
    :data:`PROBE_ENV` ("simulated" forces simulation), else try
    :class:`NvmlProbe`. simulate=False: try :class:`NvmlProbe` and log a
    warning if it falls back. Whenever :class:`NvmlProbe` cannot be built the
    result is a :class:`SimulatedProbe` whose ``reason`` says why (e.g.
    "nvmlInit failed (no NVIDIA driver/GPU?): NVMLError_LibraryNotFound: ...").
    """
    if simulate is None:
        env = os.environ.get(PROBE_ENV, "").strip().lower()
        if env in ("simulated", "sim", "simulate", "1", "true"):
            return SimulatedProbe(device_index, reason=f"{PROBE_ENV}={env}")
    if simulate:
        return SimulatedProbe(device_index, reason="simulate=True requested")
    try:
        return NvmlProbe(device_index, uuid=uuid, include_sbe=include_sbe)
    except ProbeUnavailable as e:
        reason = str(e)
    except Exception as e:  # never let the probe take the rank down
        reason = f"NvmlProbe failed: {_err(e)}"
    (log.warning if simulate is False else log.info)(
        "GPU health probe: using SimulatedProbe for device %d: %s", device_index, reason
    )
    return SimulatedProbe(device_index, reason=reason)
