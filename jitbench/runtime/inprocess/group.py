"""One process's place in an in-process-recovering job: generation, rank, process group.

:class:`InProcessGroup` connects to the job's membership store (the harness
starts it; ``host:port``), joins generation 0 as a rank or waits as a spare,
builds each generation's process group on its own store prefix, and watches
for failures its peers post (:meth:`InProcessGroup.check`, polled by the
runtime's watchdog: it writes this rank's report, and ends the process when
the leader evicted it as the hung rank).

Two store clients: one for the main thread (re-forming, transfer set-up) and
one for the watchdog thread, since a ``TCPStore`` client is one connection.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch.distributed as dist

from jitbench.runtime.inprocess.membership import Assignment, Decision, Membership, Report

__all__ = ["InProcessGroup", "SHUTDOWN_KEY", "DONE_KEY"]

SHUTDOWN_KEY = "shutdown"
"""Set by the harness when the job is over: waiting spares exit 0."""
DONE_KEY = "done"
"""Counter: ranks of the last generation that finished training."""
REFORM_TIMEOUT_S = 60.0
"""Process-group set-up and collective timeout of a re-formed generation (s)."""


class InProcessGroup:
    """Membership, rank and process group of this process.

    Args:
        address: ``host:port`` of the membership store.
        world_size: ranks per generation.
        backend: ``gloo`` or ``nccl``.
        pg_timeout_s: process-group timeout (s); generous, it bounds set-up too.
        report_window_s: how long a leader waits for the members' reports (s).
        spare_wait_s: how long a leader waits for a spare to register (s).

    Raises:
        RuntimeError: the store cannot be reached (torch's message).
    """

    def __init__(self, address: str, world_size: int, backend: str, pg_timeout_s: float,
                 report_window_s: float = 1.0, spare_wait_s: float = 120.0) -> None:
        self.address = address
        """``host:port`` of the membership store."""
        self.world_size = world_size
        self.backend = backend
        self.pg_timeout_s = pg_timeout_s
        self.store = self.client()
        self.members = Membership(self.store, world_size, report_window_s, spare_wait_s)
        self._watch = Membership(self.client(), world_size, report_window_s, spare_wait_s)
        self.gen = 0
        self.rank = -1
        self.spare_id: int | None = None
        self.joining = False
        """A newcomer between its assignment and the end of the state transfer: it
        holds no state, and a failure posted in its generation means the members it
        waits for will not all come (:meth:`check` then ends it)."""
        self._reported: set[int] = set()
        self.state_ok: Callable[[], bool] = lambda: True
        self.completed: Callable[[], int] = lambda: 0
        self.posted: Callable[[], int] = lambda: 0
        self.stuck: Callable[[], bool] = lambda: False

    def client(self) -> Any:
        """A new client of the membership store (one connection: one per thread).

        Raises:
            RuntimeError: the store cannot be reached (torch's message).
        """
        host, _, port = self.address.rpartition(":")
        return dist.TCPStore(host, int(port), is_master=False, wait_for_workers=False,
                             timeout=timedelta(seconds=max(60.0, self.pg_timeout_s)))

    def membership(self, main_thread: bool) -> Membership:
        """The membership client of the calling thread (main or watchdog)."""
        return self.members if main_thread else self._watch

    # -- joining ---------------------------------------------------------------------------
    def join_initial(self, rank: int) -> None:
        """Join generation 0 as ``rank`` (a process started for that slot)."""
        self.gen, self.rank = 0, rank
        self.members.join(0, rank)

    def wait_as_spare(self, prefer_rank: int | None = None, poll_s: float = 0.02,
                      on_lost: Callable[[int, int, float, Decision], None] | None = None
                      ) -> Assignment | None:
        """Enter the spare pool and block until assigned; None when the job is over.

        While waiting it watches for a generation whose members are all gone
        (:meth:`Membership.lead_if_lost`); when it leads that failure it calls
        ``on_lost(gen, attempt, t_wall, decision)`` (``attempt``: the whole-job
        restarts before it, ``t_wall``: when the loss was found, s since the epoch)
        and then claims a rank of the restarted generation like every spare.
        """
        self.spare_id = self.members.register_spare(prefer_rank)
        while True:
            got = self.members.wait_assignment(self.spare_id, timeout_s=poll_s * 10)
            if got is not None:
                # a newcomer to a running generation holds no state until the transfer
                self.joining = not got.fresh
                self.gen, self.rank = got.gen, got.rank
                self.members.join(got.gen, got.rank, spare=None if got.fresh else self.spare_id)
                return got
            if self.members._has(SHUTDOWN_KEY):
                return None
            attempt, t_wall = self.members._add("restarts", 0), time.time()
            dec = self.members.lead_if_lost(DONE_KEY)
            if dec is not None and on_lost is not None:
                on_lost(dec.gen - 1, attempt, t_wall, dec)
            time.sleep(poll_s)

    def init_process_group(self) -> None:
        """Build this generation's default process group on its own store prefix.

        Generation 0 waits up to ``pg_timeout_s`` for its members (they start
        together, cold); a re-formed generation up to ``REFORM_TIMEOUT_S``: its
        members are up and waiting, so a missing one has died, and the error
        starts the next membership round instead of a long wait.
        """
        timeout = self.pg_timeout_s if self.gen == 0 else min(self.pg_timeout_s,
                                                              REFORM_TIMEOUT_S)
        # the default group's name, and so its keys under the prefix, come from a
        # per-process count of groups created; a failed set-up leaves it one ahead of a
        # newcomer's, so every member starts the generation from zero
        dist.distributed_c10d._world.group_count = 0
        dist.init_process_group(
            self.backend, store=dist.PrefixStore(Membership.pg_prefix(self.gen), self.store),
            rank=self.rank, world_size=self.world_size, timeout=timedelta(seconds=timeout))

    def leave_process_group(self) -> None:
        """Destroy the current default process group, if any, and collect garbage: its
        connections close only when nothing refers to it any more, and a peer still
        blocked in its collective returns (with an error) only then."""
        import gc

        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:  # noqa: BLE001 - a broken group is gone either way
                pass
        gc.collect()

    def finished(self) -> None:
        """This rank finished training (the harness counts ``done``)."""
        self.members._add(DONE_KEY, 1)

    # -- watching --------------------------------------------------------------------------
    def report(self, m: Membership, gen: int) -> None:
        """Write this rank's report for ``gen``'s failure (once per generation)."""
        if gen in self._reported:
            return
        self._reported.add(gen)
        m.report(gen, Report(rank=self.rank, pid=os.getpid(), host=_host(),
                             step_done=(self.completed() if self.state_ok()
                                        and not self.joining else -1),
                             posted=self.posted(), stuck=self.stuck()))

    def check(self) -> dict | None:
        """Watchdog check: report when a peer posted a failure; leave when evicted."""
        gen = self.gen
        if self.rank < 0:
            return None
        try:
            posted = self._watch.failure_posted(gen)
            if posted is None:
                return None
            if self.joining:
                # blocked in the new generation's set-up or transfer with nothing to
                # offer; leaving ends that wait (a member it waits for may never come:
                # one that stayed stuck in its own code, stress chunk 20), and the
                # next round counts it dead (no report: a reporter is kept as a
                # member) and replaces it like any failed member
                return {"trigger": "join_failed", "save": False,
                        "reason": f"generation {gen} failed while this newcomer joined "
                                  f"it: {posted.get('reason', '')}"[:300]}
            self.report(self._watch, gen)
            if self._watch.evicted(gen, self.rank):
                return {"trigger": "evicted", "save": False,
                        "reason": f"evicted as a hung rank in generation {gen}"}
        except Exception:  # noqa: BLE001 - the store gone means the harness is gone
            return None
        return None


def _host() -> str:
    import socket

    return socket.gethostname()
