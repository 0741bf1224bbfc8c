#!/usr/bin/env python
"""Which part of a device-to-host copy waits behind a kernel spinning on the training stream?

Usage: python tests/gpu/side_stream_probe.py [SPIN_S]

Each variant runs in a fresh process (driver state such as staging buffers is
per process): a kernel spins SPIN_S seconds on the current stream, then the
variant copies a 4 MiB tensor to the host from another stream and reports how
long that took. A variant that takes about SPIN_S waited for the kernel.

- ``pageable``: a new side stream, ``copy_`` into pageable memory (host_copy today)
- ``pageable_warm``: the same after one small pageable copy on a side stream
  made before the spin (staging buffers already allocated)
- ``stream_before``: side stream created before the spin, pageable copy, no warm-up
- ``pinned_before``: pinned destination and side stream allocated before the spin,
  ``copy_(non_blocking=True)`` then the side stream synchronised
- ``pinned_during``: pinned destination allocated during the spin
Prints one JSON line per variant.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

VARIANTS = ("pageable", "pageable_warm", "stream_before", "pinned_before", "pinned_during")


def one(variant: str, spin_s: float) -> dict:
    import torch

    dev = torch.device("cuda", 0)
    src = torch.randn(1 << 20, device=dev)
    torch.cuda._sleep(int(1e9))  # warm the clocks
    torch.cuda.synchronize()
    t0 = time.monotonic()
    torch.cuda._sleep(int(2e8))
    torch.cuda.synchronize()
    cps = 2e8 / (time.monotonic() - t0)
    side = pinned = None
    if variant in ("pageable_warm", "stream_before", "pinned_before"):
        side = torch.cuda.Stream(device=dev)
    if variant == "pageable_warm":
        with torch.cuda.stream(side):
            torch.empty(16).copy_(src[:16])
    if variant == "pinned_before":
        pinned = torch.empty(src.shape, dtype=src.dtype, pin_memory=True)
    torch.cuda.synchronize()
    t_launch = time.monotonic()
    torch.cuda._sleep(int(cps * spin_s))
    t0 = time.monotonic()
    if side is None:
        side = torch.cuda.Stream(device=dev)
    t_stream = time.monotonic() - t0
    if variant == "pinned_during":
        pinned = torch.empty(src.shape, dtype=src.dtype, pin_memory=True)
    t_alloc = time.monotonic() - t0
    with torch.cuda.stream(side):
        if pinned is not None:
            pinned.copy_(src, non_blocking=True)
            side.synchronize()
            out = pinned
        else:
            out = torch.empty(src.shape, dtype=src.dtype)
            out.copy_(src)
    took = time.monotonic() - t0
    ok = bool(torch.equal(out, src.cpu()))
    return {"variant": variant, "spin_s": spin_s, "took_s": round(took, 3),
            "stream_create_s": round(t_stream, 3), "alloc_s": round(t_alloc, 3),
            "waited_for_spin": took > spin_s / 2, "values_ok": ok,
            "since_launch_s": round(time.monotonic() - t_launch, 3)}


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--one":
        print(json.dumps(one(sys.argv[2], float(sys.argv[3]))), flush=True)
        sys.exit(0)
    spin = float(sys.argv[1]) if len(sys.argv) > 1 else 4.0
    for v in VARIANTS:
        p = subprocess.run([sys.executable, __file__, "--one", v, str(spin)], capture_output=True,
                           text=True, timeout=120)
        print(p.stdout.strip() or json.dumps({"variant": v, "error": p.stderr[-500:]}), flush=True)
