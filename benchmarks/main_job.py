"""The README's main job, measured: ``jitbench run --fault nccl-hang --json``, N times.

Runs README's first command's job (the default spec: GPT on 2 CPU ranks, rank 1
hangs in the gradient all-reduce of step 20, strategy ``jit``, compared with the
fault-free reference) ``--repeats`` times one after the other, with this tree's
CLI (``python -m jitbench.cli`` with the repository root first on
``PYTHONPATH``), and writes one JSON file: each repeat's headline metrics (from
its summary), their medians, the machine (the summaries' ``machine`` field), the
load average (``os.getloadavg()``) before and after each repeat, the date and the
git commit. ``benchmarks/readme_figures.py`` renders README's main-job table
from it.

    python benchmarks/main_job.py benchmarks/main-job-cpu.json [--repeats 3]
    python benchmarks/main_job.py benchmarks/          # writes benchmarks/main-job-cpu.json

Exit status: 0 written; 2 bad arguments or an unwritable output; 3 a repeat
failed (no JSON summary, or a non-zero exit): nothing is written.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from provenance import git_commit, load_avg

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_NAME = "main-job-cpu.json"
COMMAND = ["run", "--fault", "nccl-hang", "--json"]
"""README's first command (``jitbench run --fault nccl-hang``) with ``--json``."""
METRICS = ("detect_s", "save_s", "restart_s", "restore_s", "replayed_steps",
           "recovery_s", "state_equal", "sample_stream_equal", "wall_s", "step_s")
"""Headline metrics kept per repeat (s unless named otherwise; see README "Metrics").
``step_s`` (the median step) explains ``detect_s``: the hang bound is
``max(hang_floor_s, hang_factor x median step)`` (``jitbench/hang.py``)."""
NUMERIC = ("detect_s", "save_s", "restart_s", "restore_s", "replayed_steps",
           "recovery_s", "wall_s", "step_s")
"""Metrics with a median; the booleans are kept per repeat and summarised as all()."""
MAIN_JOB_VERSION = 1


def run_once(run_dir: Path) -> tuple[dict, float]:
    """Run the main job once into ``run_dir``; its JSON summary and wall time (s).

    Raises RuntimeError with one line when the command fails or prints no JSON."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "jitbench.cli", *COMMAND,
                           "--run-dir", str(run_dir)], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode or not lines:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RuntimeError(f"jitbench {' '.join(COMMAND)} exited {proc.returncode}: {tail}")
    return json.loads(lines[-1]), elapsed


def medians(repeats: list[dict]) -> dict:
    """Median of each numeric metric over the repeats (None where no repeat has it);
    the booleans are true only when every repeat's is."""
    out: dict = {}
    for k in NUMERIC:
        vals = [r[k] for r in repeats if isinstance(r.get(k), (int, float))]
        out[k] = statistics.median(vals) if vals else None
    for k in ("state_equal", "sample_stream_equal"):
        out[k] = all(r.get(k) is True for r in repeats)
    return out


def measure(repeats: int, work: Path) -> dict:
    """Run the job ``repeats`` times under ``work``; the document written to JSON."""
    rows, machine, commit = [], None, git_commit()  # the code measured, taken first
    for i in range(repeats):
        before = load_avg()
        summary, elapsed = run_once(work / f"r{i}")
        after = load_avg()
        machine = machine or summary.get("machine")
        row = {k: summary.get(k) for k in METRICS}
        row.update(repeat=i, load_before=before, load_after=after,
                   command_wall_s=round(elapsed, 2), code_version=summary.get("code_version"))
        rows.append(row)
        print(f"repeat {i}: detect {row['detect_s']:.2f} s, restart {row['restart_s']:.2f} s, "
              f"recovery {row['recovery_s']:.2f} s, load {before[0]:.2f} -> {after[0]:.2f}",
              file=sys.stderr)
    return {
        "main_job_version": MAIN_JOB_VERSION,
        "command": "jitbench " + " ".join(COMMAND),
        "spec": "default (README's first command)",
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit,
        "machine": machine,
        "repeats": rows,
        "median": medians(rows),
    }


def main(argv: list[str] | None = None) -> int:
    """Command line; the exit status (module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="output .json file, or a directory for "
                    f"{DEFAULT_NAME}")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--keep", type=Path, default=None,
                    help="keep the run directories here (default: a temporary directory)")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        print(f"main_job: --repeats must be >= 1, got {args.repeats}", file=sys.stderr)
        return 2
    out = args.out / DEFAULT_NAME if args.out.suffix != ".json" else args.out
    if not out.parent.is_dir():
        print(f"main_job: no such directory: {out.parent}", file=sys.stderr)
        return 2
    try:
        if args.keep is not None:
            args.keep.mkdir(parents=True, exist_ok=True)
            doc = measure(args.repeats, args.keep)
        else:
            with tempfile.TemporaryDirectory(prefix="main-job-") as tmp:
                doc = measure(args.repeats, Path(tmp))
    except RuntimeError as exc:
        print(f"main_job: {exc}", file=sys.stderr)
        return 3
    try:
        out.write_text(json.dumps(doc, indent=2) + "\n")
    except OSError as exc:
        print(f"main_job: cannot write {out}: {exc.strerror}", file=sys.stderr)
        return 2
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
