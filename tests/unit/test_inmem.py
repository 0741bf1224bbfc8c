"""``inmem:N[:disk=M]``: the spec's forms and refusals, the options the runtime gets,
and the replay promise the summary checks (no processes started)."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest

from jitbench.errors import SpecError
from jitbench.harness.run import replay_ok
from jitbench.harness.spec import RunSpec, Strategy
from jitbench.runtime import strategies
from jitbench.runtime.config import RuntimeConfig
from jitbench.runtime.strategies.inmem import InMemory

DISK_DEFAULT = strategies.REGISTRY["inmem"].default_options()["disk"]


@pytest.mark.parametrize("text, interval, options, canonical", [
    ("inmem:2", 2, {"disk": DISK_DEFAULT}, "inmem:2"),
    ("inmem:1", 1, {"disk": DISK_DEFAULT}, "inmem:1"),
    ("INMEM:3:disk=4", 3, {"disk": 4}, "inmem:3:disk=4"),
    (f"inmem:3:disk={DISK_DEFAULT}", 3, {"disk": DISK_DEFAULT}, "inmem:3"),  # the default
])
def test_inmem_forms(text, interval, options, canonical):
    c = strategies.parse(text)
    assert (c.name, c.interval, c.all_options()) == ("inmem", interval, options)
    assert str(c) == canonical and strategies.parse(str(c)) == c
    st = Strategy.parse(text)  # the harness's form keeps the options
    assert st.all_options() == options and str(st) == canonical


@pytest.mark.parametrize("text, needle", [
    ("inmem", "strategy 'inmem': inmem needs an interval (inmem:N, N >= 1)"),
    ("inmem:0", "strategy 'inmem:0': the interval N must be an integer >= 1"),
    ("inmem:x", "strategy 'inmem:x': not a form of inmem; use"),
    ("inmem:-1", "strategy 'inmem:-1': not a form of inmem; use"),
    ("inmem:auto", "only periodic:auto chooses its interval; use inmem:N (N >= 1)"),
    ("inmem:2:disk=0", "disk must be an integer >= 1, got '0'"),
    ("inmem:2:disk=x", "disk must be an integer >= 1, got 'x'"),
    ("inmem:2:disk=", "disk must be an integer >= 1, got ''"),
    ("inmem:2:disk=2:disk=3", "option disk given twice"),
    ("inmem:2:copies=2", "inmem takes disk=N, not 'copies'"),
    ("periodic:5:disk=2", "periodic takes no options, not 'disk'"),
])
def test_inmem_refusals_are_one_line(text, needle):
    with pytest.raises(SpecError) as exc:
        strategies.parse(text)
    msg = str(exc.value)
    assert needle in msg and "\n" not in msg


def test_usage_names_the_form_and_the_registry_entry_is_an_in_process_one():
    assert "inmem:N[:disk=D]" in strategies.usage()
    e = strategies.REGISTRY["inmem"]
    assert (e.replay_bound, e.launcher, e.writes, e.bitwise) == ("interval", "replicas",
                                                                 "rank0", True)
    assert e.promise and "since the last in-memory copy" in e.promise


def test_the_runtime_gets_interval_and_options_and_refuses_bad_ones(tmp_path):
    spec = RunSpec(strategy="inmem:2:disk=3", faults=[])
    spec.validate()
    cfg = spec.runtime_config(str(tmp_path))
    assert (cfg.strategy, cfg.interval, cfg.options) == ("inmem", 2, {"disk": 3})
    assert InMemory(cfg).disk_every == 3
    assert spec.hot_spares == 1  # a replicas launcher: one hot spare by default
    with pytest.raises(ValueError, match=r"interval >= 1 \(inmem:N\)"):
        InMemory(RuntimeConfig(strategy="inmem", interval=0))
    with pytest.raises(ValueError, match="disk >= 1"):
        InMemory(RuntimeConfig(strategy="inmem", interval=2, options={"disk": 0}))


def _failure(replayed, expected, kind):
    return SimpleNamespace(replayed_steps=replayed, expected_replayed_steps=expected,
                           restored_kind=kind)


def test_replay_ok_states_the_promise():
    # from memory: exactly the steps since the last copy, and never more than N
    assert replay_ok("inmem:2", [_failure(1, 1, "memory")]) is True
    assert replay_ok("inmem:2", [_failure(1, 0, "memory")]) is False
    assert replay_ok("inmem:2", [_failure(3, 3, "memory")]) is False
    # from disk (no copy survived): the steps since the last disk checkpoint
    assert replay_ok("inmem:2", [_failure(5, 5, "disk")]) is True
    assert replay_ok("inmem:2", [_failure(None, 5, None)]) is None


def test_cli_refuses_a_bad_inmem_spec_in_one_line(tmp_path):
    for text in ("inmem:0", "inmem:x", "inmem:2:disk=0"):
        p = subprocess.run([sys.executable, "-m", "jitbench.cli", "run", "--strategy", text,
                            "--run-dir", str(tmp_path / "r")], capture_output=True,
                           text=True, timeout=120, cwd=tmp_path)
        assert p.returncode == 2, p.stderr
        assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr
        assert repr(text) in p.stderr
        assert not (tmp_path / "r").exists()


def _ev(event, phase, t, rank, pid, **kw):
    return {"event": event, "phase": phase, "t_mono": t, "rank": rank, "pid": pid,
            "attempt": 0, "gen": 0, **kw}


def test_expected_replay_counts_from_the_newest_copy_a_survivor_held_at_detection():
    from jitbench.harness.metrics import memory_copy_step

    evs = [
        _ev("restore", "end", 0.0, 0, 10, step=0), _ev("restore", "end", 0.0, 1, 11, step=0),
        _ev("stage", "end", 1.0, 0, 10, kind="inmem", step=2),
        _ev("stage", "end", 1.0, 1, 11, kind="inmem", step=2),
        _ev("stage", "end", 2.0, 1, 11, kind="inmem", step=4),  # the failed rank's own
        _ev("fault", "point", 2.5, 1, 11, step=5),
        _ev("stage", "end", 2.6, 0, 10, kind="async", step=4),  # another kind: not a copy
        _ev("failure", "point", 3.0, 0, 10, trigger="collective_error"),
        _ev("stage", "end", 3.5, 0, 10, kind="inmem", step=6),  # after detection
    ]
    assert memory_copy_step(evs, evs, [1], 2.5, 0, "t_mono") == 2
    # a survivor that finished the failed rank's step and copied it before it noticed
    evs.insert(6, _ev("stage", "end", 2.8, 0, 10, kind="inmem", step=4))
    assert memory_copy_step(evs, evs, [1], 2.5, 0, "t_mono") == 4
    # a SIGTERMed rank logs its own failure at once; the survivor that completed the
    # step and copied it (a multiple of N) before it noticed still holds that copy
    # (stress chunk 11, campaign 110: term at step 6 under inmem:3 was held to step 3)
    evs.insert(6, _ev("failure", "point", 2.55, 1, 11, trigger="signal"))
    assert memory_copy_step(evs, evs, [1], 2.5, 0, "t_mono") == 4
    assert memory_copy_step([], [], [1], 2.5, 0, "t_mono") is None


@pytest.mark.timeout(120)
def test_a_copy_larger_than_the_stores_payload_limit_reaches_its_holder(tmp_path):
    """torch's libuv TCPStore server refuses one value over 8 MiB and resets the
    connection; the default GPT's copy (model + Adam moments) is larger, so every
    peer copy after step 0 failed (a new-user trial). The courier sends pieces of at
    most PIECE_BYTES; the holder reads the copy back whole, and the older copy's
    pieces are dropped when a newer one arrives."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    from jitbench.runtime.events import EventLog, read_events
    from jitbench.runtime.strategies import inmem

    t = timedelta(seconds=30)
    members = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=t)
    memory = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=t)
    members.set("inmem/g0/mem/1", f"127.0.0.1:{memory.port}")
    events = EventLog(tmp_path / "ev" / "attempt000_rank00000.jsonl", 0, 0)
    rt = SimpleNamespace(events=events, rank=0, world_size=2)
    group = SimpleNamespace(gen=0, client=lambda: dist.TCPStore(
        "127.0.0.1", members.port, is_master=False, wait_for_workers=False, timeout=t))
    courier = inmem._Courier(rt, group, "127.0.0.1:1")
    holder = SimpleNamespace(server=memory)
    big = torch.arange(3 * inmem.PIECE_BYTES // 4 + 5, dtype=torch.float32)  # 3 pieces
    for step in (3, 6):
        courier.send({"state": {"w": big + step}, "meta": {}, "step": step}, disk=False)
        courier.wait(60)
        got = InMemory._held_copy(holder, 0, step)
        assert got is not None and torch.equal(got["state"]["w"], big + step)
    assert InMemory._held_copy(holder, 0, 3) is None  # latest is 6
    assert not memory.check(["copy/0/3/0"]) and not memory.check(["copy/0/3/n"])
    assert int(memory.get("copy/0/6/n")) == 4  # 12 MiB of floats + the pickle: 4 pieces
    events.close()
    ends = [e for e in read_events(tmp_path / "ev") if e["event"] == "copy"
            and e["phase"] == "end"]
    assert [e["ok"] for e in ends] == [True, True] and ends[0]["bytes"] > 8 << 20
