"""The attempt-keyed store every worker builds its process group on.

The elastic agent restarts the whole worker group on the same TCPStore
(``MASTER_ADDR``/``MASTER_PORT``), so keys written by a failed attempt are
still there when the next one starts; a process group built on the bare store
could read a peer address left by the previous attempt. Wrapping the store in
a ``PrefixStore`` keyed by the attempt (``TORCHELASTIC_RESTART_COUNT``) keeps
the attempts apart (README, "Known traps").
"""

from __future__ import annotations

import os
from datetime import timedelta

import torch.distributed as dist

__all__ = ["attempt_store"]


def attempt_store(attempt: int, timeout_s: float, client: bool = False) -> dist.Store:
    """A ``PrefixStore("jitbench/attemptNNN")`` over the agent's TCPStore.

    Args:
        attempt: the restart count (``TORCHELASTIC_RESTART_COUNT``).
        timeout_s: the store's timeout for ``get``/``wait`` (s).
        client: always connect as a client (a second connection, e.g. for the
            peers' failure notices); otherwise rank 0 hosts the store unless the
            agent's store is used (``TORCHELASTIC_USE_AGENT_STORE``).

    Raises:
        KeyError: ``MASTER_ADDR``/``MASTER_PORT``/``RANK`` unset (not started by an agent).
    """
    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "False") == "True"
    is_master = not client and not agent_store and int(os.environ["RANK"]) == 0
    base = dist.TCPStore(host, port, is_master=is_master, timeout=timedelta(seconds=timeout_s),
                         wait_for_workers=False)
    return dist.PrefixStore(f"jitbench/attempt{attempt}", base)
