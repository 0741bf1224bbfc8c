"""End to end on gloo: the baselines (periodic-async, periodic:auto), ResNet under
DDP, and the benchmark commands (sweep -> report -> gate, overhead). ResNet
under every strategy with kill and nccl-hang is the default ``jitbench sweep``
(about 13 minutes): too long for the suite, run as a benchmark.

One fault-free reference per training (``shared_reference``, under ``none``)
serves every strategy: checkpointing only reads the state, so each recovered
run must equal plain training bitwise.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from jitbench.faults import FaultSpec
from jitbench.harness.run import run as run_spec
from jitbench.runtime.events import read_events
from jitbench.harness.launch import run_processes
from tests.conftest import small_spec

pytestmark = [pytest.mark.distributed, pytest.mark.slow, pytest.mark.timeout(300)]

STEPS = 12
RESNET = dict(workload="resnet", size="resnet18", extra={"resolution": 16}, batch_size=4)


def _run(tmp_path, refs, workload, strategy, kind, step, rank=1, **kw):
    extra = RESNET if workload == "resnet" else {}
    spec = small_spec(STEPS, faults=[FaultSpec(kind, rank, step)], strategy=strategy,
                      **extra, **kw)
    out = run_spec(spec, tmp_path / "run", reference_from=refs(spec))
    s = out.summary
    assert s["completed"], (out.run_dir / "agent.log").read_text()[-3000:]
    assert not run_processes(out.run_dir)
    return s, out.run_dir


@pytest.mark.heavy  # CI suite time budget: nox -s heavy
def test_periodic_async_restores_its_newest_committed_checkpoint(tmp_path, shared_reference):
    s, run_dir = _run(tmp_path, shared_reference, "gpt", "periodic-async:3", "kill", 8)
    f = s["failures"][0]
    assert f["completed_before"] == 7
    # restored: the newest *committed* async checkpoint. The save of step 6 commits in
    # the background; on a loaded machine it can still be in flight when step 8 is
    # killed, and then step 3 is the newest committed one (seen in a CI run).
    assert f["restored_kind"] == "async" and f["restored_step"] == f["last_commit_step"]
    assert f["restored_step"] in (3, 6)
    assert s["replayed_steps"] == s["expected_replayed_steps"] == 7 - f["restored_step"]
    assert s["replay_ok"]
    assert s["state_equal"] is True and s["sample_stream_equal"] is True
    evs = read_events(run_dir / "events")
    stages = [e for e in evs if e["event"] == "stage" and e["phase"] == "end"]
    assert stages and {e["rank"] for e in stages} == {0}  # rank 0 writes, the others train on
    assert s["checkpoint_stall_gpu_s"] > 0


def test_periodic_auto_picks_the_young_interval_and_keeps_it_after_restore(tmp_path,
                                                                          shared_reference):
    s, run_dir = _run(tmp_path, shared_reference, "gpt", "periodic:auto", "nccl-hang", 9,
                      mtbf_s=0.5)
    auto = s["auto_interval"]
    assert auto["step"] == 3 and auto["cost_s"] > 0 and auto["step_s"] > 0
    n = max(1, round((2 * auto["cost_s"] * 0.5) ** 0.5 / auto["step_s"]))
    assert s["checkpoint_interval"] == auto["interval"] == n
    chosen = [e for e in read_events(run_dir / "events") if e["event"] == "auto_interval"]
    by_attempt: dict[int, set] = {}
    for e in chosen:
        by_attempt.setdefault(e["attempt"], set()).add(e["interval"])
    # every rank takes rank 0's choice; the first probe's is the summary's
    assert all(len(v) == 1 for v in by_attempt.values()) and by_attempt[0] == {n}
    # probed once per rank: restored checkpoints carry the interval; a restart from
    # step 0 (the hang came before the first checkpoint) probes again, and may measure
    # a different cost under load
    assert len(chosen) == 2 or s["failures"][0]["restored_step"] == 0
    assert s["replay_ok"] is True and s["state_equal"] is True


@pytest.mark.heavy  # CI suite time budget: nox -s heavy
def test_resnet_jit_recovers_bitwise_when_rank0_dies(tmp_path, shared_reference):
    # rank 0's BatchNorm statistics are the authoritative ones under DDP; the
    # survivor (rank 1) must hold them at every step boundary for its JIT save
    s, _ = _run(tmp_path, shared_reference, "resnet", "jit", "kill", 5, rank=0)
    assert s["restored_kind"] == "jit" and s["failures"][0]["restored_step"] == 4
    assert s["replayed_steps"] == 0 and s["replay_ok"] is True
    assert s["state_equal"] is True and s["max_abs_diff"] == 0.0


def _cli(*args, cwd=None, timeout=400):
    return subprocess.run([sys.executable, "-m", "jitbench.cli", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=cwd)


@pytest.mark.heavy  # CI suite time budget: nox -s heavy
@pytest.mark.timeout(600)
def test_sweep_report_gate(tmp_path):
    """A seeded Poisson campaign (MTBF 5 steps: kills at steps 4 and 9, rank 0)
    under jit and periodic:3, twice each, then the report (with the model
    sections), the model validation (each run predicted from the other run's
    phase costs, within 15%) and the gate."""
    sw = tmp_path / "sweep"
    p = _cli("sweep", "--workloads", "gpt", "--sizes", "gpt=tiny", "--strategies",
             "jit,periodic:3", "--faults", "kill", "--steps", "12", "--fault-mtbf-steps", "5",
             "--batch-size", "4", "--repeats", "2", "--out", str(sw))
    assert p.returncode == 0, p.stderr[-3000:]
    t = pd.read_parquet(sw / "results.parquet")
    assert list(t["strategy"]) == ["jit", "jit", "periodic:3", "periodic:3"]
    assert list(t["fault"]) == ["kill"] * 4
    assert t["state_equal"].all() and t["replay_ok"].all()
    assert list(t["num_failures"]) == [2] * 4
    # jit replays nothing; periodic:3 replays step 7-8 for the kill in step 9
    assert list(t["replayed_steps"]) == [0, 0, 2, 2]
    for col in ("wasted_gpu_s", "goodput", "recovery_s", "spec_hash", "machine_torch"):
        assert t[col].notna().all(), col
    assert len(list((sw / "refs").iterdir())) == 1  # one shared reference
    assert json.loads((sw / "sweep.json").read_text())["wall_s"] > 0

    p = _cli("validate", "--strict", "--json", str(sw))
    assert p.returncode == 0, p.stdout + p.stderr
    v = {r["strategy"]: r for r in json.loads(p.stdout)}
    assert set(v) == {"jit", "periodic:3"}
    assert all(r["failures"] == 4 and r["phases_from"] == "other runs" for r in v.values())
    assert all(abs(r["error_pct"]) <= 15.0 for r in v.values()), v

    p = _cli("report", str(sw))
    assert p.returncode == 0, p.stderr
    page = (sw / "report.html").read_text()
    # recovery, replay, waste, timelines, wasted work at scale (no overhead here)
    assert len(re.findall(r'src="data:image/png;base64,', page)) == 5
    assert "Model vs measurement" in page and "From this machine to 100,000 GPUs" in page
    md = (sw / "report.md").read_text()
    assert "| gpt | periodic:3 | kill | 2 | 4 |" in md and "| 100000 | jit |" in md

    p = _cli("gate", "--baseline", str(sw / "results.csv"), str(sw))
    assert p.returncode == 0 and "gate: PASS" in p.stdout, p.stdout + p.stderr
    doctored = t.copy()
    jit = doctored["strategy"] == "jit"
    doctored.loc[jit, "restore_s"] = doctored.loc[jit, "restore_s"] * 10 + 5.0
    doctored.to_csv(tmp_path / "doctored.csv", index=False)
    # the runs' own records refute the doctored figure: tampered evidence, not a timing
    p = _cli("gate", "--baseline", str(sw / "results.csv"), str(tmp_path / "doctored.csv"))
    assert p.returncode == 2 and "tampered or stale evidence" in p.stderr, p.stderr
    # without its run directories (a table copied on its own) the gate judges the figures
    doctored["run_dir"] = "gone/" + doctored["run_dir"].astype(str).str.rsplit("/", n=1).str[-1]
    doctored.to_csv(tmp_path / "doctored.csv", index=False)
    p = _cli("gate", "--allow-missing-evidence", "--baseline", str(sw / "results.csv"),
             str(tmp_path / "doctored.csv"))
    assert p.returncode == 5, p.stdout + p.stderr
    bad = [line for line in p.stdout.splitlines() if line.startswith("REGRESSION")]
    assert len(bad) == 1 and "gpt/jit/kill restore_s" in bad[0]


@pytest.mark.timeout(400)
def test_overhead_prints_medians_ratios_and_spreads(tmp_path):
    p = _cli("overhead", "--size", "tiny", "--batch-size", "4", "--strategies",
             "none,jit,periodic:2,periodic-async:2", "--segment-steps", "4", "--repeats", "2",
             "--warmup-steps", "2", "--out", str(tmp_path / "oh"))
    assert p.returncode == 0, p.stderr[-3000:]
    for needle in ("step s (median)", "overhead %", "95% CI %", "median [IQR] %", "jit",
                   "periodic-async:2", "CPU-time %", "A/A control",
                   "UNBALANCED"):  # 2 repeats of a 10-row design
        assert needle in p.stdout, needle
    s = pd.read_csv(tmp_path / "oh" / "overhead.csv")
    assert list(s["strategy"]) == ["none", "jit", "periodic:2", "periodic-async:2", "none-aa"]
    assert (s["repeats"] == 2).all() and s.loc[0, "overhead_pct"] == 0
    assert s["cpu_overhead_pct"].notna().all() and s["noise_hi_pct"].notna().all()
    assert (s["overhead_pct_lo"] <= s["overhead_pct_hi"]).all()
    segs = pd.read_csv(tmp_path / "oh" / "overhead_segments.csv")
    # 4 measured steps after a 3-step warm-up stretched to 4 (segments of 8 steps)
    assert len(segs) == 10 and (segs["steps"] == 4).all()
    steps = pd.read_csv(tmp_path / "oh" / "overhead_steps.csv")
    assert len(steps) == 80 and steps["measured"].sum() == 40
    meta = json.loads((tmp_path / "oh" / "overhead.json").read_text())
    assert [tuple(x) for x in meta["order"]] == [
        (x[0], x[1]) for x in segs[["strategy", "repeat"]].itertuples(index=False)]
    jit = s[s.strategy == "jit"].iloc[0]
    assert jit["rt_us"] > s[s.strategy == "none"].iloc[0]["rt_us"]  # the snapshot is the cost


@pytest.mark.heavy  # CI suite time budget: nox -s heavy
@pytest.mark.timeout(600)
def test_overhead_of_jit_inprocess_runs_one_launch_per_strategy_and_repeat(tmp_path):
    p = _cli("overhead", "--size", "tiny", "--batch-size", "2", "--strategies",
             "jit-inprocess", "--segment-steps", "4", "--repeats", "1",
             "--warmup-steps", "2", "--out", str(tmp_path / "oh"))
    assert p.returncode == 0, p.stderr[-3000:]
    assert "4-step launches" in p.stdout and "A/A control" in p.stdout
    s = pd.read_csv(tmp_path / "oh" / "overhead.csv")
    assert list(s["strategy"]) == ["none", "jit-inprocess", "none-aa"]
    assert (s["mode"] == "launches").all() and s["cpu_overhead_pct"].notna().all()
    runs = sorted(d.name for d in (tmp_path / "oh" / "runs").iterdir())
    order = json.loads((tmp_path / "oh" / "overhead.json").read_text())["order"]
    assert runs == [f"{i:02d}-{st}-r{r}" for i, (st, r) in enumerate(order)]
    assert sorted(st for st, _ in order) == ["jit-inprocess", "none", "none-aa"]
    ip_run = next(r for r in runs if "jit-inprocess" in r)
    spec = json.loads((tmp_path / "oh" / "runs" / ip_run / "spec.json").read_text())
    assert spec["strategy"] == "jit-inprocess" and spec["faults"] == []
    ip = s[s.strategy == "jit-inprocess"].iloc[0]
    assert ip["rt_us"] > s[s.strategy == "none"].iloc[0]["rt_us"]  # it snapshots each step


@pytest.mark.heavy
@pytest.mark.parametrize("peer, module", [("torchft", "torchft"),
                                          ("nvrx", "nvidia_resiliency_ext")])
def test_overhead_of_a_peer_runs_in_launch_mode(tmp_path, peer, module):
    """Issue 11: a peer's steady-state overhead, measured as every strategy is: one
    launch per strategy and repeat under the peer's own launcher (torchft's Lighthouse,
    NVRx's ft_launcher), beside none and the A/A control, with intervals."""
    pytest.importorskip(module, reason=f"the peers extra is not installed ({module})")
    p = _cli("overhead", "--size", "tiny", "--batch-size", "2", "--strategies", peer,
             "--segment-steps", "5", "--repeats", "1", "--warmup-steps", "2",
             "--out", str(tmp_path / "oh"))
    assert p.returncode == 0, p.stderr[-3000:]
    s = pd.read_csv(tmp_path / "oh" / "overhead.csv")
    label = "nvrx:5" if peer == "nvrx" else peer
    assert list(s["strategy"]) == ["none", label, "none-aa"]
    row = s[s.strategy == label].iloc[0]
    assert (s["mode"] == "launches").all() and row["step_s"] > 0
    assert row["overhead_pct_lo"] <= row["overhead_pct"] <= row["overhead_pct_hi"]


@pytest.mark.heavy  # CI suite time budget: nox -s heavy
@pytest.mark.timeout(300)
def test_overhead_of_the_hooks_on_a_script_against_plain_torchrun(tmp_path):
    """Issue 12: the hooks' overhead on a user's script, against the same script with
    nothing of jitbench's but the step clock, in one command with the A/A control."""
    script = Path(__file__).parents[2] / "examples" / "nanogpt_style.py"
    p = _cli("overhead", "--strategies", "own", "--segment-steps", "4", "--repeats", "1",
             "--warmup-steps", "2", "--out", str(tmp_path / "oh"), "--",
             "python", str(script), "--max-iters", "7")
    assert p.returncode == 0, p.stderr[-3000:]
    assert "none (plain torchrun)" in p.stdout and "A/A control" in p.stdout
    s = pd.read_csv(tmp_path / "oh" / "overhead.csv")
    assert list(s["strategy"]) == ["none", "own", "none-aa"]
    assert (s["workload"] == "nanogpt_style.py").all() and (s["mode"] == "launches").all()
    assert (s["step_s"] > 0).all() and s["cpu_overhead_pct"].notna().all()
    runs = {d.name.split("-", 1)[1]: d for d in (tmp_path / "oh" / "runs").iterdir()}
    for arm, hooked in (("none-r0", False), ("none-aa-r0", False), ("own-r0", True)):
        d = runs[arm]
        spec = json.loads((d / "spec.json").read_text())
        assert spec["hooks"] is hooked and spec["step_timer"] and spec["faults"] == []
        assert (d / "events").is_dir() is hooked  # the plain arm runs no runtime at all
        times = json.loads((d / "steptimes" / "rank0-a0.json").read_text())
        assert len(times["t_mono"]) == 7 and times["t_mono"] == sorted(times["t_mono"])
    steps = pd.read_csv(tmp_path / "oh" / "overhead_steps.csv")
    assert steps["measured"].sum() == 3 * 4


@pytest.mark.timeout(120)
def test_overhead_of_a_script_that_runs_too_few_steps_is_one_line(tmp_path):
    script = Path(__file__).parents[2] / "examples" / "nanogpt_style.py"
    p = _cli("overhead", "--strategies", "own", "--segment-steps", "4", "--repeats", "1",
             "--warmup-steps", "2", "--out", str(tmp_path / "oh"), "--",
             str(script), "--max-iters", "4")
    assert p.returncode == 3, p.stderr[-3000:]
    line = p.stderr.strip().splitlines()[-1]
    assert "the script ran 4 optimizer steps; the measurement needs 6" in line
    assert "Traceback" not in p.stderr
