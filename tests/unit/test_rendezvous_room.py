"""An agent beyond MAX is refused before it joins (issue 14 §4): the rendezvous state
torch's c10d backend keeps in a real TCPStore, read by ``jitbench.harness.rendezvous``."""

from __future__ import annotations

import pickle
import socket
from datetime import UTC, datetime, timedelta

import pytest
import torch.distributed as dist
from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import _NodeDesc, _RendezvousState

from jitbench.errors import SpecError
from jitbench.harness import rendezvous

pytestmark = pytest.mark.timeout(60)
RUN_ID = "jitbench-run"


@pytest.fixture
def store():
    s = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                      timeout=timedelta(seconds=10))
    yield s
    del s


def _state(participants=(), wait=(), redundant=(), age_s=None):
    """A rendezvous state of nodes host0.., their heartbeats ``age_s[i]`` s old (default 1)."""
    st = _RendezvousState()
    now = datetime.now(UTC)
    nodes = [_NodeDesc(f"host{i}", 100 + i, 0) for i in range(len(participants) + len(wait)
                                                              + len(redundant))]
    it = iter(nodes)
    st.participants = {next(it): r for r in participants}
    st.wait_list = {next(it) for _ in wait}
    st.redundancy_list = {next(it) for _ in redundant}
    ages = age_s or [1.0] * len(nodes)
    st.last_heartbeats = {n: now - timedelta(seconds=a) for n, a in zip(nodes, ages, strict=True)}
    st.complete = True
    return st


def _publish(store, st) -> str:
    C10dRendezvousBackend(store, RUN_ID).set_state(pickle.dumps(st))
    return f"127.0.0.1:{store.port}"


def test_a_full_round_refuses_the_next_agent_with_one_line(store):
    endpoint = _publish(store, _state(participants=[0, 1, 2]))
    with pytest.raises(SpecError) as exc:
        rendezvous.check_room(endpoint, RUN_ID, 3, "2:3")
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith("--nnodes 2:3: the rendezvous at 127.0.0.1:")
    assert "already has 3 nodes of at most 3 (host0_100_0, host1_101_0, host2_102_0)" in msg
    assert msg.endswith("not started (a node whose agent ended counts for 15 s after its last "
                        "heartbeat: a replacement may retry after that)")


@pytest.mark.parametrize("kw, max_nodes, refused", [
    ({"participants": [0, 1]}, 3, False),                     # room for a third
    ({"participants": [0, 1], "wait": [None]}, 3, True),      # the third is waiting already
    ({"participants": [0, 1], "redundant": [None]}, 2, True),  # torch's redundancy list
    ({"participants": [0, 1, 2], "age_s": [1, 1, 40]}, 3, False),  # a dead node's place
    ({"participants": [0, 1, 2], "age_s": [1, 1, 14]}, 3, True),   # inside the keep-alive
])
def test_places_count_participants_and_both_lists_with_a_live_heartbeat(store, kw, max_nodes,
                                                                        refused):
    endpoint = _publish(store, _state(**kw))
    if refused:
        with pytest.raises(SpecError, match=f"of at most {max_nodes}"):
            rendezvous.check_room(endpoint, RUN_ID, max_nodes, str(max_nodes))
    else:
        rendezvous.check_room(endpoint, RUN_ID, max_nodes, str(max_nodes))


def test_no_store_no_state_or_another_job_means_room(store):
    with socket.socket() as sock:  # a port nobody listens on: the first agent of a job
        sock.bind(("127.0.0.1", 0))
        free = sock.getsockname()[1]
    rendezvous.check_room(f"127.0.0.1:{free}", RUN_ID, 1, "1", connect_s=0.5)
    endpoint = f"127.0.0.1:{store.port}"
    rendezvous.check_room(endpoint, RUN_ID, 1, "1")           # no key yet
    C10dRendezvousBackend(store, RUN_ID)                       # the backend's sentinel
    rendezvous.check_room(endpoint, RUN_ID, 1, "1")
    C10dRendezvousBackend(store, "other").set_state(pickle.dumps(_state(participants=[0])))
    rendezvous.check_room(endpoint, RUN_ID, 1, "1")           # another job's full round


def test_a_value_that_is_not_a_rendezvous_state_is_never_unpickled(capsys):
    class Boom:
        def __reduce__(self):
            return (print, ("unpickled!",))

    import base64

    raw = base64.b64encode(pickle.dumps(Boom()))
    assert rendezvous.nodes_holding_places(raw) is None
    assert "unpickled!" not in capsys.readouterr().out  # refused by find_class, not run
    assert rendezvous.nodes_holding_places(b"Y2FuaW1hZGFt") is None
    assert rendezvous.nodes_holding_places(b"not base64 !!") is None


def test_the_check_reads_the_id_the_agent_uses_for_dot_and_links(tmp_path, monkeypatch):
    """The agent runs on the resolved run directory: the id of ``--run-dir .`` or of a link
    is the directory's own name, as torchrun gets it (``torchrun_args``)."""
    from pathlib import Path

    from jitbench.harness.launch import rdzv_run_id, torchrun_args

    real = tmp_path / "run-123"
    real.mkdir()
    (tmp_path / "latest").symlink_to(real)
    monkeypatch.chdir(real)
    for given in (Path("."), tmp_path / "latest", real):
        assert rdzv_run_id("jitbench", given) == "jitbench-run-123"
        args = torchrun_args(1, 2, 3, given.resolve(), "10.0.0.1:29400")
        assert args[args.index("--rdzv-id") + 1] == "jitbench-run-123"


def test_run_and_launch_specs_are_checked_before_anything_is_written(store, tmp_path):
    """``jitbench run`` (RunSpec) and ``jitbench launch`` (ScriptSpec) call
    ``check_agent_room`` before ``prepare_dir``: it refuses both, and a one-node spec is
    never checked."""
    from jitbench.harness.launch import check_agent_room
    from jitbench.harness.script import ScriptSpec
    from jitbench.harness.spec import RunSpec

    run_dir = tmp_path / "run"
    C10dRendezvousBackend(store, f"jitbench-{run_dir.name}").set_state(
        pickle.dumps(_state(participants=[0, 1])))
    endpoint = f"127.0.0.1:{store.port}"
    for spec in (RunSpec(nnodes=2, rdzv_endpoint=endpoint),
                 ScriptSpec(script="train.py", nnodes=2, min_nodes=1,
                            rdzv_endpoint=endpoint)):
        with pytest.raises(SpecError, match="already has 2 nodes of at most 2"):
            check_agent_room(spec, run_dir)
    check_agent_room(RunSpec(nnodes=3, min_nodes=2, rdzv_endpoint=endpoint), run_dir)
    check_agent_room(RunSpec(), run_dir)
    assert not run_dir.exists()
