"""``gate``, ``validate`` and ``io`` on the input of a new-user pass (2026-12-03).

Found: ``gate`` judged a script's own recovery (``own``), which promises nothing
(exit 4 against itself); ``validate --csv`` and ``io --csv`` replaced a run's records
(exit 0); ``io --csv`` into a missing directory failed only after measuring (internal
error, exit 1); ``validate`` of ``own`` runs said there was no failure; ``gate``
compared negative timings and dropped non-numeric ones.
"""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

from jitbench.errors import InputError
from jitbench.records import spec_hash
from jitbench.reports import gate as g
from jitbench.reports.validate import validation_table
from tests.conftest import one_line

NO_RUNS = "--allow-missing-evidence"
"""The fixture tables here have no run directories beside them: gate and validate refuse
their rows without this opt-out (tests/unit/test_missing_evidence.py)."""


def _rows(n_rep=2, own=True):
    rows = []
    strategies = (("own", "jit") if own else ("jit",))
    for strategy in strategies:
        for rep in range(n_rep):
            row = {"workload": "script:mytrain.py", "strategy": strategy, "fault": "kill",
                   "repeat": rep, "spec_hash": f"h-{strategy}", "results_version": 1,
                   "machine_torch": "2.14.1", "machine_host": "a", "machine_cpus": 2,
                   "world_size": 2, "completed": True, "state_equal": True,
                   "replay_ok": True, "replayed_steps": 0, "expected_replayed_steps": 0,
                   "replay_promised": True, "bitwise_promised": True,
                   "detect_s": 0.1, "save_s": 0.05, "restart_s": 3.0 + rep,
                   "restore_s": 0.1, "recovery_s": 4.0 + rep, "wasted_gpu_s": 9.0,
                   "step_s": 0.05, "num_failures": 1, "run_dir": f"runs/{strategy}-{rep}"}
            if strategy == "own":  # the script's own recovery: nothing promised
                row.update(replay_ok=None, expected_replayed_steps=None, replayed_steps=5,
                           state_equal=False, replay_promised=False, bitwise_promised=False)
            rows.append(row)
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- 1: gate judges promises
def test_gate_judges_invariants_only_where_the_run_promised_them(jb, tmp_path):
    """A ``sweep --script`` under ``own`` passes the gate against itself (it used to fail
    with 'replayed 5, expected None', exit 4); a broken promise is still a violation."""
    t = _rows()
    v = g.compare(t, t)
    assert not v.violations, v.lines()
    assert v.lines()[-1].startswith("gate: PASS")
    assert any("replayed_steps reported, not judged" in n and "script:mytrain.py/own/kill" in n
               for n in v.notes)
    # the same table as a sweep writes it (CSV: booleans as text, empty cells), end to end
    csv = tmp_path / "results.csv"
    t.to_csv(csv, index=False)
    # a fixture table without its runs: the failures.csv check is waived (a note says so)
    code, err = jb("gate", "--baseline", str(csv), str(csv), NO_RUNS)
    assert code == 0, err
    # where the run promised them (jit; an empty promise cell: a built-in strategy),
    # the invariants stay exact
    bad = _rows()
    bad.loc[bad.strategy == "jit", "replay_ok"] = False
    bad["bitwise_promised"] = bad["bitwise_promised"].astype(object)
    bad.loc[bad.strategy == "jit", "bitwise_promised"] = None
    bad.loc[bad.strategy == "jit", "state_equal"] = False
    got = {(c.config, c.metric) for c in g.compare(t, bad).violations}
    assert got == {(f"script:mytrain.py/jit/kill (repeat {r})", m)
                   for r in (0, 1) for m in ("replayed_steps", "state_equal")}
    # a run that withdrew a promise its baseline configuration kept (a launched
    # script's jit hooks that turned inexact) is judged all the same (a review found
    # state_equal false passing that way)
    withdrawn = _rows()
    jit = withdrawn.strategy == "jit"
    withdrawn.loc[jit, "bitwise_promised"] = False
    withdrawn.loc[jit, "state_equal"] = False
    got = {(c.config, c.metric) for c in g.compare(t, withdrawn).violations}
    assert got == {(f"script:mytrain.py/jit/kill (repeat {r})", "state_equal") for r in (0, 1)}
    # a table without the promise columns (older sweeps): every run promises
    old = t.drop(columns=["replay_promised", "bitwise_promised"])
    assert {c.metric for c in g.compare(old, old).violations} == {"replayed_steps",
                                                                   "state_equal"}
    # new results that record their promises against such an older baseline: its own
    # rows promised nothing then either (a trial: an ``own`` sweep failed with exit 4
    # against its own older baseline) ...
    v = g.compare(old, t)
    assert not v.violations, v.lines()
    assert any("state_equal reported, not judged" in n and "script:mytrain.py/own/kill" in n
               for n in v.notes)
    assert {c.config.split(" (")[0] for c in g.compare(old, bad).violations} == {
        "script:mytrain.py/jit/kill"}
    # ... while its other rows did: a run that withdrew the promise is judged all the
    # same (a review: state_equal false passed against the committed CPU baseline)
    got = {(c.config, c.metric) for c in g.compare(old, withdrawn).violations}
    assert got == {(f"script:mytrain.py/jit/kill (repeat {r})", "state_equal") for r in (0, 1)}


# ---------------------------------------------------------------- 5: gate timings
@pytest.mark.parametrize("value", [-5.0, "abc", float("inf")])
@pytest.mark.parametrize("side", ["baseline", "results"])
def test_gate_refuses_a_timing_that_is_not_a_measurement(jb, tmp_path, value, side):
    """Negative, infinite or non-numeric timings are refused in one line naming the
    file, row, run and column (exit 2); empty timings (no failure) are accepted."""
    good = _rows()
    good.loc[0, "recovery_s"] = None  # legitimately empty: accepted
    bad = good.copy()
    bad["recovery_s"] = bad["recovery_s"].astype(object)
    bad.loc[2, "recovery_s"] = value
    gp, bp = tmp_path / "good.csv", tmp_path / "bad.csv"
    good.to_csv(gp, index=False)
    bad.to_csv(bp, index=False)
    before = bp.read_bytes()
    args = (("--baseline", str(bp), str(gp)) if side == "baseline"
            else ("--baseline", str(gp), str(bp)))
    code, err = jb("gate", *args)
    line = one_line(err)
    assert code == 2, err
    assert str(bp) in line and "row 3 (script:mytrain.py/jit/kill repeat 0)" in line
    assert "recovery_s is" in line and "empty or a finite number >= 0 (seconds)" in line
    assert (side == "baseline") == ("--baseline" in line)
    assert bp.read_bytes() == before
    with pytest.raises(InputError, match="recovery_s"):
        g.compare(good, bad) if side == "results" else g.compare(bad, good)
    assert g.compare(good, good).lines()[-1].startswith("gate: PASS")
    code, err = jb("gate", "--baseline", str(gp), str(gp), NO_RUNS)
    assert code == 0, err


# ---------------------------------------------------------------- 2, 3: output files
def _run_dir(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    _rows(n_rep=1, own=False).to_csv(run / "records.csv", index=False)
    pd.DataFrame([{"run_dir": str(run), "detect_s": 0.1, "save_s": 0.05, "restart_s": 3.0,
                   "restore_s": 0.1}]).to_csv(run / "failures.csv", index=False)
    return run


def test_validate_csv_never_replaces_a_file_it_did_not_write(jb, tmp_path):
    run = _run_dir(tmp_path)
    rec = run / "records.csv"
    before = rec.read_bytes()
    code, err = jb("validate", str(run), "--csv", str(rec))
    assert code == 2 and "exists and is not a jitbench validate table" in one_line(err)
    assert rec.read_bytes() == before
    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n")
    code, err = jb("validate", str(run), "--csv", str(notes))
    assert code == 2 and notes.read_text() == "mine\n"
    for target, needle in ((tmp_path / "no" / "v.csv", "does not exist"),
                           (tmp_path, "is a directory"), (rec / "v.csv", "not a directory")):
        code, err = jb("validate", str(run), "--csv", str(target))
        assert code == 2 and one_line(err).startswith(f"error: --csv: cannot write {target}")
        assert needle in err
    # its own earlier output (and an empty file) may be replaced
    out = tmp_path / "v.csv"
    for _ in range(2):
        code, err = jb("validate", str(run), "--csv", str(out))
        assert code == 0, err
    assert out.read_text().startswith("workload,strategy,fault,runs")
    empty = tmp_path / "empty.csv"
    empty.touch()
    assert jb("validate", str(run), "--csv", str(empty))[0] == 0


def test_io_checks_every_output_before_measuring(jb, tmp_path, monkeypatch):
    """Refused in one line, exit 2, before the state is built: nothing is measured."""
    from jitbench.harness import iobench

    def never(*a, **k):
        raise AssertionError("measured before the output paths were checked")

    monkeypatch.setattr(iobench, "make_state", never)
    run = _run_dir(tmp_path)
    rec = run / "records.csv"
    before = rec.read_bytes()
    base = ("io", "--size", "tiny", "--repeats", "1", "--replicas", "1")
    meta_of_other = tmp_path / "x.csv.meta.json"
    meta_of_other.write_text('{"mine": 1}\n')
    cases = [
        (("--csv", "/nonexistent/dir/io.csv"),
         "error: --csv: cannot write /nonexistent/dir/io.csv: its directory /nonexistent/dir "
         "does not exist"),
        (("--csv", str(tmp_path)), "is a directory"),
        (("--csv", str(rec)), "exists and is not a jitbench io table"),
        (("--csv", str(tmp_path / "x.csv")), "x.csv.meta.json exists and is not a jitbench io"),
        (("--ckpt-dir", str(rec / "ck")), f"--ckpt-dir: cannot write {rec / 'ck'}"),
        (("--run-dir", "/proc/self/nope"), "--run-dir /proc/self/nope does not exist"),
        (("--run-dir", str(rec)), f"--run-dir {rec} is not a directory"),

        # a directory that exists but answers ENOENT to a create is named as such
        (("--csv", "/proc/x.csv"), "--csv: cannot write /proc/x.csv: /proc takes no new file "
         "(the system answered: No such file or directory)"),
    ]
    for args, needle in cases:
        code, err = jb(*base, *args)
        assert code == 2 and needle in one_line(err), (args, err)
    # a new-user trial: a million writers were accepted (about 780k files made)
    code, err = jb("io", "--size", "tiny", "--repeats", "1", "--replicas", "1,1000000",
                   "--run-dir", str(tmp_path))
    assert code == 2 and ("--replicas: expected comma-separated integers in [1, 1024], "
                          "got '1,1000000'") in one_line(err)
    assert rec.read_bytes() == before and json.loads(meta_of_other.read_text()) == {"mine": 1}
    assert not (tmp_path / "x.csv").exists()


def test_io_may_replace_its_own_csv_and_meta(jb, tmp_path, monkeypatch):
    from jitbench.cli import io as io_cli
    from jitbench.harness import iobench

    monkeypatch.setattr(iobench, "make_state", lambda size: {})
    monkeypatch.setattr(iobench, "run_io_bench", lambda d, *a, **k: [
        iobench.make_row("disk write", 1e6, [1.0]), iobench.make_row("disk read", 1e6, [1.0])])
    out = tmp_path / "io.csv"
    for _ in range(2):
        code, err = jb("io", "--size", "tiny", "--repeats", "1", "--replicas", "1",
                       "--run-dir", str(tmp_path), "--csv", str(out), "--json")
        assert code == 0, err
    assert out.read_text().splitlines()[0] == ",".join(io_cli.CSV_COLUMNS)
    assert set(io_cli.META_KEYS) <= set(json.loads((tmp_path / "io.csv.meta.json").read_text()))


def test_io_names_where_its_removed_temporary_directory_was(jb, tmp_path, monkeypatch):
    """Without --ckpt-dir the measured directory is a temporary one, removed at the end:
    the record names the run directory it was made in, not a path that no longer exists."""
    from jitbench.harness import iobench

    seen = []

    def bench(d, *a, **k):
        seen.append(d)
        return [iobench.make_row("disk write", 1e6, [1.0]),
                iobench.make_row("disk read", 1e6, [1.0])]

    monkeypatch.setattr(iobench, "make_state", lambda size: {})
    monkeypatch.setattr(iobench, "run_io_bench", bench)
    monkeypatch.chdir(tmp_path)  # the default --run-dir '.', as nox -s io runs it
    code, err = jb("io", "--size", "tiny", "--repeats", "1", "--replicas", "1",
                   "--csv", "io.csv", "--json")
    assert code == 0, err
    assert len(seen) == 1 and not seen[0].exists()
    assert seen[0].resolve().parent == tmp_path.resolve()
    fs = json.loads((tmp_path / "io.csv.meta.json").read_text())["filesystem"]
    assert fs["path"] == f"a temporary directory in {tmp_path.resolve()}, removed"
    assert fs["mount"] and fs["type"]


# ---------------------------------------------------------------- 4: validate's reason
def test_validate_names_a_strategy_the_model_does_not_cover(jb, tmp_path):
    from jitbench.reports.validate import why_empty

    runs = _rows(n_rep=2)
    own = runs[runs.strategy == "own"]
    assert validation_table(own, pd.DataFrame()).empty
    why = why_empty(own, pd.DataFrame())
    assert why.startswith("no run the model covers: 2 runs with a failure under strategy "
                          "own, which the model does not predict (it covers: jit, none, "
                          "periodic:N, periodic-async:N)")
    d = tmp_path / "sw"
    d.mkdir()
    own.to_csv(d / "records.csv", index=False)
    code, err = jb("validate", str(d), NO_RUNS)
    assert code == 2 and one_line(err) == f"error: {d}: {why}"
    # no failure at all: said so
    calm = own.assign(num_failures=0)
    assert why_empty(calm, pd.DataFrame()).startswith("no run with a failure to validate")
    # covered, but nothing measured to predict from: named too
    lost = runs[runs.strategy == "jit"].assign(wasted_gpu_s=None)
    assert "none with a measured wasted_gpu_s" in why_empty(lost, pd.DataFrame())
    # a periodic run without its training wall time cannot be predicted: that column is
    # named among what the model needs (and not for jit, whose prediction never reads it)
    periodic = runs[runs.strategy == "jit"].assign(strategy="periodic:4", checkpoint_saves=2)
    assert not validation_table(periodic.assign(train_wall_s=10.0), pd.DataFrame()).empty
    assert validation_table(periodic, pd.DataFrame()).empty
    assert "train_wall_s" in why_empty(periodic, pd.DataFrame())
    assert "save_s" not in why_empty(periodic, pd.DataFrame())  # only jit's needs it
    jit_only = runs[runs.strategy == "jit"].assign(step_s=None)
    assert validation_table(jit_only, pd.DataFrame()).empty
    assert "train_wall_s" not in why_empty(jit_only, pd.DataFrame())
    assert "step_s" in why_empty(jit_only, pd.DataFrame())
    # the world size is named among them too (a trial: world_size -2 was blamed on step_s)
    no_world = runs[runs.strategy == "jit"].assign(world_size=None)
    assert validation_table(no_world, pd.DataFrame()).empty
    assert "world_size" in why_empty(no_world, pd.DataFrame())
    # a table handed over directly with an empty strategy cell is still explained
    blank = runs.assign(strategy=None)
    assert "which the model does not predict" in why_empty(blank, pd.DataFrame())


# ---------------------------------------------------------------- 6: corrupt cells (2026-12-04)
@pytest.mark.parametrize("column, value, says", [
    ("detect_s", -100.0, "detect_s is -100.0; it must be empty or a finite number >= 0 "
                         "(seconds)"),
    ("wasted_gpu_s", "abc", "wasted_gpu_s is 'abc'; it must be empty or a finite number "
                            ">= 0 (GPU-seconds)"),
    ("num_failures", float("inf"), "num_failures is inf; it must be empty or a whole "
                                   "number >= 0"),
    ("world_size", -2, "world_size is -2; it must be empty or a whole number >= 1"),
    # a new-user trial: each passed every command (exit 0)
    ("replayed_steps", 1.5, "replayed_steps is 1.5; it must be empty or a whole number "
                            ">= 0 (steps)"),
    ("seed", "abc", "seed is 'abc'; it must be empty or a whole number >= 0 and < 2**32"),
    ("seed", 2**32, "seed is 4294967296"),
    ("faults", "garbage", "faults is 'garbage'; it must be empty or faults as "
                          "kind@rank:step joined by commas"),
    ("repeat", "x", "repeat is 'x'"),
    # a new-user trial of 2026-12-05: the summary's columns beside the schema's
    ("final_step", "abc", "final_step is 'abc'; it must be empty or a whole number >= 0"),
    ("checkpoint_interval", 2.5, "checkpoint_interval is 2.5"),
    ("recovery_s", "abc", "recovery_s is 'abc'"),
    ("unfired_faults", "abc", "unfired_faults is 'abc'"),
    ("state_equal", "maybe", "state_equal is 'maybe'; a flag must be empty, true or false"),
    ("strategy", None, "strategy is empty; every row names its strategy"),
    ("workload", None, "workload is empty; every row names its workload"),
    # a new-user trial: gate refused it, validate and report went on (exit 0)
    ("spec_json", "{not json", "spec_json is '{not json'; it must be empty or the run spec "
                               "as a JSON object"),
])
@pytest.mark.parametrize("command", ["validate", "report", "gate"])
def test_a_corrupt_cell_is_named_by_every_command_that_reads_the_table(
        jb, tmp_path, column, value, says, command):
    """A cell that cannot be what its column records is refused in one line naming the
    file, the row and the cell (exit 2) by validate, report and gate alike: found as
    internal errors (exit 1) or silently wrong output (exit 0) in a new-user trial; the
    table and everything else in the directory stay as they were."""
    good = _rows()
    if column not in good:
        good[column] = {"spec_json": "{}", "faults": "kill@1:4,term@0:6"}.get(column, 0)
    bad = good.copy()
    bad[column] = bad[column].astype(object)
    bad.loc[1, column] = value
    d = tmp_path / "sweep"
    d.mkdir()
    bad.to_csv(d / "results.csv", index=False)
    before = sorted(p.name for p in d.iterdir())
    table = (d / "results.csv").read_bytes()
    if command == "gate":
        base = tmp_path / "base.csv"
        good.to_csv(base, index=False)
        code, err = jb("gate", "--baseline", str(base), str(d))
    else:
        code, err = jb(command, str(d))
    line = one_line(err)
    assert code == 2, err
    assert line.startswith("error: ") and "results.csv: row 2" in line, line
    assert says in line, line
    assert sorted(p.name for p in d.iterdir()) == before  # no report folder left behind
    assert (d / "results.csv").read_bytes() == table


def test_check_cells_takes_what_jitbench_records():
    """Cells jitbench itself writes pass: empty timings of a run without a failure,
    booleans as text, and max_abs_diff inf (a state of another shape); the negative
    or infinite timing does not."""
    from jitbench.records import check_cells

    t = _rows().assign(max_abs_diff=float("inf"), completed="True", state_equal="false")
    t.loc[0, "recovery_s"] = None
    check_cells(t)
    t.loc[1, "recovery_s"] = float("inf")
    with pytest.raises(InputError, match="recovery_s is inf; it must be empty or a finite "):
        check_cells(t)
    with pytest.raises(InputError, match="max_abs_diff is -1.0; it must be empty or a "
                                         "number >= 0"):
        check_cells(_rows().assign(max_abs_diff=-1.0))


def test_report_refuses_an_unreadable_sweep_description_and_drops_stale_figures(jb, tmp_path):
    """report: a corrupt ``sweep.json`` is one line (exit 2; was a JSONDecodeError, exit
    1, after the figures folder had been made); a report written again with fewer
    figures removes the earlier report's figures it no longer draws."""
    d = tmp_path / "sweep"
    d.mkdir()
    _rows().to_csv(d / "results.csv", index=False)
    for text in ("{bad", "[1, 2]", '{"scripts": 5}', '{"scripts": [5]}', '{"machine": 5}',
                 '{"wall_s": "x"}', '{"runs": true}'):
        (d / "sweep.json").write_text(text)
        code, err = jb("report", str(d))
        assert code == 2 and "sweep.json" in one_line(err), (text, err)
        assert not (d / "report_files").exists() and not (d / "report.html").exists()
    (d / "sweep.json").write_text('{"scripts": [], "machine": null, "wall_s": 3}')
    code, err = jb("report", str(d))
    assert code == 0, err
    shutil.rmtree(d / "report_files")
    for name in ("report.html", "report.md"):
        (d / name).unlink()
    (d / "sweep.json").unlink()
    code, err = jb("report", str(d))
    assert code == 0, err
    files = d / "report_files"
    drawn = sorted(p.name for p in files.glob("fig*.png"))
    (files / "fig97.png").write_bytes(b"an earlier report's figure")
    (files / "notes.txt").write_text("the user's own file")  # marked folder: kept anyway
    code, err = jb("report", str(d))
    assert code == 0, err
    assert sorted(p.name for p in files.glob("fig*.png")) == drawn
    assert (files / "notes.txt").read_text() == "the user's own file"


def test_gate_names_a_spec_that_is_not_json_and_tolerates_an_unrecorded_world_size(jb,
                                                                                   tmp_path):
    spec = {"steps": 8, "nproc": 2}  # the hash is the spec's (gate recomputes it)
    good = _rows().assign(spec_json=json.dumps(spec), spec_hash=spec_hash(spec))
    bad = good.copy()
    bad.loc[0, "spec_json"] = "{bad"
    gp, bp = tmp_path / "good.csv", tmp_path / "bad.csv"
    good.to_csv(gp, index=False)
    bad.to_csv(bp, index=False)
    code, err = jb("gate", "--baseline", str(gp), str(bp))
    line = one_line(err)
    assert code == 2 and str(bp) in line and "row 1" in line
    assert "spec_json is '{bad'; it must be empty or the run spec as a JSON object" in line
    # an empty world_size (not recorded) is no crash: GPU-second floors use one rank
    nows = good.assign(world_size=None)
    nows.to_csv(bp, index=False)
    code, err = jb("gate", "--baseline", str(bp), str(bp), NO_RUNS)
    assert code == 0, err


def test_gate_names_a_run_directory_given_for_a_sweep(jb, tmp_path):
    """gate of a run directory (its records) says that gate compares a sweep's results,
    instead of 'no column spec_hash' (a new-user trial)."""
    run = tmp_path / "run"
    run.mkdir()
    _rows().drop(columns=["spec_hash"]).to_csv(run / "records.csv", index=False)
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    _rows().to_csv(sweep / "results.csv", index=False)
    for args, flag in ((("--baseline", str(sweep), str(run)), ""),
                       (("--baseline", str(run), str(sweep)), "--baseline ")):
        code, err = jb("gate", *args)
        line = one_line(err)
        assert code == 2 and line.startswith(f"error: {flag}{run}: a run's records "
                                             "(records.csv); gate compares the results of "
                                             "a sweep"), line


@pytest.mark.parametrize("column", ["unfired_faults", "world_size", "recovery_s", "repeat"])
def test_a_blank_number_cell_read_as_text_is_read_as_missing(jb, tmp_path, column):
    """pandas reads a number column with a blank (' ') cell from a CSV as text; check_cells
    takes the blank as empty and load_results converts the column to numbers, so gate and
    report do not fail on text (a review: internal errors, exit 1)."""
    t = _rows()
    if column not in t:
        t[column] = 0
    t[column] = t[column].astype(object)
    t.loc[1, column] = " "
    d = tmp_path / "sweep"
    d.mkdir()
    t.to_csv(d / "results.csv", index=False)
    from jitbench.records import load_results

    got = load_results(d)
    assert pd.api.types.is_numeric_dtype(got[column]) and pd.isna(got[column].iloc[1])
    for args in (("gate", "--baseline", str(d), str(d), NO_RUNS), ("report", str(d))):
        code, err = jb(*args)
        assert code in (0, 4), (args, err)  # the own rows' invariants may be judged; no crash
        assert "internal error" not in err


def test_a_bad_cell_is_named_by_its_position_in_a_table_with_a_repeated_index(tmp_path):
    from jitbench.records import load_results

    t = pd.concat([_rows(), _rows()])  # index 0..3, 0..3: kept in the parquet file
    t["recovery_s"] = t["recovery_s"].astype(object)
    t.iloc[5, t.columns.get_loc("recovery_s")] = -1.0
    f = tmp_path / "results.parquet"
    t.to_parquet(f)
    with pytest.raises(InputError, match=r"results.parquet: row 6 \(script:mytrain.py/own/kill "
                                         r"repeat 1\): recovery_s is -1.0"):
        load_results(f)


def test_io_table_gives_small_sizes_three_figures(jb, tmp_path, monkeypatch):
    """Sizes, times and rates keep three significant figures in the table (a new-user
    trial: 2.4 MB was shown as 2, a 0.0031 s save as 0.003); large ones stay whole."""
    import io as stdio

    from rich.console import Console

    from jitbench.cli import console
    from jitbench.harness import iobench

    buf = stdio.StringIO()
    monkeypatch.setattr(console, "out", lambda: Console(file=buf, width=200))
    monkeypatch.setattr(iobench, "make_state", lambda size: {})
    monkeypatch.setattr(iobench, "run_io_bench", lambda d, *a, **k: [
        iobench.make_row("disk write", 2.4e6, [0.5]),
        iobench.make_row("disk read", 1.5e9, [1.0]),
        iobench.make_row("JIT save", 2.4e6, [0.0031234])])
    code, err = jb("io", "--size", "tiny", "--repeats", "1", "--replicas", "1",
                   "--run-dir", str(tmp_path))
    assert code == 0, err
    rows = {ln.split("│")[1].strip(): [c.strip() for c in ln.split("│")[2:5]]
            for ln in buf.getvalue().splitlines() if ln.startswith("│")}
    assert rows["disk write"] == ["2.40", "0.500", "4.80"]
    assert rows["disk read"] == ["1500", "1.00", "1500"]
    assert rows["JIT save"] == ["2.40", "0.00312", "768"]
