# SPDX-License-Identifier: GPL-2.0-only
"""Other hosts for the tests, made on this machine (issue 26): each one a
network namespace joined to this one by a veth with a /30 of its own,
running Debian's sshd (`make test-tools` installs openssh-server) on its
own address. qprof reaches it over SSH exactly as it would a real host:
`root@ADDR` with a key, a known_hosts and an ssh config made for the test
(given to qprof as `ssh_config`, the run option `--ssh-config`), never
the machine's own /root/.ssh or /etc/ssh.

The host is "installed like this one": its sshd hands every session
this test's PYTHONPATH and QPROF_BUILD_DIR (sshd_config SetEnv, which a
client cannot override), so `python -m qprof` there is the code under
test; `env=` gives a host another environment (one that lacks the build).

A host is a context manager and the one owner of what it makes: sshd and
whatever runs in its namespace are killed and the namespace (with its
veth) deleted on every path. The namespace is claimed in this process's
ledger (core/remains.py) before it exists, so `qprof clean` removes it
if the test process is killed outright, and its name starts with qp-, as
every qprof namespace, so `leftovers()` (conftest.py) sees one left.
"""

import ipaddress
import json
import os
import secrets
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from qprof import interrupts, remains
from qprof.collectors.controlled import die_with_parent
from qprof.collectors.topology import choose_subnet, host_networks

NETNS_PREFIX = "qp-ssh-"
LINK_PREFIX = "qps"
# Private, and apart from the pool runs take theirs from (10.218.0.0/16,
# collectors/topology.py), so a run beside these hosts never collides;
# the test session beside the guest tier (conftest.SESSION) takes its
# hosts' from the upper half, so two hosts made at once, one in each
# session, never take the same /30.
ADDRESS_POOL = ipaddress.ip_network(
    "10.219.128.0/17" if os.environ.get("QPROF_TEST_SESSION") == "beside" else "10.219.0.0/17"
)
SSHD = "/usr/sbin/sshd"
# sshd refuses to start without its privilege separation directory, which
# Debian's ssh.service makes (RuntimeDirectory) and this machine never ran.
SSHD_RUN_DIR = Path("/run/sshd")
# What makes `python -m qprof` there this test's qprof, as here, and
# the test session's name and temporary directory, so what runs there is
# that session's (conftest.py), its perf and ssh directories among the
# session's own (the beside session's, not /tmp, where the other session
# counts what it finds as its leftovers).
PASSED_ENV = ("PYTHONPATH", "QPROF_BUILD_DIR", "QPROF_TEST_SESSION", "TMPDIR")
START_TIMEOUT_S = 10.0
# The name of each host's sshd config (leftovers(), conftest.py, knows a
# test's sshd by its namespace: its title is cut to its argv's room).
SSHD_CONFIG = "qp-sshd.conf"


def keygen(path: Path, comment: str) -> Path:
    """An ed25519 key pair without a passphrase: path and path.pub."""
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        capture_output=True,
    )
    return path


def public(key: Path) -> str:
    return Path(f"{key}.pub").read_text().strip()


def _ip(*args: str) -> None:
    r = subprocess.run(["ip", *args], capture_output=True, text=True)
    assert r.returncode == 0, f"ip {' '.join(args)}: {r.stderr.strip()}"


class RegistryProxy:
    """A host's way out to the package registries, as a host behind an
    HTTP proxy has one: a CONNECT proxy (to port 443 only) listening on
    this side of its veth, which its sessions are given as HTTPS_PROXY.
    A namespace has no route out of its /30, and its resolver is this
    machine's; the proxy reaches out, and resolves, from here."""

    def __init__(self, addr: str):
        self.addr = addr
        self.sock = socket.create_server((addr, 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, name="registry-proxy", daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://{self.addr}:{self.port}"

    def close(self) -> None:
        self.sock.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._tunnel, args=(conn,), daemon=True).start()

    def _tunnel(self, conn: socket.socket) -> None:
        with conn:
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 8192:
                got = conn.recv(4096)
                if not got:
                    return
                head += got
            method, target, *_ = head.split(b"\r\n", 1)[0].decode(errors="replace").split()
            name, _, port = target.rpartition(":")
            if method != "CONNECT" or port != "443":
                conn.sendall(b"HTTP/1.1 403 Forbidden\r\n\r\n")
                return
            try:
                out = socket.create_connection((name, 443), timeout=30)
            except OSError:
                conn.sendall(b"HTTP/1.1 502 Bad Gateway\r\n\r\n")
                return
            with out:
                conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                out.settimeout(None)
                back = threading.Thread(target=_relay, args=(out, conn), daemon=True)
                back.start()
                _relay(conn, out)
                back.join()


def _relay(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


class SshTestHost:
    """One host: `addr` (reached from here), `alias` (a Host name in
    `ssh_config`), `destination` (root@addr), the client key, the host
    key and the known_hosts qprof uses, all under `scratch`. registries:
    its sessions reach the package registries (RegistryProxy)."""

    def __init__(self, scratch: Path, env: Optional[Dict[str, str]] = None, registries: bool = False):
        self.dir = Path(scratch)
        self.env = {k: os.environ[k] for k in PASSED_ENV if k in os.environ}
        self.env.update(env or {})
        self.registries = registries
        self.proxy: Optional[RegistryProxy] = None
        tag = secrets.token_hex(3)
        self.netns = f"{NETNS_PREFIX}{tag}"
        self.links = (f"{LINK_PREFIX}{tag}r", f"{LINK_PREFIX}{tag}h")  # this side, the host's
        self.alias = f"qphost-{tag}"
        self.addr: Optional[str] = None
        self.local_addr: Optional[str] = None
        self.sshd: Optional[subprocess.Popen] = None
        self._claimed = False

    # -- the host ---------------------------------------------------------

    def __enter__(self) -> "SshTestHost":
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        SSHD_RUN_DIR.mkdir(mode=0o755, exist_ok=True)
        net = choose_subnet(host_networks(), ADDRESS_POOL)
        here, there = (str(h) for h in net.hosts())
        with interrupts.deferred():
            remains.ledger().claim("netns", self.netns)
            self._claimed = True
        _ip("netns", "add", self.netns)
        _ip("link", "add", self.links[0], "type", "veth", "peer", "name", self.links[1], "netns", self.netns)
        _ip("addr", "add", f"{here}/30", "dev", self.links[0])
        _ip("link", "set", self.links[0], "up")
        _ip("-n", self.netns, "link", "set", "lo", "up")
        _ip("-n", self.netns, "addr", "add", f"{there}/30", "dev", self.links[1])
        _ip("-n", self.netns, "link", "set", self.links[1], "up")
        self.local_addr, self.addr = here, there
        if self.registries:
            self.proxy = RegistryProxy(here)
            self.env.update({"HTTPS_PROXY": self.proxy.url, "https_proxy": self.proxy.url})
        self._make_keys()

        with open(self.sshd_log, "wb") as log:
            self.sshd = subprocess.Popen(
                ["ip", "netns", "exec", self.netns, SSHD, "-D", "-e", "-f", str(self.sshd_config)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                preexec_fn=die_with_parent,
            )
        self._wait_listening()

    def _make_keys(self) -> None:
        """The host's key, the client's, authorized_keys, sshd's config,
        known_hosts and the client's ssh config, all in the scratch dir."""
        self.host_key = keygen(self.dir / "host_key", f"host {self.alias}")
        self.client_key = keygen(self.dir / "client_key", "qprof test client")
        self.authorized_keys = self.dir / "authorized_keys"
        self.authorized_keys.write_text(public(self.client_key) + "\n")
        self.sshd_config = self.dir / SSHD_CONFIG
        self.sshd_config.write_text(self._sshd_config())
        self.sshd_log = self.dir / "sshd.log"
        self.known_hosts = self.dir / "known_hosts"
        self.known_hosts.write_text(f"{self.addr} {public(self.host_key)}\n")
        self.ssh_config = self.client_config("ssh_config")

    def _sshd_config(self) -> str:
        # UsePAM no: no logind session or `systemd --user` outlives a test
        # (without PAM sshd refuses a root whose password is locked with
        # "!": /etc/shadow's root here has "*"). StrictModes no: the keys
        # live under /tmp, which is world-writable.
        lines = [
            f"ListenAddress {self.addr}:22",
            f"HostKey {self.host_key}",
            "PidFile none",
            f"AuthorizedKeysFile {self.authorized_keys}",
            "PermitRootLogin prohibit-password",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "StrictModes no",
            "PrintMotd no",
            "LogLevel VERBOSE",
        ]
        if self.env:
            lines.append("SetEnv " + " ".join(f"{k}={v}" for k, v in self.env.items()))
        return "\n".join(lines) + "\n"

    def _ended(self) -> Optional[str]:
        """Why the host can no longer start, or None."""
        if self.sshd.poll() is not None:
            return f"sshd ended (exit {self.sshd.returncode}): {self.sshd_log.read_text()}"
        return None

    def _wait_listening(self, timeout_s: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            ended = self._ended()
            if ended:
                raise AssertionError(ended)
            try:
                socket.create_connection((self.addr, 22), timeout=1).close()
                return
            except OSError:
                time.sleep(0.02)
        raise AssertionError(f"sshd did not listen on {self.addr}:22 within {timeout_s:.0f} s")

    def close(self) -> None:
        with interrupts.deferred():
            if self.sshd is not None:
                if self.sshd.poll() is None:
                    self.sshd.kill()
                self.sshd.wait()
            # Its own end first: a namespace is destroyed on the kernel's
            # time, and the veth end here with it, after `ip netns del`.
            subprocess.run(["ip", "link", "del", self.links[0]], capture_output=True)
            if self.proxy is not None:
                self.proxy.close()
                self.proxy = None
            if self._claimed and remains.delete_netns(self.netns):
                remains.ledger().release("netns", self.netns)
                self._claimed = False

    def join(self, other: "SshTestHost") -> Tuple[str, str]:
        """A veth of their own between this host and `other`, with a /30 of
        its own, for data between two hosts that flows through no other
        namespace: (this host's address on it, the other's). It goes with
        the namespaces."""
        net = choose_subnet(host_networks() + self._netns_networks() + other._netns_networks(), ADDRESS_POOL)
        mine, theirs = (str(h) for h in net.hosts())
        name = f"{LINK_PREFIX}{secrets.token_hex(3)}"
        links = (f"{name}a", f"{name}b")
        _ip("-n", self.netns, "link", "add", links[0], "type", "veth", "peer", "name", links[1], "netns", other.netns)
        for host, link, addr in ((self, links[0], mine), (other, links[1], theirs)):
            _ip("-n", host.netns, "addr", "add", f"{addr}/30", "dev", link)
            _ip("-n", host.netns, "link", "set", link, "up")
        return mine, theirs

    def _netns_networks(self) -> List[ipaddress.IPv4Network]:
        r = subprocess.run(["ip", "-n", self.netns, "-j", "-4", "addr", "show"], capture_output=True, text=True)
        return [
            ipaddress.ip_network(f"{a['local']}/{a['prefixlen']}", strict=False)
            for link in json.loads(r.stdout or "[]")
            for a in link.get("addr_info", [])
        ]

    # -- what a test hands qprof -------------------------------------------

    @property
    def destination(self) -> str:
        return f"root@{self.addr}"

    def client_config(self, name: str, identity: Optional[Path] = None, known_hosts: Optional[str] = None) -> Path:
        """An ssh config (for `ssh -F`) naming this host's alias, a key and
        a known_hosts: this host's own unless `identity` (another key) or
        `known_hosts` (the file's text) are given."""
        kh = self.known_hosts
        if known_hosts is not None:
            kh = self.dir / f"{name}.known_hosts"
            kh.write_text(known_hosts)
        path = self.dir / name
        path.write_text(
            f"Host {self.alias}\n"
            f"    HostName {self.addr}\n"
            "Host *\n"
            "    User root\n"
            f"    IdentityFile {identity or self.client_key}\n"
            "    IdentitiesOnly yes\n"
            f"    UserKnownHostsFile {kh}\n"
            "    GlobalKnownHostsFile /dev/null\n"
        )
        return path

    def remote_pids(self) -> List[str]:
        """What runs on the host besides its listening sshd: `ps` lines."""
        r = subprocess.run(["ip", "netns", "pids", self.netns], capture_output=True, text=True)
        pids = [p for p in r.stdout.split() if self.sshd is None or p != str(self.sshd.pid)]
        if not pids:
            return []
        ps = subprocess.run(["ps", "-o", "pid=,args=", "-p", ",".join(pids)], capture_output=True, text=True)
        return [l.strip() for l in ps.stdout.splitlines() if l.strip()]

    def kill_sshd(self) -> str:
        """The host's sshd and every session it serves killed with -9 (its
        own, not another host's: a pid namespace is the machine's), the
        listener reaped. Returns the listener's leftovers() line, which is
        gone now."""
        r = subprocess.run(["ip", "netns", "pids", self.netns], capture_output=True, text=True)
        for pid in r.stdout.split():
            try:
                if Path(f"/proc/{pid}/comm").read_text().strip() == "sshd":
                    os.kill(int(pid), signal.SIGKILL)
            except (OSError, ValueError):
                pass  # gone meanwhile
        self.sshd.wait(timeout=10)
        return f"process {self.sshd.pid} sshd in {self.netns}"

    def wait_idle(self, timeout_s: float = 10.0) -> List[str]:
        """remote_pids() once the host has none left, or when timeout_s
        passed: sshd ends a connection's processes after the client has
        gone, on its own time."""
        deadline = time.monotonic() + timeout_s
        while (left := self.remote_pids()) and time.monotonic() < deadline:
            time.sleep(0.05)
        return left


def joint_config(path: Path, hosts: List["SshTestHost"]) -> Path:
    """One ssh config (ssh -F) naming every host by its alias, each with
    its own key and known_hosts: what a run that reaches two needs."""
    text = ""
    for h in hosts:
        text += (
            f"Host {h.alias}\n    HostName {h.addr}\n    IdentityFile {h.client_key}\n"
            f"    UserKnownHostsFile {h.known_hosts}\n"
        )
    text += "Host *\n    User root\n    IdentitiesOnly yes\n    GlobalKnownHostsFile /dev/null\n"
    path.write_text(text)
    return path


# A guest boots under TCG in tens of seconds before its sshd listens.
GUEST_START_TIMEOUT_S = 240.0
GUEST_SCRIPT = """set -e
ip addr add {addr}/30 dev eth0
ip link set eth0 up
mkdir -p /run/sshd /run/tmp
# Sessions without this machine's shell start-up (its ~/.bashrc, seconds
# under TCG for each command qprof sends): a remote host's own is its own.
for f in /root/.bashrc /root/.bash_profile /root/.profile; do if [ -e "$f" ]; then mount --bind /dev/null "$f"; fi; done
{sshd} -D -e -f {config} > {log} 2>&1
"""


class GuestSshHost(SshTestHost):
    """A host with a kernel of its own: the --guest QEMU VM (Debian's
    kernel under TCG, collectors/guest.py), its NIC a tap device here
    with a /30 of its own, running this machine's sshd from this
    machine's userland (the guest sees it read-only over virtio-9p, so
    qprof there is this checkout, at the same path). Its scratch space
    is TMPDIR=/run/tmp, the guest's own tmpfs. QEMU made the tap and
    takes it with it; QEMU is killed on every path."""

    def __init__(self, scratch: Path, env: Optional[Dict[str, str]] = None):
        super().__init__(scratch, {"TMPDIR": "/run/tmp", **(env or {})})
        self.tap = f"{self.links[0][:-1]}t"
        self.vm = None

    def _start(self) -> None:
        from qprof.collectors import guest

        self.dir.mkdir(parents=True, exist_ok=True)
        net = choose_subnet(host_networks(), ADDRESS_POOL)
        self.local_addr, self.addr = (str(h) for h in net.hosts())
        self._make_keys()
        out = self.dir / "guest"  # the one directory the guest may write, as it sees it here
        out.mkdir()
        self.sshd_log = out / "sshd.log"
        (out / "cmd.sh").write_text(
            GUEST_SCRIPT.format(addr=self.addr, sshd=SSHD, config=self.sshd_config, log=self.sshd_log)
        )
        self.vm = guest.GuestVM(guest.artifacts(), out, self.dir / "console.log", tap=self.tap).__enter__()
        deadline = time.monotonic() + START_TIMEOUT_S
        while subprocess.run(["ip", "link", "show", self.tap], capture_output=True).returncode != 0:
            assert self.vm.proc.poll() is None and time.monotonic() < deadline, f"QEMU made no {self.tap}"
            time.sleep(0.05)
        _ip("addr", "add", f"{self.local_addr}/30", "dev", self.tap)
        _ip("link", "set", self.tap, "up")
        self._wait_listening(GUEST_START_TIMEOUT_S)

    def _ended(self) -> Optional[str]:
        if self.vm.proc.poll() is not None:
            return f"the guest ended (exit {self.vm.proc.returncode}): {self.vm.last_console_line()}"
        return None

    def close(self) -> None:
        if self.vm is not None:
            self.vm.__exit__()
            self.vm = None

    def remote_pids(self) -> List[str]:
        """qprof's processes in the guest (ps there, over ssh): `ps` lines."""
        r = subprocess.run(
            ["ssh", "-F", str(self.ssh_config), "-o", "BatchMode=yes", self.destination, "ps", "-eo", "pid=,args="],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 0, r.stderr
        return [l.strip() for l in r.stdout.splitlines() if "qprof" in l and " ps -eo" not in l and "sshd" not in l]
