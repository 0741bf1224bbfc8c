"""Split checkpoint parts: slicing, assembly, a missing or corrupt slice named."""

from __future__ import annotations

import pytest
import torch

from jitbench.runtime import checkpoint as ckpt


def _state() -> dict:
    """A state shaped like a training checkpoint: nested dicts, int keys, lists, scalars."""
    g = torch.Generator().manual_seed(0)
    return {
        "model": {f"l{i}.w": torch.randn(8, 8 * (i + 1), generator=g) for i in range(5)},
        "optimizer": {"state": {i: {"step": torch.tensor(3.0),
                                    "exp_avg": torch.randn(8, 8, generator=g)}
                                for i in range(3)},
                      "param_groups": [{"lr": 0.1, "params": [0, 1, 2]}]},
        "scheduler": {}, "rng": {"torch": torch.arange(4, dtype=torch.uint8)}, "step": 3,
    }


def _equal(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return (isinstance(b, dict) and list(a) == list(b)
                and all(_equal(a[k], b[k]) for k in a))
    return a == b


@pytest.mark.parametrize("count", [1, 2, 3, 7, 40])
def test_slices_partition_the_state_and_merge_back(count):
    state = _state()
    slices = [ckpt.split_state(state, i, count) for i in range(count)]
    leaves = [len(ckpt._leaves(s)) for s in slices]
    assert sum(leaves) == len(ckpt._leaves(state))  # every leaf in exactly one slice
    assert _equal(ckpt.merge_states(slices), state)


def test_slices_are_about_equal_in_bytes():
    state = {"m": {f"p{i}": torch.zeros(1000) for i in range(12)}}  # 12 x 4000 B
    sizes = [sum(v.nbytes for v in ckpt.split_state(state, i, 4)["m"].values())
             for i in range(4)]
    assert sizes == [12000] * 4


def test_overlapping_slices_are_refused():
    s = ckpt.split_state(_state(), 0, 2)
    with pytest.raises(ckpt.CheckpointCorrupt, match="overlap"):
        ckpt.merge_states([s, s])


@pytest.mark.parametrize("bad", [(-1, 2), (2, 2), (0, 0)])
def test_a_slice_that_does_not_exist_is_refused(bad):
    with pytest.raises(ValueError, match="does not exist"):
        ckpt.split_state(_state(), *bad)


def _write_split(d, step: int, count: int, skip: tuple = ()) -> list:
    return [ckpt.write_part(d, "jit", step, r, 4, _state(), slice_of=(r, count),
                            run_id="r") for r in range(count) if r not in skip]


def test_split_parts_restore_the_whole_state(tmp_path):
    parts = _write_split(tmp_path, 5, 3)
    m = ckpt.read_manifest(parts[1])
    assert (m["format"], m["slice"], m["slices"], m["parts_needed"]) == (
        ckpt.FORMAT_SPLIT, 1, 3, 3)
    assert m["bytes"] == parts[1].path.stat().st_size  # each slice verifiable on its own
    found = ckpt.newest_valid(tmp_path, 4, run_id="r")
    assert found is not None and found[0].step == 5
    for p in parts:  # any slice's name loads the whole state
        state, manifest = ckpt.load_part(p, 4, "r")
        assert _equal(state, _state())
        assert manifest["tensors"] == ckpt.tensor_layout(_state())


def test_a_missing_slice_is_named_and_restore_falls_back(tmp_path):
    ckpt.write_part(tmp_path, "periodic", 2, 0, 4, _state(), run_id="r")
    parts = _write_split(tmp_path, 5, 3, skip=(1,))
    with pytest.raises(ckpt.CheckpointCorrupt, match="jit step 5: slice 1 of 3 missing"):
        ckpt.load_part(parts[0], 4, "r")
    skipped: list = []
    found = ckpt.newest_valid(tmp_path, 4, skipped, run_id="r")
    assert found is not None and found[0].step == 2
    assert "slice 1 of 3 missing" in skipped[0][1]


def test_a_corrupt_slice_is_named_with_its_reason(tmp_path):
    parts = _write_split(tmp_path, 5, 2)
    data = bytearray(parts[1].path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    parts[1].path.write_bytes(bytes(data))
    with pytest.raises(ckpt.CheckpointCorrupt, match=r"slice 1 of 2 missing \(.*SHA-256"):
        ckpt.load_part(parts[0], 4, "r")


def test_whole_parts_are_unchanged(tmp_path):
    part = ckpt.write_part(tmp_path, "jit", 5, 0, 2, _state())
    m = ckpt.read_manifest(part)
    assert m["format"] == ckpt.FORMAT and m["parts_needed"] == 1 and "slice" not in m
    with pytest.raises(ckpt.CheckpointCorrupt, match="not a split part"):
        ckpt.gather_slices(part, m)


def test_dcp_skeleton_round_trip_keeps_every_container_and_value():
    """``split_state`` / ``join_state`` (built on ``ckpt_format.map_state``): tensors
    leave the skeleton by key and come back in place, tuples stay tuples, and a dict
    shaped like a placeholder only if it is one."""
    from jitbench.runtime import dcp_format

    a, b = torch.arange(4.0), torch.ones(2, 3, dtype=torch.float16)
    state = {"model": {"w": a, "meta": ("x", 3, [b, None])}, "step": 7, "lr": [0.1]}
    tensors, skeleton = dcp_format.split_state(state)
    assert list(tensors) == ["t000000", "t000001"]
    assert skeleton["model"]["meta"][2][0] == {"__dcp_tensor__": "t000001"}
    assert isinstance(skeleton["model"]["meta"], tuple)
    back = dcp_format.join_state(tensors, skeleton)
    assert back["model"]["w"] is tensors["t000000"] and torch.equal(back["model"]["w"], a)
    assert back["model"]["meta"][:2] == ("x", 3) and back["model"]["meta"][2][1] is None
    assert torch.equal(back["model"]["meta"][2][0], b) and back["step"] == 7
    assert back["lr"] == [0.1]
