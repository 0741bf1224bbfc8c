"""Where a benchmark figure comes from: the commit it measured and the machine's load.

Shared by the measurement scripts of this folder (imported as ``provenance``: a
script's own folder is on ``sys.path`` when it runs as ``python benchmarks/X.py``).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def git_commit(ignore: tuple[str, ...] = ()) -> str:
    """The checkout's short commit, ``+dirty`` when tracked files differ; "" outside git.
    ``ignore``: paths (relative to the checkout) whose changes do not count, such as
    the record being written."""
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                             capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ""
    if rev.returncode:
        return ""
    changed = [ln[3:] for ln in dirty.stdout.splitlines() if ln[3:] not in ignore]
    return rev.stdout.strip() + ("+dirty" if changed else "")


def load_avg() -> list[float]:
    """``os.getloadavg()`` rounded to 2 decimals (1, 5 and 15 minute averages)."""
    return [round(x, 2) for x in os.getloadavg()]
