"""Refuse an agent beyond MAX before it joins a multi-node job's rendezvous.

torch elastic's c10d rendezvous (``torch.distributed.elastic.rendezvous.
dynamic_rendezvous``) admits ``MAX`` nodes (``--nnodes MIN:MAX``, or ``N``). A
node that joins a complete round which already has ``MAX`` participants goes to
the round's *redundancy list*; one that joins a complete round with room goes to
its *wait list* for the next round. jitbench's world size is fixed at MAX nodes
(checkpoints, data shards and the bitwise oracle depend on it), and torch
2.14.1 does not carry a node beyond MAX through a restart: the new round's rank
0 never publishes ``MASTER_ADDR``, and a listed node that missed a round makes
the others re-rendezvous every second (README, "Several nodes").

So before ``jitbench run`` starts its agent, :func:`check_room` reads the
rendezvous state the job's agents share (key ``torch.rendezvous.<run id>`` of
the c10d store at the endpoint: base64 of a pickled ``_RendezvousState``) and
refuses the agent, one line, exit 2, when the nodes that hold or wait for a
place (participants, wait list and redundancy list, each with a heartbeat
younger than torch's keep-alive window) already number MAX. A node whose
heartbeat is older is counted out: its agent is gone, and torch removes it at
the next round.

The check is made when the agent starts: agents started within the same
instant are not told apart (the round decides). No store at the endpoint yet
(the first agent), or no state under the key, means room.
"""

from __future__ import annotations

import base64
import io
import pickle
import socket
from datetime import UTC, datetime, timedelta

from jitbench.errors import SpecError

__all__ = ["KEEP_ALIVE_S", "check_room", "nodes_holding_places", "state_key"]

KEEP_ALIVE_S = 5.0 * 3
"""A node's heartbeat counts this long (s): torch's default ``keep_alive_interval``
(5 s) x ``keep_alive_max_attempt`` (3), ``DynamicRendezvousHandler.from_backend``;
torch declares a node dead after the same window."""
_NULL_SENTINEL = b"Y2FuaW1hZGFt"
"""What ``C10dRendezvousBackend`` writes under the key before any state (its
``_NULL_SENTINEL``)."""
_RDZV_MODULE = "torch.distributed.elastic.rendezvous.dynamic_rendezvous"
_ALLOWED = {(_RDZV_MODULE, "_RendezvousState"), (_RDZV_MODULE, "_NodeDesc"),
            ("datetime", "datetime"), ("datetime", "timezone"), ("datetime", "timedelta"),
            ("builtins", "set"), ("builtins", "frozenset")}


def state_key(run_id: str) -> str:
    """The store key torch's c10d rendezvous backend keeps the state of ``run_id`` under
    (``C10dRendezvousBackend._key``)."""
    return "torch.rendezvous." + run_id


class _StateUnpickler(pickle.Unpickler):
    """Unpickles a rendezvous state and nothing else (the classes in :data:`_ALLOWED`)."""

    def find_class(self, module: str, name: str) -> type:
        if (module, name) not in _ALLOWED:
            raise pickle.UnpicklingError(f"{module}.{name} is not part of a rendezvous state")
        return super().find_class(module, name)


def nodes_holding_places(raw: bytes, now: datetime | None = None,
                         keep_alive_s: float = KEEP_ALIVE_S) -> list[str] | None:
    """The nodes of a stored rendezvous state (``raw``: the store's base64 value) that hold
    or wait for a place, their heartbeat younger than ``keep_alive_s``: participants,
    wait list, redundancy list, as ``"host_pid_local"`` names. None: no state yet (the
    backend's sentinel), or a value that is not a rendezvous state."""
    if raw == _NULL_SENTINEL:
        return None
    try:
        state = _StateUnpickler(io.BytesIO(base64.b64decode(raw))).load()
        nodes = {*state.participants, *state.wait_list,
                 *getattr(state, "redundancy_list", ())}
        beats = state.last_heartbeats
    except Exception:  # noqa: BLE001 - anything unreadable is "no state we know"
        return None
    now = now or datetime.now(UTC)
    window = timedelta(seconds=keep_alive_s)
    return sorted(str(n) for n in nodes if n in beats and now - beats[n] <= window)


def check_room(endpoint: str, run_id: str, max_nodes: int, nnodes_text: str,
               connect_s: float = 5.0, store_s: float = 30.0) -> None:
    """Refuse an agent that would be beyond MAX of the job at ``endpoint`` (``HOST:PORT``)
    with rendezvous id ``run_id`` (see the module docstring).

    Args:
        max_nodes: MAX of ``--nnodes``.
        nnodes_text: ``--nnodes`` as given (for the message).
        connect_s: how long a TCP connection to the endpoint may take (s); nothing
            listening there means room.
        store_s: how long the store that listens may take to answer (s; its agent may
            be starved on a loaded machine); no answer means room.

    Raises:
        SpecError: MAX nodes already hold places, e.g. ``--nnodes 2:3: the rendezvous
            at HOST:PORT already has 3 nodes of at most 3 (...); this agent would wait
            beyond MAX, which torch 2.14.1 cannot carry through a restart; not started``.
    """
    import torch.distributed as dist

    host, _, port = endpoint.rpartition(":")
    try:  # nothing listening (refused at once): no store yet, this is the first agent
        socket.create_connection((host.strip("[]"), int(port)), timeout=connect_s).close()
    except (OSError, ValueError):
        return
    try:  # a store answers: its agent may be busy on a loaded machine, so wait for it
        store = dist.TCPStore(host.strip("[]"), int(port), is_master=False,
                              wait_for_workers=False, timeout=timedelta(seconds=store_s))
    except (RuntimeError, ValueError, OSError):
        return
    key = state_key(run_id)
    try:
        if not store.check([key]):
            return
        held = nodes_holding_places(store.get(key))
    except (RuntimeError, OSError):
        return
    if held is not None and len(held) >= max_nodes:
        raise SpecError(f"--nnodes {nnodes_text}: the rendezvous at {endpoint} (id {run_id}) "
                        f"already has {len(held)} nodes of at most {max_nodes} "
                        f"({', '.join(held)}); this agent would wait beyond MAX, which "
                        f"torch 2.14.1 cannot carry through a restart; not started (a node "
                        f"whose agent ended counts for {KEEP_ALIVE_S:g} s after its last "
                        f"heartbeat: a replacement may retry after that)")
