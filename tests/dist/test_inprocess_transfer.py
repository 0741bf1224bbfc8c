"""broadcast_state sends a checkpoint-form state bitwise from one rank to the others (gloo)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from datetime import timedelta

import pytest
import torch.distributed as dist

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(120)]

WORKER = textwrap.dedent("""
    import sys, hashlib, pickle
    from datetime import timedelta
    import numpy as np, torch, torch.distributed as dist
    from jitbench.runtime.inprocess.transfer import broadcast_state
    rank, port = int(sys.argv[1]), int(sys.argv[2])
    torch.manual_seed(0)
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=30))
    dist.init_process_group("gloo", store=dist.PrefixStore("pg/g1", store), rank=rank,
                            world_size=3, timeout=timedelta(seconds=30))
    def make():
        g = torch.Generator().manual_seed(7)
        return {"model": {"w": torch.randn(300, 17, generator=g), "b": torch.randn(17, generator=g),
                          "steps": torch.tensor(42, dtype=torch.int64)},
                "optimizer": {"state": {0: {"exp_avg": torch.randn(5, generator=g).to(torch.bfloat16)}},
                              "param_groups": [{"lr": 0.1, "params": [0]}]},
                "rng": {"torch": torch.get_rng_state(), "numpy": np.random.default_rng(3).bit_generator.state},
                "mask": torch.tensor([True, False]), "empty": torch.empty(0, 4),
                "step": 9, "data": ("epoch", 2, [1, 2])}
    src = 1
    state, nbytes = broadcast_state(make() if rank == src else None, src=src)
    want = make()
    def flat(o, p=""):
        if isinstance(o, torch.Tensor):
            yield p, (str(o.dtype), tuple(o.shape), o.view(-1).view(torch.uint8).tolist() if o.numel() else [])
        elif isinstance(o, dict):
            for k in sorted(o, key=str): yield from flat(o[k], f"{p}/{k}")
        elif isinstance(o, (list, tuple)):
            yield p, type(o).__name__
            for i, v in enumerate(o): yield from flat(v, f"{p}/{i}")
        else:
            yield p, repr(o)
    ok = list(flat(state)) == list(flat(want))
    print("OK" if ok else "DIFF", nbytes, flush=True)
    dist.destroy_process_group()
""")


def test_state_arrives_bitwise_on_every_rank(tmp_path):
    script = tmp_path / "w.py"
    script.write_text(WORKER)
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                          timeout=timedelta(seconds=30))
    ps = [subprocess.Popen([sys.executable, str(script), str(r), str(store.port)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
          for r in range(3)]
    outs = [p.communicate(timeout=100) for p in ps]
    for p, (o, e) in zip(ps, outs, strict=True):
        assert p.returncode == 0, e[-2000:]
        words = o.split()
        assert words[0] == "OK", o
        # 300*17 + 17 float32, one int64, 5 bf16, the RNG byte tensor, 2 bools
        assert int(words[1]) == (300 * 17 + 17) * 4 + 8 + 5 * 2 + 5056 + 2
