"""Property tests: random fault campaigns keep every invariant of
:mod:`jitbench.harness.campaign` (final state bitwise the fault-free run's,
sample-id stream equal except one replayed minibatch per failure, JIT replays
<= 1 step per failure, every fault fired once, no orphan process or leaked
port, every run within its bound).

Hypothesis draws the campaigns: 1-3 faults at distinct steps, each a kind of
``campaign_kinds()`` (``JITBENCH_CAMPAIGN_KINDS`` adds new kinds by name), a
rank, and an injection point (the gradient collective, or with gradient
accumulation the start of a micro-batch: window boundary or mid-window).

- CI (default suite): 2 fixed (derandomized) campaigns on the tiny GPT, 2 ranks,
  12 steps, sharing the reference run of ``tests/dist/test_recovery.py``.
- ``nox -s stress`` (marker ``stress``): ``JITBENCH_STRESS_CAMPAIGNS``
  campaigns (default 200) over two bases (accumulation 1, or 2 with fp16 AMP)
  and the strategies of ``JITBENCH_CAMPAIGN_STRATEGIES`` (default
  :data:`STRESS_STRATEGIES`: the JIT ones twice as often as the baselines
  periodic:3, periodic-async:3 and inmem:3); it does not stop at a violation, prints one
  line per campaign, then ``campaigns: N  violations: V``, appends every
  result to ``JITBENCH_STRESS_LOG`` (JSON lines) and fails if V > 0.
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from jitbench.faults import FaultSpec
from jitbench.harness import campaign
from jitbench.harness.run import run as run_spec
from jitbench.runtime.events import read_events
from tests.conftest import small_spec

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

@st.composite
def campaigns(draw, steps: int, nproc: int = 2, grad_accum: int = 1, max_faults: int = 3,
              strategies: tuple[str, ...] = ("jit",)) -> campaign.Campaign:
    kinds = campaign.campaign_kinds()
    points = campaign.injection_points(grad_accum)
    at_steps = draw(st.lists(st.integers(1, steps - 1), min_size=1,
                             max_size=min(max_faults, steps - 1), unique=True))
    faults = []
    for step in sorted(at_steps):
        kind = draw(st.sampled_from(kinds))
        rank = draw(st.integers(0, nproc - 1))
        at = draw(st.sampled_from(points))
        faults.append(FaultSpec(kind, rank, step, params={} if at == "collective" else {"at": at}))
    return campaign.Campaign(faults, draw(st.sampled_from(strategies)))


def run_campaign(c: campaign.Campaign, base, shared_reference, root) -> dict:
    """Run one campaign against its shared reference; returns a JSON-able result."""
    spec = c.apply(base)
    ref = shared_reference(spec)
    bound = campaign.run_bound_s(len(spec.faults))
    run_dir = root / f"c{time.monotonic_ns()}"
    t0 = time.monotonic()
    out = run_spec(spec, run_dir, reference_from=ref, timeout_s=bound)
    if out.summary.get("interrupted"):  # Ctrl-C / SIGTERM stops the campaigns, it is no violation
        raise KeyboardInterrupt
    violations = campaign.check(out.summary, spec, run_dir, ref, bound)
    return {"campaign": c.describe(), "wall_s": round(time.monotonic() - t0, 1),
            "attempts": out.summary.get("attempts"), "violations": violations,
            "run_dir": str(run_dir)}


CI_STEPS = 12
CI_EXAMPLES = 2
"""Derandomized: kill@rank0:step1, then segfaults on both ranks at steps 4 and 9."""


@pytest.mark.heavy  # CI suite time budget: nox -s heavy
@pytest.mark.timeout(900)
def test_random_campaigns_keep_every_invariant(tmp_path, shared_reference):
    base = small_spec(CI_STEPS)
    results = []

    @settings(max_examples=CI_EXAMPLES, deadline=None, derandomize=True, database=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(campaigns(CI_STEPS))
    def one(c):
        results.append(run_campaign(c, base, shared_reference, tmp_path))

    one()
    bad = [r for r in results if r["violations"]]
    assert len(results) == CI_EXAMPLES and not bad, json.dumps(bad, indent=1)


STRESS_STEPS = 8
STRESS_STRATEGIES = "jit,jit,jit-inprocess,jit-inprocess,periodic:3,periodic-async:3,inmem:3"
"""Strategies stress campaigns draw (comma-separated, repeats weight the draw)."""


def _stress_bases():
    """The specs stress campaigns run on (each gets one shared reference)."""
    plain = small_spec(STRESS_STEPS)
    accum = small_spec(STRESS_STEPS, grad_accum=2, batch_size=2,
                       extra={"max_bytes": 200_000, "amp": "fp16", "amp_growth_interval": 2})
    return [plain, accum]


@pytest.mark.stress
@pytest.mark.timeout(0)
def test_stress_campaigns(tmp_path, shared_reference):
    n = int(os.environ.get("JITBENCH_STRESS_CAMPAIGNS", "200"))
    log = os.environ.get("JITBENCH_STRESS_LOG", str(tmp_path / "stress.jsonl"))
    seed_value = int(os.environ.get("JITBENCH_STRESS_SEED", random.randrange(2**32)))
    bases = _stress_bases()
    results: list[dict] = []
    print(f"\nstress: {n} campaigns, seed {seed_value}, log {log}", flush=True)

    @seed(seed_value)
    @settings(max_examples=n, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(st.integers(0, len(bases) - 1).flatmap(
        lambda i: st.tuples(st.just(i), campaigns(
            STRESS_STEPS, grad_accum=bases[i].workload.grad_accum,
            strategies=tuple(os.environ.get(
                "JITBENCH_CAMPAIGN_STRATEGIES", STRESS_STRATEGIES).split(","))))))
    def one(drawn):
        i, c = drawn
        r = run_campaign(c, bases[i], shared_reference, tmp_path)
        r["base"] = i
        results.append(r)
        with open(log, "a") as fh:
            fh.write(json.dumps(r) + "\n")
        mark = "ok " if not r["violations"] else "BAD"
        print(f"[{len(results):4d}] {mark} {r['wall_s']:6.1f}s base{i} {r['campaign']}"
              + ("".join(f"\n        {v}" for v in r["violations"])), flush=True)

    one()
    bad = sum(1 for r in results if r["violations"])
    print(f"campaigns: {len(results)}  violations: {bad}", flush=True)
    assert bad == 0


@pytest.mark.heavy
@pytest.mark.timeout(900)
def test_issue14_a_leaving_rank_holds_the_next_steps_fault(tmp_path, shared_reference):
    """Stress chunk 3, campaign 23 (``benchmarks/stress-cpu.txt``), replayed: rank 0,
    SIGTERMed in step 3, was leaving (its watchdog saving and ending the process) when
    its training thread reached step 4's micro:0 point; the injector wrote kill@4's
    fired marker, the process ended before the event and the kill, and the kill
    never fired in any attempt. A leaving rank now holds that point, so the kill stays
    pending and fires in the next attempt. The race is timing-dependent: one replay
    need not meet it (tests/unit/test_faults.py meets it every time); this one checks
    the campaign keeps every invariant with the fix."""
    base = _stress_bases()[1]  # grad accumulation 2, fp16 AMP ("base1" in the record)
    c = campaign.Campaign([FaultSpec("term", 0, 3),
                           FaultSpec("kill", 0, 4, params={"at": "micro:0"}),
                           FaultSpec("kill", 0, 7, params={"at": "micro:0"})], "jit")
    assert c.describe() == ("jit: term@rank0:step3, kill@rank0:step4/micro:0, "
                            "kill@rank0:step7/micro:0")
    r = run_campaign(c, base, shared_reference, tmp_path)
    evs = read_events(Path(r["run_dir"]) / "events")
    fired = sorted(e["fault_id"] for e in evs if e["event"] == "fault")
    assert fired == sorted(f.id for f in c.apply(base).faults), json.dumps(r, indent=1)
    assert not r["violations"] and r["attempts"] == 4, json.dumps(r, indent=1)


@pytest.mark.heavy
@pytest.mark.timeout(900)
def test_stress_chunk14_the_last_member_hung_before_its_collective(tmp_path, shared_reference):
    """Stress chunk 14, campaign 86 (``benchmarks/stress-cpu.txt``), replayed: under
    inmem:3 rank 1 fails at step 5 (a spare replaces it in process), rank 0 is
    SIGTERMed at step 6, and the new rank 1 hangs before posting step 7's collective.
    Its own watchdog posted the hang; with rank 0 dead, it was judged the survivor and
    the source, its main thread never came back to re-form, and the run hit the
    harness's timeout. A member stuck before its own collective is now hung: the job
    falls back to a whole-job restart and completes."""
    base = _stress_bases()[0]
    c = campaign.Campaign([FaultSpec("exception", 1, 5), FaultSpec("term", 0, 6),
                           FaultSpec("nccl-hang", 1, 7)], "inmem:3")
    assert c.describe() == ("inmem:3: exception@rank1:step5, term@rank0:step6, "
                            "nccl-hang@rank1:step7")
    r = run_campaign(c, base, shared_reference, tmp_path)
    assert not r["violations"], json.dumps(r, indent=1)



@pytest.mark.heavy
@pytest.mark.timeout(900)
def test_stress_chunk20_the_last_member_hung_before_reaching_its_collective(
        tmp_path, shared_reference):
    """Stress chunk 20, campaign 96 (``benchmarks/stress-cpu.txt``), replayed: under
    inmem:3 rank 0 is SIGTERMed in step 1 and rank 1 hangs in step 2's first
    micro-batch, in its own code, before it reaches any collective (so not "stuck
    before its collective" either). When rank 0's step-1 collective had reached rank 1
    before the SIGTERM, rank 1's own watchdog posted the hang and, with rank 0 dead,
    judged it the healthy source; its main thread never came back, the spare gave up
    waiting for it with a traceback, and the run hit the harness's timeout. Which way
    the SIGTERM falls is timing: this replay checks the campaign keeps every
    invariant; the next test meets the path every time."""
    base = _stress_bases()[1]  # grad accumulation 2, fp16 AMP ("base1" in the record)
    c = campaign.Campaign([FaultSpec("term", 0, 1),
                           FaultSpec("nccl-hang", 1, 2, params={"at": "micro:0"}),
                           FaultSpec("kill", 0, 3, params={"at": "micro:0"})], "inmem:3")
    assert c.describe() == ("inmem:3: term@rank0:step1, nccl-hang@rank1:step2/micro:0, "
                            "kill@rank0:step3/micro:0")
    r = run_campaign(c, base, shared_reference, tmp_path)
    assert not r["violations"], json.dumps(r, indent=1)


@pytest.mark.heavy
@pytest.mark.timeout(900)
@pytest.mark.parametrize("strategy", ["inmem:3", "jit-inprocess"])
def test_a_survivor_hung_in_its_own_code_fails_itself(tmp_path, shared_reference, strategy):
    """The class of stress chunk 20's campaign 96, met every time: rank 0 dies at the
    start of step 2 and rank 1 hangs there too, in its own code, before any collective.
    Rank 1's watchdog declares the hang, the membership (rank 0 dead, no collective
    behind) keeps rank 1 as the source, but its main thread never returns to re-form:
    within its hang bound rank 1 fails itself (trigger ``stuck``, phase
    ``recovery``), posts the failure of the generation it never joined, so the
    newcomer assigned to rank 0 leaves (``join_failed``) instead of waiting out the
    set-up timeout, and the job restarts from its checkpoints and completes."""
    base = _stress_bases()[0]
    c = campaign.Campaign([FaultSpec("kill", 0, 2, params={"at": "micro:0"}),
                           FaultSpec("nccl-hang", 1, 2, params={"at": "micro:0"})], strategy)
    r = run_campaign(c, base, shared_reference, tmp_path)
    assert not r["violations"], json.dumps(r, indent=1)
    evs = read_events(Path(r["run_dir"]) / "events")
    decided = [e for e in evs if e["event"] == "membership" and e["phase"] == "end"
               and e["rank"] == 1 and e.get("gen") == 0]
    assert decided and decided[0]["source"] == 1, json.dumps(decided, indent=1)
    stuck = [e for e in evs if e["event"] == "failure" and e.get("trigger") == "stuck"]
    assert [(e["rank"], e["in_phase"], e["step"]) for e in stuck] == [(1, "recovery", 2)], \
        json.dumps(stuck, indent=1)
    left = [e for e in evs if e["event"] == "failure" and e.get("trigger") == "join_failed"]
    assert [e["rank"] for e in left] == [0], json.dumps(left, indent=1)
    assert r["attempts"] == 2, json.dumps(r, indent=1)
