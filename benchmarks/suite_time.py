"""The test suite's time, as CI measures it: README's test command, wrapped or parsed.

Two ways to get the figure README quotes (``benchmarks/readme_figures.py``
renders it from the file this writes):

    python benchmarks/suite_time.py benchmarks/suite-cpu.json -- python -m pytest
    python benchmarks/suite_time.py benchmarks/suite-cpu.json --log pytest.log

The first runs the command (README's test command; ``.ci/run`` calls it so),
passes its output through, and records the load average (``os.getloadavg()``)
before and after it and its wall time; the second parses a saved log. Either
way the counts and seconds come from pytest's final line (``== 648 passed, 1
failed in 1327.40s (0:22:07) ==``). The file also holds the machine (cores,
torch), the date (a log's: its modification time) and the git commit (of this
checkout: parse a log in the checkout that ran it). With a command, the exit status is the
command's (a failing suite is still a measurement); 2 when the log is missing
or holds no pytest final line.
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import json
import os
import platform
import re
import subprocess
import sys
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from provenance import git_commit, load_avg

ROOT = Path(__file__).resolve().parents[1]
SUITE_VERSION = 1
_COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected)\b")
_SECONDS = re.compile(r"\bin ([0-9]+(?:\.[0-9]+)?)s\b")


def parse_final_line(text: str) -> dict | None:
    """Counts and seconds of pytest's final summary line in ``text`` (the last line
    that has both a count such as ``3 passed`` and ``in S s``), or None.

    Returns ``{"passed", "failed", "skipped", "errors", "deselected", "xfailed",
    "xpassed", "seconds", "final_line"}`` (counts default to 0; seconds as pytest
    printed them)."""
    for line in reversed(text.splitlines()):
        counts = _COUNT.findall(line)
        secs = _SECONDS.search(line)
        if counts and secs:
            out = {k: 0 for k in ("passed", "failed", "skipped", "errors", "deselected",
                                  "xfailed", "xpassed")}
            for n, kind in counts:
                out["errors" if kind.startswith("error") else kind] = int(n)
            out["seconds"] = float(secs.group(1))
            out["final_line"] = line.strip(" =")
            return out
    return None


def machine() -> dict:
    """Cores (``os.cpu_count()``), torch version (package metadata: no import), Python, host."""
    try:
        torch = version("torch")
    except PackageNotFoundError:
        torch = None
    return {"cpus": os.cpu_count(), "torch": torch, "python": platform.python_version(),
            "host": platform.node()}


def run_command(cmd: list[str]) -> tuple[int, str, float, list[float], list[float]]:
    """Run ``cmd``, passing its output through; (exit status, the last 200 lines of its
    output, wall time in s, load average before, after)."""
    before = load_avg()
    t0 = time.perf_counter()
    tail: collections.deque[str] = collections.deque(maxlen=200)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            bufsize=1)
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stdout.write(line)
        tail.append(line)
    rc = proc.wait()
    return rc, "".join(tail), time.perf_counter() - t0, before, load_avg()


def main(argv: list[str] | None = None) -> int:
    """Command line; the exit status (module docstring)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    cmd: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, cmd = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="the JSON file to write (benchmarks/suite-cpu.json)")
    ap.add_argument("--log", type=Path, default=None, help="parse this pytest log instead")
    ap.add_argument("--note", default="", help="a free-text note kept in the file")
    args = ap.parse_args(argv)
    if bool(cmd) == (args.log is not None):
        print("suite_time: give either -- COMMAND or --log FILE", file=sys.stderr)
        return 2
    doc: dict = {"suite_version": SUITE_VERSION}
    rc = 0
    if cmd:
        rc, text, wall, before, after = run_command(cmd)
        doc.update(command=" ".join(cmd), exit_status=rc, wall_s=round(wall, 1),
                   load_before=before, load_after=after, source="measured by suite_time.py")
    else:
        try:
            text = args.log.read_text(errors="replace")
        except OSError as exc:
            print(f"suite_time: cannot read {args.log}: {exc.strerror or exc}", file=sys.stderr)
            return 2
        doc.update(command=None, load_before=None, load_after=None,
                   source=f"parsed from the log {args.log.name} (load not recorded)")
    parsed = parse_final_line(text)
    if parsed is None:
        print("suite_time: no pytest final line ('N passed ... in S s') in the output",
              file=sys.stderr)
        return rc or 2
    doc.update(parsed)
    # a log's date is when it was last written (the end of the suite), not now
    when = (dt.datetime.fromtimestamp(args.log.stat().st_mtime, dt.UTC) if args.log
            else dt.datetime.now(dt.UTC))
    doc.update(date=when.strftime("%Y-%m-%d %H:%M UTC"), commit=git_commit(),
               machine=machine(), note=args.note)
    try:
        args.out.write_text(json.dumps(doc, indent=2) + "\n")
    except OSError as exc:
        print(f"suite_time: cannot write {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"suite_time: {parsed['final_line']} -> {args.out}", file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
