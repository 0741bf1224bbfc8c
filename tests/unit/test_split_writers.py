"""Survivors agreeing on a split JIT checkpoint (runtime.writers, JustInTime.my_slice)."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from jitbench.runtime.config import RuntimeConfig
from jitbench.runtime.strategies.jit import JustInTime
from jitbench.runtime.writers import agree_writers


class FakeStore:
    """The ``set``/``add``/``check`` of a ``torch.distributed.Store``, thread-safe."""

    def __init__(self) -> None:
        self.kv: dict[str, int | str] = {}
        self.lock = threading.Lock()

    def set(self, key, value):
        with self.lock:
            self.kv[key] = value

    def add(self, key, n):
        with self.lock:
            self.kv[key] = int(self.kv.get(key, 0)) + n
            return self.kv[key]

    def check(self, keys):
        with self.lock:
            return all(k in self.kv for k in keys)


def _agree(store, survivors, world, grace=0.3):
    out: dict[int, list[int]] = {}
    threads = [threading.Thread(target=lambda r=r: out.__setitem__(
        r, agree_writers(store, 7, r, world, grace, 0.005))) for r in survivors]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def test_survivors_agree_on_themselves_after_the_grace():
    out = _agree(FakeStore(), [0, 2, 3], 4)
    assert out == {0: [0, 2, 3], 2: [0, 2, 3], 3: [0, 2, 3]}


def test_everyone_alive_needs_no_grace():
    out = _agree(FakeStore(), [0, 1], 2, grace=30.0)  # returns as soon as both counted
    assert out == {0: [0, 1], 1: [0, 1]}


def _rt(store, rank, world):
    return SimpleNamespace(_notices=SimpleNamespace(store=store), world_size=world, rank=rank,
                           completed=7, events=SimpleNamespace(emit=lambda *a, **k: None))


def test_split_gives_each_survivor_its_slice():
    store = FakeStore()
    jit = JustInTime(RuntimeConfig(writer_ranks="split", split_grace_s=0.2))
    got: dict[int, tuple] = {}
    threads = [threading.Thread(target=lambda r=r: got.__setitem__(r, jit.my_slice(
        _rt(store, r, 4)))) for r in (0, 1, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == {0: (0, 3), 1: (1, 3), 3: (2, 3)}


def test_full_copy_by_default_alone_without_a_store_or_when_it_fails():
    assert JustInTime(RuntimeConfig()).my_slice(_rt(FakeStore(), 0, 2)) is None
    split = JustInTime(RuntimeConfig(writer_ranks="split", split_grace_s=0.05))
    assert split.my_slice(_rt(FakeStore(), 0, 2)) is None  # the only survivor
    assert split.my_slice(SimpleNamespace(_notices=None, world_size=2)) is None

    class Broken(FakeStore):
        def set(self, key, value):
            raise RuntimeError("store gone")

    assert split.my_slice(_rt(Broken(), 0, 2)) is None


def test_unknown_writer_ranks_is_refused():
    with pytest.raises(ValueError, match="writer_ranks must be one of all, split"):
        JustInTime(RuntimeConfig(writer_ranks="half"))
