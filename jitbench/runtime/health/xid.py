"""NVIDIA Xid errors: what each code means and whether the rank must leave.

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
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["FATAL_XIDS", "SBE_INFO", "XID_TABLE", "XidInfo", "describe_xid"]


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


SBE_INFO = XidInfo(
    None,
    "Single-bit ECC error (corrected)",
    "none; monitor counters",
    False,
    True,
    "NVML single-bit ECC event, not an Xid",
)
"""What a single-bit (corrected) ECC event means; it is not an Xid."""
