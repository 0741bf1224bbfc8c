"""Schedules: every N steps, Poisson arrivals (seeded), TOML scenarios with strict
validation, and the CLI's fault options."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from jitbench.faults.schedule import (
    ScheduleError,
    every,
    expand_scenario,
    load_scenario,
    plan_from_options,
    poisson,
)


def test_every_n_steps():
    got = every("kill", 1, 4, steps=15)
    assert [f.step for f in got] == [4, 8, 12]
    assert [f.step for f in every("kill", 1, 3, steps=15, start=2, count=2)] == [2, 5]
    assert len({f.id for f in got}) == 3


def test_poisson_in_steps_is_seeded_and_one_per_step():
    a = poisson(["kill", "exception"], [0, 1], steps=200, seed=7, mtbf_steps=10)
    b = poisson(["kill", "exception"], [0, 1], steps=200, seed=7, mtbf_steps=10)
    c = poisson(["kill", "exception"], [0, 1], steps=200, seed=8, mtbf_steps=10)
    key = [(f.kind, f.rank, f.step) for f in a]
    assert key == [(f.kind, f.rank, f.step) for f in b]
    assert key != [(f.kind, f.rank, f.step) for f in c]
    steps = [f.step for f in a]
    assert steps == sorted(set(steps)) and all(1 <= s < 200 for s in steps)
    assert 10 <= len(a) <= 30  # mean 199/10 arrivals
    assert {f.kind for f in a} == {"kill", "exception"} and {f.rank for f in a} == {0, 1}


def test_poisson_in_seconds_needs_a_bound_and_gives_times():
    with pytest.raises(ScheduleError, match="horizon_s or max_faults"):
        poisson(["kill"], [1], steps=10, seed=0, mtbf_s=5.0)
    got = poisson(["kill"], [1], steps=10, seed=0, mtbf_s=5.0, horizon_s=60.0)
    times = [f.time_s for f in got]
    assert times == sorted(times) and all(0 < t < 60 for t in times) and got
    assert got == poisson(["kill"], [1], steps=10, seed=0, mtbf_s=5.0, horizon_s=60.0)
    assert len(poisson(["kill"], [1], steps=10, seed=0, mtbf_s=0.1, max_faults=3)) == 3


SCENARIO = """
description = "a campaign"
[[fault]]
kind = "slow"
rank = 0
step = 2
delay_s = 0.3
steps = 3
[[fault]]
kind = "xid"
time_s = 1.5
code = 63
[[fault]]
kind = "kill"
every_steps = 4
count = 2
[[fault]]
kind = "kill"
rank = 0
step = 5
at = "restore"
every_attempt = true
id = "k-restore"
[[poisson]]
kinds = ["exception"]
mtbf_steps = 3.0
ranks = [1]
start_step = 10
"""


def test_scenario_file_expands(tmp_path):
    p = tmp_path / "s.toml"
    p.write_text(SCENARIO)
    got = load_scenario(p, nproc=2, steps=20, seed=3)
    kinds = [(f.kind, f.rank, f.step, f.time_s) for f in got]
    assert kinds[:5] == [("slow", 0, 2, None), ("xid", 1, 1, 1.5), ("kill", 1, 4, None),
                         ("kill", 1, 8, None), ("kill", 0, 5, None)]
    assert got[0].params == {"delay_s": 0.3, "steps": 3} and got[1].params == {"code": 63}
    assert got[4].every_attempt and got[4].params == {"at": "restore"}
    assert got[4].id == "k-restore"
    assert all(f.kind == "exception" and f.step >= 10 for f in got[5:]) and got[5:]
    assert got == load_scenario(p, nproc=2, steps=20, seed=3)  # replayable


@pytest.mark.parametrize("text, needle", [
    ("[[fault]]\nkind='kill'\nstpe=3\n", "fault #1 (kill): unknown key 'stpe'"),
    ("[[fault]]\nkind='kill'\nstep='3'\n", "step must be int, got str '3'"),
    ("[[fault]]\nkind='kill'\nrank=true\n", "rank must be int, got bool"),
    ("[[fault]]\nkind='kill'\nrank=5\n", "rank 5 is outside the world of 2 ranks"),
    ("[[fault]]\nkind='kill'\nstep=20\n", "step 20 must be in 1..19"),
    ("[[fault]]\nkind='kill'\nstep=0\n", "step 0 must be in 1..19"),
    ("[[fault]]\nkind='meteor'\n", "unknown fault 'meteor'"),
    ("[[fault]]\nrank=1\n", "kind is required"),
    ("[[fault]]\nkind='slow'\ndelay_s=-1.0\n", "delay_s must be >= 0"),
    ("[[fault]]\nkind='slow'\ndelay_s='fast'\n", "delay_s must be float"),
    ("[[fault]]\nkind='kill'\ntime_s=1.0\nevery_steps=2\n", "give one trigger"),
    ("[[fault]]\nkind='kill'\ncount=2\n", "count needs every_steps"),
    ("[[fault]]\nkind='kill'\nevery_steps=0\n", "every_steps must be >= 1"),
    ("[[fault]]\nkind='kill'\ntime_s=-2\n", "time_s must be >= 0"),
    ("[[fault]]\nkind='xid'\ncode=79\nat='write'\n", "at must be step, collective"),
    ("[[fault]]\nkind='eio'\nat='step'\n", "unknown key 'at'"),
    ("[[fault]]\nkind='kill'\n[[fault]]\nkind='kill'\n", "two faults have the id"),
    ("[[poisson]]\nkinds=['kill']\n", "give exactly one of mtbf_steps and mtbf_s"),
    ("[[poisson]]\nkinds=[]\nmtbf_steps=3.0\n", "kinds must be a non-empty list"),
    ("[[poisson]]\nkinds=['kill']\nmtbf_steps=-3.0\n", "mtbf_steps must be > 0"),
    ("[[poisson]]\nkinds=['kill']\nmtbf_steps=3.0\nranks=[7]\n", "rank 7 is outside"),
    ("[[poisson]]\nkinds=['kill']\nmtbf=3.0\n", "unknown key 'mtbf'"),
    # absurd MTBFs: refused at once, never a loop that does not end or eats memory
    ("[[poisson]]\nkinds=['kill']\nmtbf_steps=1e-300\n", "is below 0.05 steps"),
    ("[[poisson]]\nkinds=['kill']\nmtbf_s=1e-9\nhorizon_s=1e9\n", "is below 0.001 s"),
    ("[[poisson]]\nkinds=['kill']\nmtbf_s=1.0\nhorizon_s=1e9\n", "more than 1000 faults"),
    ("[[poisson]]\nkinds=['kill']\nmtbf_s=nan\nmax_faults=2\n", "finite"),
    ("[[poisson]]\nkinds=['kill']\nmtbf_s=1.0\nhorizon_s=inf\n", "finite"),
    ("seed = 3\n[[fault]]\nkind='kill'\n", "unknown key 'seed'"),
    ("fault = 3\n", "fault must be an array of tables"),
    ("description = 'nothing'\n", "no faults"),
    ("[[fault]\nkind='kill'\n", "not valid TOML"),
])
def test_scenario_validation_is_one_line(tmp_path, text, needle):
    p = tmp_path / "bad.toml"
    p.write_text(text)
    with pytest.raises(ScheduleError) as ei:
        load_scenario(p, nproc=2, steps=20, seed=0)
    assert needle in str(ei.value) and "\n" not in str(ei.value), str(ei.value)
    assert str(p) in str(ei.value)


@pytest.mark.parametrize("opts, needle", [
    (dict(mtbf_steps=1e-12), "--fault-mtbf-steps: an MTBF of 1e-12 steps is below 0.05"),
    (dict(mtbf_steps=float("nan")), "--fault-mtbf-steps: the MTBF must be a finite number"),
    (dict(mtbf_s=float("inf")), "--fault-mtbf-s: the MTBF must be a finite number"),
    (dict(mtbf_s=1e-300), "--fault-mtbf-s: an MTBF of 1e-300 s is below 0.001 s"),
    (dict(time_s=float("inf")), "--fault-time-s must be a finite number >= 0"),
    (dict(every_steps=1, steps=10**8), "more than 1000 in one plan"),
])
def test_plan_from_options_refuses_absurd_schedules_at_once(opts, needle):
    steps = opts.pop("steps", 20)
    with pytest.raises(ScheduleError, match=re.escape(needle)):
        plan_from_options("kill", 1, None, steps, 2, 0, **opts)


def test_poisson_arrivals_in_one_microsecond_get_distinct_ids():
    plan = plan_from_options("kill", 1, None, 20, 2, 3, mtbf_s=0.001, count=400)
    times = [f.time_s for f in plan]
    assert len(plan) == 400 and times == sorted(times) and len(set(times)) == 400


def test_plan_from_options():
    assert plan_from_options("none", None, None, 10, 2, 0) == []
    [f] = plan_from_options(None, 1, None, 30, 2, 0)
    assert (f.kind, f.step) == ("nccl-hang", 10)
    [f] = plan_from_options("xid", 0, 4, 10, 2, 0, params={"code": "48"})
    assert f.params == {"code": 48}
    [f] = plan_from_options("kill", 1, None, 10, 2, 0, time_s=2.5)
    assert f.time_s == 2.5 and f.id == "kill@1:t2.5"
    assert [f.step for f in plan_from_options("term", 1, None, 10, 2, 0, every_steps=3)] == \
        [3, 6, 9]
    a = plan_from_options("kill", 1, None, 50, 2, 5, mtbf_steps=8.0)
    assert a == plan_from_options("kill", 1, None, 50, 2, 5, mtbf_steps=8.0) and a
    with pytest.raises(ScheduleError, match="slow: delay_s must be float"):
        plan_from_options("slow", 1, 2, 10, 2, 0, params={"delay_s": "soon"})
    with pytest.raises(ScheduleError, match="needs a --fault"):
        plan_from_options("none", None, 2, 10, 2, 0, time_s=1.0)
    [f] = plan_from_options("kill", 1, 2, 10, 2, 0, every_attempt=True)
    assert f.every_attempt


def test_plan_from_options_with_a_scenario(tmp_path):
    p = tmp_path / "s.toml"
    p.write_text("[[fault]]\nkind = 'term'\nrank = 0\nstep = 4\n")
    [f] = plan_from_options(None, None, None, 10, 2, 0, scenario=p)  # no default nccl-hang
    assert (f.kind, f.rank, f.step) == ("term", 0, 4)
    both = plan_from_options("kill", 1, 6, 10, 2, 0, scenario=p)
    assert [(f.kind, f.step) for f in both] == [("term", 4), ("kill", 6)]


@pytest.mark.parametrize("kind", sorted(__import__("jitbench.faults").faults.FAULTS))
def test_every_fault_kind_plans_and_validates_with_defaults(kind):
    """``jitbench run --fault KIND`` builds a valid spec for every kind (on rank 0,
    the rank that writes periodic checkpoints, so the storage faults can fire)."""
    from jitbench.errors import SpecError
    from jitbench.faults import FAULTS
    from jitbench.faults.network import refusal
    from jitbench.harness.spec import RunSpec

    plan = plan_from_options(kind, 0, 3, 10, 2, 0)
    spec = RunSpec(faults=plan, strategy="periodic:3")
    spec.workload.steps = 10
    if kind == "amp-backoff":  # a GradScaler to back off
        spec.workload.name, spec.workload.extra = "gpt", {"amp": "fp16"}
    if FAULTS[kind].family == "network" and refusal(kind):  # not on a namespaced node
        with pytest.raises(SpecError, match="refusing|namespace"):
            spec.validate()
    else:
        spec.validate()
    assert [(f.kind, f.rank, f.step) for f in plan] == [(kind, 0, 3)]


def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "jitbench.cli", *args], capture_output=True,
                          text=True, timeout=120, cwd=cwd)


@pytest.mark.parametrize("args, needle", [
    (["--fault", "slow", "--slow-s", "9"], "must stay below the hang floor"),
    (["--fault", "kill", "--xid", "48"], "--xid applies to --fault xid"),
    (["--fault", "xid", "--xid", "-3"], "code must be >= 1"),
    (["--fault", "slow", "--fault-param", "delay=1"], "unknown parameter 'delay'"),
    (["--fault", "slow", "--fault-param", "delay_s"], "--fault-param takes KEY=VALUE"),
    (["--fault", "kill", "--fault-every", "3", "--fault-mtbf-steps", "4"],
     "give one trigger"),
    (["--fault", "eio", "--strategy", "none"], "writes no checkpoints"),
    (["--scenario", "missing.toml"], "does not exist"),
])
def test_cli_fault_options_bad_input_exit_2(tmp_path, monkeypatch, capsys, args, needle):
    """In-process (the subprocess form is tested below and in test_cli.py)."""
    from jitbench import cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["jitbench", "run", *args, "--run-dir", "r"])
    with pytest.raises(SystemExit) as ei:
        cli.main()
    err = capsys.readouterr().err
    assert ei.value.code == 2, err
    assert needle in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "r").exists()


def test_cli_bad_scenario_exit_2(tmp_path):
    (tmp_path / "s.toml").write_text("[[fault]]\nkind='kill'\nsteps=3\n")
    p = _cli("run", "--scenario", "s.toml", "--run-dir", str(tmp_path / "r"), cwd=tmp_path)
    assert p.returncode == 2
    assert p.stderr.startswith("error: s.toml: fault #1 (kill): unknown key 'steps' (allowed: ")
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_expand_scenario_dict_form():
    got = expand_scenario({"fault": [{"kind": "term", "rank": 0, "step": 2}]}, 2, 10, 0)
    assert [(f.kind, f.rank, f.step) for f in got] == [("term", 0, 2)]
