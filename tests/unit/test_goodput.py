"""``goodput``: useful step time / wall time of training, where useful is the steps
this job trained (from the step it started at, each once), never the run's planned
steps; at most 1 by construction (no cap hides an error). Events are written by
hand: nothing is launched."""

from __future__ import annotations

import json

import pytest

from jitbench.harness.metrics import compute, start_step, useful_step_s
from tests.unit.test_phases import _events as _write  # one event file


def _steps(first: int, last: int, t0: float, dur: float, gap: float) -> list:
    out, t = [], t0
    for s in range(first, last + 1):
        out += [("step", "begin", t, {"step": s}),
                ("step", "end", t + dur, {"step": s, "dur_s": dur})]
        t += dur + gap
    return out


def test_goodput_of_a_run_resumed_from_a_ckpt_dir_counts_only_its_own_steps(tmp_path):
    """A 60-step run that resumed at step 56 from an earlier job's checkpoint trains
    4 steps of 1 s with 1 s gaps: goodput 4/7, not 60 steps' worth capped at 1."""
    for r in (0, 1):
        _write(tmp_path / "events", 0, r,
               [("restore", "end", 0.5, {"step": 56, "kind": "periodic"})]
               + _steps(57, 60, 1.0, 1.0, 1.0) + [("done", "point", 9.0, {"step": 60})])
    m = compute(tmp_path, 60, 2)
    assert m.completed and m.train_wall_s == pytest.approx(7.0)
    assert m.goodput == pytest.approx(4 / 7)


def test_goodput_counts_a_replayed_step_once_and_never_exceeds_one(tmp_path):
    """Uneven steps back to back (a fast last one: the median step, 1 s, exceeds the
    mean, so steps x median / wall was 4/3.4, capped to 1): goodput is 1 from the
    steps' own durations, with no cap; a
    step a restart replayed counts once (its last execution), the rest is waste."""
    durs = [1.0, 1.0, 1.0, 0.4]
    for r in (0, 1):
        evs, t = [], 0.0
        for s, d in enumerate(durs, 1):
            evs += [("step", "begin", t, {"step": s}), ("step", "end", t + d,
                                                        {"step": s, "dur_s": d})]
            t += d
        _write(tmp_path / "a" / "events", 0, r, evs + [("done", "point", t, {"step": 4})])
    m = compute(tmp_path / "a", 4, 2)
    assert m.goodput == pytest.approx(1.0) and m.goodput <= 1.0
    # fresh start; step 3 runs, the job restarts from step 2 and runs 3 and 4 again
    for r in (0, 1):
        _write(tmp_path / "b" / "events", 0, r,
               [("restore", "end", 0.0, {"step": 0})] + _steps(1, 3, 1.0, 1.0, 0.0))
        _write(tmp_path / "b" / "events", 1, r,
               [("restore", "end", 10.0, {"step": 2})] + _steps(3, 4, 11.0, 1.0, 0.0)
               + [("done", "point", 13.0, {"step": 4})])
    evs = [json.loads(x) for f in sorted((tmp_path / "b" / "events").iterdir())
           for x in f.read_text().splitlines()]
    assert start_step(evs) == 0
    step_end = [e for e in evs if e["event"] == "step" and e["phase"] == "end"]
    assert useful_step_s(step_end, 0, "t_mono") == pytest.approx(4.0)
    assert useful_step_s(step_end, 2, "t_mono") == pytest.approx(2.0)
