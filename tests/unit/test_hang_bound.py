"""The hang bound before any step time is known never goes below the floor."""

from __future__ import annotations

import pytest

from jitbench import hang
from jitbench.harness.launch import ft_launcher_args
from jitbench.harness.spec import RunSpec
from jitbench.runtime.config import RuntimeConfig
from jitbench.runtime.watchdog import HangBound


@pytest.mark.parametrize(("first", "floor", "want"), [(30.0, 2.0, 30.0), (0.0001, 2.0, 2.0),
                                                      (30.0, 60.0, 60.0)])
def test_first_step_bound_is_never_below_the_floor(first, floor, want):
    bound = HangBound(RuntimeConfig(hang_first_s=first, hang_floor_s=floor))
    assert bound.bound_s() == want
    bound.prior_step_s = 0.001  # a known step time: the floor, then the factor
    assert bound.bound_s() == max(floor, bound.config.hang_factor * 0.001)
    bound.expect_warm_up()  # a newcomer's first step: the first-step bound again
    assert bound.bound_s() == want


def test_step_time_bound_follows_the_median():
    bound = HangBound(RuntimeConfig(hang_first_s=30.0, hang_floor_s=2.0, hang_factor=10.0))
    for step_s in (9.0, 0.5, 0.7, 0.6):  # the first (warm-up) step is left out
        bound.record(step_s)
    assert bound.bound_s() == pytest.approx(6.0)


@pytest.mark.parametrize("strategy", ["nvrx:3", "nvrx-sections:3"])
def test_nvrx_first_heartbeat_bound_is_never_below_the_floor(strategy):
    args = ft_launcher_args(RunSpec(strategy=strategy, hang_first_s=0.0001, hang_floor_s=5.0))
    first_flag = ("--ft-rank-out-of-section-timeout" if strategy.startswith("nvrx-sections")
                  else "--ft-initial-rank-heartbeat-timeout")
    assert float(args[args.index(first_flag) + 1]) == 5.0
    assert hang.first_bound_s(0.0001, 5.0) == 5.0


@pytest.mark.parametrize("recorded", [0, 3])
def test_warm_up_ends_with_the_next_step_time_however_it_is_recorded(recorded):
    """The runtime appends each step's duration to step_times itself (a new float each
    time): that ends a warm-up as record() does, with or without earlier step times."""
    for via in ("record", "append"):
        bound = HangBound(RuntimeConfig(hang_first_s=30.0, hang_floor_s=2.0, hang_factor=10.0))
        for i in range(recorded):
            bound.record(0.5 + i)
        bound.expect_warm_up()
        assert bound.warming and bound.warming  # reading it ends nothing
        step_s = 0.25 * (recorded + 1)
        if via == "record":
            bound.record(step_s)
        else:
            bound.step_times.append(step_s + 0.0)
        assert not bound.warming, via
        bound.record(step_s)  # the same object as the last one: record still ends it
        bound.expect_warm_up()
        bound.record(step_s)
        assert not bound.warming


def test_reading_warming_never_undoes_a_warm_up_asked_meanwhile():
    """The watchdog thread reads warming while the main thread may call expect_warm_up:
    a read that finds a stale mark must not clear a warm-up asked in the middle of it."""
    from collections import deque

    bound = HangBound(RuntimeConfig(hang_first_s=30.0, hang_floor_s=2.0, hang_factor=10.0))
    bound.record(0.5)
    bound.expect_warm_up()
    bound.step_times.append(0.75 + 0.0)  # the warm-up ended: the mark is stale now
    asked = []

    class Interleaved(deque):
        def __getitem__(self, i):  # the main thread's expect_warm_up lands inside the read
            if not asked:
                asked.append(1)
                bound.expect_warm_up()
            return super().__getitem__(i)

    bound.step_times = Interleaved(bound.step_times, maxlen=50)
    bound.warming  # noqa: B018 - the read under test
    assert asked and bound.warming and bound.bound_s() == 30.0
