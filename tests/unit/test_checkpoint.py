"""Checkpoint parts: commit protocol, validation, retention, RNG round trip."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from jitbench.runtime import checkpoint as ckpt
from jitbench.runtime.jit import capture_rng, restore_rng


def _state(v: float = 1.0) -> dict:
    return {"model": {"w": torch.full((3, 4), v), "b": torch.zeros(4)}, "step": 3}


def test_write_then_load_round_trip(tmp_path):
    part = ckpt.write_part(tmp_path, "jit", 7, 1, 2, _state(2.0))
    assert part.path.exists() and part.manifest_path.exists()
    assert not list(tmp_path.glob("*.tmp"))
    state, manifest = ckpt.load_part(part, world_size=2)
    assert torch.equal(state["model"]["w"], torch.full((3, 4), 2.0))
    assert manifest["step"] == 7 and manifest["world_size"] == 2
    assert manifest["tensors"]["model.w"] == [[3, 4], "float32"]


def test_truncated_part_is_skipped_for_the_previous(tmp_path):
    ckpt.write_part(tmp_path, "periodic", 4, 0, 2, _state(4.0))
    newer = ckpt.write_part(tmp_path, "periodic", 8, 0, 2, _state(8.0))
    data = newer.path.read_bytes()
    newer.path.write_bytes(data[: len(data) // 2])
    skipped: list = []
    found = ckpt.newest_valid(tmp_path, 2, skipped)
    assert found is not None and found[0].step == 4
    assert skipped and "truncated" in skipped[0][1]


def test_flipped_byte_is_detected(tmp_path):
    part = ckpt.write_part(tmp_path, "jit", 5, 0, 2, _state())
    data = bytearray(part.path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    part.path.write_bytes(bytes(data))
    with pytest.raises(ckpt.CheckpointError, match="SHA-256"):
        ckpt.validate_part(part)


def test_part_without_manifest_is_invisible(tmp_path):
    part = ckpt.write_part(tmp_path, "jit", 5, 0, 2, _state())
    part.manifest_path.unlink()
    assert ckpt.list_parts(tmp_path) == []
    assert ckpt.newest_valid(tmp_path) is None


def test_world_size_mismatch_is_rejected(tmp_path):
    part = ckpt.write_part(tmp_path, "jit", 5, 0, 4, _state())
    with pytest.raises(ckpt.CheckpointError, match="world size 4"):
        ckpt.validate_part(part, world_size=2)


def test_manifest_from_another_part_is_rejected(tmp_path):
    a = ckpt.write_part(tmp_path, "jit", 5, 0, 2, _state())
    m = json.loads(a.manifest_path.read_text())
    m["step"] = 6
    a.manifest_path.write_text(json.dumps(m))
    with pytest.raises(ckpt.CheckpointError, match="does not match"):
        ckpt.validate_part(a)


def test_prune_keeps_newest_steps(tmp_path):
    for s in (2, 4, 6, 8):
        ckpt.write_part(tmp_path, "periodic", s, 0, 1, _state(float(s)))
    removed = ckpt.prune(tmp_path, keep_steps=2)
    assert sorted(p.step for p in removed) == [2, 4]
    assert sorted(p.step for p in ckpt.list_parts(tmp_path)) == [6, 8]
    assert ckpt.prune(tmp_path, keep_steps=0) and ckpt.list_parts(tmp_path)[0].step == 8


def test_write_error_leaves_nothing_visible(tmp_path, monkeypatch):
    ckpt.write_part(tmp_path, "periodic", 2, 0, 1, _state())

    def boom(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ckpt.os, "fsync", boom)
    with pytest.raises(ckpt.CheckpointWriteError) as ei:
        ckpt.write_part(tmp_path, "periodic", 4, 0, 1, _state())
    assert ei.value.errno == 28
    monkeypatch.undo()
    assert [p.step for p in ckpt.list_parts(tmp_path)] == [2]
    assert not list(tmp_path.glob("*.tmp"))


def test_rng_round_trip_through_a_weights_only_file(tmp_path):
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    snap = capture_rng()
    expect = (random.random(), np.random.rand(), torch.rand(3))
    part = ckpt.write_part(tmp_path, "jit", 1, 0, 1, {"rng": snap})
    state, _ = ckpt.load_part(part)
    random.seed(9)
    np.random.seed(9)
    torch.manual_seed(9)
    restore_rng(state["rng"])
    got = (random.random(), np.random.rand(), torch.rand(3))
    assert got[0] == expect[0] and got[1] == expect[1] and torch.equal(got[2], expect[2])
