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
progress callback. Ctrl-C or SIGTERM to the harness is a flag the poll loop reads
(:func:`interrupts`): one that arrives while the agent runs is passed to the agent
as SIGTERM (it stops every worker, which save a JIT checkpoint on the way out;
``interrupted``), and what was recorded stays on disk; one that arrives once the
agent has exited by itself stops nothing (``late_interrupt``: the launch's records
are whole), nor does one that arrives once every rank has finished training and
exited 0 while the agent is still shutting down (:func:`training_finished`: the
agent gets :data:`FINISHED_GRACE_S` to exit by itself). Further signals during a
stop are recorded, never raised.

No process outlives a launch: the agent is started with
``prctl(PR_SET_PDEATHSIG, SIGTERM)`` (it stops its workers if the harness
dies), so are the workers (torch starts them in sessions of their own, so a
SIGKILLed agent would leave them running), and after the agent has exited the
harness SIGKILLs any process of its own agent still alive (:func:`reap`: the
agent and the workers it started, found by the run directory on their
command line and the agent's pid recorded by each worker; the other nodes
of a multi-node job sharing the run directory are left alone).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from jitbench import hang
from jitbench.harness.spec import RunSpec

if TYPE_CHECKING:
    from jitbench.harness.script import ScriptSpec


@dataclass
class LaunchResult:
    """How the agent ended."""

    returncode: int
    """The agent's exit status (0: every worker of the last attempt succeeded; also 0
    for an agent the harness stopped after :data:`FINISHED_GRACE_S` once a late
    interrupt found every rank finished, :func:`training_finished`)."""
    wall_s: float
    """Wall time of the agent process (s)."""
    interrupted: bool = False
    """The harness was interrupted (Ctrl-C/SIGTERM) and stopped the agent."""
    log_path: Path | None = None
    timed_out: bool = False
    """The launch ran past ``timeout_s`` and the harness stopped the agent."""
    stopped: bool = False
    """A worker reported what no restart fixes (a launched script's own error, a script
    that is not a training script) and the harness stopped the agent."""
    late_interrupt: bool = False
    """Ctrl-C or SIGTERM arrived once the launch's training had ended by itself: the
    agent had exited (the harness was reaping it, or reading its last progress), or
    every rank had finished and exited 0 while the agent shut down
    (:func:`training_finished`). Nothing was stopped mid-training, the launch is whole
    and not ``interrupted``; the caller stops after recording it."""


FT_LAUNCHER = "nvidia_resiliency_ext.fault_tolerance.launcher"
"""NVRx's ``ft_launcher`` module (a fork of torchrun with rank monitors)."""
FT_CHECK_INTERVAL_S = 0.25
"""How often NVRx's rank monitors check their rank (``--ft-workload-check-interval``, s)."""


def ft_launcher_args(spec: RunSpec) -> list[str]:
    """``ft_launcher`` options of a ``nvrx`` run: heartbeat timeouts from the spec's hang
    settings (first heartbeat :func:`jitbench.hang.first_bound_s`, then
    ``hang_floor_s``; for ``nvrx-sections`` the ``step`` section's timeout
    ``hang_floor_s`` and the out-of-section timeout the same first-step bound), SIGTERM for a
    rank that misses one, restart policy ``any-failed``; NIC monitoring off (no NICs to
    watch on CPU)."""
    from jitbench.runtime.strategies import parse

    first = hang.first_bound_s(spec.hang_first_s, spec.hang_floor_s)
    if parse(spec.strategy).name == "nvrx-sections":  # a timeout per step section instead
        detect = ["--ft-rank-section-timeouts", f"step:{spec.hang_floor_s}",
                  "--ft-rank-out-of-section-timeout", str(first)]
    else:
        detect = ["--ft-initial-rank-heartbeat-timeout", str(first),
                  "--ft-rank-heartbeat-timeout", str(spec.hang_floor_s)]
    return detect + [
            "--ft-workload-check-interval", str(FT_CHECK_INTERVAL_S),
            "--ft-rank-termination-signal", "SIGTERM", "--ft-restart-policy", "any-failed",
            "--ft-enable-nic-monitor", "false", "--ft-log-level", "INFO"]


AGENT_LOGS = "agent_logs"
"""Folder of a run directory that holds the elastic agents' own log directories (the
workers' error files per attempt). Without ``--log-dir`` every agent makes a
``torchelastic_*`` directory in the system temp directory and leaves it there."""


def torchrun_args(nproc: int, nnodes: int | str, max_restarts: int, run_dir: Path,
                  rdzv_endpoint: str | None = None, rdzv_id: str = "jitbench",
                  rdzv_timeout_s: float | None = None) -> list[str]:
    """The options of ``torch.distributed.run`` (torchrun) for one node's agent:
    ``--standalone`` (a c10d rendezvous on a port the OS picks) for one node, else
    the c10d rendezvous at ``rdzv_endpoint`` with the id ``RDZV_ID-RUN_DIR_NAME`` and
    ``--nnodes`` as given (``N`` or torch elastic's ``MIN:MAX`` range);
    ``nproc`` workers per node, the restart budget, a 0.1 s monitor interval and the
    agent's log directory inside the run directory (:data:`AGENT_LOGS`). Through
    ``--rdzv-conf``: ``is_host=true`` on the node that owns the endpoint's address
    (:func:`hosts_endpoint`) and ``join_timeout`` (s) with ``rdzv_timeout_s``; with an
    IP endpoint every agent gets ``--local-addr``, its own address toward the endpoint
    (:func:`local_addr`)."""
    if rdzv_endpoint:
        out = ["--nnodes", str(nnodes), "--rdzv-backend", "c10d",
               "--rdzv-endpoint", rdzv_endpoint, "--rdzv-id", rdzv_run_id(rdzv_id, run_dir)]
        conf = ["is_host=true"] if hosts_endpoint(rdzv_endpoint) else []
        if rdzv_timeout_s is not None:
            conf.append(f"join_timeout={max(1, round(rdzv_timeout_s))}")
        if conf:
            out += ["--rdzv-conf", ",".join(conf)]
        local = local_addr(rdzv_endpoint)
        if local:
            out += ["--local-addr", local]
    else:
        out = ["--standalone", "--nnodes", "1"]
    return out + ["--nproc-per-node", str(nproc), "--max-restarts", str(max_restarts),
                  "--monitor-interval", "0.1", "--log-dir", str(run_dir / AGENT_LOGS)]


def rdzv_run_id(rdzv_id: str, run_dir: Path) -> str:
    """The rendezvous id of a multi-node run: ``RDZV_ID-RUN_DIR_NAME``, the name of the
    resolved run directory (``.`` or a link name gives the directory's own name); every
    node shares the run directory, so every agent of the job gives the same id."""
    return f"{rdzv_id}-{Path(run_dir).resolve().name}"


def check_agent_room(spec: RunSpec | ScriptSpec, run_dir: Path) -> None:
    """Refuse, before anything is written, an agent that would join the multi-node job
    at ``spec.rdzv_endpoint`` beyond MAX nodes (``spec.nnodes``;
    :func:`jitbench.harness.rendezvous.check_room`). Nothing to check for one node, or
    on the node that hosts the endpoint's store (its agent creates the store).

    Raises:
        SpecError: MAX nodes already hold places in the rendezvous.
    """
    if not spec.rdzv_endpoint or hosts_endpoint(spec.rdzv_endpoint):
        return
    from jitbench.harness.rendezvous import check_room
    from jitbench.harness.spec import nnodes_range

    check_room(spec.rdzv_endpoint, rdzv_run_id(spec.rdzv_id, run_dir), spec.nnodes,
               nnodes_range(spec.min_nodes, spec.nnodes))


def hosts_endpoint(rdzv_endpoint: str) -> bool:
    """Whether this node must host the c10d rendezvous store at ``HOST:PORT``: ``HOST``
    is an IP address (not loopback) that this network namespace owns (a socket can be
    bound to it).

    torch's own guess (``_matches_machine_hostname`` in
    ``torch.distributed.elastic.rendezvous.utils``) compares ``HOST`` with the addresses
    the machine's hostname resolves to; it misses an address of a secondary interface
    (a second NIC, a namespaced node of :mod:`jitbench.harness.netns`, where every node
    has the same hostname), and then no agent hosts the store and every agent waits
    for it until its timeout. Loopback and names are left to torch (on loopback every
    local agent may host, and torch falls back to a client when the port is taken).
    """
    import socket

    ip = _endpoint_ip(rdzv_endpoint)
    if ip is None:
        return False
    try:
        with socket.socket(ip[1], socket.SOCK_STREAM) as s:
            s.bind((ip[0], 0))
    except OSError:
        return False
    return True


def _endpoint_ip(rdzv_endpoint: str) -> tuple[str, int, str] | None:
    """``(host, socket family, port)`` of a ``HOST:PORT`` endpoint whose host is an IP
    address other than loopback or unspecified; None for a name or such an address."""
    import ipaddress
    import socket

    host, _, port = rdzv_endpoint.rpartition(":")
    host = host.strip("[]")
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return None
    if addr.is_loopback or addr.is_unspecified:
        return None
    return host, socket.AF_INET6 if addr.version == 6 else socket.AF_INET, port


def local_addr(rdzv_endpoint: str) -> str | None:
    """This node's address toward the rendezvous endpoint (the source address the kernel
    picks for it: a UDP socket connected there, no packet sent), for torchrun's
    ``--local-addr``; None for a name, a loopback address or no route.

    Without it, torch names each node by its FQDN (``socket.getfqdn()``), and the
    workers' store (``MASTER_ADDR``) is node 0's FQDN: on namespaced nodes (one
    hostname, resolving to the machine's own interface) or a multi-homed host that
    is an address the other nodes cannot reach, and the workers wait in
    ``init_process_group`` until its timeout.
    """
    import socket

    ip = _endpoint_ip(rdzv_endpoint)
    if ip is None:
        return None
    host, family, port = ip
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect((host, int(port or 9)))
            return s.getsockname()[0]
    except (OSError, ValueError):
        return None


def agent_command(spec: RunSpec, run_dir: Path) -> list[str]:
    """The launcher command line for a run (this node's agent): ``torch.distributed.run``,
    or NVRx's ``ft_launcher`` where the strategy's registry entry says so."""
    from jitbench.runtime.strategies import parse

    ft = parse(spec.strategy).entry.launcher == "ft_launcher"
    cmd = [sys.executable, "-m", FT_LAUNCHER if ft else "torch.distributed.run"]
    cmd += torchrun_args(spec.nproc, spec.nnodes_range, spec.max_restarts, run_dir,
                         spec.rdzv_endpoint, spec.rdzv_id, spec.rdzv_timeout_s)
    if ft:
        cmd += ft_launcher_args(spec)
    return cmd + ["-m", "jitbench.harness.worker", str(run_dir)]


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
                if ev["event"] == "restore" and isinstance(ev.get("step"), int):
                    state["step"] = ev["step"]  # a resume at the last step trains none
            state["attempt"] = ev["attempt"]


def poll_turn(run_dir: Path, progress: Callable[[dict], None] | None, offsets: dict,
              state: dict, wait_s: float = 0.1) -> None:
    """One turn of a launcher's poll loop: wait ``wait_s`` (s), then give ``progress``
    (when there is one) rank 0's progress so far (``state``: ``{"step", "loss",
    "attempt"}``, read from its event files past ``offsets``)."""
    time.sleep(wait_s)
    if progress is not None:
        _rank0_progress(run_dir / "events", offsets, state)
        progress(dict(state))


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Ask Linux to send ``sig`` to this process when its parent dies
    (``prctl(PR_SET_PDEATHSIG)``); exit at once if the parent is already gone.

    The agent's workers run in sessions of their own, so a SIGKILLed agent
    would leave them running; with this they get SIGTERM, save (JIT) and exit.
    A no-op off Linux.
    """
    if not sys.platform.startswith("linux"):
        return
    ppid = os.getppid()
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(sig), 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        return
    if os.getppid() != ppid:  # the parent died before prctl took effect
        os.kill(os.getpid(), sig)


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

    The strategy's registry entry picks the launcher: ``agent`` and ``ft_launcher``
    run here (one agent for the world: torchrun or NVRx's ft_launcher),
    ``torchft`` runs :func:`jitbench.harness.torchft_launch.launch_torchft`,
    ``replicas`` :func:`jitbench.harness.replicas.launch_replicas`.
    """
    from jitbench.runtime.strategies import parse

    launcher = parse(spec.strategy).entry.launcher
    if launcher == "torchft":
        from jitbench.harness.torchft_launch import launch_torchft

        return launch_torchft(spec, run_dir, progress, timeout_s)
    if launcher == "replicas":
        from jitbench.harness.replicas import launch_replicas

        return launch_replicas(spec, run_dir, progress, timeout_s)
    run_dir = Path(run_dir).resolve()  # workers are found by this exact argument
    env = {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", str(spec.threads_per_rank))}
    if spec.backend == "nccl":
        # deterministic cuBLAS (PyTorch docs, "Reproducibility"), which the bitwise
        # state_equal oracle needs with torch.use_deterministic_algorithms
        env["CUBLAS_WORKSPACE_CONFIG"] = os.environ.get("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    return launch_agent(agent_command(spec, run_dir), run_dir, env, progress, timeout_s)


def launch_agent(cmd: list[str], run_dir: Path, env_extra: dict[str, str] | None = None,
                 progress: Callable[[dict], None] | None = None,
                 timeout_s: float | None = None,
                 stop: Callable[[], bool] | None = None) -> LaunchResult:
    """Run one agent command line (:func:`agent_command`, or a launched script's) to
    its end, its output appended to ``run_dir/agent.log``.

    Args:
        cmd: the agent's command line; its workers carry ``run_dir`` (absolute) and a
            module of :data:`_LAUNCHED` on their command lines (:func:`run_processes`).
        run_dir: the run directory (absolute).
        env_extra: variables set for the agent on top of this process's environment
            (``PYTHONUNBUFFERED=1`` always).
        progress: called about 10 times a second with ``{"step", "loss", "attempt"}``.
        timeout_s: stop the agent after this long (``timed_out``).
        stop: polled about 10 times a second; True stops the agent (``stopped``): a
            worker reported something no restart can fix.

    Ctrl-C and SIGTERM are read from :func:`interrupts` (the caller's scope, else one
    of its own): one recorded while the agent runs, or before it started in the same
    scope, stops the agent (``interrupted``, :func:`mark_stop`); one that arrives once
    the agent has exited by itself stops nothing (``late_interrupt``). Nor does one
    that finds the training finished (:func:`training_finished`: every rank's
    ``done`` and ``exit`` 0) while the agent is still shutting down (it takes 1-3 s
    after its workers exit): the agent gets :data:`FINISHED_GRACE_S` to exit by itself
    (timeouts and ``stop`` no longer apply), else it is stopped with no stop mark and
    the launch still counts as exit 0 (its workers all succeeded); ``late_interrupt``
    either way.
    """
    log_path = run_dir / "agent.log"
    env = {**os.environ, **(env_extra or {}), "PYTHONUNBUFFERED": "1"}
    t0 = time.monotonic()
    interrupted = timed_out = stopped = forced = False
    finished_at: float | None = None  # when a signal found the training finished
    with interrupts() as sigs, open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True,
                                preexec_fn=die_with_parent)
        offsets: dict = {}
        state: dict = {"step": 0, "attempt": 0}
        try:
            while proc.poll() is None:  # once it has exited, a signal stops nothing
                if sigs.count and finished_at is None:  # Ctrl-C or SIGTERM while it runs
                    if not training_finished(run_dir):
                        interrupted = True
                        mark_stop(run_dir, "interrupt")
                        stop_agent(proc, run_dir)
                        break
                    finished_at = time.monotonic()  # the agent is only shutting down
                if finished_at is not None:
                    if time.monotonic() - finished_at > FINISHED_GRACE_S:
                        forced = True
                        log.write(f"[jitbench] every rank had finished, but the agent did "
                                  f"not exit within {FINISHED_GRACE_S:g} s of Ctrl-C or "
                                  f"SIGTERM: stopped\n".encode())
                        log.flush()
                        stop_agent(proc, run_dir)
                        break
                    poll_turn(run_dir, progress, offsets, state)
                    continue
                poll_turn(run_dir, progress, offsets, state)
                if timeout_s is not None and time.monotonic() - t0 > timeout_s:
                    timed_out = True
                elif stop is not None and stop():
                    stopped = True
                if timed_out or stopped:
                    if timed_out:
                        mark_stop(run_dir, "timeout")
                    stop_agent(proc, run_dir)
                    break
        except KeyboardInterrupt:  # raised by a callback: stop as on Ctrl-C
            interrupted = finished_at is None
            if interrupted:
                mark_stop(run_dir, "interrupt")
            stop_agent(proc, run_dir)
        finally:
            if proc.poll() is None:  # an error in the loop itself: never leave it running
                if sigs.count and finished_at is None:
                    interrupted = True
                    mark_stop(run_dir, "interrupt")
                stop_agent(proc, run_dir)
            reap(run_dir, proc.pid)
        poll_turn(run_dir, progress, offsets, state, 0.0)  # the last of it
        late = bool(sigs.count) and not interrupted
    code = proc.wait()
    return LaunchResult(0 if forced else code, time.monotonic() - t0, interrupted, log_path,
                        timed_out, stopped, late)


FINISHED_GRACE_S = 30.0
"""How long (s) :func:`launch_agent` lets an agent whose ranks have all finished
(:func:`training_finished`) shut down by itself after Ctrl-C or SIGTERM before it
stops it (without a stop mark: the training was complete)."""


def training_finished(run_dir: Path) -> bool:
    """Whether every rank of the launch in ``run_dir`` has finished training: in the
    newest attempt of its event files, each rank of the world (the ``world_size`` of
    its ``process`` events) recorded ``done`` and ``exit`` with code 0, what the
    workers write last (rank 0 has written ``final/state.pt`` by then). False with no
    events or no ``process`` event to size the world."""
    from jitbench.runtime.events import read_events

    d = Path(run_dir) / "events"
    if not d.is_dir():
        return False
    evs = read_events(d)
    if not evs:
        return False
    last = max(e["attempt"] for e in evs)
    evs = [e for e in evs if e["attempt"] == last]
    world = max((e.get("world_size") or 0 for e in evs if e["event"] == "process"), default=0)
    if not world:
        return False
    done = {e["rank"] for e in evs if e["event"] == "done"}
    exited = {e["rank"] for e in evs if e["event"] == "exit" and e.get("code") == 0
              and e["rank"] in done}
    return exited >= set(range(world))


STOP_FILE = "harness_stop.json"
"""File of a run (or reference) directory that records when the harness stopped its
launch (``--timeout-s`` ran out, Ctrl-C or SIGTERM): ``{"why", "t_wall", "t_mono"}``
(s; ``time.time()`` and ``time.monotonic()``, the clocks of the events). Failures the
workers declare after it are the stop's, not a detection
(:func:`jitbench.phases.harness_stop`)."""


def mark_stop(run_dir: Path | None, why: str) -> None:
    """Record, before the harness stops a launch, that and when it does
    (:data:`STOP_FILE`; ``why``: ``timeout`` or ``interrupt``). The first mark of a
    launch stands; best effort (an unwritable directory loses only the mark)."""
    if run_dir is None:
        return
    path = Path(run_dir) / STOP_FILE
    if path.exists():
        return
    with contextlib.suppress(OSError):
        path.write_text(json.dumps({"why": why, "t_wall": time.time(),
                                    "t_mono": time.monotonic()}))


@dataclass
class Interrupts:
    """The Ctrl-C (SIGINT) and SIGTERM that arrived inside :func:`interrupts`."""

    got: list[tuple[int, float]] = field(default_factory=list)
    """``(signal number, time.monotonic())`` of each, in order of arrival."""

    @property
    def count(self) -> int:
        """How many arrived so far."""
        return len(self.got)

    def record(self, signum: int) -> None:
        """Note that ``signum`` arrived (now)."""
        self.got.append((signum, time.monotonic()))


_ACTIVE: list[Interrupts] = []
"""The scope of :func:`interrupts` the main thread is in (at most one)."""


@contextlib.contextmanager
def interrupts() -> Iterator[Interrupts]:
    """Turn Ctrl-C (SIGINT) and SIGTERM inside the block into a flag: each is recorded
    (:class:`Interrupts`: what arrived and when), none raises, and the poll loops of
    the launchers read it (:func:`launch_agent`: a signal while an agent runs stops it;
    one after it exited is a ``late_interrupt``). The caller decides what a recorded
    signal means once the block's work is done (:func:`jitbench.harness.run.run`: the
    summary is written either way).

    Inside an enclosing block it yields the enclosing one's record (one scope for a
    run, its reference and their summary); in a non-main thread (signals cannot be
    handled there) it does nothing and records nothing. The previous handlers are
    back after the block.
    """
    if threading.current_thread() is not threading.main_thread():
        yield Interrupts()
        return
    if _ACTIVE:
        yield _ACTIVE[-1]
        return
    sigs = Interrupts()
    prev = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in prev:
        signal.signal(s, lambda signum, frame: sigs.record(signum))
    _ACTIVE.append(sigs)
    try:
        yield sigs
    finally:
        _ACTIVE.remove(sigs)
        for s, h in prev.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)


@contextlib.contextmanager
def held_signals(reraise: bool = True) -> Iterator[list[int]]:
    """Hold SIGINT and SIGTERM back inside the block (cleanup must finish).

    Yields the list of signals that arrived; after the block, one that
    arrived is raised as :class:`KeyboardInterrupt` if ``reraise``. In a
    non-main thread (signals cannot be handled there) it does nothing. Inside
    :func:`interrupts` each is recorded there too.
    """
    got: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield got
        return
    outer = _ACTIVE[-1] if _ACTIVE else None

    def hold(signum, frame) -> None:
        got.append(signum)
        if outer is not None:
            outer.record(signum)

    prev = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in prev:
        signal.signal(s, hold)
    try:
        yield got
    finally:
        for s, h in prev.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)
    if got and reraise:
        raise KeyboardInterrupt


def stop_agent(proc: subprocess.Popen, run_dir: Path | None = None, grace_s: float = 40.0) -> None:
    """SIGTERM the agent (it stops its workers), then SIGKILL its session and
    any process of the run still alive (:func:`reap`)."""
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
        if run_dir is not None:
            reap(run_dir, proc.pid)


_LAUNCHED = ("torch.distributed.run", "jitbench.harness.worker", FT_LAUNCHER,
             "jitbench.harness.torchft_worker", "jitbench.harness.boot")
"""Module names on the command lines of the processes a launch starts."""


def run_processes(run_dir: str | Path) -> list[tuple[int, list[str]]]:
    """Live agent and worker processes (pid, argv) of the run in ``run_dir``.

    Reads ``/proc/<pid>/cmdline`` (Linux): the agent and every worker of a run
    carry its absolute run directory and their module name (``-m
    torch.distributed.run`` / ``-m jitbench.harness.worker``); a process that
    merely mentions the directory (the harness, a wrapper) is not one of them.
    Zombies (exited, not yet reaped) count as gone.
    """
    target = str(Path(run_dir).resolve())
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            argv = (d / "cmdline").read_bytes().split(b"\0")
            stat = (d / "stat").read_text()
        except OSError:
            continue
        if stat.rsplit(")", 1)[-1].split()[0] == "Z":
            continue
        args = [a.decode(errors="replace") for a in argv if a]
        if target in args and any(m in args for m in _LAUNCHED):
            out.append((int(d.name), args))
    return out


def _ppid(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def reap(run_dir: str | Path, agent_pid: int | None = None, grace_s: float = 5.0) -> list[int]:
    """SIGTERM, then SIGKILL, the processes still running for ``run_dir``; returns their pids.

    With ``agent_pid``, only that agent and the workers it started (their
    parent now, or the ``ppid`` their ``process`` event recorded): other nodes'
    agents sharing the run directory are not this harness's to stop.
    """
    from jitbench.runtime.events import read_events

    def mine() -> list[int]:
        procs = run_processes(run_dir)
        if agent_pid is None:
            return [p for p, _ in procs]
        started = {e["pid"] for e in read_events(Path(run_dir) / "events")
                   if e["event"] == "process" and e.get("ppid") == agent_pid} \
            if (Path(run_dir) / "events").is_dir() else set()
        return [p for p, _ in procs if p == agent_pid or p in started or _ppid(p) == agent_pid]

    pids = mine()
    if not pids:
        return []
    for p in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and set(mine()) & set(pids):
        time.sleep(0.1)
    for p in set(mine()) & set(pids):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p, signal.SIGKILL)
    return pids
