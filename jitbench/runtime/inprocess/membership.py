"""Membership of an in-process-recovering job, kept in one c10d store.

A job that recovers in process (``jit-inprocess``) keeps its healthy ranks
alive across a failure and replaces only the failed ones. Who is a member,
in which *generation*, is decided here, through keys of one
``torch.distributed.Store`` (a ``TCPStore`` the harness starts; every process
connects its own client). Generation ``g`` has its own key prefix ``g<g>/``,
and its process group is built on ``PrefixStore("pg/g<g>")``: nothing of
generation ``g`` is read in ``g+1``.

Protocol (one failure, generation ``g`` to ``g+1``):

1. A rank that sees the failure (its collective raised because a peer died,
   or its watchdog's hang bound passed) posts ``g<g>/fail``
   (:meth:`Membership.post_failure`); every other live process sees it on its
   watchdog's next poll (:meth:`Membership.failure_posted`).
2. Every live member writes its :class:`Report` (``g<g>/report/<rank>``): its
   pid and host, the last step it completed and the last step whose gradient
   collective it *posted*. A rank blocked before posting (a hung kernel, a rank
   stuck in I/O) has posted an older step than its peers.
3. The first member to increment ``g<g>/lead`` is the leader
   (:meth:`Membership.decide`). It collects the reports until every member has
   reported or ``report_window_s`` has passed (a missing member on this host
   whose pid is gone is counted dead at once). It then classifies each rank:
   *dead* (no report), *hung* (on a hang, or a collective that timed out: it
   posted an older collective than the others, or it reached its collective and
   never posted it, :attr:`Report.stuck`, which names a hung rank even when its
   peers are dead and no survivor is left to compare; it is evicted, ``g<g>/evict/<rank>``, and its own watchdog ends
   the process so its peers' blocked collectives return) or *survivor*. Each
   dead or hung rank is given a spare from the pool (waiting up to
   ``spare_wait_s`` for one to register: a hot spare started in advance, or
   the failed rank's replacement restarted by its elastic agent). The
   *source* of the state is the survivor with the most completed steps
   (lowest rank on a tie): its boundary is the one every member resumes from.
4. The decision is written to ``g<g>/decision`` and each chosen spare's
   ``spare/<id>/assign``; ``gen`` is set to ``g+1``. Every member of ``g+1``
   builds its process group on ``pg/g<g+1>`` and receives the state from the
   source (:mod:`jitbench.runtime.inprocess.transfer`).

When every member of a generation is gone at once (a compound fault killing
all of them), no member is left to post the failure: a process waiting in the
spare pool that finds every member's pid gone on this host, before any member
finished training, posts it and leads (:meth:`Membership.lead_if_lost`); the
decision is a fallback, as below.

When no survivor is left, or every rank posted the same collective on a hang
(the culprit cannot be named), the decision carries ``fallback`` with the
reason: the job falls back to the JIT checkpoint and a whole-job restart. The
leader opens generation ``g+1`` for *claims* (``restart``): the members save
their JIT parts and exit, their agents restart them, and every process in the
spare pool claims a rank of the new generation (``g<g+1>/claims``) until the
world is full; that generation restores from the checkpoint directory.

Store errors propagate as :class:`MembershipError` (one line).
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["Assignment", "Decision", "Membership", "MembershipError", "Report"]


class MembershipError(RuntimeError):
    """The membership protocol could not complete (store gone, no decision in time)."""


@dataclass
class Report:
    """What a live member says about itself after a failure was posted."""

    rank: int
    pid: int
    host: str
    step_done: int
    """Optimizer steps this rank completed (its boundary); -1: it holds no consistent
    state (it failed inside its optimizer step, or is a newcomer whose transfer broke)."""
    posted: int
    """The last step whose gradient collective this rank posted (0: none yet)."""
    stuck: bool = False
    """It reached a gradient collective it has not posted: blocked in its own code, not
    waiting for a peer (:attr:`jitbench.runtime.core.Runtime.stuck_before_collective`)."""
    t_wall: float = field(default_factory=time.time)


@dataclass
class Decision:
    """The leader's decision for generation ``gen`` (the generation being formed)."""

    gen: int
    members: dict[int, dict[str, Any]]
    """rank -> ``{"pid", "host", "spare": spare id or None}`` of generation ``gen``."""
    source: int | None
    """The rank whose state every member resumes from (None with a fallback)."""
    resume_step: int
    """The source's completed steps: every member re-executes from ``resume_step + 1``."""
    dead: list[int] = field(default_factory=list)
    hung: list[int] = field(default_factory=list)
    fallback: str | None = None
    """Set when in-process recovery is impossible; the reason, one line."""
    trigger: str = ""
    decided_s: float = 0.0
    """Seconds from the failure post to the decision (s)."""

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str | bytes) -> Decision:
        d = json.loads(text)
        d["members"] = {int(k): v for k, v in d["members"].items()}
        return cls(**d)


@dataclass
class Assignment:
    """What a spare is told: join generation ``gen`` as ``rank``."""

    gen: int
    rank: int
    fresh: bool = False
    """The generation restarts the job from its checkpoints (after a fallback): every
    member restores from disk; otherwise the state comes from a surviving replica."""
    attempt: int = 0
    """Whole-job restarts so far (the attempt this generation belongs to)."""


def _alive_here(info: dict[str, Any] | None) -> bool | None:
    """True/False where ``info`` names a process on this host, None where it cannot tell.

    A zombie (killed, not yet reaped by its agent) counts as dead.
    """
    if not info or info.get("host") != socket.gethostname():
        return None
    pid = int(info["pid"])
    try:
        stat = open(f"/proc/{pid}/stat").read()  # noqa: SIM115 - one read
        return stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False
    except OSError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Membership:
    """One process's view of the job's membership.

    Args:
        store: a ``torch.distributed.Store`` client of its own (the watchdog
            thread polls it while the main thread trains).
        world_size: ranks per generation (replaced ranks keep their number, so
            every rank keeps its data shard).
        report_window_s: how long the leader waits for members' reports (s).
        spare_wait_s: how long the leader waits for a spare to register (s).
    """

    def __init__(self, store: Any, world_size: int, report_window_s: float = 1.0,
                 spare_wait_s: float = 120.0) -> None:
        self.store = store
        self.world_size = world_size
        self.report_window_s = report_window_s
        self.spare_wait_s = spare_wait_s

    # -- keys ------------------------------------------------------------------------------
    def _get(self, key: str) -> bytes:
        try:
            return self.store.get(key)
        except Exception as exc:  # noqa: BLE001 - a dead store is one line
            raise MembershipError(f"membership store: get {key}: {exc}") from exc

    def _has(self, key: str) -> bool:
        try:
            return bool(self.store.check([key]))
        except Exception as exc:  # noqa: BLE001
            raise MembershipError(f"membership store: check {key}: {exc}") from exc

    def _set(self, key: str, value: str) -> None:
        try:
            self.store.set(key, value)
        except Exception as exc:  # noqa: BLE001
            raise MembershipError(f"membership store: set {key}: {exc}") from exc

    def _add(self, key: str, n: int) -> int:
        try:
            return int(self.store.add(key, n))
        except Exception as exc:  # noqa: BLE001
            raise MembershipError(f"membership store: add {key}: {exc}") from exc

    # -- generations -----------------------------------------------------------------------
    def generation(self) -> int:
        """The current generation (0 until a decision formed a newer one)."""
        return self._add("gen", 0)

    @staticmethod
    def pg_prefix(gen: int) -> str:
        """Store prefix of generation ``gen``'s process group."""
        return f"pg/g{gen}"

    def join(self, gen: int, rank: int, spare: int | None = None) -> None:
        """Record this process as ``rank`` of generation ``gen`` (pid, host)."""
        self._set(f"g{gen}/member/{rank}", json.dumps(
            {"pid": os.getpid(), "host": socket.gethostname(), "spare": spare}))

    def member(self, gen: int, rank: int) -> dict[str, Any] | None:
        """What ``rank`` recorded when it joined ``gen`` (None if it did not)."""
        key = f"g{gen}/member/{rank}"
        return json.loads(self._get(key)) if self._has(key) else None

    # -- failure ---------------------------------------------------------------------------
    def post_failure(self, gen: int, rank: int, trigger: str, reason: str) -> bool:
        """Announce a failure in ``gen``; True for the first announcement."""
        first = self._add(f"g{gen}/fails", 1) == 1
        if first:
            self._set(f"g{gen}/fail", json.dumps({"rank": rank, "trigger": trigger,
                                                   "reason": reason, "t_wall": time.time()}))
        return first

    def failure_posted(self, gen: int) -> dict[str, Any] | None:
        """The first failure posted in ``gen`` (``rank``, ``trigger``, ``reason``, ``t_wall``)."""
        key = f"g{gen}/fail"
        if not self._has(key):
            return None
        return json.loads(self._get(key))

    def report(self, gen: int, rep: Report) -> None:
        """Write this member's :class:`Report` for ``gen``'s failure."""
        self._set(f"g{gen}/report/{rep.rank}", json.dumps(asdict(rep)))
        self._add(f"g{gen}/reports", 1)

    def evicted(self, gen: int, rank: int) -> bool:
        """Whether the leader evicted ``rank`` (hung) in ``gen``: it must end its process."""
        return self._has(f"g{gen}/evict/{rank}")

    def try_lead(self, gen: int) -> bool:
        """True for exactly one caller per generation: the leader, which must :meth:`decide`."""
        return self._add(f"g{gen}/lead", 1) == 1

    def _reports(self, gen: int) -> dict[int, Report]:
        out = {}
        for r in range(self.world_size):
            key = f"g{gen}/report/{r}"
            if self._has(key):
                out[r] = Report(**json.loads(self._get(key)))
        return out

    def decide(self, gen: int, poll_s: float = 0.005, me: int | None = None) -> Decision:
        """Collect the reports of ``gen``, classify the ranks, assign spares, publish.

        A leader (``me``) that finds itself hung hands the lead over (a survivor takes
        it in :meth:`wait_decision`) and gets a decision that evicts it: its own
        replacement can only start once it has gone.

        Returns:
            The decision for generation ``gen + 1`` (also written to the store).

        Raises:
            MembershipError: the store failed.
        """
        fail = self.failure_posted(gen) or {}
        t_fail = float(fail.get("t_wall", time.time()))
        trigger = str(fail.get("trigger", ""))
        members = {r: self.member(gen, r) for r in range(self.world_size)}
        deadline = time.monotonic() + self.report_window_s
        while True:
            reps = self._reports(gen)
            missing = [r for r in range(self.world_size) if r not in reps]
            if not missing:
                break
            if all(_alive_here(members[r]) is False for r in missing):
                break
            if time.monotonic() > deadline:
                break
            time.sleep(poll_s)
        dead = sorted(missing)
        hung: list[int] = []
        if reps and trigger in ("hang", "timeout"):
            # hung: behind the others' collective, or stuck before its own (which also
            # names the only member left, whose peers are dead: stress chunk 14)
            top = max(rep.posted for rep in reps.values())
            hung = sorted(r for r, rep in reps.items() if rep.posted < top or rep.stuck)
        survivors = {r: rep for r, rep in reps.items() if r not in hung}
        holders = {r: rep for r, rep in survivors.items() if rep.step_done >= 0}
        fallback = None
        if not survivors and trigger == "lost":
            fallback = f"every member of generation {gen} is gone (no replica survived)"
        elif not survivors:
            fallback = "no healthy replica reported"
        elif not holders:
            fallback = "no surviving replica holds a consistent state"
        elif trigger in ("hang", "timeout") and not hung and not dead:
            fallback = "every rank posted the same collective: the hung rank cannot be named"
        source = None
        resume = 0
        if fallback is None:
            best = max(rep.step_done for rep in holders.values())
            source = min(r for r, rep in holders.items() if rep.step_done == best)
            resume = best
        new_members: dict[int, dict[str, Any]] = {
            r: {"pid": rep.pid, "host": rep.host, "spare": None} for r, rep in survivors.items()}
        for r in hung:
            self._set(f"g{gen}/evict/{r}", "1")
        if me is not None and me in hung and survivors:
            self._set(f"g{gen}/abdicated", "1")
            return Decision(gen=gen + 1, members={}, source=None, resume_step=0, hung=[me],
                            trigger=trigger)
        if fallback is None:
            for r in dead + hung:
                sid, info = self._take_spare()
                if sid is None:
                    fallback = f"no spare registered within {self.spare_wait_s:g} s for rank {r}"
                    break
                new_members[r] = {"pid": info["pid"], "host": info["host"], "spare": sid}
        dec = Decision(gen=gen + 1, members=new_members, source=source, resume_step=resume,
                       dead=dead, hung=hung, fallback=fallback, trigger=trigger,
                       decided_s=max(0.0, time.time() - t_fail))
        if fallback is None:
            for r, m in new_members.items():
                if m["spare"] is not None:
                    self._set(f"spare/{m['spare']}/assign", json.dumps({"gen": gen + 1, "rank": r}))
        self._set(f"g{gen}/decision", dec.to_json())
        if fallback is not None:
            attempt = self._add("restarts", 1)
            self._set("restart", json.dumps({"gen": gen + 1, "attempt": attempt}))
        self._add("gen", 1)
        return dec

    def wait_decision(self, gen: int, timeout_s: float, poll_s: float = 0.005,
                      rank: int | None = None) -> Decision:
        """The leader's decision for ``gen``'s failure. With ``rank``: as soon as the
        leader evicts that rank, a decision that names it hung (the leader may still be
        waiting for a spare, which may be this very rank's replacement).

        Raises:
            MembershipError: none within ``timeout_s`` (s), or the store failed.
        """
        key = f"g{gen}/decision"
        deadline = time.monotonic() + timeout_s
        while not self._has(key):
            if rank is not None and self.evicted(gen, rank):
                return Decision(gen=gen + 1, members={}, source=None, resume_step=0,
                                hung=[rank])
            if (rank is not None and self._has(f"g{gen}/abdicated")
                    and self._add(f"g{gen}/lead2", 1) == 1):
                return self.decide(gen, poll_s, me=rank)
            if time.monotonic() > deadline:
                raise MembershipError(f"no membership decision for generation {gen} within "
                                      f"{timeout_s:g} s")
            time.sleep(poll_s)
        return Decision.from_json(self._get(key))

    def members_of(self, gen: int) -> dict[int, dict[str, Any]]:
        """rank -> ``{"pid", "host", ...}`` of the members of ``gen`` known so far: those
        the decision that formed it named, else those that joined it."""
        if gen > 0 and self._has(f"g{gen - 1}/decision"):
            dec = Decision.from_json(self._get(f"g{gen - 1}/decision"))
            if dec.fallback is None:
                return dec.members
        return {r: m for r in range(self.world_size) if (m := self.member(gen, r)) is not None}

    def lead_if_lost(self, done_key: str = "done") -> Decision | None:
        """Lead the current generation's failure when every one of its members is gone.

        Called by a process waiting in the spare pool. The generation counts as lost
        when all ``world_size`` ranks are known (:meth:`members_of`), every one's pid
        is gone from this host, no decision was made for it yet, and no rank has
        finished training (``done_key`` is 0: ranks that finished also exit).

        Returns:
            The decision (a fallback: no healthy replica reported) when this caller
            led it, else None.

        Raises:
            MembershipError: the store failed.
        """
        gen = self.generation()
        if self._has(f"g{gen}/decision") or self._add(done_key, 0) > 0:
            return None
        members = self.members_of(gen)
        if len(members) < self.world_size or any(_alive_here(m) is not False
                                                 for m in members.values()):
            return None
        # every member is gone, so none is deciding: the first spare to count decides
        # (not try_lead: a member may have taken the lead and died before deciding)
        if self._add(f"g{gen}/rescue", 1) != 1:
            return None
        self.post_failure(gen, -1, "lost", f"every rank of generation {gen} is gone")
        return self.decide(gen)

    # -- spares ----------------------------------------------------------------------------
    def register_spare(self, prefer_rank: int | None = None) -> int:
        """Enter the spare pool; returns this spare's id (wait with :meth:`wait_assignment`)."""
        sid = self._add("spare/registered", 1) - 1
        self._set(f"spare/{sid}/info", json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                                   "prefer_rank": prefer_rank}))
        return sid

    def spares_waiting(self) -> int:
        """Spares registered and not yet taken."""
        return self._add("spare/registered", 0) - self._add("spare/taken", 0)

    def _take_spare(self, poll_s: float = 0.01) -> tuple[int | None, dict[str, Any]]:
        deadline = time.monotonic() + self.spare_wait_s
        while True:
            if self._add("spare/registered", 0) > self._add("spare/taken", 0):
                sid = self._add("spare/taken", 1) - 1
                info_key = f"spare/{sid}/info"
                while not self._has(info_key):  # registered, info being written
                    time.sleep(poll_s)
                info = json.loads(self._get(info_key))
                if _alive_here(info) is False or self._has(f"spare/{sid}/gone"):
                    continue
                return sid, info
            if time.monotonic() > deadline:
                return None, {}
            time.sleep(poll_s)

    def wait_assignment(self, spare_id: int, timeout_s: float | None = None,
                        poll_s: float = 0.005) -> Assignment | None:
        """Block until the leader assigns this spare, or a generation opened for claims
        after a fallback takes it (:meth:`claim`); None after ``timeout_s`` (s; None:
        forever)."""
        key = f"spare/{spare_id}/assign"
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not self._has(key):
            got = self.claim(spare_id)
            if got is not None:
                return got
            if deadline is not None and time.monotonic() > deadline:
                return None
            time.sleep(poll_s)
        d = json.loads(self._get(key))
        return Assignment(gen=int(d["gen"]), rank=int(d["rank"]),
                          attempt=self._add("restarts", 0))

    def claim(self, spare_id: int | None) -> Assignment | None:
        """A rank of the generation opened for claims after a fallback, if one is left.

        The spare leaves the pool (``spare/<id>/gone``) when it gets one.
        """
        if not self._has("restart"):
            return None
        r = json.loads(self._get("restart"))
        gen = int(r["gen"])
        if self._has(f"g{gen}/full") or self._has(f"spare/{spare_id}/claimed{gen}"):
            return None
        self._set(f"spare/{spare_id}/claimed{gen}", "1")
        rank = self._add(f"g{gen}/claims", 1) - 1
        if rank >= self.world_size:
            self._set(f"g{gen}/full", "1")
            return None
        if spare_id is not None:
            self._set(f"spare/{spare_id}/gone", "1")
        return Assignment(gen=gen, rank=rank, fresh=True, attempt=int(r["attempt"]))
