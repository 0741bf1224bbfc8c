"""Harness hygiene: interrupting ``jitbench run`` stops every worker and keeps
what was recorded; a SIGKILLed harness leaves no process behind; a checkpoint
directory of another job stops the workers with a clear reason."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jitbench.harness.launch import run_processes
from jitbench.harness.run import execute, summarize
from jitbench.runtime import checkpoint as ckpt
from jitbench.runtime.events import read_events
from tests.conftest import small_spec

pytestmark = [pytest.mark.distributed, pytest.mark.slow, pytest.mark.timeout(240)]


def _interactive() -> None:
    """SIGINT at its default, as in a terminal: a shell starts background jobs
    (``cmd &``, e.g. a CI script) with SIGINT ignored, and Python keeps an
    inherited SIG_IGN, so Ctrl-C would never reach the CLI under test."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(run_dir: Path) -> subprocess.Popen:
    # a hang floor far above a step's time: on a loaded machine a step of a few
    # seconds must not be declared a hang (that restart would be a second attempt
    # whose init the interrupt then meets, with nothing to save yet)
    return subprocess.Popen(
        [sys.executable, "-m", "jitbench.cli", "run", "--fault", "none", "--size", "tiny",
         "--steps", "2000", "--batch-size", "2", "--hang-floor-s", "60", "--no-reference",
         "--run-dir", str(run_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_interactive)


def _wait_for_steps(run_dir: Path, n: int, timeout_s: float = 120) -> int:
    """Wait until both ranks of one attempt ended step ``n``; returns that attempt."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ends = [e for e in read_events(run_dir / "events") if e["event"] == "step"
                and e["phase"] == "end"] if (run_dir / "events").exists() else []
        for attempt in sorted({e["attempt"] for e in ends}, reverse=True):
            if len({e["rank"] for e in ends if e["step"] >= n
                    and e["attempt"] == attempt}) == 2:
                return attempt
        time.sleep(0.2)
    raise AssertionError(f"no step {n} within {timeout_s} s")


def _wait_gone(run_dir: Path, timeout_s: float = 60) -> list:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and run_processes(run_dir):
        time.sleep(0.2)
    return run_processes(run_dir)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_stops_every_worker_and_keeps_the_records(tmp_path, sig):
    run_dir = tmp_path / "r"
    p = _start(run_dir)
    try:
        attempt = _wait_for_steps(run_dir, 3)
        procs = run_processes(run_dir)
        assert sorted("torch.distributed.run" in argv for _, argv in procs) == [False, False,
                                                                                 True]
        p.send_signal(sig)
        _, err = p.communicate(timeout=90)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, err
    assert "interrupted; records kept" in err and "Traceback" not in err
    assert _wait_gone(run_dir, 5) == []
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["completed"] is False
    assert (run_dir / "records.csv").exists() and (run_dir / "records.parquet").exists()
    evs = read_events(run_dir / "events")
    assert max(e["step"] for e in evs if e["event"] == "step" and e["phase"] == "end") >= 3
    # the workers saw SIGTERM from the agent (or, second, the peer's connection
    # closing) and saved the last boundary on the way out
    mine = [e for e in evs if e["attempt"] == attempt
            and e["event"] in ("failure", "save", "exit", "error")]
    assert "sigterm" in {e.get("trigger") for e in mine}, mine
    parts = ckpt.list_parts(run_dir / "ckpt")
    assert parts and {p.kind for p in parts} == {"jit"}, mine


def test_sigkilled_harness_leaves_no_process(tmp_path):
    """The agent dies with its parent (PDEATHSIG) and its workers with the agent."""
    run_dir = tmp_path / "r"
    p = _start(run_dir)
    try:
        _wait_for_steps(run_dir, 3)
        assert len(run_processes(run_dir)) == 3  # agent + 2 workers
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=10)
        assert _wait_gone(run_dir, 60) == []
    finally:
        if p.poll() is None:
            p.kill()
        for pid, _ in run_processes(run_dir):
            os.kill(pid, signal.SIGKILL)


def test_workers_refuse_another_jobs_checkpoints(tmp_path):
    """Without the harness's pre-check (a directory that changed after it), the
    workers themselves refuse it: exit 77, reason in the summary, no process left."""
    spec = small_spec(4, max_restarts=0)
    spec.ckpt_dir = str(tmp_path / "ck")
    ckpt.write_part(spec.ckpt_dir, "periodic", 2, 0, 4, {"step": 2}, run_id=spec.fingerprint())
    run_dir = tmp_path / "r"
    res = execute(spec, run_dir, timeout_s=120)
    s = summarize(spec, run_dir, res, None)
    assert res.returncode != 0 and not s["completed"]
    assert s["error_kind"] == "checkpoint"
    assert "world size 4, this job has 2" in s["error"]
    assert run_processes(run_dir) == []
    codes = {e["code"] for e in read_events(run_dir / "events") if e["event"] == "exit"}
    assert codes == {77}


def test_a_fault_that_never_fires_is_not_a_fault_free_success(tmp_path):
    """A time-triggered fault past the run's end: the run completes, but nothing
    was injected, so `jitbench run` exits 3 and the summary names the fault."""
    run_dir = tmp_path / "r"
    p = subprocess.run([sys.executable, "-m", "jitbench.cli", "run", "--fault", "kill",
                        "--fault-time-s", "600", "--steps", "4", "--no-reference",
                        "--run-dir", str(run_dir)], capture_output=True, text=True, timeout=200)
    assert p.returncode == 3, p.stderr
    assert "planned fault kill@1:t600 never fired" in p.stderr
    s = json.loads((run_dir / "summary.json").read_text())
    assert s["completed"] and s["fired"] == [] and s["unfired"] == ["kill@1:t600"]
    assert s["unfired_faults"] == 1


def test_a_ctrl_c_once_the_reference_has_ended_keeps_its_comparison(run_case, monkeypatch):
    """A real run and reference (fault-free, 4 steps); Ctrl-C as the summary is made,
    once both launches have ended by themselves, stops nothing: the reference is
    compared, the summary says ``interrupted`` and ``late_interrupt``, no launch is
    marked stopped, and the run still ends 130 (the records are complete)."""
    from jitbench.errors import ExitStatus
    from jitbench.harness import run as run_mod
    from jitbench.records import verdict

    real = run_mod.summarize

    def summarize(*args, **kw):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)
        return real(*args, **kw)

    monkeypatch.setattr(run_mod, "summarize", summarize)
    s, run_dir = run_case(small_spec(4), timeout_s=200)
    assert json.loads((run_dir / "summary.json").read_text()) == json.loads(
        json.dumps(s, default=str))
    assert s["completed"] and s["reference_complete"] is True
    assert s["state_equal"] is True and s["reference_cut_short"] is None
    assert s["interrupted"] is True and s["late_interrupt"] is True
    assert s["harness_stopped"] is False
    assert not (run_dir / "harness_stop.json").exists()
    assert not (run_dir / "reference" / "harness_stop.json").exists()
    assert verdict(s) == (ExitStatus.INTERRUPTED,
                          "interrupted once its launches had ended; the records are complete")
