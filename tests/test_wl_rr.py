# SPDX-License-Identifier: GPL-2.0-only
"""qprof-wl --pattern rr, run directly on 127.0.0.1: the client sends a
request every --period-us (open loop: each is due at t0 + k * period), the
server answers each with --payload bytes that repeat its sequence number,
and both check every byte. One "rr" record per answered request on the
client; a server with another --payload fails the client's check (exit 5);
udp and a period under 100 us are refused (exit 2); tcp on-demand opens a
connection when every open one waits for a reply."""

import json
import resource
import subprocess
from contextlib import contextmanager

import pytest

from qprof.collectors.controlled import unpacked
from qprof.collectors.workload import WorkloadExit
from qprof.describe import transports

from conftest import REPO, free_port, most_at_once, needs_build

pytestmark = [pytest.mark.system, needs_build]
WL = str(REPO / "build" / "bin" / "qprof-wl")
PERIOD_US = 5000
PAYLOAD = 256
DURATION_MS = 500
WL_RR_DRAIN_MIN_NS = 2_000_000_000  # workloads/wl.h: the wait for replies after the last due time

MODES = {
    "quic-per-request": ("quic", ["--rr-streams", "per-request"]),
    "quic-one": ("quic", ["--rr-streams", "one"]),
    "tcp": ("tcp", []),
    "tcp-tls-one": ("tcp-tls", ["--tcp-conns", "one"]),
    "tcp-tls-on-demand": ("tcp-tls", ["--tcp-conns", "on-demand"]),
    # The other QUIC implementations, transports of qprof-wl's.
    "ngtcp2-per-request": ("ngtcp2", []),
    "quinn-per-request": ("quinn", []),
    "quinn-one": ("quinn", ["--rr-streams", "one"]),
    "quiche-per-request": ("quiche", []),
    "quiche-one": ("quiche", ["--rr-streams", "one"]),
}


def wl(stack: str) -> str:
    """The workload binary of a stack (transports.Stack.workload)."""
    return str(REPO / "build" / "bin" / transports.STACKS[stack].workload)


@contextmanager
def launched(argv, control=False):
    """One qprof-wl process, killed and reaped on every way out."""
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE if control else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        bufsize=1,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def events(out: str, name: str) -> list:
    """The events called name, packed records unpacked as qprof reads them."""
    return [e for line in out.splitlines() for e in unpacked(line.encode()) if e["event"] == name]


def rr(
    stack,
    cert,
    client_args=(),
    payload=PAYLOAD,
    server_payload=None,
    period_us=PERIOD_US,
    duration_ms=DURATION_MS,
    server_args=(),
):
    """Server and client of one rr run; both their exit codes and outputs,
    and how often the client blocked (its voluntary context switches)."""
    common = ["--stack", stack, "--addr", "127.0.0.1", "--port", str(free_port()), "--pattern", "rr"]
    server_argv = [wl(stack), *common, "--role", "server", *cert, "--payload", str(server_payload or payload)]
    server_argv += server_args
    with launched(server_argv) as server:
        ready = server.stdout.readline()
        assert '"ready"' in ready, ready + server.stderr.read()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        client = subprocess.run(
            [wl(stack), *common, "--role", "client", "--payload", str(payload), "--period-us", str(period_us)]
            + ["--duration-ms", str(duration_ms), *client_args],
            capture_output=True,
            text=True,
            timeout=60,
        )
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        out, err = server.communicate(timeout=30)  # it ends once the client has gone
    blocked = after.ru_nvcsw - before.ru_nvcsw
    return client, subprocess.CompletedProcess(server_argv, server.returncode, ready + out, err), blocked


def check_schedule(answers: list, period_us: int) -> None:
    """Open loop: request k is due at t0 + k * period whatever the replies
    did, and it is sent at or after that, and answered after."""
    answers = sorted(answers, key=lambda e: e["seq"])
    assert [e["seq"] for e in answers] == list(range(len(answers)))
    for a, b in zip(answers, answers[1:]):
        assert b["due_ns"] - a["due_ns"] == period_us * 1000, (a, b)
    for e in answers:
        assert e["due_ns"] <= e["sent_ns"] < e["answered_ns"], e


@pytest.mark.parametrize("mode", MODES)
def test_rr_answers_every_request_on_schedule(mode, cert):
    stack, args = MODES[mode]
    client, server, blocked = rr(stack, cert, args)
    assert client.returncode == 0, client.stderr
    assert server.returncode == 0, server.stderr
    assert client.stderr == "" and server.stderr == ""

    answers = events(client.stdout, "rr")
    check_schedule(answers, PERIOD_US)

    done = events(client.stdout, "done")[0]
    assert done["role"] == "client" and done["exit_code"] == 0 and done["pattern"] == "rr", done
    # Request k falls due at t0 + k * period while that is before t0 +
    # --duration-ms, and each tick of the timer sends every request due by
    # then, however late it runs: exactly duration / period fall due and go
    # out, at any speed. Each is answered (check_schedule: the first ones),
    # or the client gave up on it when its drain, from the last due time,
    # ran out.
    assert done["requests_due"] == done["requests_sent"] == DURATION_MS * 1000 // PERIOD_US, done
    assert done["requests_sent"] == done["responses"] + done["outstanding"], done
    assert done["responses"] == len(answers) and done["verified"] is True, done
    if done["outstanding"]:  # t0 is when the client started sending, after it connected
        assert done["t_ns"] >= done["t_connected_ns"] + DURATION_MS * 1_000_000 + WL_RR_DRAIN_MIN_NS, done
    assert done["connections_opened"] >= 1, done
    if "on-demand" in mode:  # a reply slower than a period opens another
        assert all(e["conn"] < done["connections_opened"] for e in answers), done
    else:
        assert {e["conn"] for e in answers} == {0} and done["connections_opened"] == 1, done
    assert done["app_bytes"] == len(answers) * PAYLOAD, done
    assert len(events(client.stdout, "connected")) == 1

    served = events(server.stdout, "done")[0]
    assert served["role"] == "server" and served["pattern"] == "rr" and served["verified"] is True, served
    assert served["requests_served"] >= done["responses"], served
    assert served["app_bytes"] == served["requests_served"] * PAYLOAD, served
    # Asleep between requests, not polling: the client blocks on its timer
    # until each request falls due (a voluntary context switch), where a
    # polling one would hardly ever block. A count, not a share of a CPU,
    # so it holds on a slower machine as long as a request's work fits in
    # its period.
    assert blocked >= done["requests_sent"], blocked


@pytest.mark.parametrize("payload", [16, 65536])
@pytest.mark.parametrize("mode", MODES)
def test_rr_payload_sizes(mode, payload, cert):
    stack, args = MODES[mode]
    client, server, _ = rr(stack, cert, args, payload=payload, duration_ms=200)
    assert client.returncode == 0, client.stderr
    assert server.returncode == 0, server.stderr
    answers = events(client.stdout, "rr")
    check_schedule(answers, PERIOD_US)
    done = events(client.stdout, "done")[0]
    assert done["payload"] == payload and done["verified"] is True, done
    assert done["responses"] == len(answers) > 0 and done["outstanding"] == 0, done
    assert done["app_bytes"] == len(answers) * payload, done


@pytest.mark.parametrize("server_payload", [128, 512])
@pytest.mark.parametrize("mode", MODES)
def test_rr_payload_mismatch_fails_the_check(mode, server_payload, cert):
    """A server with a smaller or a larger --payload: the first response
    fails the client's check, whatever the framing, and so does the first
    request the server's."""
    stack, args = MODES[mode]
    client, server, _ = rr(stack, cert, args, server_payload=server_payload, duration_ms=300)
    assert client.returncode == WorkloadExit.VERIFY, client.stderr
    assert len(client.stderr.splitlines()) == 1 and "content check" in client.stderr, client.stderr
    assert events(client.stdout, "rr") == []
    assert events(client.stdout, "done")[0]["verified"] is False
    assert server.returncode == WorkloadExit.VERIFY, server.stderr
    assert events(server.stdout, "done")[0]["verified"] is False


@pytest.mark.parametrize("mode", MODES)
def test_rr_request_and_response_sizes_apart(mode, cert):
    """secnetperf's rps sizes: 512-byte requests, 4000-byte responses. Each
    role checks what it receives at its own size; the client counts the
    response bytes it verified, the server the request bytes."""
    stack, args = MODES[mode]
    sizes = ["--request", "512", "--response", "4000"]
    client, server, _ = rr(stack, cert, [*args, *sizes], server_args=sizes)
    assert client.returncode == 0 and server.returncode == 0, client.stderr + server.stderr
    done = events(client.stdout, "done")[0]
    served = events(server.stdout, "done")[0]
    assert done["request"] == served["request"] == 512 and done["response"] == served["response"] == 4000
    assert "payload" not in done and done["verified"] is True
    assert done["app_bytes"] == done["responses"] * 4000, done
    assert served["app_bytes"] == served["requests_served"] * 512, served


@pytest.mark.parametrize("mode", ["quic-per-request", "tcp-tls-one"])
def test_rr_response_size_mismatch_fails_the_check(mode, cert):
    """The server answers with 3000 bytes where the client expects 4000."""
    stack, args = MODES[mode]
    expects = [*args, "--request", "512", "--response", "4000"]
    client, server, _ = rr(stack, cert, expects, server_args=["--request", "512", "--response", "3000"])
    assert client.returncode == WorkloadExit.VERIFY, client.stderr
    assert "--response" in client.stderr


def test_rr_ignores_io_size(cert):
    """qprof run passes --io-size to every pattern; rr's messages are --payload bytes."""
    io = ["--io-size", "131072"]
    client, server, _ = rr("tcp-tls", cert, io, duration_ms=100, server_args=io)
    assert client.returncode == 0 and server.returncode == 0, client.stderr + server.stderr
    assert events(client.stdout, "done")[0]["responses"] > 0


def test_rr_tcp_one_connection_answers_in_order(cert):
    client, _, _ = rr("tcp", cert, ["--tcp-conns", "one"], duration_ms=200)
    answers = events(client.stdout, "rr")
    assert [e["seq"] for e in answers] == list(range(len(answers)))  # head-of-line: in order
    assert events(client.stdout, "done")[0]["connections_opened"] == 1


def test_rr_on_demand_opens_connections_when_replies_overlap(cert):
    """64 KiB each way every 100 us: replies overlap, so requests go on new
    connections; none carries two requests at once."""
    client, server, _ = rr("tcp-tls", cert, ["--tcp-conns", "on-demand"], payload=65536, period_us=100, duration_ms=200)
    assert client.returncode == 0, client.stderr
    assert server.returncode == 0, server.stderr
    answers = events(client.stdout, "rr")
    check_schedule(answers, 100)
    done = events(client.stdout, "done")[0]
    opened = done["connections_opened"]
    assert all(e["conn"] < opened for e in answers), done
    # The most requests outstanding at once, from their own send and answer
    # times: each needed a connection of its own, so at least that many
    # opened; and a 64 KiB exchange each way outlasts a 100 us period (its
    # TLS alone is two 64 KiB records), so replies did overlap.
    peak = most_at_once([(e["sent_ns"], e["answered_ns"]) for e in answers])
    assert opened >= peak > 1, (opened, peak, done)
    assert done["requests_sent"] == done["responses"] + done["outstanding"], done
    assert events(server.stdout, "done")[0]["connections_accepted"] == opened
    by_conn = {}
    for e in sorted(answers, key=lambda e: e["sent_ns"]):
        by_conn.setdefault(e["conn"], []).append(e)
    for conn in by_conn.values():
        for a, b in zip(conn, conn[1:]):
            assert b["sent_ns"] >= a["answered_ns"], (a, b)  # an idle connection only


@pytest.mark.parametrize("mode", ["quic-per-request", "tcp-tls-on-demand"])
def test_rr_control_marks_stop_and_exit(mode, cert):
    """Under --control: marks count requests and responses, "stop" ends the
    client's sending and it reports once the replies are in; the server
    reports once the client has gone, answers marks still, and goes on
    "exit"."""
    stack, args = MODES[mode]
    common = ["--stack", stack, "--port", str(free_port()), "--pattern", "rr", "--payload", str(PAYLOAD), "--control"]

    def until(p, name):
        for line in p.stdout:
            e = json.loads(line)
            if e["event"] == name:
                return e
        raise AssertionError(f"no {name} event: {p.stderr.read()}")

    def send(p, line):
        p.stdin.write(line + "\n")
        p.stdin.flush()

    def mark(p):
        send(p, "mark m")
        return until(p, "mark")

    server_argv = [WL, *common, "--role", "server", *cert]
    client_argv = [WL, *common, "--role", "client", "--period-us", "2000", "--wait-start", *args]
    with launched(server_argv, control=True) as server, launched(client_argv, control=True) as client:
        assert '"ready"' in server.stdout.readline()
        m = mark(client)
        assert m["requests"] == 0 and m["responses"] == 0, m
        send(client, "start")
        until(client, "connected")
        answers = 0
        for line in client.stdout:  # some answers, then stop
            answers += sum(e["event"] == "rr" for e in unpacked(line.encode()))
            if answers >= 20:
                break
        send(client, "stop")
        done = until(client, "done")
        assert done["exit_code"] == 0 and done["verified"] is True, done
        assert done["requests_sent"] == done["responses"] + done["outstanding"], done
        assert done["responses"] >= 20 and done["outstanding"] == 0, done
        m = mark(client)
        assert m["requests"] == done["requests_sent"] and m["responses"] == done["responses"], m
        send(client, "exit")
        assert client.wait(timeout=10) == 0, client.stderr.read()
        served = until(server, "done")  # the client has gone
        assert served["exit_code"] == 0 and served["requests_served"] == done["responses"], served
        m = mark(server)
        assert m["requests"] == done["responses"] and m["app_bytes"] == done["responses"] * PAYLOAD, m
        send(server, "exit")
        assert server.wait(timeout=10) == 0, server.stderr.read()


@pytest.mark.parametrize(
    "argv",
    [
        ["--stack", "udp", "--role", "client", "--payload", "256", "--period-us", "5000", "-t", "500"],
        ["--stack", "tcp", "--role", "client", "--payload", "256", "--period-us", "10", "-t", "500"],
        ["--stack", "tcp", "--role", "client", "--payload", "15", "--period-us", "5000", "-t", "500"],
        ["--stack", "tcp", "--role", "client", "--period-us", "5000", "-t", "500"],
        ["--stack", "tcp", "--role", "client", "--payload", "256", "-t", "500"],
        ["--stack", "tcp", "--role", "client", "--payload", "256", "--period-us", "5000"],
        ["--stack", "quic", "--role", "client", "--payload", "256", "--period-us", "5000", "--tcp-conns", "one"],
        ["--stack", "tcp", "--role", "client", "--payload", "256", "--period-us", "5000", "--rr-streams", "one"],
        ["--stack", "tcp", "--role", "client", "--payload", "256", "--period-us", "5000", "--tcp-conns", "many"],
        [
            "--stack",
            "tcp",
            "--role",
            "client",
            "--payload",
            "256",
            "--rr-mode",
            "closed",
            "--period-us",
            "5000",
            "-t",
            "500",
        ],
        [
            "--stack",
            "tcp",
            "--role",
            "client",
            "--payload",
            "256",
            "--rr-mode",
            "closed",
            "--tcp-conns",
            "on-demand",
            "-t",
            "500",
        ],
        ["--stack", "tcp", "--role", "client", "--payload", "256", "--period-us", "5000", "-n", "2", "-t", "500"],
        [
            "--stack",
            "tcp",
            "--role",
            "client",
            "--payload",
            "256",
            "--rr-mode",
            "closed",
            "--conns",
            "9",
            "-n",
            "15",
            "-t",
            "500",
        ],
        [
            "--stack",
            "tcp",
            "--role",
            "client",
            "--payload",
            "256",
            "--tcp-conns",
            "on-demand",
            "--conns",
            "2",
            "-t",
            "500",
        ],
    ],
    ids=[
        "udp",
        "period-10us",
        "payload-15",
        "no-payload",
        "no-period",
        "no-end",
        "quic-tcp-conns",
        "tcp-rr-streams",
        "tcp-conns-many",
        "closed-period",
        "closed-on-demand",
        "open-streams",
        "closed-135-tcp-conns",
        "on-demand-conns",
    ],
)
def test_rr_refuses_what_it_cannot_do(argv):
    r = subprocess.run([WL, *argv, "--pattern", "rr"], capture_output=True, text=True, timeout=10)
    assert r.returncode == WorkloadExit.USAGE, r.stderr
    assert len(r.stderr.splitlines()) == 1, r.stderr
    assert r.stdout == ""
