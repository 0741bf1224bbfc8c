"""Unit tests of the ``resnet`` workload (CPU, no process group)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from PIL import Image

from jitbench.workloads.base import DataError, WorkloadConfig
from jitbench.workloads.resnet import ResNetWorkload, build_resnet

CPU = torch.device("cpu")


def make_cfg(**kw) -> WorkloadConfig:
    base = dict(name="resnet", size="resnet18", batch_size=16, steps=30, seed=0)
    base.update(kw)
    return WorkloadConfig(**base)


def build(rank: int = 0, world_size: int = 2, **kw) -> ResNetWorkload:
    return build_resnet(make_cfg(**kw), rank, world_size, CPU)


@pytest.fixture(scope="module")
def pair() -> tuple[ResNetWorkload, ResNetWorkload]:
    return build(rank=0), build(rank=1)


def test_batch_shapes_and_describe(pair):
    w0, _ = pair
    b = w0.batch(1)
    assert b.inputs.shape == (16, 3, 32, 32) and b.inputs.dtype == torch.float32
    assert b.targets.shape == (16,) and b.targets.dtype == torch.long
    assert len(b.sample_ids) == 16 and all(isinstance(i, int) for i in b.sample_ids)
    assert int(b.targets.min()) >= 0 and int(b.targets.max()) < 10
    # the three channels are the same grayscale digit
    assert torch.equal(b.inputs[:, 0], b.inputs[:, 1]) and torch.equal(b.inputs[:, 0], b.inputs[:, 2])
    d = w0.describe()
    assert d["dataset"] == "sklearn-digits" and d["num_samples"] == 1797
    assert d["size"] == "resnet18" and d["num_classes"] == 10 and d["params"] > 10_000_000
    with torch.no_grad():
        assert w0.model(b.inputs).shape == (16, 10)


def test_ranks_disjoint_within_epoch_and_epochs_differ(pair):
    w0, w1 = pair
    n = w0.sampler.batches_per_epoch
    assert n == (1797 // 2) // 16

    def epoch_ids(w, e):
        return [i for s in range(e * n + 1, (e + 1) * n + 1) for i in w.batch(s).sample_ids]

    e0r0, e0r1 = epoch_ids(w0, 0), epoch_ids(w1, 0)
    assert len(e0r0) == len(e0r1) == n * 16
    assert len(set(e0r0)) == len(e0r0) and not set(e0r0) & set(e0r1)
    e1r0 = epoch_ids(w0, 1)
    assert len(e1r0) == n * 16 and len(set(e1r0)) == len(e1r0)  # full length
    assert e1r0 != e0r0  # own shuffle per epoch


def test_batch_is_pure_function_of_step(pair):
    w0, _ = pair
    steps = [1, 2, 57, 3, 200, 1]
    forward = {s: w0.batch(s).sample_ids for s in sorted(set(steps))}
    fresh = build(rank=0)
    for s in reversed(steps):  # out of order, on another build
        b = fresh.batch(s)
        assert b.sample_ids == forward[s]
        assert torch.equal(b.inputs, w0.batch(s).inputs)


def test_grad_accum_micro_batches_are_consecutive():
    w = build(grad_accum=2)
    ref = build(grad_accum=1)
    assert w.batch(1, 0).sample_ids == ref.batch(1).sample_ids
    assert w.batch(1, 1).sample_ids == ref.batch(2).sample_ids
    assert w.batch(2, 0).sample_ids == ref.batch(3).sample_ids
    with pytest.raises(ValueError):
        w.batch(1, 2)
    with pytest.raises(ValueError):
        w.batch(0)


def test_same_seed_same_init_and_loss(pair):
    w0, w1 = pair
    a, b = build(rank=0), build(rank=0)
    for (na, pa), (nb, pb), (_, p1) in zip(a.model.state_dict().items(),
                                           b.model.state_dict().items(),
                                           w1.model.state_dict().items(), strict=True):
        assert na == nb and torch.equal(pa, pb) and torch.equal(pa, p1)  # also across ranks
    batch = a.batch(5)
    la, lb = a.loss(a.model, batch), b.loss(b.model, batch)
    assert torch.equal(la, lb)
    other = build(rank=0, seed=1)
    assert not torch.equal(next(other.model.parameters()), next(a.model.parameters()))

    # a couple of identical training steps stay bitwise identical
    for w in (a, b):
        for s in (1, 2):
            w.optimizer.zero_grad()
            w.loss(w.model, w.batch(s)).backward()
            w.optimizer.step()
            w.scheduler.step()
    assert all(torch.equal(pa, pb) for pa, pb in zip(a.model.parameters(), b.model.parameters(), strict=True))


def test_build_leaves_global_rng_untouched():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    build(rank=0)
    assert torch.equal(torch.rand(3), expected)


def test_optimizer_and_schedule():
    w = build(steps=30)
    g = w.optimizer.param_groups[0]
    assert g["lr"] == pytest.approx(0.01) and g["momentum"] == 0.9
    assert g["weight_decay"] == pytest.approx(5e-4)
    lrs = []
    for _ in range(30):
        lrs.append(w.optimizer.param_groups[0]["lr"])
        w.optimizer.step()
        w.scheduler.step()
    assert lrs[0] == pytest.approx(0.01) and lrs[10] == pytest.approx(0.001)
    assert lrs[20] == pytest.approx(0.0001) and len(set(round(x, 8) for x in lrs)) == 3
    assert build(lr=0.02).optimizer.param_groups[0]["lr"] == pytest.approx(0.02)


def test_sgd_steps_reduce_loss_on_digits():
    w = build(rank=0, steps=60)  # the default lr (0.01)
    held = [w.batch(s) for s in (40, 41)]  # not trained on during the 15 steps below

    def held_loss() -> float:
        with torch.no_grad():
            return sum(w.loss(w.model, b).item() for b in held) / len(held)

    before = held_loss()
    for s in range(1, 16):
        w.optimizer.zero_grad()
        w.loss(w.model, w.batch(s)).backward()
        w.optimizer.step()
        w.scheduler.step()
    after = held_loss()
    assert after < before - 0.3, (before, after)


def _write_png(path, seed: int) -> None:
    rng = np.random.default_rng(seed)
    Image.fromarray(rng.integers(0, 256, (12, 10, 3), dtype=np.uint8)).save(path)


def test_image_folder_loads(tmp_path):
    for c, cls in enumerate(["cat", "dog", "emu"]):
        (tmp_path / cls).mkdir()
        for i in range(12):
            _write_png(tmp_path / cls / f"{i}.png", 100 * c + i)
    w = build(rank=1, data=str(tmp_path), batch_size=4)
    b = w.batch(3)
    assert b.inputs.shape == (4, 3, 32, 32) and b.targets.shape == (4,)
    d = w.describe()
    assert d["num_samples"] == 36 and d["num_classes"] == 3 and d["dataset"].startswith("imagefolder:")
    assert w.model.fc.out_features == 3
    assert sorted(w.data.targets.tolist()) == [0] * 12 + [1] * 12 + [2] * 12


def test_resolution_option():
    w = build(extra={"resolution": 16}, batch_size=4)
    assert w.batch(1).inputs.shape == (4, 3, 16, 16)
    with pytest.raises(ValueError, match="resolution"):
        build(extra={"resolution": 4})
    with pytest.raises(ValueError, match="valid"):
        build(extra={"resolutoin": 16})


def test_data_error_missing_dir(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        build(data=str(tmp_path / "nope"))


def test_data_error_empty_dir(tmp_path):
    with pytest.raises(DataError, match="empty"):
        build(data=str(tmp_path))


def test_data_error_no_class_folders(tmp_path):
    _write_png(tmp_path / "loose.png", 0)
    with pytest.raises(DataError, match="class sub-folders"):
        build(data=str(tmp_path))


def test_data_error_class_folders_without_images(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "notes.txt").write_text("hi")
    with pytest.raises(DataError):
        build(data=str(tmp_path))


def test_data_error_corrupt_png(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for i in range(8):
        _write_png(tmp_path / "a" / f"{i}.png", i)
        _write_png(tmp_path / "b" / f"{i}.png", 50 + i)
    bad = tmp_path / "b" / "bad.png"
    bad.write_bytes(np.random.default_rng(0).integers(0, 256, 300, dtype=np.uint8).tobytes())
    with pytest.raises(DataError, match="bad.png"):
        build(data=str(tmp_path), batch_size=2)


def test_data_error_truncated_png(tmp_path):
    (tmp_path / "a").mkdir()
    _write_png(tmp_path / "a" / "0.png", 0)
    good = (tmp_path / "a" / "0.png").read_bytes()
    (tmp_path / "a" / "1.png").write_bytes(good[: len(good) // 2])
    with pytest.raises(DataError, match="1.png"):
        build(data=str(tmp_path), batch_size=2, world_size=1)


def test_data_error_too_few_samples(tmp_path):
    (tmp_path / "a").mkdir()
    _write_png(tmp_path / "a" / "0.png", 0)
    with pytest.raises(DataError):
        build(data=str(tmp_path), batch_size=16)


def test_unknown_size():
    with pytest.raises(ValueError, match="resnet18.*resnet50"):
        build(size="resnet9000")
    cfg = dataclasses.replace(make_cfg(), size=None)
    assert build_resnet(cfg, 0, 1, CPU).size == "resnet18"
