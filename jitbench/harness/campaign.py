"""Random fault campaigns and the invariants every recovered run must keep.

A *campaign* is one run of a small workload with several faults (kind, rank,
step, injection point) drawn at random, checked against the fault-free run
of the same spec. The invariants (issue 5, "Nothing lost"):

- ``completed``: every rank finished the last step;
- ``state``: the final state (model, optimizer moments and step counts, LR
  scheduler, grad scaler, every RNG stream, data position) is bitwise the
  reference's (``max_abs_diff == 0``);
- ``stream``: per rank, the executed sample ids, micro-batch indices and
  start-of-step RNG digests are the reference's, except one replayed
  minibatch per failure (``periodic:N``: at most N; ``periodic-async:N``: at
  most 2N - 1, :func:`max_replay`; ``none``: all), with no step skipped unless a
  peer completed it (:func:`metrics.stream_violations`);
- ``replay``: every failure replayed exactly the steps since the newest
  committed checkpoint (the summary's ``replay_ok``, from the checkpoint
  directory), within :func:`max_replay`; JIT restores a JIT part;
- ``faults``: every planned fault fired exactly once; each attempt in which
  faults fired caused exactly one restart (two faults share an attempt only
  on different ranks at most one step apart: a rank that fails inside step k
  may already have sent its gradient of step k, so a peer meets the fault of
  step k + 1 before the agent stops it); the milestones of each recovery come
  in order (fault, failure, save, restart, restore, step; the closing step
  may be missing when the next fault hits the step right after the restore);
- ``orphans`` / ``ports``: afterwards no process of the run is alive and no
  socket of it listens (the agent's store port included);
- ``bound``: the run ended within its time bound.

:func:`check` returns the violations as lines (empty: the run kept every
invariant); :func:`recheck` checks a finished run again, from what it left in its
run directory, with this checkout's metrics (after a fix to a metric or to the
checker, the runs already made are judged again without running them again). Property tests draw campaigns with hypothesis; :func:`random_campaign`
draws one from a seeded :class:`random.Random` for use without it.

Fault kinds come from :data:`CAMPAIGN_KINDS`, overridable with the
environment variable ``JITBENCH_CAMPAIGN_KINDS`` (comma-separated names of
:data:`jitbench.faults.FAULTS`), so a new recoverable kind joins the
campaigns by name.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass, field
from pathlib import Path

from jitbench.faults import FAULTS, FaultSpec
from jitbench.harness import metrics
from jitbench.harness.launch import run_processes
from jitbench.harness.spec import RunSpec, Strategy
from jitbench.runtime.events import read_events

CAMPAIGN_KINDS: tuple[str, ...] = ("kill", "nccl-hang", "term", "segfault", "exception", "exit")
"""Fault kinds drawn by default: each makes one failure of the job that JIT recovers
from with at most one replayed minibatch, needs no parameters, and may fire at the
gradient collective or before any micro-batch."""


BOUND_BASE_S, BOUND_PER_FAULT_S = 90.0, 60.0
"""A campaign run must end within ``BOUND_BASE_S + BOUND_PER_FAULT_S x faults``
seconds (:func:`run_bound_s`): the sizes of the campaigns of
``tests/dist/test_campaigns.py`` (tiny GPT, 2 ranks, up to 12 steps) on 2 shared
cores, with room for one hang detection per fault."""


def run_bound_s(n_faults: int) -> float:
    """The time bound (s) of a campaign run with ``n_faults`` faults (the ``bound``
    invariant): ``BOUND_BASE_S + BOUND_PER_FAULT_S * n_faults``."""
    return BOUND_BASE_S + BOUND_PER_FAULT_S * n_faults


def campaign_kinds() -> tuple[str, ...]:
    """The kinds campaigns draw from (``$JITBENCH_CAMPAIGN_KINDS`` or :data:`CAMPAIGN_KINDS`).

    Raises:
        ValueError: a name that is not a registered fault.
    """
    env = os.environ.get("JITBENCH_CAMPAIGN_KINDS", "")
    kinds = tuple(k.strip() for k in env.split(",") if k.strip()) or CAMPAIGN_KINDS
    unknown = [k for k in kinds if k not in FAULTS]
    if unknown:
        raise ValueError(f"unknown campaign fault kind(s) {unknown}; one of {sorted(FAULTS)}")
    return kinds


def injection_points(grad_accum: int) -> list[str]:
    """Points a campaign fault may fire at: the gradient collective, and with
    accumulation the start of each micro-batch (``micro:0`` is the window
    boundary, ``micro:m`` for ``m > 0`` is mid-window)."""
    return ["collective"] + ([f"micro:{m}" for m in range(grad_accum)] if grad_accum > 1 else [])


@dataclass
class Campaign:
    """Faults for one run; every fault hits a distinct step (a step's failure
    always leaves a survivor to save)."""

    faults: list[FaultSpec] = field(default_factory=list)
    strategy: str = "jit"

    def describe(self) -> str:
        return f"{self.strategy}: " + ", ".join(
            f"{f.kind}@rank{f.rank}:step{f.step}" + (f"/{f.params['at']}" if f.params.get("at")
                                                     else "") for f in self.faults)

    def apply(self, base: RunSpec) -> RunSpec:
        """``base`` with this campaign's faults, strategy and a restart budget for them."""
        d = RunSpec.from_dict(json.loads(base.to_json()))
        d.faults = [FaultSpec(f.kind, f.rank, f.step, params=dict(f.params)) for f in self.faults]
        d.strategy = self.strategy
        d.max_restarts = max(base.max_restarts, len(self.faults) + 1)
        return d


def random_campaign(rng: random.Random, steps: int, nproc: int = 2, grad_accum: int = 1,
                    max_faults: int = 3, strategies: tuple[str, ...] = ("jit",)) -> Campaign:
    """Draw a campaign: 1..``max_faults`` faults at distinct steps in 1..steps-1."""
    kinds = campaign_kinds()
    n = rng.randint(1, min(max_faults, steps - 1))
    points = injection_points(grad_accum)
    faults = []
    for step in sorted(rng.sample(range(1, steps), n)):
        at = rng.choice(points)
        faults.append(FaultSpec(rng.choice(kinds), rng.randrange(nproc), step,
                                params={} if at == "collective" else {"at": at}))
    return Campaign(faults, rng.choice(strategies))


def max_replay(strategy: str, steps: int) -> int:
    """Replayed steps allowed per failure, the strategy's registered replay bound
    (:data:`jitbench.runtime.strategies.REGISTRY`): 1 (jit), N (periodic:N, inmem:N),
    2N - 1 (periodic-async:N: a failure may find the newest save still writing, and
    restore the one before it), all (none)."""
    st = Strategy.parse(strategy)
    return {"one": 1, "interval": st.interval, "interval-async": 2 * st.interval - 1,
            "all": steps}[st.entry.replay_bound]


def failure_bound(strategy: str, steps: int, restored_kind: str | None) -> int:
    """Replayed steps allowed for one failure: :func:`max_replay`, except an ``inmem:N``
    recovery that did not come from memory (no in-memory copy survived: a restart from
    the newest disk checkpoint, every M copies, or from step 0), which replays the steps
    since that checkpoint (the summary's ``replay_ok`` checks the exact count), at most
    the run's ``steps``."""
    if Strategy.parse(strategy).name == "inmem" and restored_kind != "memory":
        return steps
    return max_replay(strategy, steps)


def listening_sockets() -> dict[int, set[str]]:
    """``{port: {socket inode, ...}}`` of TCP sockets in LISTEN state (IPv4 and IPv6)."""
    out: dict[int, set[str]] = {}
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(name).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 9 and f[3] == "0A":
                out.setdefault(int(f[1].rsplit(":", 1)[1], 16), set()).add(f[9])
    return out


def socket_owners(inodes: set[str]) -> list[tuple[int, list[str]]]:
    """Processes (pid, argv) holding one of the socket inodes."""
    targets = {f"socket:[{i}]" for i in inodes}
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            links = {os.readlink(fd) for fd in (d / "fd").iterdir()}
            argv = [a.decode(errors="replace") for a in (d / "cmdline").read_bytes().split(b"\0")
                    if a]
        except OSError:
            continue
        if links & targets:
            out.append((int(d.name), argv))
    return out


def leaked_ports(run_dir: str | Path) -> list[str]:
    """Store ports of the run's attempts that a process of this run still listens on."""
    run_dir = Path(run_dir).resolve()
    ports = {int(e["master_port"]) for e in read_events(run_dir / "events")
             if e["event"] == "process" and e.get("master_port")}
    listening = listening_sockets()
    out = []
    for port in sorted(ports & set(listening)):
        mine = [p for p, argv in socket_owners(listening[port]) if str(run_dir) in argv]
        if mine:
            out.append(f"port {port} still listened on by pid(s) {mine}")
    return out


def in_process(strategy: str) -> bool:
    """The strategy recovers without restarting the survivors (registry launcher ``replicas``)."""
    return Strategy.parse(strategy).entry.launcher == "replicas"


def expected_order(strategy: str, n_failures: int) -> list[str]:
    """Recovery milestones :func:`metrics.event_order` must return."""
    if in_process(strategy):
        return ["fault", "failure", "reform", "transfer", "restore", "step"] * n_failures
    one = ["fault", "failure", "save", "restart", "restore", "step"]
    if Strategy.parse(strategy).name != "jit":
        one.remove("save")
    return one * n_failures


def milestones_ok(order: list[str], strategy: str, evs: list[dict]) -> bool:
    """``order`` (:func:`metrics.event_order`) is one recovery per attempt in
    which faults fired, each ``fault, failure, [save,] restart, restore, step``.
    The closing ``step`` (a step completed after the restore) may be missing
    when the next attempt's first fault hits the very step after the restored
    one: that attempt fails before any step completes (seen in the stress
    campaigns: ``term@1:6`` restored at step 6, ``exit@1:7``)."""
    if in_process(strategy):
        return _in_process_milestones_ok(order, evs)
    attempts = sorted({int(e.get("attempt", 0)) for e in evs if e["event"] == "fault"})
    first_fault = {}
    restored: dict[int, int] = {}
    for e in evs:
        a = int(e.get("attempt", 0))
        if e["event"] == "fault":
            first_fault[a] = min(first_fault.get(a, e["step"]), e["step"])
        elif e["event"] == "restore" and e.get("phase") == "end":
            restored[a] = max(restored.get(a, 0), int(e.get("step") or 0))
    body = expected_order(strategy, 1)[:-1]
    pos = 0
    for j, a in enumerate(attempts):
        nxt = attempts[j + 1] if j + 1 < len(attempts) else None
        optional = nxt == a + 1 and first_fault[nxt] <= restored.get(nxt, 0) + 1
        if order[pos:pos + len(body)] != body:
            return False
        pos += len(body)
        if pos < len(order) and order[pos] == "step":
            pos += 1
        elif not optional:
            return False
    return pos == len(order)


def _in_process_milestones_ok(order: list[str], evs: list[dict]) -> bool:
    """One recovery per generation a fault fired in: ``fault, failure, [save,]`` then
    ``reform, transfer, restore, step`` in process, or, where no replica survived
    (the decision fell back), ``restart, restore[, step]`` from the JIT checkpoint. The
    ``save`` is a failed rank's own JIT part (an exception or SIGTERM in its step)."""
    def unit(e: dict) -> tuple[int, int]:
        return int(e.get("attempt", 0)), int(e.get("gen") or 0)

    units = sorted({unit(e) for e in evs if e["event"] == "fault"})
    first_fault = {u: min(e["step"] for e in evs if e["event"] == "fault" and unit(e) == u)
                   for u in units}
    restored = {u: max((int(e.get("step") or 0) for e in evs if e["event"] == "restore"
                        and e.get("phase") == "end" and unit(e) == u), default=0)
                for u in units}
    pos = n = 0
    while pos < len(order):
        if order[pos:pos + 2] != ["fault", "failure"]:
            return False
        pos += 2 + (order[pos + 2:pos + 3] == ["save"])
        if order[pos:pos + 3] == ["reform", "transfer", "restore"]:
            pos += 3
        elif order[pos:pos + 2] == ["restart", "restore"]:
            pos += 2
        else:
            return False
        n += 1
        if order[pos:pos + 1] == ["step"]:
            pos += 1
        elif not (n < len(units) and first_fault[units[n]] <= restored[units[n]] + 1):
            # only the next fault hitting the very step after the restored one may
            # come before any step completes
            return False
    return n == len(units)


def _coincident_fault_violations(evs: list[dict]) -> list[str]:
    """Faults that fired in one attempt (one generation, in process) are one failure of
    the job only when the later ones hit other ranks at most one step after the first:
    a rank that failed inside step k may already have sent its gradient of step k (the
    collective runs in the backend's thread), so its peers finish step k and
    meet a fault planned for step k + 1 before the agent stops them. Anything
    further apart means a fault did not fail the job."""
    by_unit: dict[tuple[int, int], list[dict]] = {}  # attempt, generation (in process)
    for e in evs:
        if e["event"] == "fault":
            by_unit.setdefault((int(e.get("attempt", 0)), int(e.get("gen") or 0)),
                               []).append(e)
    v = []
    for (attempt, gen), fs in sorted(by_unit.items()):
        fs.sort(key=lambda e: e["t_mono"])
        first = fs[0]
        where = f"attempt {attempt}" + (f" generation {gen}" if gen else "")
        for later in fs[1:]:
            if later["rank"] == first["rank"] or not 0 <= later["step"] - first["step"] <= 1:
                v.append(f"faults: {later['fault_id']} fired in {where} after "
                         f"{first['fault_id']} without a failure between them")
    return v


def check(summary: dict, spec: RunSpec, run_dir: str | Path, reference_dir: str | Path,
          bound_s: float) -> list[str]:
    """Every invariant of the module docstring; returns one line per violation."""
    run_dir = Path(run_dir)
    v: list[str] = []
    if not summary.get("completed"):
        v.append(f"completed: the run did not complete (agent exit {summary.get('agent_exit')}, "
                 f"{summary.get('attempts')} attempts)")
    if summary.get("timed_out") or (summary.get("wall_s") or 0) > bound_s:
        v.append(f"bound: the run took {summary.get('wall_s', 0):.1f} s, bound {bound_s:.0f} s")
    if summary.get("completed"):
        if summary.get("state_equal") is not True or summary.get("max_abs_diff") != 0.0:
            v.append(f"state: final state differs from the reference "
                     f"(max_abs_diff {summary.get('max_abs_diff')})")
        worst = max([failure_bound(spec.strategy, spec.steps, f.get("restored_kind"))
                     for f in summary.get("failures", [])],
                    default=max_replay(spec.strategy, spec.steps))
        v += ["stream: " + x for x in metrics.stream_violations(
            run_dir, reference_dir, spec.steps, worst)]
    if summary.get("replay_ok") is False:  # the truth from the committed checkpoints
        v.append(f"replay: replayed {summary.get('replayed_steps')} steps, the newest "
                 f"committed checkpoints give {summary.get('expected_replayed_steps')}")
    for f in summary.get("failures", []):
        allowed = failure_bound(spec.strategy, spec.steps, f.get("restored_kind"))
        if f.get("replayed_steps") is None or f["replayed_steps"] > allowed:
            v.append(f"replay: failure at step {f['fault_step']} replayed "
                     f"{f.get('replayed_steps')} steps (allowed {allowed})")
        # in process: from a replica, unless no replica survived (the JIT backstop)
        want = "peer" if in_process(spec.strategy) and f.get("in_process") else "jit"
        if Strategy.parse(spec.strategy).name.startswith("jit") and \
                f.get("restored_kind") != want:
            v.append(f"replay: failure at step {f['fault_step']} restored "
                     f"{f.get('restored_kind')!r}, not {want}")
    evs = read_events(run_dir / "events")
    fired = sorted(e["fault_id"] for e in evs if e["event"] == "fault")
    planned = sorted(f.id for f in spec.faults)
    if fired != planned:
        v.append(f"faults: fired {fired}, planned {planned}")
    v += _coincident_fault_violations(evs)
    if summary.get("completed"):
        failed = len({(e.get("attempt"), e.get("gen") or 0) for e in evs
                      if e["event"] == "fault"})
        fallbacks = sum(1 for f in summary.get("failures", []) if not f.get("in_process"))
        attempts = 1 + fallbacks if in_process(spec.strategy) else failed + 1
        if summary.get("num_failures") != failed or summary.get("attempts") != attempts:
            v.append(f"faults: {summary.get('num_failures')} failures in "
                     f"{summary.get('attempts')} attempts for {len(planned)} faults "
                     f"fired in {failed} attempts")
        order = metrics.event_order(run_dir)
        if not milestones_ok(order, spec.strategy, evs):
            v.append(f"faults: recovery milestones {order}")
    alive = run_processes(run_dir)
    if alive:
        v.append(f"orphans: {len(alive)} process(es) of the run alive: "
                 f"{[p for p, _ in alive]}")
    v += ["ports: " + x for x in leaked_ports(run_dir)]
    return v


def recheck(run_dir: str | Path) -> tuple[list[str], str | None]:
    """Check a finished campaign run again with this checkout's metrics and checker.

    The run's summary is derived anew (:func:`jitbench.harness.run.summarize`) from
    what the run left in ``run_dir``: its events, checkpoint directory, final state
    and ``spec.json``, and its reference's run directory (``reference_dir`` of its
    ``summary.json``); how the agent ended (exit status, wall time, interruption,
    time-out) is taken from that ``summary.json``, since it cannot be observed
    again. The ``orphans`` and ``ports`` invariants are of the present: they find
    nothing once the run is gone, so a caller keeps their run-time verdict
    (``benchmarks/stress_chunks.py recheck`` does). Writes ``phases.parquet`` of
    ``run_dir`` again (as the run did, and of the reference's when it has none);
    nothing else.

    Returns:
        ``(violations, code_version)``: the lines of :func:`check` (empty: every
        invariant kept) and the ``code_version`` of the checkout that ran it (None
        when its summary names none).

    Raises:
        OSError: ``run_dir`` lacks ``spec.json`` or ``summary.json``, or a file
            they name cannot be read.
        ValueError, KeyError: either file is not what a jitbench run writes.
    """
    from jitbench.harness.launch import LaunchResult
    from jitbench.harness.run import summarize

    run_dir = Path(run_dir)
    spec = RunSpec.load(run_dir / "spec.json")
    then = json.loads((run_dir / "summary.json").read_text())
    late = bool(then.get("late_interrupt"))  # a signal that stopped nothing
    res = LaunchResult(int(then["agent_exit"]), float(then["wall_s"]),
                       interrupted=bool(then.get("interrupted")) and not late,
                       timed_out=bool(then.get("timed_out")), late_interrupt=late)
    ref_dir = _reference_dir(run_dir, then)
    ref = (LaunchResult(0, float(then.get("reference_wall_s") or 0.0))
           if ref_dir else None)
    summary = summarize(spec, run_dir, res, ref, ref_dir)
    summary["timed_out"] = res.timed_out
    return (check(summary, spec, run_dir, ref_dir or run_dir / "reference",
                  run_bound_s(len(spec.faults))), then.get("code_version"))


def _reference_dir(run_dir: Path, then: dict) -> Path | None:
    """The reference directory a run's ``summary.json`` (``then``) names, found from
    here: a relative one inside the run's own directory is taken from ``run_dir``
    (the run may have been started elsewhere, or moved); None when it names none.

    Raises:
        OSError: the directory is not there (or, relative and outside the run's
            directory, not found from the current directory).
    """
    named = then.get("reference_dir")
    if not named:
        return None
    ref = Path(named)
    if not ref.is_absolute():
        try:
            ref = run_dir / ref.relative_to(Path(then.get("run_dir") or "."))
        except ValueError:  # elsewhere, relative to where the run was started
            pass
    if not ref.is_dir():
        raise OSError(f"{run_dir}: its reference directory {named} is not found from here "
                      f"(looked in {ref})")
    return ref
