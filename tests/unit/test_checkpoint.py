"""Checkpoint parts: commit protocol, validation, retention, RNG round trip."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from jitbench.runtime import checkpoint as ckpt
from jitbench.runtime.rng import capture_rng, restore_rng


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


# ---------------------------------------------------------------- commit protocol
def _crash_in_child(fn) -> int:
    """Run ``fn`` in a forked child that may SIGKILL itself; returns its wait status."""
    import os

    pid = os.fork()
    if pid == 0:  # child
        try:
            fn()
        finally:
            os._exit(0)
    return os.waitpid(pid, 0)[1]


@pytest.mark.parametrize("crash_at", ["data", "manifest"])
def test_sigkill_inside_a_write_leaves_the_previous_checkpoint(tmp_path, crash_at):
    """A writer SIGKILLed after the data file (or inside the manifest write) commits
    nothing: the previous checkpoint stays visible, valid and the newest."""
    import os
    import signal

    ckpt.write_part(tmp_path, "periodic", 4, 0, 2, _state(4.0))

    def writer():
        def dying(op, path, done, total):
            # the first write of the manifest: the data file is committed by now
            if op == "write" and path.name.endswith(".json.tmp"):
                if crash_at == "manifest":
                    path.write_bytes(b'{"manifest_version": 2, "st')  # a torn manifest
                os.kill(os.getpid(), signal.SIGKILL)

        ckpt.set_io_hook(dying)
        ckpt.write_part(tmp_path, "periodic", 8, 0, 2, _state(8.0))

    status = _crash_in_child(writer)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    assert [p.step for p in ckpt.list_parts(tmp_path)] == [4]
    found = ckpt.newest_valid(tmp_path, 2)
    assert found is not None and found[0].step == 4
    assert (tmp_path / "periodic_step00000008_rank00000.pt").exists()  # there, not committed
    # retention after the next successful commit never removes the one just committed
    ckpt.write_part(tmp_path, "periodic", 12, 0, 2, _state(12.0))
    ckpt.prune(tmp_path, keep_steps=1)
    assert [p.step for p in ckpt.list_parts(tmp_path)] == [12]


def test_failed_write_prunes_nothing(tmp_path, monkeypatch):
    """Retention runs only after a commit: a failing save keeps every older step."""
    from jitbench.runtime.config import RuntimeConfig
    from jitbench.runtime.core import Runtime
    from jitbench.runtime.events import EventLog

    for s in (2, 4):
        ckpt.write_part(tmp_path, "periodic", s, 0, 1, _state(float(s)))
    exits: list[int] = []
    rt = Runtime(RuntimeConfig(strategy="periodic", interval=10**9, ckpt_dir=str(tmp_path),
                               keep_steps=1, hang_first_s=600), EventLog(tmp_path / "e.jsonl", 0, 0),
                 rank=0, world_size=1, exit_fn=exits.append)
    try:
        model = torch.nn.Linear(2, 2)
        rt.register(model, torch.optim.SGD(model.parameters(), lr=0.1))

        def enospc(*a, **k):
            raise ckpt.CheckpointWriteError("writing x failed: No space left on device", 28)

        monkeypatch.setattr(ckpt, "write_part", enospc)
        rt.save_periodic(6)
        assert exits == [76]  # the job fails (storage error), it does not go on unprotected
        assert [p.step for p in ckpt.list_parts(tmp_path)] == [4, 2]
    finally:
        rt.close()


def test_weights_only_refuses_arbitrary_objects(tmp_path):
    """A part that would need arbitrary unpickling does not load (weights_only=True)."""
    part = ckpt.write_part(tmp_path, "jit", 3, 0, 1, {"x": torch.zeros(1), "evil": _Evil()})
    with pytest.raises(ckpt.CheckpointCorrupt, match="does not load"):
        ckpt.load_part(part)


class _Evil:
    def __reduce__(self):
        return (print, ("unpickled!",))


def test_layout_differing_from_the_manifest_is_corrupt(tmp_path):
    part = ckpt.write_part(tmp_path, "jit", 3, 0, 1, _state())
    m = json.loads(part.manifest_path.read_text())
    m["tensors"]["model.w"] = [[4, 3], "float32"]
    part.manifest_path.write_text(json.dumps(m))
    with pytest.raises(ckpt.CheckpointCorrupt, match="shapes/dtypes"):
        ckpt.load_part(part)


def test_manifest_records_what_restore_checks(tmp_path):
    part = ckpt.write_part(tmp_path, "jit", 7, 1, 2, _state(), {"k": 1}, run_id="abc")
    m = json.loads(part.manifest_path.read_text())
    assert {k: m[k] for k in ("kind", "step", "rank", "world_size", "run_id", "parts_needed",
                              "format")} == {"kind": "jit", "step": 7, "rank": 1,
                                             "world_size": 2, "run_id": "abc",
                                             "parts_needed": 1, "format": ckpt.FORMAT}
    assert m["bytes"] == part.path.stat().st_size and len(m["sha256"]) == 64
    assert m["tensors"] == {"model.w": [[3, 4], "float32"], "model.b": [[4], "float32"]}


@pytest.mark.parametrize("world, run_id, needle", [
    (4, "abc", "world size 4, this job has 2"),
    (2, "other", "another run"),
])
def test_a_directory_of_another_job_is_refused_not_skipped(tmp_path, world, run_id, needle):
    """Foreign parts fail loudly (training on would continue someone else's job);
    a corrupt part of this job is skipped for an older one."""
    ckpt.write_part(tmp_path, "periodic", 4, 0, 2, _state(), run_id="abc")
    ckpt.write_part(tmp_path, "periodic", 2, 0, world, _state(), run_id=run_id)
    with pytest.raises(ckpt.CheckpointMismatch, match=needle):
        ckpt.newest_valid(tmp_path, 2, run_id="abc")


def test_restore_refuses_a_foreign_directory_in_one_line(tmp_path):
    from jitbench.runtime.config import RuntimeConfig
    from jitbench.runtime.core import Runtime
    from jitbench.runtime.events import EventLog

    ckpt.write_part(tmp_path / "ckpt", "jit", 4, 1, 4, _state(), run_id="r")
    rt = Runtime(RuntimeConfig(ckpt_dir=str(tmp_path / "ckpt"), run_id="r", hang_first_s=600),
                 EventLog(tmp_path / "e.jsonl", 0, 0), rank=0, world_size=2)
    try:
        model = torch.nn.Linear(2, 2)
        rt.register(model, torch.optim.SGD(model.parameters(), lr=0.1))
        with pytest.raises(ckpt.CheckpointMismatch) as ei:
            rt.restore()
        assert "is not this job's" in str(ei.value) and "\n" not in str(ei.value)
    finally:
        rt.close()
