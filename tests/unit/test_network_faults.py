"""Network faults (partition, link-flap, link-slow): parameters, commands, and the
up-front refusal outside a namespaced node (no namespace needed here)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from jitbench.faults import FAULTS, FaultSpec, make_fault
from jitbench.faults import network as net
from jitbench.faults.schedule import ScheduleError, check_plan
from jitbench.harness.launch import hosts_endpoint, local_addr, torchrun_args


@pytest.fixture
def outside(monkeypatch):
    monkeypatch.delenv(net.NODE_IFACE_ENV, raising=False)
    monkeypatch.delenv(net.NODE_NS_ENV, raising=False)


def test_registered_in_the_network_family():
    for kind in ("partition", "link-flap", "link-slow"):
        assert FAULTS[kind].family == "network" and FAULTS[kind].point == "step"
    assert FAULTS["link-slow"].fails_job is False and FAULTS["partition"].fails_job


@pytest.mark.parametrize("kind, params, needle", [
    ("partition", {"duration_s": -1}, "duration_s must be >= 0"),
    ("partition", {"duration_s": "5"}, "duration_s must be float"),
    ("partition", {"for": 3}, "unknown parameter 'for'"),
    ("link-flap", {"cycles": 0}, "cycles must be >= 1"),
    ("link-flap", {"down_s": 0}, "down_s must be >= 0.01"),
    ("link-flap", {"up_s": -0.5}, "up_s must be >= 0"),
    ("link-slow", {"loss_pct": 101}, "loss_pct must be <= 100"),
    ("link-slow", {"delay_ms": -3}, "delay_ms must be >= 0"),
    ("link-slow", {"delay_ms": 0, "loss_pct": 0}, "nothing to do"),
])
def test_bad_parameters_are_one_line(kind, params, needle):
    with pytest.raises(ValueError, match=needle) as info:
        make_fault(FaultSpec(kind, params=params))
    assert "\n" not in str(info.value)


def test_defaults():
    assert make_fault(FaultSpec("partition")).p["duration_s"] is None  # for good
    assert make_fault(FaultSpec("link-flap")).p == {"down_s": 3.0, "up_s": 3.0, "cycles": 3,
                                                    "at": None}
    slow = make_fault(FaultSpec("link-slow", params={"delay_ms": 50, "loss_pct": 2.5}))
    assert net.netem_cmd("jbx", slow.p["delay_ms"], slow.p["loss_pct"])[1:] == [
        "qdisc", "add", "dev", "jbx", "root", "netem", "delay", "50ms", "loss", "2.5%"]
    assert net.link_cmd("jbx", "down")[1:] == ["link", "set", "dev", "jbx", "down"]


def test_refused_outside_a_namespace(outside):
    why = net.refusal("partition")
    assert why and net.NODE_IFACE_ENV in why and "refusing" in why
    with pytest.raises(ScheduleError, match="refusing to touch"):
        check_plan([FaultSpec("partition", 1, 2)], 2, 5, run=object())


def test_refused_with_a_namespace_that_is_not_this_one(monkeypatch):
    monkeypatch.setenv(net.NODE_IFACE_ENV, "lo")
    monkeypatch.setenv(net.NODE_NS_ENV, "jb-no-such-namespace")
    assert "cannot check network namespace" in net.refusal("link-flap")


def test_fire_outside_a_namespace_runs_nothing(outside, monkeypatch):
    ran = []
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: ran.append(a))
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: ran.append(a))
    for kind in ("partition", "link-flap", "link-slow"):
        with pytest.raises(net.NetworkFaultError, match="refusing"):
            make_fault(FaultSpec(kind, params={"duration_s": 1} if kind != "link-flap"
                                 else {})).fire({})
    assert ran == []


def test_cli_refuses_in_one_line_with_status_2(outside, tmp_path):
    p = subprocess.run([sys.executable, "-m", "jitbench.cli", "run", "--fault", "partition",
                        "--fault-param", "duration_s=3", "--steps", "6", "--size", "tiny",
                        "--run-dir", str(tmp_path / "run")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "refusing to touch" in lines[0]
    assert not (tmp_path / "run" / "events").exists()


def test_store_host_is_the_node_that_owns_the_address():
    assert not hosts_endpoint("127.0.0.1:29500")  # loopback: torch decides
    assert not hosts_endpoint("localhost:29500")
    assert not hosts_endpoint("203.0.113.77:29500")  # TEST-NET-3, never an address here


def test_local_addr_only_for_ip_endpoints():
    assert local_addr("127.0.0.1:29500") is None and local_addr("node0:29500") is None
    got = local_addr("203.0.113.77:29500")  # the source address toward it, if routed
    assert got is None or not got.startswith("127.")
    args = torchrun_args(1, 2, 3, __import__("pathlib").Path("/tmp/r"), "127.0.0.1:29500")
    assert "--rdzv-conf" not in args and "--local-addr" not in args  # loopback: as before


def test_rdzv_timeout_goes_to_torchrun_and_is_checked(tmp_path):
    from jitbench.errors import SpecError
    from jitbench.harness.spec import RunSpec

    args = torchrun_args(1, 2, 3, tmp_path, "127.0.0.1:29500", rdzv_timeout_s=20)
    assert args[args.index("--rdzv-conf") + 1] == "join_timeout=20"
    spec = RunSpec(nnodes=2, nproc=1, rdzv_endpoint="127.0.0.1:29500", rdzv_timeout_s=0)
    with pytest.raises(SpecError, match="--rdzv-timeout-s must be > 0"):
        spec.validate()
    spec.rdzv_timeout_s = 30.0
    spec.validate()
    assert spec.training_key() == RunSpec(nnodes=2, nproc=1).training_key()


def test_cli_refuses_a_bad_rdzv_timeout(tmp_path):
    p = subprocess.run([sys.executable, "-m", "jitbench.cli", "run", "--nnodes", "2",
                        "--rdzv-endpoint", "127.0.0.1:29500", "--rdzv-timeout-s", "-1",
                        "--run-dir", str(tmp_path / "run")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "--rdzv-timeout-s must be > 0" in p.stderr


def test_netns_unavailable_is_one_line(monkeypatch):
    from jitbench.harness import netns

    def denied(args, **kw):
        return subprocess.CompletedProcess(args, 1, "", "mount --make-shared /run/netns "
                                           "failed: Operation not permitted\n")

    monkeypatch.setattr(netns.subprocess, "run", denied)
    why = netns.available()
    assert why.startswith("ip netns add jb") and "\n" not in why
    assert "need root" in why
    with pytest.raises(netns.NetnsError, match="^ip link add jb.*br type bridge: mount"):
        with netns.Nodes(2):
            pass
