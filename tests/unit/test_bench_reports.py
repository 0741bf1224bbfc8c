"""Overhead plan and statistics, the regression gate and the HTML report, on synthetic records."""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from jitbench.errors import ExitStatus
from jitbench.harness.overhead import OverheadConfig, summarize
from jitbench.harness.spec import SpecError
from jitbench.reports import gate as g
from jitbench.reports.html import write_report


def _position_and_predecessor_counts(order):
    by_rep: dict = {}
    for label, rep in order:
        by_rep.setdefault(rep, []).append(label)
    pos = Counter((lab, i) for row in by_rep.values() for i, lab in enumerate(row))
    pred = Counter((a, b) for row in by_rep.values() for a, b in zip(row, row[1:], strict=False))
    return by_rep, pos, pred


@pytest.mark.parametrize("strategies", [["jit"], ["jit", "periodic:10"],
                                        ["jit", "periodic:10", "periodic-async:10"]])
def test_overhead_order_is_balanced_in_position_and_predecessor(strategies):
    cfg = OverheadConfig(strategies=strategies, segment_steps=20, seed=3)
    labels = cfg.labels()
    assert labels[0] == "none" and labels[-1] == "none-aa"
    n = len(labels)
    assert cfg.design_size() == (n if n % 2 == 0 else 2 * n) and cfg.balanced()
    for mult in (1, 2):
        cfg.repeats = mult * cfg.design_size()
        by_rep, pos, pred = _position_and_predecessor_counts(cfg.order())
        assert all(sorted(row) == sorted(labels) for row in by_rep.values())
        # every label in every position, after every other label, equally often
        assert len(pos) == n * n and len(set(pos.values())) == 1
        assert len(pred) == n * (n - 1) and len(set(pred.values())) == 1
    # recorded seed: the same order again; another seed: another order
    assert cfg.order() == cfg.order()
    other = OverheadConfig(strategies=strategies, segment_steps=20, seed=4,
                           repeats=cfg.repeats)
    assert other.order() != cfg.order()
    cfg.repeats = cfg.design_size() + 1
    assert not cfg.balanced()


def test_overhead_plan_warms_up_every_segment_and_centres_checkpoints():
    cfg = OverheadConfig(strategies=["jit", "periodic:10"], segment_steps=20, repeats=4,
                         warmup_steps=4, segment_warmup=3)
    segs, total = cfg.plan()
    assert cfg.strategies == ["none", "jit", "periodic:10"]
    assert [tuple(x) for x in cfg.order()] == [(s[1], s[2]) for s in segs[1:]]
    assert segs[0] == [1, "none", -1]
    assert cfg.segment_length() == 30  # 3 + 20 stretched to a multiple of the interval
    skip = cfg.segment_length() - cfg.segment_steps
    for s in segs[1:]:
        assert (s[0] + skip - 1) % 10 == 5  # checkpoints (step % 10 == 0) mid-window
    assert all(b[0] - a[0] == 30 for a, b in zip(segs[1:], segs[2:], strict=False))
    assert total == segs[-1][0] + 30
    for bad in (dict(strategies=["periodic:7"], segment_steps=20),
                dict(strategies=["periodic:auto"]),
                dict(strategies=["jit", "jit"]), dict(segment_steps=1),
                dict(segment_warmup=-1), dict(repeats=0)):
        with pytest.raises(SpecError):
            OverheadConfig(**bad).validate()


def test_overhead_defaults_short_segments_in_one_launch_and_whole_intervals_otherwise():
    from jitbench.harness.overhead import MIN_MEASURED_STEPS

    jit = OverheadConfig(strategies=["jit"])
    jit.validate()
    # no interval: 2 measured steps after 1 warm-up, whole designs to 100 steps a label
    assert (jit.segment_steps, jit.segment_warmup, jit.segment_length()) == (2, 1, 3)
    assert jit.n_repeats() % jit.design_size() == 0 and jit.balanced()
    assert jit.n_repeats() * jit.segment_steps >= MIN_MEASURED_STEPS
    assert (jit.n_repeats() - jit.design_size()) * jit.segment_steps < MIN_MEASURED_STEPS
    per = OverheadConfig(strategies=["jit", "periodic:7", "periodic-async:7"])
    per.validate()  # one checkpoint per measured window, mid-window
    assert (per.segment_steps, per.segment_warmup, per.segment_length()) == (7, 3, 14)
    assert per.n_repeats() * 7 >= MIN_MEASURED_STEPS and per.balanced()
    every_step = OverheadConfig(strategies=["periodic-async:1"])
    every_step.validate()  # an interval of 1 still warms up past an async save's spill
    assert (every_step.segment_steps, every_step.segment_warmup) == (2, 3)
    launches = OverheadConfig(strategies=["jit", "jit-inprocess"])
    launches.validate()  # a launch's start-up costs seconds: longer windows, one design
    assert (launches.segment_steps, launches.n_repeats()) == (20, launches.design_size())
    inmem = OverheadConfig(strategies=["inmem:3"])
    inmem.validate()  # launch mode, rounded up to whole intervals
    assert inmem.mode == "launches" and inmem.segment_steps == 21
    script = OverheadConfig(strategies=["own", "jit"], script=True)
    script.validate()
    assert script.segment_steps == 20 and script.n_repeats() == script.design_size()
    # what is given is kept
    given = OverheadConfig(strategies=["jit"], segment_steps=20, segment_warmup=3, repeats=6)
    given.validate()
    assert (given.segment_steps, given.segment_warmup, given.n_repeats()) == (20, 3, 6)


def test_overhead_of_a_strategy_with_its_own_launcher_is_measured_in_launches():
    seg = OverheadConfig(strategies=["jit"], repeats=2)
    seg.validate()
    assert seg.mode == "segments"
    cfg = OverheadConfig(strategies=["jit", "jit-inprocess"], segment_steps=6,
                         warmup_steps=3)
    cfg.validate()
    assert cfg.mode == "launches"  # spares and the membership store live outside a segment
    order = cfg.order()  # the same design as segment mode
    assert len(order) == 4 * 4
    _, pos, pred = _position_and_predecessor_counts(order)
    assert set(pos.values()) == {1} and set(pred.values()) == {1}
    from jitbench.harness.overhead import launch_spec
    from jitbench.harness.spec import RunSpec
    from jitbench.workloads import WorkloadConfig

    base = RunSpec(workload=WorkloadConfig(name="gpt", size="tiny"))
    sp = launch_spec(base, cfg, "none-aa")
    assert sp.strategy == "none" and sp.steps == 3 + 6 + 1 and not sp.faults
    ip = launch_spec(base, cfg, "jit-inprocess")
    assert ip.strategy == "jit-inprocess"
    # a launch has no segments, yet its CPU-time overhead needs cpu_s in step-begin events
    assert not ip.segments and ip.runtime_config("ckpt").step_cpu_time
    assert not base.runtime_config("ckpt").step_cpu_time


def _synthetic(cfg, true_pct, drift=0.0, noise=0.0, seed=0):
    """Segment rows of a synthetic run in ``cfg.order()``: ``true_pct`` per strategy,
    a linear drift per segment and Gaussian noise."""
    rng = random.Random(seed)
    rows = []
    for k, (label, rep) in enumerate(cfg.order()):
        base = 0.1 * (1 + true_pct.get(label, 0.0) / 100) * (1 + drift * k)
        base *= 1 + rng.gauss(0, noise)
        rows.append({"strategy": label, "repeat": rep, "step_s": base, "rt_us": 5.0,
                     "cpu_step_s": base / 2})
    return rows


def test_bootstrap_interval_contains_the_true_ratio_under_drift():
    cfg = OverheadConfig(strategies=["jit", "periodic:10"], segment_steps=20, seed=1)
    cfg.repeats = 2 * cfg.design_size()
    true = {"jit": 0.5, "periodic:10": 8.0}
    rows = _synthetic(cfg, true, drift=0.002, noise=0.004, seed=2)  # +16% over the run
    s = {r["strategy"]: r for r in summarize(rows, cfg.strategies, 2000, 0)}
    for name, pct in true.items():
        assert s[name]["overhead_pct_lo"] <= pct <= s[name]["overhead_pct_hi"], s[name]
    aa = s["none-aa"]
    assert aa["overhead_pct_lo"] <= 0.0 <= aa["overhead_pct_hi"] and aa["control_ok"]
    assert abs(aa["overhead_pct"]) < 1.0
    assert not s["periodic:10"]["within_noise"]
    # noise-free drift only: the balanced order cancels it exactly
    exact = {r["strategy"]: r for r in summarize(_synthetic(cfg, true, drift=0.002),
                                                  cfg.strategies, 500, 0)}
    assert exact["jit"]["overhead_pct"] == pytest.approx(0.5, abs=1e-9)
    assert exact["none-aa"]["overhead_pct"] == pytest.approx(0.0, abs=1e-9)
    assert exact["none"]["overhead_pct_lo"] == exact["none"]["overhead_pct_hi"] == 0.0
    # the bootstrap is seeded
    assert summarize(rows, cfg.strategies, 500, 7) == summarize(rows, cfg.strategies, 500, 7)


def test_a_position_biased_run_is_flagged_by_the_control():
    # the old ABBA order: the control always third or fourth, after periodic-async in even
    # repeats; a segment after periodic-async's spilled writes is 5% slower
    order = []
    labels = ["none", "jit", "periodic-async:10", "none-aa"]
    for r in range(8):
        order += [(s, r) for s in (labels if r % 2 == 0 else labels[::-1])]

    class Abba(OverheadConfig):
        def order(self):
            return order

    cfg = Abba(strategies=["jit", "periodic-async:10"], segment_steps=20)
    rows = []
    rng = random.Random(0)
    for k, (label, rep) in enumerate(cfg.order()):
        after_async = k > 0 and cfg.order()[k - 1][0] == "periodic-async:10"
        rows.append({"strategy": label, "repeat": rep, "rt_us": None, "cpu_step_s": None,
                     "step_s": 0.1 * (1.05 if after_async else 1.0) * (1 + rng.gauss(0, 0.002))})
    s = {r["strategy"]: r for r in summarize(rows, cfg.strategies, 2000, 0)}
    assert s["none-aa"]["overhead_pct_lo"] > 0  # the control is off zero: flagged
    assert not s["jit"]["control_ok"] and s["jit"]["within_noise"] is None
    # the same spill in a balanced order: the control holds, jit is within noise
    bal = OverheadConfig(strategies=["jit", "periodic-async:10"], segment_steps=20, seed=0)
    rows = []
    for k, (label, rep) in enumerate(bal.order()):
        prev = bal.order()[k - 1] if k else None
        after_async = prev is not None and prev[1] == rep and prev[0] == "periodic-async:10"
        rows.append({"strategy": label, "repeat": rep, "rt_us": None, "cpu_step_s": None,
                     "step_s": 0.1 * (1.05 if after_async else 1.0) * (1 + rng.gauss(0, 0.002))})
    s = {r["strategy"]: r for r in summarize(rows, bal.strategies, 2000, 0)}
    assert s["none-aa"]["control_ok"] and abs(s["none-aa"]["overhead_pct"]) < 1.0
    assert s["jit"]["within_noise"]


def _table(n_rep=3, **over):
    rows = []
    for strategy in ("jit", "periodic:3"):
        for fault in ("kill", "nccl-hang"):
            for rep in range(n_rep):
                rows.append({"workload": "gpt", "strategy": strategy, "fault": fault,
                             "repeat": rep, "spec_hash": f"h-{strategy}-{fault}",
                             "results_version": 1, "machine_torch": "2.14.1",
                             "machine_host": "a", "machine_cpus": 2, "world_size": 2,
                             "completed": True, "state_equal": True, "replay_ok": True,
                             "replayed_steps": 0 if strategy == "jit" else 1,
                             "expected_replayed_steps": 0 if strategy == "jit" else 1,
                             "detect_s": 2.0 + 0.1 * rep, "save_s": 0.05, "restart_s": 6.0 + rep,
                             "restore_s": 0.1, "recovery_s": 9.0 + rep, "wasted_gpu_s": 18.0,
                             "step_s": 0.05})
    t = pd.DataFrame(rows)
    for k, v in over.items():
        t[k] = v
    return t


def test_gate_passes_its_own_baseline_and_names_a_regressed_metric():
    base = _table()
    v = g.compare(base, base)
    assert not v.regressions and not v.violations and v.lines()[-1].startswith("gate: PASS")
    new = _table(n_rep=1)
    new.loc[(new.strategy == "jit") & (new.fault == "kill"), "recovery_s"] = 40.0
    v = g.compare(base, new)
    assert [(c.config, c.metric) for c in v.regressions] == [("gpt/jit/kill", "recovery_s")]
    assert "REGRESSION" in v.lines()[0] and "recovery_s" in v.lines()[0]


def test_gate_noise_band_and_absolute_floor():
    base = _table()
    new = _table(n_rep=1)
    # restart_s repeats 6, 7, 8 s: spread 2/7 = 29%; 11 s is x1.57 < 1.5 * 1.29 = x1.93
    new["restart_s"] = 11.0
    # save_s doubles, but by 50 ms: under the 1 s floor
    new["save_s"] = 0.1
    v = g.compare(base, new)
    assert not v.regressions
    noisy = {(c.config, c.metric) for c in v.checks if c.status == "within noise"}
    assert ("gpt/jit/kill", "restart_s") in noisy and ("gpt/jit/kill", "save_s") in noisy
    assert any("within noise" in line for line in v.lines())


def test_gate_invariants_are_exact():
    base = _table()
    new = _table(n_rep=1)
    new.loc[0, "state_equal"] = False
    new.loc[2, "replay_ok"] = False
    v = g.compare(base, new)
    assert {c.metric for c in v.violations} == {"state_equal", "replayed_steps"}
    assert all(line.startswith("VIOLATION") for line in v.lines()[:2])
    # the same violation in two repeats: two lines that say which run each is
    both = _table(n_rep=2)
    both["state_equal"] = both["strategy"] != "jit"
    lines = [x for x in g.compare(base, both).lines() if x.startswith("VIOLATION")]
    assert len(lines) == len(set(lines)) == 4
    assert "gpt/jit/kill (repeat 1) state_equal" in " ".join(lines)


@pytest.mark.parametrize("change, needle", [
    (dict(machine_torch="2.15.0"), "machine_torch"),
    (dict(results_version=2), "results_version"),
    (dict(spec_hash="other"), "spec_hash"),
])
def test_gate_refuses_incomparable_results(change, needle):
    with pytest.raises(g.Incomparable, match=needle):
        g.compare(_table(), _table(n_rep=1, **change))


@pytest.mark.parametrize("column", ["completed", "replay_ok", "state_equal", "restart_s"])
def test_gate_never_passes_a_table_without_what_it_checks(column):
    """A results (or baseline) table without a checked column is refused, not passed."""
    with pytest.raises(g.Incomparable, match=f"lacks the column '{column}'"):
        g.compare(_table(), _table(n_rep=1).drop(columns=[column]))
    with pytest.raises(g.Incomparable, match=f"lacks the column '{column}'"):
        g.compare(_table().drop(columns=[column]), _table(n_rep=1))


def test_gate_a_lost_measurement_is_a_regression_and_a_missing_invariant_is_named():
    new = _table(n_rep=1)
    new["restart_s"] = float("nan")
    new["state_equal"] = new["state_equal"].astype(object)
    new.loc[0, "state_equal"] = None
    v = g.compare(_table(), new)
    lost = [c for c in v.regressions if c.metric == "restart_s"]
    assert len(lost) == 4 and all("not measured in the results" in c.line() for c in lost)
    [bad] = v.violations
    assert bad.metric == "state_equal" and bad.detail == "not recorded"
    new["unfired_faults"] = [0, 1, 0, 0]  # a planned fault never fired: no measurement
    assert "unfired_faults" in {c.metric for c in g.compare(_table(), new).violations}
    assert v.lines()[-1].startswith("gate: FAIL")


def test_gate_refuses_missing_configurations_and_notes_other_hosts():
    base, new = _table(), _table(n_rep=1)
    with pytest.raises(g.Incomparable, match="missing from the results"):
        g.compare(base, new[new.strategy == "jit"])
    with pytest.raises(g.Incomparable, match="not in the baseline"):
        g.compare(base[base.strategy == "jit"], new)
    v = g.compare(base, _table(n_rep=1, machine_host="ci-runner"))
    assert any("machine_host differs" in n for n in v.notes)
    with pytest.raises(g.Incomparable, match="machine_host"):
        g.compare(base, _table(n_rep=1, machine_host="ci-runner"), strict_machine=True)


def _events(path, attempt, rank, evs):
    path.mkdir(parents=True, exist_ok=True)
    with open(path / f"attempt{attempt:03d}_rank{rank:05d}.jsonl", "w") as fh:
        for name, phase, t, extra in evs:
            fh.write(json.dumps({"event": name, "phase": phase, "t_mono": t, "t_wall": t,
                                 "rank": rank, "attempt": attempt, "pid": 1, "host": "h",
                                 **extra}) + "\n")


def test_report_is_one_self_contained_html_with_every_plot(tmp_path):
    rows = []
    for strategy in ("jit", "periodic:3", "none"):
        rd = tmp_path / "runs" / f"gpt-{strategy.replace(':', '_')}-kill-s0-r0"
        for rank in (0, 1):
            a0 = [("init", "end", 0.5, {})] + [
                ("step", "end", 1.0 + 0.1 * s, {"step": s}) for s in range(1, 8)]
            if rank == 1:
                a0.append(("fault", "point", 1.75, {"kind": "kill", "step": 8}))
            else:
                a0 += [("failure", "point", 1.9, {"trigger": "hang"}),
                       ("save", "begin", 1.95, {"kind": "jit", "step": 7}),
                       ("save", "end", 2.0, {"kind": "jit", "step": 7, "ok": True})]
            _events(rd / "events", 0, rank, a0)
            _events(rd / "events", 1, rank, [
                ("init", "end", 5.0, {}), ("restore", "begin", 5.1, {}),
                ("restore", "end", 5.2, {"step": 7})] + [
                ("step", "end", 5.3 + 0.1 * s, {"step": s}) for s in range(8, 13)])
        rows.append({"workload": "gpt", "strategy": strategy, "fault": "kill", "repeat": 0,
                     "run_dir": str(rd), "detect_s": 0.15, "save_s": 0.05, "restart_s": 3.0,
                     "restore_s": 0.1, "replay_s": 0.0, "recovery_s": 3.7,
                     "replayed_steps": {"jit": 0, "periodic:3": 1, "none": 7}[strategy],
                     "expected_replayed_steps": {"jit": 0, "periodic:3": 1, "none": 7}[strategy],
                     "replay_ok": True, "wasted_gpu_s": 7.4, "goodput": 0.3,
                     "state_equal": True, "max_abs_diff": 0.0})
    said = "restore skipped periodic_step00000006_rank00000.pt: SHA-256 mismatch"
    (Path(rows[1]["run_dir"]) / "summary.json").write_text(json.dumps({"decisions": [said]}))
    pd.DataFrame(rows).to_csv(tmp_path / "results.csv", index=False)
    pd.DataFrame([
        {"strategy": s, "repeats": 3, "step_s": 0.1, "overhead_pct": p, "overhead_pct_q25": p - 1,
         "overhead_pct_q75": p + 1, "overhead_pct_min": p - 2, "overhead_pct_max": p + 2,
         "within_noise": abs(p) < 2, "rt_us": 50.0}
        for s, p in (("none", 0.0), ("jit", 0.1), ("periodic:10", 8.0))
    ]).to_csv(tmp_path / "overhead.csv", index=False)
    html_path, md_path = write_report(tmp_path)
    page = html_path.read_text()
    imgs = re.findall(r'<img [^>]*src="([^"]+)"', page)
    # recovery phases, replay, wasted, timelines, overhead, and the model at scale
    # (the table holds measured restart and detection costs)
    assert len(imgs) == 6
    assert all(src.startswith("data:image/png;base64,") for src in imgs)
    assert not re.search(r'(src|href)="(https?:)?//', page)  # nothing fetched from a network
    assert "<style>" in page and "state equal" in page
    md = md_path.read_text()
    assert md.count("![") == 6 and "| gpt |" in md
    assert "From this machine to 100,000 GPUs" in page and "restart_s" in page
    assert "Model vs measurement" not in page  # no failure counts to validate against
    # the runs' own recovery decisions, under the run they belong to
    assert f"<b>gpt · periodic:3 · kill · repeat 0</b><ul><li>{said}</li>" in page
    assert f"- **gpt · periodic:3 · kill · repeat 0**: {said}" in md
    assert page.count("Recovery decisions") == 1
    with pytest.raises(SpecError):
        write_report(tmp_path / "runs")


def test_gate_compares_specs_field_by_field():
    spec = {"nproc": 2, "workload": {"steps": 12, "name": "gpt"}, "faults": [{"kind": "kill"}]}
    base = _table(spec_json=json.dumps(spec))
    changed = json.dumps({**spec, "workload": {"steps": 24, "name": "gpt"}})
    with pytest.raises(g.Incomparable, match="workload.steps 24 vs 12"):
        g.compare(base, _table(n_rep=1, spec_json=changed))
    grown = json.dumps({**spec, "new_knob": 1, "faults": [{"kind": "kill", "duration_s": 0}]})
    v = g.compare(base, _table(n_rep=1, spec_json=grown))  # fields added to the spec since
    assert any("new_knob" in n and "faults.0.duration_s" in n for n in v.notes)


def _steps(rank_steps: dict, begun_only=()) -> list:
    return [("step", "begin", 10 * s + r, {"step": s}) for r, ss in rank_steps.items()
            for s in ss] + [("step", "end", 10 * s + r + 1, {"step": s, "sample_ids": [s, r]})
                            for r, ss in rank_steps.items() for s in ss if (r, s) not in begun_only]


def test_sample_stream_counts_a_step_a_peer_completed(tmp_path):
    """Rank 1 SIGTERMed inside step 3's collective after its gradient arrived: rank 0
    completes step 3, the job restores from 3. Rank 1 never logs step 3's end, yet its
    minibatch was consumed; a step no rank completed is not."""
    from jitbench.harness.metrics import sample_stream_equal

    ref, run = tmp_path / "ref" / "events", tmp_path / "run" / "events"
    for r in (0, 1):
        _events(ref, 0, r, _steps({r: [1, 2, 3, 4]}))
    _events(run, 0, 0, _steps({0: [1, 2, 3]}))
    _events(run, 0, 1, _steps({1: [1, 2, 3]}, begun_only={(1, 3)}))
    for r in (0, 1):
        _events(run, 1, r, [(n, p, t + 100, x) for n, p, t, x in _steps({r: [4]})])
    assert sample_stream_equal(run.parent, ref.parent)
    # the same gap where no rank completed step 3: a lost minibatch
    _events(run, 0, 0, _steps({0: [1, 2, 3]}, begun_only={(0, 3)}))
    assert not sample_stream_equal(run.parent, ref.parent)
    # other ids at a step: not equal
    _events(run, 0, 0, [(n, p, t, {**x, "sample_ids": [9]} if p == "end" else x)
                        for n, p, t, x in _steps({0: [1, 2, 3]})])
    assert not sample_stream_equal(run.parent, ref.parent)


def test_final_step_of_a_resumed_finished_training(tmp_path):
    """Resuming a training that had already finished runs no step: its final step
    is the restored one, not 0."""
    from jitbench.harness.metrics import compute

    for r in (0, 1):
        _events(tmp_path / "events", 0, r, [("restore", "end", 1.0 + r, {"step": 12}),
                                            ("done", "point", 2.0 + r, {"step": 12})])
    m = compute(tmp_path, 12, 2)
    assert m.completed and m.final_step == 12


@pytest.mark.parametrize("strategies", ["jit", "torchft"])  # one launch; launches
def test_an_interrupted_overhead_run_exits_130_not_3(jb, tmp_path, monkeypatch, strategies):
    """Ctrl-C or SIGTERM during ``jitbench overhead`` (the launch returns interrupted)
    ends it as interrupted (exit 130), not as a launch that failed (exit 3)."""
    from jitbench.harness import run as run_mod
    from jitbench.harness.launch import LaunchResult

    def stopped(spec, run_dir, progress=None, timeout_s=None):
        run_dir.mkdir(parents=True, exist_ok=True)
        return LaunchResult(1, 0.5, interrupted=True)

    monkeypatch.setattr(run_mod, "execute", stopped)
    code, err = jb("overhead", "--strategies", strategies, "--out", str(tmp_path / "ov"))
    assert code == ExitStatus.INTERRUPTED, err
    assert "interrupted" in err and "did not complete" not in err
    code, err = jb("overhead", "--strategies", strategies, "--out", str(tmp_path / "ov"),
                   "--overwrite")  # an interrupted run's directory is replaced
    assert code == ExitStatus.INTERRUPTED and "not a jitbench" not in err, err


@pytest.mark.slow
def test_runtime_step_cost_script_prints_every_component_and_the_ab_line(tmp_path):
    """benchmarks/runtime_step_cost.py (what tests/gpu/device_checks.sh runs on a lent
    GPU) at the tiny size: every component row, the pre-hook inside begin + pre-hook +
    end, the A/B line whose median is the paired gaps' median difference, and the three
    floor probes."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "cost.txt"
    proc = subprocess.run(
        [sys.executable, str(root / "benchmarks" / "runtime_step_cost.py"), "--size", "tiny",
         "--steps", "6", "--warmup", "2", "--ab-rounds", "4", "--floor-rounds", "3",
         "--out", str(out)],
        capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert out.read_text().strip() == proc.stdout.strip()
    rows = {}
    for line in proc.stdout.splitlines():
        m = re.match(r"^(.+?)\s+(-?[\d.]+)\s+(-?[\d.]+)\s+(-?[\d.]+)\s+(\d+)$", line)
        if m and not line.startswith("#"):
            rows[m.group(1).strip()] = (float(m.group(2)), int(m.group(5)))
    for name in ("_begin (training thread)", "optimizer pre-hook (training thread)",
                 "_end (training thread)", "begin + pre-hook + end", "rng capture",
                 "boundary gap, jit", "boundary gap, no runtime", "gap difference (paired)"):
        assert name in rows, (name, proc.stdout)
    assert rows["begin + pre-hook + end"][1] == rows["_begin (training thread)"][1] == 6
    assert rows["gap difference (paired)"][1] == 4
    # the floor: each probe timed once per round, the RNG copy inside every stream's
    floors = [rows[k] for k in rows if k.startswith("floor: ")]
    assert len(floors) == 3 and all(n == 3 and us > 0 for us, n in floors), proc.stdout
    # begin + pre-hook + end holds the pre-hook: its median exceeds the pre-hook's
    assert rows["begin + pre-hook + end"][0] > rows["optimizer pre-hook (training thread)"][0] > 0
    ab = [ln for ln in proc.stdout.splitlines() if ln.startswith("# added by the runtime")]
    assert len(ab) == 1 and "4 paired rounds" in ab[0]
    med = float(re.search(r"median (-?[\d.]+) us", ab[0]).group(1))
    assert med == pytest.approx(rows["gap difference (paired)"][0], abs=0.1)


def test_median_ci_brackets_the_median(monkeypatch):
    import importlib.util

    root = Path(__file__).resolve().parents[2]
    monkeypatch.syspath_prepend(str(root / "benchmarks"))  # its sibling module provenance
    spec = importlib.util.spec_from_file_location("rsc", root / "benchmarks" / "runtime_step_cost.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    xs = [random.Random(1).gauss(10.0, 1.0) for _ in range(200)]
    med, lo, hi = mod.median_ci(xs, resamples=500)
    assert lo <= med <= hi and hi - lo < 1.0
    assert mod.median_ci([3.0] * 5) == (3.0, 3.0, 3.0)
