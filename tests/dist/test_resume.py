"""Every recovery decision said out loud on a fresh start and a resume (issue 15):
``--final-checkpoint``
writes one and says so, a second run into the same ``--ckpt-dir`` says from which
step and part it resumed, and a checkpoint part the resume had to skip is named
with its reason; each on the console and in ``summary.json`` (``decisions``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.distributed]

ARGS = ("--size", "tiny", "--steps", "4", "--seed", "0", "--fault", "none", "--no-reference")


def _run(run_dir: Path, *extra: str) -> tuple[dict, str]:
    """``jitbench run`` with :data:`ARGS`: (summary.json, stdout)."""
    p = subprocess.run([sys.executable, "-m", "jitbench.cli", "run", "--run-dir", str(run_dir),
                        *ARGS, *extra], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads((run_dir / "summary.json").read_text()), p.stdout


@pytest.mark.heavy  # CI suite time budget: nox -s heavy
@pytest.mark.timeout(600)
def test_jit_says_what_it_wrote_and_a_resume_says_where_it_came_from(tmp_path):
    ckpt = tmp_path / "ckpt"
    s, out = _run(tmp_path / "first", "--ckpt-dir", str(ckpt), "--final-checkpoint")
    part = "final_step00000004_rank00000.pt"
    assert s["final_checkpoint"] == {"step": 4, "part": part, "ckpt_dir": str(ckpt.resolve())}
    said = f"final checkpoint: step 4 ({part} in {ckpt.resolve()})"
    assert s["decisions"] == [said] and said in out
    assert (ckpt / part).is_file() and s["completed"] is True

    s, out = _run(tmp_path / "again", "--ckpt-dir", str(ckpt))
    said = f"resumed from step 4 (final checkpoint {part} in {ckpt.resolve()})"
    assert s["resumed_from"]["step"] == 4 and s["resumed_from"]["part"] == part
    assert s["decisions"] == [said] and said in out
    assert s["completed"] is True and s["final_step"] == 4

    (ckpt / part).write_bytes(b"")  # the only part unreadable: a fresh start, said so
    s, out = _run(tmp_path / "skipped", "--ckpt-dir", str(ckpt))
    [(name, why)] = s["restore_skipped"]
    assert name == part and why
    assert s["resumed_from"] == {"step": 0, "kind": None, "part": None,
                                 "ckpt_dir": str(ckpt.resolve()),
                                 "skipped": [[part, why]]}
    said = [f"restore skipped {part}: {why.removeprefix(f'{part}: ')}",  # named once
            f"no readable checkpoint left in {ckpt.resolve()}: started from step 0",
            "no checkpoint was needed: jit writes one only when a peer fails "
            "(--final-checkpoint writes one at the end for a later run)"]
    assert s["decisions"] == said and all(x in out for x in said)
