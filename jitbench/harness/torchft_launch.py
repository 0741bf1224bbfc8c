"""Launch a ``torchft`` run: the Lighthouse, then one elastic agent per replica.

::

    harness ── torchft LighthouseServer (127.0.0.1, OS-chosen port)
            ── TCPStore (start barrier, end barrier; loopback, OS-chosen port)
      ├─ agent slot 0 ── torchft_worker (replica group jitbench0)
      └─ agent slot 1 ── torchft_worker (replica group jitbench1)

Each agent is ``python -m torch.distributed.run --standalone --nproc-per-node 1
--max-restarts R``: when its worker dies, the agent starts a new one (as a
cluster scheduler restarts a failed replica group), which joins the next
quorum and heals from a survivor. The Lighthouse is created before the agents
and shut down after every agent has exited (also on errors, timeouts and
interrupts: Ctrl-C or SIGTERM to the harness while an agent runs stops every
agent, whose workers then stop; what was recorded stays; one after every agent
exited by itself stops nothing: ``late_interrupt``). Lighthouse settings:
:data:`MIN_REPLICAS` (survivors may go on alone), :data:`JOIN_TIMEOUT_MS` (how
long a quorum waits for a replica that heartbeats but does not ask: a hung one),
:data:`HEARTBEAT_TIMEOUT_MS` (a replica silent this long is out: a dead one).

Limits: one node (everything binds the loopback address).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from jitbench.harness.launch import (
    LaunchResult,
    die_with_parent,
    interrupts,
    mark_stop,
    poll_turn,
    reap,
    stop_agent,
)
from jitbench.harness.replicas import ENV_MEMBERS, ENV_SLOT, replica_command
from jitbench.harness.spec import RunSpec

TORCHFT_WORKER = "jitbench.harness.torchft_worker"
"""The module each replica group's agent runs."""

MIN_REPLICAS = 1
"""Lighthouse ``min_replicas``: a quorum may hold a single survivor."""
JOIN_TIMEOUT_MS = 1000
"""Lighthouse ``join_timeout_ms``: a quorum waits this long for a live replica that
has not asked to join (ms)."""
HEARTBEAT_TIMEOUT_MS = 1000
"""Lighthouse ``heartbeat_timeout_ms``: a replica silent this long is out (ms)."""
END_WAIT_S = 60.0
"""How long the harness waits for the other agents once one has ended for good (s)."""


def launch_torchft(spec: RunSpec, run_dir: Path,
                   progress: Callable[[dict], None] | None = None,
                   timeout_s: float | None = None) -> LaunchResult:
    """Run a ``torchft`` spec to completion (see the module docstring).

    Returns:
        A :class:`~jitbench.harness.launch.LaunchResult`: ``returncode`` 0 when every
        agent exited 0, else the first non-zero status.

    Raises:
        ImportError: torchft is not installed (the spec's validation refuses this first).
    """
    import torch.distributed as dist

    # the Lighthouse logs every quorum tick at INFO into this process's stderr (the
    # terminal); its level is read once, when torchft's native module sets up logging
    os.environ.setdefault("RUST_LOG", "warn")
    from torchft.coordination import LighthouseServer

    run_dir = Path(run_dir).resolve()
    log_path = run_dir / "agent.log"
    lighthouse = LighthouseServer(bind="127.0.0.1:0", min_replicas=MIN_REPLICAS,
                                  join_timeout_ms=JOIN_TIMEOUT_MS,
                                  heartbeat_timeout_ms=HEARTBEAT_TIMEOUT_MS)
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                          timeout=timedelta(seconds=60))
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", str(spec.threads_per_rank))
    env["PYTHONUNBUFFERED"] = "1"
    env["TORCHFT_LIGHTHOUSE"] = lighthouse.address()
    env[ENV_MEMBERS] = f"127.0.0.1:{store.port}"
    t0 = time.monotonic()
    interrupted = timed_out = False
    procs: list[subprocess.Popen] = []
    ended_at: float | None = None
    # Ctrl-C or SIGTERM to the harness: a flag (launch.interrupts); while an agent runs it
    # stops the run, once every agent has exited by itself it stops nothing (late)
    with interrupts() as sigs:
        try:
            with open(log_path, "ab") as log:
                log.write(f"torchft lighthouse at {lighthouse.address()}\n".encode())
                log.flush()
                try:
                    for slot in range(spec.world_size):
                        procs.append(subprocess.Popen(
                            replica_command(spec, run_dir, TORCHFT_WORKER), stdout=log,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env={**env, ENV_SLOT: str(slot)},
                            start_new_session=True, preexec_fn=die_with_parent))
                    offsets: dict = {}
                    state: dict = {"step": 0, "attempt": 0}
                    while any(p.poll() is None for p in procs):
                        if sigs.count:  # while an agent runs: the run is stopped
                            interrupted = True
                            mark_stop(run_dir, "interrupt")
                            break
                        poll_turn(run_dir, progress, offsets, state)
                        if timeout_s is not None and time.monotonic() - t0 > timeout_s:
                            timed_out = True
                            mark_stop(run_dir, "timeout")
                            break
                        if ended_at is None and any(p.poll() not in (None, 0) for p in procs):
                            ended_at = time.monotonic()  # an agent's restart budget ran out
                            store.set("shutdown", "1")
                        if ended_at is not None and time.monotonic() - ended_at > END_WAIT_S:
                            break
                except KeyboardInterrupt:  # raised by a callback: stop as on Ctrl-C
                    interrupted = True
                    mark_stop(run_dir, "interrupt")
                finally:
                    store.set("shutdown", "1")
                    running = [p for p in procs if p.poll() is None]
                    if running and sigs.count and not (interrupted or timed_out):
                        interrupted = True  # an error in the loop, then a signal
                        mark_stop(run_dir, "interrupt")
                    for p in running:
                        stop_agent(p, None, grace_s=10.0)
                    for p in procs:
                        reap(run_dir, p.pid)
        finally:
            lighthouse.shutdown()
        late = bool(sigs.count) and not interrupted
    codes = [p.wait() for p in procs]
    rc = next((c for c in codes if c != 0), 0)
    return LaunchResult(rc, time.monotonic() - t0, interrupted, log_path, timed_out,
                        late_interrupt=late)
