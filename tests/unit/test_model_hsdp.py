"""``jitbench model --from-results`` with sharded runs and io tables, and the JIT vs
periodic crossover by HSDP replica count (jitbench.reports.projection, modelcmd)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from jitbench.errors import InputError
from jitbench.reports import scale
from jitbench.reports.html import write_report
from jitbench.reports.model import ModelParams, estimate, jit_break_probability
from jitbench.reports.modelcmd import model_main
from jitbench.reports.projection import (
    costs_from_records,
    crossovers_by_replicas,
    describe_crossovers,
    io_costs_from_table,
    replicas_of,
)

NAN = np.nan


def records_table() -> pd.DataFrame:
    """Runs as ``jitbench run`` records them: two ddp runs and a fault-free one, three
    ``hsdp:2x2`` runs and a fault-free one, one ``hsdp:4x1`` run."""
    rows = [
        # parallel, strategy, step_s, save_s, restart_s, detect_s, restore_s, checkpoint_s
        ("ddp", "none", 0.10, NAN, NAN, NAN, NAN, NAN),
        ("ddp", "jit", 0.11, 0.20, 8.0, 0.10, 0.14, NAN),
        ("ddp", "periodic:3", 0.12, 0.02, 7.0, 0.08, 0.12, 0.40),
        ("hsdp:2x2", "none", 0.20, NAN, NAN, NAN, NAN, NAN),
        ("hsdp:2x2", "jit", 0.21, 0.15, 7.9, 0.10, 0.14, NAN),
        ("hsdp:2x2", "jit", 0.21, 0.21, 9.4, 0.30, 0.26, NAN),
        ("hsdp:2x2", "periodic:3", 0.22, 0.02, 7.7, 0.08, 0.13, 0.30),
        ("hsdp:4x1", "jit", 0.30, 0.50, 6.0, 0.20, 0.40, NAN),
    ]
    cols = ["parallel", "strategy", "step_s", "save_s", "restart_s", "detect_s", "restore_s",
            "checkpoint_s"]
    df = pd.DataFrame(rows, columns=cols)
    df.insert(0, "workload", "gpt")
    df["world_size"] = 4
    return df


def io_table() -> pd.DataFrame:
    """A ``jitbench io --csv`` table of a 2 GB state (mb = 10^6 bytes moved)."""
    rows = [("disk write", 2000, 4.0), ("disk read", 2000, 2.0),
            ("jit save", 2000, 10.0),                                     # 5 s/GB
            ("restore (load_part)", 2000, 12.0),
            ("restore as run (newest_valid + load_part)", 2000, 16.0),    # 8 s/GB
            ("periodic (blocking = total)", 2000, 11.0),                  # 5.5 s/GB
            ("periodic-async blocking", 2000, 1.0), ("periodic-async total", 2000, 20.0),
            ("split save R=1", 2000, 12.0), ("split restore R=1", 2000, 13.0),
            ("split save R=2", 2000, 7.0), ("split restore R=2", 2000, 9.0),
            ("split save R=4", 2000, 4.0)]
    df = pd.DataFrame(rows, columns=["what", "mb", "seconds"])
    df["mb_s"] = df["mb"] / df["seconds"]
    df["ratio"] = NAN
    df["repeats"] = "x"
    return df


ARGS = dict(gpus=[8, 1024], mtbf_hours_per_gpu=50_000.0, step_s=1.0, checkpoint_s=60.0,
            restart_s=300.0, detect_s=30.0, save_s=30.0, restore_s=60.0, from_results=None,
            horizon_hours=50.0, trials=2, seed=0, as_json=True, out_dir=None)


def _json(capsys, **change) -> dict:
    assert model_main(**{**ARGS, **change}) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


# ------------------------------------------------------------------ records by layout


@pytest.mark.parametrize("cell, want", [
    ("ddp", None), ("", None), (None, None), (NAN, None), ("hsdp:2x2", 2), (" HSDP:8x16 ", 8),
])
def test_replicas_of_a_parallel_cell(cell, want):
    assert replicas_of(cell) == want


@pytest.mark.parametrize("cell", ["fsdp", "hsdp:2", "hsdp:0x4", "hsdp:2x0", "hsdp:axb"])
def test_a_bad_parallel_cell_is_one_line(cell):
    with pytest.raises(InputError, match="neither ddp nor hsdp:RxS"):
        replicas_of(cell)


def test_hsdp_rows_give_the_sharded_costs_and_their_replicas_per_shard():
    c = costs_from_records(records_table(), "t.csv")
    assert c.rows == {"ddp": 3, "hsdp:2x2": 4, "hsdp:4x1": 1}
    assert c.replicas == (2, 4)
    # ddp: step from the fault-free row, save from jit rows, checkpoint from periodic rows
    assert c.ddp == pytest.approx({"step_s": 0.10, "save_s": 0.20, "restart_s": 7.5,
                                   "detect_s": 0.09, "restore_s": 0.13, "checkpoint_s": 0.40})
    assert c.hsdp[2] == pytest.approx({"step_s": 0.20, "save_s": 0.18, "restart_s": 7.9,
                                       "detect_s": 0.10, "restore_s": 0.14, "checkpoint_s": 0.30})
    # one jit run at R = 4: no fault-free or periodic row, so step is the jit row's and
    # the checkpoint cost is not measured
    assert c.hsdp[4] == pytest.approx({"step_s": 0.30, "save_s": 0.50, "restart_s": 6.0,
                                       "detect_s": 0.20, "restore_s": 0.40})
    assert c.main_replicas() is None  # the table has ddp rows: its model is ddp
    over, label = c.for_layout(2)
    assert label == "hsdp:2xS rows" and over == c.hsdp[2]
    over, label = c.for_layout(4)  # R = 4 lacks the checkpoint cost: the ddp rows' is kept
    assert over["checkpoint_s"] == pytest.approx(0.40) and over["save_s"] == pytest.approx(0.5)
    over, label = c.for_layout(8)  # not measured: every hsdp row's medians
    assert label == "hsdp rows of R=2,4 (R=8 not measured)"
    assert over["save_s"] == pytest.approx(0.21) and over["step_s"] == pytest.approx(0.20)
    assert c.for_layout(None) == (c.ddp, "ddp rows")


def test_a_table_of_hsdp_rows_only_sets_the_models_replicas_per_shard(tmp_path, capsys):
    t = records_table()
    hsdp = t[t["parallel"] != "ddp"]
    assert costs_from_records(hsdp).main_replicas() == 2  # the fewest replicas measured
    path = tmp_path / "hsdp.csv"
    hsdp[hsdp["parallel"] == "hsdp:2x2"].to_csv(path, index=False)
    out = _json(capsys, from_results=path)
    p = out["params"]
    assert p["replicas_per_shard"] == 2 and out["from_results"]["replicas_per_shard"] == 2
    assert (p["step_s"], p["save_s"], p["restart_s"]) == pytest.approx((0.20, 0.18, 7.9))
    assert (p["restore_s"], p["checkpoint_s"]) == pytest.approx((0.14, 0.30))
    assert out["sources"]["save_s"] == "results"
    assert out["from_results"]["layouts"] == {"hsdp:2x2": 4}
    by = {b["layout"]: b for b in out["crossovers_by_replicas"]}
    assert list(by) == ["ddp", "hsdp R=1", "hsdp R=2", "hsdp R=4", "hsdp R=8"]
    assert [b["measured"] for b in by.values()] == [False, False, True, False, False]
    assert by["ddp"]["costs"] == "hsdp rows (no ddp row)"
    assert by["hsdp R=2"]["costs"] == "hsdp:2xS rows"
    assert by["hsdp R=4"]["costs"] == "hsdp rows of R=2 (R=4 not measured)"
    # the R = 2 crossovers are those of the hand-computed parameters, found by brute force
    want = replace(ModelParams(mtbf_hours_per_gpu=50_000.0), step_s=0.20, save_s=0.18,
                   restart_s=7.9, detect_s=0.10, restore_s=0.14, checkpoint_s=0.30)
    got = [c["n_gpus"] for c in by["hsdp R=2"]["crossovers"] if c["n_gpus"] <= 3000]
    assert got == _brute_crossovers(want, 2, 3000)


def test_records_without_a_parallel_column_are_ddp(tmp_path, capsys):
    t = records_table().drop(columns="parallel")
    c = costs_from_records(t)
    assert c.rows == {"ddp": 8} and c.hsdp == {} and c.main_replicas() is None
    path = tmp_path / "old.csv"
    t.to_csv(path, index=False)
    out = _json(capsys, from_results=path)
    assert out["params"]["replicas_per_shard"] is None
    assert [b["measured"] for b in out["crossovers_by_replicas"]] == [False] * 5


# ------------------------------------------------------------------ io tables


def test_an_io_table_gives_seconds_per_gb_and_how_the_save_falls_with_split_writers():
    io = io_costs_from_table(io_table())
    assert io.state_gb == pytest.approx(2.0)
    # restore as the runtime runs it (choice of the part included) is preferred
    assert io.s_per_gb == pytest.approx({"save_s": 5.0, "restore_s": 8.0, "checkpoint_s": 5.5})
    assert io.split_save_s_per_gb == pytest.approx({1: 6.0, 2: 3.5, 4: 2.0})
    assert io.split_restore_s_per_gb == pytest.approx({1: 6.5, 2: 4.5})
    assert io.overrides() == pytest.approx({"save_s": 10.0, "restore_s": 16.0,
                                            "checkpoint_s": 11.0})
    assert io.overrides(100.0) == pytest.approx({"save_s": 500.0, "restore_s": 800.0,
                                                 "checkpoint_s": 550.0})
    # 2 split writers: their save and restore rows
    assert io.overrides(100.0, 2) == pytest.approx({"save_s": 350.0, "restore_s": 450.0,
                                                    "checkpoint_s": 550.0})
    # 4 writers: no split restore row measured, so the one-writer restore stays
    assert io.overrides(100.0, 4)["restore_s"] == pytest.approx(800.0)
    with pytest.raises(InputError, match=r"--split-writers 3: .* R = 1, 2, 4"):
        io.overrides(100.0, 3)
    with pytest.raises(InputError, match="--state-gb must be"):
        io.overrides(0.0)


def test_model_main_takes_a_records_and_an_io_table(tmp_path, capsys):
    rec, io = tmp_path / "runs.parquet", tmp_path / "io-cpu.csv"
    records_table().to_parquet(rec)
    io_table().to_csv(io, index=False)
    out = _json(capsys, from_results=[rec, io], state_gb=40.0)
    p, src = out["params"], out["sources"]
    # the io table's storage costs at 40 GB win over the records'; the rest are the ddp rows'
    assert (p["save_s"], p["restore_s"], p["checkpoint_s"]) == pytest.approx((200.0, 320.0, 220.0))
    assert (src["save_s"], src["restore_s"], src["checkpoint_s"]) == ("io", "io", "io")
    assert (p["step_s"], p["restart_s"]) == pytest.approx((0.10, 7.5))
    assert src["restart_s"] == "results"
    info = out["from_results"]["io"]
    assert info["state_gb"] == 40.0 and info["measured_state_gb"] == pytest.approx(2.0)
    assert info["split_save_s_per_gb"] == pytest.approx({"1": 6.0, "2": 3.5, "4": 2.0})
    by = {b["layout"]: b for b in out["crossovers_by_replicas"]}
    assert by["hsdp R=2"]["costs"] == "hsdp:2xS rows + io table" and by["hsdp R=2"]["measured"]
    assert by["hsdp R=4"]["measured"] and not by["hsdp R=8"]["measured"]
    # split writers, and a flag that wins over both tables
    out = _json(capsys, from_results=[io, rec], state_gb=40.0, split_writers=2, save_s=9.0,
                explicit=frozenset({"save_s"}))
    assert out["params"]["save_s"] == 9.0 and out["sources"]["save_s"] == "flag"
    assert out["params"]["restore_s"] == pytest.approx(4.5 * 40)
    # an io table alone, at its own state size
    out = _json(capsys, from_results=io)
    assert out["params"]["save_s"] == pytest.approx(10.0)
    assert out["params"]["restart_s"] == 300.0 and out["sources"]["restart_s"] == "flag"
    assert out["from_results"]["io"]["state_gb"] == pytest.approx(2.0)


def test_the_table_names_the_io_costs_and_the_crossover_by_layout(tmp_path, capsys):
    rec, io = tmp_path / "runs.csv", tmp_path / "io.csv"
    records_table().to_csv(rec, index=False)
    io_table().to_csv(io, index=False)
    assert model_main(**{**ARGS, "as_json": False, "from_results": [rec, io],
                         "state_gb": 40.0, "split_writers": 4}) == 0
    text = capsys.readouterr().out
    assert "analytic crossover jit vs periodic by layout" in text
    assert "  hsdp R=2 (measured), costs from hsdp:2xS rows + io table: " in text
    assert "  ddp, costs from ddp rows + io table: " in text
    assert "scaled to 40 GB; save by 4 split writers" in text
    assert "save_s = 80," in text  # 2 s/GB x 40 GB
    assert "split save s/GB by writers: R=1 6, R=2 3.5, R=4 2" in text


# ------------------------------------------------------------------ crossover by R


def _brute_crossovers(params: ModelParams, reps: int | None, hi: int) -> list[int]:
    """World sizes (multiples of R, up to ``hi``) where the cheaper of jit and periodic
    changes, from :func:`estimate` at every such size (no bisection)."""
    k = reps or 1
    p = replace(params, replicas_per_shard=reps)
    out, prev = [], None
    for n in range(k, hi + 1, k):
        jit, per = estimate("jit", n, p), estimate("periodic", n, p)
        assert jit.waste_fraction < 1 and per.waste_fraction < 1  # no clipping here
        cheaper = "jit" if jit.wasted_gpu_hours_per_day < per.wasted_gpu_hours_per_day \
            else "periodic"
        if prev is not None and cheaper != prev:
            out.append(n)
        prev = cheaper
    return out


def test_fewer_replicas_per_shard_move_the_crossover_towards_periodic():
    """Fewer replicas of each shard: more failures leave a shard with none, JIT falls
    back to its (24 h) periodic checkpoint more often, so periodic wins from a smaller
    world size; with one replica JIT wins at no world size above 3."""
    base = ModelParams(gpus_per_host=256, save_s=3000.0, fallback_interval_s=24 * 3600.0)
    layouts = [(r, base, "flags") for r in (None, 1, 2, 4)]
    rows = {b["replicas_per_shard"]: b for b in crossovers_by_replicas(layouts, [8])}
    hi = 2000
    for r, b in rows.items():
        assert [c["n_gpus"] for c in b["crossovers"] if c["n_gpus"] <= hi] \
            == _brute_crossovers(base, r, hi), r
    first_periodic = {r: next((c["n_gpus"] for c in b["crossovers"] if c["above"] == "periodic"),
                              None) for r, b in rows.items()}
    assert rows[1]["crossovers"][-1]["above"] == "periodic"
    assert describe_crossovers(rows[1]) == ("periodic cheaper from N = 1, jit from N = 3, "
                                            "periodic from N = 4")
    assert first_periodic[1] < first_periodic[2] < first_periodic[4]
    assert first_periodic[4] == pytest.approx(first_periodic[None], abs=4)
    # why: at N = 504 with R = 2 (S = 252 shards), host 0 (ranks 0-255) holds both
    # replicas of shards 0-3 (ranks 0-3 and 252-255); host 1 holds replica 1 only
    host_w = sum(c.count for c in base.causes if c.scope == "host") / 419
    sdc_w = sum(c.count for c in base.causes if c.scope == "state") / 419
    assert jit_break_probability(replace(base, replicas_per_shard=2), 504) \
        == pytest.approx(host_w * 256 / 504 + sdc_w)
    assert jit_break_probability(replace(base, replicas_per_shard=4), 504) == pytest.approx(sdc_w)
    assert first_periodic[2] <= 504 < first_periodic[4]


# ------------------------------------------------------------------ bad input


def test_bad_from_results_inputs_are_one_line_exit_2(tmp_path, capsys):
    rec, io = tmp_path / "runs.csv", tmp_path / "io.csv"
    records_table().to_csv(rec, index=False)
    io_table().to_csv(io, index=False)
    neither = tmp_path / "neither.csv"
    pd.DataFrame({"what": ["x"], "value": [1.0]}).to_csv(neither, index=False)
    bad_cell = tmp_path / "bad.csv"
    records_table().assign(parallel="fsdp:8").to_csv(bad_cell, index=False)
    useless_io = tmp_path / "useless-io.csv"
    io_table().head(2).to_csv(useless_io, index=False)  # the disk rows only
    cases = [
        ({"from_results": neither}, "is neither a records table with a cost"),
        ({"from_results": bad_cell}, "parallel 'fsdp:8' is neither ddp nor hsdp:RxS"),
        ({"from_results": useless_io}, "jitbench io table without a usable row"),
        ({"from_results": [io, io]}, "a second jitbench io table"),
        ({"from_results": [rec, rec]}, "a second records table"),
        ({"from_results": rec, "state_gb": 10.0}, "--state-gb needs a jitbench io table"),
        ({"from_results": None, "split_writers": 2}, "--split-writers needs a jitbench io table"),
        ({"from_results": io, "split_writers": 3}, "--split-writers 3: the io table measured"),
        ({"from_results": io, "state_gb": -1.0}, "--state-gb must be a finite number > 0"),
        ({"crossover_replicas": [0]}, "--crossover-replicas: replicas per shard must be"),
    ]
    for change, needle in cases:
        assert model_main(**{**ARGS, **change}) == 2, change
        captured = capsys.readouterr()
        assert captured.out == ""
        assert captured.err.startswith("error: ") and captured.err.count("\n") == 1, captured.err
        assert needle in captured.err, captured.err


def test_the_cli_refuses_a_table_of_neither_kind_with_exit_2(tmp_path):
    import subprocess
    import sys

    neither = tmp_path / "neither.csv"
    pd.DataFrame({"foo": [1.0]}).to_csv(neither, index=False)
    p = subprocess.run([sys.executable, "-m", "jitbench.cli", "model", "--gpus", "8",
                        "--trials", "1", "--from-results", str(neither)],
                       capture_output=True, text=True, timeout=120,
                       cwd=Path(__file__).parents[2])
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "is neither a records table with a cost" in p.stderr
    assert p.stderr.count("\n") == 1, p.stderr


# ------------------------------------------------------------------ the report


def test_the_report_shows_the_crossover_by_layout(tmp_path):
    t = records_table()
    t["fault"], t["state_equal"], t["repeat"] = "kill", True, 0
    for c in ("recovery_s", "replay_s", "replayed_steps", "expected_replayed_steps",
              "wasted_gpu_s", "goodput", "max_abs_diff"):
        t[c] = 0.0
    t["replay_ok"] = True
    sc = scale.at_scale(t, trials=2, gpus=(8, 1024))
    assert sc is not None and sc.layout == "ddp"
    by = {b["layout"]: b for b in sc.by_replicas}
    assert list(by) == ["ddp", "hsdp R=1", "hsdp R=2", "hsdp R=4", "hsdp R=8"]
    assert by["hsdp R=2"]["measured"] and by["hsdp R=4"]["measured"]
    assert sc.params["save_s"] == pytest.approx(0.20)  # the ddp rows' (not the hsdp ones)
    t.to_csv(tmp_path / "results.csv", index=False)
    html_path, md_path = write_report(tmp_path)
    md, page = md_path.read_text(), html_path.read_text()
    assert "Where sharding moves the jit vs periodic crossover" in md
    assert f"| hsdp R=2 (measured) | hsdp:2xS rows | {by['hsdp R=2']['text']} |" in md
    assert f"| ddp | ddp rows | {by['ddp']['text']} |" in md
    assert '<td class="l">hsdp R=4 (measured)</td>' in page
    assert "periodic cheaper throughout" in by["hsdp R=1"]["text"]
