"""Ctrl-C and SIGTERM to the harness (a new-user trial): one that arrives while an agent
runs stops it (``interrupted``); one that arrives once the agent has exited by itself
stops nothing (``late_interrupt``), and ``run`` writes its whole summary either way,
comparing a reference that has ended; every long command ends an interrupt with one
line and exit status 130. Agents here are one short ``python -c`` process; ``run`` is
driven with a launch that writes a finished run's files."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from jitbench.errors import ExitStatus
from jitbench.harness import launch as launch_mod
from jitbench.harness.launch import STOP_FILE, LaunchResult, held_signals, interrupts, launch_agent
from jitbench.records import REFERENCE_NOT_STARTED, verdict
from tests.unit.test_run_trial import _finished_run

pytestmark = pytest.mark.timeout(60)  # every test here starts at most one short process

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]
"""An agent that runs until it is stopped."""


def _wait(cond, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.01)


# -- launch_agent: a signal while the agent runs, and once it has exited ----------------


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_the_agent_runs_stops_it(tmp_path, sig):
    sent: list[int] = []

    def progress(state: dict) -> None:  # called while the agent sleeps
        if not sent:
            sent.append(sig)
            os.kill(os.getpid(), sig)

    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    t0 = time.monotonic()
    res = launch_agent(SLEEPER, tmp_path, progress=progress, timeout_s=30)
    assert sent and res.interrupted and not res.late_interrupt and not res.timed_out
    assert res.returncode == -signal.SIGTERM  # the harness's SIGTERM ended the agent
    assert time.monotonic() - t0 < 20
    assert json.loads((tmp_path / STOP_FILE).read_text())["why"] == "interrupt"
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_a_ctrl_c_from_another_thread_stops_the_running_agent(tmp_path):
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        res = launch_agent(SLEEPER, tmp_path, timeout_s=30)
    finally:
        timer.cancel()
    assert res.interrupted and not res.late_interrupt and res.wall_s < 20


def _exited(pid_file: Path) -> bool:
    """The agent that wrote ``pid_file`` has exited (a zombie, or reaped)."""
    try:
        pid = int(pid_file.read_text())
    except (OSError, ValueError):
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] == "Z"


@pytest.mark.parametrize("when", ["reap", "progress"])
def test_a_signal_once_the_agent_has_exited_stops_nothing(tmp_path, monkeypatch, when):
    """Sent while the harness reaps the exited agent, or from the progress callback
    once the agent is a zombie or gone: the launch is whole (no stop mark, exit 0)."""
    pid_file = tmp_path / "agent.pid"
    cmd = [sys.executable, "-c",
           f"import os, pathlib; pathlib.Path({str(pid_file)!r}).write_text(str(os.getpid()))"]
    sent: list[int] = []

    def send() -> None:
        if not sent:
            sent.append(signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)

    progress = None
    if when == "reap":
        real = launch_mod.reap

        def reap(run_dir, agent_pid=None, grace_s=5.0):
            send()  # launch_agent reaps only an agent that has exited (or that it stopped)
            return real(run_dir, agent_pid, grace_s)

        monkeypatch.setattr(launch_mod, "reap", reap)
    else:
        def progress(state: dict) -> None:
            if _exited(pid_file):
                send()

    res = launch_agent(cmd, tmp_path, progress=progress, timeout_s=30)
    assert sent, "no signal was sent"
    assert res.late_interrupt and not res.interrupted and res.returncode == 0
    assert not (tmp_path / STOP_FILE).exists()


def test_interrupts_nest_hold_and_give_back_the_handlers():
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with interrupts() as outer:
        with interrupts() as inner:
            assert inner is outer  # one scope for a run, its reference and the summary
            os.kill(os.getpid(), signal.SIGTERM)
            _wait(lambda: outer.count == 1)
        with held_signals(reraise=False) as got:  # held inside a scope: recorded there too
            os.kill(os.getpid(), signal.SIGINT)
            _wait(lambda: got)
    assert [s for s, _ in outer.got] == [signal.SIGTERM, signal.SIGINT] and got == [signal.SIGINT]
    assert outer.got[0][1] <= outer.got[1][1] <= time.monotonic()
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_interrupts_in_another_thread_install_nothing():
    """signal.signal raises there: the scope must neither call it nor join the main
    thread's (whose signals are the main thread's to act on)."""
    seen: dict = {}

    def body() -> None:
        try:
            with interrupts() as sigs:
                seen["sigs"] = sigs
        except ValueError as exc:
            seen["error"] = exc

    with interrupts() as main_scope:
        t = threading.Thread(target=body)
        t.start()
        t.join(10)
    assert "error" not in seen and seen["sigs"] is not main_scope


# -- run: the summary is whole, the reference skipped before it starts, compared after --


def _fake_launches(monkeypatch, signal_after: int | None = None, stopped: bool = False):
    """Replace ``execute`` with a launch that leaves a finished run (``_finished_run``);
    Ctrl-C arrives once launch ``signal_after`` (1: the run, 2: the reference) has
    ended; ``stopped``: the run's launch was stopped by one. Returns the run dirs."""
    from jitbench.harness import run as run_mod

    calls: list[Path] = []

    def execute(spec, run_dir, progress=None, timeout_s=None):
        calls.append(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        _finished_run(run_dir)
        if signal_after == len(calls):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)  # delivered before the next launch could start
        return LaunchResult(-15 if stopped else 0, 1.0, interrupted=stopped,
                            log_path=run_dir / "agent.log")

    monkeypatch.setattr(run_mod, "execute", execute)
    return calls


def _run(tmp_path):
    from jitbench.harness.run import run
    from jitbench.harness.spec import RunSpec
    from jitbench.workloads import WorkloadConfig

    run_dir = tmp_path / "run"
    out = run(RunSpec(workload=WorkloadConfig(steps=2)), run_dir, reference=True)
    on_disk = json.loads((run_dir / "summary.json").read_text())
    assert (run_dir / "records.csv").exists() and (run_dir / "records.parquet").exists()
    return out.summary, on_disk, run_dir


def test_a_signal_after_the_reference_ended_still_compares_it(tmp_path, monkeypatch):
    calls = _fake_launches(monkeypatch, signal_after=2)
    s, on_disk, run_dir = _run(tmp_path)
    assert len(calls) == 2
    for x in (s, on_disk):
        assert x["interrupted"] is True and x["late_interrupt"] is True
        assert x["reference_complete"] is True and x["reference_cut_short"] is None
        assert x["state_equal"] is True and x["max_abs_diff"] == 0.0
        assert x["end_reason"] == "completed" and x["harness_stopped"] is False
    status, why = verdict(on_disk)
    assert status == ExitStatus.INTERRUPTED and "records are complete" in why
    from jitbench.cli.run import outcome_status

    status, line = outcome_status(on_disk, "jit", run_dir, None)
    assert status == ExitStatus.INTERRUPTED
    assert line == (f"interrupted after the run and its fault-free reference ended (nothing "
                    f"was stopped); records complete in {run_dir}")


def test_a_signal_between_the_run_and_its_reference_skips_the_reference(tmp_path,
                                                                          monkeypatch):
    calls = _fake_launches(monkeypatch, signal_after=1)
    s, on_disk, run_dir = _run(tmp_path)
    assert calls == [run_dir]  # the reference was never launched
    for x in (s, on_disk):
        assert x["interrupted"] is True and x["late_interrupt"] is True and x["completed"]
        assert x["reference_complete"] is False
        assert x["reference_cut_short"] == REFERENCE_NOT_STARTED
        assert x["state_equal"] is None
        assert x["end_reason"] == ("completed; the fault-free reference was not started "
                                   "(Ctrl-C or SIGTERM came first), so the final states "
                                   "were not compared")
    from jitbench.cli.run import outcome_status

    status, line = outcome_status(on_disk, "jit", run_dir, None)
    assert status == ExitStatus.INTERRUPTED
    assert line.startswith("interrupted after the run ended (nothing was stopped); the "
                           "fault-free reference was not started")
    assert line.endswith(f"records complete in {run_dir}")


@pytest.mark.parametrize("stopped", [False, True])
def test_without_a_late_signal_nothing_is_late(tmp_path, monkeypatch, stopped):
    calls = _fake_launches(monkeypatch, stopped=stopped)
    s, on_disk, _ = _run(tmp_path)
    assert len(calls) == (1 if stopped else 2)
    assert on_disk["interrupted"] is stopped and on_disk["late_interrupt"] is False
    assert s["interrupted"] is stopped and s["late_interrupt"] is False


# -- the CLI: one line and 130, whatever the command is doing ---------------------------


def _interrupt(*args, **kw):
    raise KeyboardInterrupt


@pytest.mark.parametrize("where", ["launch", "printing"])
def test_run_prints_one_line_on_a_repeated_ctrl_c(jb, tmp_path, monkeypatch, where):
    """A Ctrl-C the harness does not take (a second one while the summary prints, one
    before the launch) was click's silent abort: now one line naming the directory."""
    from jitbench.cli import run as cli_run
    from jitbench.harness import run as run_mod

    if where == "launch":
        monkeypatch.setattr(run_mod, "run", _interrupt)
    else:
        class Outcome:
            summary = {"interrupted": True, "completed": False, "final_step": 0}

        monkeypatch.setattr(run_mod, "run", lambda *a, **kw: Outcome())
        monkeypatch.setattr(cli_run, "show_summary", _interrupt)
    d = tmp_path / "r"
    code, err = jb("run", "--run-dir", str(d))
    assert code == ExitStatus.INTERRUPTED
    assert [x for x in err.splitlines() if x.startswith("interrupted")] == [
        f"interrupted; records kept in {d}"], err


def test_a_ctrl_c_while_the_line_prints_is_held(jb, tmp_path, monkeypatch):
    from jitbench.cli import console
    from jitbench.harness import run as run_mod

    real = console.line

    def line(text: str) -> None:
        os.kill(os.getpid(), signal.SIGINT)  # a third Ctrl-C, as the line is printed
        time.sleep(0.05)
        real(text)

    monkeypatch.setattr(run_mod, "run", _interrupt)
    monkeypatch.setattr(console, "line", line)
    code, err = jb("run", "--run-dir", str(tmp_path / "r"))
    assert code == ExitStatus.INTERRUPTED
    assert f"interrupted; records kept in {tmp_path / 'r'}" in err


def test_launch_prints_one_line_when_interrupted(jb, tmp_path, monkeypatch):
    from jitbench.harness import script

    monkeypatch.setattr(script, "run_script", _interrupt)
    ddp = str(Path(__file__).resolve().parents[2] / "examples" / "ddp_tutorial.py")
    d = tmp_path / "r"
    code, err = jb("launch", "--steps", "10", "--run-dir", str(d), "--", ddp)
    assert code == ExitStatus.INTERRUPTED, err
    assert f"interrupted; records kept in {d}" in err


def test_sweep_prints_one_line_when_interrupted(jb, tmp_path, monkeypatch):
    from jitbench.harness import sweep

    monkeypatch.setattr(sweep, "run_sweep", _interrupt)
    out = tmp_path / "sw"
    code, err = jb("sweep", "--strategies", "jit", "--faults", "kill", "--out", str(out))
    assert code == ExitStatus.INTERRUPTED, err
    assert f"interrupted; records kept in {out} (--resume runs the rest)" in err


def _seg_rows(run_dir, spec, skip=0, per_step=None):
    """:func:`jitbench.harness.overhead.segment_times` of a launch that measured every
    segment of ``spec`` (0.1 s a step)."""
    rows = [{"strategy": st, "repeat": rep, "step_s": 0.1, "rt_us": 5.0, "cpu_step_s": 0.05}
            for _, st, rep in spec.segments if rep >= 0]
    if per_step is not None:
        per_step += [{"strategy": r["strategy"], "repeat": r["repeat"], "step_s": 0.1}
                     for r in rows]
    return rows


def test_overhead_keeps_a_complete_measurement_on_a_late_ctrl_c(jb, tmp_path, monkeypatch):
    """The launch ended by itself with a Ctrl-C after it (``late_interrupt``): the
    measurement is complete, written whole (overhead.csv, overhead.json complete), and
    the command exits 130 with a line saying so."""
    import pandas as pd

    from jitbench.harness import overhead as overhead_mod
    from jitbench.harness import run as run_mod

    def late(spec, run_dir, progress=None, timeout_s=None):
        run_dir.mkdir(parents=True, exist_ok=True)
        return LaunchResult(0, 0.5, late_interrupt=True)

    monkeypatch.setattr(run_mod, "execute", late)
    monkeypatch.setattr(overhead_mod, "segment_times", _seg_rows)
    out = tmp_path / "ov"
    code, err = jb("overhead", "--strategies", "jit", "--out", str(out))
    assert code == ExitStatus.INTERRUPTED, err
    assert err.strip().splitlines()[-1] == (
        "interrupted once the last launch had ended; the measurement is complete: "
        f"{out / 'overhead.csv'}"), err
    meta = json.loads((out / "overhead.json").read_text())
    assert meta["complete"] is True and meta["late_interrupt"] is True
    assert set(pd.read_csv(out / "overhead.csv")["strategy"]) >= {"none", "jit"}


@pytest.mark.parametrize("how", ["stopped", "late"])
def test_an_interrupted_launch_mode_measurement_keeps_its_finished_launches(
        jb, tmp_path, monkeypatch, how):
    """Launch mode, Ctrl-C at the second launch (stopping it, or once it had ended): no
    overhead.csv (the design is incomplete), overhead.json says complete false with the
    launches done, the finished launches' rows are in overhead_segments.csv, and the
    line says exactly that."""
    import pandas as pd

    from jitbench.harness import overhead as overhead_mod
    from jitbench.harness import run as run_mod

    n = {"i": 0}

    def launch(spec, run_dir, progress=None, timeout_s=None):
        run_dir.mkdir(parents=True, exist_ok=True)
        n["i"] += 1
        second = n["i"] == 2
        return LaunchResult(0, 0.5, interrupted=second and how == "stopped",
                            late_interrupt=second and how == "late")

    def times(run_dir, cfg, strategy, rep, per_step=None, seg=0):
        return {"strategy": strategy, "repeat": rep, "step_s": 0.1, "rt_us": None,
                "cpu_step_s": None}

    monkeypatch.setattr(run_mod, "execute", launch)
    monkeypatch.setattr(overhead_mod, "launch_times", times)
    out = tmp_path / "ov"
    code, err = jb("overhead", "--strategies", "jit-inprocess", "--nproc", "3", "--out",
                   str(out))
    assert code == ExitStatus.INTERRUPTED, err
    done = 2 if how == "late" else 1
    meta = json.loads((out / "overhead.json").read_text())
    assert meta["complete"] is False and meta["launches_done"] == done
    total = meta["launches"]
    assert total > 2 and not (out / "overhead.csv").exists()
    assert len(pd.read_csv(out / "overhead_segments.csv")) == done
    assert err.strip().splitlines()[-1] == (
        f"interrupted after {done} of {total} launches: the measurement is incomplete, so "
        "there is no overhead.csv (the finished launches' times are in "
        f"{out / 'overhead_segments.csv'}); rerun with --overwrite"), err


def test_overhead_stopped_in_its_one_launch_says_nothing_was_measured(jb, tmp_path,
                                                                     monkeypatch):
    from jitbench.harness import run as run_mod

    def stopped(spec, run_dir, progress=None, timeout_s=None):
        run_dir.mkdir(parents=True, exist_ok=True)
        return LaunchResult(130, 0.5, interrupted=True)

    monkeypatch.setattr(run_mod, "execute", stopped)
    out = tmp_path / "ov"
    code, err = jb("overhead", "--strategies", "jit", "--out", str(out))
    assert code == ExitStatus.INTERRUPTED, err
    assert err.strip().splitlines()[-1].startswith(
        "interrupted before a launch finished: nothing was measured (no overhead.csv"), err
    assert json.loads((out / "overhead.json").read_text())["complete"] is False


def test_ctrl_c_while_options_are_parsed_is_never_silent(jb, monkeypatch):
    """typer turns a KeyboardInterrupt in make_context into a silent Exit(130): main
    prints ``interrupted``."""
    import typer.core

    def parse(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(typer.core.TyperGroup, "make_context", parse)
    code, err = jb("faults")
    assert code == ExitStatus.INTERRUPTED
    assert [x for x in err.splitlines() if x.strip()] == ["interrupted"]


def test_click_abort_is_never_silent(jb, monkeypatch):
    """A command without its own line (here ``faults``): click turns Ctrl-C into Abort,
    and main prints ``interrupted`` before exiting 130."""
    import jitbench.faults

    monkeypatch.setattr(jitbench.faults, "catalog", _interrupt)
    code, err = jb("faults")
    assert code == ExitStatus.INTERRUPTED
    assert [x for x in err.splitlines() if x.strip()] == ["interrupted"]


# -- a signal once every rank has finished, while the agent shuts down ------------------


def _finished_ranks(run_dir: Path, ranks=(0, 1), world: int = 2, attempt: int = 0) -> None:
    """The last events of ``ranks`` of a ``world``-rank job in ``attempt``: ``process``
    (the world size), ``done`` and ``exit`` 0, what the workers write last."""
    from tests.unit.test_phases import _events

    for rank in ranks:
        _events(run_dir / "events", attempt, rank, [
            ("process", "point", 0.1, {"world_size": world}),
            ("done", "point", 3.0, {"step": 2}), ("exit", "point", 3.1, {"code": 0})])


def _send_once(sent: list) -> None:
    if not sent:
        sent.append(signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)


def test_a_signal_once_every_rank_finished_lets_the_agent_exit(tmp_path):
    """The agent still shutting down (1-3 s after its workers exit 0) when Ctrl-C comes:
    nothing is stopped, the launch is whole (no stop mark, exit 0, late_interrupt)."""
    _finished_ranks(tmp_path)
    sent: list[int] = []
    cmd = [sys.executable, "-c", "import time; time.sleep(1.5)"]
    res = launch_agent(cmd, tmp_path, progress=lambda st: _send_once(sent), timeout_s=30)
    assert sent
    assert res.late_interrupt and not res.interrupted and res.returncode == 0
    assert res.wall_s >= 1.4  # it waited for the agent to exit by itself
    assert not (tmp_path / STOP_FILE).exists()


def test_an_agent_that_never_exits_after_its_ranks_finished_is_stopped_unmarked(
        tmp_path, monkeypatch):
    monkeypatch.setattr(launch_mod, "FINISHED_GRACE_S", 0.5)
    _finished_ranks(tmp_path)
    sent: list[int] = []
    res = launch_agent(SLEEPER, tmp_path, progress=lambda st: _send_once(sent), timeout_s=30)
    assert res.late_interrupt and not res.interrupted
    assert res.returncode == 0  # every worker had succeeded; the agent only hung
    assert res.wall_s < 20 and not (tmp_path / STOP_FILE).exists()
    assert "did not exit within 0.5 s" in (tmp_path / "agent.log").read_text()


@pytest.mark.parametrize("events", ["one rank", "no exit", "failed exit", "older attempt",
                                    "no process"])
def test_a_signal_before_every_rank_finished_stops_the_agent(tmp_path, events):
    """Training not finished (a rank still working, an exit status not 0, a newer
    attempt running, a world of unknown size): stopped as before, ``interrupted``."""
    from tests.unit.test_phases import _events

    if events == "one rank":
        _finished_ranks(tmp_path, ranks=(0,))
    elif events == "no exit":
        for rank in (0, 1):
            _events(tmp_path / "events", 0, rank, [
                ("process", "point", 0.1, {"world_size": 2}), ("done", "point", 3.0, {"step": 2})])
    elif events == "failed exit":
        _finished_ranks(tmp_path, ranks=(0,))
        _events(tmp_path / "events", 0, 1, [
            ("process", "point", 0.1, {"world_size": 2}), ("exit", "point", 3.1, {"code": 1})])
    elif events == "older attempt":
        _finished_ranks(tmp_path)
        _events(tmp_path / "events", 1, 0, [("process", "point", 4.0, {"world_size": 2})])
    else:
        for rank in (0, 1):
            _events(tmp_path / "events", 0, rank, [
                ("done", "point", 3.0, {"step": 2}), ("exit", "point", 3.1, {"code": 0})])
    assert not launch_mod.training_finished(tmp_path)
    sent: list[int] = []
    res = launch_agent(SLEEPER, tmp_path, progress=lambda st: _send_once(sent), timeout_s=30)
    assert res.interrupted and not res.late_interrupt and res.wall_s < 20
    assert json.loads((tmp_path / STOP_FILE).read_text())["why"] == "interrupt"


def _agent_launches(monkeypatch, signal_in: int):
    """``execute`` as a real :func:`launch_agent` of a ``python -c`` agent that shuts
    down for 1 s after a finished run's files (``_finished_run`` and every rank's last
    events) were written; Ctrl-C arrives while launch ``signal_in`` (1: the run, 2: the
    reference) shuts down. Returns the run dirs launched."""
    from jitbench.harness import run as run_mod

    calls: list[Path] = []
    sent: list[int] = []

    def execute(spec, run_dir, progress=None, timeout_s=None):
        calls.append(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        _finished_run(run_dir)
        _finished_ranks(run_dir)
        cb = (lambda st: _send_once(sent)) if len(calls) == signal_in else None
        return launch_agent([sys.executable, "-c", "import time; time.sleep(1.0)"],
                            run_dir.resolve(), progress=cb, timeout_s=30)

    monkeypatch.setattr(run_mod, "execute", execute)
    return calls


def test_a_ctrl_c_while_the_finished_reference_shuts_down_still_compares_it(
        tmp_path, monkeypatch):
    """The new-user trial: Ctrl-C in the 1.5-3 s the agent takes to exit after the
    reference's workers exited 0 threw the reference away (interrupted, not compared)."""
    calls = _agent_launches(monkeypatch, signal_in=2)
    s, on_disk, run_dir = _run(tmp_path)
    assert len(calls) == 2 and not (run_dir / "reference" / STOP_FILE).exists()
    for x in (s, on_disk):
        assert x["interrupted"] is True and x["late_interrupt"] is True
        assert x["reference_complete"] is True and x["reference_cut_short"] is None
        assert x["state_equal"] is True and x["end_reason"] == "completed"
        assert x["harness_stopped"] is False
    assert verdict(on_disk) == (ExitStatus.INTERRUPTED, "interrupted once its launches had "
                                                        "ended; the records are complete")


def test_a_ctrl_c_while_the_finished_run_shuts_down_keeps_it_complete(tmp_path, monkeypatch):
    """The run's own launch: complete, not stopped; the reference is not started."""
    calls = _agent_launches(monkeypatch, signal_in=1)
    s, on_disk, run_dir = _run(tmp_path)
    assert calls == [run_dir] and not (run_dir / STOP_FILE).exists()
    for x in (s, on_disk):
        assert x["completed"] and x["harness_stopped"] is False and x["agent_exit"] == 0
        assert x["interrupted"] is True and x["late_interrupt"] is True
        assert x["reference_cut_short"] == REFERENCE_NOT_STARTED
