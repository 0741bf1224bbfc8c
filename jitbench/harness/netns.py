"""Several 'nodes' on one machine: Linux network namespaces joined by a bridge.

:class:`Nodes` is a context manager that builds, for ``n`` nodes, the network a
small cluster has (``ip-netns(8)``, ``ip-link(8)``, ``veth(4)``):

- one network namespace per node (``jb<6 hex>-<i>``) with its own loopback up;
- a bridge in the root namespace (``jb<hex>br``), the "switch";
- one veth pair per node: the host end (``jb<hex>h<i>``) enslaved to the bridge,
  the node end (``jb<hex>n<i>``) moved into the namespace, with the address
  ``A.B.C.(i+1)/24`` of a private /24 (``10.x.y.0/24`` or ``172.31.x.0/24``)
  that no interface or route of the machine uses (``ip -4 addr``, ``ip -4 route``).

Each node runs its own ``jitbench run`` (so its own elastic agent) inside its
namespace (:meth:`Nodes.command`: ``ip netns exec NS env ... CMD``), with the
environment variable :data:`~jitbench.faults.network.NODE_IFACE_ENV` naming the
node end of its veth: the network faults (``partition``, ``link-flap``,
``link-slow``) act on that interface only, from inside the namespace. The
c10d rendezvous runs on node 0's address (:meth:`Nodes.rdzv_endpoint`: a port
found free by binding port 0 inside node 0's namespace). The run directory is
shared as a cluster shares a filesystem: the namespaces separate the network
only, not the mounts.

On exit everything is removed, even after an error: every process still in
a namespace is SIGKILLed (``ip netns pids``), the namespaces are deleted (their
veth ends go with them) and the bridge and host ends are deleted.
:meth:`Nodes.leftovers` lists whatever of this instance is still there
(namespaces, links, processes in its namespaces), for tests to assert nothing is.

Needs root (``CAP_SYS_ADMIN`` and ``CAP_NET_ADMIN``) and the ``ip`` command;
otherwise :class:`NetnsError` with one line (the failing command and its
message).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from jitbench.faults.network import NODE_IFACE_ENV, NODE_NS_ENV

__all__ = ["NetnsError", "Nodes", "available"]

IP_TIMEOUT_S = 15.0
"""Bound on one ``ip`` command (s)."""


class NetnsError(RuntimeError):
    """A namespace, link or address could not be made (one line: command and reason)."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    exe = shutil.which("ip") or "/usr/sbin/ip"
    try:
        res = subprocess.run([exe, *args], capture_output=True, text=True, timeout=IP_TIMEOUT_S)
    except FileNotFoundError:
        raise NetnsError("the 'ip' command (iproute2) is not installed") from None
    except subprocess.TimeoutExpired:
        raise NetnsError(f"ip {' '.join(args)}: no answer in {IP_TIMEOUT_S:g} s") from None
    if check and res.returncode != 0:
        msg = (res.stderr.strip() or res.stdout.strip() or f"exit {res.returncode}")
        msg = msg.splitlines()[0]
        if os.geteuid() != 0 or "not permitted" in msg:
            msg += " (network namespaces need root: CAP_SYS_ADMIN and CAP_NET_ADMIN)"
        raise NetnsError(f"ip {' '.join(args)}: {msg}")
    return res


def _used_networks() -> list[ipaddress.IPv4Network]:
    """Every IPv4 network of the machine's addresses and routes (root namespace)."""
    nets = []
    for args in (("-4", "-o", "addr", "show"), ("-4", "route", "show", "table", "all")):
        for line in _ip(*args, check=False).stdout.splitlines():
            for word in line.split():
                if word[:1].isdigit() and ("/" in word or word.count(".") == 3):
                    with contextlib.suppress(ValueError):
                        nets.append(ipaddress.ip_network(word, strict=False))
    return nets


def pick_subnet(rng: random.Random | None = None, tries: int = 200) -> ipaddress.IPv4Network:
    """A private /24 (``10.x.y.0/24`` or ``172.31.x.0/24``) that overlaps no address or
    route of the machine.

    Raises:
        NetnsError: none found in ``tries`` random picks.
    """
    rng = rng or random.Random()
    used = _used_networks()
    for _ in range(tries):
        if rng.random() < 0.8:
            net = ipaddress.ip_network(f"10.{rng.randrange(1, 255)}.{rng.randrange(0, 256)}.0/24")
        else:
            net = ipaddress.ip_network(f"172.31.{rng.randrange(0, 256)}.0/24")
        if not any(net.overlaps(u) for u in used if u.prefixlen > 0):
            return net
    raise NetnsError(f"no free private /24 found in {tries} tries")


class Nodes:
    """``n`` namespaced nodes on a bridge (see the module docstring).

    Args:
        n: number of nodes (1 to 250).
        tag: the name prefix, ``jb`` and 6 hex digits (default: random); every
            namespace and link of this instance starts with it.

    Attributes:
        namespaces: the namespace of each node.
        ifaces: the node end of each node's veth (inside its namespace).
        addrs: each node's IPv4 address.
        bridge: the bridge in the root namespace.
    """

    def __init__(self, n: int = 2, tag: str | None = None) -> None:
        if not 1 <= n <= 250:
            raise ValueError(f"nodes must be in 1..250, got {n}")
        self.n = n
        self.tag = tag or f"jb{random.getrandbits(24):06x}"
        self.namespaces = [f"{self.tag}-{i}" for i in range(n)]
        self.ifaces = [f"{self.tag}n{i}" for i in range(n)]
        self.host_ends = [f"{self.tag}h{i}" for i in range(n)]
        self.bridge = f"{self.tag}br"
        self.subnet: ipaddress.IPv4Network | None = None
        self.addrs: list[str] = []
        self._inodes: set[int] = set()

    # ------------------------------------------------------------ set up
    def __enter__(self) -> Nodes:
        try:
            self.create()
        except BaseException:
            self.remove()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def create(self) -> None:
        """Make the namespaces, bridge, veths and addresses (the context manager calls it).

        Raises:
            NetnsError: one line naming the ``ip`` command that failed.
        """
        self.subnet = pick_subnet()
        hosts = list(self.subnet.hosts())
        self.addrs = [str(hosts[i]) for i in range(self.n)]
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("link", "set", self.bridge, "up")
        for ns, iface, host, addr in zip(self.namespaces, self.ifaces, self.host_ends,
                                         self.addrs, strict=True):
            _ip("netns", "add", ns)
            with contextlib.suppress(OSError):
                self._inodes.add(os.stat(f"/var/run/netns/{ns}").st_ino)
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("link", "add", host, "type", "veth", "peer", "name", iface)
            _ip("link", "set", iface, "netns", ns)
            _ip("link", "set", host, "master", self.bridge)
            _ip("link", "set", host, "up")
            _ip("-n", ns, "addr", "add", f"{addr}/{self.subnet.prefixlen}", "dev", iface)
            _ip("-n", ns, "link", "set", iface, "up")

    # ------------------------------------------------------------ use
    def env(self, i: int) -> dict[str, str]:
        """The variables node ``i``'s processes get: its interface and namespace (for the
        network faults), and the interface gloo and NCCL must use
        (``GLOO_SOCKET_IFNAME``, ``NCCL_SOCKET_IFNAME``: without them gloo takes the
        address the hostname resolves to, or loopback, which the other nodes cannot
        reach)."""
        return {NODE_IFACE_ENV: self.ifaces[i], NODE_NS_ENV: self.namespaces[i],
                "GLOO_SOCKET_IFNAME": self.ifaces[i], "NCCL_SOCKET_IFNAME": self.ifaces[i]}

    def command(self, i: int, argv: list[str], env: dict[str, str] | None = None) -> list[str]:
        """``argv`` run inside node ``i``'s namespace with :meth:`env` (and ``env``) set:
        ``ip netns exec NS env K=V ... ARGV``."""
        pairs = [f"{k}={v}" for k, v in {**self.env(i), **(env or {})}.items()]
        return [shutil.which("ip") or "/usr/sbin/ip", "netns", "exec", self.namespaces[i],
                "env", *pairs, *argv]

    def free_port(self, i: int = 0) -> int:
        """A TCP port free on node ``i``'s address (bound as port 0 inside its namespace)."""
        code = ("import socket; s = socket.socket(); "
                f"s.bind(({self.addrs[i]!r}, 0)); print(s.getsockname()[1])")
        res = subprocess.run(self.command(i, [sys.executable, "-c", code]), capture_output=True,
                             text=True, timeout=30)
        if res.returncode != 0:
            raise NetnsError(f"no free port on node {i}: {res.stderr.strip()[-200:]}")
        return int(res.stdout.strip())

    def rdzv_endpoint(self) -> str:
        """``HOST:PORT`` of the c10d rendezvous: node 0's address and a free port there."""
        return f"{self.addrs[0]}:{self.free_port(0)}"

    def link_state(self, i: int) -> str:
        """``UP``, ``DOWN`` (or ``UNKNOWN``) of node ``i``'s interface (``operstate``)."""
        res = _ip("-n", self.namespaces[i], "-o", "link", "show", "dev", self.ifaces[i])
        words = res.stdout.split()
        return words[words.index("state") + 1] if "state" in words else "UNKNOWN"

    def pids(self) -> list[int]:
        """Processes whose network namespace is one of this instance's (``/proc/*/ns/net``)."""
        out = []
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            try:
                if os.stat(d / "ns" / "net").st_ino in self._inodes:
                    stat = (d / "stat").read_text()
                    if stat.rsplit(")", 1)[-1].split()[0] != "Z":
                        out.append(int(d.name))
            except (OSError, IndexError):
                continue
        return out

    # ------------------------------------------------------------ tear down
    def remove(self, grace_s: float = 3.0) -> None:
        """SIGTERM, then SIGKILL, every process in the namespaces; delete the namespaces,
        the host ends and the bridge. Never raises; safe to call twice."""
        pids = self.pids()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for p in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(p, sig)
            deadline = time.monotonic() + (grace_s if sig == signal.SIGTERM else 5.0)
            while time.monotonic() < deadline and (pids := self.pids()):
                time.sleep(0.1)
            if not pids:
                break
        for ns in self.namespaces:
            with contextlib.suppress(NetnsError):
                _ip("netns", "del", ns, check=False)
        for link in [*self.host_ends, self.bridge]:
            with contextlib.suppress(NetnsError):
                _ip("link", "del", link, check=False)

    def leftovers(self) -> list[str]:
        """What of this instance still exists: ``netns NAME``, ``link NAME``, ``pid N``
        (empty after :meth:`remove`)."""
        out = []
        with contextlib.suppress(NetnsError):
            names = {line.split()[0] for line in _ip("netns", "list", check=False)
                     .stdout.splitlines() if line.strip()}
            out += [f"netns {ns}" for ns in self.namespaces if ns in names]
        with contextlib.suppress(NetnsError):
            for line in _ip("-o", "link", "show", check=False).stdout.splitlines():
                parts = line.split(":", 2)
                name = parts[1].strip().split("@")[0] if len(parts) > 1 else ""
                if name.startswith(self.tag):
                    out.append(f"link {name}")
        out += [f"pid {p}" for p in self.pids()]
        return out


def available() -> str | None:
    """None when namespaced nodes can be made here, else the reason (one line): tries
    ``ip netns add`` of a throw-away namespace and deletes it."""
    probe = f"jb{random.getrandbits(24):06x}-probe"
    try:
        _ip("netns", "add", probe)
    except NetnsError as exc:
        return str(exc)
    with contextlib.suppress(NetnsError):
        _ip("netns", "del", probe, check=False)
    return None
