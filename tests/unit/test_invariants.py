"""The campaign invariants on synthetic event logs: each check passes the
allowed difference (one replayed minibatch per failure, a step a peer
completed) and catches what it exists to catch."""

from __future__ import annotations

import random

import pytest

from jitbench.harness import campaign, metrics
from jitbench.harness.spec import RunSpec
from jitbench.runtime.events import EventLog, events_path
from jitbench.workloads.base import WorkloadConfig

STEPS = 6


def _ids(rank: int, step: int) -> list[int]:
    return [100 * rank + 2 * step, 100 * rank + 2 * step + 1]


def _log(run_dir, plan: dict[int, list[list[int]]], tamper=None) -> None:
    """``plan[rank] = [[steps of attempt 0], [steps of attempt 1], ...]``."""
    for rank, attempts in plan.items():
        for a, steps in enumerate(attempts):
            log = EventLog(events_path(run_dir / "events", a, rank), rank, a)
            for s in steps:
                ids = _ids(rank, s)
                if tamper and tamper(rank, a, s):
                    ids = list(reversed(ids))
                log.emit("step", "end", step=s, sample_ids=ids, micro=[s - 1], rng=f"r{s}")
            log.close()


@pytest.fixture
def ref(tmp_path):
    d = tmp_path / "ref"
    _log(d, {r: [list(range(1, STEPS + 1))] for r in (0, 1)})
    return d


@pytest.mark.parametrize("plan, max_replay, needle", [
    ({0: [[1, 2, 3], [3, 4, 5, 6]], 1: [[1, 2, 3], [3, 4, 5, 6]]}, 1, None),  # one replay
    ({0: [[1, 2], [3, 4, 5, 6]], 1: [[1, 2], [3, 4, 5, 6]]}, 1, None),  # no replay
    ({0: [[1, 2, 3], [2, 3, 4, 5, 6]], 1: [[1, 2, 3], [2, 3, 4, 5, 6]]}, 1, "replays 2"),
    ({0: [[1, 2, 3], [2, 3, 4, 5, 6]], 1: [[1, 2, 3], [2, 3, 4, 5, 6]]}, 3, None),  # periodic:3
    # rank 1 died inside step 3 after its gradient arrived: rank 0 completed it
    ({0: [[1, 2, 3], [4, 5, 6]], 1: [[1, 2], [4, 5, 6]]}, 1, None),
    ({0: [[1, 2], [4, 5, 6]], 1: [[1, 2], [4, 5, 6]]}, 1, "skipping [3] that no rank"),
    # the same at the first step (rank 0 SIGTERMed inside step 1, rank 1 completed it)
    ({0: [[], [2, 3, 4, 5, 6]], 1: [[1], [2, 3, 4, 5, 6]]}, 1, None),
    ({0: [[2, 3, 4, 5, 6]], 1: [[1, 2, 3, 4, 5, 6]]}, 1, "starts at step 2, skipping [1]"),
    ({0: [[1, 2, 3, 4, 5]], 1: [[1, 2, 3, 4, 5]]}, 1, "last completed step 5"),
    ({0: [[1, 2, 4, 5, 6]], 1: [[1, 2, 3, 4, 5, 6]]}, 1, "step 4 follows step 2"),
])
def test_stream_check(tmp_path, ref, plan, max_replay, needle):
    _log(tmp_path / "run", plan)
    v = metrics.stream_violations(tmp_path / "run", ref, STEPS, max_replay)
    if needle is None:
        assert v == []
    else:
        assert any(needle in x for x in v), v


def test_stream_check_catches_other_samples_in_a_replay(tmp_path, ref):
    _log(tmp_path / "run", {0: [[1, 2, 3], [3, 4, 5, 6]], 1: [[1, 2, 3], [3, 4, 5, 6]]},
         tamper=lambda rank, a, s: (rank, a, s) == (1, 1, 3))
    v = metrics.stream_violations(tmp_path / "run", ref, STEPS, 1)
    assert v == ["rank 1 step 3 (attempt 1): sample_ids differs from the reference"]


def test_random_campaigns_are_well_formed():
    rng = random.Random(3)
    kinds = set(campaign.campaign_kinds())
    for _ in range(200):
        c = campaign.random_campaign(rng, steps=8, grad_accum=2)
        steps = [f.step for f in c.faults]
        assert 1 <= len(steps) <= 3 and len(set(steps)) == len(steps)
        assert all(1 <= s < 8 and f.kind in kinds and f.rank in (0, 1)
                   and f.params.get("at", "collective") in ("collective", "micro:0", "micro:1")
                   for s, f in zip(steps, c.faults, strict=True))


def test_campaign_kinds_by_name(monkeypatch):
    monkeypatch.setenv("JITBENCH_CAMPAIGN_KINDS", "kill, term")
    assert campaign.campaign_kinds() == ("kill", "term")
    monkeypatch.setenv("JITBENCH_CAMPAIGN_KINDS", "kill,meteor")
    with pytest.raises(ValueError, match="meteor"):
        campaign.campaign_kinds()


def test_expected_order_and_replay_bounds():
    assert campaign.max_replay("jit", 8) == 1
    assert campaign.max_replay("periodic:3", 8) == 3
    assert campaign.max_replay("none", 8) == 8
    assert campaign.max_replay("inmem:3", 8) == 3
    # stress chunk 7, campaign 59: segfault@rank0:step5 found the async save of step 3
    # still writing; the restore took step 0 (4 steps replayed), as the files said
    assert campaign.max_replay("periodic-async:3", 8) == 5
    # inmem: N from a surviving in-memory copy; from disk, the steps since that checkpoint
    assert campaign.failure_bound("inmem:3", 8, "memory") == 3
    assert campaign.failure_bound("inmem:3", 8, "disk") == 8
    assert campaign.failure_bound("inmem:3", 8, None) == 8
    assert campaign.failure_bound("periodic:3", 8, None) == 3
    assert campaign.expected_order("periodic:3", 1) == ["fault", "failure", "restart", "restore",
                                                         "step"]


def test_a_replay_other_than_the_committed_checkpoints_give_is_a_violation(tmp_path):
    spec = RunSpec(WorkloadConfig(steps=8), strategy="periodic-async:3")
    (tmp_path / "events").mkdir()
    base = {"completed": False, "replayed_steps": 4, "expected_replayed_steps": 4,
            "failures": [{"fault_step": 5, "replayed_steps": 4}]}
    lines = campaign.check({**base, "replay_ok": True}, spec, tmp_path, tmp_path, 60)
    assert not [x for x in lines if x.startswith("replay")], lines
    lines = campaign.check({**base, "replay_ok": False, "expected_replayed_steps": 1}, spec,
                           tmp_path, tmp_path, 60)
    assert "replay: replayed 4 steps, the newest committed checkpoints give 1" in lines
    lines = campaign.check({**base, "failures": [{"fault_step": 7, "replayed_steps": 6}]},
                           spec, tmp_path, tmp_path, 60)
    assert "replay: failure at step 7 replayed 6 steps (allowed 5)" in lines


@pytest.mark.parametrize("faults, needle", [
    ([(0, 1, 2)], None),
    ([(0, 1, 2), (1, 1, 5)], None),  # one failure each
    # field-seen (stress): term@1:2 failed rank 1 inside step 2 after its gradient
    # arrived; rank 0 finished step 2 and met kill@0:3 in the same attempt
    ([(0, 1, 2), (0, 0, 3)], None),
    ([(0, 1, 2), (0, 0, 4)], "kill@0:4 fired in attempt 0 after term@1:2"),
    ([(0, 1, 2), (0, 1, 3)], "kill@1:3 fired in attempt 0 after term@1:2"),
    ([(0, 1, 3), (0, 0, 2)], "kill@0:2 fired in attempt 0 after term@1:3"),  # an earlier step
])
def test_faults_sharing_an_attempt(faults, needle):
    evs = [{"event": "fault", "attempt": a, "rank": r, "step": s, "t_mono": float(i),
            "fault_id": f"{'term' if i == 0 else 'kill'}@{r}:{s}"}
           for i, (a, r, s) in enumerate(faults)]
    v = campaign._coincident_fault_violations(evs)
    if needle is None:
        assert v == []
    else:
        assert len(v) == 1 and needle in v[0], v


ONE = ["fault", "failure", "save", "restart", "restore"]


@pytest.mark.parametrize("faults, restored, order, ok", [
    ([(0, 6)], {1: 5}, ONE + ["step"], True),
    ([(0, 6)], {1: 5}, ONE, False),  # recovered but no step after it
    # field-seen (stress): restored at step 6 in attempt 1, whose first fault hits step 7
    ([(0, 6), (1, 7)], {1: 6, 2: 6}, ONE + ONE + ["step"], True),
    ([(0, 6), (1, 7)], {1: 6, 2: 6}, ONE + ["step"] + ONE + ["step"], True),
    ([(0, 6), (1, 8)], {1: 6, 2: 7}, ONE + ONE + ["step"], False),  # step 7 must complete
    ([(0, 6), (1, 7)], {1: 6, 2: 6}, ONE + ONE, False),  # the last recovery needs its step
    ([(0, 6), (1, 7)], {1: 6, 2: 6}, ONE + ["step", "step"] + ONE + ["step"], False),
])
def test_milestones(faults, restored, order, ok):
    evs = [{"event": "fault", "attempt": a, "step": s} for a, s in faults]
    evs += [{"event": "restore", "phase": "end", "attempt": a, "step": s}
            for a, s in restored.items()]
    assert campaign.milestones_ok(order, "jit", evs) is ok


def _log_gens(run_dir, plan: dict[int, list[list[int]]]) -> None:
    """In-process recovery: ``plan[rank] = [[steps of generation 0], [generation 1], ...]``,
    all in attempt 0 (the survivors keep their processes; each generation's steps are
    written by whichever process is that rank then)."""
    for rank, gens in plan.items():
        for g, steps in enumerate(gens):
            log = EventLog(run_dir / "events" / f"attempt000_rank{rank:05d}_g{g}.jsonl", rank,
                           0)
            log.set_base(gen=g)
            for s in steps:
                log.emit("step", "end", step=s, sample_ids=_ids(rank, s), micro=[s - 1],
                         rng=f"r{s}")
            log.close()


@pytest.mark.parametrize("plan, needle", [
    # rank 1 died in step 4; rank 0 replays step 4 from the boundary of step 3
    ({0: [[1, 2, 3], [4, 5, 6]], 1: [[1, 2, 3], [4, 5, 6]]}, None),
    # rank 0 finished step 4 before the failure: rank 1's newcomer resumes at step 5
    ({0: [[1, 2, 3, 4], [5, 6]], 1: [[1, 2, 3], [5, 6]]}, None),
    # a survivor adopting the source's newer boundary skips the step the source completed
    ({0: [[1, 2, 3], [5, 6]], 1: [[1, 2, 3, 4], [5, 6]]}, None),
    ({0: [[1, 2, 3], [5, 6]], 1: [[1, 2, 3], [5, 6]]}, "generation 1 starts at step 5, "
                                                       "skipping [4]"),
    ({0: [[1, 2, 4], [5, 6]], 1: [[1, 2, 3, 4], [5, 6]]}, "step 4 follows step 2 in attempt 0"),
    ({0: [[1, 2, 3], [2, 3, 4, 5, 6]], 1: [[1, 2, 3], [2, 3, 4, 5, 6]]}, "replays 2"),
])
def test_stream_check_in_process(tmp_path, ref, plan, needle):
    _log_gens(tmp_path / "run", plan)
    v = metrics.stream_violations(tmp_path / "run", ref, STEPS, 1)
    if needle is None:
        assert v == []
    else:
        assert any(needle in x for x in v), v


def test_faults_in_successive_generations_are_separate_failures():
    evs = [{"event": "fault", "attempt": 0, "gen": g, "rank": r, "step": s, "t_mono": float(i),
            "fault_id": f"{k}@{r}:{s}"}
           for i, (g, r, s, k) in enumerate([(0, 1, 1, "term"), (1, 0, 4, "exit")])]
    assert campaign._coincident_fault_violations(evs) == []
    evs[1]["gen"] = 0  # the same generation: the second fault did not fail the job
    (v,) = campaign._coincident_fault_violations(evs)
    assert "exit@0:4 fired in attempt 0 after term@1:1" in v


IN = ["fault", "failure", "reform", "transfer", "restore", "step"]


@pytest.mark.parametrize("order, ok", [
    (IN + IN, True),
    # a rank failing in its own step (exception, SIGTERM) writes its JIT part first
    (IN[:2] + ["save"] + IN[2:] + IN, True),
    (IN + IN[:2] + ["save"] + IN[2:], True),
    (IN[:2] + ["save", "save"] + IN[2:] + IN, False),
    (["save"] + IN + IN, False),
    (IN + IN[:-1], False),  # the last recovery needs its step
    # no replica survived the second failure: the JIT backstop and a whole-job restart
    (IN + ["fault", "failure", "save", "restart", "restore", "step"], True),
    (IN + ["fault", "failure", "restart", "restore"], False),  # no step after the last
    (IN + ["fault", "failure", "restart", "transfer", "restore", "step"], False),
])
def test_milestones_in_process(order, ok):
    evs = [{"event": "fault", "attempt": 0, "gen": g, "step": s} for g, s in ((0, 2), (1, 5))]
    assert campaign.milestones_ok(order, "jit-inprocess", evs) is ok


@pytest.mark.parametrize("next_fault, ok", [(4, True), (5, False)])
def test_in_process_milestones_without_a_step_before_the_next_fault(next_fault, ok):
    """Field-seen (stress): term@0:3 replaced rank 0; its newcomer, restored at step 3,
    was killed at step 4 before any step completed in generation 1."""
    evs = [{"event": "fault", "attempt": 0, "gen": 0, "step": 3},
           {"event": "restore", "phase": "end", "attempt": 0, "gen": 1, "step": 3},
           {"event": "fault", "attempt": 0, "gen": 1, "step": next_fault}]
    order = IN[:2] + ["save"] + IN[2:-1] + IN
    assert campaign.milestones_ok(order, "jit-inprocess", evs) is ok


def test_recheck_finds_a_relative_reference_inside_the_run_wherever_it_now_is(tmp_path):
    """A run started elsewhere (``runs/x``, its reference ``runs/x/reference``) and
    checked again from here finds the reference inside its own directory; an absolute
    one is used as it is; one that is not there is an OSError naming it, never a
    comparison against nothing (a violation that is not there)."""
    from jitbench.harness.campaign import _reference_dir

    run = tmp_path / "moved" / "x"
    (run / "reference").mkdir(parents=True)
    then = {"run_dir": "runs/x", "reference_dir": "runs/x/reference"}
    assert _reference_dir(run, then) == run / "reference"
    assert _reference_dir(run, {**then, "reference_dir": str(run / "reference")}) \
        == run / "reference"
    assert _reference_dir(run, {"run_dir": "runs/x"}) is None
    with pytest.raises(OSError, match="refs/r0 is not found"):
        _reference_dir(run, {**then, "reference_dir": "refs/r0"})
    (run / "reference").rmdir()
    with pytest.raises(OSError, match="runs/x/reference is not found"):
        _reference_dir(run, then)
