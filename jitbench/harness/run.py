"""One benchmark run: the faulty run, its fault-free reference, metrics, records.

Run directory layout::

    RUN_DIR/
      spec.json          the run spec (every setting of the run; RunSpec.load reads it)
      agent.log          the elastic agent's and workers' output
      events/            attemptAAA_rankRRRRR.jsonl, one event per line
      ckpt/              checkpoint parts and manifests
      faults_fired/      one marker per fault that fired
      final/state.pt     rank 0's final model + optimizer state
      reference/         the same spec without faults (same layout)
      summary.json       the summary (also printed with --json)
      records.csv/.parquet   one row per run; failures.csv: one row per failure
      phases.parquet/.csv    the spans derived from the events (jitbench.phases)
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import socket
import subprocess
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd
import torch

import jitbench
from jitbench import phases
from jitbench.errors import RunDirError
from jitbench.harness import metrics
from jitbench.harness.launch import Interrupts, LaunchResult, interrupts, launch
from jitbench.harness.parallel import parse as parse_parallel
from jitbench.harness.spec import RunSpec, SpecError
from jitbench.records import REFERENCE_NOT_STARTED, SUMMARY_VERSION, reference_not_compared
from jitbench.runtime import checkpoint as ckpt
from jitbench.runtime import strategies
from jitbench.runtime.events import read_events


@dataclass
class RunOutcome:
    """What :func:`run` produced."""

    summary: dict
    run_dir: Path
    launch: LaunchResult
    reference: LaunchResult | None


MARKER_KEYS = {"spec.json": ("strategy", "faults"), "sweep.json": ("results_version", "config"),
               "overhead.json": ("complete",)}
"""The keys every version of each jitbench directory marker holds (a run's or launch's
spec, a sweep's, an overhead measurement's): what tells jitbench's own marker from a
file of the same name in someone else's directory."""


def _is_marker(path: Path) -> bool:
    """Whether ``path`` is a marker jitbench wrote: a JSON object with the
    :data:`MARKER_KEYS` of its name (an unknown name: any JSON object)."""
    try:
        d = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return isinstance(d, dict) and all(k in d for k in MARKER_KEYS.get(path.name, ()))


def prepare_dir(run_dir: Path, overwrite: bool = False, spec: RunSpec | None = None,
                flag: str = "--run-dir", what: str = "run directory",
                marker: str = "spec.json") -> None:
    """Create an empty run directory (or sweep or overhead directory: ``what``).

    A multi-node spec may join a (shared) run directory whose ``spec.json`` is
    the same spec: every node of the job runs ``jitbench run`` on it. ``flag``
    is the option that names the directory and ``what`` what it is, for the
    messages; ``overwrite`` replaces only a directory holding ``marker`` (the
    file every such directory of jitbench's holds: ``spec.json`` of a run,
    ``sweep.json`` of a sweep).

    Raises:
        RunDirError: it exists and is not empty (and ``overwrite`` is False),
            it is not a directory, it cannot be created, or ``overwrite`` would
            delete a directory whose ``marker`` jitbench did not write
            (:func:`_is_marker`), the working directory (it or one inside it) or
            the spec's own ``ckpt_dir`` (one inside the run directory).
    """
    run_dir = Path(run_dir)
    if spec is not None and spec.nnodes > 1 and (run_dir / "spec.json").exists():
        if (run_dir / "spec.json").read_text() == spec.to_json():
            return
    if run_dir.exists() and not run_dir.is_dir():
        raise RunDirError(f"{what} {run_dir} exists and is not a directory")
    try:
        if run_dir.exists() and any(run_dir.iterdir()):
            if not overwrite:
                raise RunDirError(f"{what} {run_dir} exists and is not empty; "
                                  f"pass another {flag} or --overwrite")
            if not (run_dir / marker).is_file():
                # --overwrite replaces an earlier run, never an arbitrary directory
                raise RunDirError(f"{what} {run_dir} is not a jitbench {what} "
                                  f"(no {marker}); --overwrite only replaces those")
            if not _is_marker(run_dir / marker):
                # a file of that name that jitbench did not write: someone else's project
                raise RunDirError(f"{what} {run_dir} is not a jitbench {what} (its {marker} "
                                  f"is not jitbench's); --overwrite only replaces those")
            if Path.cwd().resolve().is_relative_to(run_dir.resolve()):
                # deleting the working directory loses the old run and breaks the new one
                raise RunDirError(f"--overwrite would delete {run_dir}, which holds the "
                                  f"working directory; run from outside it or pass another "
                                  f"{flag}")
            ck = Path(spec.ckpt_dir).resolve() if spec is not None and spec.ckpt_dir else None
            if ck is not None and ck.is_relative_to(run_dir.resolve()) and ck.exists():
                # the checkpoints the run was asked to resume from are not the old run's
                raise RunDirError(f"--ckpt-dir {spec.ckpt_dir} lies inside the run directory "
                                  f"that --overwrite would delete; move it out of {run_dir} "
                                  "or drop --overwrite")
            import shutil

            shutil.rmtree(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunDirError(f"cannot create {what} {run_dir}: "
                          f"{exc.strerror or exc}") from exc


def check_ckpt_dir(spec: RunSpec) -> None:
    """Refuse a ``spec.ckpt_dir`` that is not a directory of this training's checkpoints.

    Never modifies the directory. An absent one must be one the ranks can create:
    its nearest existing parent must take a new directory (one is made there and
    removed), so a path under a file or on a file system that takes none fails
    before launch, not at the first save of every attempt. An existing one must take
    a new directory too (probed the same way): without checkpoints there would be
    nothing to resume from and nowhere to save; with some, the run could resume but
    every save would fail, and the replay that follows would read as a broken
    promise (a new-user trial: exit 4 on a read-only copy of a run's checkpoints).
    One with committed parts must match the spec's world size and
    :meth:`RunSpec.fingerprint` (the same workload, data, batch, steps, seed), and,
    under a strategy that restores from it (registry entry ``restores``), the
    step it resumes after (:func:`resume_step`: the newest part the runtime's restore
    would load, not a newer one whose data is missing or corrupt, which it skips)
    must come before every step-triggered planned fault (other than one at
    ``restore``): such a fault would fire late or never. A strategy that never
    restores starts afresh whatever the directory holds, so its faults are not
    compared with it (:meth:`RunSpec.validate` refuses its ``--ckpt-dir`` unless it
    writes there).

    Raises:
        SpecError: one line naming the first mismatch or the first fault planned at
            or before the step the run resumes after, or the OS error of making a
            directory where the absent one would be.
    """
    if spec.ckpt_dir is None:
        return
    d = Path(spec.ckpt_dir)
    if d.exists() and not d.is_dir():
        raise SpecError(f"checkpoint directory {d} is not a directory")
    if not d.exists():
        parent = d.absolute().parent
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
        try:
            if not parent.is_dir():
                raise NotADirectoryError(20, "Not a directory")
            os.rmdir(tempfile.mkdtemp(dir=parent, prefix=".jitbench-probe-"))
        except OSError as exc:
            raise SpecError(f"checkpoint directory {d} cannot be created: "
                            f"{exc.strerror or exc}") from None
    try:
        manifests = _manifests(d)
    except OSError as exc:
        raise SpecError(f"checkpoint directory {d} is unreadable: {exc.strerror}") from exc
    if d.exists():
        try:
            os.rmdir(tempfile.mkdtemp(dir=d, prefix=".jitbench-probe-"))
        except OSError as exc:
            why = exc.strerror or exc
            raise SpecError(
                f"checkpoint directory {d} holds no checkpoint and takes no new file "
                f"({why}): nothing to resume from and nowhere to save" if not manifests else
                f"checkpoint directory {d} takes no new file ({why}): every save of the run "
                "would fail (to resume from these checkpoints, copy them to a writable "
                "directory)") from None
    for part, manifest in manifests:
        try:
            ckpt.check_owner(part, manifest, spec.world_size, spec.fingerprint())
        except ckpt.CheckpointMismatch as exc:
            raise SpecError(f"checkpoint directory {d} holds another job's checkpoints: "
                            f"{exc}{_differences(d, spec, manifest.get('run_id'))}") from exc
    if not strategies.parse(spec.strategy).entry.restores:
        return  # the job never resumes from the directory: no planned fault moves
    try:
        newest = resume_step(d, spec) if manifests else 0
    except ckpt.CheckpointMismatch as exc:
        raise SpecError(f"checkpoint directory {d} holds another job's checkpoints: "
                        f"{exc}") from exc
    for f in spec.faults:
        # a step-triggered fault fires at the first point at or after its step: one
        # planned at or before the step the run resumes from would fire elsewhere, or
        # (a checkpoint of the last step) not at all; a restore-point fault fires on
        # that very resume, a time trigger whenever its time has come
        if (newest and f.time_s is None and f.step <= newest
                and str(f.params.get("at", "step")) != "restore"):
            raise SpecError(f"fault {f.id} is planned at step {f.step}, but the newest "
                            f"checkpoint in {d} is of step {newest}: the run resumes after "
                            f"it and never reaches step {f.step}; plan the fault after step "
                            f"{newest} or use another --ckpt-dir")


def resume_step(ckpt_dir: Path, spec: RunSpec) -> int:
    """The step a run of ``spec`` resumes after from ``ckpt_dir``, by the runtime's own
    rule (:func:`jitbench.runtime.checkpoint.newest_valid`, what its restore loads):
    the newest committed part that validates, a newer one whose data file is missing,
    truncated or corrupt being skipped; 0 when none validates (a fresh start).

    Raises:
        CheckpointMismatch: a committed part belongs to another job.
    """
    found = ckpt.newest_valid(ckpt_dir, spec.world_size, run_id=spec.fingerprint())
    return found[0].step if found else 0


def _manifests(ckpt_dir: Path) -> list[tuple[ckpt.Part, dict]]:
    """Every committed part of ``ckpt_dir`` with its manifest, newest first; corrupt
    ones left out (restore skips them).

    Raises:
        OSError: the directory cannot be listed.
    """
    out = []
    for part in ckpt.list_parts(ckpt_dir):
        try:
            out.append((part, ckpt.read_manifest(part)))
        except ckpt.CheckpointCorrupt:
            continue
    return out


JOB_FILE = "job.json"
"""File of a ``--ckpt-dir`` that names the training its checkpoints belong to:
``{"run_id": fingerprint, "identity": RunSpec.identity()}``. Written by
:func:`execute` after a launch that left a part there (:func:`claim_ckpt_dir`);
read only to say which setting differs when the directory is refused (the
checkpoints' manifests hold just the run id)."""


def _differences(ckpt_dir: Path, spec: RunSpec, run_id: str | None) -> str:
    """``" (differs: workload.seed 1 there, 0 here; ...)"`` from the directory's
    :data:`JOB_FILE` when it names the job of the refused parts (``run_id``, their
    manifests'), else ``""`` (absent, unreadable, stale, or no difference)."""
    try:
        job = json.loads((ckpt_dir / JOB_FILE).read_text())
        there = job["identity"] if job["run_id"] == run_id else None
    except (OSError, ValueError, KeyError, TypeError):
        return ""
    if not isinstance(there, dict):
        return ""

    def flat(d: dict, prefix: str = "") -> dict:
        out: dict = {}
        for k, v in d.items():
            out.update(flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
        return out

    a, b = flat(there), flat(spec.identity())
    diffs = [f"{k} {a.get(k)!r} there, {b.get(k)!r} here" for k in sorted(a.keys() | b.keys())
             if a.get(k) != b.get(k)]
    return f" (differs: {'; '.join(diffs)})" if diffs else ""


def claim_ckpt_dir(spec: RunSpec) -> bool:
    """Write :data:`JOB_FILE` into the spec's own ``--ckpt-dir`` once it holds a part
    of this training (call it after the launch): a directory the job wrote nothing
    into stays untouched. Advisory and best effort: a read-only directory (resumed
    from only) or a lost race is no error. Several nodes of one job may call it at
    once: each writes its own temporary file and renames it into place, and a file
    already naming this training is left as it is.

    Returns:
        Whether the file now names this training.
    """
    if spec.ckpt_dir is None:
        return False
    d, run_id = Path(spec.ckpt_dir), spec.fingerprint()
    try:
        if json.loads((d / JOB_FILE).read_text()).get("run_id") == run_id:
            return True
    except (OSError, ValueError, AttributeError):
        pass
    try:
        if not any(m.get("run_id") == run_id for _, m in _manifests(d)):
            return False
    except OSError:
        return False
    tmp = d / f".{JOB_FILE}.{socket.gethostname()}.{os.getpid()}.tmp"
    try:
        tmp.write_text(json.dumps({"run_id": run_id, "identity": spec.identity()},
                                  sort_keys=True, indent=1))
        os.replace(tmp, d / JOB_FILE)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        return False
    return True


def machine_fingerprint() -> dict:
    """Host facts stored with every result (comparisons refuse to mix machines), with
    the installed version of every peer system (``torchft``, ``nvidia-resiliency-ext``;
    None when not installed): the gate refuses to compare across them."""
    peers = {f"peer_{name}": v for name, v in strategies.versions().items()}
    return {"host": socket.gethostname(), "platform": platform.platform(),
            "python": platform.python_version(), "torch": torch.__version__,
            "cpus": os.cpu_count(), "cuda": torch.cuda.is_available(), **peers}


def code_version() -> str:
    """jitbench version plus the git commit when run from a checkout."""
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, cwd=Path(jitbench.__file__).parent, timeout=5)
        if rev.returncode == 0:
            return f"{jitbench.__version__}+{rev.stdout.strip()}"
    except (OSError, subprocess.SubprocessError):
        pass
    return jitbench.__version__


def execute(spec: RunSpec, run_dir: Path, progress: Callable[[dict], None] | None = None,
            timeout_s: float | None = None) -> LaunchResult:
    """Write the spec into ``run_dir`` and run it with the strategy's launcher
    (:func:`jitbench.harness.launch.launch`)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "spec.json").write_text(spec.to_json())
    res = launch(spec, run_dir, progress, timeout_s)
    claim_ckpt_dir(spec)
    return res


def recovery_means(m: metrics.RunMetrics, world_size: int) -> dict:
    """The summary's recovery phases (mean over failures, s; None without one) and
    replayed-work counts, shared by ``run`` and ``launch`` summaries."""
    out: dict = {}
    for k in ("detect_s", "stall_s", "save_s", "restart_s", "restore_s", "recovery_s",
              "replay_s", "reform_s", "transfer_s"):
        vals = [getattr(f, k) for f in m.failures if getattr(f, k) is not None]
        out[k] = sum(vals) / len(vals) if vals else None
    out["replayed_steps"] = m.replayed_steps  # None: no failure recovered (not measured)
    out["replayed_gpu_steps"] = (None if m.replayed_steps is None
                                 else m.replayed_steps * world_size)
    out["max_replayed_steps_per_failure"] = m.max_replayed_steps_per_failure
    return out


def reference_cut_short(ref: LaunchResult | None, timeout_s: float | None = None,
                        ref_dir: Path | None = None) -> str | None:
    """Why the fault-free reference launch did not run to its end (one phrase), or
    None when it did (or there is none): interrupted (Ctrl-C or SIGTERM), stopped by
    ``--timeout-s`` (``timeout_s``, s: named as given, as :func:`end_reason` names
    it), failed, or stopped by the harness as its directory (``ref_dir``) records
    (:data:`~jitbench.harness.launch.STOP_FILE`: a reference given by directory). A
    reference cut short has no final state to compare (a partial one is never
    compared, even when a ``final/state.pt`` is there)."""
    if ref is None:
        return None
    if ref.interrupted:
        return "interrupted (Ctrl-C or SIGTERM)"
    if ref.timed_out:
        return f"stopped by the harness: {timeout_limit(ref, timeout_s)}"
    if ref.returncode != 0:
        return f"stopped by a failure (agent exit {ref.returncode})"
    stop = phases.harness_stop(ref_dir) if ref_dir is not None else None
    if stop is not None:
        return ("interrupted (Ctrl-C or SIGTERM)" if stop.get("why") == "interrupt"
                else "stopped by the harness: the launch ran past its timeout")
    return None


def launch_events(run_dir: Path, world_size: int,
                  per_replica: bool = False) -> tuple[dict | None, list[dict], pd.DataFrame]:
    """A finished launch's harness stop (:func:`jitbench.phases.harness_stop`), its
    events less the failures the stop declared (:func:`jitbench.phases.without_stop_failures`)
    and their phase table, written into ``run_dir`` (``run`` and ``launch`` summaries)."""
    stop = phases.harness_stop(run_dir)
    evs = phases.without_stop_failures(phases.read_events(run_dir), stop)
    table = phases.derive(evs, world_size, per_replica)
    phases.write(run_dir, table)
    return stop, evs, table


def launch_keys(res: LaunchResult, stop: dict | None, timeout_s: float | None) -> dict:
    """The summary keys of how a launch ended (``run`` and ``launch`` summaries):
    ``agent_exit``, ``interrupted``, ``late_interrupt``, ``wall_s``, ``timeout_s`` and
    ``harness_stopped`` (``stop``: :func:`jitbench.phases.harness_stop`)."""
    return {"agent_exit": res.returncode,
            "interrupted": res.interrupted or res.late_interrupt,
            "late_interrupt": res.late_interrupt and not res.interrupted,
            "wall_s": res.wall_s, "timeout_s": timeout_s,
            "harness_stopped": bool(stop is not None or res.timed_out or res.interrupted)}


def replay_keys(strategy: str, fails: list, evs: list[dict], completed: bool,
                per_replica: bool = False) -> dict:
    """``expected_replayed_steps`` (None: failures, none with a replay due: each was
    stopped by the harness unrecovered), ``last_commit_step``, ``replay_ok``
    (:func:`replay_ok`; :func:`heal_ok` ``per_replica``) and ``replay_promise`` of a
    launch under ``strategy`` (``run`` and a ``launch`` under ``jit``)."""
    expected = [f.expected_replayed_steps for f in fails if f.expected_replayed_steps is not None]
    return {"expected_replayed_steps": sum(expected) if expected or not fails else None,
            "last_commit_step": fails[-1].last_commit_step if fails else None,
            "replay_ok": (replay_ok(strategy, fails) if not per_replica
                          else heal_ok(evs, fails, completed)),
            "replay_promise": replay_promise(strategy)}


def reference_keys(summary: dict, ref: LaunchResult | None, ref_dir: Path,
                   timeout_s: float | None = None, ref_skipped: bool = False) -> bool:
    """Set a summary's ``reference_complete`` and ``reference_cut_short``
    (:func:`reference_cut_short`; :data:`~jitbench.records.REFERENCE_NOT_STARTED` when
    ``ref_skipped``), name a cut-short reference in the ``end_reason`` of a completed
    launch, and empty the comparison keys (``state_equal``, ``max_abs_diff``,
    ``sample_stream_equal``). Returns whether the final states are to be compared: a
    reference that ran to its end, a launch that completed, both final states there
    (``run`` and ``launch`` summaries)."""
    cut = REFERENCE_NOT_STARTED if ref_skipped else reference_cut_short(ref, timeout_s, ref_dir)
    summary["reference_complete"] = None if ref is None and not ref_skipped else cut is None
    summary["reference_cut_short"] = cut
    if cut is not None and summary["completed"]:
        summary["end_reason"] = f"completed; {reference_not_compared(cut)}"
    summary["state_equal"] = summary["max_abs_diff"] = summary["sample_stream_equal"] = None
    run_dir = Path(summary["run_dir"])
    return bool(ref is not None and cut is None and summary["completed"]
                and (ref_dir / "final" / "state.pt").exists()
                and (run_dir / "final" / "state.pt").exists())


def reference_figures(summary: dict, m: metrics.RunMetrics, rm: metrics.RunMetrics,
                      ref: LaunchResult, ref_dir: Path) -> None:
    """A compared reference's figures in the summary (``reference_loss_last``,
    ``loss_diff``, ``reference_step_s``, ``reference_wall_s``, ``reference_dir``):
    ``m`` the launch's metrics, ``rm`` the reference's."""
    summary["reference_loss_last"] = rm.loss_last
    summary["loss_diff"] = (m.loss_last - rm.loss_last
                            if m.loss_last is not None and rm.loss_last is not None else None)
    summary["reference_step_s"] = rm.step_s
    summary["reference_wall_s"] = ref.wall_s
    summary["reference_dir"] = str(ref_dir)


def summarize(spec: RunSpec, run_dir: Path, res: LaunchResult,
              ref: LaunchResult | None, ref_dir: Path | None = None,
              timeout_s: float | None = None, ref_skipped: bool = False) -> dict:
    """Metrics, correctness oracles and provenance of a finished run (JSON-able).

    Reads the run's events once, derives its phases (:mod:`jitbench.phases`)
    and writes them as ``run_dir/phases.parquet`` (and the reference's beside
    its records), then computes the metrics from them. ``timeout_s``: the launch's
    ``--timeout-s`` (s), named as given in the end reason of a run it stopped.

    A launch the harness stopped (``harness_stopped``: ``--timeout-s``, Ctrl-C or
    SIGTERM; :func:`jitbench.phases.harness_stop`) reports no detection for the
    failures the stop's SIGTERM declared, and its failures that had not recovered
    are ``harness_stopped``. A reference cut short (:func:`reference_cut_short`) is
    not compared: ``reference_complete`` false, ``reference_cut_short`` says why,
    ``state_equal`` and ``sample_stream_equal`` stay empty; so is one not started
    because Ctrl-C or SIGTERM came first (``ref_skipped``, ``ref`` None:
    :data:`~jitbench.records.REFERENCE_NOT_STARTED`). ``interrupted`` and
    ``late_interrupt`` are the run launch's (:func:`run` adds the reference's and
    the signals that came between and after the launches: :func:`note_interrupts`)."""
    entry = strategies.parse(spec.strategy).entry
    per_replica = entry.launcher == "torchft"
    stop, evs, table = launch_events(run_dir, spec.world_size, per_replica)
    m = metrics.compute(run_dir, spec.steps, spec.world_size, events=evs, phase_table=table,
                        per_replica=per_replica, ckpt_dir=spec.ckpt_dir or run_dir / "ckpt",
                        strategy=spec.strategy, stop=stop)
    summary: dict = {"summary_version": SUMMARY_VERSION, "run_dir": str(run_dir),
                     "workload": spec.workload.name, "size": spec.workload.size,
                     "strategy": spec.strategy, "world_size": spec.world_size,
                     "steps": spec.steps, "seed": spec.workload.seed,
                     "faults": [asdict(f) for f in spec.faults],
                     "deterministic_reduce": spec.deterministic_reduce,
                     "parallel": str(parse_parallel(spec.parallel)),
                     **launch_keys(res, stop, timeout_s)}
    fails = m.failures
    summary.update(recovery_means(m, spec.world_size))
    summary.update(replay_keys(spec.strategy, fails, evs, m.completed, per_replica))
    summary["bitwise_promised"] = entry.bitwise
    summary["late_replacements"] = m.late_replacements
    summary["num_failures"] = len(fails)
    summary["injected_failures"] = sum(1 for f in fails if f.injected)
    summary["own_failures"] = sum(1 for f in fails if not f.injected)
    summary["trigger"] = fails[0].trigger if fails else None
    summary["restored_kind"] = fails[0].restored_kind if fails else None
    summary["checkpoint_interval"] = _interval(spec.strategy, m.auto_interval)
    summary["auto_interval"] = m.auto_interval
    summary["auto_intervals"] = [  # every choice of periodic:auto (a restart chooses again)
        {k: e.get(k) for k in ("attempt", "step", "interval", "cost_s", "step_s", "mtbf_s",
                               "young_interval_s")}
        for e in evs if e["event"] == "auto_interval" and e["rank"] == 0]
    for k in ("completed", "final_step", "attempts", "step_s", "train_wall_s", "goodput",
              "checkpoint_saves", "checkpoint_s", "checkpoint_stall_gpu_s", "wasted_gpu_s", "loss_first",
              "loss_last"):
        summary[k] = getattr(m, k)
    summary["resumed_from"] = resumed_from(evs, spec.ckpt_dir or run_dir / "ckpt")
    resume_skips = (summary["resumed_from"] or {}).get("skipped", [])
    summary["restore_skipped"] = resume_skips + [sp for f in fails for sp in f.skipped_parts
                                                 if sp not in resume_skips]
    summary["final_checkpoint"] = final_checkpoint(evs)
    if summary["final_checkpoint"]:
        summary["final_checkpoint"]["ckpt_dir"] = str(spec.ckpt_dir or run_dir / "ckpt")
    summary["failed_copies"] = failed_copies(evs)
    summary["slow_windows"] = m.slow_windows
    if m.slow_windows:
        vals = [w["step_s"] for w in m.slow_windows if w["step_s"] is not None]
        summary["slow_window_step_s"] = max(vals) if vals else None
        summary["normal_step_s"] = m.normal_step_s
    summary["fired"] = fired_faults(run_dir, evs)
    fired_ids = {f["id"] for f in summary["fired"]}
    # a planned fault that never fired (a time past the run's end): nothing measured for it
    summary["unfired"] = [f.id for f in spec.faults if f.id not in fired_ids]
    summary["unfired_faults"] = len(summary["unfired"])
    summary["end_reason"] = end_reason(spec, m, res, timeout_s)
    ref_dir = ref_dir or run_dir / "reference"
    compare = reference_keys(summary, ref, ref_dir, timeout_s, ref_skipped)
    summary["sample_stream_reason"] = None
    if compare:
        eq, diff = metrics.compare_states(run_dir / "final" / "state.pt",
                                          ref_dir / "final" / "state.pt")
        summary["state_equal"], summary["max_abs_diff"] = eq, diff
        resumed = (summary["resumed_from"] or {}).get("step", 0)
        if resumed:
            summary["sample_stream_reason"] = (
                f"not comparable: the run resumed at step {resumed} from checkpoints "
                f"already in {spec.ckpt_dir or run_dir / 'ckpt'}; steps 1-{resumed} ran "
                "in the job that wrote them")
        else:
            summary["sample_stream_equal"] = metrics.sample_stream_equal(run_dir, ref_dir)
        ref_evs = phases.read_events(ref_dir)
        ref_table = phases.derive(ref_evs, spec.world_size, per_replica)
        if not (ref_dir / phases.PHASES_FILE).exists():
            phases.write(ref_dir, ref_table)
        rm = metrics.compute(ref_dir, spec.steps, spec.world_size, events=ref_evs,
                             phase_table=ref_table, per_replica=per_replica)
        reference_figures(summary, m, rm, ref, ref_dir)
    summary.update(worker_error(run_dir, evs))
    summary["failures"] = [asdict(f) for f in fails]
    summary["decisions"] = decisions(summary, entry)
    summary["code_version"] = code_version()
    summary["machine"] = machine_fingerprint()
    summary["created"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    return summary


def resumed_from(evs: list[dict], ckpt_dir: str | Path) -> dict | None:
    """What the job's first restore loaded before any failure, when it resumed from
    checkpoints already in ``ckpt_dir`` (an earlier job's): ``{"step", "kind",
    "part", "ckpt_dir", "skipped": [[part, reason], ...]}``, or None for a fresh
    start. ``skipped`` names newer parts the restore rejected (unreadable, truncated,
    a bad checksum), which a fresh start can have too (then ``step`` is 0)."""
    ends = metrics.resume_restores(evs)
    if not ends:
        return None
    best = max(ends, key=lambda e: (e.get("step") or 0, bool(e.get("skipped"))))
    skipped = [list(sp) for e in ends for sp in e.get("skipped") or []]
    skipped = [sp for i, sp in enumerate(skipped) if sp not in skipped[:i]]
    if not (best.get("step") or skipped):
        return None
    return {"step": best.get("step") or 0, "kind": best.get("kind"), "part": best.get("source"),
            "ckpt_dir": str(ckpt_dir), "skipped": skipped}


def failed_copies(evs: list[dict]) -> dict | None:
    """``inmem``'s peer copies that did not reach their holder: ``{"count", "first"}``
    (``first``: rank, step and error of the earliest), or None when none failed. A
    holder that died takes a send with it (expected around a fault); a copy that
    fails without one leaves the rank's state in one memory only."""
    bad = sorted((e for e in evs if e["event"] == "copy" and e["phase"] == "end"
                  and e.get("ok") is False), key=lambda e: e["t_wall"])
    if not bad:
        return None
    e = bad[0]
    return {"count": len(bad), "first": f"rank {e['rank']}, step {e.get('step')}: "
                                        f"{e.get('error')}"}


def decisions(summary: dict, entry: strategies.Entry, final_option: bool = True) -> list[str]:
    """The recovery decisions of a run, one line each, as the console prints them
    under the summary table and ``summary.json`` keeps them (``decisions``): a resume
    from an earlier job's checkpoint, each checkpoint part the restore skipped and
    why, each failure whose JIT checkpoint was lost (what was restored instead,
    :func:`jitbench.harness.metrics.jit_fallback`) or whose in-process recovery fell
    back to a restart, ``inmem``'s peer copies that failed (:func:`failed_copies`),
    each interval ``periodic:auto`` chose (and whether the run
    ends before its next checkpoint), and whether a checkpoint was written at all
    under a strategy that writes only when a peer fails (``entry.writes ==
    "on_failure"``; ``final_option``: the command has ``--final-checkpoint``, which
    that line then names: ``run`` has, ``launch`` has not)."""
    out: list[str] = []
    res = summary.get("resumed_from")
    for part, reason in summary.get("restore_skipped") or []:
        reason = str(reason).removeprefix(f"{part}: ")  # the checker's reasons name the file
        out.append(f"restore skipped {part}: {reason}")
    if res and res.get("step"):
        out.append(f"resumed from step {res['step']} ({res.get('kind')} checkpoint "
                   f"{res.get('part')} in {res.get('ckpt_dir')})")
    elif res:
        out.append(f"no readable checkpoint left in {res.get('ckpt_dir')}: started from step 0")
    for f in summary.get("failures") or []:
        if not f.get("fallback"):
            continue
        if entry.launcher == "replicas":  # in process: why it restarted the job instead
            ranks = f.get("fault_ranks") or [f.get("fault_rank")]
            who = (f"rank {ranks[0]}" if len(ranks) == 1
                   else "ranks " + ", ".join(str(r) for r in ranks))
            step = f.get("restored_step")
            whence = (f"step {step} ({f.get('restored_kind')} checkpoint)" if step
                      else "step 0 (no checkpoint committed yet)" if step == 0
                      else "the checkpoints")
            out.append(f"the failure at step {f.get('fault_step')} ({who}): "
                       f"{f['fallback']}; restarted from {whence}")
        else:  # jit: the JIT checkpoint was lost, and what was restored (metrics.jit_fallback)
            out.append(str(f["fallback"]))
    bad = summary.get("failed_copies")
    if bad:
        out.append(f"{bad['count']} in-memory copies did not reach their holder (first: "
                   f"{bad['first']}); a failure rolls back to an older copy, or the disk")
    for a in summary.get("auto_intervals") or []:
        line = (f"periodic:auto chose a checkpoint every {a['interval']} steps at step "
                f"{a['step']} (attempt {a['attempt']}): Young's interval "
                f"{_g(a.get('young_interval_s'))} s for a checkpoint of "
                f"{_g(a.get('cost_s'))} s and an MTBF of {_g(a.get('mtbf_s'))} s, over "
                f"{_g(a.get('step_s'))} s steps")
        steps = summary.get("steps")
        if steps and a["interval"] and a["step"] + a["interval"] > steps:
            line += f"; the run ends (step {steps}) before its next checkpoint"
        out.append(line)
    fin = summary.get("final_checkpoint")
    if fin and fin.get("part"):
        where = f" in {fin['ckpt_dir']}" if fin.get("ckpt_dir") else ""
        out.append(f"final checkpoint: step {fin['step']} ({fin['part']}{where})")
    elif fin:
        out.append(f"final checkpoint of step {fin['step']} not written: {fin.get('reason')}")
    elif (entry.writes == "on_failure" and summary.get("completed")
          and not (res and res.get("step"))
          and not summary.get("num_failures") and not summary.get("checkpoint_saves")):
        out.append(f"no checkpoint was needed: {entry.name} writes one only when a peer "
                   "fails" + (" (--final-checkpoint writes one at the end for a later run)"
                              if final_option else ""))
    return out


def _g(x: float | None) -> str:
    """A time for a decision line: 3 significant figures (whole seconds from 1000 s on),
    ``?`` when unknown."""
    if x is None:
        return "?"
    return f"{x:.0f}" if abs(x) >= 1000 else f"{x:.3g}"


def final_checkpoint(evs: list[dict]) -> dict | None:
    """The final checkpoint written at the end (``--final-checkpoint``): ``{"step",
    "part"}``, ``{"step", "part": None, "reason"}`` when a committed checkpoint of
    that step made it unnecessary, or None when none was asked for or written."""
    for e in reversed(evs):
        if e["event"] == "save" and e.get("kind") == "final":
            if e["phase"] == "end" and e.get("ok", True):
                return {"step": e.get("step"), "part": e.get("part")}
            if e["phase"] == "skip":
                return {"step": e.get("step"), "part": None, "reason": e.get("reason")}
    return None


def resumed_step(evs: list[dict]) -> int:
    """The step the job's first restore loaded before any failure (0: a fresh start):
    > 0 when the run resumed from checkpoints an earlier job wrote (``--ckpt-dir``),
    so its first steps ran in that job and its sample stream is not comparable
    with a reference's."""
    return (resumed_from(evs, "") or {}).get("step", 0)


WORKER_ERRORS = {77: "checkpoint", 78: "input"}
"""Worker exit statuses that mean bad input rather than a failed job (see worker.py)."""


def worker_error(run_dir: Path, events: list[dict] | None = None) -> dict:
    """``error``/``error_kind`` of the last attempt's first worker ``error`` event
    (``checkpoint``: another job's checkpoint directory; ``input``: unusable data
    or options), or Nones (from ``events`` when the caller has read them). ``error``
    names the rank and what it was doing (:func:`jitbench.phases.describe`)."""
    evs = events if events is not None else read_events(run_dir / "events")
    errs = [e for e in evs if e["event"] == "error"
            and e.get("code") in WORKER_ERRORS]
    if not errs:
        return {"error": None, "error_kind": None}
    last = max(e["attempt"] for e in errs)
    first = next(e for e in errs if e["attempt"] == last)
    return {"error": phases.describe(first), "error_kind": WORKER_ERRORS[first["code"]]}


def replay_promise(strategy: str) -> str:
    """What ``replay_ok`` checks for ``strategy``, in words: the registry entry's
    ``promise``, else its ``replay_bound`` (``one``, ``interval``, ...), and for
    ``jit:backstop=N`` what the backstop adds."""
    from jitbench.runtime.strategies import parse

    choice = parse(strategy)
    if choice.backstop:
        return (f"one; when no JIT checkpoint survived a failure, the steps since the newest "
                f"committed checkpoint (the backstop writes one every {choice.backstop} steps)")
    return choice.entry.promise or choice.entry.replay_bound


def replay_ok(strategy: str, failures: list) -> bool | None:
    """The replay invariant of every failure: the restore picked the newest
    committed checkpoint (``replayed_steps == expected_replayed_steps``; for a
    rollback to an in-memory copy, the newest copy a survivor held), a strategy
    that promises one minibatch (registry ``replay_bound``) replayed at most one,
    and one that promises its interval replayed at most N steps in a recovery
    from memory (``inmem:N``: a disk recovery replays the steps since the last disk
    checkpoint, which ``expected_replayed_steps`` checks). Under ``jit:backstop=N``
    a failure whose JIT checkpoint was lost (the newest committed checkpoint when
    recovery began is more than one step old: ``expected_replayed_steps`` > 1) is
    held to the steps since that checkpoint, not to one; plain ``jit`` is held to
    one. None when a failure did not recover."""
    from jitbench.runtime.strategies import parse

    choice = parse(strategy)
    bound = choice.entry.replay_bound
    ok = True
    for f in failures:
        if f.replayed_steps is None:
            return None
        ok &= f.replayed_steps == f.expected_replayed_steps
        lost = choice.backstop and (f.expected_replayed_steps or 0) > 1  # the backstop's
        if bound == "one" and not lost:
            ok &= f.replayed_steps <= 1
        if bound == "interval" and f.restored_kind == "memory":
            ok &= f.replayed_steps <= choice.interval
    return ok


def heal_ok(evs: list[dict], failures: list, completed: bool) -> bool | None:
    """torchft's promise (registry ``promise``): no committed step is executed twice
    on any rank, and a replacement joins at the survivors' step with their state
    (after its restore, every step it completes has the same parameter digest on
    every rank that completed it). None when a replacement never healed (it
    arrived after the job finished); a replacement that healed in the job's last
    quorum kept the promise though no step ran after it (``recovery_s`` None).
    """
    if any(f.restored_step is None for f in failures):
        return None
    ends = [e for e in evs if e["event"] == "step" and e["phase"] == "end"]
    seen: set[tuple[int, int]] = set()
    for e in ends:
        if (e["rank"], e["step"]) in seen:
            return False  # a step committed twice by one rank
        seen.add((e["rank"], e["step"]))
    digests: dict[int, set] = defaultdict(set)
    for e in ends:
        if e.get("digest") is not None:
            digests[e["step"]].add(e["digest"])
    joined = [e["step"] for e in evs if e["event"] == "restore" and e["phase"] == "end"
              and e.get("kind") == "heal"]
    for f in failures:
        if f.restored_step is None or f.restored_step < f.completed_before:
            return False
    first = min(joined, default=None)
    return completed and all(len(d) == 1 for st, d in digests.items()
                             if first is None or st > first)


def _interval(strategy: str, auto: dict | None) -> int | None:
    from jitbench.harness.spec import Strategy

    st = Strategy.parse(strategy)
    if st.auto:
        return auto["interval"] if auto else None
    return st.every or None  # jit:backstop=N: the backstop's N


def record_row(summary: dict) -> dict:
    """The summary as one flat record (a results-table row): scalars only, the
    fault plan as ``kind@rank:step`` joined by commas, the machine fingerprint
    as ``machine_*`` columns and the ``periodic:auto`` choice as ``auto_*``."""
    row = {k: v for k, v in summary.items() if not isinstance(v, (list, dict))}
    row["faults"] = ",".join(f"{f['kind']}@{f['rank']}:{f['step']}" for f in summary["faults"])
    for k, v in (summary.get("machine") or {}).items():
        row[f"machine_{k}"] = v
    auto = summary.get("auto_interval") or {}
    row["auto_cost_s"] = auto.get("cost_s")
    row["auto_step_s"] = auto.get("step_s")
    return row


def fired_faults(run_dir: Path, events: list[dict] | None = None) -> list[dict]:
    """Every fault that fired, in time order: ``{id, kind, rank, step, attempt, point}``
    (from ``events`` when the caller has read them)."""
    evs = events if events is not None else read_events(run_dir / "events")
    return [{"id": e.get("fault_id"), "kind": e["kind"], "rank": e["rank"], "step": e["step"],
             "attempt": e["attempt"], "point": e.get("point")}
            for e in evs if e["event"] == "fault"]


def end_reason(spec: RunSpec, m: metrics.RunMetrics, res: LaunchResult,
               timeout_s: float | None = None) -> str:
    """Why the run ended, one line: ``completed``, or what stopped it (``spec``: any
    spec with ``max_restarts``, a launched script's too). A timeout is named as
    configured (``timeout_s``, s, exactly as given), the launch's elapsed wall time
    beside it."""
    if m.completed:
        return "completed"
    if res.timed_out:
        return f"stopped by the harness: {timeout_limit(res, timeout_s)}"
    if res.interrupted:
        return "stopped by the harness: interrupted (Ctrl-C or SIGTERM)"
    last = m.failures[-1] if m.failures else None
    if last is not None and not last.injected and last.cause:
        what = f": {last.cause}"  # the job's own failure: its root cause
    else:
        what = (f"; last failure: {last.fault_kind} on rank {last.fault_rank} at step "
                f"{last.fault_step}" + (f" ({last.trigger})" if last.trigger else "")
                if last else "")
    agent = agent_error(res.log_path)  # what the agent itself met (a failed rendezvous)
    if agent:
        what = f"{what}; {agent}" if what else f": {agent}"
    if res.returncode != 0 and m.attempts >= spec.max_restarts + 1:
        return (f"restart budget exhausted: all {m.attempts} attempts failed "
                f"(--max-restarts {spec.max_restarts}){what}")
    return f"the elastic agent exited with status {res.returncode} after {m.attempts} " \
           f"attempts{what}"


def timeout_limit(res: LaunchResult, timeout_s: float | None) -> str:
    """The limit a launch the harness stopped on ``--timeout-s`` ran past, as given
    (``timeout_s``, s; None: not known), with the launch's wall time: ``--timeout-s 8
    s ran out (launch stopped after 9.4 s)``."""
    limit = (f"--timeout-s {timeout_s:g} s ran out" if timeout_s is not None
             else "the launch ran past its timeout")
    return f"{limit} (launch stopped after {res.wall_s:.1f} s)"


_AGENT_ERROR = re.compile(r"\b(Rendezvous\w*(?:Error|Timeout)\w*|DistNetworkError|DistStoreError)"
                          r"\b:?\s*(.*)")


def agent_error(log_path: Path | None) -> str | None:
    """The elastic agents' own error from their log, one line, or None: the last line
    naming a rendezvous or store error (``RendezvousTimeoutError``,
    ``RendezvousClosedError``, ``DistNetworkError``, ...), as ``rendezvous failed:
    NAME: message`` (``NAME: message`` for a store error not on a rendezvous key), at
    most 300 characters.

    The nodes of a multi-node job append to one log. A ``RendezvousClosedError`` is
    what the other agents meet once one agent has failed and shut the rendezvous, so
    any other error in the log is named before it (the root cause: with torch 2.14.1
    a standby that joins a later round waits 60 s for a store key and fails with
    ``DistStoreError``, then its peers close the rendezvous)."""
    if log_path is None:
        return None
    try:
        text = Path(log_path).read_text(errors="replace")
    except OSError:
        return None
    found = closed = None
    for line in text.splitlines():
        m = _AGENT_ERROR.search(line)
        if m is None:
            continue
        if m.group(1) == "RendezvousClosedError":
            closed = m
        else:
            found = m
    found = found or closed
    if found is None:
        return None
    name, msg = found.group(1), found.group(2).strip()
    rdzv = name.startswith("Rendezvous") or "torch.rendezvous." in msg
    if name == "RendezvousClosedError" and not msg:
        msg = "another agent closed it (it failed or the job ended)"
    head = "rendezvous failed: " if rdzv else ""
    return (f"{head}{name}" + (f": {msg}" if msg else ""))[:300]


def record_outcome(summary: dict, run_dir: Path, sigs, res: LaunchResult,
                   ref: LaunchResult | None) -> None:
    """Finish a launch's ``summary`` and write its records (``run`` and ``launch``):
    ``timed_out`` of the run or its reference, the signals that came between and after
    the launches (:func:`note_interrupts`; ``sigs``: the :func:`interrupts` scope),
    then :func:`write_records`, noting a signal that came while they were written."""
    summary["timed_out"] = res.timed_out or bool(ref is not None and ref.timed_out)
    note_interrupts(summary, sigs, res, ref)
    write_records(summary, run_dir)
    note_interrupts(summary, sigs, res, ref)  # one while they were written: complete


def write_records(summary: dict, run_dir: Path) -> None:
    """``summary.json``, ``records.csv``/``.parquet`` (one row) and ``failures.csv``."""
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    df = pd.DataFrame([record_row(summary)])
    df.to_csv(run_dir / "records.csv", index=False)
    df.to_parquet(run_dir / "records.parquet", index=False)
    if summary["failures"]:
        fdf = pd.DataFrame([{k: v for k, v in f.items() if not isinstance(v, list)}
                            for f in summary["failures"]])
        for col in fdf.columns.intersection(list(metrics.INTEGER_FAILURE_FIELDS)):
            fdf[col] = fdf[col].astype("Int64")  # whole counts stay whole beside empty cells
        fdf.insert(0, "run_dir", str(run_dir))
        fdf.to_csv(run_dir / "failures.csv", index=False)


def run(spec: RunSpec, run_dir: Path, reference: bool = True, overwrite: bool = False,
        progress: Callable[[str, dict], None] | None = None,
        timeout_s: float | None = None, reference_from: Path | None = None) -> RunOutcome:
    """Run ``spec`` (and its fault-free reference), then write summary and records.

    Args:
        spec: the run spec (validated here).
        run_dir: an absent or empty directory.
        reference: also run the spec without faults and compare final states.
        overwrite: replace a non-empty ``run_dir``.
        progress: ``f(label, state)`` with ``label`` ``run`` or ``reference``.
        timeout_s: per launch.
        reference_from: an earlier fault-free run directory of the same spec to
            compare against instead of running the reference again (sweeps
            share one reference per spec). Its checkpointing strategy may
            differ (:meth:`RunSpec.training_key`): checkpoints only read the
            state, so comparing with a run under another strategy is the
            stronger check.

    Ctrl-C and SIGTERM are a flag from the first launch to the written records
    (:func:`jitbench.harness.launch.interrupts`): one that arrives while a launch runs
    stops it (its workers save and exit; ``interrupted``) and skips the reference; one
    that arrives once the run's launch has ended by itself skips the reference (not
    started: ``reference_cut_short`` says so); one after the reference has ended
    stops nothing and the reference is compared. The summary and records are written
    in every case, with ``interrupted: true`` when a signal arrived, and
    ``late_interrupt: true`` when it stopped no launch (the records are complete);
    one that arrives while they are written is noted in the returned summary only.

    Raises:
        SpecError: invalid spec, run directory or checkpoint directory (nothing
            is started).
    """
    spec.validate()
    check_ckpt_dir(spec)
    ref_dir = None
    if reference_from is not None:
        try:
            ref_spec = RunSpec.load(reference_from / "spec.json")
        except (OSError, ValueError, TypeError) as exc:
            raise SpecError(f"{reference_from}: not a run directory ({exc})") from exc
        if (len(ref_spec.faults) != len(ref_spec.reference_faults())
                or ref_spec.training_key() != spec.training_key()):
            raise SpecError(f"{reference_from} is not a fault-free run of this spec "
                            "(strategies may differ; training settings may not)")
        ref_dir = reference_from
    prepare_dir(run_dir, overwrite, spec)
    with interrupts() as sigs:
        cb = (lambda s: progress("run", s)) if progress else None
        res = execute(spec, run_dir, cb, timeout_s)
        ref = None
        skipped = False
        if reference_from is not None:
            ref = LaunchResult(0, 0.0, False, reference_from / "agent.log")
        elif reference and not res.interrupted and not res.timed_out and res.returncode == 0:
            # (a failed job has no final state to compare: no reference)
            skipped = bool(sigs.count)  # Ctrl-C or SIGTERM once the run had ended
            if not skipped:
                cbr = (lambda s: progress("reference", s)) if progress else None
                ref = execute(spec.without_faults(), run_dir / "reference", cbr, timeout_s)
        summary = summarize(spec, run_dir, res, ref, ref_dir, timeout_s=timeout_s,
                            ref_skipped=skipped)
        record_outcome(summary, run_dir, sigs, res, ref)
    return RunOutcome(summary, run_dir, res, ref)


def note_interrupts(summary: dict, sigs: Interrupts, res: LaunchResult,
                    ref: LaunchResult | None) -> None:
    """Set a summary's ``interrupted`` and ``late_interrupt`` from its launches (``res``,
    ``ref``) and the Ctrl-C or SIGTERM recorded around them (``sigs``): ``interrupted``
    when one arrived at all; ``late_interrupt`` when none of them stopped a launch
    (each had ended by itself, so its records are complete)."""
    stopped = res.interrupted or bool(ref is not None and ref.interrupted)
    late = not stopped and bool(sigs.count or res.late_interrupt
                                or (ref is not None and ref.late_interrupt))
    summary["interrupted"] = stopped or late
    summary["late_interrupt"] = late
