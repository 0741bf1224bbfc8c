"""The peer strategies' registry entries, their up-front refusals, the
per-replica phases (torchft), the verdict and the gate's peer-version check;
no process is started."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from jitbench import phases
from jitbench.errors import SpecError
from jitbench.faults import FaultSpec
from jitbench.records import ExitStatus, verdict
from jitbench.reports.gate import Incomparable, _check_peer_versions
from jitbench.runtime import strategies
from tests.conftest import small_spec


def test_nvrx_without_interval_is_nvrx_5_and_torchft_takes_none():
    assert str(strategies.parse("nvrx")) == "nvrx:5"
    assert strategies.parse("nvrx:2").interval == 2
    assert strategies.parse("torchft").entry.launcher == "torchft"
    with pytest.raises(SpecError):
        strategies.parse("torchft:3")
    assert "nvrx:N" in strategies.usage() and "torchft" in strategies.usage()


def test_a_peer_whose_extra_is_missing_is_refused_in_one_line(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "torchft" else real(name, *a))
    with pytest.raises(SpecError) as exc:
        small_spec(strategy="torchft").validate()
    msg = str(exc.value)
    assert "torchft" in msg and "pip install -e '.[peers]'" in msg and "\n" not in msg


@pytest.mark.parametrize("kind", ["eio", "nccl-timeout", "desync", "xid"])
def test_torchft_refuses_faults_it_cannot_express(kind, monkeypatch):
    monkeypatch.setattr(strategies, "check_available", lambda name: None)
    spec = small_spec(strategy="torchft", faults=[FaultSpec(kind, 1, 5)])
    with pytest.raises(SpecError, match=f"fault {kind} cannot be expressed under strategy "
                                        "torchft"):
        spec.validate()


def test_torchft_trains_its_own_reference_nvrx_shares_plain_ddp():
    base = small_spec(strategy="none").training_key()
    assert small_spec(strategy="nvrx").training_key() == base
    assert small_spec(strategy="torchft").training_key() != base


def test_nvrx_turns_the_runtime_hang_watchdog_off():
    cfg = small_spec(strategy="nvrx:3").runtime_config("/tmp/ckpt")
    assert cfg.strategy == "nvrx" and cfg.interval == 3 and cfg.hang_floor_s >= 1e6


def _ev(rank, attempt, event, phase, t, **kw):
    return {"event": event, "phase": phase, "t_mono": t, "t_wall": t, "rank": rank,
            "attempt": attempt, "host": "h", **kw}


def test_per_replica_episode_reads_the_time_line():
    evs = []
    for r in (0, 1):
        evs += [_ev(r, 0, "init", "end", 0.5), _ev(r, 0, "restore", "begin", 0.6),
                _ev(r, 0, "restore", "end", 0.7, step=0, kind="fresh")]
        for s in (1, 2):
            evs += [_ev(r, 0, "step", "begin", s, step=s),
                    _ev(r, 0, "step", "end", s + 0.5, step=s, dur_s=0.5)]
    evs += [_ev(1, 0, "step", "begin", 3.0, step=3), _ev(1, 0, "fault", "point", 3.1, step=3,
                                                         kind="kill", fault_id="k")]
    evs += [_ev(0, 0, "step", "begin", 3.0, step=3), _ev(0, 0, "failure", "point", 3.2,
                                                         trigger="collective_error")]
    for s, t in ((3, 4.0), (4, 5.0), (5, 6.0)):  # the survivor alone
        evs += [_ev(0, 0, "step", "end", t, step=s, dur_s=0.5)]
    evs += [_ev(1, 1, "init", "end", 5.5), _ev(1, 1, "restore", "begin", 5.6),
            _ev(1, 1, "restore", "end", 6.2, step=5, kind="heal")]
    evs += [_ev(r, a, "step", "end", 7.0 + r / 10, step=6, dur_s=0.5)
            for r, a in ((0, 0), (1, 1))]
    evs.sort(key=lambda e: e["t_mono"])
    t = phases.derive(evs, 2, per_replica=True)
    f = {r["phase"]: r for r in t[t["scope"] == "failure"].to_dict("records")}
    assert f["detect"]["dur_s"] == pytest.approx(0.1) and f["detect"]["rank"] == 0
    assert f["save"]["dur_s"] == 0.0
    assert f["restart"]["t0"] == 3.1 and f["restart"]["t1"] == 5.5
    assert f["restore"]["kind"] == "heal" and f["restore"]["step"] == 5
    assert f["stall"]["t1"] == 4.0 and f["stall"]["step"] == 3
    assert f["recovery"]["step"] == 6 and f["recovery"]["t1"] == pytest.approx(7.1)
    assert f["replay"]["dur_s"] == 0.0


def test_verdict_reports_but_does_not_judge_state_of_a_non_bitwise_peer():
    s = {"completed": True, "state_equal": False, "max_abs_diff": 0.1, "replay_ok": True,
         "strategy": "torchft", "bitwise_promised": False}
    assert verdict(s, strict=True)[0] == ExitStatus.OK
    assert verdict({**s, "bitwise_promised": True})[0] == ExitStatus.INCORRECT
    broken = verdict({**s, "replay_ok": False, "replay_promise": "no step lost"})
    assert broken[0] == ExitStatus.INCORRECT and "no step lost" in broken[1]


def test_gate_refuses_other_peer_versions():
    row = {"strategy": "torchft", "machine_peer_torchft": "0.2.0"}
    base, same = pd.DataFrame([row]), pd.DataFrame([row])

    class V:
        notes: list = []

    _check_peer_versions(base, same, V())
    with pytest.raises(Incomparable, match="peer versions differ"):
        _check_peer_versions(base, pd.DataFrame([{**row, "machine_peer_torchft": "0.3.0"}]),
                             V())
    with pytest.raises(Incomparable, match="only in the results"):
        _check_peer_versions(pd.DataFrame([{"strategy": "torchft"}]), same, V())
    v = V()
    _check_peer_versions(pd.DataFrame([{"strategy": "jit"}]),
                         pd.DataFrame([{"strategy": "jit", "machine_peer_torchft": "0.2.0"}]), v)
    assert v.notes and json.dumps(v.notes)


def test_a_missing_peer_version_is_the_same_from_parquet_and_csv():
    """Not installed: None in a parquet table, NaN in the same table read from CSV."""
    col = "machine_peer_nvidia-resiliency-ext"

    class V:
        notes: list = []

    parquet = pd.DataFrame([{"strategy": "jit", col: None}])
    csv = pd.DataFrame([{"strategy": "jit", col: float("nan")}])
    _check_peer_versions(csv, parquet, V())
    with pytest.raises(Incomparable, match="peer versions differ"):
        _check_peer_versions(csv, pd.DataFrame([{"strategy": "jit", col: "0.4.1"}]), V())


def test_model_from_results_leaves_the_peers_rows_out():
    from jitbench.reports.projection import params_from_table

    t = pd.DataFrame([{"strategy": "jit", "restart_s": 2.0, "step_s": 0.1},
                      {"strategy": "torchft", "restart_s": 50.0, "step_s": 0.1},
                      {"strategy": "nvrx:5", "restart_s": 50.0, "step_s": 0.1}])
    assert params_from_table(t)["restart_s"] == 2.0


def test_ft_launcher_gets_heartbeat_or_section_timeouts_from_the_hang_settings():
    from jitbench.harness.launch import agent_command

    hb = agent_command(small_spec(strategy="nvrx"), __import__("pathlib").Path("/r"))
    assert "nvidia_resiliency_ext.fault_tolerance.launcher" in hb
    assert hb[hb.index("--ft-rank-heartbeat-timeout") + 1] == "1.5"
    assert hb[hb.index("--ft-rank-termination-signal") + 1] == "SIGTERM"
    sec = agent_command(small_spec(strategy="nvrx-sections"), __import__("pathlib").Path("/r"))
    assert sec[sec.index("--ft-rank-section-timeouts") + 1] == "step:1.5"
    assert "--ft-rank-heartbeat-timeout" not in sec
    plain = agent_command(small_spec(strategy="jit"), __import__("pathlib").Path("/r"))
    assert "torch.distributed.run" in plain and not any(a.startswith("--ft-") for a in plain)


def test_report_compares_strategies_per_fault_kind():
    from jitbench.reports.html import comparison_lines

    t = pd.DataFrame([
        {"workload": "gpt", "fault": "kill", "strategy": "jit", "wasted_gpu_s": 5.5,
         "stall_s": 2.8, "recovery_s": 2.8, "state_equal": True, "max_abs_diff": 0.0,
         "world_size": 2},
        {"workload": "gpt", "fault": "kill", "strategy": "torchft", "wasted_gpu_s": 3.6,
         "stall_s": 1.2, "recovery_s": 2.6, "state_equal": False, "max_abs_diff": 0.03,
         "world_size": 2}])
    (line,) = comparison_lines(t)
    assert line.startswith("gpt · kill at 2 ranks: torchft wasted the fewest GPU-seconds")
    assert "not the fault-free state: torchft (max_abs_diff 0.03)" in line


def test_report_verdict_at_scale_weighs_steady_cost_against_per_failure_cost():
    """A (a checkpoint stall of 0.1% of the time, 10 s lost per failure) against B (no
    steady cost, 100 s per failure): with the model's MTBF of 50,000 h per GPU, B wastes
    less at 1,024 GPUs (failures are rare) and A at 16,384 (N f x 90 s > 0.1%)."""
    from jitbench.reports.html import comparison_lines
    from jitbench.reports.model import measured_estimate

    t = pd.DataFrame([
        {"workload": "gpt", "fault": "kill", "strategy": "A", "world_size": 2,
         "train_wall_s": 100.0, "checkpoint_stall_gpu_s": 0.2, "wasted_gpu_s": 20.2},
        {"workload": "gpt", "fault": "kill", "strategy": "B", "world_size": 2,
         "train_wall_s": 100.0, "checkpoint_stall_gpu_s": 0.0, "wasted_gpu_s": 200.0}])
    (line,) = comparison_lines(t)
    assert "at 1,024 GPUs (model, MTBF 50,000 h per GPU, costs as measured) B would" in line
    assert "at 16,384 GPUs (model, MTBF 50,000 h per GPU, costs as measured) A would" in line
    a = measured_estimate("A", 16384, 50_000.0, 0.001, 10.0)
    assert a.waste_fraction == pytest.approx(0.001 + 16384 / (50_000 * 3600) * 10.0)
    with pytest.raises(ValueError, match="MTBF > 0"):
        measured_estimate("A", 8, 0.0, 0.0, 1.0)
