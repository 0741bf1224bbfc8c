"""``--parallel``: parsing, the spec's refusals (one line, exit 2), the sharded checkpoint
format (one part per shard, a step complete only with every shard) and the local-shard
round trip of a DTensor state, on one process."""

from __future__ import annotations

import json
import signal
import sys

import pytest
import torch

from jitbench import cli
from jitbench.errors import SpecError
from jitbench.faults import FaultSpec
from jitbench.harness.parallel import Parallel, parse
from jitbench.runtime import checkpoint as ckpt
from tests.conftest import small_spec


@pytest.mark.parametrize("text, want", [
    ("ddp", Parallel()), ("DDP", Parallel()), ("hsdp:2x2", Parallel("hsdp", 2, 2)),
    (" hsdp:1x4 ", Parallel("hsdp", 1, 4)), ("hsdp:4x1", Parallel("hsdp", 4, 1)),
])
def test_parse(text, want):
    got = parse(text)
    assert got == want
    assert str(got) == text.strip().lower()


@pytest.mark.parametrize("text", ["", "fsdp", "hsdp", "hsdp:2", "hsdp:2x", "hsdp:0x4",
                                  "hsdp:2x0", "hsdp:-1x2", "hsdp:2*2", "hsdp:2x2x1"])
def test_parse_refuses(text):
    with pytest.raises(SpecError, match="--parallel"):
        parse(text)


@pytest.mark.parametrize("kw, needle", [
    ({"parallel": "hsdp:2x3"}, "R x S = 6 ranks, the job has 4"),
    ({"parallel": "hsdp:2x2", "workload": "resnet", "size": None},
     "sharding is wired for the gpt workload only"),
    ({"parallel": "hsdp:2x2", "strategy": "jit:split=1"}, "not wired for sharded training"),
    ({"parallel": "hsdp:2x2", "strategy": "periodic-async:2"}, "not wired for sharded"),
    ({"parallel": "hsdp:2x2", "strategy": "jit-inprocess"}, "not wired for sharded"),
    ({"parallel": "hsdp:2x2", "extra": {"amp": "fp16"}}, "fp16's GradScaler"),
    ({"parallel": "hsdp:2x2", "faults": [FaultSpec("desync", 1, 2)]},
     "fault desync cannot be expressed under --parallel hsdp:2x2"),
])
def test_spec_refuses(kw, needle):
    with pytest.raises(SpecError, match=needle.replace("(", r"\(")):
        small_spec(6, nproc=4, **kw).validate()


def test_spec_fingerprint_keeps_ddp_and_tells_hsdp_apart():
    ddp, hsdp = small_spec(6, nproc=4), small_spec(6, nproc=4, parallel="hsdp:2x2")
    hsdp.validate()
    assert "parallel" not in json.loads(ddp.training_key())
    assert ddp.fingerprint() != hsdp.fingerprint()
    assert ddp.training_key() != hsdp.training_key()
    assert hsdp.without_faults().parallel == "hsdp:2x2"


@pytest.mark.parametrize("args, needle", [
    (["--parallel", "hsdp:2x3", "--nproc", "4"], "R x S = 6 ranks, the job has 4"),
    (["--parallel", "hsdp:2x2", "--nproc", "4", "--workload", "resnet"],
     "gpt workload only"),
    (["--parallel", "zero3"], "--parallel must be ddp or hsdp:RxS"),
])
def test_cli_bad_parallel_is_one_line_exit_2(monkeypatch, capsys, tmp_path, args, needle):
    prev = signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr(sys, "argv", ["jitbench", "run", *args, "--run-dir",
                                      str(tmp_path / "r")])
    try:
        cli.main()
        code = 0
    except SystemExit as exc:
        code = exc.code
    finally:
        signal.signal(signal.SIGTERM, prev)
    err = capsys.readouterr().err
    lines = [x for x in err.strip().splitlines() if x.strip()]
    assert code == 2 and len(lines) == 1 and needle in lines[0], err
    assert not (tmp_path / "r").exists()


def _shard_state(j: int, step: int) -> dict:
    return {"model": {"w": torch.full((2, 3), float(j))}, "step": step}


def test_sharded_step_needs_every_shard(tmp_path):
    d = tmp_path / "ckpt"
    ckpt.write_part(d, "periodic", 3, 0, 4, _shard_state(0, 3), shard_of=(0, 2))
    ckpt.write_part(d, "periodic", 3, 1, 4, _shard_state(1, 3), shard_of=(1, 2))
    # step 5: both survivors hold shard 1; shard 0 lost every replica
    ckpt.write_part(d, "jit", 5, 1, 4, _shard_state(1, 5), shard_of=(1, 2))
    ckpt.write_part(d, "jit", 5, 3, 4, _shard_state(1, 5), shard_of=(1, 2))
    skipped: list = []
    part, manifest = ckpt.newest_valid(d, 4, skipped)
    assert (part.kind, part.step) == ("periodic", 3)
    assert sorted(p.path.name for p, _ in skipped) == ["jit_step00000005_rank00001.pt",
                                                       "jit_step00000005_rank00003.pt"]
    assert all("jit step 5: shard 0 of 2 missing" in why for _, why in skipped)
    # every rank loads its own shard's part of the chosen step
    for shard in (0, 1):
        state, m = ckpt.load_part(part, 4, shard=shard)
        assert m["shard"] == shard and float(state["model"]["w"][0, 0]) == shard
    with pytest.raises(ckpt.CheckpointMismatch, match="2 shards"):
        ckpt.load_part(part, 4, shard=2)


def test_local_shards_round_trip_into_dtensors(tmp_path):
    """A one-rank mesh: localize gives plain tensors that load with weights_only, and
    the optimizer's moments come back as DTensors placed like their parameter."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    from jitbench.runtime.sharded import (
        globalize,
        is_sharded,
        localize,
        shard_index,
        shard_optimizer_state,
    )

    store = dist.HashStore()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1, 1), mesh_dim_names=("replicate", "shard"))
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
        fully_shard(model, mesh=mesh)
        assert is_sharded(model) and shard_index(model) == (0, 1)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        model(torch.randn(3, 4)).sum().backward()
        opt.step()
        saved = localize({"model": model.state_dict(), "optimizer": opt.state_dict()})
        path = tmp_path / "s.pt"
        torch.save(saved, path)
        back = torch.load(path, weights_only=True)
        assert not any(isinstance(v, DTensor) for v in back["model"].values())
        model.load_state_dict(globalize(back["model"], model.state_dict()))
        opt.load_state_dict(back["optimizer"])
        shard_optimizer_state(opt)
        for p in model.parameters():
            assert isinstance(opt.state[p]["exp_avg"], DTensor)
            assert opt.state[p]["exp_avg"].placements == p.placements
            assert not isinstance(opt.state[p]["step"], DTensor)
        model(torch.randn(3, 4)).sum().backward()
        opt.step()  # the moments mix with DTensor gradients
    finally:
        dist.destroy_process_group()
