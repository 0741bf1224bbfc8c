"""Fault schedules: at a step, at a time, every N steps, Poisson arrivals, scenario files.

Every schedule is expanded *before* the run into a concrete list of
:class:`~jitbench.faults.base.FaultSpec` (written to ``spec.json``), so a run
is reproducible from its spec, and random schedules are a pure function of
``--seed``: the same seed gives the same faults at the same steps/times.

Triggers
--------
- at a step: ``step = k`` (the fault fires at step k; see the injection points
  in :mod:`jitbench.faults.base`);
- at a time: ``time_s = t``: once t seconds of wall time have passed since
  training started (the first step of attempt 0; downtime of restarts counts,
  as it does for a real MTBF); the step it lands on depends on the machine's
  speed, so it is recorded in the ``fault`` event, not fixed in advance;
- every N steps: ``every_steps = N`` from ``step`` (default N), at most
  ``count`` times, up to the last step but one;
- Poisson arrivals (:func:`poisson`): inter-arrival times drawn from an
  exponential distribution with mean ``mtbf_steps`` (in optimizer steps: a
  fault at step ``ceil(t)``; arrivals that land on an already-used step merge
  into it, so at most one arrival per step) or ``mtbf_s`` (in seconds since
  training start: ``time_s`` triggers; then ``horizon_s`` or ``max_faults``
  bounds the expansion). Kind and rank of each arrival are drawn uniformly
  from ``kinds`` and ``ranks``. The random stream is
  ``random.Random(f"{seed}/poisson/{index}")`` (Python's Mersenne Twister,
  seeded from the string through SHA-512: stable across runs and platforms).

Scenario files (TOML, read with :mod:`tomllib`)
-----------------------------------------------
::

    description = "two crashes and a straggler"     # optional

    [[fault]]
    kind = "slow"          # required: a name from `jitbench faults`
    rank = 0               # default 1
    step = 2               # trigger: step (default 1), or time_s, or every_steps
    delay_s = 0.3          # kind-specific parameters (see `jitbench faults`)
    steps = 3

    [[fault]]
    kind = "kill"
    rank = 1
    every_steps = 4        # steps 4, 8, ... (from `step`, default every_steps)
    count = 2              # at most this many
    every_attempt = false  # true: fire in every attempt (a rank that always fails)
    at = "collective"      # injection point: step, collective, optimizer, micro:M (process
                           # faults also write, restore; storage faults: none)
    id = "k1"              # optional stable id (default <kind>@<rank>:<step>)

    [[poisson]]
    kinds = ["kill", "exception"]   # required
    mtbf_steps = 8.0       # or mtbf_s (then horizon_s or max_faults)
    ranks = [0, 1]         # default: every rank
    start_step = 1         # default 1
    max_faults = 3         # optional

Validation is strict: an unknown key, a wrong type or an impossible value
(a rank outside the world, a step outside the run, two triggers at once,
a parameter out of range) raises :class:`ScheduleError` whose message is one
line naming the file, the entry and the key (``jitbench run`` prints it and
exits 2).
"""

from __future__ import annotations

import math
import random
import tomllib
from pathlib import Path
from typing import Any

from jitbench.errors import ScheduleError, unknown
from jitbench.faults import FAULTS
from jitbench.faults.base import FaultSpec, check_value
from jitbench.faults.matrix import reach

TOP_KEYS = ("description", "fault", "poisson")
FAULT_KEYS = ("kind", "rank", "step", "time_s", "every_steps", "count", "every_attempt", "id")
POISSON_KEYS = ("kinds", "ranks", "mtbf_steps", "mtbf_s", "horizon_s", "start_step",
                "max_faults")
MAX_FAULTS = 1000
"""Most faults one plan may hold (each failing fault costs a restart; a plan past
this is a typo, and building it would only use up memory)."""
MIN_MTBF_STEPS = 0.05
"""Smallest ``mtbf_steps``: at most one fault fires per step, so below one step
arrivals only merge (and below this, drawing them takes longer than the run)."""
MIN_MTBF_S = 0.001
"""Smallest ``mtbf_s`` (s): fault times are kept to the microsecond."""
UNKNOWN_STEPS = 10**9
"""The ``steps`` of a run whose step count is not known in advance (``jitbench
launch`` without ``--steps``: the script decides). Steps are then checked from
below only, and no message names this number as the run's length."""


def steps_known(steps: int) -> bool:
    """Whether ``steps`` is a run's real step count, not :data:`UNKNOWN_STEPS`."""
    return steps < UNKNOWN_STEPS


def _typed(where: str, key: str, value: Any, kind: type, low: float | None = None) -> Any:
    try:
        return check_value(key, value, kind, low=low)
    except ValueError as exc:
        raise ScheduleError(f"{where}: {exc}") from None


def check_rank(rank: int, world_size: int, what: str = "rank") -> None:
    """Raises ScheduleError unless ``0 <= rank < world_size``."""
    if not 0 <= rank < world_size:
        raise ScheduleError(f"{what} {rank} is outside the world of {world_size} ranks "
                            f"(0..{world_size - 1})")


def check_step(step: int, steps: int, what: str = "step") -> None:
    """Raises ScheduleError unless ``1 <= step < steps`` (a fault fires inside a step
    before the last); with ``steps`` :data:`UNKNOWN_STEPS`, unless ``step >= 1``."""
    if not steps_known(steps):
        if step < 1:
            raise ScheduleError(f"{what} {step} must be >= 1")
        return
    if not 1 <= step < steps:
        raise ScheduleError(f"{what} {step} must be in 1..{steps - 1} "
                            f"(the run has {steps} steps)")


def _check_rank(where: str, rank: int, nproc: int) -> None:
    try:
        check_rank(rank, nproc)
    except ScheduleError as exc:
        raise ScheduleError(f"{where}: {exc}") from None


def _check_step(where: str, key: str, step: int, steps: int) -> None:
    try:
        check_step(step, steps, key)
    except ScheduleError as exc:
        raise ScheduleError(f"{where}: {exc}") from None


def _params(where: str, kind: str, params: dict) -> dict:
    try:
        FAULTS[kind].resolve(params)
    except ValueError as exc:
        raise ScheduleError(f"{where}: {exc}") from None
    return params


def every(kind: str, rank: int, every_steps: int, steps: int, start: int | None = None,
          count: int | None = None, every_attempt: bool = False,
          params: dict | None = None, id_prefix: str = "") -> list[FaultSpec]:
    """One fault every ``every_steps`` steps from ``start`` (default ``every_steps``),
    at most ``count`` times, up to step ``steps - 1``."""
    first = every_steps if start is None else start
    n = len(range(first, steps, every_steps))
    if min(n, count if count is not None else n) > MAX_FAULTS:
        if count is not None:  # the count given is what is too large
            raise ScheduleError(f"a fault count of {count} every {every_steps} steps is "
                                f"more than {MAX_FAULTS} faults in one plan; give a count "
                                f"of at most {MAX_FAULTS}")
        if not steps_known(steps):
            raise ScheduleError(f"every {every_steps} steps with no count and an unknown "
                                f"step count is more than {MAX_FAULTS} faults in one plan; "
                                f"give a count (or the run's steps)")
        raise ScheduleError(f"every {every_steps} steps over {steps} steps is {n} faults, more "
                            f"than {MAX_FAULTS} in one plan; give a count or a longer interval")
    out = []
    for step in range(first, steps, every_steps):
        if count is not None and len(out) >= count:
            break
        fid = f"{id_prefix}{kind}@{rank}:{step}" if id_prefix else ""
        out.append(FaultSpec(kind, rank, step, every_attempt, dict(params or {}), fid))
    return out


def poisson(kinds: list[str], ranks: list[int], steps: int, seed: int, *,
            mtbf_steps: float | None = None, mtbf_s: float | None = None,
            horizon_s: float | None = None, start_step: int = 1,
            max_faults: int | None = None, index: int = 0,
            where: str = "poisson") -> list[FaultSpec]:
    """Poisson fault arrivals (see the module docstring); deterministic in ``seed``.
    ``where`` starts every error message (the scenario entry or the flag).

    ``start_step``: the first step a fault may be placed at (1..steps-1).

    Raises:
        ScheduleError: neither or both MTBFs, a non-positive MTBF, ``mtbf_s``
            without ``horizon_s``/``max_faults``, or a ``start_step`` outside the run.
    """
    if (mtbf_steps is None) == (mtbf_s is None):
        raise ScheduleError(f"{where}: give exactly one of mtbf_steps and mtbf_s")
    mtbf = mtbf_steps if mtbf_steps is not None else mtbf_s
    if not (math.isfinite(mtbf) and mtbf > 0):
        raise ScheduleError(f"{where}: the MTBF must be a finite number > 0, got {mtbf}")
    low, unit = (MIN_MTBF_STEPS, "steps") if mtbf_steps is not None else (MIN_MTBF_S, "s")
    if mtbf < low:
        raise ScheduleError(f"{where}: an MTBF of {mtbf:g} {unit} is below {low:g} {unit} "
                            + ("(at most one fault fires per step)" if unit == "steps"
                               else "(fault times are kept to the microsecond)"))
    if horizon_s is not None and not (math.isfinite(horizon_s) and horizon_s >= 0):
        raise ScheduleError(f"{where}: horizon_s must be a finite number >= 0, got {horizon_s}")
    if mtbf_s is not None and horizon_s is None and max_faults is None:
        raise ScheduleError(f"{where}: mtbf_s needs horizon_s or max_faults (the run's "
                            "length in seconds is not known in advance)")
    if not kinds or not ranks:
        raise ScheduleError(f"{where}: kinds and ranks must not be empty")
    if start_step < 1 or (steps_known(steps) and start_step >= steps):
        raise ScheduleError(f"{where}: start step {start_step} is outside the run: "
                            + start_range(steps))
    rng = random.Random(f"{seed}/poisson/{index}")
    out: list[FaultSpec] = []
    t = float(start_step - 1) if mtbf_steps is not None else 0.0
    used: set[int] = set()
    while max_faults is None or len(out) < max_faults:
        if len(out) >= MAX_FAULTS:
            fix = (f"a fault count of {max_faults} is more than that; give at most "
                   f"{MAX_FAULTS}" if max_faults is not None
                   else "give a fault count (the run's step count is not known)"
                   if mtbf_steps is not None and not steps_known(steps)
                   else "raise the MTBF or give a fault count")
            raise ScheduleError(f"{where}: more than {MAX_FAULTS} faults in one plan (MTBF "
                                f"{mtbf:g} {unit}); {fix}")
        t += rng.expovariate(1.0 / mtbf)
        kind, rank = rng.choice(kinds), rng.choice(ranks)
        if mtbf_steps is not None:
            step = max(start_step, math.ceil(t))
            if step >= steps:
                break
            if step in used:
                continue
            used.add(step)
            out.append(FaultSpec(kind, rank, step))
        else:
            if horizon_s is not None and t >= horizon_s:
                break
            ts = round(t, 6)
            if out and ts <= out[-1].time_s:  # two arrivals in one microsecond: keep both
                ts = round(out[-1].time_s + 1e-6, 6)
            out.append(FaultSpec(kind, rank, start_step, time_s=ts))
    return out


def load_scenario(path: str | Path, nproc: int, steps: int, seed: int) -> list[FaultSpec]:
    """Read and expand a TOML scenario file (format in the module docstring).

    Raises:
        ScheduleError: unreadable file, invalid TOML, or any invalid entry (one line).
    """
    p = Path(path)
    try:
        doc = tomllib.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ScheduleError(f"scenario {p}: cannot read it ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise ScheduleError(f"scenario {p}: not a UTF-8 text file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ScheduleError(f"scenario {p}: not valid TOML ({exc})") from None
    return expand_scenario(doc, nproc, steps, seed, name=str(p))


def expand_scenario(doc: dict, nproc: int, steps: int, seed: int,
                    name: str = "scenario") -> list[FaultSpec]:
    """Expand a parsed scenario document into concrete faults (see :func:`load_scenario`)."""
    unknown = sorted(set(doc) - set(TOP_KEYS))
    if unknown:
        raise ScheduleError(f"{name}: unknown key {unknown[0]!r} (allowed: "
                            f"{', '.join(TOP_KEYS)})")
    if "description" in doc:
        _typed(name, "description", doc["description"], str)
    for key in ("fault", "poisson"):
        if key in doc and not (isinstance(doc[key], list)
                               and all(isinstance(e, dict) for e in doc[key])):
            raise ScheduleError(f"{name}: {key} must be an array of tables ([[{key}]])")
    if not doc.get("fault") and not doc.get("poisson"):
        raise ScheduleError(f"{name}: no faults ([[fault]] or [[poisson]] tables)")
    out: list[FaultSpec] = []
    for i, entry in enumerate(doc.get("fault", []), 1):
        out.extend(_fault_entry(f"{name}: fault #{i}", entry, nproc, steps))
    for i, entry in enumerate(doc.get("poisson", []), 1):
        out.extend(_poisson_entry(f"{name}: poisson #{i}", entry, nproc, steps, seed, i - 1))
    check_unique(out, name)
    return out


def _fault_entry(where: str, e: dict, nproc: int, steps: int) -> list[FaultSpec]:
    if "kind" not in e:
        raise ScheduleError(f"{where}: kind is required (one of {', '.join(sorted(FAULTS))})")
    kind = _typed(where, "kind", e["kind"], str)
    if kind not in FAULTS:
        raise ScheduleError(f"{where}: unknown fault {kind!r}; one of "
                            f"{', '.join(sorted(FAULTS))}")
    where = f"{where} ({kind})"
    cls = FAULTS[kind]
    allowed = set(FAULT_KEYS) | set(cls.all_params())
    unknown = sorted(set(e) - allowed)
    if unknown:
        raise ScheduleError(f"{where}: unknown key {unknown[0]!r} (allowed: "
                            f"{', '.join(sorted(allowed))})")
    rank = _typed(where, "rank", e.get("rank", 1), int)
    _check_rank(where, rank, nproc)
    every_attempt = _typed(where, "every_attempt", e.get("every_attempt", False), bool)
    params = _params(where, kind, {k: v for k, v in e.items() if k not in FAULT_KEYS})
    fid = _typed(where, "id", e["id"], str) if "id" in e else ""
    triggers = [k for k in ("time_s", "every_steps") if k in e]
    if len(triggers) > 1:
        raise ScheduleError(f"{where}: give one trigger, not both {triggers[0]} and "
                            f"{triggers[1]}")
    if "count" in e and "every_steps" not in e:
        raise ScheduleError(f"{where}: count needs every_steps")
    if "every_steps" in e:
        n = _typed(where, "every_steps", e["every_steps"], int, low=1)
        start = _typed(where, "step", e.get("step", n), int)
        _check_step(where, "step", start, steps)
        count = _typed(where, "count", e["count"], int, low=1) if "count" in e else None
        if fid:
            raise ScheduleError(f"{where}: id cannot be given with every_steps (each "
                                "repetition gets its own)")
        return every(kind, rank, n, steps, start, count, every_attempt, params)
    step = _typed(where, "step", e.get("step", 1), int)
    _check_step(where, "step", step, steps)
    time_s = _typed(where, "time_s", e["time_s"], float, low=0.0) if "time_s" in e else None
    return [FaultSpec(kind, rank, step, every_attempt, params, fid, time_s)]


def _poisson_entry(where: str, e: dict, nproc: int, steps: int, seed: int,
                   index: int) -> list[FaultSpec]:
    unknown = sorted(set(e) - set(POISSON_KEYS))
    if unknown:
        raise ScheduleError(f"{where}: unknown key {unknown[0]!r} (allowed: "
                            f"{', '.join(POISSON_KEYS)})")
    if "kinds" not in e:
        raise ScheduleError(f"{where}: kinds is required (a list of fault names)")
    kinds = e["kinds"]
    if not isinstance(kinds, list) or not kinds or not all(isinstance(k, str) for k in kinds):
        raise ScheduleError(f"{where}: kinds must be a non-empty list of fault names")
    for k in kinds:
        if k not in FAULTS:
            raise ScheduleError(f"{where}: unknown fault {k!r}; one of "
                                f"{', '.join(sorted(FAULTS))}")
    ranks = e.get("ranks", list(range(nproc)))
    if not isinstance(ranks, list) or not ranks:
        raise ScheduleError(f"{where}: ranks must be a non-empty list of ranks")
    for r in ranks:
        _typed(where, "ranks", r, int)
        _check_rank(where, r, nproc)
    kw: dict[str, Any] = {}
    for key in ("mtbf_steps", "mtbf_s", "horizon_s"):
        if key in e:
            kw[key] = _typed(where, key, e[key], float)
            if kw[key] <= 0:
                raise ScheduleError(f"{where}: {key} must be > 0, got {e[key]!r}")
    if "start_step" in e:
        kw["start_step"] = _typed(where, "start_step", e["start_step"], int)
        _check_step(where, "start_step", kw["start_step"], steps)
    if "max_faults" in e:
        kw["max_faults"] = _typed(where, "max_faults", e["max_faults"], int, low=1)
    out = poisson(kinds, ranks, steps, seed, index=index, where=where, **kw)
    if not out:
        raise ScheduleError(empty_draw(where, steps, seed, kw.get("mtbf_steps"),
                                       kw.get("mtbf_s"), kw.get("horizon_s"),
                                       kw.get("start_step", 1)))
    return out


def start_range(steps: int) -> str:
    """Where a Poisson plan's start step may be, for a message: ``must be in 1..N (the
    run has M steps)``, or ``must be >= 1`` when ``steps`` is not known."""
    return (f"it must be in 1..{steps - 1} (the run has {steps} steps)" if steps_known(steps)
            else "it must be >= 1")


def check_start_step(step: int, steps: int, trigger: str) -> None:
    """Refuse ``--fault-step`` as the start of a Poisson draw (``trigger``: the flag that
    asked for the draw, ``--fault-mtbf-steps`` or ``--fault-mtbf-s``) outside the run:
    such a draw places no fault whatever the seed. ``jitbench run`` and ``jitbench
    sweep`` both check with it.

    Raises:
        ScheduleError: ``--fault-step N (the step TRIGGER starts drawing faults at) is
            outside the run: it must be in 1..S-1 (the run has S steps)``.
    """
    if step < 1 or (steps_known(steps) and step >= steps):
        raise ScheduleError(f"--fault-step {step} (the step {trigger} starts drawing faults "
                            f"at) is outside the run: " + start_range(steps))


def empty_draw(where: str, steps: int, seed: int | list[int], mtbf_steps: float | None,
               mtbf_s: float | None, horizon_s: float | None, start_step: int = 1) -> str:
    """The one line refusing a Poisson plan whose seeded draw placed no fault in the
    run (``where`` starts it: the scenario entry or the flag). The draw is a pure
    function of ``seed``, made before launch, so such a plan would run fault-free.
    ``seed`` a list: a sweep's seeds, every one of whose draws is empty.
    ``start_step``: the first step the draw may place a fault at; the window it
    names is ``start_step..steps-1``."""
    if mtbf_steps is not None:
        span = (f"in steps {start_step}..{steps - 1} of the {steps}-step run"
                if steps_known(steps) else f"in the run from step {start_step}")
        mtbf = f"an MTBF of {mtbf_steps:g} steps"
    else:
        span = f"within horizon_s {horizon_s:g} s"
        mtbf = f"an MTBF of {mtbf_s:g} s"
    if isinstance(seed, list):
        drawn = (f"the seeded draw of every seed ({', '.join(map(str, seed))})", "sweep")
    else:
        drawn = (f"the seeded draw (seed {seed})", "run")
    return (f"{where}: with {mtbf} {drawn[0]} places no fault {span}, so the {drawn[1]} "
            "would be fault-free; lower the MTBF, run more steps or pick another seed")


def check_unique(faults: list[FaultSpec], where: str | None = "fault plan") -> None:
    """Raises ScheduleError when two faults share an id (they would share a marker);
    ``where`` starts the message (None: nothing)."""
    seen: set[str] = set()
    for f in faults:
        if f.id in seen:
            raise ScheduleError((f"{where}: " if where else "")
                                + f"two faults have the id {f.id!r}; give one an id "
                                "or another step")
        seen.add(f.id)


def check_fault(f: FaultSpec, world_size: int, steps: int, grad_accum: int | None = None,
                run: Any = None) -> None:
    """Every check of one planned fault against a run: a known kind, a rank in the
    world, a step inside the run, an injection point the fault may move to
    (``micro:M`` with ``M < grad_accum``), valid parameters, a time trigger
    >= 0, and the fault's fit to the run (:func:`jitbench.faults.matrix.reach`:
    its own :meth:`Fault.check_run`, the strategy's unsupported kinds, checkpoints
    to write or restore; ``run`` the RunSpec; skipped when None).

    Raises:
        ScheduleError: the first problem, one line (``fault <id>: ...`` for the
            fault's point, parameters and fit).
    """
    if f.kind not in FAULTS:
        raise ScheduleError(unknown("fault", f.kind, sorted(FAULTS)))
    check_rank(f.rank, world_size, "fault rank")
    check_step(f.step, steps, "fault step")
    cls = FAULTS[f.kind]
    at = f.params.get("at")
    if at is not None and cls.movable and not cls.point_ok(str(at), grad_accum):
        more = "".join(f", {p}" for p in cls.extra_points)
        last = "M" if grad_accum is None else f"M with M in 0..{grad_accum - 1}"
        raise ScheduleError(f"fault {f.id}: injection point {at!r} is not step, collective"
                            f"{more} or micro:{last}")
    try:
        cls.resolve(f.params)
    except ValueError as exc:
        raise ScheduleError(f"fault {f.id}: {exc}") from None
    if f.time_s is not None and not f.time_s >= 0:
        raise ScheduleError(f"fault {f.id}: time_s must be >= 0, got {f.time_s}")
    why = reach(f, run) if run is not None else None
    if why:
        raise ScheduleError(f"fault {f.id}: {why}")


def check_plan(faults: list[FaultSpec], world_size: int, steps: int,
               grad_accum: int | None = None, run: Any = None) -> None:
    """The one check of a run's fault plan (the run spec and the CLI call it): a run
    of at least 2 steps, :func:`check_fault` for each fault, at least 2 ranks (a
    survivor to save), and distinct ids.

    Raises:
        ScheduleError: the first problem, one line.
    """
    if faults and steps < 2:
        raise ScheduleError(f"a fault needs a run of at least 2 steps (it fires inside a step "
                            f"before the last), got --steps {steps}")
    for f in faults:
        check_fault(f, world_size, steps, grad_accum, run)
    if faults and world_size < 2:
        raise ScheduleError("a fault needs at least 2 ranks (a survivor to save)")
    check_unique(faults, where=None)


def poisson_plan(kind: str, world_size: int, steps: int, seed: int, *,
                 mtbf_steps: float | None = None, mtbf_s: float | None = None,
                 start_step: int = 1, max_faults: int | None = None,
                 rank: int | None = None, where: str = "--fault-mtbf-steps"
                 ) -> list[FaultSpec]:
    """The seeded Poisson faults of one kind that ``jitbench run --fault-mtbf-steps``
    (or ``--fault-mtbf-s``) and every cell of ``jitbench sweep --fault-mtbf-steps``
    plan: each fault on a rank drawn from ``range(world_size)`` (``rank`` given:
    every fault on that rank, ``--fault-rank``), so a run and a sweep cell of the
    same options and seed meet the same trace (:func:`poisson`)."""
    ranks = list(range(world_size)) if rank is None else [rank]
    return poisson([kind], ranks, steps, seed, mtbf_steps=mtbf_steps, mtbf_s=mtbf_s,
                   horizon_s=None, start_step=start_step, max_faults=max_faults,
                   where=where)


def plan_from_options(kind: str | None, rank: int | None, step: int | None, steps: int,
                      nproc: int,
                      seed: int, *, time_s: float | None = None,
                      every_steps: int | None = None, count: int | None = None,
                      mtbf_steps: float | None = None, mtbf_s: float | None = None,
                      every_attempt: bool = False, params: dict[str, str] | None = None,
                      scenario: str | Path | None = None) -> list[FaultSpec]:
    """The fault plan of ``jitbench run``'s options.

    ``kind`` None: ``nccl-hang`` unless a scenario is given; ``none``: no
    fault. ``rank`` None: rank 1, or with ``mtbf_steps``/``mtbf_s`` each fault on a
    rank drawn from the seed over ``range(nproc)`` (:func:`poisson_plan`, as a sweep
    draws them; given with ``none``: refused). ``params`` are
    ``--fault-param`` strings, parsed by the fault's parameter types. ``step``
    None: a third of the way in.

    A plan of the options that places no fault in the run is refused: ``--fault-every``
    past the run's last step but one, or a seeded Poisson draw (``--fault-mtbf-*``,
    made here, before launch) with no arrival in it.

    Raises:
        ScheduleError: conflicting or invalid options, or a fault option that places
            no fault in the run (one line).
    """
    out: list[FaultSpec] = []
    if scenario is not None:
        out.extend(load_scenario(scenario, nproc, steps, seed))
    if kind is None:
        kind = "none" if scenario is not None else "nccl-hang"
    triggers = [n for n, v in (("--fault-time-s", time_s), ("--fault-every", every_steps),
                               ("--fault-mtbf-steps", mtbf_steps),
                               ("--fault-mtbf-s", mtbf_s))
                if v is not None]
    if kind == "none":
        given = triggers + [n for n, v in (("--fault-rank", rank is not None),
                                           ("--fault-step", step is not None),
                                           ("--fault-count", count is not None),
                                           ("--every-attempt", every_attempt),
                                           ("--fault-param", bool(params))) if v]
        if given:
            raise ScheduleError(f"{given[0]} needs a --fault (other than none)")
        check_unique(out)
        return out
    if kind not in FAULTS:
        raise ScheduleError(unknown("fault", kind, ["none", *sorted(FAULTS)]))
    pinned = rank  # a Poisson draw picks each fault's rank unless --fault-rank pins it
    rank = 1 if rank is None else rank
    if len(triggers) > 1:
        raise ScheduleError(f"give one trigger, not both {triggers[0]} and {triggers[1]}")
    cls = FAULTS[kind]
    parsed: dict[str, Any] = {}
    known = cls.all_params()
    for name, text in (params or {}).items():
        if name not in known:
            raise ScheduleError(f"{kind}: unknown parameter {name!r} (allowed: "
                                f"{', '.join(sorted(known)) or 'none'})")
        try:
            parsed[name] = known[name].parse(name, text) if isinstance(text, str) else text
        except ValueError as exc:
            raise ScheduleError(f"{kind}: {exc}") from None
    try:
        cls.resolve(parsed)
    except ValueError as exc:
        raise ScheduleError(str(exc)) from None
    if count is not None and every_steps is None and mtbf_steps is None and mtbf_s is None:
        raise ScheduleError("--fault-count needs --fault-every or --fault-mtbf-steps/-s")
    if count is not None and count < 1:
        raise ScheduleError(f"--fault-count must be >= 1, got {count}")
    if time_s is not None and not (math.isfinite(time_s) and time_s >= 0):
        raise ScheduleError(f"--fault-time-s must be a finite number >= 0, got {time_s}")
    if mtbf_steps is not None or mtbf_s is not None:
        if step is not None:
            check_start_step(step, steps, triggers[0])
        faults = poisson_plan(kind, nproc, steps, seed, mtbf_steps=mtbf_steps,
                              mtbf_s=mtbf_s, start_step=1 if step is None else step,
                              max_faults=count if count is not None else
                              (None if mtbf_steps is not None else 10), rank=pinned,
                              where="--fault-mtbf-steps" if mtbf_steps is not None
                              else "--fault-mtbf-s")
        if not faults:
            raise ScheduleError(empty_draw("--fault-mtbf-steps" if mtbf_steps is not None
                                           else "--fault-mtbf-s", steps, seed, mtbf_steps,
                                           mtbf_s, None, 1 if step is None else step))
        for f in faults:
            f.params, f.every_attempt = dict(parsed), every_attempt
    elif every_steps is not None:
        if every_steps < 1:
            raise ScheduleError(f"--fault-every must be >= 1, got {every_steps}")
        if step is not None:
            check_step(step, steps, "fault step")
        faults = every(kind, rank, every_steps, steps, step, count, every_attempt, parsed)
        if not faults:  # the first repetition (--fault-every itself) is past the run
            raise ScheduleError(f"--fault-every {every_steps} places no fault in the "
                                f"{steps}-step run (the first would fire at step "
                                f"{every_steps}; faults fire in steps 1..{steps - 1}); give "
                                f"a smaller --fault-every, a --fault-step or more --steps")
    else:
        # a time trigger alone may fire from the first step; a step with it is the earliest
        s = step if step is not None else (1 if time_s is not None
                                           else max(1, min(steps - 1, steps // 3)))
        faults = [FaultSpec(kind, rank, s, every_attempt, parsed, time_s=time_s)]
    out.extend(faults)
    check_unique(out)
    return out
