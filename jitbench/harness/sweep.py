"""Sweeps: workloads x strategies x faults (x seeds x repeats) into one results table.

A sweep directory::

    SWEEP_DIR/
      sweep.json                  the sweep's config, provenance and wall time
      refs/<workload>-s<seed>/    one fault-free reference run per training spec
      runs/<workload>-<strategy>-<fault>-s<seed>-r<repeat>/   one run directory each
      results.parquet, results.csv   one row per run (RESULTS_VERSION columns below)

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

import hashlib
import json
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from jitbench import hang
from jitbench.faults import FAULTS, FaultSpec
from jitbench.harness.spec import RunSpec, SpecError, Strategy
from jitbench.records import RESULTS_VERSION
from jitbench.workloads import WORKLOADS, WorkloadConfig


@dataclass
class SweepConfig:
    """The matrix of a sweep and the settings shared by every run.

    The defaults ({gpt, resnet} x {jit, periodic:5, periodic-async:5, none} x
    {kill, nccl-hang}: 16 runs and 2 references) took about 12-15 minutes on
    the 2-core development machine (see README).
    """

    workloads: list[str] = field(default_factory=lambda: ["gpt", "resnet"])
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
    periodic strategies replay the steps since their last checkpoint)."""
    fault_rank: int = 1
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
    hang_floor_s: float = hang.FLOOR_S
    """Hang bound floor of every run (s; :mod:`jitbench.hang`)."""
    hang_first_s: float = hang.FIRST_S
    """Hang bound before any step time is known (s)."""
    timeout_s: float = 600.0
    """Per launch."""

    def validate(self) -> None:
        """Raises SpecError (one line) for an unknown name or an unusable matrix."""
        if not (self.workloads and self.strategies and self.faults and self.seeds):
            raise SpecError("a sweep needs at least one workload, strategy, fault and seed")
        for w in self.workloads:
            if w not in WORKLOADS:
                raise SpecError(f"unknown workload {w!r}; one of {', '.join(WORKLOADS)}")
        for s in self.strategies:
            Strategy.parse(s)
        for f in self.faults:
            if f not in FAULTS:
                raise SpecError(f"unknown fault {f!r}; one of {', '.join(sorted(FAULTS))}")
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
        for w in self.workloads:
            for s in self.strategies:
                self.spec(w, s, self.faults[0], self.seeds[0]).validate()

    def spec(self, workload: str, strategy: str, fault: str | None, seed: int) -> RunSpec:
        """The run spec of one cell (``fault`` None: the reference)."""
        wl = WorkloadConfig(name=workload, size=self.sizes.get(workload), steps=self.steps,
                            batch_size=self.batch_size, seed=seed)
        if not fault:
            faults = []
        elif self.fault_mtbf_steps is not None:
            from jitbench.faults.schedule import poisson

            faults = poisson([fault], list(range(self.nproc)), self.steps, seed,
                             mtbf_steps=self.fault_mtbf_steps, max_faults=self.fault_count)
        else:
            faults = [FaultSpec(fault, self.fault_rank, self.fault_step)]
        spec = RunSpec(workload=wl, strategy=strategy, faults=faults, nproc=self.nproc,
                       backend=self.backend,
                       hang_floor_s=self.hang_floor_s, hang_first_s=self.hang_first_s,
                       mtbf_s=self.mtbf_s if Strategy.parse(strategy).auto else None)
        # a campaign's restart budget covers every planned fault (one restart each) + 1
        spec.max_restarts = max(spec.max_restarts, len(faults) + 1)
        return spec

    def cells(self) -> list[tuple[str, str, str, int, int]]:
        """``(workload, strategy, fault, seed, repeat)`` of every run, in run order."""
        return [(w, s, f, seed, r) for w in self.workloads for seed in self.seeds
                for s in self.strategies for f in self.faults for r in range(self.repeats)]


def spec_hash(spec: RunSpec) -> str:
    """SHA-256 prefix (12 hex digits) of the spec's JSON: equal for repeats of one config."""
    return hashlib.sha256(spec.to_json().encode()).hexdigest()[:12]


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.-]+", "_", text.lower())


def cell_dir(root: Path, workload: str, strategy: str, fault: str, seed: int, rep: int) -> Path:
    return root / "runs" / f"{workload}-{_slug(strategy)}-{_slug(fault)}-s{seed}-r{rep}"


@dataclass
class SweepResult:
    """What :func:`run_sweep` produced."""

    table: object
    """The results (pandas DataFrame), one row per run."""
    sweep_dir: Path
    wall_s: float


def run_sweep(cfg: SweepConfig, sweep_dir: Path, resume: bool = False, overwrite: bool = False,
              on_run: Callable[[dict], None] | None = None) -> SweepResult:
    """Run every cell of the matrix and write the results table.

    Args:
        cfg: the matrix (validated here).
        sweep_dir: an absent or empty directory (or one to resume).
        resume: keep runs that already have a ``summary.json`` (a sweep that was
            interrupted continues where it stopped).
        overwrite: replace a non-empty ``sweep_dir``.
        on_run: called after every run (and reference) with its record row.

    Raises:
        SpecError: invalid matrix, or a non-empty directory without resume/overwrite.
    """
    import pandas as pd

    from jitbench.harness.run import (
        code_version,
        machine_fingerprint,
        prepare_dir,
        record_row,
        run,
    )

    cfg.validate()
    if sweep_dir.exists() and not sweep_dir.is_dir():
        raise SpecError(f"sweep directory {sweep_dir} exists and is not a directory")
    if not resume:
        prepare_dir(sweep_dir, overwrite, flag="--out")
    sweep_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    rows: list[dict] = []
    refs: dict[tuple[str, int, str], Path] = {}
    for w, s, f, seed, rep in cfg.cells():
        # torchft trains through its own DDP and optimizer wrappers: its own reference
        trainer = "torchft" if Strategy.parse(s).entry.launcher == "torchft" else "none"
        if (w, seed, trainer) not in refs:
            ref_dir = sweep_dir / "refs" / (f"{w}-s{seed}" if trainer == "none"
                                            else f"{w}-s{seed}-{trainer}")
            if not (resume and (ref_dir / "summary.json").exists()):
                out = run(cfg.spec(w, trainer, None, seed), ref_dir, reference=False,
                          overwrite=True, timeout_s=cfg.timeout_s)
                if on_run:
                    on_run({**record_row(out.summary), "reference": True})
            refs[(w, seed, trainer)] = ref_dir
        spec = cfg.spec(w, s, f, seed)
        d = cell_dir(sweep_dir, w, s, f, seed, rep)
        t_run = time.monotonic()
        if resume and (d / "summary.json").exists():
            summary = json.loads((d / "summary.json").read_text())
            run_wall = summary.get("run_wall_s")
        else:
            summary = run(spec, d, reference_from=refs[(w, seed, trainer)], overwrite=True,
                          timeout_s=cfg.timeout_s).summary
            run_wall = time.monotonic() - t_run
            summary["run_wall_s"] = run_wall
            (d / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
        row = record_row(summary)
        row.update({"fault": f, "repeat": rep, "spec_hash": spec_hash(spec),
                    "spec_json": json.dumps(asdict(spec), sort_keys=True),
                    "run_wall_s": run_wall, "results_version": RESULTS_VERSION})
        rows.append(row)
        if on_run:
            on_run(row)
    wall_s = time.monotonic() - t0
    table = pd.DataFrame(rows)
    table.to_parquet(sweep_dir / "results.parquet", index=False)
    table.to_csv(sweep_dir / "results.csv", index=False)
    (sweep_dir / "sweep.json").write_text(json.dumps(
        {"results_version": RESULTS_VERSION, "config": asdict(cfg), "wall_s": wall_s,
         "runs": len(rows), "references": len(refs), "code_version": code_version(),
         "machine": machine_fingerprint(),
         "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}, indent=2))
    return SweepResult(table, sweep_dir, wall_s)


