"""Start-up time of the light CLI commands against ``import torch``.

Runs each command in a fresh interpreter ``--repeats`` times, round-robin (so
a burst of load hits every command alike), after one untimed warm-up each,
and prints the median, minimum and maximum wall time of each and the ratio of
its median to that of ``python -c "import torch"``. The CLI is this tree's
(``python -m jitbench.cli`` with the repository root first on ``PYTHONPATH``),
whatever ``jitbench`` is installed. The header describes the machine (CPU,
``nproc``, load average before and after) and the code (commit, Python, torch).

    python benchmarks/cli_startup.py [--repeats 15] [--out benchmarks/cli-startup.txt]
    nox -s startup
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from provenance import git_commit

ROOT = Path(__file__).resolve().parents[1]
JB = [sys.executable, "-m", "jitbench.cli"]
COMMANDS: list[tuple[str, list[str]]] = [
    ('python -c "import torch"', [sys.executable, "-c", "import torch"]),
    ('python -c "pass"', [sys.executable, "-c", "pass"]),
    ("jitbench --help", [*JB, "--help"]),
    ("jitbench faults", [*JB, "faults"]),
    ("jitbench gate --help", [*JB, "gate", "--help"]),
]
"""(label, argv); the first is the reference of the ratios."""


def time_once(argv: list[str], env: dict[str, str]) -> float:
    """Wall time (s) of one run of ``argv``; raises if it fails."""
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, cwd=ROOT, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def measure(repeats: int) -> dict[str, list[float]]:
    """Wall times (s) of every command, ``repeats`` each, round-robin after a warm-up."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]), "COLUMNS": "80"}
    for _, argv in COMMANDS:
        time_once(argv, env)
    times: dict[str, list[float]] = {label: [] for label, _ in COMMANDS}
    for _ in range(repeats):
        for label, argv in COMMANDS:
            times[label].append(time_once(argv, env))
    return times


def _cpu() -> str:
    try:
        for text in Path("/proc/cpuinfo").read_text().splitlines():
            if text.startswith("model name"):
                return text.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed"


def report(times: dict[str, list[float]], load_before: tuple, load_after: tuple,
           repeats: int) -> str:
    """The result as text: a header describing machine and code, one line per command."""
    ref = statistics.median(times[COMMANDS[0][0]])
    lines = [
        f"# CLI start-up: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, commit {git_commit()}, "
        f"Python {platform.python_version()}, torch {_version('torch')}",
        f"# machine: {_cpu()}, nproc {os.cpu_count()}, load average (1/5/15 min) "
        f"{' '.join(f'{x:.2f}' for x in load_before)} before, "
        f"{' '.join(f'{x:.2f}' for x in load_after)} after",
        f"# {repeats} runs each, round-robin after one warm-up; wall seconds; ratio = "
        f"median / median of the first line",
        f"{'command':<28} {'median_s':>9} {'min_s':>7} {'max_s':>7} {'ratio':>6}",
    ]
    for label, _ in COMMANDS:
        t = times[label]
        med = statistics.median(t)
        lines.append(f"{label:<28} {med:>9.3f} {min(t):>7.3f} {max(t):>7.3f} {med / ref:>6.2f}")
    return "\n".join(lines) + "\n"


def main() -> None:
    """Measure, print, and with ``--out`` also write the result."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15, help="runs of each command (default 15)")
    ap.add_argument("--out", type=Path, help="also write the result to this file")
    args = ap.parse_args()
    load_before = os.getloadavg()
    times = measure(args.repeats)
    text = report(times, load_before, os.getloadavg(), args.repeats)
    print(text, end="")
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
