"""Where each fault fires under each strategy, or why it never could: the one table
that the up-front refusal (:func:`jitbench.faults.schedule.check_fault`, from
:meth:`jitbench.harness.spec.RunSpec.validate`) and the fault x point x strategy
matrix (``tests/unit/test_fault_matrix.py``, ``tests/dist/test_fault_matrix.py``)
both read, so a cell is either refused before launch or fires.

A cell is a fault kind, one of its injection points (:func:`points`: the ``at``
values it accepts; ``micro:M`` stands as ``micro:0``) and a strategy. The
answer comes from the strategy registry (:data:`jitbench.runtime.strategies.REGISTRY`:
``unsupported_faults``, ``writes``, ``launcher``), the fault's point and the rest of
the plan:

- ``step``, ``micro:M``, ``collective``, ``optimizer``: every training loop calls
  them at every step (``harness/worker.py``, ``harness/torchft_worker.py``), so the
  fault fires when step k is reached, unless the strategy's registry entry refuses
  the kind (``unsupported_faults``) or the fault itself refuses the run
  (:meth:`~jitbench.faults.base.Fault.check_run`: a timeout above the hang floor,
  ``amp-backoff`` without fp16, ...).
- ``write`` (storage faults, and process faults moved there) and ``corrupt`` need
  checkpoint files (:func:`needs_checkpoints`).
- ``restore`` needs a checkpoint to be read at a restart (:func:`needs_restore`).
"""

from __future__ import annotations

from typing import Any

from jitbench.faults.base import Fault, FaultSpec

CHEAP_STRATEGIES = ("jit", "periodic:3", "periodic-async:3", "none")
"""Strategies whose cells the heavy matrix test runs (no optional extra, one agent)."""


def all_strategies() -> list[str]:
    """One command-line form per registered strategy (interval 3 where one is needed)."""
    from jitbench.runtime.strategies import REGISTRY

    return [e.name if e.interval in ("none", "optional") else f"{e.name}:3"
            for e in REGISTRY.values()]


def points(kind: str) -> tuple[str, ...]:
    """The injection points fault ``kind`` accepts (``micro:M`` as ``micro:0``)."""
    from jitbench.faults import FAULTS

    cls = FAULTS[kind]
    if not cls.movable:
        return (cls.point,)
    return ("step", "micro:0", "collective", "optimizer", *cls.extra_points)


def cells(strategies: list[str] | tuple[str, ...] | None = None) -> list[tuple[str, str, str]]:
    """Every ``(kind, point, strategy)`` cell (default: :func:`all_strategies`)."""
    from jitbench.faults import FAULTS

    return [(k, p, s) for s in (strategies or all_strategies()) for k in FAULTS
            for p in points(k)]


def point_of(f: FaultSpec) -> str:
    """The injection point of a planned fault (its ``at``, else the kind's default)."""
    from jitbench.faults import FAULTS

    return str(f.params.get("at") or FAULTS[f.kind].point)


def unsupported(kind: str, strategy: str) -> str | None:
    """The registry's reason a strategy cannot express ``kind`` (``unsupported_faults``)."""
    from jitbench.runtime.strategies import parse

    return dict(parse(strategy).entry.unsupported_faults).get(kind)


def reach(f: FaultSpec, run: Any) -> str | None:
    """Why planned fault ``f`` could never fire in ``run`` (a RunSpec), one line; None: it
    fires (:func:`where` says where). ``run.strategy`` that is not a registered strategy
    (a launched script's ``own``) skips the strategy's rules."""
    from jitbench.errors import SpecError
    from jitbench.faults import FAULTS
    from jitbench.runtime.strategies import parse

    cls = FAULTS[f.kind]
    why = cls.check_run(f, run)
    if why:
        return why
    try:
        parse(run.strategy)
    except (SpecError, AttributeError):
        return None
    why = unsupported(f.kind, run.strategy)
    if why:
        return f"{f.kind} cannot be expressed under strategy {parse(run.strategy).name}: {why}"
    p = point_of(f)
    if cls.family == "storage" or p == "write":
        return needs_checkpoints(cls, run, f)
    if p == "restore":
        return needs_restore(cls, run, f)
    return None


def where(f: FaultSpec, run: Any) -> str:
    """Where an accepted fault fires in ``run``, in words (the matrix's documented reason)."""
    from jitbench.faults import FAULTS
    from jitbench.runtime.strategies import parse

    p, cls = point_of(f), FAULTS[f.kind]
    writers = parse(run.strategy).writers
    if p == "write":
        who = ("rank 0's scheduled checkpoint write" if "rank0" in writers and
               (f.rank == 0 or "on_failure" not in writers)
               else "the survivors' checkpoint write after a peer fails")
        return f"the I/O hook of {who} at or after step {f.step} (checkpoint.set_io_hook)"
    if p == "restore":
        return ("the I/O hook of the checkpoint load at the restart after a failing fault "
                f"(or the replacement's state transfer), resuming at or after step {f.step}")
    if cls.name == "corrupt":
        return f"the start of step {f.step}, on the newest committed checkpoint"
    return f"the {p} injection point of step {f.step} of rank {f.rank} in the training loop"


def _failing_others(run: Any, spec: FaultSpec):
    from jitbench.faults import FAULTS

    for g in run.faults:
        other = FAULTS.get(g.kind)
        if g is not spec and other is not None and other.family != "storage" \
                and other.fails_job:
            yield g


def needs_checkpoints(cls: type[Fault], run: Any, spec: FaultSpec | None = None) -> str | None:
    """Why a fault that needs checkpoint files (a storage fault, or one moved to
    ``write``) could never fire in ``run`` (None: it can).

    Who writes is the strategy's (:attr:`jitbench.runtime.strategies.Choice.writers`).
    ``none`` writes no checkpoints; under the periodic strategies rank 0 alone
    writes, so a write fault must target it. ``jit`` (and ``jit-inprocess``, whose
    backstop follows a recovery) writes one only when a peer fails,
    so a write fault needs another failing fault at or after its step, and
    ``corrupt`` (which damages the newest committed checkpoint) one before its
    step; a time-triggered failing fault is given the benefit of the doubt.
    ``jit:backstop=N`` does both: rank 0 writes every N steps (a write fault on
    rank 0 and ``corrupt`` can always fire), the other ranks only when a peer fails.
    Without this check the fault never fires and the run reports a fault-free
    recovery.
    """
    from jitbench.runtime.strategies import parse

    writers = parse(run.strategy).writers
    if not writers:
        return f"{cls.name}: strategy {run.strategy} writes no checkpoints; use jit or periodic:N"
    if spec is None:
        return None
    write = point_of(spec) == "write"
    if "rank0" in writers:
        if not write or spec.rank == 0:  # rank 0's schedule reaches it
            return None
        if "on_failure" not in writers:  # periodic: rank 0 alone writes
            return (f"{cls.name}: under {run.strategy} only rank 0 writes checkpoints, so a "
                    f"write fault on rank {spec.rank} never fires; use --fault-rank 0")
    before = not write  # corrupt: a checkpoint must exist by step k
    for g in _failing_others(run, spec):
        if g.time_s is not None or (g.step < spec.step if before else g.step >= spec.step):
            return None
    where = "before" if before else "at or after"
    if "rank0" in writers:  # jit:backstop=N, a write fault on another rank
        return (f"{cls.name}: under {run.strategy} rank {spec.rank} writes a checkpoint only "
                f"when a peer fails (the backstop is rank 0's), and no failing fault comes "
                f"{where} step {spec.step}; add one (--scenario) or use --fault-rank 0")
    return (f"{cls.name}: under {run.strategy} a checkpoint is written only when a peer "
            f"fails, and no failing fault comes {where} step {spec.step}; add one "
            f"(--scenario) or use periodic:N")


def needs_restore(cls: type[Fault], run: Any, spec: FaultSpec) -> str | None:
    """Why a fault at ``restore`` could never fire in ``run`` (None: it can).

    A checkpoint is read at start-up from a given ``ckpt_dir`` (benefit of the
    doubt), else only at the restart after another failing fault: the restore
    resumes at step c + 1 of the newest checkpoint c, which must be >= k. Under
    ``jit`` a failure at step g resumes at g (the survivors save the boundary
    before it), so g >= k; under rank 0's schedule every N steps, c is the last
    multiple of N before g (c >= 1); a time-triggered failing fault, or an
    interval chosen at run time (``periodic:auto``), gets the benefit of the
    doubt. Under ``periodic-async:N`` the save of c may still be writing when the
    failing fault strikes (it commits in the background): the restart then restores
    c - N, or nothing, and the fault fires only if that still resumes at or after
    k; a failing fault after step c + N finds c committed, since the save of c + N
    waits for it. Under a ``replicas`` launcher (``jit-inprocess``, ``inmem``) only the
    rank that failed is replaced and loads state, so the failing fault must hit
    the same rank. Strategies that write no checkpoints never restore one.
    """
    from jitbench.runtime.strategies import parse

    st = parse(run.strategy)
    writers = st.writers
    if not writers:
        return (f"{cls.name}: strategy {run.strategy} writes no checkpoints, so nothing is "
                "restored; use jit or periodic:N")
    if getattr(run, "ckpt_dir", None):
        return None
    same_rank = st.entry.launcher == "replicas"
    for g in _failing_others(run, spec):
        if same_rank and g.rank != spec.rank:
            continue
        if g.time_s is not None or ("on_failure" in writers and g.step >= spec.step):
            return None
        if "rank0" in writers:
            if not st.every:
                return None
            c = (g.step - 1) // st.every * st.every
            if c >= 1 and c + 1 >= spec.step:
                return None
    on = f" on rank {spec.rank}" if same_rank else ""
    return (f"{cls.name}: at restore fires when a checkpoint is loaded at a restart, and under "
            f"{run.strategy} no failing fault{on} leads to a restore resuming at or after step "
            f"{spec.step}; add one (--scenario)")
