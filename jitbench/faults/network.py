"""Network faults: a node's link to the others fails, flaps or degrades.

They act on the node's own network interface, from inside the node's network
namespace, so they only make sense on the namespaced nodes of
:mod:`jitbench.harness.netns` (``ip-netns(8)``), whose launcher sets
:data:`NODE_IFACE_ENV` to the node end of the node's veth. Outside such a
namespace they are refused up front (:meth:`Fault.check_run`: ``jitbench run``
prints one line and exits 2), and again at fire time, so they can never take
down the machine's real interface (:func:`refusal`: the process must be inside
the named namespace of :data:`NODE_NS_ENV` and the interface must exist there).

Each fires in the target rank's process at its step (default: the start of
the step; ``at`` moves it like other faults). The rank's process is root in its
namespace and runs ``ip link set dev IFACE down|up`` (``ip-link(8)``) or ``tc
qdisc add|del dev IFACE root netem ...`` (``tc-netem(8)``). What undoes a
finite fault (the link back up, the qdisc removed) runs in a small detached
helper process (``sh -c 'sleep D; ip link set dev IFACE up'``) in the same
namespace, not in a timer thread of the rank: the rank usually dies during the
fault (its watchdog saves and exits, the agent SIGTERMs or SIGKILLs it, none of
which runs ``atexit`` handlers reliably), while a real link outage lasts as long
as it lasts whatever the processes on the node do. The helper is in the node's
namespace, so removing the nodes (:meth:`Nodes.remove
<jitbench.harness.netns.Nodes.remove>`) ends it too.

``partition``
    A node cut off from the others: a NIC or cable failure, a top-of-rack switch
    going down, a misconfigured firewall. Produced with ``ip link set dev IFACE
    down`` on the node's interface (its route to the other nodes disappears;
    established TCP connections see no reset, their packets are simply not
    delivered), and ``up`` again after ``duration_s`` (default: never). The other
    nodes see their collective hang (gloo and NCCL wait for data that never
    comes) until their watchdog's hang bound; the partitioned node's ranks hang
    too. Here the shared run directory stays reachable from the partitioned node
    (one machine's filesystem); on a real cluster a partitioned node usually
    loses its network filesystem as well.
``link-flap``
    A flapping link (a bad transceiver or cable, an unstable switch port):
    ``cycles`` times down for ``down_s``, then up for ``up_s``. While the link is
    down for less than the hang bound, TCP retransmits and the collective only
    slows; a longer down time is a partition and a hang.
``link-slow``
    A degraded link: congestion, a lossy cable, a far-away node. Produced with
    ``tc qdisc add dev IFACE root netem delay <delay_ms>ms loss <loss_pct>%``
    (``tc-netem(8)``; needs the kernel's ``sch_netem``), removed (``tc qdisc del
    dev IFACE root``) after ``duration_s`` (default: never). No failure while the
    collective's extra time stays below the hang bound; the summary shows the
    slower steps.
"""

from __future__ import annotations

import math
import os
import shlex
import shutil
import socket
import subprocess
from typing import Any

from jitbench.faults.base import Fault, FaultSpec, Param

NODE_IFACE_ENV = "JITBENCH_NODE_IFACE"
"""Environment variable naming this node's own interface (set by the namespaced-node
launcher, :meth:`jitbench.harness.netns.Nodes.env`); network faults act on it only."""
NODE_NS_ENV = "JITBENCH_NODE_NS"
"""Environment variable naming this node's network namespace (informational)."""


class NetworkFaultError(RuntimeError):
    """A network fault could not act (one line)."""


def refusal(name: str) -> str | None:
    """Why the network fault ``name`` may not act in this process, or None.

    It acts only when :data:`NODE_IFACE_ENV` and :data:`NODE_NS_ENV` are set, this
    process is inside that named namespace (``/run/netns/NAME`` is the same
    namespace as ``/proc/self/ns/net``, as ``ip netns identify`` checks), which is
    not PID 1's (where ``/proc/1/ns/net`` can be read), and the interface exists here.
    """
    iface, ns = os.environ.get(NODE_IFACE_ENV), os.environ.get(NODE_NS_ENV)
    if not iface or not ns:
        return (f"{name} acts on a namespaced node's own interface and {NODE_IFACE_ENV}/"
                f"{NODE_NS_ENV} are not set (run the nodes in network namespaces: "
                "jitbench.harness.netns); refusing to touch this machine's interfaces")
    try:
        own = os.stat("/proc/self/ns/net").st_ino
        named = os.stat(f"/run/netns/{ns}").st_ino
    except OSError as exc:
        return f"{name}: cannot check network namespace {ns!r} ({exc.strerror})"
    if own != named:
        return f"{name}: this process is not in network namespace {ns!r} ({NODE_NS_ENV})"
    try:
        if own == os.stat("/proc/1/ns/net").st_ino:
            return f"{name}: {ns!r} is the machine's own network namespace"
    except OSError:
        pass  # not readable without CAP_SYS_PTRACE: the named-namespace check stands
    try:
        socket.if_nametoindex(iface)
    except OSError:
        return f"{name}: interface {iface!r} ({NODE_IFACE_ENV}) does not exist in {ns!r}"
    return None


def _exe(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


def _run(argv: list[str]) -> None:
    res = subprocess.run(argv, capture_output=True, text=True, timeout=15)
    if res.returncode != 0:
        msg = (res.stderr.strip() or f"exit {res.returncode}").splitlines()[0]
        raise NetworkFaultError(f"{shlex.join(argv)}: {msg}")


def link_cmd(iface: str, state: str) -> list[str]:
    """``ip link set dev IFACE up|down`` (``ip-link(8)``)."""
    return [_exe("ip"), "link", "set", "dev", iface, state]


def netem_cmd(iface: str, delay_ms: float, loss_pct: float) -> list[str]:
    """``tc qdisc add dev IFACE root netem delay <ms>ms loss <pct>%`` (``tc-netem(8)``)."""
    return [_exe("tc"), "qdisc", "add", "dev", iface, "root", "netem",
            "delay", f"{delay_ms:g}ms", "loss", f"{loss_pct:g}%"]


def helper(steps: list[tuple[float, list[str]]]) -> subprocess.Popen | None:
    """Start a detached ``sh`` that sleeps and runs each command in turn (``steps``:
    ``(sleep_s, argv)``); it outlives the rank (own session, no parent-death signal)
    and stays in this network namespace. None when there is nothing to do."""
    if not steps:
        return None
    script = "; ".join(f"sleep {s:.3f}; {shlex.join(argv)}" for s, argv in steps)
    return subprocess.Popen(["/bin/sh", "-c", script], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, close_fds=True)


class _NetworkFault(Fault):
    family = "network"
    point = "step"

    @classmethod
    def check_run(cls, spec: FaultSpec, run: Any) -> str | None:
        return refusal(cls.name)

    def iface(self) -> str:
        why = refusal(self.name)
        if why:
            raise NetworkFaultError(why)
        return os.environ[NODE_IFACE_ENV]

    def event_fields(self, ctx: dict[str, Any]) -> dict:
        return {"iface": os.environ.get(NODE_IFACE_ENV), "netns": os.environ.get(NODE_NS_ENV)}


def _forever(p: dict, key: str) -> bool:
    return p[key] is None or math.isinf(p[key])


class PartitionLink(_NetworkFault):
    """Take this node's link down (``ip link set dev IFACE down``), back up after
    ``duration_s`` (default: never)."""

    name = "partition"
    summary = ("namespaced nodes only: the target rank's node loses its link at step k, for "
               "duration_s or for good "
               "(NIC/switch failure; peers hang)")
    params = {"duration_s": Param(float, None, "how long the link stays down (s); default: "
                                  "for good", low=0.0)}

    def fire(self, ctx: dict[str, Any]) -> None:
        iface = self.iface()
        _run(link_cmd(iface, "down"))
        if not _forever(self.p, "duration_s"):
            helper([(self.p["duration_s"], link_cmd(iface, "up"))])


class FlapLink(_NetworkFault):
    """``cycles`` times: link down for ``down_s``, then up for ``up_s``."""

    name = "link-flap"
    summary = ("namespaced nodes only: the target rank's node's link goes down and up "
               "`cycles` times from step k")
    params = {
        "down_s": Param(float, 3.0, "time the link is down in each cycle (s)", low=0.01),
        "up_s": Param(float, 3.0, "time the link is up between two downs (s)", low=0.0),
        "cycles": Param(int, 3, "number of down/up cycles", low=1, high=1000),
    }

    def fire(self, ctx: dict[str, Any]) -> None:
        iface = self.iface()
        _run(link_cmd(iface, "down"))
        steps = [(self.p["down_s"], link_cmd(iface, "up"))]
        for _ in range(self.p["cycles"] - 1):
            steps += [(self.p["up_s"], link_cmd(iface, "down")),
                      (self.p["down_s"], link_cmd(iface, "up"))]
        helper(steps)


class SlowLink(_NetworkFault):
    """Add ``delay_ms`` latency and ``loss_pct`` packet loss on this node's link with
    ``tc netem``, removed after ``duration_s`` (default: never)."""

    name = "link-slow"
    summary = ("namespaced nodes only: the target rank's node's link gets delay_ms latency "
               "and loss_pct loss (tc netem)")
    fails_job = False
    params = {
        "delay_ms": Param(float, 100.0, "added one-way latency of every packet sent (ms)",
                          low=0.0),
        "loss_pct": Param(float, 0.0, "share of packets sent that are dropped (%)",
                          low=0.0, high=100.0),
        "duration_s": Param(float, None, "how long the link stays degraded (s); default: "
                            "for good", low=0.0),
    }

    @classmethod
    def check_params(cls, p: dict) -> None:
        if p["delay_ms"] == 0 and p["loss_pct"] == 0:
            raise ValueError(f"{cls.name}: delay_ms and loss_pct are both 0: nothing to do")

    def fire(self, ctx: dict[str, Any]) -> None:
        iface = self.iface()
        try:
            _run(netem_cmd(iface, self.p["delay_ms"], self.p["loss_pct"]))
        except NetworkFaultError as exc:
            raise NetworkFaultError(f"{exc} (tc netem needs the kernel's sch_netem)") from None
        if not _forever(self.p, "duration_s"):
            helper([(self.p["duration_s"],
                     [_exe("tc"), "qdisc", "del", "dev", iface, "root"])])
