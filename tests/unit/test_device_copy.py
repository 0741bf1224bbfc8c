"""Host copies of device state (jitbench.runtime.device_copy) on CPU, and the
runtime's use of them. The CUDA path itself is tested in tests/gpu."""

from __future__ import annotations

import torch

from jitbench.runtime.device_copy import BoundaryEvents, cuda_devices, host_copy, map_tensors


def _state() -> dict:
    return {"model": {"w": torch.arange(6.0).reshape(2, 3), "b": torch.zeros(3)},
            "optimizer": {"state": {0: {"exp_avg": torch.ones(2, 3), "step": torch.tensor(4.0)}},
                          "param_groups": [{"lr": 0.1, "params": [0]}]},
            "rng": (1, [2, torch.tensor([7], dtype=torch.uint8)]), "step": 4}


def test_map_tensors_rebuilds_containers_and_keeps_other_values():
    s = _state()
    seen: list[tuple] = []
    out = map_tensors(s, lambda t: (seen.append(tuple(t.shape)), t * 2)[1])
    assert sorted(seen) == sorted([(2, 3), (3,), (2, 3), (), (1,)])
    assert torch.equal(out["model"]["w"], s["model"]["w"] * 2)
    assert isinstance(out["rng"], tuple) and isinstance(out["rng"][1], list)
    assert out["optimizer"]["param_groups"] == s["optimizer"]["param_groups"]
    assert out["step"] == 4 and out is not s and out["model"] is not s["model"]
    assert torch.equal(s["model"]["w"], torch.arange(6.0).reshape(2, 3))  # input untouched


def test_a_cpu_state_passes_through_without_a_copy():
    s = _state()
    assert cuda_devices([s["model"]["w"], s["model"]["b"]]) == []
    b = BoundaryEvents([])
    b.mark()
    b.wait(0.0)  # nothing recorded: returns at once
    assert host_copy(s, b, timeout_s=0.0) is s


def test_runtime_checkpoint_of_a_cpu_model_is_unchanged(tmp_path):
    """The runtime routes every write through host_copy; on CPU the saved tensors
    are the live ones' values, bitwise."""
    from jitbench.runtime import checkpoint as ckpt
    from jitbench.runtime.config import RuntimeConfig
    from jitbench.runtime.core import Runtime
    from jitbench.runtime.events import EventLog

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    rt = Runtime(RuntimeConfig(strategy="periodic", interval=1, ckpt_dir=str(tmp_path / "ck")),
                 EventLog(tmp_path / "ev" / "attempt000_rank00000.jsonl", 0, 0), 0, 1)
    try:
        rt.register(model, opt)
        assert rt.restore().step == 0
        with rt.step(1):
            model(torch.ones(4, 3)).sum().backward()
            opt.step()
            opt.zero_grad()
        [part] = ckpt.list_parts(tmp_path / "ck")
        state, _ = ckpt.load_part(part, 1)
        assert torch.equal(state["model"]["weight"], model.weight.detach())
        assert torch.equal(state["optimizer"]["state"][0]["exp_avg"],
                           opt.state[model.weight]["exp_avg"])
    finally:
        rt.close()
