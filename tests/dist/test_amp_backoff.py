"""Resuming after an fp16 loss-scale backoff (issue 14, section 3).

Tiny GPT on 2 ranks (gloo), fp16 autocast with a GradScaler that grows every
2 steps. ``amp-backoff`` puts +inf into one gradient of rank 1 at step 3, so
every rank's GradScaler skips step 3 and halves its scale; rank 0 is then
SIGKILLed at step 4 (its gradient collective). The fault-free reference keeps
the backoff (:meth:`RunSpec.without_faults`), so after the resume the scale,
the growth tracker, the skipped step, the learning rate and the loss of every
executed step must equal the reference's, and the final state bitwise.

- ``jit``: the survivors' JIT part holds the state after step 3, backed off;
  the restart resumes at step 4.
- ``none``: the restart replays from step 1, so step 3 runs again and must back
  off again (the perturbation acts at every execution of its step; its
  ``fault`` event is written once).
"""

from __future__ import annotations

import pytest

from jitbench.faults import FaultSpec
from jitbench.harness import metrics
from jitbench.harness.run import run as run_spec
from tests.conftest import small_spec

pytestmark = [pytest.mark.distributed, pytest.mark.slow, pytest.mark.timeout(300)]

BACKOFF_STEP = 3
KEYS = ("scale", "growth_tracker", "skipped", "lr", "loss")


def _spec(strategy: str):
    return small_spec(7, strategy=strategy,
                      faults=[FaultSpec("amp-backoff", 1, BACKOFF_STEP),
                              FaultSpec("kill", 0, BACKOFF_STEP + 1)],
                      extra={"max_bytes": 2000, "amp": "fp16", "amp_growth_interval": 2})


@pytest.mark.parametrize("strategy", ["jit", pytest.param("none", marks=pytest.mark.heavy)])
def test_resume_after_backoff_equals_the_reference(strategy, tmp_path, shared_reference):
    spec = _spec(strategy)
    ref = shared_reference(spec)
    out = run_spec(spec, tmp_path / "run", reference_from=ref, timeout_s=240)
    s = out.summary
    assert s["completed"], (out.run_dir / "agent.log").read_text()[-3000:]
    assert sorted(f["kind"] for f in s["fired"]) == ["amp-backoff", "kill"]
    assert s["unfired"] == [] and s["num_failures"] == 1

    want = {(r, e["step"]): {k: e.get(k) for k in KEYS}
            for r, evs in metrics.executions(ref).items() for e in evs}
    # the reference backs off at step 3 on every rank: skipped, scale halved, tracker 0
    for r in (0, 1):
        before, at = want[r, BACKOFF_STEP - 1], want[r, BACKOFF_STEP]
        assert at["skipped"] is True and at["growth_tracker"] == 0, at
        assert at["scale"] == before["scale"] * 0.5, (before, at)
        assert want[r, BACKOFF_STEP + 1]["skipped"] is False
    resumed = s["failures"][0]["restored_step"] + 1
    assert resumed == (BACKOFF_STEP + 1 if strategy == "jit" else 1)
    executed = 0
    for r, evs in metrics.executions(out.run_dir).items():
        for e in evs:
            got = {k: e.get(k) for k in KEYS}
            assert got == want[r, e["step"]], (strategy, r, e["attempt"], e["step"])
            executed += e["attempt"] == 1
    assert executed == 2 * (spec.steps - resumed + 1)  # every step after the resume, checked
    assert s["state_equal"] is True and s["max_abs_diff"] == 0.0
