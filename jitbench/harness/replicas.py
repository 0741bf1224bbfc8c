"""Launch a ``jit-inprocess`` run: one elastic agent per replica, spares waiting.

Whole-job restart (``launch``) runs one agent for the world; the agent stops
every worker when one fails. In-process recovery keeps the healthy workers,
so each replica gets its own agent, as torchft runs one ``torchrun`` per
replica group::

    harness ── TCPStore (membership: generations, reports, spares; loopback, OS-chosen port)
      ├─ agent slot 0 ── worker (rank 0 of generation 0)
      ├─ agent slot 1 ── worker (rank 1 of generation 0)
      └─ agent slot N ── worker (spare: imports done, workload built, waiting)

Every agent is ``python -m torch.distributed.run --standalone --nproc-per-node
1 --max-restarts R``: when its worker dies the agent starts a new one, which
joins the spare pool (``TORCHELASTIC_RESTART_COUNT`` > 0). The workers learn
the membership store from ``JITBENCH_MEMBERS`` (``host:port``) and their slot
from ``JITBENCH_SLOT``: slots below the world size are the ranks of
generation 0, the others start as spares. The job is done when every rank of
the last generation has finished (``done`` reaches the world size): the
harness then sets ``shutdown``, the spares exit 0 and so do their agents.

Limits: one node (the membership store binds the loopback address).
"""

from __future__ import annotations

import os
import subprocess
import sys
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
    torchrun_args,
)
from jitbench.harness.spec import RunSpec

ENV_MEMBERS = "JITBENCH_MEMBERS"
"""``host:port`` of the membership store (set by the harness for every agent)."""
ENV_SLOT = "JITBENCH_SLOT"
"""The agent's slot: below the world size, the rank it starts as; else a spare."""
SHUTDOWN_GRACE_S = 30.0
"""How long spares and their agents get to exit after the job finished (s)."""


def replica_command(spec: RunSpec, run_dir: Path,
                    worker: str = "jitbench.harness.worker") -> list[str]:
    """The ``torch.distributed.run`` command line of one replica's (or spare's) agent,
    running the module ``worker`` (one process, its own standalone rendezvous)."""
    return [sys.executable, "-m", "torch.distributed.run",
            *torchrun_args(1, 1, spec.max_restarts, run_dir), "-m", worker, str(run_dir)]


def launch_replicas(spec: RunSpec, run_dir: Path, progress: Callable[[dict], None] | None = None,
                    timeout_s: float | None = None) -> LaunchResult:
    """Run a ``jit-inprocess`` spec to completion (see the module docstring).

    Returns:
        A :class:`~jitbench.harness.launch.LaunchResult` whose ``returncode``
        is 0 when every rank of the last generation finished, else the first
        non-zero exit status of an agent.
    """
    import torch.distributed as dist

    run_dir = Path(run_dir).resolve()
    log_path = run_dir / "agent.log"
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                          timeout=timedelta(seconds=60))
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", str(spec.threads_per_rank))
    env["PYTHONUNBUFFERED"] = "1"
    env[ENV_MEMBERS] = f"127.0.0.1:{store.port}"
    if spec.backend == "nccl":
        env.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    slots = spec.world_size + spec.hot_spares
    t0 = time.monotonic()
    interrupted = timed_out = False
    procs: list[subprocess.Popen] = []
    finished_at: float | None = None
    # Ctrl-C or SIGTERM to the harness: a flag (launch.interrupts); before the job has
    # finished it stops the run, after (spares exiting) or once every agent has exited
    # it stops nothing that was measured (late)
    with interrupts() as sigs, open(log_path, "ab") as log:
        try:
            for slot in range(slots):
                procs.append(subprocess.Popen(
                    replica_command(spec, run_dir), stdout=log, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, env={**env, ENV_SLOT: str(slot)},
                    start_new_session=True, preexec_fn=die_with_parent))
            offsets: dict = {}
            state: dict = {"step": 0, "attempt": 0}
            while any(p.poll() is None for p in procs):
                if sigs.count:
                    if finished_at is None:  # the job still trains: it is stopped
                        interrupted = True
                        mark_stop(run_dir, "interrupt")
                    break
                poll_turn(run_dir, progress, offsets, state)
                if finished_at is None and int(store.add("done", 0)) >= spec.world_size:
                    store.set("shutdown", "1")
                    finished_at = time.monotonic()
                if finished_at is not None and time.monotonic() - finished_at > SHUTDOWN_GRACE_S:
                    break
                if timeout_s is not None and time.monotonic() - t0 > timeout_s:
                    timed_out = True
                    mark_stop(run_dir, "timeout")
                    break
                if finished_at is None and _job_lost(procs, spec):
                    store.set("shutdown", "1")
                    break
        except KeyboardInterrupt:  # raised by a callback: stop as on Ctrl-C
            interrupted = True
            mark_stop(run_dir, "interrupt")
        finally:
            running = [p for p in procs if p.poll() is None]
            if (running and sigs.count and finished_at is None
                    and not (interrupted or timed_out)):
                interrupted = True  # an error in the loop, then a signal
                mark_stop(run_dir, "interrupt")
            for p in running:
                stop_agent(p, None, grace_s=SHUTDOWN_GRACE_S if not finished_at else 5.0)
            for p in procs:
                reap(run_dir, p.pid)
        late = bool(sigs.count) and not interrupted
    done = int(store.add("done", 0)) >= spec.world_size
    codes = [p.wait() for p in procs]
    rc = 0 if done else next((c for c in codes if c != 0), 1)
    return LaunchResult(rc, time.monotonic() - t0, interrupted, log_path, timed_out,
                        late_interrupt=late)


def _job_lost(procs: list[subprocess.Popen], spec: RunSpec) -> bool:
    """Too few agents are left alive to hold a world (their restart budgets ran out)."""
    alive = sum(p.poll() is None for p in procs)
    return alive < spec.world_size
