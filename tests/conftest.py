"""Shared fixtures: run directories and a helper that runs a spec end to end."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from jitbench.faults import FaultSpec
from jitbench.harness.run import run as run_spec
from jitbench.harness.spec import RunSpec
from jitbench.workloads import WorkloadConfig


def small_spec(steps: int = 12, faults: list[FaultSpec] | None = None, strategy: str = "jit",
               nproc: int = 2, **kw) -> RunSpec:
    """A tiny GPT spec that runs in seconds on 2 cores."""
    wl = WorkloadConfig(name=kw.pop("workload", "gpt"), size=kw.pop("size", "tiny"),
                        steps=steps, batch_size=kw.pop("batch_size", 4),
                        grad_accum=kw.pop("grad_accum", 1), seed=kw.pop("seed", 0),
                        extra=kw.pop("extra", {"max_bytes": 200_000}))
    kw.setdefault("hang_first_s", 8.0)
    kw.setdefault("hang_floor_s", 1.5)
    return RunSpec(workload=wl, strategy=strategy, faults=faults or [], nproc=nproc, **kw)


@pytest.fixture
def run_case(tmp_path: Path):
    """Run a spec with its reference in a fresh directory; returns the summary."""

    def _run(spec: RunSpec, reference: bool = True, timeout_s: float = 240):
        outcome = run_spec(spec, tmp_path / "run", reference=reference, timeout_s=timeout_s)
        return outcome.summary, outcome.run_dir

    return _run


def jitbench_processes() -> list[str]:
    """Command lines of live jitbench worker processes (for orphan checks)."""
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines()
            if "jitbench.harness.worker" in line and str(os.getpid()) not in line.split()[0]]
