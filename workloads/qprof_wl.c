// SPDX-License-Identifier: GPL-2.0-only
/*
 * qprof-wl: the workload qprof measures, a bulk upload, a series of
 * downloads or requests answered on a schedule. One program, a server and
 * a client role per stack; events and the final report are JSON lines on
 * stdout, messages on stderr.
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "wl.h"

/* clang-format off: the help text as it prints */
static const char usage[] =
	"Usage: qprof-wl --stack STACK --role server|client [OPTIONS]\n"
	"\n"
	"  -s, --stack STACK        quic, tcp, tcp-tls, tcp-ktls or udp\n"
	"  -r, --role ROLE          server or client; bulk: the client sends and the server\n"
	"                           verifies, download: the other way round, rr: both send\n"
	"                           and verify\n"
	"  -a, --addr IPV4          server: address to listen on; client: to connect to\n"
	"  -p, --port PORT          UDP/TCP port (default 4433)\n"
	"      --cert FILE          server certificate (PEM): quic, tcp-tls, tcp-ktls\n"
	"      --key FILE           server private key (PEM): quic, tcp-tls, tcp-ktls\n"
	"      --pattern P          bulk (default: one connection, the client uploads),\n"
	"                           download (--count connections, the server sends) or\n"
	"                           rr (requests on a schedule, each answered; see below)\n"
	"  -n, --streams N          bulk: quic: streams in the one connection; tcp, tcp-tls,\n"
	"                           tcp-ktls: connections, a thread each (default 1)\n"
	"  -t, --duration-ms MS     client: send for MS after the handshake (rr: requests fall\n"
	"                           due for MS)\n"
	"  -b, --bytes N            client: send N bytes per stream, then FIN\n"
	"      --size N             download: bytes the server sends per connection\n"
	"      --count N            download: connections, one after another (default 1)\n"
	"      --resume             download, quic, tcp-tls, tcp-ktls: the client resumes each\n"
	"                           connection after the first with the session ticket the\n"
	"                           previous one got (quic: and sends its request as 0-RTT);\n"
	"                           the quic server issues tickets and takes 0-RTT (OpenSSL\n"
	"                           servers issue tickets anyway)\n"
	"      --period-us N        rr client: microseconds from one request's due time to the\n"
	"                           next, at least 100\n"
	"      --payload N          rr: bytes of each request and of each response, 16 to\n"
	"                           1048576; give both roles the same N\n"
	"      --rr-streams S       rr, quic client: per-request (default: a new bidirectional\n"
	"                           stream for each request, as HTTP/3) or one (one stream\n"
	"                           carries every request and response, back to back)\n"
	"      --tcp-cc NAME        tcp stacks: each socket's TCP congestion control\n"
	"                           (TCP_CONGESTION, as iperf3 -C); default: the namespace's\n"
	"      --tcp-conns C        rr, tcp stacks client: one (default: one connection,\n"
	"                           requests back to back, answers in order) or on-demand (a\n"
	"                           request goes on an idle connection, or on a new one if\n"
	"                           every open connection waits for a reply)\n"
	"      --io-size N          sender: bytes per send request, a power of two from\n"
	"                           1024 to 1048576 (default 65536); receiver: bytes per\n"
	"                           read (tcp); both roles: the payload pattern's period\n"
	"                           is max(N, 64K), so give both roles the same N\n"
	"      --exec-profile P     msquic execution profile: lowlat (default) or maxtput\n"
	"      --tls V              tcp-tls, tcp-ktls: TLS version 1.2 or 1.3 (default)\n"
	"      --cipher NAME        tcp-tls, tcp-ktls: OpenSSL cipher name (default AES-128-GCM:\n"
	"                           TLS_AES_128_GCM_SHA256, or ECDHE-ECDSA-AES128-GCM-SHA256 for 1.2)\n"
	"      --sendfile           tcp, tcp-ktls sender: sendfile() the data from a memfd\n"
	"      --send-mode M        udp client: gso (default: one sendmsg carries --batch datagrams\n"
	"                           with a UDP_SEGMENT cmsg), sendmmsg (--batch datagrams per call)\n"
	"                           or sendmsg (one datagram per call)\n"
	"      --batch N            udp client: datagrams per call, for gso at most 128 (older\n"
	"                           kernels: 64) and 65507 bytes in all, for sendmmsg at most 1024,\n"
	"                           for sendmsg 1; default for gso and sendmmsg alike, so the two\n"
	"                           compare at equal datagrams per call: floor(65507 / dgram-size),\n"
	"                           at most 64 (44 for 1472-byte datagrams)\n"
	"      --dgram-size N       udp client: UDP payload bytes per datagram, 16 to 65507\n"
	"                           (default 1472: a 1500-byte MTU less the IPv4 and UDP headers)\n"
	"      --gro on|off         udp server: the UDP_GRO socket option (default on)\n"
	"      --control            take commands on stdin (mark NAME, start, stop, exit)\n"
	"      --wait-start         client: connect only when \"start\" arrives on stdin\n"
	"  -h, --help\n"
	"\n"
	"With neither --duration-ms nor --bytes the client sends until told \"stop\".\n"
	"In bulk the server's marks and \"done\" carry stream_bytes: the bytes it\n"
	"verified on each stream (quic) or connection (tcp stacks), as a JSON array\n"
	"in the order they started or were accepted, one entry per one seen so far.\n"
	"\n"
	"download: on each connection the client sends an 8-byte request (--size,\n"
	"little-endian), the server answers with --size bytes of the pattern from\n"
	"offset 0 and ends the stream (quic: FIN on one bidirectional stream; tcp:\n"
	"FIN, after close_notify with TLS), the client checks every byte, closes,\n"
	"and only then opens the next connection. The client reports each in a\n"
	"\"download\" event: i, bytes, t_connect_ns (CLOCK_MONOTONIC when the connect\n"
	"started) and, as ns since then, tcp_handshake_ns (TLS over TCP),\n"
	"handshake_ns, first_byte_ns and complete_ns (the last byte checked); with\n"
	"TLS resumed and early_data as the library reports them; its own packet\n"
	"counters (retransmits, lost_packets for quic, packets_sent, packets_received).\n"
	"The server reports each connection in a \"served\" event: i, bytes, resumed,\n"
	"early_data (quic: a receive flagged 0-RTT) and its own counters.\n"
	"\"stop\" ends the client after the download under way. The server ends\n"
	"after --count downloads, on \"stop\", \"exit\" or EOF (--control), or when\n"
	"a download fails; marks carry app_bytes (client: checked, server: sent)\n"
	"and downloads (completed so far).\n"
	"\n"
	"udp: no reliability, no crypto. Each datagram starts with its sequence\n"
	"number (8 bytes, little-endian); the rest is pattern the server checks. -b N\n"
	"sends ceil(N / dgram-size) datagrams, the last one shorter (but at least 8\n"
	"bytes, so up to 7 more than N may go). The client ends\n"
	"with an end datagram carrying the count sent, repeated over ~30 ms; the\n"
	"server counts loss against it, and ends on it, on \"stop\", \"exit\" or EOF\n"
	"(--control), or 2 s after data stops coming. Duplicates are told apart from\n"
	"reordering within the last 65536 sequence numbers. --io-size is ignored.\n"
	"\n"
	"rr: request/response, open loop. Request k falls due at t0 + k * period\n"
	"(t0: the client starts sending, once its first connection is up) and goes\n"
	"out then, whatever the replies do; a client that falls behind (a send that\n"
	"would block, a new connection still opening) sends late, and the request\n"
	"keeps its due time as its reference. A request is N = --payload bytes: its\n"
	"sequence number (8 bytes, little-endian), then the pattern (byte q of a\n"
	"message is the pattern's byte at offset N + q); the response is N bytes\n"
	"that start with the same number. Both roles check every byte, and the\n"
	"client checks that each response answers the oldest request waiting on its\n"
	"connection or stream (exit 5 if not); a server answers a request that\n"
	"fails its check at once, then ends that connection or stream, and exits 5\n"
	"in the end. tcp on-demand opens at most 128 connections; past that a\n"
	"request waits for the first to fall idle. The client reports each answer\n"
	"in an \"rr\" event: seq; due_ns; sent_ns (its first write call, quic:\n"
	"StreamSend); answered_ns (its last byte read), all CLOCK_MONOTONIC ns;\n"
	"conn (tcp on-demand: the connection's index from 0, otherwise 0). After\n"
	"--duration-ms or \"stop\" no request falls due; the client waits up to max(2\n"
	"s, 10 periods) for the replies, and its \"done\" adds pattern, payload,\n"
	"period_us, requests_due, requests_sent, responses, late (answered more\n"
	"than a period after due), outstanding (sent, never answered) and\n"
	"connections_opened. The server answers every request it frames with its\n"
	"own --payload until the client's connections have all closed, or on\n"
	"\"stop\", \"exit\" or EOF (--control); its \"done\" adds requests_served and\n"
	"connections_accepted. Marks add requests (client: sent, server: served)\n"
	"and responses (client). --io-size is ignored.\n"
	"\n"
	"EXAMPLES:\n"
	"  qprof-wl -s quic -r server -a 127.0.0.1 --cert c.pem --key k.pem\n"
	"  qprof-wl -s quic -r client -a 127.0.0.1 -t 5000 -n 4\n"
	"  qprof-wl -s tcp-tls -r server -a 127.0.0.1 --cert c.pem --key k.pem\n"
	"  qprof-wl -s tcp-tls -r client -a 127.0.0.1 -t 5000 --tls 1.2\n"
	"  qprof-wl -s udp -r server -a 127.0.0.1 -p 5001 --control --gro off\n"
	"  qprof-wl -s udp -r client -a 127.0.0.1 -p 5001 -t 2000 --send-mode sendmmsg --batch 16\n"
	"  qprof-wl -s quic -r server --cert c.pem --key k.pem --pattern download --size 1000000\n"
	"  qprof-wl -s quic -r client --pattern download --size 1000000 --count 10 --resume\n"
	"  qprof-wl -s tcp-tls -r server --cert c.pem --key k.pem --pattern rr --payload 1024\n"
	"  qprof-wl -s tcp-tls -r client --pattern rr --payload 1024 --period-us 1000 -t 5000 \\\n"
	"           --tcp-conns on-demand\n";
/* clang-format on */

/* wl_tcp.c's; the tests' hidden --fault (collectors/faults.py) */
extern const char *wl_tcp_fault;

static int parse_u64(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;

	if (!s || !*s || *s == '-')
		return -1;
	v = strtoull(s, &end, 10);
	if (*end)
		return -1;
	*out = v;
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"stack", required_argument, NULL, 's'},
		{"role", required_argument, NULL, 'r'},
		{"addr", required_argument, NULL, 'a'},
		{"port", required_argument, NULL, 'p'},
		{"cert", required_argument, NULL, 'C'},
		{"key", required_argument, NULL, 'K'},
		{"streams", required_argument, NULL, 'n'},
		{"duration-ms", required_argument, NULL, 't'},
		{"bytes", required_argument, NULL, 'b'},
		{"io-size", required_argument, NULL, 'I'},
		{"exec-profile", required_argument, NULL, 'E'},
		{"control", no_argument, NULL, 'X'},
		{"wait-start", no_argument, NULL, 'W'},
		{"tls", required_argument, NULL, 'T'},
		{"cipher", required_argument, NULL, 'P'},
		{"sendfile", no_argument, NULL, 'F'},
		{"send-mode", required_argument, NULL, 'M'},
		{"batch", required_argument, NULL, 'B'},
		{"dgram-size", required_argument, NULL, 'D'},
		{"gro", required_argument, NULL, 'G'},
		{"pattern", required_argument, NULL, 'Y'},
		{"size", required_argument, NULL, 'S'},
		{"count", required_argument, NULL, 'U'},
		{"resume", no_argument, NULL, 'R'},
		{"period-us", required_argument, NULL, 'Q'},
		{"payload", required_argument, NULL, 'L'},
		{"rr-streams", required_argument, NULL, 'Z'},
		{"tcp-conns", required_argument, NULL, 'O'},
		{"tcp-cc", required_argument, NULL, 'V'},
		{"fault", required_argument, NULL, 'f'}, /* hidden: the tests' */
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	struct wl_opts o = {
		.addr = "127.0.0.1",
		.port = 4433,
		.streams = 1,
		.io_size = 65536,
		.exec_profile = "lowlat",
		.tls_version = "1.3",
	};
	const char *pattern = "bulk", *rr_streams = NULL, *tcp_conns = NULL;
	bool tcp_stack;
	uint32_t period;
	uint64_t v;
	int c;

	while ((c = getopt_long(argc, argv, "s:r:a:p:n:t:b:h", longopts, NULL)) != -1) {
		switch (c) {
		case 's': o.stack = optarg; break;
		case 'r': o.role = optarg; break;
		case 'a': o.addr = optarg; break;
		case 'C': o.cert = optarg; break;
		case 'K': o.key = optarg; break;
		case 'E': o.exec_profile = optarg; break;
		case 'X': o.control = true; break;
		case 'W': o.wait_start = true; break;
		case 'T': o.tls_version = optarg; break;
		case 'P': o.cipher = optarg; break;
		case 'F': o.sendfile = true; break;
		case 'M': o.send_mode = optarg; break;
		case 'G': o.gro = optarg; break;
		case 'Y': pattern = optarg; break;
		case 'R': o.resume = true; break;
		case 'Z': rr_streams = optarg; break;
		case 'O': tcp_conns = optarg; break;
		case 'V': o.tcp_cc = optarg; break;
		case 'f':
			if (strcmp(optarg, "ktls-claim")) {
				wl_warn("--fault must be ktls-claim, not %s", optarg);
				return WL_EXIT_USAGE;
			}
			wl_tcp_fault = optarg;
			break;
		case 'Q':
			if (parse_u64(optarg, &v) || v < WL_RR_PERIOD_MIN_US ||
			    v > WL_RR_PERIOD_MAX_US) {
				wl_warn("--period-us must be %u to %llu microseconds, not %s",
					WL_RR_PERIOD_MIN_US, WL_RR_PERIOD_MAX_US, optarg);
				return WL_EXIT_USAGE;
			}
			o.period_us = v;
			break;
		case 'L':
			if (parse_u64(optarg, &v) || v < WL_RR_PAYLOAD_MIN ||
			    v > WL_RR_PAYLOAD_MAX) {
				wl_warn("--payload must be %u to %u bytes, not %s",
					WL_RR_PAYLOAD_MIN, WL_RR_PAYLOAD_MAX, optarg);
				return WL_EXIT_USAGE;
			}
			o.payload = (uint32_t)v;
			break;
		case 'S':
			if (parse_u64(optarg, &v) || v == 0)
				goto bad_arg;
			o.size = v;
			break;
		case 'U':
			if (parse_u64(optarg, &v) || v == 0)
				goto bad_arg;
			o.count = v;
			break;
		case 'B':
			if (parse_u64(optarg, &v) || v == 0 || v > 65535)
				goto bad_arg;
			o.batch = (uint32_t)v;
			break;
		case 'D':
			if (parse_u64(optarg, &v) || v == 0 || v > 65535)
				goto bad_arg;
			o.dgram_size = (uint32_t)v;
			break;
		case 'p':
			if (parse_u64(optarg, &v) || v == 0 || v > 65535)
				goto bad_arg;
			o.port = (int)v;
			break;
		case 'n':
			if (parse_u64(optarg, &v) || v == 0 || v > 64)
				goto bad_arg;
			o.streams = (int)v;
			break;
		case 't':
			if (parse_u64(optarg, &v) || v == 0)
				goto bad_arg;
			o.duration_ms = v;
			break;
		case 'b':
			if (parse_u64(optarg, &v) || v == 0)
				goto bad_arg;
			o.bytes = v;
			break;
		case 'I':
			if (parse_u64(optarg, &v) || v < 1024 || v > (1u << 20) || (v & (v - 1)))
				goto bad_arg;
			o.io_size = (uint32_t)v;
			break;
		case 'h': fputs(usage, stdout); return WL_EXIT_OK;
		default: fputs(usage, stderr); return WL_EXIT_USAGE;
		}
	}
	if (!o.stack || !o.role) {
		wl_warn("--stack and --role are required; see --help");
		return WL_EXIT_USAGE;
	}
	if (strcmp(o.role, "server") && strcmp(o.role, "client")) {
		wl_warn("--role must be server or client, not %s", o.role);
		return WL_EXIT_USAGE;
	}
	if (!strcmp(pattern, "download")) {
		o.download = true;
	} else if (!strcmp(pattern, "rr")) {
		o.rr = true;
	} else if (strcmp(pattern, "bulk")) {
		wl_warn("--pattern must be bulk, download or rr, not %s", pattern);
		return WL_EXIT_USAGE;
	}
	if (o.rr && !strcmp(o.stack, "udp")) {
		wl_warn("--pattern rr is for quic, tcp, tcp-tls and tcp-ktls: udp has no stream to answer a request on");
		return WL_EXIT_USAGE;
	}
	tcp_stack = !strcmp(o.stack, "tcp") || !strcmp(o.stack, "tcp-tls") ||
		    !strcmp(o.stack, "tcp-ktls");
	if (!o.rr && (o.period_us || o.payload || rr_streams || tcp_conns)) {
		wl_warn("--period-us, --payload, --rr-streams and --tcp-conns are for --pattern rr");
		return WL_EXIT_USAGE;
	}
	if (o.rr && !o.payload) {
		wl_warn("--pattern rr needs --payload N, the bytes of each request and each response, on both roles");
		return WL_EXIT_USAGE;
	}
	if (o.rr && !strcmp(o.role, "client") && !o.period_us) {
		wl_warn("--pattern rr needs --period-us N on the client, the microseconds between requests");
		return WL_EXIT_USAGE;
	}
	if (o.rr && (o.bytes || o.streams != 1 || o.size || o.count || o.resume || o.sendfile)) {
		wl_warn("--bytes, --streams, --size, --count, --resume and --sendfile are not for --pattern rr: its messages are --payload bytes");
		return WL_EXIT_USAGE;
	}
	if (rr_streams && strcmp(o.stack, "quic")) {
		wl_warn("--rr-streams is for --stack quic; TCP stacks have --tcp-conns");
		return WL_EXIT_USAGE;
	}
	if (rr_streams && strcmp(rr_streams, "per-request") && strcmp(rr_streams, "one")) {
		wl_warn("--rr-streams must be per-request or one, not %s", rr_streams);
		return WL_EXIT_USAGE;
	}
	o.rr_one_stream = rr_streams && !strcmp(rr_streams, "one");
	if (tcp_conns && !tcp_stack) {
		wl_warn("--tcp-conns is for --stack tcp, tcp-tls and tcp-ktls; quic has --rr-streams");
		return WL_EXIT_USAGE;
	}
	if (o.tcp_cc && !tcp_stack) {
		wl_warn("--tcp-cc is for --stack tcp, tcp-tls and tcp-ktls; msquic has its own");
		return WL_EXIT_USAGE;
	}
	if (tcp_conns && strcmp(tcp_conns, "one") && strcmp(tcp_conns, "on-demand")) {
		wl_warn("--tcp-conns must be one or on-demand, not %s", tcp_conns);
		return WL_EXIT_USAGE;
	}
	o.tcp_on_demand = tcp_conns && !strcmp(tcp_conns, "on-demand");
	if (o.download && !strcmp(o.stack, "udp")) {
		wl_warn("--pattern download is for quic, tcp, tcp-tls and tcp-ktls: udp has no stream to answer a request on");
		return WL_EXIT_USAGE;
	}
	if (!o.download && (o.size || o.count || o.resume)) {
		wl_warn("--size, --count and --resume are for --pattern download");
		return WL_EXIT_USAGE;
	}
	if (o.download && !o.size) {
		wl_warn("--pattern download needs --size N, the bytes per download, on both roles");
		return WL_EXIT_USAGE;
	}
	if (o.download && (o.duration_ms || o.bytes || o.streams != 1)) {
		wl_warn("--duration-ms, --bytes and --streams are for --pattern bulk; a download is --size bytes on one stream");
		return WL_EXIT_USAGE;
	}
	if (o.resume && strcmp(o.stack, "quic") && strcmp(o.stack, "tcp-tls") &&
	    strcmp(o.stack, "tcp-ktls")) {
		wl_warn("--resume needs TLS: --stack quic, tcp-tls or tcp-ktls");
		return WL_EXIT_USAGE;
	}
	if (o.download && !o.count)
		o.count = 1;
	if (o.duration_ms && o.bytes) {
		wl_warn("--duration-ms and --bytes exclude each other: give one");
		return WL_EXIT_USAGE;
	}
	if (strcmp(o.stack, "udp") && (o.send_mode || o.batch || o.dgram_size || o.gro)) {
		wl_warn("--send-mode, --batch, --dgram-size and --gro are for --stack udp");
		return WL_EXIT_USAGE;
	}
	if (!strcmp(o.role, "server") && strcmp(o.stack, "tcp") && strcmp(o.stack, "udp") &&
	    (!o.cert || !o.key)) {
		wl_warn("the server needs --cert and --key");
		return WL_EXIT_USAGE;
	}
	if (!strcmp(o.role, "client") && o.rr && !o.duration_ms && !o.control) {
		wl_warn("--pattern rr: the client needs --duration-ms, or --control to send until \"stop\"");
		return WL_EXIT_USAGE;
	}
	if (!strcmp(o.role, "client") && !o.download && !o.duration_ms && !o.bytes && !o.control) {
		wl_warn("the client needs --duration-ms, --bytes or --control");
		return WL_EXIT_USAGE;
	}
	if (o.wait_start && !o.control) {
		wl_warn("--wait-start needs --control (the start command comes on stdin)");
		return WL_EXIT_USAGE;
	}
	if (o.rr) {
		/* A period of at least 2 --payload: a message's pattern is one piece. */
		for (period = 1024; period < 2 * o.payload; period <<= 1)
			;
		wl_rr_init(&o);
		wl_pattern_init(period);
	} else {
		wl_pattern_init(o.io_size);
	}
	if (!strcmp(o.stack, "quic"))
		return wl_quic_run(&o);
	if (tcp_stack)
		return wl_tcp_run(&o);
	if (!strcmp(o.stack, "udp"))
		return wl_udp_run(&o);
	wl_warn("unknown --stack %s; this build has: quic, tcp, tcp-tls, tcp-ktls, udp", o.stack);
	return WL_EXIT_USAGE;

bad_arg:
	wl_warn("bad value for an option: %s", optarg);
	return WL_EXIT_USAGE;
}
