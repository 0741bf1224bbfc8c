"""``jitbench sweep`` places its faults as ``jitbench run`` does (new-user trial):
``--fault-step`` with ``--fault-mtbf-steps`` is the step the Poisson draw starts at,
checked by the same helper with the same line; the sweep records it, so a resume with
another start is refused like any other matrix; and every fault-placement option of
``run`` is either honoured by ``sweep`` or refused in one line, never ignored.
Nothing is launched: :func:`jitbench.harness.run.run` is the stub of
``test_sweep_resume``.
"""

from __future__ import annotations

import dataclasses
import json

import pandas as pd
import pytest

from jitbench.errors import InputError, SpecError
from jitbench.faults.schedule import poisson
from jitbench.harness import sweep as sweep_mod
from jitbench.harness.sweep import SweepConfig
from tests.conftest import one_line
from tests.unit.test_sweep_resume import launched  # noqa: F401 (a fixture)

POISSON = ("--workloads", "gpt", "--strategies", "jit", "--faults", "kill", "--steps", "24",
           "--fault-mtbf-steps", "3")


def _cfg(**kw) -> SweepConfig:
    base = {"workloads": ["gpt"], "strategies": ["jit"], "faults": ["kill"], "steps": 24,
            "fault_mtbf_steps": 3.0, "seeds": [0, 1]}
    return SweepConfig(**{**base, **kw})


@pytest.mark.parametrize("start", ["0", "-4", "24", "999"])
def test_a_start_step_outside_the_run_is_refused_as_run_refuses_it(jb, tmp_path, start):
    code, err = jb("sweep", *POISSON, "--fault-step", start, "--out", str(tmp_path / "sw"))
    line = one_line(err)
    assert code == 2, err
    assert line == (f"error: --fault-step {start} (the step --fault-mtbf-steps starts drawing "
                    "faults at) is outside the run: it must be in 1..23 (the run has 24 "
                    "steps)"), line
    code, err = jb("run", "--fault", "kill", "--steps", "24", "--fault-mtbf-steps", "3",
                   "--fault-step", start, "--run-dir", str(tmp_path / "r"))
    assert code == 2 and one_line(err) == line  # the one helper, the one line
    assert not (tmp_path / "sw").exists() and not (tmp_path / "r").exists()


def test_the_draw_starts_at_the_start_step(launched, jb, tmp_path):  # noqa: F811
    out = tmp_path / "sw"
    code, err = jb("sweep", *POISSON, "--seeds", "0,1", "--fault-step", "12", "--out",
                   str(out))
    assert code == 0, err
    t = pd.read_csv(out / "results.csv")
    for seed, text in zip(t["seed"], t["spec_json"], strict=True):
        steps = [f["step"] for f in json.loads(text)["faults"]]
        assert steps and min(steps) >= 12, steps
        assert steps == [f.step for f in poisson(["kill"], [0, 1], 24, int(seed),
                                                 mtbf_steps=3.0, start_step=12)]
    assert json.loads((out / "sweep.json").read_text())["config"]["fault_start_step"] == 12


def test_a_draw_without_fault_step_starts_at_step_1_as_before():
    cfg = _cfg()
    assert cfg.fault_start_step == 1
    assert cfg._faults("kill", 0) == poisson(["kill"], [0, 1], 24, 0, mtbf_steps=3.0)


def test_an_empty_draw_names_the_window_from_the_start_step(jb, tmp_path):
    code, err = jb("sweep", "--workloads", "gpt", "--strategies", "jit", "--faults", "kill",
                   "--steps", "24", "--fault-mtbf-steps", "1000", "--fault-step", "20",
                   "--out", str(tmp_path / "sw"))
    assert code == 2 and "in steps 20..23 of the 24-step run" in one_line(err), err


def test_resume_with_another_start_step_is_refused(launched, tmp_path):  # noqa: F811
    out = tmp_path / "sw"
    sweep_mod.run_sweep(_cfg(fault_start_step=12), out)
    recorded = (out / "sweep.json").read_text()
    launched.clear()
    for other in (_cfg(fault_start_step=5), _cfg()):
        with pytest.raises(SpecError) as e:
            sweep_mod.run_sweep(other, out, resume=True)
        assert "another matrix" in str(e.value) and "(--fault-step 12 -> " in str(e.value)
    assert launched == [] and (out / "sweep.json").read_text() == recorded
    sweep_mod.run_sweep(_cfg(fault_start_step=12), out, resume=True)  # its own: resumed


def test_a_sweep_recorded_before_the_start_step_resumes_from_step_1(launched, tmp_path):  # noqa: F811
    """A sweep.json without fault_start_step drew from step 1: resuming it without
    --fault-step is its matrix, with one another."""
    out = tmp_path / "sw"
    sweep_mod.run_sweep(_cfg(), out)
    doc = json.loads((out / "sweep.json").read_text())
    del doc["config"]["fault_start_step"]
    (out / "sweep.json").write_text(json.dumps(doc))
    sweep_mod.run_sweep(_cfg(), out, resume=True)
    with pytest.raises(SpecError, match=r"\(--fault-step 1 -> 4\)"):
        sweep_mod.run_sweep(_cfg(fault_start_step=4), out, resume=True)


def _flag(name: str, hint) -> str:
    """The command-line flag of an option-group field (its declared name, else the
    field's name in dashes)."""
    meta = next(m for m in hint.__metadata__ if hasattr(m, "param_decls"))
    # under Annotated typer takes a first positional name as the option's default
    decls = [d for d in (meta.default, *(meta.param_decls or ()))
             if isinstance(d, str) and d.startswith("--")]
    return decls[0] if decls else "--" + name.replace("_", "-")


HONOURED = {"--fault-step", "--fault-rank", "--fault-count", "--fault-mtbf-steps"}
"""Fault-placement options of ``run`` that ``sweep`` takes (each tested above or below)."""


def test_every_fault_placement_option_of_run_is_honoured_or_refused_by_sweep(jb, tmp_path):
    import typing

    from jitbench.cli.run import FaultOptions

    hints = typing.get_type_hints(FaultOptions, include_extras=True)
    flags = {_flag(f.name, hints[f.name]) for f in dataclasses.fields(FaultOptions)}
    assert HONOURED <= flags
    for flag in sorted(flags - HONOURED):
        value = [] if flag == "--every-attempt" else ["1"]
        code, err = jb("sweep", *POISSON, flag, *value, "--out", str(tmp_path / "sw"))
        assert code == 2 and flag in one_line(err), (flag, err)
    assert not (tmp_path / "sw").exists()


def test_fault_rank_with_a_poisson_draw_is_refused(jb, tmp_path):
    code, err = jb("sweep", *POISSON, "--fault-rank", "0", "--out", str(tmp_path / "sw"))
    assert code == 2 and one_line(err).startswith(
        "error: --fault-rank does not apply to --fault-mtbf-steps"), err


def test_fault_step_and_rank_of_one_fault_are_honoured():
    from jitbench.cli.sweep import fault_placement

    cfg = SweepConfig(**{**dataclasses.asdict(_cfg(fault_mtbf_steps=None)),
                         **fault_placement(7, 0, None)})
    assert [(f.rank, f.step) for f in cfg._faults("kill", 0)] == [(0, 7)]
    assert fault_placement(None, None, None) == {}  # the defaults: step 14, rank 1
    assert fault_placement(9, None, 3.0) == {"fault_start_step": 9}


def test_mtbf_that_no_strategy_reads_is_refused(jb, tmp_path):
    code, err = jb("sweep", "--workloads", "gpt", "--strategies", "jit", "--faults", "kill",
                   "--mtbf", "30m", "--out", str(tmp_path / "sw"))
    assert code == 2 and "--mtbf sizes the interval of periodic:auto" in one_line(err), err
    _cfg(fault_mtbf_steps=None, strategies=["jit", "periodic:auto"], mtbf_s=60.0).validate()


def test_a_start_step_without_a_draw_is_refused():
    with pytest.raises(InputError, match="applies to --fault-mtbf-steps"):
        _cfg(fault_mtbf_steps=None, fault_start_step=5).validate()


@pytest.mark.parametrize("args, line", [
    (("--strategies", "jit,jit"), "--strategies gives jit twice"),
    (("--faults", "kill,term,kill"), "--faults gives kill twice"),
    (("--seeds", "0,1,0"), "--seeds gives 0 twice"),
    (("--seeds", "0,00"), "--seeds gives 0 twice"),
    (("--workloads", "gpt,gpt"), "--workloads gives gpt twice"),
    (("--sizes", "gpt=tiny,gpt=tiny"), "--sizes gives a size of gpt twice (tiny, tiny)"),
])
def test_a_duplicate_matrix_entry_is_refused(jb, tmp_path, args, line):
    """The same cell twice would run twice into one run directory (two rows, one
    run_dir): one line naming the option and the value, exit 2, nothing made."""
    base = {"--workloads": "gpt", "--strategies": "jit", "--faults": "kill"}
    for k, v in zip(args[::2], args[1::2], strict=True):
        base[k] = v
    code, err = jb("sweep", *[x for kv in base.items() for x in kv], "--steps", "24",
                   "--out", str(tmp_path / "sw"))
    assert code == 2, err
    assert one_line(err).startswith(f"error: {line}"), err
    assert not (tmp_path / "sw").exists()


def test_a_duplicate_script_is_refused():
    from jitbench.harness.sweep import SweepScript

    sc = SweepScript("/x/train.py", ["--lr", "1"])
    cfg = SweepConfig(workloads=[], scripts=[sc, SweepScript("/x/train.py", ["--lr", "1"])],
                      strategies=["own"], faults=["kill"])
    with pytest.raises(SpecError, match=r"^--script gives /x/train.py --lr 1 twice"):
        cfg.validate()


@pytest.mark.parametrize("opts", [
    {"mtbf_steps": 3.0},
    {"mtbf_steps": 2.0, "step": 6, "count": 3},
])
@pytest.mark.parametrize("nproc", [2, 4])
def test_a_sweep_cell_plans_the_faults_run_plans(opts, nproc):
    """run --fault-mtbf-steps without --fault-rank draws every fault's rank from the
    world size exactly as a sweep cell does (one helper): the same options and seed
    give the same plan; --fault-rank pins the rank."""
    from jitbench.faults.schedule import plan_from_options

    for seed in range(4):
        cfg = _cfg(nproc=nproc, seeds=[seed], fault_mtbf_steps=opts["mtbf_steps"],
                   fault_count=opts.get("count"), fault_start_step=opts.get("step", 1))
        cell = cfg.spec("gpt", "jit", "kill", seed).faults
        planned = plan_from_options("kill", None, opts.get("step"), 24, nproc, seed,
                                    mtbf_steps=opts["mtbf_steps"], count=opts.get("count"))
        assert [(f.kind, f.rank, f.step) for f in planned] == \
            [(f.kind, f.rank, f.step) for f in cell]
    many = [f.rank for seed in range(8) for f in plan_from_options(
        "kill", None, None, 24, 4, seed, mtbf_steps=3.0)]
    assert set(many) == {0, 1, 2, 3}  # no longer every fault on rank 1
    pinned = plan_from_options("kill", 2, None, 24, 4, 0, mtbf_steps=3.0)
    assert {f.rank for f in pinned} == {2}


def test_resume_with_an_option_left_out_says_resume_takes_the_original_options(
        jb, launched, tmp_path):  # noqa: F811
    """The trial: a sweep of 8 steps with --fault-step 4, resumed without --fault-step,
    failed on the default step 14 alone; the line now says where the options are."""
    out = tmp_path / "sw"
    args = ("sweep", "--workloads", "gpt", "--strategies", "jit", "--faults", "kill",
            "--steps", "8", "--out", str(out))
    code, err = jb(*args, "--fault-step", "4")
    assert code == 0, err
    launched.clear()
    code, err = jb(*args, "--resume")
    line = one_line(err)
    assert code == 2 and "fault step 14 must be in 1..7" in line, err
    assert f"--resume takes the options the sweep was started with (recorded in {out}" in line
    assert launched == []
    code, err = jb(*args, "--fault-step", "14")  # not resuming: the plain line
    assert code == 2 and "--resume" not in one_line(err)
