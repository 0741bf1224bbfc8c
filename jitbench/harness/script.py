"""A user's own training script under jitbench (``jitbench launch -- SCRIPT``).

The script is started through the elastic agent exactly as ``torchrun`` starts
it (the same ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``/``MASTER_ADDR``/
``MASTER_PORT``/``TORCHELASTIC_*`` environment, ``--nproc-per-node``,
``--nnodes``, rendezvous and restart budget), with one difference: the agent's
entrypoint is :mod:`jitbench.harness.boot`, which installs the hooks of
:mod:`jitbench.harness.hooks` and then runs the script as ``python SCRIPT
ARGS`` (or ``python -m MODULE ARGS``) would, in the same process::

    python -m torch.distributed.run --standalone --nnodes 1 --nproc-per-node N
        --max-restarts R --monitor-interval 0.1 -m jitbench.harness.boot RUN_DIR

The run directory has the layout of :mod:`jitbench.harness.run` (``spec.json``
here holds a :class:`ScriptSpec`); the summary has the same metrics, derived
from the same events, and ``state_equal``/``max_abs_diff`` against the same
script run without the fault (``reference/``), from the model and optimizer
state the hooks capture when the script returns.

Under ``--strategy own`` the script recovers with whatever it does itself
(its own checkpoints, or nothing: a restart from step 0), which is what is
measured; jitbench promises nothing about it, so ``state_equal`` is reported,
not judged (``bitwise_promised`` false). Under ``--strategy jit`` jitbench
checkpoints it transparently (:mod:`jitbench.harness.transparent`) and holds
it to the promise of ``jitbench run --strategy jit``: the state equals the
fault-free run's bitwise and each failure replays at most one step, unless a
``warning`` of the hooks said the script does something they cannot follow
exactly (summary ``warnings``; ``bitwise_promised`` false then).
"""

from __future__ import annotations

import importlib.util
import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from jitbench import hang, phases
from jitbench.errors import ScheduleError, SpecError
from jitbench.faults import FAULTS, FaultSpec
from jitbench.faults.schedule import UNKNOWN_STEPS, check_plan
from jitbench.harness import metrics
from jitbench.harness.launch import LaunchResult, interrupts, launch_agent, torchrun_args
from jitbench.harness.run import (
    RunOutcome,
    code_version,
    decisions,
    fired_faults,
    launch_events,
    launch_keys,
    machine_fingerprint,
    prepare_dir,
    record_outcome,
    recovery_means,
    reference_figures,
    reference_keys,
    replay_keys,
)
from jitbench.harness.run import end_reason as run_end_reason
from jitbench.harness.spec import nnodes_range
from jitbench.records import SUMMARY_VERSION
from jitbench.runtime import strategies
from jitbench.runtime.config import RuntimeConfig

SCRIPT_SPEC_VERSION = 1
STRATEGIES = ("own", "jit")
"""Strategies of a launched script: ``own`` (the script recovers by itself) and
``jit`` (transparent JIT checkpointing, :mod:`jitbench.harness.transparent`)."""
RUN_DIR_TOKEN = "{run_dir}"
"""Replaced in the script's arguments by each launch's own run directory (the
faulty run's, the reference's), so the two never share the script's checkpoints."""
SCRIPT_SAMPLES_REASON = ("not compared: jitbench does not record the samples a launched "
                         "script reads")
"""A launch's ``sample_stream_reason``: its ``sample_stream_equal`` is always empty. When a
reference was compared, ``; loss_equal compares its per-step losses`` follows."""
EXIT_NOT_TRAINING = 78
"""Boot exit status: the script reached no optimizer step within ``first_step_s``."""
EXIT_SCRIPT_ERROR = 79
"""Boot exit status: the script failed by itself (no fault fired in the attempt)."""
SCRIPT_ERRORS = {EXIT_NOT_TRAINING: "input", EXIT_SCRIPT_ERROR: "script"}
"""Boot exit statuses that no restart fixes, as the summary's ``error_kind``."""
STOP_MARKER = "script_error"
"""File a worker creates in its run directory when it exits with one of
:data:`SCRIPT_ERRORS`: the harness then stops the agent instead of letting it
restart the script into the same error."""
UNSUPPORTED_POINTS = {
    "write": "a jitbench checkpoint write; a launched script under own writes its "
             "checkpoints with its own code",
    "restore": "a jitbench restore; a launched script under own restores by itself",
}
"""Injection points a launched script does not have, and why."""


def module_found(name: str) -> bool:
    """Whether ``python -m NAME`` finds the module from this directory (``-m`` puts the
    current directory first on ``sys.path``, as the agent's workers do)."""
    import os
    import sys

    sys.path.insert(0, os.getcwd())
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False
    finally:
        sys.path.remove(os.getcwd())


def unsupported_fault(f: FaultSpec) -> str | None:
    """Why fault ``f`` cannot be injected into a launched script (None: it can).

    Storage faults act on jitbench's own checkpoint writes and reads
    (:mod:`jitbench.faults.storage`), which a script under ``own`` does not use;
    the ``write`` and ``restore`` injection points likewise. Every other kind
    fires at a step, a micro-batch, the gradient collective or the optimizer
    step, which the hooks find in any DDP script."""
    cls = FAULTS.get(f.kind)
    if cls is None:
        return None  # check_plan names the unknown kind
    if cls.family == "storage":
        return (f"{f.kind} is a storage fault: it hits jitbench's own checkpoint writes and "
                "reads, and a launched script writes its checkpoints with its own code")
    if cls.in_reference:
        return (f"{f.kind} perturbs jitbench's own training (its fp16 GradScaler), and a "
                "launched script trains with its own code")
    at = f.params.get("at")
    if at in UNSUPPORTED_POINTS:
        return f"injection point {at} is {UNSUPPORTED_POINTS[at]} (use step, micro:M, " \
               "collective or optimizer)"
    return None


@dataclass
class ScriptSpec:
    """One launch of a user's script: what runs, its faults, its job and detection settings."""

    script: str | None = None
    """Absolute path of the Python file (or None with ``module``)."""
    module: str | None = None
    """Module run as ``python -m MODULE`` (or None with ``script``)."""
    args: list[str] = field(default_factory=list)
    """The script's arguments; ``{run_dir}`` is replaced by each launch's run directory."""
    strategy: str = "own"
    """``own`` (the script recovers by itself)."""
    faults: list[FaultSpec] = field(default_factory=list)
    nproc: int = 2
    """Ranks per node (``--nproc-per-node``)."""
    nnodes: int = 1
    """Nodes (MAX of ``--nnodes MIN:MAX``)."""
    min_nodes: int | None = None
    """MIN of ``--nnodes MIN:MAX`` (None: ``nnodes``), passed to torch elastic."""
    rdzv_endpoint: str | None = None
    rdzv_id: str = "jitbench"
    max_restarts: int = 3
    """The elastic agent's restart budget (restarts of the whole worker group)."""
    hang_floor_s: float = hang.FLOOR_S
    """Hang bound floor (s; :class:`jitbench.hang.HangSettings`)."""
    hang_factor: float = hang.FACTOR
    hang_first_s: float = hang.FIRST_S
    pg_timeout_s: float = 300.0
    """Process-group timeout (s) applied where the script gives none."""
    first_step_s: float = 300.0
    """Bound (s) from a process's start to its first optimizer step: a script that
    reaches none (while no step is in progress) is not a training script."""
    steps: int | None = None
    """The script's optimizer steps, if the user says (places and checks faults)."""
    seed: int = 0
    """Seed of random fault schedules (the script seeds itself)."""
    save_final_state: bool = True
    """Rank 0 writes the final model and optimizer state (for ``state_equal``)."""
    hooks: bool = True
    """Install jitbench's hooks and runtime. False: the script runs as ``torchrun``
    runs it, with only the step clock (the ``none`` arm of ``jitbench overhead``
    on a script; needs ``step_timer``)."""
    step_timer: bool = False
    """Rank 0 records every optimizer step's end (:mod:`jitbench.harness.steptimer`)."""
    ckpt_dir: str | None = None
    """Unused by ``own`` (the script keeps its own checkpoints); here for the run-directory checks."""
    label: str | None = None
    """The ``workload`` column of its summary and records (None: the script's file name
    or module, :attr:`name`); a sweep names its script cells ``script:NAME``."""
    kind: str = "script"
    version: int = SCRIPT_SPEC_VERSION

    @property
    def world_size(self) -> int:
        return self.nproc * self.nnodes

    @property
    def plan_steps(self) -> int:
        """The steps faults are checked against (``steps``, else :data:`UNKNOWN_STEPS`)."""
        return self.steps if self.steps is not None else UNKNOWN_STEPS

    @property
    def name(self) -> str:
        """The script's file name or module, for tables (``workload`` column)."""
        return Path(self.script).name if self.script else str(self.module)

    @property
    def workload(self) -> str:
        """The ``workload`` column of the summary: :attr:`label`, else :attr:`name`."""
        return self.label or self.name

    @property
    def runtime_strategy(self) -> str:
        """The strategy jitbench's runtime runs beside the script: ``jit`` (transparent
        JIT), else ``none`` (under ``own`` jitbench writes no checkpoint)."""
        return "jit" if self.strategy == "jit" else "none"

    def runtime_config(self, ckpt_dir: str) -> RuntimeConfig:
        """The runtime settings of a launched script: no checkpoints of jitbench's
        (strategy ``none``), the hang bound of this spec."""
        return RuntimeConfig(strategy=self.runtime_strategy,
                             ckpt_dir=ckpt_dir, hang_floor_s=self.hang_floor_s,
                             hang_factor=self.hang_factor, hang_first_s=self.hang_first_s)

    def validate_command(self) -> None:
        """Check that the command names one script that exists (or one importable module):
        the first thing a launch checks, before anything the options say.

        Raises:
            SpecError: no script or module, a missing script or one that is not a file,
                a module python cannot import here.
        """
        if (self.script is None) == (self.module is None):
            raise SpecError("give a script: jitbench launch [OPTIONS] -- SCRIPT.py [ARGS] "
                            "(or -- -m MODULE [ARGS])")
        if self.script is not None:
            p = Path(self.script)
            if not p.exists():
                raise SpecError(f"script {self.script} does not exist")
            if not p.is_file():
                raise SpecError(f"script {self.script} is not a file")
        elif not module_found(self.module):
            raise SpecError(f"module {self.module} is not importable here (python -m "
                            f"{self.module} would fail)")

    def validate(self) -> None:
        """Check every field.

        Raises:
            SpecError: the first problem, one line (a missing script, ``jit``, a
                fault a launched script cannot take, ...).
        """
        self.validate_command()
        if self.strategy not in STRATEGIES:
            raise SpecError(f"a launched script runs under --strategy own (its own recovery) "
                            f"or jit (transparent JIT checkpointing), got {self.strategy!r}")
        for name in ("nproc", "nnodes"):
            if getattr(self, name) < 1:
                raise SpecError(f"--{name} must be >= 1, got {getattr(self, name)}")
        if self.nnodes > 1 and not self.rdzv_endpoint:
            raise SpecError("several nodes need --rdzv-endpoint HOST:PORT")
        if self.min_nodes is not None and not 1 <= self.min_nodes <= self.nnodes:
            raise SpecError(f"--nnodes MIN:MAX needs 1 <= MIN <= MAX, got "
                            f"{self.min_nodes}:{self.nnodes}")
        if not self.hooks and (self.faults or not self.step_timer):
            raise SpecError("a launch without hooks takes no faults and needs the step timer "
                            "(it is the none arm of jitbench overhead)")
        if self.max_restarts < 0:
            raise SpecError(f"--max-restarts must be >= 0, got {self.max_restarts}")
        for name in ("hang_floor_s", "hang_factor", "hang_first_s", "pg_timeout_s",
                     "first_step_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise SpecError(f"--{name.replace('_', '-')} must be a finite number > 0, "
                                f"got {value}")
        if self.steps is not None and self.steps < 1:
            raise SpecError(f"--steps must be >= 1, got {self.steps}")
        for f in self.faults:
            why = unsupported_fault(f)
            if why:
                raise SpecError(f"fault {f.id} cannot be injected into a launched script: {why}")
        try:
            check_plan(self.faults, self.world_size, self.plan_steps, None, run=self)
        except ScheduleError as exc:
            raise SpecError(str(exc)) from None

    def script_args(self, run_dir: Path) -> list[str]:
        """The script's arguments for a launch in ``run_dir`` (``{run_dir}`` replaced)."""
        return [a.replace(RUN_DIR_TOKEN, str(run_dir)) for a in self.args]

    def training_key(self) -> str:
        """What the script trains: two specs with the same key run the same script with
        the same arguments on the same world (a reference is shared between them)."""
        return json.dumps({"script": self.script, "module": self.module, "args": self.args,
                           "nproc": self.nproc, "nnodes": self.nnodes}, sort_keys=True)

    def without_faults(self) -> ScriptSpec:
        """The same launch, fault-free (the reference)."""
        return ScriptSpec.from_dict({**asdict(self), "faults": []})

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict) -> ScriptSpec:
        d = dict(d)
        d["faults"] = [FaultSpec(**f) for f in d.get("faults", [])]
        return cls(**d)

    @classmethod
    def load(cls, path: str | Path) -> ScriptSpec:
        """Read a ``spec.json`` written by :func:`run_script`.

        Raises:
            SpecError: not a launched script's spec.
        """
        try:
            d = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise SpecError(f"{path}: not readable as a spec ({exc})") from exc
        if d.get("kind") != "script":
            raise SpecError(f"{path} is not the spec of a launched script")
        return cls.from_dict(d)


def agent_command(spec: ScriptSpec, run_dir: Path) -> list[str]:
    """``python -m torch.distributed.run [torchrun options] -m jitbench.harness.boot RUN_DIR``."""
    import sys

    return [sys.executable, "-m", "torch.distributed.run",
            *torchrun_args(spec.nproc, nnodes_range(spec.min_nodes, spec.nnodes),
                           spec.max_restarts, run_dir,
                           spec.rdzv_endpoint, spec.rdzv_id),
            "-m", "jitbench.harness.boot", str(run_dir)]


def execute(spec: ScriptSpec, run_dir: Path, progress: Callable[[dict], None] | None = None,
            timeout_s: float | None = None) -> LaunchResult:
    """Write the spec into ``run_dir`` and run the script through the agent; the agent
    is stopped early when a worker reports an error no restart fixes
    (:data:`STOP_MARKER`)."""
    run_dir = Path(run_dir).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "spec.json").write_text(spec.to_json())
    marker = run_dir / STOP_MARKER
    return launch_agent(agent_command(spec, run_dir), run_dir, None, progress, timeout_s,
                        stop=marker.exists)


def script_error(run_dir: Path, events: list[dict]) -> dict:
    """``error``, ``error_kind`` (``input``: not a training script; ``script``: it
    failed by itself) and ``error_tail`` (the last lines of its traceback) of the first
    such ``error`` event, or Nones."""
    errs = [e for e in events if e["event"] == "error" and e.get("code") in SCRIPT_ERRORS]
    if not errs:
        return {"error": None, "error_kind": None, "error_tail": None}
    e = errs[0]
    return {"error": f"rank {e['rank']}, attempt {e['attempt']}: {e['error']}",
            "error_kind": SCRIPT_ERRORS[e["code"]], "error_tail": e.get("tail")}


def losses(events: list[dict], rank: int = 0) -> dict[int, float]:
    """``{step: loss}`` of ``rank``'s last execution of each step (a replayed step
    counts once, as executed last)."""
    out: dict[int, float] = {}
    for e in events:
        if (e["event"] == "step" and e["phase"] == "end" and e["rank"] == rank
                and e.get("loss") is not None):
            out[e["step"]] = e["loss"]
    return out


NO_STEP = "not a training script: it ended without reaching an optimizer step"
"""Error and end reason of a launch whose script ended without an optimizer step."""


def stepped(events: list[dict]) -> bool:
    """Whether any rank ended an optimizer step (a ``step`` end event) in ``events``."""
    return any(e["event"] == "step" and e["phase"] == "end" for e in events)


def final_step(events: list[dict]) -> int:
    """The step every rank's ``done`` names in the last attempt with ``done`` events
    (the script decides how many steps it runs; 0: none finished)."""
    done = [e for e in events if e["event"] == "done"]
    if not done:
        return 0
    last = max(e["attempt"] for e in done)
    return max(e["step"] for e in done if e["attempt"] == last)


def end_reason(spec: ScriptSpec, m: metrics.RunMetrics, res: LaunchResult, err: dict,
               timeout_s: float | None = None) -> str:
    """Why the launch ended, one line: ``completed``, the script's own failure, or what
    stopped it (:func:`jitbench.harness.run.end_reason`; ``timeout_s`` named as given)."""
    if not m.completed and err["error_kind"] == "script":
        return f"the script failed by itself (no fault fired): {err['error']}"
    if not m.completed and err["error_kind"] == "input":
        return f"not a training script: {err['error']}"
    return run_end_reason(spec, m, res, timeout_s)


def summarize(spec: ScriptSpec, run_dir: Path, res: LaunchResult, ref: LaunchResult | None,
              ref_dir: Path | None = None, timeout_s: float | None = None,
              ref_skipped: bool = False) -> dict:
    """Metrics, oracles and provenance of a finished launch, with the keys of
    :func:`jitbench.harness.run.summarize` (``workload`` is the spec's
    :attr:`~ScriptSpec.workload`, ``steps`` the step its ranks finished at) plus
    ``script``, ``args``, ``replay_promised`` (false under ``own``: no replay bound,
    so ``replay_ok`` None is no violation), ``loss_equal`` (every step's loss on rank 0
    equals the reference's, bitwise; None without losses) and ``error_tail``.
    ``decisions`` are :func:`jitbench.harness.run.decisions` of the runtime's strategy
    (:attr:`ScriptSpec.runtime_strategy`); ``sample_stream_reason`` says why
    ``sample_stream_equal`` is always empty (the script's samples are not recorded).

    The launch and its reference follow run's rules (the same functions): a launch
    the harness stopped is ``harness_stopped`` and so are its failures that had not
    recovered, with no detection for the failures the stop declared; a reference cut
    short or not started (``ref_skipped``) is ``reference_complete`` false, says why in
    ``reference_cut_short`` and the ``end_reason`` of a completed launch, and is never
    compared; ``timeout_s`` (s) is named as given."""
    entry = strategies.parse(spec.runtime_strategy).entry
    stop, evs, table = launch_events(run_dir, spec.world_size)
    steps = final_step(evs) or spec.steps or 0
    m = metrics.compute(run_dir, steps, spec.world_size, events=evs, phase_table=table,
                        strategy=spec.runtime_strategy, stop=stop)
    err = script_error(run_dir, evs)
    summary: dict = {"summary_version": SUMMARY_VERSION, "run_dir": str(run_dir),
                     "workload": spec.workload, "size": None, "script": spec.script or spec.module,
                     "args": spec.args, "strategy": spec.strategy,
                     "world_size": spec.world_size, "steps": steps, "seed": spec.seed,
                     "faults": [asdict(f) for f in spec.faults], "deterministic_reduce": False,
                     **launch_keys(res, stop, timeout_s)}
    fails = m.failures
    summary.update(recovery_means(m, spec.world_size))
    warnings = [e for e in evs if e["event"] == "warning" and e.get("where") == "hooks"]
    summary["warnings"] = sorted({e["message"] for e in warnings})
    if spec.strategy == "jit":
        # transparent JIT: the promise of ``jitbench run --strategy jit``, unless the
        # hooks said the script does something they cannot follow exactly
        summary.update(replay_keys("jit", fails, evs, m.completed))
        summary["replay_promised"] = True
        summary["bitwise_promised"] = not any(e.get("inexact") for e in warnings)
    else:
        summary["expected_replayed_steps"] = None  # the script's checkpoints are its own
        summary["last_commit_step"] = None
        summary["replay_ok"] = None
        summary["replay_promise"] = "the script's own recovery: nothing promised"
        summary["replay_promised"] = False  # replay_ok None is no violation
        summary["bitwise_promised"] = False
    summary["late_replacements"] = 0
    summary["num_failures"] = len(fails)
    summary["injected_failures"] = sum(1 for f in fails if f.injected)
    summary["own_failures"] = sum(1 for f in fails if not f.injected)
    summary["trigger"] = fails[0].trigger if fails else None
    summary["restored_kind"] = fails[0].restored_kind if fails else None
    summary["checkpoint_interval"] = None
    summary["auto_interval"] = None
    for k in ("completed", "final_step", "attempts", "step_s", "train_wall_s", "goodput",
              "checkpoint_saves", "checkpoint_s", "checkpoint_stall_gpu_s", "wasted_gpu_s",
              "loss_first", "loss_last"):
        summary[k] = getattr(m, k)
    summary["restore_skipped"] = []
    summary["slow_windows"] = m.slow_windows
    if m.slow_windows:
        vals = [w["step_s"] for w in m.slow_windows if w["step_s"] is not None]
        summary["slow_window_step_s"] = max(vals) if vals else None
        summary["normal_step_s"] = m.normal_step_s
    summary["fired"] = fired_faults(run_dir, evs)
    fired_ids = {f["id"] for f in summary["fired"]}
    summary["unfired"] = [f.id for f in spec.faults if f.id not in fired_ids]
    summary["unfired_faults"] = len(summary["unfired"])
    if (err["error_kind"] is None and res.returncode == 0 and not res.interrupted
            and not res.timed_out and not stepped(evs)):
        # the script ended, on every rank, without an optimizer step: nothing was trained
        # or measured (README: not a training script is bad input, exit 2, as is one
        # that reaches no step within --first-step-s)
        summary["completed"] = False
        err = {"error": NO_STEP, "error_kind": "input", "error_tail": None}
        summary["end_reason"] = NO_STEP
    else:
        summary["end_reason"] = end_reason(spec, m, res, err, timeout_s)
    ref_dir = ref_dir or run_dir / "reference"
    compare = reference_keys(summary, ref, ref_dir, timeout_s, ref_skipped)
    summary["sample_stream_reason"] = SCRIPT_SAMPLES_REASON
    summary["loss_equal"] = None
    if compare:
        eq, diff = metrics.compare_states(run_dir / "final" / "state.pt",
                                          ref_dir / "final" / "state.pt")
        summary["state_equal"], summary["max_abs_diff"] = eq, diff
        ref_evs = phases.read_events(ref_dir)
        mine, theirs = losses(evs), losses(ref_evs)
        summary["loss_equal"] = (mine == theirs) if theirs else None
        if summary["loss_equal"] is not None:
            summary["sample_stream_reason"] += "; loss_equal compares its per-step losses"
        ref_table = phases.derive(ref_evs, spec.world_size)
        if not (ref_dir / phases.PHASES_FILE).exists():
            phases.write(ref_dir, ref_table)
        rm = metrics.compute(ref_dir, final_step(ref_evs), spec.world_size, events=ref_evs,
                             phase_table=ref_table)
        reference_figures(summary, m, rm, ref, ref_dir)
    summary.update(err)
    summary["failures"] = [asdict(f) for f in fails]
    summary["decisions"] = decisions(summary, entry, final_option=False)
    summary["code_version"] = code_version()
    summary["machine"] = machine_fingerprint()
    summary["created"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    return summary


def check_reference(spec: ScriptSpec, reference_from: Path) -> None:
    """Refuse a reference directory that is not a fault-free launch of the same script.

    Raises:
        SpecError: one line.
    """
    ref_spec = ScriptSpec.load(Path(reference_from) / "spec.json")
    if ref_spec.faults or ref_spec.training_key() != spec.training_key():
        raise SpecError(f"{reference_from} is not a fault-free launch of this script with "
                        "these arguments and ranks")
    if not (Path(reference_from) / "final" / "state.pt").exists():
        raise SpecError(f"{reference_from} has no final state (did it complete?)")


def run_script(spec: ScriptSpec, run_dir: Path, reference: bool = True, overwrite: bool = False,
               progress: Callable[[str, dict], None] | None = None,
               timeout_s: float | None = None, reference_from: Path | None = None
               ) -> RunOutcome:
    """Launch the script with its faults (and, after it, without: the reference), then
    write the summary and records (:func:`jitbench.harness.run.write_records`).

    Args:
        spec: the launch (validated here).
        run_dir: an absent or empty directory.
        reference: also launch the script without faults in ``run_dir/reference``.
        reference_from: an earlier fault-free launch of the same script and
            arguments to compare against instead.
        progress: ``f(label, state)`` with ``label`` ``run`` or ``reference``.
        timeout_s: per launch (s).

    Ctrl-C and SIGTERM are handled as :func:`jitbench.harness.run.run` handles them:
    the launch they meet is stopped, the reference is not started after one, and the
    summary and records are always written (``interrupted``, ``late_interrupt``).

    Raises:
        SpecError: invalid spec, run directory or reference directory (nothing started).
    """
    spec.validate()
    if reference_from is not None:
        check_reference(spec, reference_from)
    prepare_dir(run_dir, overwrite, spec)
    run_dir = Path(run_dir).resolve()
    with interrupts() as sigs:  # as jitbench.harness.run.run: the summary is always written
        cb = (lambda s: progress("run", s)) if progress else None
        res = execute(spec, run_dir, cb, timeout_s)
        ref = None
        ref_dir = None
        skipped = False
        if reference_from is not None:
            ref_dir = Path(reference_from).resolve()
            ref = LaunchResult(0, 0.0, False, ref_dir / "agent.log")
        elif (reference and not res.interrupted and not res.timed_out and not res.stopped
              and res.returncode == 0 and stepped(phases.read_events(run_dir))):
            # (a script that never stepped is not a training script: nothing to compare)
            skipped = bool(sigs.count)  # Ctrl-C or SIGTERM once the run had ended
            if not skipped:
                cbr = (lambda s: progress("reference", s)) if progress else None
                ref = execute(spec.without_faults(), run_dir / "reference", cbr, timeout_s)
        summary = summarize(spec, run_dir, res, ref, ref_dir, timeout_s=timeout_s,
                            ref_skipped=skipped)
        record_outcome(summary, run_dir, sigs, res, ref)
    return RunOutcome(summary, run_dir, res, ref)

