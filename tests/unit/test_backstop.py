"""``jit:backstop=N`` (``jitbench run --strategy jit --backstop periodic:N``): JIT with a
low-frequency periodic safety net (issue 15). Its forms and refusals, the CLI spelling,
the storage faults it lets fire, the runtime writing the backstop, and how a failure
whose JIT checkpoint was lost is judged and described (no processes started)."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from jitbench.errors import SpecError
from jitbench.faults import FaultSpec
from jitbench.harness.metrics import FailureMetrics, jit_fallback
from jitbench.harness.overhead import OverheadConfig
from jitbench.harness.run import replay_ok, replay_promise
from jitbench.harness.spec import RunSpec, Strategy
from jitbench.runtime import strategies
from jitbench.runtime.config import RuntimeConfig
from jitbench.runtime.core import Runtime
from jitbench.runtime.events import EventLog, read_events
from jitbench.runtime.strategies.jit import JustInTime
from jitbench.workloads import WorkloadConfig


@pytest.mark.parametrize("text, backstop, canonical", [
    ("jit", 0, "jit"),                              # no backstop: the bare name stays
    ("jit:backstop=50", 50, "jit:backstop=50"),
    ("JIT:backstop=007", 7, "jit:backstop=7"),
])
def test_backstop_forms(text, backstop, canonical):
    c = strategies.parse(text)
    assert (c.name, c.interval, c.backstop, c.all_options()) == (
        "jit", 0, backstop, {"backstop": backstop, "split": 0})
    assert str(c) == canonical and strategies.parse(str(c)) == c
    assert c.every == backstop
    assert c.writers == (("rank0", "on_failure") if backstop else ("on_failure",))
    st = Strategy.parse(text)  # the harness's form keeps the option
    assert str(st) == canonical and st.backstop == backstop
    assert RunSpec(strategy=text).runtime_config("ck").options == {"backstop": backstop,
                                                                   "split": 0}
    assert "jit[:backstop=N][:split=S]" in strategies.usage()


@pytest.mark.parametrize("text, needle", [
    ("jit:backstop=0", "backstop must be an integer >= 1, got '0'"),  # 0 is the default: off
    ("jit:backstop=x", "backstop must be an integer >= 1, got 'x'"),
    ("jit:backstop=", "backstop must be an integer >= 1, got ''"),
    ("jit:backstop=2:backstop=3", "option backstop given twice"),
    ("jit:5", "strategy 'jit:5': jit takes no interval (use jit or jit:backstop=N or jit:split=N)"),
    ("periodic:5:backstop=2", "periodic takes no options, not 'backstop'"),
    ("jit-inprocess:backstop=2", "jit-inprocess takes no options, not 'backstop'"),
])
def test_backstop_refusals_are_one_line(text, needle):
    with pytest.raises(SpecError) as exc:
        strategies.parse(text)
    assert needle in str(exc.value) and "\n" not in str(exc.value)


def test_with_backstop_maps_the_cli_spelling_and_refuses_the_rest():
    assert str(strategies.with_backstop("jit", "periodic:50")) == "jit:backstop=50"
    assert str(strategies.with_backstop(" JIT ", "Periodic:3")) == "jit:backstop=3"
    assert strategies.with_backstop("periodic:5", None) == strategies.parse("periodic:5")
    for strategy, backstop, needle in [
            ("periodic:5", "periodic:3", "--backstop applies to --strategy jit"),
            ("jit-inprocess", "periodic:3", "not jit-inprocess"),
            ("none", "periodic:3", "not none"),
            ("jit", "periodic:0", "--backstop takes periodic:N"),
            ("jit", "periodic", "--backstop takes periodic:N"),
            ("jit", "periodic-async:5", "--backstop takes periodic:N"),
            ("jit", "periodic:auto", "--backstop takes periodic:N"),
            ("jit:backstop=4", "periodic:3", "names a backstop already")]:
        with pytest.raises(SpecError) as exc:
            strategies.with_backstop(strategy, backstop)
        assert needle in str(exc.value) and "\n" not in str(exc.value), (strategy, backstop)


@pytest.mark.parametrize("args, needle", [
    (["--strategy", "periodic:5", "--backstop", "periodic:3"],
     "--backstop applies to --strategy jit"),
    (["--backstop", "periodic:0"], "--backstop takes periodic:N"),
    (["--backstop", "every:5"], "--backstop takes periodic:N"),
])
def test_cli_backstop_refusals_exit_2(tmp_path, monkeypatch, capsys, args, needle):
    from jitbench import cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["jitbench", "run", *args, "--run-dir", "r"])
    with pytest.raises(SystemExit) as ei:
        cli.main()
    err = capsys.readouterr().err
    assert ei.value.code == 2, err
    assert needle in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "r").exists()


def test_cli_backstop_refusal_is_not_a_traceback(tmp_path):
    p = subprocess.run([sys.executable, "-m", "jitbench.cli", "run", "--strategy", "none",
                        "--backstop", "periodic:3", "--run-dir", str(tmp_path / "r")],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert p.returncode == 2, p.stderr
    assert "--backstop applies to --strategy jit" in p.stderr
    assert "Traceback" not in p.stderr + p.stdout and len(p.stderr.strip().splitlines()) == 1


def test_cli_backstop_becomes_the_strategy_of_the_spec():
    from jitbench.cli.run import (
        DetectionOptions,
        FaultOptions,
        JobOptions,
        TrainingOptions,
        build_spec,
    )

    spec = build_spec(FaultOptions(fault="kill", fault_step=6), TrainingOptions(steps=20),
                      JobOptions(strategy="jit", backstop="periodic:4"), DetectionOptions())
    assert spec.strategy == "jit:backstop=4"
    assert spec.runtime_config("ck").options == {"backstop": 4, "split": 0}
    plain = build_spec(FaultOptions(fault="kill", fault_step=6), TrainingOptions(steps=20),
                       JobOptions(strategy="jit"), DetectionOptions())
    assert plain.strategy == "jit"


def _spec(strategy, *faults):
    return RunSpec(faults=list(faults), strategy=strategy, workload=WorkloadConfig(steps=20))


@pytest.mark.parametrize("kind", ["eio", "enospc", "torn-write"])
def test_write_faults_follow_who_writes_under_the_backstop(kind):
    """Under jit alone a write fault needs a failing fault at or after it (the JIT save);
    with a backstop rank 0 writes every N steps, so one on rank 0 fires by itself. On
    rank 1 it still needs a peer's failure."""
    with pytest.raises(SpecError, match="written only when a peer fails"):
        _spec("jit", FaultSpec(kind, 0, 5)).validate()
    _spec("jit:backstop=4", FaultSpec(kind, 0, 5)).validate()
    with pytest.raises(SpecError, match="rank 1 writes a checkpoint only when a peer fails "
                                        r"\(the backstop is rank 0's\)"):
        _spec("jit:backstop=4", FaultSpec(kind, 1, 5)).validate()
    _spec("jit:backstop=4", FaultSpec(kind, 1, 5), FaultSpec("kill", 0, 6)).validate()
    _spec("jit:backstop=4", FaultSpec("corrupt", 1, 9)).validate()  # a backstop to corrupt


def test_the_runtime_writes_the_backstop_every_n_steps(tmp_path):
    """jit:backstop=2 on one rank: periodic checkpoints at steps 2 and 4 (the option, not
    RuntimeConfig.interval, sets it); a switch to plain jit stops them, and a switch back
    to jit:backstop=3 starts them again (the runtime asks hooks_boundary at each switch)."""
    rt = Runtime(RuntimeConfig(strategy="jit", options={"backstop": 2},
                               ckpt_dir=str(tmp_path / "ck"), hang_first_s=600),
                 EventLog(tmp_path / "ev" / "attempt000_rank00000.jsonl", 0, 0), 0, 1)
    try:
        assert isinstance(rt.strategy, JustInTime) and rt.strategy.backstop == 2
        model = torch.nn.Linear(2, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        rt.register(model, opt)
        assert rt.restore().step == 0

        def train(first, last):
            for step in rt.steps(first, last):
                with rt.step(step):
                    model(torch.ones(1, 2)).sum().backward()
                    opt.step()
                    opt.zero_grad()

        train(1, 5)
        rt.set_strategy("jit", 0, strategies.parse("jit").all_options())
        assert rt.strategy.backstop == 0
        train(6, 8)
        rt.set_strategy("jit", 0, strategies.parse("jit:backstop=3").all_options())
        train(9, 12)
    finally:
        rt.close()
    saves = [(e["kind"], e["step"]) for e in read_events(tmp_path / "ev")
             if e["event"] == "save" and e["phase"] == "end" and e.get("ok")]
    assert saves == [("periodic", 2), ("periodic", 4), ("periodic", 9), ("periodic", 12)]


def test_overhead_segments_hold_whole_backstop_intervals():
    cfg = OverheadConfig(strategies=["jit:backstop=5"], segment_steps=20, repeats=1)
    assert [str(s) for s in cfg.validate()] == ["none", "jit:backstop=5"]
    segs, _ = cfg.plan()
    first = segs[1][0]
    assert (first - 1) % 5 == 5 // 2  # the backstop's checkpoints fall mid-segment
    with pytest.raises(SpecError, match="not a multiple of the interval of jit:backstop=6"):
        OverheadConfig(strategies=["jit:backstop=6"], segment_steps=20).validate()


def _failure(replayed, expected, kind="jit"):
    return SimpleNamespace(replayed_steps=replayed, expected_replayed_steps=expected,
                           restored_kind=kind)


def test_replay_is_judged_against_the_newest_committed_checkpoint():
    # the JIT checkpoint committed: at most one step, under both
    for s in ("jit", "jit:backstop=3"):
        assert replay_ok(s, [_failure(1, 1)]) is True
        assert replay_ok(s, [_failure(0, 1)]) is False  # not the newest
    # every JIT copy lost, the backstop of step 3 restored with 5 completed: 2 steps
    assert replay_ok("jit:backstop=3", [_failure(2, 2, "periodic")]) is True
    assert replay_ok("jit:backstop=3", [_failure(5, 2, "periodic")]) is False  # skipped it
    assert replay_ok("jit:backstop=3", [_failure(2, 5, "periodic")]) is False
    assert replay_ok("jit", [_failure(2, 2, "jit")]) is False  # plain jit promises one
    assert "every 3 steps" in replay_promise("jit:backstop=3")
    assert replay_promise("jit") == "one"


def _ev(rank, phase, t, **kw):
    return {"event": "save", "kind": "jit", "rank": rank, "phase": phase, "t_mono": t, **kw}


def test_a_lost_jit_checkpoint_is_said_in_words():
    fm = FailureMetrics("kill", 1, 12, 0, completed_before=11, restored_step=10,
                        restored_kind="periodic", replayed_steps=1)
    died = [_ev(0, "begin", 5.0, step=11)]
    assert jit_fallback(fm, died, 4.0, "t_mono", backstop=10) == (
        "no JIT checkpoint survived the failure at step 12 (rank 0 died while writing it): "
        "restored step 10 (backstop periodic:10)")
    failed = died + [_ev(0, "end", 5.5, step=11, ok=False, error="[Errno 5] Input/output "
                                                                     "error")]
    assert "(rank 0's write failed: [Errno 5] Input/output error)" in jit_fallback(
        fm, failed, 4.0, "t_mono", backstop=10)
    assert "(no survivor wrote one)" in jit_fallback(fm, [], 4.0, "t_mono", backstop=10)
    old = [_ev(0, "end", 1.0, step=3, ok=False, error="x")]  # before the fault: not this one
    assert "(no survivor wrote one)" in jit_fallback(fm, old, 4.0, "t_mono", backstop=10)
    older = FailureMetrics("kill", 1, 12, 0, completed_before=11, restored_step=4,
                           restored_kind="jit", replayed_steps=7)
    assert jit_fallback(older, died, 4.0, "t_mono").endswith(
        "restored step 4 (an older JIT checkpoint)")
    # the JIT checkpoint was restored: nothing fell back
    ok = FailureMetrics("kill", 1, 12, 0, completed_before=11, restored_step=11,
                        restored_kind="jit", replayed_steps=0)
    assert jit_fallback(ok, died, 4.0, "t_mono", backstop=10) is None
