"""``jit-inprocess``: survivors keep their processes; only the failed rank is replaced.

Gupta et al. (EuroSys 2024) recover transparently without restarting the
healthy processes; this is that recovery on the user-level runtime. At a
failure every survivor still holds the state of the last iteration boundary
(as under ``jit``). Instead of saving it and exiting for a whole-job restart:

1. The survivors agree on the new membership (:mod:`jitbench.runtime.inprocess.
   membership`): the dead rank (no report; its pid gone), or on a hang the rank
   that never posted the collective its peers wait in, which is evicted and
   ends its own process (gloo cannot abort a blocked collective; its exit makes
   the peers' collectives return). A spare takes each failed rank's place: a
   hot spare the harness started in advance, or the failed rank's own
   replacement, restarted by its elastic agent.
2. Every member of the new generation builds its process group on that
   generation's store prefix and receives the boundary state of one healthy
   replica (the one with the most completed steps) by broadcast
   (:mod:`jitbench.runtime.inprocess.transfer`), then every rank re-executes
   the failed step: at most one minibatch is replayed, and the run stays
   bitwise equal to the fault-free one.
3. The JIT checkpoint is still written, off the critical path: after the
   transfer the source writes its part from a copy in a background thread. It
   is the backstop when in-process recovery is impossible (no replica with a
   consistent state, no spare in time, a hang whose culprit cannot be named):
   then the survivors save their JIT part and exit, as under ``jit``.

The worker binds the job's :class:`~jitbench.runtime.inprocess.group.InProcessGroup`
and a callback that rebuilds what wraps the process group (DDP, whose reducer
an aborted backward leaves mid-reduction) with :meth:`InProcessRecovery.bind`.

:class:`InProcessRecovery` is the protocol itself (membership, re-forming,
transfer), with the points where a strategy differs as methods: which state a
rank holds and reports (:meth:`~InProcessRecovery.held_step`), the state the
source sends (:meth:`~InProcessRecovery.source_state`), what follows the
transfer (:meth:`~InProcessRecovery.after_transfer`) and what a rank that
cannot recover in process does (:meth:`~InProcessRecovery.leave_job`).
``jit-inprocess`` (:class:`JitInProcess`) resumes from the current boundary
and keeps the JIT checkpoint as its backstop; ``inmem``
(:mod:`jitbench.runtime.strategies.inmem`) rolls back to its last in-memory
copy.

Events: ``membership`` begin/end (dead, hung, source, fallback, decided_s),
``reform`` begin/end (generation), ``transfer`` begin/end (bytes, source),
``restore`` begin/end with kind ``peer`` (``inmem``: ``memory``) on every
member that adopted the state.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

from jitbench.runtime.config import EXIT_FAILURE
from jitbench.runtime.strategies.base import Loaded, Strategy
from jitbench.runtime.strategies.jit import JustInTime

if TYPE_CHECKING:
    from jitbench.runtime.core import Runtime
    from jitbench.runtime.inprocess.group import InProcessGroup
    from jitbench.runtime.inprocess.membership import Decision, Membership

__all__ = ["EXIT_EVICTED", "InProcessRecovery", "JitInProcess", "PEER_TRIGGERS", "receive"]

PEER_TRIGGERS = ("collective_error", "hang", "notice")
"""Failure triggers that mean a *peer* failed: this rank stays and recovers in process.
Any other trigger (an exception in this rank's step, SIGTERM: a preemption, a fatal
Xid on its GPU, a failed write) means this rank itself fails: it saves its JIT part
and leaves, as under ``jit``, and its peers recover without it."""

EXIT_EVICTED = 79
"""Exit status of a rank that the new membership left out (hung, or judged dead)."""
DECISION_TIMEOUT_S = 300.0
"""How long a member waits for the leader's decision (s): the leader may wait
``spare_wait_s`` for a replacement to start."""
MAX_REFORMS = 8
"""Failures during one recovery (a member dying while the state is sent) before the
job falls back to its JIT checkpoint."""


class InProcessRecovery(Strategy):
    """In-process recovery (see the module docstring); subclasses choose the state.

    Class attribute ``restored_kind``: the ``kind`` of the restore events of an
    adopted state (``peer``: a replica's live boundary).
    """

    restored_kind: ClassVar[str] = "peer"

    def __init__(self, config) -> None:
        super().__init__(config)
        self.group: InProcessGroup | None = None
        self.rebuild: Callable[[], None] = lambda: None
        self.release: Callable[[], None] = lambda: None
        self.pending: Decision | None = None
        self.recoveries = 0
        self._expecting: Callable[[], dict | None] | None = None  # see _expect_main

    def bind(self, rt: Runtime, group: InProcessGroup, rebuild: Callable[[], None],
             release: Callable[[], None] = lambda: None) -> None:
        """Use ``group`` for membership and process groups. ``release()`` drops what
        holds the old process group (the DDP wrapper) before it is destroyed, so its
        connections close and a peer still blocked in the old collective returns;
        ``rebuild()`` wraps the model again on the new group. The group's reports
        read :meth:`holds_state`, :meth:`held_step`, ``rt``'s last posted
        collective and whether it is stuck before its own."""
        self.group = group
        self.rebuild = rebuild
        self.release = release
        group.state_ok = lambda: self.holds_state(rt)
        group.completed = lambda: self.held_step(rt)
        group.posted = lambda: rt.posted
        group.stuck = lambda: rt.stuck_before_collective

    # ------------------------------------------------- what subclasses choose
    def holds_state(self, rt: Runtime) -> bool:
        """This rank holds a consistent state it could send as the source (asked after
        a failure, from any thread). Default: the live state equals its boundary."""
        return _consistent(rt)

    def held_step(self, rt: Runtime) -> int:
        """The step of that state (the report's ``step_done``; the leader picks the
        highest). Default: the live boundary."""
        return rt.completed

    def source_state(self, rt: Runtime, dec: Decision) -> dict:
        """On the source: ``{"state", "manifest", "step"}`` to send (the tensors may be
        adopted by every member as they are: a copy whose tensors nothing else
        writes, or the live state). Default: the live boundary."""
        return {"state": rt.boundary.assemble(rt.completed, rt.boundary.snapshot),
                "manifest": {"meta": rt.manifest_meta()}, "step": rt.completed,
                "source": f"rank {rt.rank}"}

    def after_transfer(self, rt: Runtime, dec: Decision) -> None:
        """Every member, after it adopted the state (newcomers included)."""

    def leave_job(self, rt: Runtime, trigger: str, phase: str) -> int:
        """This rank cannot recover in process (it failed itself, or the membership
        fell back): returns its exit status. Default: :data:`EXIT_FAILURE`."""
        return EXIT_FAILURE

    # ------------------------------------------------------------------ failure
    def on_failure(self, rt: Runtime, trigger: str, phase: str) -> int | None:
        """Agree on the new membership; None: recover in process (the main thread
        re-forms in :meth:`before_redo`), else an exit status (:meth:`leave_job`)."""
        g = self.group
        if threading.current_thread() is threading.main_thread():
            self._main_returned(rt)
        if trigger == "stuck":
            self._post_stuck(rt)
        if g is None or trigger not in PEER_TRIGGERS:
            # not bound (no membership store), or this rank itself fails
            return self.leave_job(rt, trigger, phase)
        main = threading.current_thread() is threading.main_thread()
        m = g.membership(main)
        error = str(rt.failure_info.get("error", "")).lower()
        if trigger == "collective_error" and ("timed out" in error or "timeout" in error):
            trigger = "timeout"  # a peer too late for the collective: name it like a hang
        dec = self._decide(rt, m, g.gen, trigger)
        if dec.fallback is not None or rt.rank not in dec.members:
            return self._leave(rt, dec, trigger, phase)
        if main:
            self.pending = dec
        else:
            # the main thread is blocked in the old generation's collective; it returns
            # with an error once the failed rank is gone, and re-forms then
            _abort_blocked_collective()
            self._expect_main(rt, dec)
        return None

    def leaves_on(self, trigger: str) -> bool:
        """Only this rank's own failures end its process; a peer's is recovered here."""
        return self.group is None or trigger not in PEER_TRIGGERS

    def _expect_main(self, rt: Runtime, dec: Decision) -> None:
        """Bound the main thread's return after a recovery decided on another thread.

        The decision keeps this rank, so its main thread must come back from the
        failed step (its collective errors or is aborted) and re-form. A main
        thread that does not is hung in this rank's own code, not waiting for a
        peer (a hung kernel, I/O, a deadlock before its collective; stress chunk
        20, campaign 96: the last member, hung before its gradient collective,
        had been judged the healthy source). It is bounded by the hang bound, or,
        while it waits in a collective (:func:`_main_waits_in_collective`: a peer
        that leaves may first save), by the larger of that and ``sync_bound_s``.
        Past the bound this rank fails itself (trigger ``stuck``: not a peer's
        failure, so it saves as a failed rank and leaves) and, once that failure
        stands, posts the failure of the generation it never joined
        (:meth:`on_failure`), so that its members start the next round (a
        newcomer waiting for it gives up,
        :meth:`~jitbench.runtime.inprocess.group.InProcessGroup.check`). The
        bound ends when the main thread is back (:meth:`on_failure`,
        :meth:`before_redo`) or has joined ``dec.gen``.
        """
        self._main_returned(rt)
        t0 = time.monotonic()
        g = self.group

        def check() -> dict | None:
            if self._expecting is not check:
                return None
            if getattr(g, "gen", -1) >= dec.gen:  # re-formed: it came back
                self._main_returned(rt)
                return None
            waited = time.monotonic() - t0
            waiting = _main_waits_in_collective(rt)
            bound = (max(rt.config.sync_bound_s, rt.hang_bound_s()) if waiting
                     else rt.hang_bound_s())
            if waited <= bound:
                return None
            self._main_returned(rt)
            reason = (f"its main thread did not return to re-form generation {dec.gen} "
                      f"within {bound:.1f} s of the decision (blocked in its own code, "
                      f"not in a collective)" if not waiting else
                      f"its main thread stayed in a collective for {bound:.1f} s after "
                      f"the decision of generation {dec.gen}")
            return {"trigger": "stuck", "reason": reason, "waited_s": waited,
                    "bound_s": bound, "never_joined": dec.gen}

        self._expecting = check
        rt.add_check(check)

    def _main_returned(self, rt: Runtime) -> None:
        """The main thread is back (or the wait for it ended): stop bounding it."""
        check, self._expecting = self._expecting, None
        if check is not None:
            rt.watchdog.remove_check(check)

    def _post_stuck(self, rt: Runtime) -> None:
        """This rank failed itself as ``stuck`` (:meth:`_expect_main`): post the failure
        of the generation it never joined, so that its members start the next round."""
        gen = rt.failure_info.get("never_joined")
        if self.group is None or gen is None:
            return
        try:
            self.group.membership(False).post_failure(
                int(gen), rt.rank, "hang", f"rank {rt.rank}: {rt.failure_info.get('reason')}")
        except Exception:  # noqa: BLE001 - the store gone: the harness is gone
            pass

    def before_redo(self, rt: Runtime) -> int | None:
        """Re-form and take the source's state; a member failing meanwhile starts the
        next membership round (at most :data:`MAX_REFORMS`)."""
        dec, self.pending = self.pending, None
        self._main_returned(rt)  # the main thread is here: nothing to bound
        if dec is None or self.group is None:
            return None
        for _ in range(MAX_REFORMS):
            error = self._try_reform(rt, dec)
            if error is None:
                return None
            rt.events.emit("failure", trigger="collective_error", in_phase="reform",
                           step=rt.completed, completed=rt.completed, error=error,
                           durable=True)
            dec = self._decide(rt, self.group.members, self.group.gen, "collective_error")
            self._main_returned(rt)  # a watchdog decision meanwhile: this thread is back
            if dec.fallback is not None or rt.rank not in dec.members:
                return self._leave(rt, dec, "collective_error", "reform")
        return self._leave(rt, dec, "collective_error", "reform")

    def _try_reform(self, rt: Runtime, dec: Decision) -> str | None:
        try:
            self._reform(rt, dec)
        except Exception as exc:  # noqa: BLE001 - a member failed during the transfer
            return f"{type(exc).__name__}: {exc}"[:300]
        return None

    def _decide(self, rt: Runtime, m: Membership, gen: int, trigger: str) -> Decision:
        g = self.group
        rt.events.emit("membership", "begin", trigger=trigger, durable=True)
        t0 = time.monotonic()
        if m.failure_posted(gen) is None:
            m.post_failure(gen, rt.rank, trigger, f"rank {rt.rank}: {trigger}")
        g.report(m, gen)
        dec = (m.decide(gen, me=rt.rank) if m.try_lead(gen)
               else m.wait_decision(gen, DECISION_TIMEOUT_S, rank=rt.rank))
        rt.events.emit("membership", "end", new_gen=dec.gen, dead=dec.dead,
                       hung=dec.hung, source=dec.source, resume_step=dec.resume_step,
                       fallback=dec.fallback, decided_s=dec.decided_s,
                       spares=[m_.get("spare") for m_ in dec.members.values()
                               if m_.get("spare") is not None],
                       dur_s=time.monotonic() - t0, durable=True)
        return dec

    def _leave(self, rt: Runtime, dec: Decision, trigger: str, phase: str) -> int:
        if dec.fallback is None and (rt.rank in dec.hung or rt.rank not in dec.members):
            return EXIT_EVICTED  # replaced in process
        # no in-process recovery: the strategy's own way out, then a whole-job restart;
        # a hung member too (stuck before its collective, its state is the boundary's,
        # and it may be the last one holding it: stress chunk 14, campaign 86)
        return self.leave_job(rt, trigger, phase)

    def _reform(self, rt: Runtime, dec: Decision) -> None:
        """Build generation ``dec.gen``'s process group and take the source's state."""
        g = self.group
        rt.events.emit("reform", "begin", new_gen=dec.gen, durable=True)
        t0 = time.monotonic()
        self.release()
        g.leave_process_group()
        g.gen = dec.gen
        g.members.join(dec.gen, g.rank)  # a survivor is a member of the new generation too
        g.init_process_group()
        rt.events.set_base(gen=dec.gen)
        rt.events.emit("reform", "end", dur_s=time.monotonic() - t0, durable=True)
        self.receive(rt, dec, self.source_state(rt, dec) if rt.rank == dec.source else None)
        self.recoveries += 1
        self.rebuild()

    def receive(self, rt: Runtime, dec: Decision, source_state: dict | None = None) -> None:
        """Take part in the transfer of ``dec``'s state (the source passes its
        :meth:`source_state`, every other member None), adopt it, then
        :meth:`after_transfer`. A newcomer calls it after joining ``dec.gen``."""
        from jitbench.runtime.inprocess.transfer import broadcast_state

        receive(rt, self.group, dec, broadcast_state, source_state, kind=self.restored_kind)
        self.after_transfer(rt, dec)


class JitInProcess(InProcessRecovery, JustInTime):
    """In-process JIT recovery (see the module docstring): the survivors resume from
    their current boundary; the JIT checkpoint is the backstop."""

    name = "jit-inprocess"
    snapshot_each_step = True

    def __init__(self, config) -> None:
        super().__init__(config)
        self.backstop_writer: threading.Thread | None = None

    def leave_job(self, rt: Runtime, trigger: str, phase: str) -> int:
        """Save this rank's JIT part and leave, as under ``jit``."""
        return JustInTime.on_failure(self, rt, trigger, phase)

    def after_transfer(self, rt: Runtime, dec: Decision) -> None:
        """The source writes its JIT part of the resumed boundary from a copy, in a thread."""
        if rt.rank != dec.source:
            return
        from jitbench.runtime.staging import stage_for_async_save

        step = rt.completed
        snap = rt.boundary.snapshot
        try:
            state = stage_for_async_save(rt.boundary.assemble(step, snap))
        except Exception as exc:  # noqa: BLE001 - the backstop is best effort
            rt.events.emit("save", "skip", kind="jit", reason=f"staging: {exc}"[:300])
            return

        def write() -> None:
            try:
                rt.write_checkpoint("jit", step, snap, state=state)
            except Exception as exc:  # noqa: BLE001
                rt.events.emit("error", where="backstop", error=repr(exc)[:300])

        if self.backstop_writer is not None:
            self.backstop_writer.join()
        self.backstop_writer = threading.Thread(target=write, name="jit-backstop", daemon=True)
        self.backstop_writer.start()

    def finish(self, rt: Runtime) -> None:
        if self.backstop_writer is not None:
            self.backstop_writer.join(self.config.sync_bound_s)


def receive(rt: Runtime, g: InProcessGroup, dec: Decision, broadcast_state,
            source_state: dict | None, kind: str = "peer") -> None:
    """Take part in the transfer of ``dec``'s state and adopt it (every member, the
    source included: its RNG, scheduler and data position return to that state);
    the restore events carry ``kind`` and the source's ``source`` label."""
    rt.events.emit("transfer", "begin", source=dec.source, durable=True)
    t0 = time.monotonic()
    got, nbytes = broadcast_state(source_state, src=dec.source)
    rt.events.emit("transfer", "end", source=dec.source, bytes=nbytes,
                   dur_s=time.monotonic() - t0, durable=True)
    # the source's own boundary: it may have completed a step since it reported (a
    # hang declared by the watchdog while the collective was only slow)
    rt.adopt(Loaded(got["state"], got["manifest"], int(got["step"]), kind,
                    str(got.get("source") or f"rank {dec.source}")))
    g.joining = False  # a newcomer holds the state now
    opt = rt.boundary.reg.optimizer
    if opt is not None:
        opt.zero_grad(set_to_none=True)
    rt.watchdog.hang.expect_warm_up()  # the newcomer's first step


def _main_waits_in_collective(rt: Runtime) -> bool:
    """Whether the main thread waits in a collective (it returns once the collective's
    failed peer has gone or the collective is aborted): it posted the gradient
    collective of the step it is in (:meth:`Runtime.mark_collective`; the wait is
    then in the autograd engine), or the innermost Python frame of its stack is
    ``torch.distributed``'s or DDP's (a barrier, DDP's buffer broadcast, a
    checkpoint's collective: their waits are in C++ called from there)."""
    import sys

    if rt.posted >= rt.step_in_progress:
        return True
    frame = sys._current_frames().get(threading.main_thread().ident)
    if frame is None:
        return False
    name = frame.f_code.co_filename.replace("\\", "/")
    return "/torch/distributed/" in name or name.endswith("/torch/nn/parallel/distributed.py")


def _consistent(rt: Runtime) -> bool:
    with rt.consistent_state() as why:
        return why is None


def _abort_blocked_collective() -> None:
    """NCCL: abort the default group's communicators so the main thread's blocked
    collective returns with an error (gloo: nothing to do; the evicted rank's exit
    closes the connections). Not yet run on GPUs."""
    try:
        import torch.distributed as dist

        if dist.is_initialized() and dist.get_backend() == "nccl":
            pg = dist.distributed_c10d._get_default_group()
            abort = getattr(pg, "abort", None)
            if abort is not None:
                abort()
    except Exception:  # noqa: BLE001 - best effort; the hang bound still applies
        pass
