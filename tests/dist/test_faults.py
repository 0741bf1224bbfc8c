"""Every fault kind end to end on gloo, through the elastic agent.

Faults are grouped into a few campaigns (one run each, a restart per failing
fault) to keep the suite short; each test asserts on one fault of a campaign:
that it fired exactly as scheduled, the recovery or the documented outcome,
the event order, and ``state_equal`` against one shared fault-free reference
wherever JIT (or the periodic fallback) recovers. Field cases C1, C2, C10 and
C11 (field cases from real failures) have tests named after them; C2 is also covered at
every instant of the commit in ``tests/unit/test_faults.py``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from jitbench.faults import FaultSpec
from jitbench.faults.schedule import expand_scenario
from jitbench.harness import metrics
from jitbench.harness.run import run as run_spec
from jitbench.runtime import checkpoint as ckpt
from jitbench.runtime.events import read_events
from tests.conftest import small_spec

pytestmark = [pytest.mark.distributed, pytest.mark.slow, pytest.mark.timeout(300)]

STEPS = 12
"""As in test_recovery and test_campaigns: 2-rank campaigns share their references."""
EPISODE = ["fault", "failure", "save", "restart", "restore", "step"]
PERIODIC_EPISODE = ["fault", "failure", "restart", "restore", "step"]


def workers_of(run_dir: Path) -> list[str]:
    """Live processes whose command line names this run directory."""
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == os.getpid():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(run_dir) in cmd and "jitbench" in cmd:
            out.append(f"{p.name} {cmd}")
    return out


@pytest.fixture(scope="session")
def refs(shared_reference):
    """The session's fault-free reference of a spec (conftest.shared_reference)."""
    return shared_reference


def campaign(run_dir: Path, refs, faults: list[FaultSpec], strategy="jit", nproc=2, **kw):
    spec = small_spec(STEPS, faults=faults, strategy=strategy, nproc=nproc, **kw)
    out = run_spec(spec, run_dir, reference_from=refs(spec), timeout_s=280)
    assert not workers_of(run_dir), workers_of(run_dir)  # no process left behind
    return out.summary, out.run_dir


def fired(run_dir: Path) -> list[tuple]:
    """``(kind, rank, step, attempt)`` of every fault that fired, in time order."""
    return [(e["kind"], e["rank"], e["step"], e["attempt"])
            for e in read_events(run_dir / "events") if e["event"] == "fault"]


def events(run_dir: Path, name: str, **match) -> list[dict]:
    return [e for e in read_events(run_dir / "events") if e["event"] == name
            and all(e.get(k) == v for k, v in match.items())]


def assert_recovered(s: dict, streams: bool = True) -> None:
    assert s["completed"] and s["end_reason"] == "completed"
    assert s["state_equal"] is True and s["max_abs_diff"] == 0.0
    if streams:
        assert s["sample_stream_equal"] is True


# ---------------------------------------------------------------- process
PROCESS_PLAN = [
    FaultSpec("term", 1, 2),  # its peer may still finish step 3: the next fault waits
    FaultSpec("segfault", 0, 5),
    FaultSpec("exception", 1, 6),
    FaultSpec("exit", 0, 7, params={"code": 3}),
    FaultSpec("nccl-timeout", 1, 8, params={"timeout_s": 0.8}),
    FaultSpec("xid", 1, 9, params={"code": 79}),
]


@pytest.fixture(scope="module")
def process_run(tmp_path_factory, refs):
    """term, segfault, exception, exit, nccl-timeout and a fatal Xid: six
    failures, six restarts, one run."""
    return campaign(tmp_path_factory.mktemp("process") / "run", refs, PROCESS_PLAN,
                    max_restarts=len(PROCESS_PLAN))


def _episode(s: dict, kind: str) -> dict:
    [f] = [f for f in s["failures"] if f["fault_kind"] == kind]
    return f


def test_process_campaign_fires_as_scheduled_and_recovers_bitwise(process_run):
    s, run_dir = process_run
    assert fired(run_dir) == [(f.kind, f.rank, f.step, a) for a, f in enumerate(PROCESS_PLAN)]
    assert len(list((run_dir / "faults_fired").glob("*.attempt*"))) == len(PROCESS_PLAN)
    assert_recovered(s, streams=False)
    # sample streams: equal, except that a SIGTERMed rank may stop (blocked on the state
    # lock its saving watchdog holds) before logging a step whose gradients it had
    # already contributed, when its peer completed that step and the job resumes after it
    got = metrics.sample_streams(run_dir)
    want = metrics.sample_streams(Path(s["reference_dir"]))
    term = _episode(s, "term")
    allowed = {(1, st) for st in range(term["fault_step"], term["restored_step"] + 1)}
    missing = {(r, st) for r in want for st in want[r] if st not in got.get(r, {})}
    assert missing <= allowed
    assert all(got[r][st] == want[r][st] for r in got for st in got[r])
    assert s["attempts"] == len(PROCESS_PLAN) + 1
    assert s["max_replayed_steps_per_failure"] <= 1
    assert metrics.event_order(run_dir) == EPISODE * len(PROCESS_PLAN)
    for f in s["failures"]:
        assert f["restored_kind"] == "jit"
        assert f["detect_s"] is not None and f["recovery_s"] is not None


@pytest.mark.parametrize("kind", ["segfault", "exit", "exception"])
def test_crash_faults_peer_saves_the_previous_step(process_run, kind):
    s, run_dir = process_run
    f = _episode(s, kind)
    assert f["restored_step"] == f["fault_step"] - 1 and f["replayed_steps"] == 0
    assert f["trigger"] in ("collective_error", "sigterm")  # the survivor's view
    assert f["detect_s"] < 5.0
    log = (run_dir / "agent.log").read_text()
    if kind == "segfault":
        assert re.search(r"exitcode\s*:\s*-11\b", log)  # a real SIGSEGV
    elif kind == "exit":
        assert re.search(r"exitcode\s*:\s*3\b", log)
    else:  # the failing rank declares it and still saves its consistent part
        [own] = events(run_dir, "failure", rank=1, attempt=f["attempt"])
        assert own["trigger"] == "exception" and "InjectedError" in own["error"]
        assert events(run_dir, "exit", rank=1, attempt=f["attempt"])[0]["code"] == 75


def test_term_is_a_graceful_preemption(process_run):
    s, run_dir = process_run
    f = _episode(s, "term")
    [own] = events(run_dir, "failure", rank=1, attempt=f["attempt"])
    assert own["trigger"] == "sigterm"
    [save] = events(run_dir, "save", phase="end", rank=1, attempt=f["attempt"])
    assert save["ok"] and events(run_dir, "exit", rank=1, attempt=f["attempt"])[0]["code"] == 75
    # SIGTERM lands inside the collective and the process goes on until its watchdog
    # takes the state lock: it saves the last boundary, or this step if its optimizer
    # step was running; its peer may complete one more step before it notices
    assert f["fault_step"] - 1 <= f["restored_step"] <= f["fault_step"] + 1
    assert f["replayed_steps"] <= 1


def test_nccl_timeout_is_an_error_on_the_waiting_rank_not_a_hang(process_run):
    s, run_dir = process_run
    f = _episode(s, "nccl-timeout")
    [peer] = events(run_dir, "failure", rank=0, attempt=f["attempt"])
    assert peer["trigger"] == "collective_error" and "Timed out" in peer["error"]
    # detected by the backend after the per-op timeout (counted from the waiting
    # rank's entry, a little before the late rank's fault), before the watchdog's bound
    assert 0.8 - 0.3 <= f["detect_s"] < peer["hang_bound_s"]
    assert f["restored_step"] == f["fault_step"] - 1


def test_simulated_xid_recovers_well_under_the_hang_bound(process_run):
    s, run_dir = process_run
    f = _episode(s, "xid")
    a = f["attempt"]
    [gev] = events(run_dir, "gpu_event", rank=1, attempt=a)
    assert (gev["xid"], gev["fatal"], gev["source"]) == (79, True, "simulated")
    assert events(run_dir, "health_probe", rank=1, attempt=a)[0]["source"] == "simulated"
    [own] = events(run_dir, "failure", rank=1, attempt=a)
    assert own["trigger"] == "xid" and "Xid 79" in own["reason"]
    assert events(run_dir, "notice", rank=1, attempt=a)[0]["acks"] == 1
    assert events(run_dir, "exit", rank=1, attempt=a)[0]["code"] == 76  # no part: untrusted
    assert not events(run_dir, "save", rank=1, attempt=a)
    [peer] = events(run_dir, "failure", rank=0, attempt=a)
    assert peer["trigger"] == "notice" and peer["from_rank"] == 1
    assert f["trigger"] == "notice"
    assert f["detect_s"] < 0.3 * peer["hang_bound_s"]  # told at once, not the hang bound
    assert f["restored_step"] == f["fault_step"] - 1


# ---------------------------------------------------- no-failure schedules
def test_slow_rank_and_non_fatal_xids_on_schedules(tmp_path, refs):
    """A straggler under its bound, non-fatal Xids every 3 steps, one at a time."""
    plan = expand_scenario({"fault": [
        {"kind": "slow", "rank": 0, "step": 2, "delay_s": 0.4, "steps": 3},
        {"kind": "xid", "rank": 1, "every_steps": 3, "code": 63},
        {"kind": "xid", "rank": 0, "time_s": 0.6, "code": 13},
    ]}, nproc=2, steps=STEPS, seed=0)
    s, run_dir = campaign(tmp_path / "run", refs, plan)
    assert_recovered(s)
    assert s["attempts"] == 1 and s["num_failures"] == 0
    assert not events(run_dir, "failure")  # the watchdog never fired
    got = fired(run_dir)
    assert [g for g in got if g[0] != "xid" or g[1] == 1] == [
        ("slow", 0, 2, 0), ("xid", 1, 3, 0), ("xid", 1, 6, 0), ("xid", 1, 9, 0)]
    [timed] = events(run_dir, "fault", fault_id="xid@0:t0.6")
    assert timed["elapsed_s"] >= 0.6 and timed["elapsed_s"] < 0.6 + 0.4 + 1.0
    gev = events(run_dir, "gpu_event")
    assert sorted(e["xid"] for e in gev) == [13, 63, 63, 63] and not any(e["fatal"] for e in gev)
    # the summary shows the slowdown: slow window against normal steps
    [w] = s["slow_windows"]
    assert (w["first_step"], w["last_step"], w["rank"]) == (2, 4, 0)
    assert s["slow_window_step_s"] >= 0.4 > s["normal_step_s"] * 2


# -------------------------------------------------------------- C1 desync
C1_PLAN = [FaultSpec("desync", 1, 4, params={"mode": "extra"}),  # from step 4 the bound is
           FaultSpec("desync", 1, 8, params={"mode": "size"})]   # the floor, not hang_first_s


@pytest.fixture(scope="module")
def c1_run(tmp_path_factory, refs):
    """4 ranks: an extra all-reduce at step 4, a wrong-sized collective at step 8."""
    return campaign(tmp_path_factory.mktemp("c1") / "run", refs, C1_PLAN, nproc=4)


@pytest.mark.parametrize("mode", ["extra", "size"])
def test_c1_desync_every_rank_leaves_within_the_bound(c1_run, mode):
    """C1: 4 ranks, rank 1 posts an extra all-reduce (or a wrong-sized
    collective). Every rank leaves the blocked call within the runtime's
    advertised bound (not gloo's 300 s), the run recovers bitwise, no process
    is left (checked by ``campaign``)."""
    s, run_dir = c1_run
    assert fired(run_dir) == [("desync", 1, 4, 0), ("desync", 1, 8, 1)]
    attempt = 0 if mode == "extra" else 1
    [fault] = events(run_dir, "fault", attempt=attempt)
    assert fault["params"]["mode"] == mode
    fails = {e["rank"]: e for e in events(run_dir, "failure", attempt=attempt)}
    exits = {e["rank"]: e for e in events(run_dir, "exit", attempt=attempt)}
    # mode=size: gloo either aborts rank 1 (it received messages larger than it
    # posted: SIGABRT, no failure event) or, when a peer's error closes the
    # connections first, rank 1 sees that error and saves like the others.
    aborted = mode == "size" and 1 not in fails
    for r in range(4):
        if aborted and r == 1:
            continue
        bound = fails[r]["hang_bound_s"]
        assert fails[r]["t_mono"] - fault["t_mono"] <= bound + 0.5, (r, fails[r])
        assert exits[r]["t_mono"] - fault["t_mono"] <= bound + 5.0, r
    if mode == "extra":  # nobody errors: every watchdog (or a peer's exit) ends it
        assert {e["trigger"] for e in fails.values()} <= {"hang", "collective_error"}
        assert "hang" in {e["trigger"] for e in fails.values()}
    else:
        if aborted:  # gloo's abort message is in the log, and rank 1 never reached exit
            log = (run_dir / "agent.log").read_text()
            # usually gloo::EnforceNotMet ("Received data size doesn't match expected
            # size"), thrown where the larger message is read
            assert re.search(r"terminate called after throwing an instance of 'gloo::\w+'",
                             log), log[-3000:]
            assert 1 not in exits
            # the agent logs one failure per attempt, the first it saw in a poll
            # (by its timestamp): a saving peer as often as rank 1. This attempt
            # is the last that failed; when its line names rank 1, it is SIGABRT.
            code, lrank = re.findall(r"failed \(exitcode:\s*(-?\d+)\) local_rank:\s*(\d+)",
                                     log)[-1]
            assert lrank != "1" or code == "-6", (code, lrank)
        assert {fails[r]["trigger"] for r in (0, 2, 3)} <= {"collective_error", "sigterm"}
        if not aborted:  # rank 1 left its mismatched collective like any blocked rank
            assert fails[1]["trigger"] in {"collective_error", "sigterm", "hang"}
    f = s["failures"][attempt]
    assert f["fault_step"] == fault["step"] and f["restored_step"] == fault["step"] - 1
    assert f["replayed_steps"] == 0
    assert metrics.event_order(run_dir) == EPISODE * 2
    assert_recovered(s)


# ----------------------------------------------------------- compound
COMPOUND_PLAN = [
    FaultSpec("kill", 1, 3), FaultSpec("kill", 2, 3),                   # two ranks at once
    FaultSpec("kill", 3, 6), FaultSpec("torn-write", 2, 6),            # killed mid JIT write
    FaultSpec("kill", 2, 6, params={"at": "restore"}, id="kill-in-restore"),
]


@pytest.mark.heavy  # CI suite time budget: nox -s heavy
def test_compound_faults_recover(tmp_path, refs):
    """4 ranks: two ranks killed at once; a rank killed while it writes its JIT
    checkpoint (after another rank's kill); a rank killed during restore."""
    s, run_dir = campaign(tmp_path / "run", refs, COMPOUND_PLAN, nproc=4)
    assert sorted(fired(run_dir), key=lambda f: (f[3], f[1])) == [
        ("kill", 1, 3, 0), ("kill", 2, 3, 0), ("torn-write", 2, 6, 1), ("kill", 3, 6, 1),
        ("kill", 2, 6, 2)]
    assert_recovered(s)
    assert s["attempts"] == 4 and s["num_failures"] == 3
    f1, f2, f3 = s["failures"]
    # two at once: ranks 0 and 3 saved step 2
    assert f1["fault_ranks"] == [1, 2] and f1["restored_step"] == 2
    assert {e["rank"] for e in events(run_dir, "save", phase="end", attempt=0)} == {0, 3}
    # torn JIT write: rank 2 began its save and died in it; ranks 0 and 1 committed
    assert f2["fault_ranks"] == [2, 3] and f2["restored_step"] == 5
    assert events(run_dir, "save", phase="begin", rank=2, attempt=1)
    assert not events(run_dir, "save", phase="end", rank=2, attempt=1)
    assert f2["skipped_parts"] == []  # the torn part never became visible
    [torn] = events(run_dir, "fault", kind="torn-write")
    assert torn["op_index"] < torn["ops"]
    # killed during restore: the next attempt restores the same step again
    [inr] = events(run_dir, "fault", fault_id="kill-in-restore")
    assert inr["point"] == "restore" and inr["attempt"] == 2
    assert not events(run_dir, "restore", phase="end", rank=2, attempt=2)
    assert f3["restored_step"] == 5 and f3["skipped_parts"] == []
    assert s["max_replayed_steps_per_failure"] <= 1


# ------------------------------------------------------------ storage
STORAGE_A = [FaultSpec("enospc", 0, 1, params={"room_ckpts": 1.5}), FaultSpec("eio", 0, 7)]


@pytest.fixture(scope="module")
def storage_a(tmp_path_factory, refs):
    return campaign(tmp_path_factory.mktemp("storage_a") / "run", refs, STORAGE_A,
                    strategy="periodic:3")


def test_c11_out_of_space_every_rank_told_previous_checkpoint_loads(storage_a):
    """C11: room for ~1.5 checkpoints. The second periodic save (step 6) runs out
    of space: rank 0 gets ENOSPC, rank 1 leaves the checkpoint barrier at once
    with the same reason, no partial file is visible, step 3 still loads."""
    s, run_dir = storage_a
    assert fired(run_dir)[0] == ("enospc", 0, 6, 0)
    [bad] = events(run_dir, "save", phase="end", ok=False, attempt=0)
    assert (bad["rank"], bad["step"], bad["errno"]) == (0, 6, 28)
    assert "No space left on device" in bad["error"]
    fails = {e["rank"]: e for e in events(run_dir, "failure", attempt=0)}
    assert fails[0]["trigger"] == "storage_error" and fails[0]["errno"] == 28
    assert fails[1]["trigger"] == "notice" and "No space left on device" in fails[1]["reason"]
    assert fails[1]["t_mono"] - fails[0]["t_mono"] < 1.0  # not the 120 s barrier bound
    [restore] = events(run_dir, "restore", phase="end", rank=0, attempt=1)
    assert (restore["step"], restore["kind"], restore["skipped"]) == (3, "periodic", [])
    assert not list((run_dir / "ckpt").glob("*.tmp"))
    for part in ckpt.list_parts(run_dir / "ckpt"):
        ckpt.load_part(part, 2)
    f = s["failures"][0]
    assert f["restored_step"] == 3 and f["trigger"] == "notice"
    assert metrics.event_order(run_dir)[:5] == PERIODIC_EPISODE
    assert_recovered(s)


def test_eio_during_periodic_write_recovers(storage_a):
    s, run_dir = storage_a
    assert fired(run_dir)[1] == ("eio", 0, 9, 1)
    [bad] = events(run_dir, "save", phase="end", ok=False, attempt=1)
    assert (bad["step"], bad["errno"]) == (9, 5) and "Input/output error" in bad["error"]
    [peer] = events(run_dir, "failure", rank=1, attempt=1)
    assert "Input/output error" in peer["reason"]
    f = s["failures"][1]
    assert f["restored_step"] == 6 and f["restored_kind"] == "periodic"
    assert metrics.event_order(run_dir) == PERIODIC_EPISODE * 2
    assert s["state_equal"] is True


STORAGE_B = [FaultSpec("torn-write", 0, 5), FaultSpec("corrupt", 0, 7), FaultSpec("kill", 1, 8)]


@pytest.fixture(scope="module")
def storage_b(tmp_path_factory, refs):
    return campaign(tmp_path_factory.mktemp("storage_b") / "run", refs, STORAGE_B,
                    strategy="periodic:3")


def test_c2_torn_periodic_write_resumes_from_newest_valid(storage_b):
    """C2: rank 0 is SIGKILLed at a seeded instant inside the step-6 periodic
    write; the directory holds step 3 or a complete step 6, never a visible
    truncated part, and resume picks the newest valid one."""
    s, run_dir = storage_b
    [torn] = events(run_dir, "fault", kind="torn-write")
    assert (torn["rank"], torn["step"], torn["attempt"]) == (0, 6, 0)
    committed = torn["op_index"] == torn["ops"] - 1  # killed after the manifest's rename
    [restore] = events(run_dir, "restore", phase="end", rank=0, attempt=1)
    assert restore["skipped"] == []
    assert restore["step"] == (6 if committed else 3)
    f = s["failures"][0]
    assert f["fault_kind"] == "torn-write" and f["restored_kind"] == "periodic"
    assert_recovered(s)


@pytest.mark.parametrize("kind, params", [("eio", {"op": "write"}),
                                          pytest.param("torn-write", {}, marks=pytest.mark.heavy)])
def test_storage_faults_fire_in_the_asynchronous_writer(tmp_path, refs, kind, params):
    """periodic-async writes in a background thread, which had no I/O hook: these faults
    were accepted and never fired. EIO fails that save only (the previous checkpoint
    stays newest, training goes on); a torn write kills rank 0 with the directory still
    .tmp, and the restart restores the newest committed checkpoint."""
    s, run_dir = campaign(tmp_path / "run", refs, [FaultSpec(kind, 0, 5, params=params)],
                          strategy="periodic-async:3")
    # it fires in the next commit from step 5 on: the background commit of step 3 or 6
    # (the step in the event is the training thread's at that instant)
    assert [f[:2] for f in fired(run_dir)] == [(kind, 0)] and s["unfired_faults"] == 0
    if kind == "eio":
        [bad] = events(run_dir, "save", phase="end", ok=False)
        assert bad["step"] in (3, 6) and "Input/output error" in bad["error"]
        assert s["num_failures"] == 0 and s["attempts"] == 1
    else:
        [f] = s["failures"]
        assert f["restored_kind"] == "async" and f["restored_step"] in (3, 6)
    assert_recovered(s)


def test_corrupt_checkpoint_falls_back_and_says_so(storage_b):
    s, run_dir = storage_b
    [bad] = events(run_dir, "fault", kind="corrupt")
    assert bad["fails_job"] is False and bad["corrupted_step"] == 6
    assert bad["corrupted"] == ["periodic_step00000006_rank00000.pt"]
    assert fired(run_dir)[1:] == [("corrupt", 0, 7, 1), ("kill", 1, 8, 1)]
    f = s["failures"][1]
    assert f["fault_kind"] == "kill" and f["restored_step"] == 3
    assert [p for p, _ in f["skipped_parts"]] == ["periodic_step00000006_rank00000.pt"]
    assert "SHA-256 mismatch" in f["skipped_parts"][0][1]
    assert s["restore_skipped"] == f["skipped_parts"]  # the summary says so too
    name, why = f["skipped_parts"][0]
    assert (f"restore skipped {name}: {why.removeprefix(f'{name}: ')}"
            in s["decisions"])  # and the console: one line with the reason, the part once
    [restore] = events(run_dir, "restore", phase="end", rank=0, attempt=2)
    assert restore["skipped"] == f["skipped_parts"]
    assert f["replayed_steps"] == 4
    assert_recovered(s)


# ----------------------------------------------------------- C10 budget
def test_c10_rank_failing_every_attempt_exhausts_the_budget(tmp_path):
    """C10: rank 1 is killed at step 2 of every attempt. After --max-restarts 1
    the run stops: exit status 3, a message naming the budget, no process left."""
    run_dir = tmp_path / "run"
    p = subprocess.run(
        [sys.executable, "-m", "jitbench.cli", "run", "--fault", "kill", "--fault-rank", "1",
         "--fault-step", "2", "--every-attempt", "--max-restarts", "1", "--steps", "6",
         "--size", "tiny", "--batch-size", "4", "--no-reference", "--hang-floor-s", "1.5",
         "--hang-first-s", "8", "--run-dir", str(run_dir), "--json"],
        capture_output=True, text=True, timeout=280, cwd=tmp_path)
    assert p.returncode == 3, p.stderr[-2000:]
    last = p.stderr.strip().splitlines()[-1]
    assert "restart budget exhausted" in last and "--max-restarts 1" in last, last
    assert "all 2 attempts failed" in last and "Traceback" not in p.stderr
    import json

    s = json.loads(p.stdout)
    assert s["completed"] is False and s["attempts"] == 2
    assert fired(run_dir) == [("kill", 1, 2, 0), ("kill", 1, 2, 1)]
    assert not events(run_dir, "done")  # never kept training with part of the world
    assert not workers_of(run_dir)


# ------------------------------------------------------------ Poisson
POISSON = {"poisson": [{"kinds": ["kill", "exception"], "mtbf_steps": 5.0}]}


def _results(s: dict) -> dict:
    """The results table without timings."""
    keep = ("completed", "attempts", "replayed_steps", "state_equal", "max_abs_diff",
            "sample_stream_equal", "num_failures", "restore_skipped", "end_reason")
    return {**{k: s[k] for k in keep},
            "failures": [(f["fault_kind"], f["fault_rank"], f["fault_step"], f["restored_step"],
                          f["replayed_steps"]) for f in s["failures"]]}


@pytest.mark.heavy  # CI suite time budget: nox -s heavy
def test_seeded_poisson_campaign_replays(tmp_path, refs):
    """The same --seed gives the same fault times and the same results table."""
    plan = expand_scenario(POISSON, nproc=2, steps=STEPS, seed=0)
    assert [(f.kind, f.rank, f.step) for f in plan] == [("kill", 0, 4), ("exception", 0, 9)]
    runs = [campaign(tmp_path / f"run{i}", refs,
                     expand_scenario(POISSON, nproc=2, steps=STEPS, seed=0)) for i in (0, 1)]
    (s0, d0), (s1, d1) = runs
    assert fired(d0) == fired(d1) == [("kill", 0, 4, 0), ("exception", 0, 9, 1)]
    assert _results(s0) == _results(s1)
    assert_recovered(s0)
