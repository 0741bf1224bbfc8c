"""Golden summaries of two fixed-seed main-job runs (``kill`` and ``nccl-hang``).

``python tests/golden/make.py`` reruns both and rewrites ``summary-*.json``;
``tests/dist/test_golden.py`` reruns them and compares field by field. Only
what does not depend on timing is kept: wall-clock figures, paths, the code
version and the machine are dropped (:func:`stable`).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
FAULTS = ("kill", "nccl-hang")
ARGS = ("--size", "tiny", "--steps", "16", "--fault-step", "6", "--seed", "0", "--json")
VOLATILE = {"run_dir", "reference_dir", "code_version", "machine", "created", "goodput",
            "lost_partial_s"}


def _volatile(key: str) -> bool:
    return key in VOLATILE or key.endswith("_s")


def stable(obj):
    """``obj`` without timing-dependent fields (recursively through dicts and lists)."""
    if isinstance(obj, dict):
        return {k: stable(v) for k, v in obj.items() if not _volatile(k)}
    if isinstance(obj, list):
        return [stable(v) for v in obj]
    return obj


def run(fault: str, run_dir: Path) -> dict:
    """The summary of ``jitbench run --fault FAULT`` with :data:`ARGS` (a fresh process)."""
    p = subprocess.run([sys.executable, "-m", "jitbench.cli", "run", "--fault", fault,
                        "--run-dir", str(run_dir), *ARGS],
                       capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"jitbench run --fault {fault} exited {p.returncode}: "
                           f"{p.stderr[-2000:]}")
    return json.loads(p.stdout)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        for f in FAULTS:
            s = stable(run(f, Path(tmp) / f))
            (HERE / f"summary-{f}.json").write_text(json.dumps(s, indent=1, sort_keys=True) + "\n")
            print(f"wrote summary-{f}.json")
