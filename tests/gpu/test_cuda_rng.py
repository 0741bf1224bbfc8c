"""The per-step capture of the CUDA RNG streams follows CUDA's initialisation
(skipped without a CUDA device).

A boundary's capture reads the CUDA streams only once torch says CUDA is
initialised (``jitbench.runtime.rng._CUDA_ON``, set through
``torch.cuda._lazy_call``): before, it holds none; after, every device's generator
state, which restores the stream. Run in a fresh interpreter, so that CUDA is not
initialised before the runtime's import."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]

SCRIPT = textwrap.dedent("""
    import torch
    from jitbench.runtime import rng
    from jitbench.runtime.rng import restore_rng, rng_state
    from jitbench.runtime.state import Boundary, Registered

    assert rng._CUDA_ON is False, "CUDA counted as initialised before any CUDA work"
    model = torch.nn.Linear(4, 4)
    b = Boundary()
    b.register(Registered(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1)), 0)
    b.refresh(0)
    assert b.snapshot["rng"][3] == (), b.snapshot["rng"][3]
    torch.zeros(1, device="cuda")  # initialises CUDA
    assert rng._CUDA_ON is True, "the lazy-init callback did not run"
    torch.cuda.manual_seed_all(7)
    b.refresh(1)
    cuda = b.snapshot["rng"][3]
    want = torch.cuda.get_rng_state_all()
    assert len(cuda) == len(want) == torch.cuda.device_count()
    assert all(torch.equal(a, w) for a, w in zip(cuda, want))
    saved = rng_state(b.snapshot["rng"])
    x = torch.rand(3, device="cuda")
    restore_rng(saved)
    assert torch.equal(torch.rand(3, device="cuda"), x)
    print("ok")
""")


def test_the_capture_reads_the_cuda_streams_once_cuda_is_initialised():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
