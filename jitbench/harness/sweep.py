"""Sweeps: workloads x strategies x faults (x seeds x repeats) into one results table.

A sweep directory::

    SWEEP_DIR/
      sweep.json                  the sweep's config, its scripts, provenance and wall time
                                  (summed over its sessions: --resume adds one)
      refs/<workload>-s<seed>/    one fault-free reference run per training spec
      runs/<workload>-<strategy>-<fault>-s<seed>-r<repeat>/   one run directory each
      results.parquet, results.csv   one row per run (RESULTS_VERSION columns below)

A workload is a built-in one (``gpt``, ``resnet``) or a user's script
(:class:`SweepScript`, ``jitbench sweep --script PATH``): its cells are
launched exactly as ``jitbench launch`` launches it
(:func:`jitbench.harness.script.run_script`), under the sweep's faults,
strategies (``own`` and ``jit`` only), seeds and repeats, and its rows carry
the workload ``script:NAME`` (directory names: ``script_NAME``), so the report
sets them beside the built-in workloads' rows. One fault-free launch of the
script (under ``own``) per seed is its reference.

Every run of one workload and seed shares one fault-free reference: the final
state of training does not depend on the checkpointing strategy (checkpoints
only read the state; :meth:`RunSpec.training_key`), so the reference runs
under ``none`` and every strategy's recovered run must equal it bitwise.
``torchft`` trains through torchft's DDP and optimizer wrappers: its runs share
their own fault-free reference (``refs/<workload>-s<seed>-torchft/``).

A row holds the run's summary (:func:`jitbench.harness.run.record_row`:
``detect_s``, ``save_s``, ``restart_s``, ``restore_s``, ``replay_s``,
``recovery_s``, ``replayed_steps``, ``expected_replayed_steps``,
``replay_ok``, ``wasted_gpu_s``, ``goodput``, ``step_s``, ``state_equal``,
``max_abs_diff``, ``sample_stream_equal``, the ``machine_*`` fingerprint,
``code_version``) plus the sweep's own columns: ``fault`` (the fault kind),
``repeat``, ``spec_hash`` (SHA-256 prefix of the run's spec: rows with the same
hash are repeats of one configuration), ``spec_json`` (the spec itself, which
the gate compares field by field), ``run_wall_s`` and ``results_version``. The columns and their units are
:data:`jitbench.records.SCHEMA`; :func:`jitbench.records.load_results` reads the table.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from jitbench import hang
from jitbench.errors import ExitStatus, RunFailedError, unknown
from jitbench.faults import FAULTS, FaultSpec
from jitbench.harness.script import STRATEGIES as SCRIPT_STRATEGIES
from jitbench.harness.script import ScriptSpec, run_script
from jitbench.harness.spec import RunSpec, SpecError, Strategy
from jitbench.records import RESULTS_VERSION, verdict
from jitbench.records import spec_hash as records_spec_hash
from jitbench.workloads import WORKLOADS, WorkloadConfig

SCRIPT_PREFIX = "script:"
"""The ``workload`` column of a script's cells starts with this (``script:ddp_tutorial.py``)."""
SEED_TOKEN = "{seed}"
"""Replaced in a script's arguments by the cell's seed (the script seeds itself)."""


@dataclass
class SweepScript:
    """A user's training script as a workload of a sweep (``--script PATH --script-args
    ARGS``): launched as ``jitbench launch -- PATH ARGS`` launches it."""

    path: str
    """The script's file (absolute: the run directories are elsewhere)."""
    args: list[str] = field(default_factory=list)
    """Its arguments; ``{run_dir}`` becomes each launch's run directory, ``{seed}`` the
    cell's seed."""


def duplicate(values: list) -> int | None:
    """The index of the first value of ``values`` that an earlier one equals, or None."""
    seen: list = []
    for i, v in enumerate(values):
        if v in seen:
            return i
        seen.append(v)
    return None


def script_labels(scripts: list[SweepScript]) -> list[str]:
    """The ``workload`` label of each script: ``script:NAME`` (its file name), with
    ``#2``, ``#3`` ... on later scripts of the same name (one script with two
    argument lists is two workloads)."""
    labels: list[str] = []
    for sc in scripts:
        base = SCRIPT_PREFIX + Path(sc.path).name
        label, n = base, 1
        while label in labels:
            n += 1
            label = f"{base}#{n}"
        labels.append(label)
    return labels


@dataclass
class SweepConfig:
    """The matrix of a sweep and the settings shared by every run.

    The defaults ({gpt, resnet} x {jit, periodic:5, periodic-async:5, none} x
    {kill, nccl-hang}: 16 runs and 2 references) took about 12-15 minutes on
    the 2-core development machine (see README).
    """

    workloads: list[str] = field(default_factory=lambda: ["gpt", "resnet"])
    scripts: list[SweepScript] = field(default_factory=list)
    """Users' scripts, workloads beside ``workloads`` (:class:`SweepScript`); their
    strategies are ``own`` and ``jit`` only."""
    strategies: list[str] = field(
        default_factory=lambda: ["jit", "periodic:5", "periodic-async:5", "none"])
    faults: list[str] = field(default_factory=lambda: ["kill", "nccl-hang"])
    seeds: list[int] = field(default_factory=lambda: [0])
    repeats: int = 1
    """Runs of each configuration (the gate uses their spread as the noise)."""
    steps: int = 24
    """Optimizer steps per run."""
    fault_step: int = 14
    """Step at which the fault fires (not a multiple of the default interval, so
    periodic strategies replay the steps since their last checkpoint). A script
    decides its own number of steps: it must run past this one. Not used with
    ``fault_mtbf_steps`` (its draw starts at ``fault_start_step``)."""
    fault_rank: int = 1
    """Rank the fault hits; not used with ``fault_mtbf_steps`` (its faults hit ranks
    drawn from the seed: ``jitbench sweep`` refuses ``--fault-rank`` there)."""
    nproc: int = 2
    backend: str = "gloo"
    """Process-group backend of every run (``gloo`` or ``nccl``)."""
    batch_size: int = 8
    sizes: dict = field(default_factory=dict)
    """Model size per workload (``{"gpt": "small"}``); missing: the workload's default."""
    mtbf_s: float | None = None
    """Job MTBF (s) for ``periodic:auto``."""
    fault_mtbf_steps: float | None = None
    """Instead of one fault at ``fault_step``: Poisson fault arrivals with this
    mean time between failures in steps, on random ranks, drawn from the cell's
    seed (:func:`jitbench.faults.schedule.poisson`), so every strategy of one
    seed meets the same failure trace and a rerun meets it again. The model
    validation (``jitbench validate``) runs on such sweeps."""
    fault_count: int | None = None
    """With ``fault_mtbf_steps``: at most this many faults per run."""
    fault_start_step: int = 1
    """With ``fault_mtbf_steps``: the first step its draw may place a fault at
    (``--fault-step`` with ``--fault-mtbf-steps``, as in ``jitbench run``): the
    arrivals are counted from step ``fault_start_step - 1`` and must lie in
    ``fault_start_step..steps-1``. A ``sweep.json`` written before this field drew
    from step 1, its default."""
    hang_floor_s: float = hang.FLOOR_S
    """Hang bound floor of every run (s; :mod:`jitbench.hang`)."""
    hang_first_s: float = hang.FIRST_S
    """Hang bound before any step time is known (s)."""
    timeout_s: float = 600.0
    """Per launch."""

    def validate(self) -> None:
        """Raises SpecError or ScheduleError (one line, exit 2) for an unknown name or an
        unusable matrix: among others a strategy a launched script cannot run
        (``--script`` takes ``own`` and ``jit`` only), ``own`` beside built-in workloads
        (they have no recovery of their own), a Poisson start step outside the run
        (:func:`jitbench.faults.schedule.check_start_step`, as ``jitbench run``) and an
        ``mtbf_s`` that no ``periodic:auto`` strategy reads."""
        if not ((self.workloads or self.scripts) and self.strategies and self.faults
                and self.seeds):
            raise SpecError("a sweep needs at least one workload (or --script), strategy, "
                            "fault and seed")
        scripts = [json.dumps([sc.path, sc.args]) for sc in self.scripts]
        for option, values, shown in (
                ("--workloads", self.workloads, self.workloads),
                ("--strategies", self.strategies, self.strategies),
                ("--faults", self.faults, self.faults),
                ("--seeds", self.seeds, self.seeds),
                ("--script", scripts, [" ".join([sc.path, *sc.args]) for sc in self.scripts])):
            dup = duplicate(values)
            if dup is not None:
                raise SpecError(f"{option} gives {shown[dup]} twice: its cells would run twice "
                                "into the same run directories; give each value once")
        for w in self.workloads:
            if w not in WORKLOADS:
                raise SpecError(unknown("workload", w, WORKLOADS))
        if self.scripts:
            for s in self.strategies:
                if s not in SCRIPT_STRATEGIES:
                    raise SpecError(
                        f"strategy {s} does not apply to a launched script: --script runs "
                        f"under {' or '.join(SCRIPT_STRATEGIES)} only (sweep the other "
                        "strategies with --workloads alone)")
        for s in self.strategies:
            if self.workloads and s == "own":
                raise SpecError(
                    f"strategy own is a launched script's own recovery and applies to --script "
                    f"only, not to the workload {self.workloads[0]} (its restart from step 0 "
                    "is none): drop own or --workloads")
            if s != "own":
                Strategy.parse(s)
        for f in self.faults:
            if f not in FAULTS:
                raise SpecError(unknown("fault", f, sorted(FAULTS)))
        if self.repeats < 1:
            raise SpecError(f"--repeats must be >= 1, got {self.repeats}")
        bad = [s for s in self.seeds if not 0 <= s < 2**32]
        if bad:
            raise SpecError(f"--seeds must be in [0, 2**32), got {bad[0]}")
        if self.fault_mtbf_steps is not None and not self.fault_mtbf_steps > 0:
            raise SpecError(f"--fault-mtbf-steps must be > 0, got {self.fault_mtbf_steps}")
        if self.fault_count is not None:
            if self.fault_mtbf_steps is None:
                raise SpecError("--fault-count applies to --fault-mtbf-steps")
            if self.fault_count < 1:
                raise SpecError(f"--fault-count must be >= 1, got {self.fault_count}")
        if self.fault_mtbf_steps is None and self.fault_start_step != 1:
            raise SpecError("fault_start_step (the step a Poisson draw starts at) applies to "
                            "--fault-mtbf-steps; a single fault fires at fault_step")
        if self.fault_mtbf_steps is not None:
            from jitbench.faults.schedule import check_start_step

            check_start_step(self.fault_start_step, self.steps, "--fault-mtbf-steps")
        if self.mtbf_s is not None and not any(
                Strategy.parse(s).auto for s in self.strategies if s != "own"):
            # as jitbench run refuses it: an --mtbf no strategy reads would be ignored
            raise SpecError("--mtbf sizes the interval of periodic:auto, and no strategy of "
                            f"the sweep ({', '.join(self.strategies)}) is periodic:auto "
                            "(for fault arrivals: --fault-mtbf-steps)")
        if self.fault_mtbf_steps is not None and self.faults and not any(
                self._faults(f, seed) for f in self.faults for seed in self.seeds):
            # a seed whose draw is empty is a fault-free sample of the process (kept);
            # a matrix in which every draw is empty would measure no recovery at all
            from jitbench.faults.schedule import empty_draw

            raise SpecError(empty_draw("--fault-mtbf-steps", self.steps, list(self.seeds),
                                       self.fault_mtbf_steps, None, None,
                                       self.fault_start_step))
        for w in self.workloads:
            for s in self.strategies:
                self.spec(w, s, self.faults[0], self.seeds[0]).validate()
        for label in self.script_map():
            for s in self.strategies:
                for f in self.faults:  # a launched script refuses some kinds (storage)
                    self.spec(label, s, f, self.seeds[0]).validate()

    def unused_fields(self) -> tuple[str, ...]:
        """Fields this matrix does not use (:meth:`record` leaves them out, a resume
        does not compare them): ``fault_step`` and ``fault_rank`` under a Poisson
        draw (``fault_mtbf_steps``), ``fault_start_step`` and ``fault_count``
        without one."""
        if self.fault_mtbf_steps is not None:
            return ("fault_step", "fault_rank")
        return ("fault_start_step", "fault_count")

    def record(self) -> dict:
        """The config as ``sweep.json`` records it: every field but the
        :meth:`unused_fields`."""
        unused = self.unused_fields()
        return {k: v for k, v in asdict(self).items() if k not in unused}

    def script_map(self) -> dict[str, SweepScript]:
        """``{workload label: script}`` of the sweep's scripts (:func:`script_labels`)."""
        return dict(zip(script_labels(self.scripts), self.scripts, strict=True))

    def workload_names(self) -> list[str]:
        """Every workload of the matrix: the built-in ones, then the scripts' labels."""
        return [*self.workloads, *script_labels(self.scripts)]

    def _faults(self, fault: str | None, seed: int) -> list[FaultSpec]:
        """The fault plan of a cell: one fault at ``fault_step``, a seeded Poisson trace,
        or none (``fault`` None: the reference)."""
        if not fault:
            return []
        if self.fault_mtbf_steps is not None:
            from jitbench.faults.schedule import poisson_plan

            # as jitbench run --fault-mtbf-steps draws them (one helper, one trace)
            return poisson_plan(fault, self.nproc, self.steps, seed,
                                mtbf_steps=self.fault_mtbf_steps, max_faults=self.fault_count,
                                start_step=self.fault_start_step, where="--fault-mtbf-steps")
        return [FaultSpec(fault, self.fault_rank, self.fault_step)]

    def script_spec(self, label: str, strategy: str, fault: str | None,
                    seed: int) -> ScriptSpec:
        """The launch spec of a script's cell (``fault`` None: its reference), as
        ``jitbench launch --strategy STRATEGY --nproc N --steps STEPS ... -- PATH ARGS``
        would build it; ``{seed}`` in the arguments becomes ``seed``.

        Raises:
            KeyError: ``label`` names no script of the sweep.
        """
        sc = self.script_map()[label]
        faults = self._faults(fault, seed)
        spec = ScriptSpec(script=sc.path, args=[a.replace(SEED_TOKEN, str(seed))
                                                for a in sc.args],
                          strategy=strategy, faults=faults, nproc=self.nproc,
                          hang_floor_s=self.hang_floor_s, hang_first_s=self.hang_first_s,
                          steps=self.steps, seed=seed, label=label)
        spec.max_restarts = max(spec.max_restarts, len(faults) + 1)
        return spec

    def spec(self, workload: str, strategy: str, fault: str | None,
             seed: int) -> RunSpec | ScriptSpec:
        """The run spec of one cell (``fault`` None: the reference); a script's cell
        gets its launch spec (:meth:`script_spec`)."""
        if workload in self.script_map():
            return self.script_spec(workload, strategy, fault, seed)
        wl = WorkloadConfig(name=workload, size=self.sizes.get(workload), steps=self.steps,
                            batch_size=self.batch_size, seed=seed)
        faults = self._faults(fault, seed)
        spec = RunSpec(workload=wl, strategy=strategy, faults=faults, nproc=self.nproc,
                       backend=self.backend,
                       hang_floor_s=self.hang_floor_s, hang_first_s=self.hang_first_s,
                       mtbf_s=self.mtbf_s if Strategy.parse(strategy).auto else None)
        # a campaign's restart budget covers every planned fault (one restart each) + 1
        spec.max_restarts = max(spec.max_restarts, len(faults) + 1)
        return spec

    def cells(self) -> list[tuple[str, str, str, int, int]]:
        """``(workload, strategy, fault, seed, repeat)`` of every run, in run order
        (the scripts' cells after the built-in workloads')."""
        return [(w, s, f, seed, r) for w in self.workload_names() for seed in self.seeds
                for s in self.strategies for f in self.faults for r in range(self.repeats)]


def spec_hash(spec: RunSpec | ScriptSpec) -> str:
    """SHA-256 prefix (12 hex digits) of the spec's JSON: equal for repeats of one config
    (:func:`jitbench.records.spec_hash`, which the gate, ``validate`` and ``report``
    recompute from a row's ``spec_json``)."""
    return records_spec_hash(json.loads(spec.to_json()))


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.-]+", "_", text.lower())


def cell_dir(root: Path, workload: str, strategy: str, fault: str, seed: int, rep: int) -> Path:
    """The run directory of one cell (``script:x.py`` is written ``script_x.py``)."""
    return root / "runs" / f"{_slug(workload)}-{_slug(strategy)}-{_slug(fault)}-s{seed}-r{rep}"


@dataclass
class SweepResult:
    """What :func:`run_sweep` produced."""

    table: object
    """The results (pandas DataFrame), one row per run."""
    sweep_dir: Path
    wall_s: float
    """The sweep's wall time in seconds, over every session (``--resume`` adds one)."""
    session_wall_s: float = 0.0
    """This session's share of ``wall_s`` (s)."""
    already_complete: bool = False
    """A ``resume`` found the sweep complete and ran nothing (no session added)."""


def run_sweep(cfg: SweepConfig, sweep_dir: Path, resume: bool = False, overwrite: bool = False,
              on_run: Callable[[dict], None] | None = None) -> SweepResult:
    """Run every cell of the matrix and write the results table.

    Args:
        cfg: the matrix (validated here).
        sweep_dir: an absent or empty directory (or one to resume).
        resume: keep runs that already have a ``summary.json`` of a run that was not
            interrupted (a sweep that was interrupted continues where it stopped,
            with the run it stopped in).
        overwrite: replace a non-empty ``sweep_dir``.
        on_run: called after every run (and reference) with its record row.

    ``sweep.json`` keeps the first session's ``created``; each session (this one, and
    each earlier one, interrupted or complete) is an entry of ``sessions`` (its start
    and wall time in s), and ``wall_s`` is their sum.

    Raises:
        SpecError: invalid matrix, or a non-empty directory without resume/overwrite;
            a ``resume`` without a sweep to continue, or with ``overwrite``
            (:func:`check_resume_target`), or with another matrix (:func:`check_resume`).
        SweepInterrupted: (a ``KeyboardInterrupt``) Ctrl-C or SIGTERM stopped a run or
            reference: the sweep stops there (the stopped run's directory and summary
            are kept, marked ``interrupted``; ``resume`` runs it again). One that came
            once a launch had ended by itself (``late_interrupt``) stopped nothing: that
            run is finished (its row is kept, ``resume`` does not rerun it) and the
            sweep stops after it. Either way the results table of the cells that
            finished is written and ``sweep.json`` says ``complete`` false, with
            ``runs`` of ``cells`` done; a ``resume`` rewrites the table whole.

    A ``resume`` of a complete sweep runs nothing and adds no session: its
    :class:`SweepResult` says ``already_complete``.
    """
    from jitbench.harness.run import prepare_dir

    cfg.validate()
    if sweep_dir.exists() and not sweep_dir.is_dir():
        raise SpecError(f"sweep directory {sweep_dir} exists and is not a directory")
    if not resume:
        prepare_dir(sweep_dir, overwrite, flag="--out", what="sweep directory",
                    marker="sweep.json")
    else:
        check_resume_target(sweep_dir, overwrite)
        check_resume(cfg, sweep_dir)
        done = _already_complete(sweep_dir)
        if done is not None:  # nothing to run: no session is added
            return done
    sweep_dir.mkdir(parents=True, exist_ok=True)
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    before = recorded_sessions(sweep_dir) if resume else []
    first = _recorded(sweep_dir).get("created") if resume else None
    created = first if isinstance(first, str) else started
    if not resume:
        # the marker first: an interrupted sweep's directory is a sweep directory too
        # (--resume continues it, --overwrite replaces it); rewritten at the end
        (sweep_dir / "sweep.json").write_text(json.dumps(
            {"results_version": RESULTS_VERSION, "config": cfg.record(), "complete": False,
             "created": created, "sessions": [], "wall_s": 0.0}, indent=2))
    t0 = time.monotonic()
    try:
        return _run_cells(cfg, sweep_dir, resume, on_run, t0, before,
                          {"created": created, "started": started})
    except BaseException as e:
        # an interrupted session's time counts too: the sweep's wall time is the sum
        # of its sessions' (the next --resume adds its own)
        ended = "interrupted" if isinstance(e, KeyboardInterrupt) else "stopped"
        _record_interrupted(sweep_dir, before + [
            {"started": started, "wall_s": time.monotonic() - t0, "ended": ended}])
        raise


def _run_cells(cfg: SweepConfig, sweep_dir: Path, resume: bool,
               on_run: Callable[[dict], None] | None, t0: float, before: list[dict],
               when: dict) -> SweepResult:
    """The cells of :func:`run_sweep` (its directory checked and marked), then the
    results table and the final ``sweep.json``; ``before``: the earlier sessions'
    records, ``when``: the sweep's ``created`` and this session's ``started``."""
    import pandas as pd

    from jitbench.harness.run import code_version, machine_fingerprint

    rows: list[dict] = []
    refs: dict[tuple[str, int, str], Path] = {}
    try:
        _cells_into(cfg, sweep_dir, resume, on_run, rows, refs)
    except KeyboardInterrupt as e:
        raise _interrupted(cfg, sweep_dir, rows, refs, isinstance(e, _Late)) from None
    table = pd.DataFrame(rows)
    scripts = cfg.script_map()
    table.to_parquet(sweep_dir / "results.parquet", index=False)
    table.to_csv(sweep_dir / "results.csv", index=False)
    sessions = before + [{"started": when["started"], "wall_s": time.monotonic() - t0,
                          "ended": "complete"}]
    wall_s = sum(x["wall_s"] for x in sessions)
    (sweep_dir / "sweep.json").write_text(json.dumps(
        {"results_version": RESULTS_VERSION, "config": cfg.record(), "complete": True,
         "scripts": [{"workload": label, "script": sc.path, "args": sc.args}
                     for label, sc in scripts.items()], "wall_s": wall_s,
         "sessions": sessions, "runs": len(rows), "cells": len(cfg.cells()),
         "references": len(refs), "code_version": code_version(),
         "machine": machine_fingerprint(), "created": when["created"]}, indent=2))
    return SweepResult(table, sweep_dir, wall_s, sessions[-1]["wall_s"])


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM ended a sweep: ``done`` of its ``total`` cells had finished
    (their rows are in the results table, ``sweep.json`` says ``complete`` false)."""

    def __init__(self, done: int, total: int, late: bool = False):
        super().__init__(f"sweep interrupted after {done} of {total} cells")
        self.done, self.total, self.late = done, total, late


class _Late(KeyboardInterrupt):
    """A Ctrl-C or SIGTERM that came once a launch had ended by itself: the launch
    is finished (kept), the sweep stops after it."""


def _interrupted(cfg: SweepConfig, sweep_dir: Path, rows: list[dict],
                 refs: dict, late: bool) -> SweepInterrupted:
    """Write the results table of the finished cells (``rows``; none: no table) and
    mark ``sweep.json`` incomplete (``runs`` of ``cells``); the exception to raise.
    Further signals are held while the files are written."""
    import pandas as pd

    from jitbench.harness.launch import held_signals

    with held_signals(reraise=False):
        if rows:
            table = pd.DataFrame(rows)
            table.to_parquet(sweep_dir / "results.parquet", index=False)
            table.to_csv(sweep_dir / "results.csv", index=False)
        got = _recorded(sweep_dir)
        if got:
            got.update({"complete": False, "runs": len(rows), "cells": len(cfg.cells()),
                        "references": len(refs)})
            try:
                (sweep_dir / "sweep.json").write_text(json.dumps(got, indent=2, default=str))
            except OSError:
                pass
    return SweepInterrupted(len(rows), len(cfg.cells()), late)


def _already_complete(sweep_dir: Path) -> SweepResult | None:
    """The result of a ``resume`` of a sweep that ``sweep.json`` records complete, with
    its results table (nothing to run); None when there is a cell left to run."""
    from jitbench.errors import InputError
    from jitbench.records import load_results

    got = _recorded(sweep_dir)
    if got.get("complete") is not True:
        return None
    try:
        table = load_results(sweep_dir, require=("workload", "strategy", "fault"))
    except InputError:
        return None  # no table to show: the cells are checked and rewritten
    wall = sum(x["wall_s"] for x in recorded_sessions(sweep_dir))
    return SweepResult(table, sweep_dir, wall, 0.0, already_complete=True)


def _stopped(summary: dict) -> bool:
    """A launch's summary says Ctrl-C or SIGTERM stopped it (not a late interrupt,
    which stopped nothing: that run is finished)."""
    return bool(summary.get("interrupted")) and not summary.get("late_interrupt")


def _as_row(summary: dict) -> dict:
    """The summary of a finished cell as the sweep records it: a late interrupt
    interrupted the sweep, not the run (``interrupted`` false, ``late_interrupt``
    kept), so the row is judged as any finished run."""
    if summary.get("late_interrupt"):
        return {**summary, "interrupted": False}
    return summary


def _cells_into(cfg: SweepConfig, sweep_dir: Path, resume: bool,
                on_run: Callable[[dict], None] | None, rows: list[dict],
                refs: dict[tuple[str, int, str], Path]) -> None:
    """Run (or, on ``resume``, keep) every cell and reference, appending each cell's
    row to ``rows`` and each reference to ``refs``.

    Raises:
        KeyboardInterrupt: a launch was stopped (no row), or a late interrupt came
            (its row appended first).
    """
    from jitbench.harness.run import record_row, run

    scripts = cfg.script_map()
    for w, s, f, seed, rep in cfg.cells():
        if w in scripts:  # a user's script: launched as ``jitbench launch`` launches it
            trainer, launch = "own", run_script
        else:
            # torchft trains through its own DDP and optimizer wrappers: its own reference
            trainer = "torchft" if Strategy.parse(s).entry.launcher == "torchft" else "none"
            launch = run
        if (w, seed, trainer) not in refs:
            ref_dir = sweep_dir / "refs" / (f"{_slug(w)}-s{seed}" if trainer != "torchft"
                                            else f"{w}-s{seed}-{trainer}")
            if not (resume and _finished(ref_dir)):
                out = launch(cfg.spec(w, trainer, None, seed), ref_dir, reference=False,
                             overwrite=True, timeout_s=cfg.timeout_s)
                if _stopped(out.summary):
                    raise KeyboardInterrupt
                if on_run:
                    on_run({**record_row(_as_row(out.summary)), "reference": True})
                if out.summary.get("late_interrupt"):  # the reference is finished: kept
                    raise _Late
            if w in scripts:
                _check_script_reference(w, ref_dir)
            refs[(w, seed, trainer)] = ref_dir
        spec = cfg.spec(w, s, f, seed)
        d = cell_dir(sweep_dir, w, s, f, seed, rep)
        t_run = time.monotonic()
        late = False
        if resume and _finished(d):
            summary = json.loads((d / "summary.json").read_text())
            run_wall = summary.get("run_wall_s")
        else:
            summary = launch(spec, d, reference_from=refs[(w, seed, trainer)], overwrite=True,
                             timeout_s=cfg.timeout_s).summary
            run_wall = time.monotonic() - t_run
            summary["run_wall_s"] = run_wall
            (d / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
            if _stopped(summary):  # no row: the run is redone by --resume
                raise KeyboardInterrupt
            late = bool(summary.get("late_interrupt"))
        row = record_row(_as_row(summary))
        row.update({"fault": f, "repeat": rep, "spec_hash": spec_hash(spec),
                    "spec_json": json.dumps(asdict(spec), sort_keys=True),
                    "run_wall_s": run_wall, "results_version": RESULTS_VERSION})
        rows.append(row)
        if on_run:
            on_run(row)
        if late:
            raise _Late  # this run is finished (its row kept); the sweep stops here


def check_resume_target(sweep_dir: Path, overwrite: bool) -> None:
    """Refuse a ``--resume`` that has no sweep to continue in ``sweep_dir``.

    Args:
        sweep_dir: the ``--out`` directory.
        overwrite: ``--overwrite`` was given too.

    Raises:
        SpecError: (exit 2, one line) with ``--overwrite`` (replace or continue: the two
            contradict); ``sweep_dir`` absent or empty (nothing was recorded there, so
            nothing to resume); a non-empty ``sweep_dir`` without ``sweep.json`` (a run
            directory, someone's files: a resume would write a sweep into it).
    """
    if overwrite:
        raise SpecError("--resume and --overwrite contradict each other (continue the "
                        f"sweep in {sweep_dir}, or replace it): pass one of them")
    if not sweep_dir.exists() or not any(sweep_dir.iterdir()):
        state = "does not exist" if not sweep_dir.exists() else "is empty"
        raise SpecError(f"--resume: sweep directory {sweep_dir} {state}, so there is "
                        "nothing to resume; drop --resume to start a sweep there")
    if not (sweep_dir / "sweep.json").is_file():
        raise SpecError(f"--resume: {sweep_dir} is not a sweep directory (no sweep.json), "
                        "so there is nothing to resume; pass the --out of a sweep, or "
                        "another --out without --resume")


def _recorded(sweep_dir: Path) -> dict:
    """``sweep_dir/sweep.json`` as a dict ({} when it is unreadable or not an object:
    :func:`check_resume` has refused such a file before a resume reads it)."""
    try:
        got = json.loads((sweep_dir / "sweep.json").read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return {}
    return got if isinstance(got, dict) else {}


def recorded_sessions(sweep_dir: Path) -> list[dict]:
    """The sessions ``sweep_dir/sweep.json`` records, each ``{"started", "wall_s" (s),
    "ended": "complete" | "interrupted" | "stopped"}`` (stopped: by an error). A ``sweep.json`` written before sessions
    were recorded, with a ``wall_s``, is one complete session of that time (without
    one: none, its time was not kept)."""
    got = _recorded(sweep_dir)
    sessions = got.get("sessions")
    if isinstance(sessions, list):
        return [x for x in sessions if isinstance(x, dict)
                and isinstance(x.get("wall_s"), (int, float))]
    wall = got.get("wall_s")
    if isinstance(wall, (int, float)) and wall >= 0:
        return [{"started": got.get("created"), "wall_s": float(wall), "ended": "complete"}]
    return []


def _record_interrupted(sweep_dir: Path, sessions: list[dict]) -> None:
    """Add an interrupted session to ``sweep_dir/sweep.json`` (``sessions``, the
    total ``wall_s``), keeping the rest of it; best effort (an unwritable directory
    keeps the record it had)."""
    got = _recorded(sweep_dir)
    if not got:
        return
    got.update({"sessions": sessions, "wall_s": sum(x["wall_s"] for x in sessions)})
    try:
        (sweep_dir / "sweep.json").write_text(json.dumps(got, indent=2, default=str))
    except OSError:
        pass


RESUME_FREE = ("timeout_s",)
"""Config fields a ``--resume`` may change: they bound a launch, not what it records."""

OPTION_OF = {"workloads": "--workloads", "scripts": "--script/--script-args",
             "strategies": "--strategies", "faults": "--faults", "seeds": "--seeds",
             "repeats": "--repeats", "steps": "--steps", "fault_step": "--fault-step",
             "fault_rank": "--fault-rank", "nproc": "--nproc", "backend": "--backend",
             "batch_size": "--batch-size", "sizes": "--sizes", "mtbf_s": "--mtbf",
             "fault_mtbf_steps": "--fault-mtbf-steps", "fault_count": "--fault-count",
             "fault_start_step": "--fault-step"}
"""The ``jitbench sweep`` option of each config field (a refused ``--resume`` names
the option; ``fault_start_step`` is ``--fault-step`` with ``--fault-mtbf-steps``)."""


def check_resume(cfg: SweepConfig, sweep_dir: Path) -> None:
    """Refuse to resume ``sweep_dir`` with a matrix or settings other than those its
    ``sweep.json`` records (``config``), and a results table there with a row of a
    cell that ``cfg`` does not run: the resumed sweep would record another
    experiment under the same name, and its table would drop the rows of the cells
    it no longer has. A field missing from an older ``sweep.json`` is compared with
    its default; :data:`RESUME_FREE` fields may differ, and the requested matrix's
    :meth:`SweepConfig.unused_fields` are not compared. A field that differs is named
    by its option (:data:`OPTION_OF`).

    Args:
        cfg: the requested matrix.
        sweep_dir: a directory holding ``sweep.json``.

    Raises:
        SpecError: (exit 2, one line) an unreadable or malformed ``sweep.json``, one
            without ``config``, a field that differs (each named, recorded -> requested),
            or a recorded row outside the matrix.
    """
    import dataclasses

    path = sweep_dir / "sweep.json"
    try:
        recorded = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise SpecError(f"--resume: cannot read {path} ({type(e).__name__}: {e})") from None
    config = recorded.get("config") if isinstance(recorded, dict) else None
    if not isinstance(config, dict):
        raise SpecError(f"--resume: {path} records no sweep config, so the matrix cannot be "
                        "checked (start a new sweep, or --overwrite it)")
    requested = json.loads(json.dumps(asdict(cfg), default=str))
    defaults = json.loads(json.dumps(asdict(SweepConfig()), default=str))
    diffs = []
    unused = cfg.unused_fields()  # (an older sweep.json records them too: not compared)
    for f in dataclasses.fields(SweepConfig):
        if f.name in RESUME_FREE or f.name in unused:
            continue
        was = config.get(f.name, defaults[f.name])
        if was != requested[f.name]:
            diffs.append(f"{OPTION_OF.get(f.name, f.name)} {json.dumps(was)} -> "
                         f"{json.dumps(requested[f.name])}")
    if diffs:
        raise SpecError(f"--resume: {sweep_dir} was recorded with another matrix ("
                        + "; ".join(diffs) + "): resume with its options, or start a new "
                        "sweep in another --out")
    _check_recorded_rows(cfg, sweep_dir)


def _check_recorded_rows(cfg: SweepConfig, sweep_dir: Path) -> None:
    """Every row of ``sweep_dir``'s results table is a cell of ``cfg`` (so the
    rewritten table keeps it).

    Raises:
        SpecError: a row of a cell outside the matrix, or an unreadable table (one line).
    """
    from jitbench.errors import InputError
    from jitbench.records import find_table, load_results

    table = find_table(sweep_dir)
    if table is None or not table.name.startswith("results"):
        return
    try:
        t = load_results(table, require=("workload", "strategy", "fault", "seed", "repeat"))
    except InputError as e:
        raise SpecError(f"--resume: {e}") from None
    cells = {(w, s, f, str(seed), str(r)) for w, s, f, seed, r in cfg.cells()}
    for i, row in enumerate(t.itertuples(index=False)):
        key = (str(row.workload), str(row.strategy), str(row.fault), _whole(row.seed),
               _whole(row.repeat))
        if key not in cells:
            raise SpecError(f"--resume: {table} row {i + 1} ({' '.join(key[:3])} seed "
                            f"{key[3]} repeat {key[4]}) is no cell of the requested matrix: "
                            "resuming would drop it")


def _whole(v) -> str:
    """A seed or repeat cell as the integer text a cell's key has (``3.0`` -> ``3``)."""
    try:
        f = float(v)
        return str(int(f)) if f.is_integer() else str(v)
    except (TypeError, ValueError):
        return str(v)


def _finished(run_dir: Path) -> bool:
    """``run_dir`` holds the summary of a run that no Ctrl-C or SIGTERM stopped
    (``--resume`` keeps it; a ``late_interrupt`` stopped nothing: finished); an
    unreadable summary counts as not finished."""
    try:
        return not _stopped(json.loads((run_dir / "summary.json").read_text()))
    except (OSError, ValueError, AttributeError):
        return False


def _check_script_reference(label: str, ref_dir: Path) -> None:
    """Stop the sweep when a script's fault-free launch did not complete: no cell of
    it could be compared (a script that fails by itself fails in every cell).

    Raises:
        KeyboardInterrupt: the reference was interrupted.
        SpecError: the script is not a training script (exit 2).
        RunFailedError: it did not complete (exit 3); the line says why and where to look.
    """
    try:
        summary = _as_row(json.loads((ref_dir / "summary.json").read_text()))
    except (OSError, ValueError, AttributeError):
        summary = {}
    status, why = verdict(summary) if summary else (ExitStatus.RUN_FAILED, "no summary")
    if status == ExitStatus.OK:
        return
    if status == ExitStatus.INTERRUPTED:
        raise KeyboardInterrupt
    where = f"see {ref_dir / 'agent.log'}"
    if status == ExitStatus.INPUT:
        raise SpecError(f"{label}: {why} ({where})")
    raise RunFailedError(f"{label}: its fault-free launch did not complete, so no run of it "
                         f"can be compared: {why} ({where})")
