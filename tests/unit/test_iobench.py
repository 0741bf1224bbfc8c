"""The I/O benchmark's arithmetic and one run on a tiny state (fast)."""

from __future__ import annotations

import pytest
import torch

from jitbench.harness import iobench


def test_mb_s_is_decimal_megabytes_per_second():
    assert iobench.mb_s(3_000_000, 1.5) == pytest.approx(2.0)
    assert iobench.mb_s(10, 0.0) == 0.0


def test_rows_take_the_median_and_ratios_follow_the_direction():
    rows = [iobench.make_row("disk write", 100e6, [1.0, 3.0, 2.0]),  # 50 MB/s
            iobench.make_row("disk read", 100e6, [0.5, 0.5, 9.0]),  # 200 MB/s
            iobench.make_row("jit save", 100e6, [2.5]),  # 40 MB/s
            iobench.make_row("restore (load_part)", 100e6, [1.0]),  # 100 MB/s
            iobench.make_row("split restore R=2", 50e6, [1.0])]  # 50 MB/s
    assert rows[0].seconds == 2.0 and rows[0].repeats == [1.0, 3.0, 2.0]
    iobench.add_ratios(rows)
    assert rows[0].ratio is None and rows[1].ratio is None
    assert rows[2].ratio == pytest.approx(0.8)
    assert rows[3].ratio == pytest.approx(0.5)
    assert rows[4].ratio == pytest.approx(0.25)


def test_ratios_need_both_disk_rows():
    with pytest.raises(ValueError, match="disk"):
        iobench.add_ratios([iobench.make_row("disk write", 1, [1.0])])


def test_raw_disk_write_then_read(tmp_path):
    f = tmp_path / "raw.bin"
    assert iobench.disk_write(f, 3_000_001, b"x" * 1024) > 0
    assert f.stat().st_size == 3_000_001
    assert iobench.disk_read(f, 4096) > 0


def test_one_run_on_a_tiny_state(tmp_path):
    state = {"model": {f"w{i}": torch.randn(64, 64) for i in range(6)},
             "optimizer": {"state": {0: {"exp_avg": torch.zeros(64, 64)}},
                           "param_groups": [{"lr": 0.1, "params": [0]}]},
             "scheduler": {}, "scaler": {}, "rng": {}, "data": {"step": 1}, "extra": {},
             "step": 1}
    rows = iobench.run_io_bench(tmp_path / "ck", state, repeats=1, replicas=(1, 2))
    by = {r.what: r for r in rows}
    assert {"disk write", "disk read", "jit save", "restore (load_part)",
            "periodic-async blocking", "periodic-async total", "split save R=2",
            "split restore R=2"} <= set(by)
    assert by["jit save"].mb == pytest.approx(by["disk write"].mb)
    assert by["split save R=2"].mb > by["jit save"].mb * 0.9  # both slices together
    for r in rows:
        assert r.seconds > 0 and r.mb_s == pytest.approx(r.mb / r.seconds)
        assert (r.ratio is None) == r.what.startswith("disk")
    assert by["periodic-async total"].seconds >= by["periodic-async blocking"].seconds
    assert not any((tmp_path / "ck").iterdir())  # left empty


def test_bad_replicas_are_one_line():
    from jitbench.cli.io import parse_replicas
    from jitbench.errors import InputError

    assert parse_replicas("1, 2,4") == (1, 2, 4)
    for bad in ("", "0", "a,2"):
        with pytest.raises(InputError, match="--replicas"):
            parse_replicas(bad)
