# SPDX-License-Identifier: GPL-2.0-only
"""Where the two ends of a transfer live: two network namespaces joined by a
veth pair (default), or the host's loopback.

A Topology is a context manager and the one owner of what it creates: on
every exit path (success, error, Ctrl-C) it kills what still runs in its
namespaces and deletes them, which deletes the veth pair with them.
"""

import ipaddress
import json
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from qprof import interrupts, remains
from qprof.collectors import netns
from qprof.errors import TopologyFailed

# Private (RFC 1918) pool the /30 is taken from; any /30 overlapping an
# address or route the host already has is skipped.
ADDRESS_POOL = ipaddress.ip_network("10.218.0.0/16")
NETNS_PREFIX = "qp-"
LINK_PREFIX = "qp"


@dataclass
class Endpoint:
    """One side of the transfer: where it runs and its address."""

    netns: Optional[str]
    addr: str
    ifname: str

    def command(self, argv: List[str]) -> List[str]:
        """argv wrapped so it runs inside this endpoint's namespace."""
        if self.netns is None:
            return list(argv)
        return ["ip", "netns", "exec", self.netns] + list(argv)

    def controlled(self, argv: List[str]) -> List[str]:
        """argv wrapped for a ControlledProcess there (here: command's)."""
        return self.command(argv)

    def run(self, argv: List[str]) -> subprocess.CompletedProcess:
        """A short command run there to its end, its output as text."""
        if self.netns is not None:
            return netns.run(self.netns, argv)
        return subprocess.run(self.command(argv), capture_output=True, text=True)

    def read_texts(self, paths: List[str]) -> Dict[str, Optional[str]]:
        """Each /proc path as a process at this endpoint reads it (None:
        not read), without a process per file (collectors/netns.py)."""
        if self.netns is not None:
            return netns.read(self.netns, paths)
        out: Dict[str, Optional[str]] = {}
        for p in paths:
            try:
                out[p] = Path(p).read_text()
            except OSError:
                out[p] = None
        return out


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def host_networks() -> List[ipaddress.IPv4Network]:
    """IPv4 networks the host already uses (addresses and routes), from one
    `ip -batch` (three JSON arrays, one a line)."""
    r = subprocess.run(
        ["ip", "-j", "-4", "-batch", "-"],
        input="addr show\nroute show table main\nroute show table local\n",
        capture_output=True,
        text=True,
    )
    lists = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    addrs, routes = (lists[0], [x for rs in lists[1:] for x in rs]) if lists else ([], [])
    nets = []
    for link in addrs:
        for a in link.get("addr_info", []):
            nets.append(ipaddress.ip_network(f"{a['local']}/{a['prefixlen']}", strict=False))
    for rt in routes:
        dst = rt.get("dst", "")
        if dst and dst != "default":
            nets.append(ipaddress.ip_network(dst if "/" in dst else f"{dst}/32", strict=False))
    return nets


def choose_subnet(used: List[ipaddress.IPv4Network], pool=ADDRESS_POOL) -> ipaddress.IPv4Network:
    """The first /30 of the pool that overlaps nothing in `used`."""
    for net in pool.subnets(new_prefix=30):
        if not any(net.overlaps(u) for u in used):
            return net
    raise TopologyFailed(
        f"every /30 in {pool} collides with an address or route on this host; free one or change ADDRESS_POOL."
    )


def tcp_ecn(ep: Endpoint) -> Optional[int]:
    """The namespace's net.ipv4.tcp_ecn: 1 asks for ECN and takes it, 2 (the
    kernel's default) only takes it, 0 neither."""
    text = ep.read_texts([TCP_ECN])[TCP_ECN]
    return int(text) if text is not None and text.strip().isdigit() else None


TCP_ECN = "/proc/sys/net/ipv4/tcp_ecn"


def tcp_congestion_control(ep: Endpoint) -> Optional[str]:
    """The namespace's TCP congestion control (each namespace has its own,
    so the host's may differ: this host's is bbr, a new namespace's cubic)."""
    text = ep.read_texts([TCP_CC])[TCP_CC]
    return text.strip() or None if text is not None else None


TCP_CC = "/proc/sys/net/ipv4/tcp_congestion_control"
TCP_CC_AVAILABLE = "/proc/sys/net/ipv4/tcp_available_congestion_control"


@dataclass
class Topology:
    """Namespaces + veth, or loopback. Use as a context manager."""

    kind: str  # "netns" or "loopback"
    tag: str  # short unique tag for names (run id suffix)
    mtu: int = 1500
    ecn: Optional[int] = None  # net.ipv4.tcp_ecn in both namespaces (--ecn on a TCP stack); None: the kernel's
    client: Optional[Endpoint] = None
    server: Optional[Endpoint] = None
    subnet: Optional[str] = None
    _created: List[str] = field(default_factory=list)

    def __enter__(self) -> "Topology":
        try:
            if self.kind == "loopback":
                self.client = Endpoint(None, "127.0.0.1", "lo")
                self.server = Endpoint(None, "127.0.0.1", "lo")
            else:
                self._make_netns_pair()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def describe(self) -> dict:
        return {
            "kind": self.kind,
            "mtu": self.mtu if self.kind == "netns" else None,
            "subnet": self.subnet,
            **{
                side: {
                    "netns": ep.netns,
                    "addr": ep.addr,
                    "ifname": ep.ifname,
                    "tcp_congestion_control": tcp_congestion_control(ep),
                    "tcp_ecn": tcp_ecn(ep),
                }
                for side, ep in (("client", self.client), ("server", self.server))
            },
        }

    def _make_netns_pair(self) -> None:
        net = choose_subnet(host_networks())
        self.subnet = str(net)
        hosts = list(net.hosts())
        names = {"client": f"{NETNS_PREFIX}{self.tag}-c", "server": f"{NETNS_PREFIX}{self.tag}-s"}
        links = {"client": f"{LINK_PREFIX}{self.tag}c", "server": f"{LINK_PREFIX}{self.tag}s"}
        # Claimed before they exist: a qprof killed between the two
        # leaves nothing the ledger does not name. Claimed and listed for
        # close() as one step, so a signal cannot leave a claim that
        # close() does not release. Each `ip -batch` is one process where
        # a command each was eleven (~0.1 s each in the guest's TCG).
        with interrupts.deferred():
            for side in ("client", "server"):
                remains.ledger().claim("netns", names[side])
                self._created.append(names[side])
        veth = f"link add {links['client']} netns {names['client']} type veth"
        peer = f"peer name {links['server']} netns {names['server']}"
        self._batch(None, f"netns add {names['client']}", f"netns add {names['server']}", f"{veth} {peer}")
        for i, side in enumerate(("client", "server")):
            ns, link = names[side], links[side]
            # msquic probes GSO/GRO over 127.0.0.1 at start-up and quietly
            # runs without them if that fails, so lo must be up in each netns.
            self._batch(
                ns,
                "link set lo up",
                f"link set {link} mtu {self.mtu}",
                f"addr add {hosts[i]}/30 dev {link}",
                f"link set {link} up",
            )
            if self.ecn is not None:
                # Each namespace has its own; it goes with the namespace.
                self._run_ip("netns", "exec", ns, "sysctl", "-qw", f"net.ipv4.tcp_ecn={self.ecn}")
        self.client = Endpoint(names["client"], str(hosts[0]), links["client"])
        self.server = Endpoint(names["server"], str(hosts[1]), links["server"])
        self._wait_link_up()

    def _wait_link_up(self, timeout_s: float = 5.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            states = [_ip("-n", ep.netns, "-j", "link", "show", ep.ifname).stdout for ep in (self.client, self.server)]
            if all('"LOWER_UP"' in s for s in states):
                return
            time.sleep(0.02)
        raise TopologyFailed("the veth pair did not come up within 5 s; check `ip link` for errors.")

    def _batch(self, netns: Optional[str], *commands: str) -> None:
        """ip's commands in one process (`ip [-n NETNS] -batch -`), which
        stops at the first that fails and names its line."""
        ns = ["-n", netns] if netns else []
        r = subprocess.run(["ip", *ns, "-batch", "-"], input="\n".join(commands) + "\n", capture_output=True, text=True)
        if r.returncode != 0:
            failed = re.search(r"Command failed -:(\d+)", r.stderr)
            line = int(failed.group(1)) if failed else 0
            command = commands[line - 1] if 0 < line <= len(commands) else "; ".join(commands)
            why = " ".join(x for x in r.stderr.splitlines() if not x.startswith("Command failed")).strip()
            raise TopologyFailed(
                f"`ip {' '.join([*ns, command])}` failed ({why or r.returncode}); check that this kernel "
                "allows network namespaces and veth (`qprof doctor`)."
            )

    def _run_ip(self, *args: str) -> None:
        r = _ip(*args, check=False)
        if r.returncode != 0:
            raise TopologyFailed(
                f"`ip {' '.join(args)}` failed ({r.stderr.strip()}); check that this kernel "
                "allows network namespaces and veth (`qprof doctor`)."
            )

    def close(self) -> None:
        """Kill anything left in our namespaces, then delete them; no signal
        cuts this half way. A namespace that would not go stays claimed, so
        the run's last sentence names it and `qprof clean` retries."""
        with interrupts.deferred():
            for ns in reversed(self._created):
                if remains.delete_netns(ns):
                    remains.ledger().release("netns", ns)
            self._created.clear()
