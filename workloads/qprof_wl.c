// SPDX-License-Identifier: GPL-2.0-only
/*
 * qprof-wl: the workload qprof measures, a bulk upload, a series of
 * downloads or requests answered on a schedule. One program, a server and
 * a client role per stack; events and the final report are JSON lines on
 * stdout, messages on stderr.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "wl_role.h"

/* clang-format off: the help text as it prints */
static const char usage[] =
	"Usage: qprof-wl --stack STACK --role server|client [OPTIONS]\n"
	"\n"
	"  -s, --stack STACK        quic (msquic), ngtcp2 (ngtcp2 with GnuTLS), tcp, tcp-tls,\n"
	"                           tcp-ktls, udp, or a QUIC library's transport in a library\n"
	"                           of its own, lib/libqprof-wl-STACK.so\n"
	"  -r, --role ROLE          server or client; bulk: the client sends and the server\n"
	"                           verifies, download: the other way round, rr: both send\n"
	"                           and verify\n"
	"  -a, --addr IPV4          server: address to listen on; client: to connect to\n"
	"  -p, --port PORT          UDP/TCP port (default 4433)\n"
	"      --cert FILE          server certificate (PEM): the QUIC stacks, tcp-tls, tcp-ktls\n"
	"      --key FILE           server private key (PEM): the QUIC stacks, tcp-tls, tcp-ktls\n"
	"      --pattern P          bulk (default: one connection, the client uploads),\n"
	"                           download (--count connections, the server sends),\n"
	"                           rr (requests on a schedule, each answered; see below)\n"
	"                           or handshakes (new connections, --conns at once, each\n"
	"                           a checked 8-byte exchange, as secnetperf hps and netperf\n"
	"                           TCP_CRR; a download of 8 bytes, --conns at once)\n"
	"  -n, --streams N          bulk: QUIC stacks: streams in the one connection; tcp,\n"
	"                           tcp-tls, tcp-ktls: connections, a thread each (default 1);\n"
	"                           with --direction both, N each way (--conns x N x 2 at most\n"
	"                           64);\n"
	"                           rr --rr-mode closed: requests in flight per connection\n"
	"      --conns N            bulk, rr, handshakes: connections, each with --streams (quic); tcp\n"
	"                           stacks: N x --streams connections (default 1; bulk: at\n"
	"                           most 64 streams; rr: at most 128 tcp connections)\n"
	"      --direction D        bulk: up (default: the client sends), down (the server\n"
	"                           sends; give both roles the same D) or both (N streams\n"
	"                           each way, as iperf3 --bidir)\n"
	"  -t, --duration-ms MS     the sender: send for MS after the handshake (rr: requests\n"
	"                           fall due for MS)\n"
	"  -b, --bytes N            the sender: send N bytes per stream, then FIN\n"
	"      --proto P            bulk, QUIC stacks: qprof (default) or perf, the QUIC\n"
	"                           performance protocol (draft-banks-quic-performance, ALPN\n"
	"                           perf): each stream bidirectional, the client's first 8\n"
	"                           bytes the count it wants back (big-endian: 0 up, --bytes\n"
	"                           or 2^64-1 down, stopped at --duration-ms), answered after\n"
	"                           its FIN; the server needs no --duration-ms or --bytes\n"
	"      --verify V           bulk receiver: content (default: every byte against the\n"
	"                           pattern) or size (a peer that is not qprof-wl: counted)\n"
	"      --size N             download: bytes the server sends per connection\n"
	"      --count N            download: connections, one after another (default 1);\n"
	"                           handshakes: connections in all; rr --rr-mode closed:\n"
	"                           requests in all; then the client ends (the server too)\n"
	"      --resume             download, handshakes; QUIC stacks, tcp-tls, tcp-ktls: the client\n"
	"                           resumes each\n"
	"                           connection after the first with the session ticket the\n"
	"                           previous one got (quic: and sends its request as 0-RTT);\n"
	"                           the quic server issues tickets and takes 0-RTT (OpenSSL\n"
	"                           servers issue tickets anyway)\n"
	"      --period-us N        rr client: microseconds from one request's due time to the\n"
	"                           next, at least 100; handshakes client: from one\n"
	"                           connection's due time to the next (an open loop; without\n"
	"                           it, a new connection as each closes)\n"
	"      --payload N          rr: bytes of each request and of each response, 16 to\n"
	"                           16777216; give both roles the same N\n"
	"      --request N          rr: bytes of each request (default --payload), 16 to 16777216\n"
	"      --response N         rr: bytes of each response (default --payload); give both\n"
	"                           roles the same --request and --response\n"
	"      --rr-streams S       rr, QUIC stacks, client: per-request (default: a new\n"
	"                           bidirectional stream for each request, as HTTP/3) or one\n"
	"                           (one stream carries every request and response, back to\n"
	"                           back)\n"
	"      --rr-mode M          rr client: open (default: requests on the --period-us\n"
	"                           schedule) or closed (the next request goes when an\n"
	"                           answer comes, as secnetperf rps/latency, netperf TCP_RR)\n"
	"      --app P              rr: each message an HTTP message whose body it is, a POST\n"
	"                           and its 200: h1 (tcp stacks: HTTP/1.1, http-parser), h2 (tcp\n"
	"                           stacks: HTTP/2, a stream per request, nghttp2) or h3 (quic:\n"
	"                           HTTP/3 on a stream per request, nghttp3)\n"
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
	"      --pacing on|off      quic: msquic's send pacing (PacingEnabled; default: msquic's, on)\n"
	"      --quic-cc C          quic: congestion control, cubic (msquic's default) or bbr\n"
	"      --ecn on|off         quic: msquic's ECN (EcnEnabled; default: msquic's, off)\n"
	"      --encrypt on|off     quic: off asks for 1-RTT packets without encryption\n"
	"                           (QUIC_PARAM_CONN_DISABLE_1RTT_ENCRYPTION, as secnetperf\n"
	"                           -encrypt:0); it takes effect only if both roles ask\n"

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
	"In bulk the receiving role's marks and \"done\" carry stream_bytes: the bytes\n"
	"it verified on each stream (quic) or connection (tcp stacks), as a JSON array\n"
	"in the order they started or were accepted, one entry per one seen so far;\n"
	"with --direction both, up streams first, each role's entries for the streams\n"
	"it sends 0, and each role's marks and \"done\" add sent_bytes. A down stream\n"
	"starts with the client's 8-byte request (wl_bulk.c); with quic, both ways\n"
	"take two connections, the up streams on one and the down streams on the other.\n"
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
	"(t0: the client starts sending, once its connections are up) and goes\n"
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
	"as an \"rr\" record (many to an \"rr_batch\" line: wl.h, wl_emit_packed):\n"
	"seq; due_ns; sent_ns (its first write call, quic: StreamSend);\n"
	"answered_ns (its last byte read), all CLOCK_MONOTONIC ns; conn (the\n"
	"connection's index from 0). --rr-mode closed has no schedule:\n"
	"each connection keeps its requests in flight (quic: --streams, tcp: one, on\n"
	"--conns x --streams connections), an answer sends the next at once, and a\n"
	"request's due_ns is its sent_ns. After --duration-ms or \"stop\" no request\n"
	"falls due; the client waits up to max(2 s, 10 periods) for the replies,\n"
	"and its \"done\" adds pattern, payload, rr_mode, period_us (open),\n"
	"requests_due, requests_sent, responses, late (open: answered more\n"
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

/* F_PATTERN: a pattern's word, one of those WL_PATTERN entered (wl_role.h). */
enum flag_kind { F_STR, F_BOOL, F_NUM, F_CHOICE, F_PATTERN };

/*
 * Every flag once: its field in struct wl_opts, its range or choices, the
 * stacks it is for, and whether it is some patterns' only (each pattern
 * names those it takes, in its own file). A flag given (its field moved
 * off the default) outside those is refused by its name. tests/test_wl_contract.py
 * reads this table against qprof's own (describe/options.py): every flag
 * qprof passes exists here, takes the same choices and is not refused for
 * a stack or pattern qprof passes it with.
 */
struct flag {
	const char *name;
	char short_name; /* 0: long only */
	enum flag_kind kind;
	size_t off, size; /* the field; F_NUM is stored at its width */
	uint64_t lo, hi;  /* F_NUM */
	bool pow2;	  /* F_NUM: a power of two */
	const char *unit; /* F_NUM: in the refusal */
	const char *choices;
	const char *stacks; /* "a|b"; NULL: every stack */
	bool some_patterns; /* for the patterns whose flags name it (wl_role.h); false: every one */
	bool hidden;	    /* not in --help: the tests' */
};

#define FLAG(n, s, k, f)                                                           \
	.name = n, .short_name = s, .kind = k, .off = offsetof(struct wl_opts, f), \
	.size = sizeof(((struct wl_opts *)0)->f)
#define TCP_STACKS "tcp|tcp-tls|tcp-ktls"
/*
 * A QUIC library's transport in a library of its own, which wl_role_run
 * loads for a --stack this program does not hold (wl_plugin.c): quiche's,
 * quinn's, or a user's, lib/libqprof-wl-STACK.so.
 */
#define PLUGIN "PLUGIN"
#define QUIC_STACKS "quic|ngtcp2|" PLUGIN
#define BUILTIN_STACKS "quic|ngtcp2|" TCP_STACKS "|udp"

/* clang-format off: one row a flag */
static const struct flag flags[] = {
	{FLAG("stack", 's', F_CHOICE, stack), .choices = QUIC_STACKS "|" TCP_STACKS "|udp"},
	{FLAG("role", 'r', F_CHOICE, role), .choices = "server|client"},
	{FLAG("addr", 'a', F_STR, addr)},
	{FLAG("port", 'p', F_NUM, port), .lo = 1, .hi = 65535},
	{FLAG("cert", 0, F_STR, cert)},
	{FLAG("key", 0, F_STR, key)},
	{FLAG("pattern", 0, F_PATTERN, pattern)},
	{FLAG("streams", 'n', F_NUM, streams), .lo = 1, .hi = 1000}, /* bulk: check_rules */
	{FLAG("conns", 0, F_NUM, conns), .lo = 1, .hi = 64, .some_patterns = true},
	{FLAG("direction", 0, F_CHOICE, direction), .choices = "up|down|both",
	 .stacks = QUIC_STACKS "|" TCP_STACKS, .some_patterns = true},
	{FLAG("duration-ms", 't', F_NUM, duration_ms), .lo = 1, .hi = UINT64_MAX,
	 .some_patterns = true},
	{FLAG("bytes", 'b', F_NUM, bytes), .lo = 1, .hi = UINT64_MAX, .some_patterns = true},
	{FLAG("size", 0, F_NUM, size), .lo = 1, .hi = UINT64_MAX, .some_patterns = true},
	{FLAG("count", 0, F_NUM, count), .lo = 1, .hi = UINT64_MAX, .some_patterns = true},
	{FLAG("resume", 0, F_BOOL, resume), .stacks = QUIC_STACKS "|tcp-tls|tcp-ktls",
	 .some_patterns = true},
	{FLAG("period-us", 0, F_NUM, period_us), .lo = WL_RR_PERIOD_MIN_US,
	 .hi = WL_RR_PERIOD_MAX_US, .unit = " microseconds", .some_patterns = true},
	{FLAG("payload", 0, F_NUM, payload), .lo = WL_RR_PAYLOAD_MIN, .hi = WL_RR_PAYLOAD_MAX,
	 .unit = " bytes", .some_patterns = true},
	{FLAG("request", 0, F_NUM, request), .lo = WL_RR_PAYLOAD_MIN, .hi = WL_RR_PAYLOAD_MAX,
	 .unit = " bytes", .some_patterns = true},
	{FLAG("response", 0, F_NUM, response), .lo = WL_RR_PAYLOAD_MIN, .hi = WL_RR_PAYLOAD_MAX,
	 .unit = " bytes", .some_patterns = true},
	{FLAG("rr-streams", 0, F_CHOICE, rr_streams), .choices = "per-request|one",
	 .stacks = QUIC_STACKS, .some_patterns = true},
	{FLAG("tcp-conns", 0, F_CHOICE, tcp_conns), .choices = "one|on-demand",
	 .stacks = TCP_STACKS, .some_patterns = true},
	{FLAG("rr-mode", 0, F_CHOICE, rr_mode), .choices = "open|closed", .some_patterns = true},
	{FLAG("app", 0, F_CHOICE, app), .choices = "h1|h2|h3", .stacks = QUIC_STACKS "|" TCP_STACKS,
	 .some_patterns = true},
	{FLAG("tcp-cc", 0, F_STR, tcp_cc), .stacks = TCP_STACKS},
	{FLAG("io-size", 0, F_NUM, io_size), .lo = 1024, .hi = 1u << 20, .pow2 = true,
	 .unit = " bytes"},
	{FLAG("exec-profile", 0, F_CHOICE, exec_profile), .choices = "lowlat|maxtput"},
	{FLAG("pacing", 0, F_CHOICE, pacing), .choices = "on|off", .stacks = "quic"},
	{FLAG("quic-cc", 0, F_CHOICE, quic_cc), .choices = "cubic|bbr", .stacks = "quic"},
	{FLAG("ecn", 0, F_CHOICE, ecn), .choices = "on|off", .stacks = "quic"},
	{FLAG("encrypt", 0, F_CHOICE, encrypt), .choices = "on|off", .stacks = "quic"},
	{FLAG("tls", 0, F_STR, tls_version)}, /* wl_tcp.c's check: exit 9, as for a cipher */
	{FLAG("cipher", 0, F_STR, cipher)},
	{FLAG("sendfile", 0, F_BOOL, sendfile), .some_patterns = true},
	{FLAG("send-mode", 0, F_CHOICE, send_mode), .choices = "sendmsg|sendmmsg|gso",
	 .stacks = "udp"},
	{FLAG("batch", 0, F_NUM, batch), .lo = 1, .hi = 65535, .stacks = "udp"},
	{FLAG("dgram-size", 0, F_NUM, dgram_size), .lo = 1, .hi = 65535, .stacks = "udp"},
	{FLAG("gro", 0, F_CHOICE, gro), .choices = "on|off", .stacks = "udp"},
	{FLAG("proto", 0, F_CHOICE, proto), .choices = "qprof|perf", .stacks = QUIC_STACKS,
	 .some_patterns = true},
	{FLAG("verify", 0, F_CHOICE, verify), .choices = "content|size", .some_patterns = true},
	{FLAG("control", 0, F_BOOL, control)},
	{FLAG("wait-start", 0, F_BOOL, wait_start)},
	{FLAG("fault", 0, F_CHOICE, fault), .choices = "ktls-claim|one-accept", .hidden = true},
};
/* clang-format on */
#define NFLAGS (sizeof(flags) / sizeof(flags[0]))

static const struct wl_opts defaults = {
	.addr = "127.0.0.1",
	.port = 4433,
	.pattern = "bulk",
	.streams = 1,
	.io_size = 65536,
	.exec_profile = "lowlat",
	.tls_version = "1.3",
};

/* "a|b|c" as "a, b or c". */
static const char *words(const char *list, char *buf, size_t len)
{
	const char *last = strrchr(list, '|');
	size_t k = 0;

	for (; *list && k + 4 < len; list++) {
		if (!strncmp(list, PLUGIN, strlen(PLUGIN))) {
			k += (size_t)snprintf(buf + k, len - k, "%s",
					      "NAME (lib/libqprof-wl-NAME.so)");
			list += strlen(PLUGIN) - 1;
		} else if (*list != '|')
			buf[k++] = *list;
		else if (list == last)
			k += (size_t)snprintf(buf + k, len - k, " or ");
		else
			k += (size_t)snprintf(buf + k, len - k, ", ");
	}
	buf[k < len ? k : len - 1] = 0;
	return buf;
}

static bool in_list(const char *list, const char *v);

/* A name a plugin may have: lower-case letters, digits and '-' (it names a file). */
static bool plugin_name(const char *v)
{
	if (!*v || in_list(BUILTIN_STACKS, v))
		return false;
	for (; *v; v++)
		if (!((*v >= 'a' && *v <= 'z') || (*v >= '0' && *v <= '9') || *v == '-'))
			return false;
	return true;
}

/* v is one of list's |-separated words; the word PLUGIN is any stack a plugin may be. */
static bool in_list(const char *list, const char *v)
{
	size_t n = strlen(v);

	for (const char *p = list; p; p = strchr(p, '|'), p = p ? p + 1 : NULL) {
		if (!strncmp(p, v, n) && (p[n] == '|' || !p[n]))
			return true;
		if (!strncmp(p, PLUGIN, strlen(PLUGIN)) &&
		    (p[strlen(PLUGIN)] == '|' || !p[strlen(PLUGIN)]) && plugin_name(v))
			return true;
	}
	return false;
}

/* One flag's value into its field; 0, or the usage exit after saying why. */
static int set_flag(struct wl_opts *o, const struct flag *f, const char *arg)
{
	char *field = (char *)o + f->off, *end, buf[128], pbuf[128];
	unsigned long long v;

	switch (f->kind) {
	case F_BOOL: *(bool *)field = true; return 0;
	case F_PATTERN:
		if (!wl_pattern_named(arg)) {
			wl_warn("--%s must be %s, not %s", f->name,
				words(wl_pattern_words(pbuf, sizeof(pbuf)), buf, sizeof(buf)), arg);
			return WL_EXIT_USAGE;
		}
		*(const char **)field = arg;
		return 0;
	case F_CHOICE:
		if (!in_list(f->choices, arg)) {
			wl_warn("--%s must be %s, not %s", f->name,
				words(f->choices, buf, sizeof(buf)), arg);
			return WL_EXIT_USAGE;
		}
		/* fall through */
	case F_STR: *(const char **)field = arg; return 0;
	case F_NUM: break;
	}
	errno = 0;
	v = strtoull(arg, &end, 10);
	if (!*arg || *arg == '-' || *end || errno || v < f->lo || v > f->hi ||
	    (f->pow2 && (v & (v - 1)))) {
		if (f->hi == UINT64_MAX)
			wl_warn("--%s must be at least %llu, not %s", f->name,
				(unsigned long long)f->lo, arg);
		else
			wl_warn("--%s must be %s%llu to %llu%s, not %s", f->name,
				f->pow2 ? "a power of two from " : "", (unsigned long long)f->lo,
				(unsigned long long)f->hi, f->unit ? f->unit : "", arg);
		return WL_EXIT_USAGE;
	}
	/* Each range fits its field's type (int for --port and --streams). */
	if (f->size == sizeof(uint64_t)) {
		uint64_t w = v;
		memcpy(field, &w, sizeof(w));
	} else {
		uint32_t w = (uint32_t)v;
		memcpy(field, &w, sizeof(w));
	}
	return 0;
}

static int parse_flags(int argc, char **argv, struct wl_opts *o)
{
	struct option longopts[NFLAGS + 2] = {{0}};
	char shorts[2 * NFLAGS + 2] = "", *sp = shorts;
	size_t i;
	int c, code;

	for (i = 0; i < NFLAGS; i++) {
		longopts[i] = (struct option){
			flags[i].name, flags[i].kind == F_BOOL ? no_argument : required_argument,
			NULL, 256 + (int)i};
		if (flags[i].short_name) {
			*sp++ = flags[i].short_name;
			*sp++ = ':';
		}
	}
	longopts[NFLAGS] = (struct option){"help", no_argument, NULL, 'h'};
	*sp++ = 'h';
	*sp = 0;
	while ((c = getopt_long(argc, argv, shorts, longopts, NULL)) != -1) {
		if (c == 'h') {
			fputs(usage, stdout);
			return -1;
		}
		for (i = 0; i < NFLAGS && c < 256 && flags[i].short_name != c; i++)
			;
		if (c >= 256)
			i = (size_t)c - 256;
		if (i == NFLAGS) {
			fputs(usage, stderr);
			return WL_EXIT_USAGE;
		}
		code = set_flag(o, &flags[i], optarg);
		if (code)
			return code;
	}
	if (optind < argc) {
		wl_warn("unexpected argument %s; see --help", argv[optind]);
		return WL_EXIT_USAGE;
	}
	return 0;
}

/* A flag given outside the stacks or patterns it is for; 0 if none. */
static int check_scope(const struct wl_opts *o, const struct wl_pattern *p)
{
	char buf[128];
	size_t i;

	for (i = 0; i < NFLAGS; i++) {
		const struct flag *f = &flags[i];

		if (!memcmp((const char *)o + f->off, (const char *)&defaults + f->off, f->size))
			continue;
		if (f->stacks && !in_list(f->stacks, o->stack)) {
			wl_warn("--%s is for --stack %s, not %s", f->name,
				words(f->stacks, buf, sizeof(buf)), o->stack);
			return WL_EXIT_USAGE;
		}
		if (f->some_patterns && !in_list(p->flags, f->name)) {
			wl_warn("--%s is not for --pattern %s", f->name, o->pattern);
			return WL_EXIT_USAGE;
		}
	}
	return 0;
}

/*
 * The rules between flags that one flag's row cannot say, one sentence
 * each; a pattern's between its own flags are its (its resolve).
 */
static int check_rules(struct wl_opts *o, const struct wl_pattern *p)
{
	const bool client = !strcmp(o->role, "client");

	if (!p->on_datagrams && !strcmp(o->stack, "udp")) {
		wl_warn("--pattern %s is for quic, tcp, tcp-tls and tcp-ktls: udp has no stream to answer a request on",
			o->pattern);
		return WL_EXIT_USAGE;
	}
	if (p->tcp_conns_most && in_list(TCP_STACKS, o->stack) &&
	    (unsigned)(o->conns ? o->conns : 1) * o->streams > p->tcp_conns_most) {
		wl_warn("--conns x --streams is at most %u tcp connections for --pattern %s",
			p->tcp_conns_most, o->pattern);
		return WL_EXIT_USAGE;
	}
	if (o->app && (!strcmp(o->app, "h3") != in_list(QUIC_STACKS, o->stack))) {
		wl_warn("--app %s is for %s; --stack %s takes --app %s", o->app,
			!strcmp(o->app, "h3") ? "the QUIC stacks" : "the tcp stacks", o->stack,
			in_list(QUIC_STACKS, o->stack) ? "h3" : "h1 or h2");
		return WL_EXIT_USAGE;
	}
	if (o->app && !strcmp(o->app, "h2") && o->tcp_on_demand) {
		wl_warn("--tcp-conns on-demand is HTTP/1.1's: HTTP/2 puts every request on a stream of one connection");
		return WL_EXIT_USAGE;
	}
	if (o->app && o->rr_one_stream) {
		wl_warn("--rr-streams one is not HTTP/3, which puts each request on a stream of its own");
		return WL_EXIT_USAGE;
	}
	/* The sender's: a bulk upload's client, a download's server. */
	if (o->sendfile && client == p->server_sends) {
		wl_warn("--sendfile is for the sender: the client of a bulk upload, the server of a download");
		return WL_EXIT_USAGE;
	}
	if (o->duration_ms && o->bytes) {
		wl_warn("--duration-ms and --bytes exclude each other: give one");
		return WL_EXIT_USAGE;
	}
	if (!client && strcmp(o->stack, "tcp") && strcmp(o->stack, "udp") &&
	    (!o->cert || !o->key)) {
		wl_warn("the server needs --cert and --key");
		return WL_EXIT_USAGE;
	}
	if (o->wait_start && !o->control) {
		wl_warn("--wait-start needs --control (the start command comes on stdin)");
		return WL_EXIT_USAGE;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct wl_opts o = defaults;
	const struct wl_pattern *p;
	int code;

	code = parse_flags(argc, argv, &o);
	if (code)
		return code < 0 ? WL_EXIT_OK : code;
	if (!o.stack || !o.role) {
		wl_warn("--stack and --role are required; see --help");
		return WL_EXIT_USAGE;
	}
	p = wl_pattern_named(o.pattern);
	o.rr_one_stream = o.rr_streams && !strcmp(o.rr_streams, "one");
	o.tcp_on_demand = o.tcp_conns && !strcmp(o.tcp_conns, "on-demand");
	o.rr_closed = o.rr_mode && !strcmp(o.rr_mode, "closed");
	o.alpn = o.proto && !strcmp(o.proto, "perf") ? "perf" : "qprof";
	o.size_only = o.verify && !strcmp(o.verify, "size");
	code = check_scope(&o, p);
	if (!code)
		code = check_rules(&o, p);
	if (!code && p->resolve)
		code = p->resolve(&o, !strcmp(o.role, "client"));
	if (code)
		return code;
	wl_pattern_init(p->period ? p->period(&o) : o.io_size);
	return wl_role_run(&o);
}
