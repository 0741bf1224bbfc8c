"""Failure notices between the ranks of one attempt, through the job's store.

A rank that must leave for a reason its peers cannot see in time (a fatal Xid
on its GPU, a checkpoint write that failed while they wait in the checkpoint
barrier) posts a notice; every peer's watchdog polls for notices on each tick
(:meth:`PeerNotices.check`, registered with
:meth:`jitbench.runtime.core.Runtime.set_notices`) and declares the failure at
once, with the leaving rank's reason, instead of waiting for a collective
error or its hang bound. The leaving rank waits (at most ``ack_timeout_s``)
for its peers to acknowledge, so the notice is read before its exit closes
their collectives.

Keys, under the store the caller passes (jitbench passes the agent's TCPStore
wrapped in a ``PrefixStore`` of the attempt, so a restarted attempt starts
clean): ``notice/count`` (a counter: one round trip per poll),
``notice/<rank>`` (JSON: trigger, reason, t_wall) and ``notice/acks``.
Store errors are swallowed (the store lives in the elastic agent; when it is
gone the agent is gone and the rank will be killed anyway).

A poll never holds the watchdog thread for long: :meth:`PeerNotices.check` runs
the store round trip on a helper thread (one per instance) and waits at most ``check_wait_s`` for it;
while one is still in flight (the store is unreachable: a network partition, where
a TCPStore call blocks until the link returns), later polls return at once. Before
this, a partitioned rank's watchdog sat in the poll and neither declared its hang
nor handled the agent's SIGTERM until the link came back (``tests/dist/test_netns.py``).
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any


class PeerNotices:
    """Post and poll failure notices for one rank of one attempt.

    Args:
        store: a ``torch.distributed.Store`` client (use its own connection:
            the watchdog thread polls it while the main thread trains).
        rank: this rank.
        world_size: ranks in the job.
        ack_timeout_s: how long :meth:`post` waits for the peers' acknowledgements (s).
        check_wait_s: how long :meth:`check` waits for its store round trip (s) before
            returning None and leaving it in flight.
    """

    def __init__(self, store: Any, rank: int, world_size: int, ack_timeout_s: float = 2.0,
                 check_wait_s: float = 0.5) -> None:
        self.store = store
        self.rank, self.world_size = rank, world_size
        self.ack_timeout_s = ack_timeout_s
        self.check_wait_s = check_wait_s
        self._posted = False
        self._seen = False
        self.errors = 0
        self._poller: threading.Thread | None = None
        self._want, self._done = threading.Event(), threading.Event()
        self._busy = False
        self._found: dict | None = None
        self._closed = False
        self.stalled = 0
        """Polls that returned while a round trip was still in flight (store unreachable)."""

    def post(self, trigger: str, reason: str, wait: bool = True) -> int:
        """Tell the peers this rank leaves; returns how many acknowledged in time."""
        if self._posted:
            return 0
        self._posted = True
        try:
            self.store.set(f"notice/{self.rank}", json.dumps(
                {"trigger": trigger, "reason": reason, "t_wall": time.time()}))
            self.store.add("notice/count", 1)
        except Exception:  # noqa: BLE001 - see the module docstring
            self.errors += 1
            return 0
        if not wait or self.world_size <= 1:
            return 0
        deadline = time.monotonic() + self.ack_timeout_s
        acks = 0
        while time.monotonic() < deadline:
            try:
                acks = int(self.store.add("notice/acks", 0))
            except Exception:  # noqa: BLE001
                self.errors += 1
                break
            if acks >= self.world_size - 1:
                break
            time.sleep(0.01)
        return acks

    def check(self) -> dict | None:
        """A peer's notice as a failure for the runtime (trigger ``notice``), or None.

        Waits at most ``check_wait_s`` (see the module docstring)."""
        if self._posted or self._seen or self._closed:
            return None
        if self._found is None:
            if self._busy:  # the last round trip has not come back
                self.stalled += 1
                return None
            self.start()
            self._busy = True
            self._done.clear()
            self._want.set()
            self._done.wait(self.check_wait_s)
        found, self._found = self._found, None
        if found is not None:
            self._seen = True
        return found

    def start(self) -> None:
        """Start the poller thread now, not at the first :meth:`check` (idempotent).

        :meth:`jitbench.runtime.core.Runtime.set_notices` calls it, so a rank holds
        exactly one poller per live board from then on, whether or not its watchdog
        has ticked yet: the thread count of a survivor right after an in-process
        recovery equals a newcomer's (``tests/dist/test_inprocess.py``)."""
        if self._poller is None and not self._closed:
            self._poller = threading.Thread(target=self._loop, daemon=True,
                                            name="jitbench-notice-poll")
            self._poller.start()

    def close(self, wait_s: float | None = None) -> None:
        """Stop polling; :meth:`check` returns None from now on (idempotent).

        The poller thread ends once its round trip in flight, if any, returns; this
        waits for that at most ``wait_s`` (default ``check_wait_s``; a store that
        does not answer, as in a network partition, leaves the thread to end later).
        """
        self._closed = True
        self._want.set()
        poller = self._poller
        if poller is not None and poller is not threading.current_thread():
            poller.join(self.check_wait_s if wait_s is None else wait_s)

    def _loop(self) -> None:
        while True:
            self._want.wait()
            self._want.clear()
            if self._closed:
                return
            self._poll()
            self._busy = False
            self._done.set()

    def _poll(self) -> None:
        try:
            if int(self.store.add("notice/count", 0)) <= 0:
                return
            for r in range(self.world_size):
                if r != self.rank and self.store.check([f"notice/{r}"]):
                    info = json.loads(self.store.get(f"notice/{r}"))
                    break
            else:
                return
            self.store.add("notice/acks", 1)
        except Exception:  # noqa: BLE001
            self.errors += 1
            return
        self._found = {"trigger": "notice", "reason": f"rank {r}: {info.get('reason')}",
                       "from_rank": r, "peer_trigger": info.get("trigger")}
