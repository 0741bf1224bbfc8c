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
"""

from __future__ import annotations

import json
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
    """

    def __init__(self, store: Any, rank: int, world_size: int, ack_timeout_s: float = 2.0) -> None:
        self.store = store
        self.rank, self.world_size = rank, world_size
        self.ack_timeout_s = ack_timeout_s
        self._posted = False
        self._seen = False
        self.errors = 0

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
        """A peer's notice as a failure for the runtime (trigger ``notice``), or None."""
        if self._posted or self._seen:
            return None
        try:
            if int(self.store.add("notice/count", 0)) <= 0:
                return None
            for r in range(self.world_size):
                if r != self.rank and self.store.check([f"notice/{r}"]):
                    info = json.loads(self.store.get(f"notice/{r}"))
                    break
            else:
                return None
            self._seen = True
            self.store.add("notice/acks", 1)
        except Exception:  # noqa: BLE001
            self.errors += 1
            return None
        return {"trigger": "notice", "reason": f"rank {r}: {info.get('reason')}",
                "from_rank": r, "peer_trigger": info.get("trigger")}
