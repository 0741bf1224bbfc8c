"""Peer ``torchft``: torchft's per-step replica healing (torchft 0.2.0).

How torchft recovers (torchft's ``Manager``, ``torchft.ddp``, ``torchft.optim``;
read from the installed sources), as run here:

- **One replica group per rank.** Each jitbench rank is a torchft replica group
  of one process, started by its own elastic agent (``--nproc-per-node 1``),
  with replica id ``jitbench<rank>`` (torchft derives its global rank from the
  trailing digits). The harness starts torchft's Lighthouse
  (``torchft.coordination.LighthouseServer``, loopback, OS-chosen port) before
  the agents and shuts it down after them (:mod:`jitbench.harness.torchft_launch`).
- **A quorum per step.** ``OptimizerWrapper.zero_grad`` asks the Lighthouse for
  the step's quorum (synchronously here: ``use_async_quorum=False``, so a
  healing replica has its state before its forward pass). A replica that
  stopped heartbeating for ``heartbeat_timeout_ms`` is out; one that
  heartbeats but does not ask (a hung replica) is waited for
  ``join_timeout_ms``, then left out. On a new quorum every replica
  reconfigures its ``ProcessGroupGloo`` (a fresh gloo group on the primary's
  store under ``torchft/<quorum_id>``).
- **Gradients** go through ``torchft.ddp.DistributedDataParallel``, whose comm
  hook calls ``Manager.allreduce`` (sum, then divided by the number of
  participating replicas): with fewer replicas the average is over fewer
  batches, so a run that lost a replica for some steps is not bitwise the
  fault-free run.
- **Errors.** A collective that fails (a peer died: "Connection closed by
  peer"; a hung peer: the gloo timeout, the Manager's ``timeout``) is reported
  to the Manager and the step is not committed (``should_commit`` False on
  every replica of the quorum): the optimizer does not step and the step is
  run again with the next quorum and the same batch. On gloo, torchft 0.2.0
  does not always swallow the error: the survivor's ``backward()`` can raise
  out of DDP's reducer when the peer dies inside the gradient all-reduce.
  What torchft's users must do then, the worker does: report the error
  (``Manager.report_error``), drop the DDP wrapper (its reducer is left
  mid-bucket) and build a new one around the same module (:func:`wrap_model`).
- **Healing.** A replacement process (its agent restarts it, as a cluster
  scheduler would) joins the next quorum with step 0; torchft marks it for
  recovery and a survivor sends its live state (``state_dict`` callbacks
  below: model, optimizer, LR scheduler, torch RNG) over torchft's
  ``HTTPTransport``; the replacement loads it and continues at the survivors'
  step. No checkpoint file is written or read.

What it promises (``replay_ok``): survivors never execute a committed step
twice, and the replacement joins at the survivors' step with their state
(equal parameters at every step after it joins). The data of a lost replica
during the degraded steps is not trained on; ``sample_stream_equal`` and
``state_equal`` say so, with ``max_abs_diff`` and the loss difference.

Not expressible under torchft (refused up front, registry
``unsupported_faults``): storage faults (no checkpoint files),
``nccl-timeout`` (torchft's all-reduce takes the Manager's timeout, not a
per-operation one), ``desync`` (jitbench's extra collective on torchft's
process group would break its quorum bookkeeping, not the training), ``xid``
(the GPU health check is the jitbench runtime's, which torchft does not run).

A hung replica (``nccl-hang``): torchft's collective timeout frees the
survivors from the all-reduce, but the hung process keeps heartbeating (the
Manager's heartbeat is a native thread), and the Lighthouse forms a quorum
only with more than half of the heartbeating replicas (its split-brain rule,
``quorum_compute`` in torchft's ``src/lighthouse.rs``); with two replica
groups the survivor therefore waits until the hung process is gone, with
three or more the survivors go on after ``join_timeout_ms``. torchft has no
detector for a replica stuck inside its own step. The harness plays the
cluster scheduler's liveness probe: a worker whose step has run for
:data:`LIVENESS_S` (waiting for a quorum does not count) ends itself (exit
status :data:`EXIT_STUCK`) and its agent starts a replacement.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from jitbench.runtime.strategies.base import Strategy

__all__ = ["EXIT_STUCK", "LIVENESS_S", "TorchFT", "make_manager", "wrap_model"]

EXIT_STUCK = 79
"""Exit status of a torchft worker ended by the liveness probe (no progress)."""
LIVENESS_S = 6.0
"""The scheduler's liveness bound for a torchft replica (s): a step (forward,
backward, all-reduce, commit; not the quorum wait) running this long ends the
process. Above the collective timeout (``hang_floor_s``, 2 s by default) so that a
survivor freed by that timeout is never taken for a hung replica."""


class TorchFT(Strategy):
    """Registry class of ``torchft``. The jitbench runtime's step loop does not run
    under torchft (the Manager owns quorum, commit and healing); the worker
    (:mod:`jitbench.harness.torchft_worker`) uses :func:`make_manager` and
    :func:`wrap_model`. Hooks keep their defaults."""

    name = "torchft"


def make_manager(*, replica_id: str, lighthouse: str, timeout_s: float,
                 state_dict: Any, load_state_dict: Any,
                 quorum_timeout_s: float = 60.0) -> Any:
    """A torchft ``Manager`` for a replica group of one process on gloo.

    Args:
        replica_id: e.g. ``jitbench1`` (torchft reads the trailing digits as the
            replica's index).
        lighthouse: the Lighthouse address (``http://host:port``).
        timeout_s: torchft's timeout for collectives, ``should_commit`` and the
            checkpoint transfer (s); also the gloo group's timeout, so a hung peer
            frees the survivors after this long.
        state_dict: ``() -> dict``, the live state a survivor sends to a healing replica.
        load_state_dict: ``(dict) -> None``, applied by a healing replica.
        quorum_timeout_s: how long a quorum request may wait (s).

    Needs ``MASTER_ADDR``/``MASTER_PORT`` (the replica's own agent store).

    Raises:
        ImportError: torchft is not installed (``pip install -e '.[peers]'``).
    """
    from torchft import Manager
    from torchft.process_group import ProcessGroupGloo

    t = timedelta(seconds=timeout_s)
    return Manager(pg=ProcessGroupGloo(timeout=t), load_state_dict=load_state_dict,
                   state_dict=state_dict, min_replica_size=1, use_async_quorum=False,
                   timeout=t, quorum_timeout=timedelta(seconds=quorum_timeout_s),
                   connect_timeout=timedelta(seconds=60), rank=0, world_size=1,
                   replica_id=replica_id, lighthouse_addr=lighthouse, hostname="127.0.0.1",
                   init_sync=False)


def wrap_model(manager: Any, module: Any, before_allreduce: Any = None) -> Any:
    """``torchft.ddp.DistributedDataParallel`` around ``module``; build a new one
    after a ``backward()`` that raised (the old reducer is left mid-bucket).

    Args:
        manager: the replica's torchft ``Manager``.
        module: the model (shared by every wrapper built around it).
        before_allreduce: ``f(bucket)`` called in torchft's comm hook before each
            bucket's all-reduce (the ``collective`` fault injection point).
    """
    from torchft.ddp import DistributedDataParallel

    class _Injected(DistributedDataParallel):
        @staticmethod
        def _comm_hook(state, bucket):
            if before_allreduce is not None:
                before_allreduce(bucket)
            return DistributedDataParallel._comm_hook(state, bucket)

    return _Injected(manager, module)
