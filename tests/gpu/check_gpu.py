#!/usr/bin/env python
"""One-shot NVML health check for a lent GPU machine (no pytest).

Usage: python tests/gpu/check_gpu.py OUT.json [WAIT_S]

Initialises NVML and records, as JSON in OUT.json (also printed):
driver/NVML/CUDA driver versions, device count; for device 0: name, UUID,
ECC mode, ECC counters (volatile/aggregate x corrected/uncorrected; total,
DRAM and SRAM), remapped rows, the GPU recovery action (field
NVML_FI_DEV_GET_GPU_RECOVERY_ACTION where the installed nvidia-ml-py has it),
the supported event types; then registers an event set for Xid critical
errors + double-bit ECC, waits WAIT_S seconds (default 1) and records what
arrived (a healthy GPU: nothing). Every query that fails (NotSupported, no
permission, missing in this nvidia-ml-py...) is recorded as an error string
instead of aborting. Finally, if the jitbench package is importable, the same
is done through jitbench.runtime.health.NvmlProbe.

Exit status: 0 if NVML initialised and the JSON was written, 2 if nvmlInit
failed (the JSON still records why), 1 on a usage error.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from typing import Any


def _err(e: BaseException) -> str:
    try:
        return f"{type(e).__name__}: {e}"
    except Exception:
        return type(e).__name__


class Recorder:
    def __init__(self) -> None:
        self.errors: dict[str, str] = {}

    def call(self, key: str, fn_name: str, *args: Any, mod: Any) -> Any:
        try:
            fn = getattr(mod, fn_name)
        except AttributeError:
            self.errors[key] = f"{fn_name} not provided by the installed nvidia-ml-py"
            return None
        try:
            v = fn(*args)
        except Exception as e:
            self.errors[key] = _err(e)
            return None
        if isinstance(v, bytes):
            v = v.decode(errors="replace")
        return v


def check(out: dict[str, Any], wait_s: float) -> int:
    try:
        import pynvml
    except ImportError as e:
        out["nvml_init"] = f"ImportError: {e}"
        return 2
    out["pynvml_file"] = getattr(pynvml, "__file__", None)
    try:
        from importlib.metadata import version

        out["nvidia_ml_py_version"] = version("nvidia-ml-py")
    except Exception as e:
        out["nvidia_ml_py_version"] = _err(e)
    try:
        pynvml.nvmlInit()
    except Exception as e:
        out["nvml_init"] = _err(e)
        return 2
    out["nvml_init"] = "ok"
    r = Recorder()
    out["errors"] = r.errors
    nv = pynvml
    try:
        out["driver_version"] = r.call("driver_version", "nvmlSystemGetDriverVersion", mod=nv)
        out["nvml_version"] = r.call("nvml_version", "nvmlSystemGetNVMLVersion", mod=nv)
        out["cuda_driver_version"] = r.call(
            "cuda_driver_version", "nvmlSystemGetCudaDriverVersion", mod=nv
        )
        out["device_count"] = r.call("device_count", "nvmlDeviceGetCount", mod=nv)
        if not out["device_count"]:
            return 0
        h = r.call("handle", "nvmlDeviceGetHandleByIndex", 0, mod=nv)
        if h is None:
            return 0
        dev: dict[str, Any] = {"index": 0}
        out["device0"] = dev
        dev["name"] = r.call("name", "nvmlDeviceGetName", h, mod=nv)
        dev["uuid"] = r.call("uuid", "nvmlDeviceGetUUID", h, mod=nv)
        dev["pci_bus_id"] = None
        pci = r.call("pci", "nvmlDeviceGetPciInfo", h, mod=nv)
        if pci is not None:
            b = pci.busId
            dev["pci_bus_id"] = b.decode() if isinstance(b, bytes) else str(b)
        mode = r.call("ecc_mode", "nvmlDeviceGetEccMode", h, mod=nv)
        dev["ecc_mode"] = None if mode is None else {"current": mode[0], "pending": mode[1]}

        etypes = {
            "corrected": nv.NVML_MEMORY_ERROR_TYPE_CORRECTED,
            "uncorrected": nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
        }
        ctypes_ = {"volatile": nv.NVML_VOLATILE_ECC, "aggregate": nv.NVML_AGGREGATE_ECC}
        locs = {
            "dram": getattr(nv, "NVML_MEMORY_LOCATION_DRAM", 2),
            "sram": getattr(nv, "NVML_MEMORY_LOCATION_SRAM", 7),
        }
        ecc: dict[str, Any] = {"total": {}, "dram": {}, "sram": {}}
        for cn, ct in ctypes_.items():
            for k in ecc:
                ecc[k][cn] = {}
            for en, et in etypes.items():
                ecc["total"][cn][en] = r.call(
                    f"ecc.total.{cn}.{en}", "nvmlDeviceGetTotalEccErrors", h, et, ct, mod=nv
                )
                for ln, loc in locs.items():
                    ecc[ln][cn][en] = r.call(
                        f"ecc.{ln}.{cn}.{en}",
                        "nvmlDeviceGetMemoryErrorCounter",
                        h,
                        et,
                        ct,
                        loc,
                        mod=nv,
                    )
        dev["ecc"] = ecc
        rr = r.call("remapped_rows", "nvmlDeviceGetRemappedRows", h, mod=nv)
        dev["remapped_rows"] = (
            None
            if rr is None
            else dict(zip(("corrected", "uncorrected", "pending", "failure"), rr, strict=True))
        )

        fid = getattr(nv, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", None)
        if fid is None:
            dev["recovery_action"] = None
            r.errors["recovery_action"] = (
                "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION not in the installed nvidia-ml-py"
            )
        else:
            vals = r.call("recovery_action", "nvmlDeviceGetFieldValues", h, [fid], mod=nv)
            dev["recovery_action"] = None
            if vals is not None:
                v = vals[0]
                if v.nvmlReturn != nv.NVML_SUCCESS:
                    r.errors["recovery_action"] = _err(nv.NVMLError(v.nvmlReturn))
                else:
                    fields = {
                        0: "dVal",
                        1: "uiVal",
                        2: "ulVal",
                        3: "ullVal",
                        4: "sllVal",
                        5: "siVal",
                        6: "usVal",
                    }
                    code = getattr(v.value, fields.get(int(v.valueType), "uiVal"))
                    names = {
                        getattr(nv, n): n
                        for n in dir(nv)
                        if n.startswith("NVML_GPU_RECOVERY_ACTION_")
                    }
                    dev["recovery_action"] = {
                        "code": code,
                        "name": names.get(code),
                        "value_type": int(v.valueType),
                    }

        sup = r.call("supported_event_types", "nvmlDeviceGetSupportedEventTypes", h, mod=nv)
        dev["supported_event_types"] = None if sup is None else hex(sup)
        if sup is not None:
            dev["supported_event_names"] = sorted(
                n
                for n in dir(nv)
                if n.startswith("nvmlEventType")
                and n not in ("nvmlEventTypeAll", "nvmlEventTypeNone")
                and isinstance(getattr(nv, n), int)
                and getattr(nv, n) & sup
            )

        # Event set: Xid critical errors + double-bit ECC; each alone if the pair fails.
        ev: dict[str, Any] = {"registered": [], "events": [], "wait_s": wait_s}
        dev["event_set"] = ev
        es = r.call("event_set_create", "nvmlEventSetCreate", mod=nv)
        if es is not None:
            want = {
                "XidCriticalError": nv.nvmlEventTypeXidCriticalError,
                "DoubleBitEccError": nv.nvmlEventTypeDoubleBitEccError,
            }
            mask = want["XidCriticalError"] | want["DoubleBitEccError"]
            try:
                nv.nvmlDeviceRegisterEvents(h, mask, es)
                ev["registered"] = list(want)
            except Exception as e:
                r.errors["register.both"] = _err(e)
                for n, b in want.items():
                    try:
                        nv.nvmlDeviceRegisterEvents(h, b, es)
                        ev["registered"].append(n)
                    except Exception as e2:
                        r.errors[f"register.{n}"] = _err(e2)
            deadline = time.monotonic() + wait_s
            t0 = time.monotonic()
            while ev["registered"]:
                left_ms = int(max(0.0, deadline - time.monotonic()) * 1000)
                try:
                    d = nv.nvmlEventSetWait_v2(es, left_ms)
                except Exception as e:
                    if getattr(e, "value", None) == nv.NVML_ERROR_TIMEOUT:
                        ev["timeout_after_s"] = round(time.monotonic() - t0, 3)
                    else:
                        r.errors["event_wait"] = _err(e)
                    break
                ev["events"].append(
                    {
                        "eventType": hex(d.eventType),
                        "eventData": int(d.eventData),
                        "t_mono": time.monotonic(),
                    }
                )
                if left_ms == 0:
                    break
            r.call("event_set_free", "nvmlEventSetFree", es, mod=nv)
    finally:
        r.call("shutdown", "nvmlShutdown", mod=nv)
    return 0


def check_jitbench(out: dict[str, Any]) -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.dirname(os.path.dirname(here)))  # repo root
    try:
        from jitbench.runtime import health
    except Exception as e:
        out["jitbench"] = {"import": _err(e)}
        return
    res: dict[str, Any] = {}
    out["jitbench"] = res
    try:
        p = health.make_probe(0, None)
        res["probe"] = type(p).__name__
        res["reason"] = p.reason
        res["registered"] = getattr(p, "registered", None)
        t0 = time.monotonic()
        res["poll_events"] = [e.to_dict() for e in p.poll(300)]
        res["poll_s"] = round(time.monotonic() - t0, 3)
        res["snapshot"] = p.snapshot()
        res["probe_errors"] = dict(getattr(p, "errors", {}))
        p.close()
    except Exception:
        res["exception"] = traceback.format_exc()


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 1
    path = argv[1]
    wait_s = float(argv[2]) if len(argv) > 2 else 1.0
    out: dict[str, Any] = {"t_wall": time.time(), "python": sys.version}
    try:
        rc = check(out, wait_s)
    except Exception:
        out["exception"] = traceback.format_exc()
        rc = 0 if out.get("nvml_init") == "ok" else 2
    if rc == 0:
        check_jitbench(out)
    text = json.dumps(out, indent=2, default=str)
    with open(path, "w") as f:
        f.write(text + "\n")
    print(text)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv))
