"""NvmlProbe against a real NVIDIA driver (skipped where there is none).

Detection: ``pynvml.nvmlInit()``; the skip reason names why it failed. A
healthy GPU delivers no Xid events on demand, so this checks that the probe
initialises, registers what the device supports, waits out a timeout without
inventing events, reads a snapshot whose unsupported parts degrade to
recorded errors, and shuts down cleanly.
"""

from __future__ import annotations

import json
import time

import pytest


def _nvml_unavailable() -> str | None:
    try:
        import pynvml
    except ImportError as e:
        return f"nvidia-ml-py (pynvml) not installed: {e}"
    try:
        pynvml.nvmlInit()
    except Exception as e:
        return f"no NVIDIA driver/GPU: nvmlInit failed: {type(e).__name__}: {e}"
    try:
        n = pynvml.nvmlDeviceGetCount()
    finally:
        pynvml.nvmlShutdown()
    return None if n > 0 else "NVIDIA driver present but no GPU (device count 0)"


_WHY = _nvml_unavailable()

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_WHY is not None, reason=_WHY or "")]


def test_nvml_probe_on_device_0():
    from jitbench.runtime.health import NvmlProbe, make_probe

    p = NvmlProbe(0)
    try:
        assert p.source == "nvml" and "driver" in p.reason
        assert "XidCriticalError" in p.registered, p.errors
        t0 = time.monotonic()
        events = p.poll(200)
        waited = time.monotonic() - t0
        # A healthy machine has no pending Xids; if it has, they must decode.
        for ev in events:
            assert ev.source == "nvml" and ev.device_index == 0
        if not events:
            assert 0.15 <= waited < 5.0
        s = p.snapshot()
        json.dumps(s)
        assert s["source"] == "nvml"
        # Every field is either a value or a recorded error.
        if s["ecc_mode"]["current"] is None:
            assert "ecc_mode" in s["errors"]
        if s["remapped_rows"]["pending"] is None:
            assert "remapped_rows" in s["errors"]
        if s["recovery_action"]["code"] is None:
            assert "recovery_action" in s["errors"]
        for loc, by_counter in s["ecc"].items():
            for counter, pair in by_counter.items():
                for what, v in pair.items():
                    assert v is not None or f"ecc.{loc}.{counter}.{what}" in s["errors"]
    finally:
        p.close()
    q = make_probe(0, None)
    try:
        assert q.source == "nvml", q.reason
    finally:
        q.close()
