"""The JIT save's device-to-host copy on CUDA does not queue behind a hung kernel
(skipped without a CUDA device).

A hung NCCL all-reduce is stood in for by a kernel that spins for several
seconds (``torch.cuda._sleep``) on the training stream, queued after the
boundary, as the next step's collective would be. ``host_copy`` must return
the boundary's values while that kernel still runs, and must give up with one
clear error when the boundary itself is behind the kernel.
"""

from __future__ import annotations

import time

import pytest
import torch

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]


def _cycles_per_s() -> float:
    # An idle GPU runs at a low clock and boosts under load (an H200: 345 MHz
    # idle, 1980 MHz busy), so calibrate after a warm-up spin, take the fastest
    # of three, and let the caller spin with a margin.
    best = 0.0
    torch.cuda._sleep(int(2e9))
    for _ in range(3):
        torch.cuda.synchronize()
        t0 = time.monotonic()
        torch.cuda._sleep(int(5e8))
        torch.cuda.synchronize()
        best = max(best, 5e8 / max(time.monotonic() - t0, 1e-6))
    return best


def test_host_copy_does_not_wait_for_a_hung_training_stream():
    from jitbench.runtime.device_copy import BoundaryEvents, DeviceCopyError, host_copy

    dev = torch.device("cuda", torch.cuda.current_device())
    state = {"model": {"w": torch.randn(1 << 20, device=dev)},
             "optimizer": {"state": {0: {"exp_avg": torch.randn(4096, device=dev)}}},
             "step": 7}
    expect = {"w": state["model"]["w"].cpu(),
              "m": state["optimizer"]["state"][0]["exp_avg"].cpu()}
    spin_s = 8.0
    cps = _cycles_per_s()
    spin = int(cps * spin_s * 1.5)
    boundary = BoundaryEvents([dev])
    boundary.mark()
    t_launch = time.monotonic()
    torch.cuda._sleep(spin)  # the "hung collective"
    behind = torch.cuda.Event()
    behind.record()
    t0 = time.monotonic()
    out = host_copy(state, boundary, timeout_s=spin_s / 2)
    took = time.monotonic() - t0
    still_hung = not behind.query()
    since = time.monotonic() - t_launch
    assert took < spin_s / 2, (
        f"host_copy took {took:.2f} s behind a kernel spinning {spin / cps:.1f} s (nominal): "
        f"it waited for the training stream (spin over: {not still_hung})")
    assert still_hung, (f"the spin ended within {since:.2f} s of its launch (nominal "
                        f"{spin / cps:.1f} s at {cps:.3g} cycles/s): calibration off, test void")
    assert out["model"]["w"].device.type == "cpu" and out["step"] == 7
    assert torch.equal(out["model"]["w"], expect["w"])
    assert torch.equal(out["optimizer"]["state"][0]["exp_avg"], expect["m"])

    # a boundary queued *behind* the spinning kernel: a clear error, no blocked thread
    late = BoundaryEvents([dev])  # made (with its side stream) before the hang, as the runtime does
    torch.cuda._sleep(spin)
    late.mark()
    t0 = time.monotonic()
    with pytest.raises(DeviceCopyError, match="did not finish the work of the last"):
        host_copy(state, late, timeout_s=0.5)
    assert time.monotonic() - t0 < spin_s / 2
    torch.cuda.synchronize()
