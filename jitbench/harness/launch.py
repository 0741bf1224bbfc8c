"""Launch a run through PyTorch's elastic agent (``torch.distributed.run``).

The harness starts the agent as a child process in its own session::

    python -m torch.distributed.run --standalone --nproc-per-node N
        --max-restarts R --monitor-interval 0.1 -m jitbench.harness.worker RUN_DIR

``--standalone`` lets the agent's c10d rendezvous store bind a port the OS
picks (``localhost:0``), so parallel runs never collide. For several nodes,
the spec carries ``rdzv_endpoint`` and ``nnodes``, every node runs the same
spec with the run directory on a shared filesystem, and the worker runs
unchanged. The agent restarts the whole worker group when one worker fails
and SIGTERMs the survivors first (torch docs, "torchrun (Elastic Launch)").

While the agent runs, the harness follows rank 0's event file to drive a
progress callback. Ctrl-C or SIGTERM to the harness is passed to the agent as
SIGTERM (it stops every worker); what was recorded stays on disk.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from jitbench.harness.spec import RunSpec


@dataclass
class LaunchResult:
    """How the agent ended."""

    returncode: int
    """The agent's exit status (0: every worker of the last attempt succeeded)."""
    wall_s: float
    """Wall time of the agent process (s)."""
    interrupted: bool = False
    """The harness was interrupted (Ctrl-C/SIGTERM) and stopped the agent."""
    log_path: Path | None = None


def agent_command(spec: RunSpec, run_dir: Path) -> list[str]:
    """The ``torch.distributed.run`` command line for a run (this node's agent)."""
    cmd = [sys.executable, "-m", "torch.distributed.run"]
    if spec.rdzv_endpoint:
        cmd += ["--nnodes", str(spec.nnodes), "--rdzv-backend", "c10d",
                "--rdzv-endpoint", spec.rdzv_endpoint, "--rdzv-id",
                f"{spec.rdzv_id}-{run_dir.name}"]
    else:
        cmd += ["--standalone", "--nnodes", "1"]
    cmd += ["--nproc-per-node", str(spec.nproc), "--max-restarts", str(spec.max_restarts),
            "--monitor-interval", "0.1", "-m", "jitbench.harness.worker", str(run_dir)]
    return cmd


def _rank0_progress(events_dir: Path, offsets: dict, state: dict) -> None:
    for f in sorted(events_dir.glob("attempt*_rank00000.jsonl")):
        try:
            with open(f, "rb") as fh:
                fh.seek(offsets.get(f, 0))
                data = fh.read()
        except OSError:
            continue
        end = data.rfind(b"\n")
        if end < 0:
            continue
        offsets[f] = offsets.get(f, 0) + end + 1
        for line in data[:end].splitlines():
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if ev["event"] == "step" and ev["phase"] == "end":
                state["step"] = ev["step"]
                state["loss"] = ev.get("loss")
            elif ev["event"] in ("fault", "failure", "restore"):
                state["last"] = ev["event"]
            state["attempt"] = ev["attempt"]


def launch(spec: RunSpec, run_dir: Path, progress: Callable[[dict], None] | None = None,
           timeout_s: float | None = None) -> LaunchResult:
    """Run the spec (already written to ``run_dir/spec.json``) to completion.

    Args:
        spec: the validated run spec.
        run_dir: the run directory.
        progress: called about 10 times a second with ``{"step", "loss", "attempt"}``.
        timeout_s: stop the agent after this long (the run then counts as failed).

    Returns:
        A :class:`LaunchResult`; the agent's output is in ``run_dir/agent.log``.
    """
    log_path = run_dir / "agent.log"
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", str(spec.threads_per_rank))
    env["PYTHONUNBUFFERED"] = "1"
    t0 = time.monotonic()
    interrupted = False
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(agent_command(spec, run_dir), stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        offsets: dict = {}
        state: dict = {"step": 0, "attempt": 0}
        prev_term = signal.getsignal(signal.SIGTERM)

        def _on_term(signum, frame):
            raise KeyboardInterrupt

        try:
            signal.signal(signal.SIGTERM, _on_term)
        except ValueError:
            prev_term = None
        try:
            while proc.poll() is None:
                time.sleep(0.1)
                if progress is not None:
                    _rank0_progress(run_dir / "events", offsets, state)
                    progress(dict(state))
                if timeout_s is not None and time.monotonic() - t0 > timeout_s:
                    interrupted = True
                    stop_agent(proc)
                    break
        except KeyboardInterrupt:
            interrupted = True
            stop_agent(proc)
        finally:
            if prev_term is not None:
                signal.signal(signal.SIGTERM, prev_term)
        if progress is not None:
            _rank0_progress(run_dir / "events", offsets, state)
            progress(dict(state))
    return LaunchResult(proc.wait(), time.monotonic() - t0, interrupted, log_path)


def stop_agent(proc: subprocess.Popen, grace_s: float = 40.0) -> None:
    """SIGTERM the agent (it stops its workers), then SIGKILL its whole session."""
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
