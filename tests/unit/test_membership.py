"""The in-process membership protocol against a real TCPStore (one process, no training)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from datetime import timedelta

import pytest
import torch.distributed as dist

from jitbench.runtime.inprocess.membership import Membership, MembershipError, Report


@pytest.fixture
def store():
    s = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                      timeout=timedelta(seconds=10))
    yield s
    del s


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _rep(rank, step_done, posted, pid=None, stuck=False):
    return Report(rank=rank, pid=pid or os.getpid(), host=socket.gethostname(),
                  step_done=step_done, posted=posted, stuck=stuck)


def test_killed_rank_is_replaced_by_a_spare_without_waiting_out_the_window(store):
    m = Membership(store, world_size=2, report_window_s=30.0, spare_wait_s=5.0)
    m.join(0, 0)
    store.set("g0/member/1", f'{{"pid": {_dead_pid()}, "host": "{socket.gethostname()}"}}')
    sid = m.register_spare()
    assert m.spares_waiting() == 1
    assert m.post_failure(0, 0, "collective_error", "peer closed")
    assert not m.post_failure(0, 0, "collective_error", "again")  # only the first counts
    assert m.failure_posted(0)["trigger"] == "collective_error"
    m.report(0, _rep(0, step_done=5, posted=6))
    assert m.try_lead(0) and not m.try_lead(0)
    dec = m.decide(0)
    assert dec.decided_s < 10  # the dead pid ended the window early
    assert dec.fallback is None and dec.gen == 1 and dec.dead == [1] and dec.hung == []
    assert dec.source == 0 and dec.resume_step == 5
    assert dec.members[1]["spare"] == sid and dec.members[0]["spare"] is None
    assert m.wait_assignment(sid, timeout_s=1).rank == 1
    assert m.generation() == 1 and m.spares_waiting() == 0
    assert m.wait_decision(0, timeout_s=1).members == dec.members


def test_hung_rank_is_the_one_that_did_not_post_the_collective(store):
    m = Membership(store, world_size=3, report_window_s=2.0, spare_wait_s=2.0)
    m.register_spare()
    m.post_failure(0, 0, "hang", "no progress")
    m.report(0, _rep(0, step_done=7, posted=8))
    m.report(0, _rep(1, step_done=7, posted=7))  # blocked before posting step 8
    m.report(0, _rep(2, step_done=7, posted=8))
    dec = m.decide(0)
    assert dec.hung == [1] and dec.dead == [] and dec.fallback is None
    assert m.evicted(0, 1) and not m.evicted(0, 0)
    assert dec.members[1]["spare"] == 0 and dec.source == 0 and dec.resume_step == 7


@pytest.mark.parametrize("stuck", [True, False])
def test_the_last_member_stuck_before_its_own_collective_is_hung_not_the_source(store, stuck):
    """Stress chunk 14, campaign 86 (inmem:3: term@rank0:step6, nccl-hang@rank1:step7):
    rank 0 died, then rank 1 hung before posting step 7's collective, its own watchdog
    posted the hang and led. With no peer left to compare, rank 1 was judged the
    survivor and the source; its main thread never came back to re-form, and the job
    waited out the harness's timeout. A member that reached its collective and never
    posted it is hung itself: nobody healthy is left, so the job falls back to a
    whole-job restart. A member waiting in a collective it posted stays the source."""
    m = Membership(store, world_size=2, report_window_s=30.0, spare_wait_s=2.0)
    m.join(1, 0)
    m.join(1, 1)
    store.set("g1/member/0", f'{{"pid": {_dead_pid()}, "host": "{socket.gethostname()}"}}')
    m.register_spare()
    m.post_failure(1, 1, "hang", "no progress")
    m.report(1, _rep(1, step_done=6, posted=6 if stuck else 7, stuck=stuck))
    assert m.try_lead(1)
    dec = m.decide(1, me=1)
    assert dec.dead == [0]
    if stuck:
        assert dec.hung == [1] and dec.fallback == "no healthy replica reported"
        assert dec.source is None and m.evicted(1, 1)
    else:
        assert dec.hung == [] and dec.fallback is None and dec.source == 1
        assert dec.resume_step == 6 and dec.members[0]["spare"] == 0


def test_survivors_one_step_apart_resume_from_the_furthest(store):
    m = Membership(store, world_size=3, report_window_s=0.2, spare_wait_s=2.0)
    m.register_spare()
    m.post_failure(0, 2, "collective_error", "peer closed")
    m.report(0, _rep(0, step_done=6, posted=7))
    m.report(0, _rep(2, step_done=5, posted=6))
    dec = m.decide(0)
    assert dec.source == 0 and dec.resume_step == 6 and dec.dead == [1]


@pytest.mark.parametrize("case", ["undecidable_hang", "no_spare", "no_survivor"])
def test_fallbacks_name_the_reason(store, case):
    m = Membership(store, world_size=2, report_window_s=0.2, spare_wait_s=0.3)
    if case == "undecidable_hang":
        m.post_failure(0, 0, "hang", "no progress")
        m.report(0, _rep(0, 4, 5))
        m.report(0, _rep(1, 4, 5))
        want = "cannot be named"
    elif case == "no_spare":
        m.post_failure(0, 0, "collective_error", "peer closed")
        m.report(0, _rep(0, 4, 5))
        want = "no spare registered"
    else:
        m.post_failure(0, 0, "collective_error", "peer closed")
        want = "no healthy replica"
    dec = m.decide(0)
    assert dec.fallback and want in dec.fallback
    # generation 1 is opened for claims: the job restarts from its checkpoints
    assert m.generation() == 1
    a0, a1, a2 = (m.claim(i) for i in range(3))
    assert (a0.gen, a0.rank, a0.fresh, a0.attempt) == (1, 0, True, 1)
    assert (a1.gen, a1.rank) == (1, 1) and a2 is None  # the world is full


def test_dead_spare_is_skipped(store):
    m = Membership(store, world_size=2, report_window_s=0.2, spare_wait_s=2.0)
    dead = m.register_spare()
    store.set(f"spare/{dead}/info", f'{{"pid": {_dead_pid()}, "host": "{socket.gethostname()}"}}')
    live = m.register_spare()
    m.post_failure(0, 0, "collective_error", "x")
    m.report(0, _rep(0, 3, 4))
    dec = m.decide(0)
    assert dec.members[1]["spare"] == live


def test_no_decision_in_time_is_one_line(store):
    m = Membership(store, world_size=2)
    with pytest.raises(MembershipError, match="no membership decision for generation 3"):
        m.wait_decision(3, timeout_s=0.1)
    assert m.wait_assignment(9, timeout_s=0.05) is None


def test_a_hung_leader_hands_the_lead_to_a_survivor(store):
    m = Membership(store, world_size=2, report_window_s=1.0, spare_wait_s=5.0)
    m.post_failure(0, 1, "hang", "no progress")
    m.report(0, _rep(0, step_done=4, posted=5))
    m.report(0, _rep(1, step_done=4, posted=4))  # the hung one, first to detect and lead
    assert m.try_lead(0)
    mine = m.decide(0, me=1)
    assert mine.hung == [1] and mine.members == {} and m.evicted(0, 1)
    m.register_spare()  # its replacement, started once it has gone
    dec = m.wait_decision(0, timeout_s=5, rank=0)  # rank 0 takes the lead over
    assert dec.fallback is None and dec.source == 0 and dec.members[1]["spare"] == 0
    # a rank evicted while the leader still waits for a spare learns it at once
    assert m.wait_decision(0, timeout_s=1, rank=1).hung == [1]


def test_a_generation_whose_members_are_all_gone_is_rescued_by_a_spare(store):
    """Field-seen (stress, seed 7): term@rank0 left generation 1 (it saved its JIT part)
    and kill@rank1 hit the other member before a replacement joined: nobody was left to
    decide, and the restarted processes waited in the spare pool until the time bound."""
    m = Membership(store, world_size=2, report_window_s=30.0, spare_wait_s=1.0)
    host = socket.gethostname()
    for r in (0, 1):
        store.set(f"g0/member/{r}", f'{{"pid": {_dead_pid()}, "host": "{host}"}}')
    store.add("gen", 1)  # generation 1 was formed; one member has not joined yet
    store.set("g1/member/0", f'{{"pid": {_dead_pid()}, "host": "{host}"}}')
    assert m.lead_if_lost() is None  # rank 1 may still be joining: not ours to decide
    store.set("g1/member/1", f'{{"pid": {os.getpid()}, "host": "{host}"}}')
    assert m.lead_if_lost() is None  # a member alive: it decides
    store.set("g1/member/1", f'{{"pid": {_dead_pid()}, "host": "{host}"}}')
    store.add("done", 1)
    assert m.lead_if_lost() is None  # ranks that finished training exit too: not a loss
    store.add("done", -1)
    assert m.try_lead(1)  # a member took the lead and died before deciding
    sids = [m.register_spare(), m.register_spare()]
    dec = m.lead_if_lost()
    assert dec is not None and dec.gen == 2 and dec.dead == [0, 1] and dec.source is None
    assert "every member of generation 1 is gone" in dec.fallback
    assert m.lead_if_lost() is None  # decided once
    claims = [m.wait_assignment(sid, timeout_s=2) for sid in sids]
    assert sorted(c.rank for c in claims) == [0, 1]
    assert all(c.fresh and c.gen == 2 and c.attempt == 1 for c in claims)


def test_a_newcomer_leaves_when_its_generation_fails_before_it_has_a_state(store):
    """A newcomer joining generation 1 (set-up, transfer) holds nothing: a failure posted
    in generation 1 (a member that never re-formed, stress chunk 20) ends it at once
    instead of after the set-up timeout, without a report (a reporter is kept as a
    member); once it has the state, the same post only makes it report."""
    from jitbench.runtime.inprocess.group import InProcessGroup

    g = InProcessGroup(f"127.0.0.1:{store.port}", 2, "gloo", 10.0)
    g.gen, g.rank, g.joining = 1, 0, True
    g.completed = lambda: 5
    assert g.check() is None  # nothing posted
    m = Membership(store, 2)
    m.post_failure(1, 1, "hang", "rank 1: its main thread did not return")
    got = g.check()
    assert got is not None and got["trigger"] == "join_failed" and got["save"] is False
    assert "rank 1: its main thread did not return" in got["reason"]
    assert 0 not in m._reports(1)  # no report: the next round counts it dead
    g2 = InProcessGroup(f"127.0.0.1:{store.port}", 2, "gloo", 10.0)
    g2.gen, g2.rank = 1, 1
    g2.completed = lambda: 5
    assert g2.check() is None  # a member with a state stays and reports
    assert m._reports(1)[1].step_done == 5
