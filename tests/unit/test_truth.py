"""What was durable comes from the checkpoint directory, and the root cause of a
failure the job met by itself reaches the user (tracker issue 14, sections 1-2).

Synthetic events and checkpoint directories: a writer killed after its manifest's
rename (committed, never logged), a part pruned after the restore that read it, a
recovery interrupted by a second failure, a full filesystem on rank 0 in every
attempt, a failed rendezvous in the agent's log, a run resumed from another job.
"""

from __future__ import annotations

import errno
import json
import os
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from jitbench import phases
from jitbench.harness import metrics
from jitbench.harness.launch import LaunchResult
from jitbench.harness.run import (
    agent_error,
    end_reason,
    record_row,
    resumed_step,
    summarize,
)
from jitbench.runtime import checkpoint as ckpt
from tests.conftest import small_spec

BASE = time.time() - 1000.0
"""Event times are BASE + t (wall and monotonic alike): manifests carry real wall times."""


def _events(d: Path, attempt: int, rank: int, items) -> None:
    d.mkdir(parents=True, exist_ok=True)
    with open(d / f"attempt{attempt:03d}_rank{rank:05d}.jsonl", "a") as fh:
        for name, phase, t, extra in items:
            fh.write(json.dumps({"event": name, "phase": phase, "t_wall": BASE + t,
                                 "t_mono": BASE + t, "rank": rank, "attempt": attempt,
                                 "pid": 1 + attempt, "host": "h", **extra}) + "\n")


def _steps(first: int, last: int, t0: float) -> list:
    out = []
    for i, s in enumerate(range(first, last + 1)):
        t = t0 + i
        out += [("step", "begin", t, {"step": s}),
                ("step", "end", t + 0.5, {"step": s, "dur_s": 0.5})]
    return out


def _commit(d: Path, step: int, t: float) -> dict:
    """A committed periodic part of ``step`` whose manifest says it committed at BASE + t."""
    part = ckpt.write_part(d, "periodic", step, 0, 2, {"w": torch.zeros(2)})
    m = json.loads(part.manifest_path.read_text())
    m[ckpt.COMMIT_TIME] = BASE + t
    part.manifest_path.write_text(json.dumps(m))
    return {"name": part.path.name, "step": step, "kind": "periodic", "rank": 0, "t": BASE + t}


def _torn_after_commit(run: Path, listing: bool) -> None:
    """periodic:4, 2 ranks. Steps 1-12 (step s ends at s + 0.5); saves 4 and 8 logged;
    rank 0 is killed in the write of step 12 after its manifest's rename (t 12.7):
    no save end. Attempt 1 restores step 12 and runs 13-14."""
    ck = run / "ckpt"
    _commit(ck, 4, 4.6)
    _commit(ck, 8, 8.6)
    p12 = _commit(ck, 12, 12.65)
    ev = run / "events"
    for rank in (0, 1):
        a0 = _steps(1, 12, 1.0)
        if rank == 0:
            a0 += [("save", "begin", 4.55, {"kind": "periodic", "step": 4}),
                   ("save", "end", 4.6, {"kind": "periodic", "step": 4, "ok": True,
                                         "part": "periodic_step00000004_rank00000.pt"}),
                   ("save", "begin", 8.55, {"kind": "periodic", "step": 8}),
                   ("save", "end", 8.6, {"kind": "periodic", "step": 8, "ok": True,
                                         "part": "periodic_step00000008_rank00000.pt"}),
                   ("save", "begin", 12.6, {"kind": "periodic", "step": 12}),
                   ("fault", "point", 12.7, {"kind": "torn-write", "step": 12})]
        else:
            a0 += [("failure", "point", 12.8, {"trigger": "collective_error", "step": 12})]
        _events(ev, 0, rank, sorted(a0, key=lambda x: x[2]))
        rest = {"step": 12, "kind": "periodic", "source": p12["name"], "skipped": []}
        if listing and rank == 0:
            rest["committed"] = [p12, {**p12, "name": "periodic_step00000008_rank00000.pt",
                                       "step": 8, "t": BASE + 8.6}]
        _events(ev, 1, rank, [("init", "end", 16.0, {}), ("restore", "begin", 16.1, {}),
                              ("restore", "end", 16.2, rest), *_steps(13, 14, 17.0),
                              ("done", "point", 19.0, {"step": 14})])


@pytest.mark.parametrize("listing", [True, False])
def test_commit_after_rename_counts_though_never_logged(tmp_path, listing):
    """The writer died after its manifest's rename: the directory (and the restore's
    listing) says step 12 committed; the writer's log says only 8. Right: 12, replay 0."""
    _torn_after_commit(tmp_path, listing)
    m = metrics.compute(tmp_path, 14, 2)
    (f,) = m.failures
    assert (f.completed_before, f.restored_step) == (12, 12)
    assert f.last_commit_step == 12 and f.expected_replayed_steps == 0
    assert f.replayed_steps == 0 and f.restored_kind == "periodic" and f.injected


def test_pruned_part_is_known_from_the_restore_listing(tmp_path):
    """The part the restore read was pruned later (gone from the final directory):
    the restore's own listing keeps it; a part committed after the restore began
    does not count."""
    _torn_after_commit(tmp_path, listing=True)
    for p in ckpt.list_parts(tmp_path / "ckpt"):
        p.manifest_path.unlink()
        p.path.unlink()
    _commit(tmp_path / "ckpt", 16, 30.0)  # after the restore
    (f,) = metrics.compute(tmp_path, 14, 2).failures
    assert f.last_commit_step == 12 and f.expected_replayed_steps == 0


def test_without_directory_or_listing_the_writer_log_is_the_fallback(tmp_path):
    _torn_after_commit(tmp_path, listing=False)
    for p in ckpt.list_parts(tmp_path / "ckpt"):
        p.manifest_path.unlink()
        p.path.unlink()
    (tmp_path / "ckpt").rmdir()
    (f,) = metrics.compute(tmp_path, 14, 2).failures
    assert f.last_commit_step == 8 and f.expected_replayed_steps == 4


def test_committed_reads_commit_time_else_mtime(tmp_path):
    before = time.time()
    part = ckpt.write_part(tmp_path, "jit", 3, 1, 2, {"w": torch.ones(1)})
    (got,) = ckpt.committed(tmp_path)
    assert got["name"] == part.path.name and (got["step"], got["kind"], got["rank"]) == (3, "jit", 1)
    assert before <= got["t"] <= time.time()
    m = json.loads(part.manifest_path.read_text())
    del m[ckpt.COMMIT_TIME]
    part.manifest_path.write_text(json.dumps(m))
    os.utime(part.manifest_path, (before - 50, before - 50))
    assert ckpt.committed(tmp_path)[0]["t"] == pytest.approx(before - 50)
    part.manifest_path.write_text("{torn")  # committed but unparsable: still listed
    os.utime(part.manifest_path, (before - 60, before - 60))
    assert ckpt.committed(tmp_path)[0]["t"] == pytest.approx(before - 60)
    assert ckpt.committed(tmp_path / "absent") == []


def test_write_part_under_a_regular_file_is_a_write_error(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ckpt.CheckpointWriteError) as got:
        ckpt.write_part(tmp_path / "file" / "ck", "periodic", 4, 0, 2, {"w": torch.zeros(1)})
    assert got.value.errno == errno.ENOTDIR and "Not a directory" in str(got.value)


def _two_failures(run: Path, interrupted: bool) -> None:
    """JIT, 2 ranks. Attempt 0: steps 1-3, rank 1 killed in step 4 (t 4.2); rank 0
    saves step 3. Attempt 1 restores 3; with ``interrupted`` rank 1 is killed again
    in step 4 (t 10.3) before any step completes, else it runs step 4 and is killed
    in step 5 (t 11.3). Attempt 2 restores and finishes step 6."""
    ev = run / "events"
    for rank in (0, 1):
        a0 = _steps(1, 3, 1.0) + [("step", "begin", 4.0, {"step": 4})]
        a0 += ([("fault", "point", 4.2, {"kind": "kill", "step": 4})] if rank == 1 else
               [("failure", "point", 4.5, {"trigger": "collective_error", "step": 4}),
                ("save", "begin", 4.6, {"kind": "jit", "step": 3}),
                ("save", "end", 4.7, {"kind": "jit", "step": 3, "ok": True,
                                      "part": "jit_step00000003_rank00000.pt"})])
        _events(ev, 0, rank, a0)
        a1 = [("init", "end", 8.0, {}), ("restore", "begin", 9.0, {}),
              ("restore", "end", 9.2, {"step": 3, "kind": "jit"})]
        if interrupted:
            a1 += [("step", "begin", 10.0, {"step": 4})]
            a1 += ([("fault", "point", 10.3, {"kind": "kill", "step": 4})] if rank == 1
                   else [("failure", "point", 10.5, {"trigger": "collective_error", "step": 4}),
                         ("save", "begin", 10.6, {"kind": "jit", "step": 3}),
                         ("save", "end", 10.7, {"kind": "jit", "step": 3, "ok": True,
                                                "part": "jit_step00000003_rank00000.pt"})])
            restored = 3
        else:
            a1 += _steps(4, 4, 10.0) + [("step", "begin", 11.0, {"step": 5})]
            a1 += ([("fault", "point", 11.3, {"kind": "kill", "step": 5})] if rank == 1
                   else [("failure", "point", 11.5, {"trigger": "collective_error", "step": 5}),
                         ("save", "begin", 11.6, {"kind": "jit", "step": 4}),
                         ("save", "end", 11.7, {"kind": "jit", "step": 4, "ok": True,
                                                "part": "jit_step00000004_rank00000.pt"})])
            restored = 4
        _events(ev, 1, rank, a1)
        _events(ev, 2, rank, [("init", "end", 14.0, {}), ("restore", "begin", 15.0, {}),
                              ("restore", "end", 15.2, {"step": restored, "kind": "jit"}),
                              *_steps(restored + 1, 6, 16.0), ("done", "point", 30.0,
                                                               {"step": 6})])


def test_recovery_interrupted_by_a_second_failure_still_counts_its_waste(tmp_path):
    """Failure 0's recovery is cut by failure 1 (no new step in between); the job
    then completes, so the waste of both is known: together, world x (the end of
    step 4, the first beyond failure 0's completed steps, - fault 0 + the lost part
    of its step - one step)."""
    _two_failures(tmp_path, interrupted=True)
    m = metrics.compute(tmp_path, 6, 2)
    f0, f1 = m.failures
    assert f0.recovery_s is None and f1.recovery_s == pytest.approx(16.5 - 10.3)
    t_new = 16.5  # attempt 2 runs step 4 (16-16.5): the first that failure 0 had not done
    want = 2 * (t_new - 4.2 + 0.2 - m.step_s)
    assert f0.wasted_gpu_s is not None and f1.wasted_gpu_s is not None
    assert f0.wasted_gpu_s + f1.wasted_gpu_s == pytest.approx(want)
    assert m.wasted_gpu_s == pytest.approx(want + m.checkpoint_stall_gpu_s)
    assert f1.wasted_gpu_s == pytest.approx(2 * (16.5 - 10.3 + 0.3 - m.step_s))


def test_last_commit_step_per_failure_and_the_summary_says_the_last(tmp_path):
    _two_failures(tmp_path, interrupted=False)
    m = metrics.compute(tmp_path, 6, 2)
    assert [f.last_commit_step for f in m.failures] == [3, 4]
    assert all(f.wasted_gpu_s is not None for f in m.failures)
    spec = small_spec(6, strategy="jit")
    s = summarize(spec, tmp_path, LaunchResult(0, 30.0), None)
    assert s["last_commit_step"] == 4 and [f["last_commit_step"] for f in s["failures"]] == [3, 4]
    assert (s["num_failures"], s["injected_failures"], s["own_failures"]) == (2, 2, 0)


def test_the_record_says_how_the_model_was_spread(tmp_path):
    """``parallel`` is a records column (``jitbench model --from-results`` reads the
    replicas per shard from it): ``ddp``, or the ``hsdp:RxS`` layout as parsed."""
    _two_failures(tmp_path, interrupted=False)
    spec = small_spec(6, strategy="jit")
    assert record_row(summarize(spec, tmp_path, LaunchResult(0, 30.0), None))["parallel"] == "ddp"
    hsdp = replace(spec, parallel="HSDP:2x1")
    assert record_row(summarize(hsdp, tmp_path, LaunchResult(0, 30.0), None))["parallel"] \
        == "hsdp:2x1"


# ---------------------------------------------------------------- own failures
ENOSPC_ERR = "writing periodic_step00000008_rank00000.pt failed: No space left on device"


def _full_disk(run: Path, attempts: int) -> None:
    """periodic:4, no fault injected: every attempt's step-8 save fails on rank 0 with
    ENOSPC (steps 5-8 replayed from step 4), rank 1 is told by a notice."""
    ev = run / "events"
    for a in range(attempts):
        t0 = 20.0 * a
        first = 1 if a == 0 else 5
        for rank in (0, 1):
            items = [("init", "end", t0 + 0.5, {}), ("restore", "begin", t0 + 0.6, {}),
                     ("restore", "end", t0 + 0.7, {"step": 0 if a == 0 else 4,
                                                  "kind": None if a == 0 else "periodic"}),
                     *_steps(first, 8, t0 + 1.0)]
            t_fail = t0 + 1.0 + (8 - first) + 0.6
            items.append(("failure", "point", t_fail + 0.1 * rank,
                          {"trigger": "storage_error", "step": 8, "error": ENOSPC_ERR,
                           "errno": 28} if rank == 0 else
                          {"trigger": "notice", "step": 8, "reason": ENOSPC_ERR}))
            items.append(("exit", "point", t_fail + 0.5, {"code": 76}))
            _events(ev, a, rank, items)


def test_a_full_filesystem_is_named_and_each_failed_attempt_counted(tmp_path):
    _full_disk(tmp_path, 2)
    m = metrics.compute(tmp_path, 16, 2)
    assert len(m.failures) == 2 and not m.completed
    for f in m.failures:
        assert not f.injected and f.fault_kind == "storage_error"
        assert (f.fault_rank, f.fault_step) == (0, 8)
        assert f.cause == "rank 0: checkpoint write at step 8 failed: No space left on device"
        assert f.trigger == "notice" and f.fault_ranks == [0]
    spec = small_spec(16, strategy="periodic:4", max_restarts=1)
    log = tmp_path / "agent.log"
    log.write_text("[jitbench] rank 0: failure (storage_error) at step 8: ...\n")
    s = summarize(spec, tmp_path, LaunchResult(1, 40.0, log_path=log), None)
    assert (s["num_failures"], s["own_failures"], s["injected_failures"]) == (2, 2, 0)
    assert s["end_reason"] == ("restart budget exhausted: all 2 attempts failed "
                               "(--max-restarts 1): rank 0: checkpoint write at step 8 "
                               "failed: No space left on device")
    assert [f["injected"] for f in s["failures"]] == [False, False]
    from jitbench.records import verdict

    status, line = verdict(s)
    assert int(status) == 3 and "No space left on device" in line and "rank 0" in line


def test_own_failures_kinds_and_what_starts_none(tmp_path):
    def ev(name, attempt, rank, **kw):
        return {"event": name, "phase": "point", "t_mono": kw.pop("t", 1.0), "t_wall": 1.0,
                "attempt": attempt, "rank": rank, "host": "h", **kw}

    evs = [ev("failure", 0, 1, trigger="exception", step=5, t=1.0,
              error="ValueError: bad batch"),
           ev("failure", 0, 0, trigger="collective_error", step=5, t=0.5),  # a reaction
           ev("error", 1, 0, where="restore", t=2.0, code=77,
              error="CheckpointError: periodic_step00000004_rank00000.pt: tensor shapes"),
           ev("error", 2, 1, where="workload", t=3.0, code=78, error="DataError: unreadable"),
           ev("failure", 3, 0, trigger="collective_error", step=2, t=4.0),  # reactions only
           ev("fault", 4, 1, kind="kill", step=3, t=5.0),
           ev("failure", 4, 0, trigger="exception", step=3, t=5.1, error="x"),
           ev("failure", 5, 0, trigger="hang", step=7, t=6.0, waited_s=3.0, bound_s=2.0,
              phase="compute")]
    own = phases.own_failures(evs)
    assert [(o["attempt"], o["kind"], o["rank"], o["step"]) for o in own] == [
        (0, "exception", 1, 5), (1, "restore_error", 0, 0), (2, "input_error", 1, 0),
        (5, "hang", 0, 7)]
    assert own[0]["cause"] == "rank 1: step 5 failed: ValueError: bad batch"
    assert own[1]["cause"].startswith("rank 0: restoring the checkpoint failed: CheckpointError")
    assert own[2]["cause"] == ("rank 1: building the workload (data, options) failed: "
                               "DataError: unreadable")
    assert "no progress for 3.0 s" in own[3]["cause"]
    starts = phases.failure_starts(evs)
    assert [(s["attempt"], s.get("injected", True)) for s in starts] == [
        (0, False), (1, False), (2, False), (4, True), (5, False)]


def test_a_failed_rendezvous_is_named(tmp_path):
    log = tmp_path / "agent.log"
    log.write_text("INFO something\ntorch.distributed.elastic.rendezvous.api."
                   "RendezvousTimeoutError: The node did not join the rendezvous in time\n")
    assert agent_error(log) == ("rendezvous failed: RendezvousTimeoutError: The node did not "
                                "join the rendezvous in time")
    assert agent_error(tmp_path / "absent") is None
    (tmp_path / "events").mkdir()
    spec = small_spec(6, max_restarts=3)
    m = metrics.compute(tmp_path, 6, 2, events=[])
    why = end_reason(spec, m, LaunchResult(1, 60.0, log_path=log))
    assert why.startswith("the elastic agent exited with status 1 after 0 attempts: "
                          "rendezvous failed: RendezvousTimeoutError")


def test_a_resumed_run_is_not_compared_sample_by_sample():
    def restore(attempt, step, gen=0):
        return {"event": "restore", "phase": "end", "attempt": attempt, "step": step,
                "gen": gen, "rank": 0}

    assert resumed_step([restore(0, 8), restore(1, 12)]) == 8
    assert resumed_step([restore(0, 0), restore(1, 12)]) == 0
    assert resumed_step([]) == 0


def test_a_full_filesystem_met_by_the_runtime_reaches_the_cause(tmp_path, capfd):
    """The real write path of a periodic save, with the I/O hook raising ENOSPC as
    write(2) does on a full filesystem (FillFilesystem's emulation, installed here
    without any fault): the failure event carries the errno, the run's own-failure
    cause names rank, operation, step and OS error, stderr (agent.log) says it, and
    no partial part is visible."""
    from jitbench.runtime.config import RuntimeConfig
    from jitbench.runtime.core import Runtime
    from jitbench.runtime.events import EventLog, read_events

    def full(op, path, done, total):
        if op == "write" and path.name.startswith("periodic_step00000008"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    exits: list[int] = []
    ck = tmp_path / "ckpt"
    rt = Runtime(RuntimeConfig(strategy="periodic", interval=10**9, ckpt_dir=str(ck),
                               hang_first_s=600),
                 EventLog(tmp_path / "events" / "attempt000_rank00000.jsonl", 0, 0),
                 rank=0, world_size=1, exit_fn=exits.append)
    prev = ckpt.set_io_hook(full)
    try:
        model = torch.nn.Linear(2, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        rt.register(model, opt)
        rt.restore()
        for step in range(1, 9):
            with rt.step(step):
                model(torch.ones(1, 2)).sum().backward()
                opt.step()
                opt.zero_grad()
            if step % 4 == 0:
                rt.save_periodic(step)
    finally:
        ckpt.set_io_hook(prev)
        rt.close()
    assert exits == [76] and [p.step for p in ckpt.list_parts(ck)] == [4]
    assert not list(ck.glob("*.tmp")) and not (ck / "periodic_step00000008_rank00000.pt").exists()
    evs = read_events(tmp_path / "events")
    (own,) = phases.own_failures(evs)
    assert own["errno"] == errno.ENOSPC and own["kind"] == "storage_error"
    assert own["cause"] == "rank 0: checkpoint write at step 8 failed: No space left on device"
    assert "No space left on device" in capfd.readouterr().err


def test_decisions_say_each_resume_skip_fallback_and_missing_checkpoint():
    from jitbench.harness.run import decisions, final_checkpoint, resumed_from
    from jitbench.runtime.strategies import REGISTRY

    def restore(attempt, step, **kw):
        return {"event": "restore", "phase": "end", "attempt": attempt, "step": step,
                "gen": 0, "rank": 0, **kw}

    bad = ["periodic_step00000006_rank00000.pt",
           "periodic_step00000006_rank00000.pt: SHA-256 mismatch"]  # as the checker says it
    evs = [restore(0, 3, kind="periodic", source="periodic_step00000003_rank00000.pt",
                   skipped=[bad]), restore(0, 3, rank=1), restore(1, 5)]
    res = resumed_from(evs, "/c")
    assert res == {"step": 3, "kind": "periodic", "part": "periodic_step00000003_rank00000.pt",
                   "ckpt_dir": "/c", "skipped": [bad]}
    assert resumed_from([restore(0, 0)], "/c") is None  # a plain fresh start says nothing
    assert resumed_from([restore(1, 4)], "/c") is None  # no first attempt recorded
    jit, periodic, inproc = REGISTRY["jit"], REGISTRY["periodic"], REGISTRY["jit-inprocess"]
    lost = ("no JIT checkpoint survived the failure at step 12 (rank 0 died while writing "
            "it): restored step 10 (backstop periodic:10)")
    s = {"resumed_from": res, "restore_skipped": [bad], "completed": True,
         "num_failures": 2, "failures": [
             {"fault_step": 12, "fault_rank": 1, "fallback": lost},
             {"fault_step": 14, "fault_rank": 0, "fallback": None}]}
    assert decisions(s, jit) == [
        f"restore skipped {bad[0]}: SHA-256 mismatch",  # the part named once
        "resumed from step 3 (periodic checkpoint periodic_step00000003_rank00000.pt in /c)",
        lost]
    gone = "every member of generation 1 is gone (no replica survived)"
    s = {"completed": True, "num_failures": 1,
         "failures": [{"fault_step": 15, "fault_rank": 2, "fallback": gone}]}
    assert decisions(s, inproc) == [
        f"the failure at step 15 (rank 2): {gone}; restarted from the checkpoints"]
    # what the restart restored, and every rank the failure hit (a new-user trial: "from
    # the checkpoints" when none had been committed)
    both = {"fault_step": 4, "fault_rank": 0, "fault_ranks": [0, 1], "fallback": gone}
    assert decisions({**s, "failures": [{**both, "restored_step": 0}]}, inproc) == [
        f"the failure at step 4 (ranks 0, 1): {gone}; restarted from step 0 (no checkpoint "
        "committed yet)"]
    assert decisions({**s, "failures": [{**both, "restored_step": 10,
                                         "restored_kind": "disk"}]}, inproc) == [
        f"the failure at step 4 (ranks 0, 1): {gone}; restarted from step 10 (disk checkpoint)"]
    assert decisions({**s, "failures": [{"fault_step": 15, "fallback": None}]}, periodic) == []
    plain = {"completed": True, "num_failures": 0, "checkpoint_saves": 0}
    assert decisions(plain, jit) == [
        "no checkpoint was needed: jit writes one only when a peer fails "
        "(--final-checkpoint writes one at the end for a later run)"]
    assert decisions(plain, periodic) == []
    assert decisions({**plain, "checkpoint_saves": 2}, jit) == []  # a backstop wrote some
    save = {"event": "save", "kind": "final", "step": 4, "attempt": 0}
    fin = final_checkpoint([{**save, "phase": "begin"},
                            {**save, "phase": "end", "ok": True, "part": "final_step4.pt"}])
    assert fin == {"step": 4, "part": "final_step4.pt"}
    assert decisions({**plain, "final_checkpoint": fin}, jit) == [
        "final checkpoint: step 4 (final_step4.pt)"]
    skip = final_checkpoint([{**save, "phase": "skip", "reason": "committed"}])
    assert decisions({**plain, "final_checkpoint": skip}, jit) == [
        "final checkpoint of step 4 not written: committed"]
    assert final_checkpoint([{**save, "kind": "periodic", "phase": "end"}]) is None


def test_failed_in_memory_copies_are_counted_and_said():
    from jitbench.harness.run import decisions, failed_copies
    from jitbench.runtime.strategies import REGISTRY

    def copy(t, rank, step, ok, **kw):
        return {"event": "copy", "phase": "end", "t_wall": t, "rank": rank, "step": step,
                "ok": ok, **kw}

    err = "DistNetworkError: Connection reset by peer"
    evs = [copy(1.0, 0, 0, True), copy(2.0, 1, 3, False, error=err),
           copy(3.0, 0, 3, False, error=err), {"event": "copy", "phase": "begin", "t_wall": 4}]
    bad = failed_copies(evs)
    assert bad == {"count": 2, "first": f"rank 1, step 3: {err}"}
    assert failed_copies(evs[:1]) is None
    s = {"completed": True, "num_failures": 0, "checkpoint_saves": 1, "failed_copies": bad}
    assert decisions(s, REGISTRY["inmem"]) == [
        f"2 in-memory copies did not reach their holder (first: rank 1, step 3: {err}); "
        "a failure rolls back to an older copy, or the disk"]


def test_decisions_say_each_interval_periodic_auto_chose():
    from jitbench.harness.run import decisions
    from jitbench.runtime.strategies import REGISTRY

    auto = {"attempt": 0, "step": 3, "interval": 60, "cost_s": 0.0412, "step_s": 0.31,
            "mtbf_s": 1800.0, "young_interval_s": 12.18}
    s = {"steps": 12, "completed": True, "auto_intervals": [auto, {**auto, "attempt": 1,
                                                                   "step": 9, "interval": 2}]}
    assert decisions(s, REGISTRY["periodic"]) == [
        "periodic:auto chose a checkpoint every 60 steps at step 3 (attempt 0): Young's "
        "interval 12.2 s for a checkpoint of 0.0412 s and an MTBF of 1800 s, over 0.31 s "
        "steps; the run ends (step 12) before its next checkpoint",
        "periodic:auto chose a checkpoint every 2 steps at step 9 (attempt 1): Young's "
        "interval 12.2 s for a checkpoint of 0.0412 s and an MTBF of 1800 s, over 0.31 s "
        "steps"]
