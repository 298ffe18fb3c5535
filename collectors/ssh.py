# SPDX-License-Identifier: GPL-2.0-only
"""Another host, reached with OpenSSH's own `ssh` (issue 26): no daemon of
qprof's and no SSH library; the user's keys, known_hosts and ssh config.

An SshHost is one destination behind ONE multiplexed master connection
(`ssh -M -S CTL -N`). Everything qprof runs there is a client of that
master (`ssh -S CTL -T -- DEST WORDS`, `command()`), whose stdin and
stdout are a local child's pipes, so what speaks over a child's pipes
(collectors/controlled.py) works across SSH unchanged. The control socket
lives in a private (0700) temporary directory. An SshHost is a context
manager and the one owner of the master, the agents it opened and that
directory: on every exit path the agents are told to exit, the master to
exit (`-O exit`), and the directory is removed. Each is in the ledger
(core/remains.py) while it exists, and the processes die with qprof.

What qprof asks of ssh, over whatever the user's ssh config says:
  BatchMode=yes               no prompt ever (it would hang a run): keys
                              or an agent, never a password
  StrictHostKeyChecking=yes   an unknown host key is refused, not added:
  UpdateHostKeys=no           qprof cannot show a fingerprint to check, and
                              never writes the user's known_hosts
  ClearAllForwardings=yes     qprof opens no port of its own, and hands
  ForwardAgent=no, ForwardX11=no   the user's agent to no root shell there
  ServerAliveInterval=5       a dead path ends the master within ~15 s,
  ServerAliveCountMax=3       not TCP's minutes
  LogLevel=ERROR              ssh's last line is the cause, kept in the sentence
The user's config still chooses the user, port, key, proxy and ciphers;
`ssh_config` (the run option `--ssh-config FILE`) replaces it, as `ssh -F`.

On the host, `qprof agent` (collectors/agent.py) answers JSON lines;
`open_agent()` starts it and refuses, each with its own exit code, a
remote that is not root, runs another version or commit, or lacks the
build. Faults of ssh itself are told apart from its stderr (`ssh_failure`).
"""

import json
import os
import queue
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Union

from qprof import __version__, errors, interrupts, remains
from qprof.collectors import environment
from qprof.collectors.controlled import die_with_parent, start_owned

SSH = "ssh"
# How qprof is started on the other host, a command line split as a shell
# would (no expansion); unset, the same interpreter path as here.
REMOTE_QPROF_ENV = "QPROF_REMOTE_QPROF"
CONNECT_TIMEOUT_S = 10.0
# After the TCP connection: key exchange and authentication.
LOGIN_TIMEOUT_S = 30.0
HELLO_TIMEOUT_S = 60.0
REQUEST_TIMEOUT_S = 30.0
CLOSE_TIMEOUT_S = 5.0
CLOCK_ROUNDS = 16
SERVER_ALIVE = ("ServerAliveInterval=5", "ServerAliveCountMax=3")
OPTIONS = (
    "BatchMode=yes",
    "StrictHostKeyChecking=yes",
    "UpdateHostKeys=no",
    "ClearAllForwardings=yes",
    "ForwardAgent=no",
    "ForwardX11=no",
    "PermitLocalCommand=no",
    "LogLevel=ERROR",
)
# A client whose master has gone would open a connection of its own (ssh
# falls back when the control socket is missing); a proxy that fails at
# once makes it fail instead, so a lost master is a lost remote.
CLIENT_OPTIONS = ("ControlMaster=no", "ProxyCommand=false")


# -- destinations (pure) -------------------------------------------------


@dataclass(frozen=True)
class Destination:
    """An SSH destination as the user wrote it (`text`), and what ssh is
    given: `target` ([user@]host) and `port` (its -p), None for ssh's own
    choice (the ssh config, else 22)."""

    text: str
    host: str
    user: Optional[str] = None
    port: Optional[int] = None

    @property
    def target(self) -> str:
        return f"{self.user}@{self.host}" if self.user else self.host


def parse_destination(text: str) -> Destination:
    """`user@host`, `host:port`, `user@host:port`, `[v6addr]:port`, a Host
    name from the ssh config, or any of these as ssh://...; BadValue else."""

    def bad(why: str) -> errors.BadValue:
        return errors.BadValue(
            f"{text!r} is not an SSH destination ({why}); give user@host, host:port, user@host:port, "
            "[IPv6]:port or a Host name from your ssh config."
        )

    rest = text[len("ssh://") :] if text.startswith("ssh://") else text
    if not rest:
        raise bad("it is empty")
    if re.search(r"[\s\x00-\x1f\x7f/]", rest):
        raise bad("it holds a space, a slash or a control character")
    user, at, rest = rest.rpartition("@")
    if at and not user:
        raise bad("no user before '@'")
    if not at:
        user = None
    port_s = None
    m = re.fullmatch(r"\[([^\[\]]+)\](?::([^:]*))?", rest)
    if m:
        host, port_s = m.group(1), m.group(2)
        if ":" not in host:
            raise bad("brackets hold an IPv6 address")
    elif rest.count(":") == 1:
        host, port_s = rest.split(":")
    else:
        host = rest  # no colon, or several: an IPv6 address without a port
    if not host:
        raise bad("no host")
    if host.startswith("-") or (user or "").startswith("-"):
        raise bad("it starts with '-'")
    port = None
    if port_s is not None:
        if not port_s.isdigit() or not 0 < int(port_s) < 65536:
            raise bad(f"port {port_s!r} is not a number from 1 to 65535")
        port = int(port_s)
    return Destination(text, host, user, port)


# -- ssh's failures (pure) -----------------------------------------------

HOST_KEY_CHANGED = ("REMOTE HOST IDENTIFICATION HAS CHANGED", "has changed and you have requested strict checking")
HOST_KEY_UNKNOWN = ("host key is known for", "Host key verification failed")
AUTH_FAILED = ("Permission denied", "Too many authentication failures", "No more authentication methods")
UNREACHABLE = (
    "Could not resolve hostname",
    "Name or service not known",
    "Temporary failure in name resolution",
    "No address associated with hostname",
    "Connection refused",
    "No route to host",
    "Network is unreachable",
    "Connection timed out",
    "Operation timed out",
    "kex_exchange_identification",
    "Connection closed by",
    "Connection reset by peer",
)


def last_line(text: str, default: str = "") -> str:
    """The last line that says something, without its final full stop
    (the sentence it goes into has one)."""
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    return lines[-1].rstrip(".") if lines else default


def ssh_failure(name: str, stderr: str, returncode: int, hint: str) -> errors.QprofError:
    """The error for an ssh that failed to connect (exit 255): its cause
    from ssh's own words, its last line kept, and `hint` (the ssh command
    that shows the same failure) as the way to look. A changed key is
    looked for first: ssh also says "verification failed" for it."""
    line = last_line(stderr, f"ssh exit {returncode}, no message")
    if any(s in stderr for s in HOST_KEY_CHANGED):
        return errors.SshHostKeyChanged(
            f"the host key of {name} CHANGED from the one your known_hosts holds for it ({line}); "
            "if the host was reinstalled, check its new key and replace the old one (`ssh-keygen -R HOST`), "
            "else someone may be in between: qprof does not connect."
        )
    if any(s in stderr for s in HOST_KEY_UNKNOWN):
        return errors.SshHostKeyUnknown(
            f"the host key of {name} is not in your known_hosts ({line}); connect once with `{hint}`, "
            "check the fingerprint it shows and accept it: qprof never adds a key by itself."
        )
    if any(s in stderr for s in AUTH_FAILED):
        return errors.SshAuthFailed(
            f"SSH login to {name} was refused ({line}); qprof logs in with your keys and never asks for a "
            f"password: add your public key to that user's authorized_keys, or name the key in your ssh config "
            f"(`{hint}` must work without a prompt)."
        )
    if any(s in stderr for s in UNREACHABLE):
        return errors.SshUnreachable(
            f"cannot reach {name} over SSH ({line}); check the name, the address and the port, and that sshd "
            f"runs there (`{hint}` must work)."
        )
    return errors.SshFailed(f"ssh to {name} failed ({line}); `{hint}` shows why.")


# -- the clock -----------------------------------------------------------


@dataclass(frozen=True)
class ClockOffset:
    """The other host's CLOCK_MONOTONIC minus ours, from the round trip
    whose rtt was the shortest of `rounds`: the remote's reading t_r was
    taken between our send and receive, so it is our midpoint plus
    offset_ns, within ± uncertainty_ns (half that rtt, rounded up). A
    remote time t is ours t - offset_ns ± uncertainty_ns."""

    offset_ns: int
    uncertainty_ns: int
    rtt_ns: int
    rounds: int


def best_offset(samples: List[tuple]) -> ClockOffset:
    """(t_send, t_remote, t_receive) samples, ns, to the offset of the
    shortest round trip. Integer halves: floor for the offset, ceiling for
    its bound, so |offset_ns| <= uncertainty_ns whenever the clocks agree."""
    t0, tr, t1 = min(samples, key=lambda s: s[2] - s[0])
    rtt = t1 - t0
    return ClockOffset((2 * tr - t0 - t1) // 2, (rtt + 1) // 2, rtt, len(samples))


# -- the host ------------------------------------------------------------


def how_ended(code: Optional[int]) -> str:
    """A process's end as Popen reports it, in words."""
    if code is None:
        return "still running"
    return f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit {code}"


def _describe_version(version, commit) -> str:
    at = f"at commit {commit[:12]}" if commit else "at no known commit (not a git checkout)"
    return f"version {version} {at}"


class SshHost:
    """One SSH destination behind one master connection. Use as a context
    manager; `address` is known once entered."""

    def __init__(
        self,
        destination: str,
        ssh_config: Optional[Union[str, Path]] = None,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
    ):
        self.dest = parse_destination(destination)
        self.name = destination
        self.ssh_config = Path(ssh_config).absolute() if ssh_config is not None else None
        self.connect_timeout_s = connect_timeout_s
        self.address: Optional[str] = None
        self.local_address: Optional[str] = None
        self.proc: Optional[subprocess.Popen] = None  # the master
        self._claim = None
        self._dir: Optional[Path] = None
        self._err = None
        self._agents: List["Agent"] = []

    # -- the master connection

    def _base(self) -> List[str]:
        argv = [SSH]
        if self.ssh_config is not None:
            argv += ["-F", str(self.ssh_config)]
        if self.dest.port is not None:
            argv += ["-p", str(self.dest.port)]
        argv += ["-S", str(self.ctl)]
        for o in OPTIONS:
            argv += ["-o", o]
        return argv

    @property
    def ctl(self) -> Path:
        return self._dir / "ctl"

    @property
    def hint(self) -> str:
        """The ssh command that shows what qprof's ssh sees."""
        argv = [SSH] + (["-F", str(self.ssh_config)] if self.ssh_config else [])
        argv += ["-p", str(self.dest.port)] if self.dest.port is not None else []
        return shlex.join(argv + [self.dest.target, "true"])

    def __enter__(self) -> "SshHost":
        if self.ssh_config is not None and not self.ssh_config.is_file():
            raise errors.BadValue(f"--ssh-config {self.ssh_config} is not a file; name an ssh config file (ssh -F).")
        if shutil.which(SSH) is None:
            raise errors.SshFailed("OpenSSH's ssh is not installed here; install Debian's openssh-client.")
        try:
            self._connect()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _connect(self) -> None:
        with interrupts.deferred():
            self._dir = Path(tempfile.mkdtemp(prefix="qprof-ssh-"))  # 0700
            remains.ledger().claim("paths", str(self._dir))
        self._err = open(self._dir / "master.err", "w+b")
        argv = self._base() + ["-M", "-N", "-o", "ControlPersist=no"]
        argv += ["-o", f"ConnectTimeout={max(1, round(self.connect_timeout_s))}"]
        for o in SERVER_ALIVE:
            argv += ["-o", o]
        start_owned(
            self, argv + ["--", self.dest.target], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._err
        )
        # The master makes its socket once it has logged in.
        deadline = time.monotonic() + self.connect_timeout_s + LOGIN_TIMEOUT_S
        while not self.ctl.exists():
            if self.proc.poll() is not None:
                raise ssh_failure(self.name, self._master_stderr(), self.proc.returncode, self.hint)
            if time.monotonic() > deadline:
                raise errors.Timeout(
                    f"ssh to {self.name} did not log in within {self.connect_timeout_s + LOGIN_TIMEOUT_S:.0f} s "
                    f"({last_line(self._master_stderr(), 'no message')}); `{self.hint}` shows where it waits."
                )
            time.sleep(0.01)
        r = self.run(["printenv", "SSH_CONNECTION"], REQUEST_TIMEOUT_S)
        lines = [l for l in r.stdout.splitlines() if l.strip()]  # a login shell may say more first
        words = lines[-1].split() if lines else []
        if r.returncode != 0 or len(words) != 4:
            raise errors.SshFailed(
                f"{self.name} did not say which address it was reached at (`printenv SSH_CONNECTION` gave "
                f"{r.stdout.strip()[:80]!r}, exit {r.returncode}); its login shell must run commands as given."
            )
        # Where the host was reached, and where it saw this side come from:
        # a run's server listens on the first, its peer is the second.
        self.local_address, self.address = words[0], words[2]

    def _master_stderr(self) -> str:
        try:
            self._err.seek(0)
            return self._err.read().decode(errors="replace")
        except (OSError, ValueError, AttributeError):
            return ""

    def alive(self) -> bool:
        """The master still runs (and so does every client's connection)."""
        return self.proc is not None and self.proc.poll() is None and self.ctl.exists()

    def lost(self, what: str, detail: str = "") -> errors.RemoteLost:
        """RemoteLost for `what` (e.g. "qprof's agent"), with the master's
        last words if it has gone, else `detail`."""
        if not self.alive():
            code = self.proc.poll() if self.proc is not None else None
            why = last_line(self._master_stderr(), f"the SSH connection ended, ssh {how_ended(code)}")
        else:
            why = detail or "it ended"
        return errors.RemoteLost(
            f"lost {what} on {self.name} ({why}); check the host and the network to it (`{self.hint}`), then rerun."
        )

    def close(self) -> None:
        """Agents told to exit, the master too, the directory removed; no
        signal cuts this half way."""
        with interrupts.deferred():
            for agent in reversed(self._agents):
                agent.close()
            self._agents.clear()
            if self.proc is not None:
                if self.proc.poll() is None:
                    try:
                        subprocess.run(
                            self._base() + ["-O", "exit", "--", self.dest.target],
                            capture_output=True,
                            timeout=CLOSE_TIMEOUT_S,
                            preexec_fn=die_with_parent,
                        )
                        self.proc.wait(timeout=CLOSE_TIMEOUT_S)
                    except subprocess.TimeoutExpired:
                        self.proc.kill()
                self.proc.wait()
                remains.ledger().release("pids", self._claim)
            if self._err is not None:
                self._err.close()
                self._err = None
            if self._dir is not None:
                shutil.rmtree(self._dir, ignore_errors=True)
                remains.ledger().release("paths", str(self._dir))
                self._dir = None

    # -- commands there

    def command(self, argv: List[str]) -> List[str]:
        """The local argv that runs argv there, through the master, its
        stdin, stdout and stderr those of the local process; each word
        quoted for the remote's shell."""
        if not argv:
            raise ValueError("an empty command would start a login shell")
        client = self._base() + ["-T"]
        for o in CLIENT_OPTIONS:
            client += ["-o", o]
        return client + ["--", self.dest.target] + [shlex.quote(str(a)) for a in argv]

    def run(self, argv: List[str], timeout_s: float, input: Optional[str] = None) -> subprocess.CompletedProcess:
        """argv there to its end: its exit, stdout and stderr (text).
        RemoteLost if the connection went; Timeout after timeout_s (the
        local client is killed; what it ran there may go on)."""
        try:
            r = subprocess.run(
                self.command(argv),
                input=input,
                stdin=None if input is not None else subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout_s,
                preexec_fn=die_with_parent,
            )
        except subprocess.TimeoutExpired:
            raise errors.Timeout(f"`{shlex.join(map(str, argv))}` on {self.name} did not end within {timeout_s:.0f} s.")
        if r.returncode == 255 and not self.alive():
            raise self.lost(f"`{shlex.join(map(str, argv))}`")
        return r

    def qprof_argv(self, *args: str, qprof: Optional[List[str]] = None) -> List[str]:
        """How qprof is started there: `qprof` if given (a checkout set up
        elsewhere, collectors/install.py), else $QPROF_REMOTE_QPROF (a
        command line, split as a shell would, e.g. `sudo -n
        /opt/qprof/.venv/bin/python -m qprof`), else this interpreter's
        path: qprof installed there by the README's commands at the same path."""
        cmd = os.environ.get(REMOTE_QPROF_ENV, "").strip()
        base = qprof or (shlex.split(cmd) if cmd else [sys.executable, "-m", "qprof"])
        return list(base) + [str(a) for a in args]

    def open_agent(self, timeout_s: float = HELLO_TIMEOUT_S, qprof: Optional[List[str]] = None) -> "Agent":
        """`qprof agent` there (started as qprof_argv says), its hello read
        and checked: root, this version and commit, the build complete;
        each refused with its own error. Closed with the host if not before."""
        argv = self.qprof_argv("agent", qprof=qprof)
        agent = Agent(self, self.command(argv), self._dir / f"agent{len(self._agents)}.err")
        agent.started = shlex.join(argv)
        self._agents.append(agent)
        try:
            agent.start()
            agent.hello = agent.read_hello(timeout_s)
            self.check_hello(agent.hello)
        except BaseException:
            agent.close()
            raise
        return agent

    def check_hello(self, hello: dict) -> None:
        euid = hello.get("euid")
        if euid is not None and euid != 0:
            raise errors.RemoteNotRoot(
                f"qprof on {self.name} runs as uid {euid}, not root, and a run's probes, perf and namespaces "
                f"need root; log in as root (root@HOST) or start it with sudo through {REMOTE_QPROF_ENV} "
                "(docs/remote.md)."
            )
        ours = (__version__, environment.qprof_commit())
        theirs = (hello.get("qprof_version"), hello.get("qprof_commit"))
        if theirs != ours:
            raise errors.RemoteVersion(
                f"qprof on {self.name} is {_describe_version(*theirs)}, this one is {_describe_version(*ours)}; "
                "install this commit there by the README's commands, at the same path, so both ends run the same code."
            )
        missing = hello.get("missing") or []
        if missing:
            raise errors.RemoteNotBuilt(
                f"qprof on {self.name} lacks its build in {hello.get('build_dir')} ({', '.join(missing)} missing); "
                "run the README's set-up there (`make build` in its qprof checkout)."
            )


class Agent:
    """`qprof agent` on another host, over a client of the host's master:
    JSON lines, one request at a time. Use as a context manager, or let
    the SshHost close it."""

    def __init__(self, host: SshHost, argv: List[str], err_path: Path):
        self.host = host
        self.argv = argv
        self.err_path = err_path
        self.hello: dict = {}
        self.started = ""  # the command line that started it there, as a person would type it
        self.proc: Optional[subprocess.Popen] = None
        self._claim = None
        self._err = None
        self._lines: "queue.Queue[Optional[str]]" = queue.Queue()
        self._reader: Optional[threading.Thread] = None
        self._lock = threading.Lock()
        self._next_id = 0

    def __enter__(self) -> "Agent":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        self._err = open(self.err_path, "wb")
        start_owned(
            self,
            self.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err,
            text=True,
            encoding="utf-8",
            errors="replace",
        )
        self._reader = threading.Thread(target=self._read, name="agent-lines", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _stderr(self) -> str:
        try:
            return self.err_path.read_text(errors="replace")
        except OSError:
            return ""

    def _ended(self) -> str:
        """How the client ended, and the last line it or the agent wrote."""
        try:
            code = self.proc.wait(timeout=CLOSE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            code = None
        how = how_ended(code)
        line = last_line(self._stderr())
        return f"{how}: {line}" if line else how

    def read_hello(self, timeout_s: float) -> dict:
        """The agent's first line. A login shell's chatter before it is
        skipped; an end before it is told apart: ssh's (exit 255), no
        qprof there (126, 127), a qprof that has no agent (anything else)."""
        deadline = time.monotonic() + timeout_s
        chatter = []
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise errors.Timeout(
                    f"qprof on {self.host.name} did not start its agent within {timeout_s:.0f} s "
                    f"(`{self.started}` there); check that it starts by hand."
                )
            if line is None:
                break
            try:
                hello = json.loads(line)
            except ValueError:
                chatter.append(line.strip())
                continue
            if isinstance(hello, dict) and hello.get("event") == "hello":
                return hello
            chatter.append(line.strip())
        ended = self._ended()
        code = self.proc.returncode
        if code == 255 or not self.host.alive():
            raise self.host.lost("qprof's agent", ended)
        started = self.started
        if code in (126, 127) or "No module named qprof" in self._stderr():
            raise errors.RemoteNotBuilt(
                f"qprof is not installed on {self.host.name} where this one is (`{started}`: {ended}); install it "
                f"there by the README's commands at the same path, or set {REMOTE_QPROF_ENV} (docs/remote.md)."
            )
        said = f"; it wrote {chatter[-1][:80]!r}" if chatter else ""
        raise errors.RemoteVersion(
            f"qprof on {self.host.name} did not answer as this version's agent does (`{started}`: {ended}{said}); "
            "install this commit there by the README's commands, at the same path."
        )

    def request(self, op: str, timeout_s: float = REQUEST_TIMEOUT_S, **kw) -> dict:
        """The agent's answer to {"op": op, **kw}: a dict, holding "error"
        (a sentence) if the agent could not do it. RemoteLost if the
        channel or the agent ended, Timeout after timeout_s."""
        with self._lock:
            self._next_id += 1
            rid = self._next_id
            try:
                self.proc.stdin.write(json.dumps({"op": op, "id": rid, **kw}) + "\n")
                self.proc.stdin.flush()
            except (BrokenPipeError, ValueError, OSError):
                raise self.host.lost("qprof's agent", self._ended())
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    raise errors.Timeout(
                        f"qprof's agent on {self.host.name} did not answer {op!r} within {timeout_s:.0f} s."
                    )
                if line is None:
                    self._lines.put(None)  # every later request ends here too
                    raise self.host.lost("qprof's agent", self._ended())
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                if isinstance(msg, dict) and msg.get("id") == rid:
                    return msg
                # An answer to an earlier request that timed out: dropped.

    def clock_offset(self, n: int = CLOCK_ROUNDS) -> ClockOffset:
        """The other host's CLOCK_MONOTONIC against ours, best of n round
        trips of the agent's "clock" (ClockOffset)."""
        samples = []
        for _ in range(max(1, n)):
            t0 = time.monotonic_ns()
            msg = self.request("clock")
            t1 = time.monotonic_ns()
            if "t_ns" not in msg:
                raise self.host.lost("qprof's agent", f"its clock answered {msg.get('error', msg)!r}")
            samples.append((t0, int(msg["t_ns"]), t1))
        return best_offset(samples)

    def close(self) -> None:
        """Tell the agent to exit, end the client, reap it; no signal cuts
        this half way."""
        if self.proc is None:
            return
        with interrupts.deferred():
            if self.proc.poll() is None:
                try:
                    self.proc.stdin.write(json.dumps({"op": "exit", "id": 0}) + "\n")
                    self.proc.stdin.close()  # EOF ends it too
                except (BrokenPipeError, ValueError, OSError):
                    pass
                try:
                    self.proc.wait(timeout=CLOSE_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
            self.proc.wait()
            remains.ledger().release("pids", self._claim)
            for pipe in (self.proc.stdin, self.proc.stdout):
                try:
                    pipe.close()
                except (OSError, ValueError):
                    pass
            if self._reader is not None:
                self._reader.join(timeout=1)
            if self._err is not None:
                self._err.close()
            self.proc = None
