// SPDX-License-Identifier: GPL-2.0-only
/* Shared by every role of the qprof workload (qprof-wl). */
#ifndef QPROF_WL_H
#define QPROF_WL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stddef.h>

/* Exit codes, mirrored by collectors/workload.py (WorkloadExit). */
enum wl_exit {
	WL_EXIT_OK = 0,
	WL_EXIT_USAGE = 2,
	WL_EXIT_LIB_OPEN = 3,	 /* transport library failed to open */
	WL_EXIT_HANDSHAKE = 4,	 /* connection never established */
	WL_EXIT_VERIFY = 5,	 /* received data failed the content check */
	WL_EXIT_ADDR_IN_USE = 6, /* server could not bind its port */
	WL_EXIT_CONN_LOST = 7,	 /* connection ended before the transfer did */
	WL_EXIT_INTERNAL = 8,
	WL_EXIT_TLS_CONFIG = 9, /* unknown TLS version or cipher */
};

/*
 * Payload pattern. The 8-byte little-endian word at stream offset o (o a
 * multiple of 8) is (o mod P) ^ WL_PAT_SEED, P = wl_pattern_period(). The
 * sender sends straight out of one read-only region of P bytes, so
 * producing data costs it nothing; the receiver checks every byte against
 * its offset, which catches corruption and any shift that is not a whole
 * multiple of P (loss and duplication of whole periods are caught by the
 * stacks' offsets, sequence numbers and byte counts).
 *
 * P is the send size, at least WL_PAT_PERIOD_MIN: the sender's source is
 * then one buffer that stays in cache, as iperf3's and secnetperf's is.
 * A larger, colder region (it was 8 MiB, in L3) put ~10% more CPU per byte
 * on msquic's client, all of it in the copy of each send into its packets.
 */
#define WL_PAT_PERIOD_MIN (64u << 10)
#define WL_PAT_SEED 0x9e3779b97f4a7c15ull

struct wl_opts {
	const char *stack;
	const char *role;
	const char *addr;
	int port;
	const char *cert;
	const char *key;
	int streams;
	uint64_t duration_ms; /* 0: send until bytes */
	uint64_t bytes;	      /* 0: send for duration */
	uint32_t io_size;     /* bytes per send request */
	const char *exec_profile;
	bool control;		 /* commands on stdin, see wl_control_start */
	bool wait_start;	 /* client: connect only on "start" */
	const char *tls_version; /* tcp-tls, tcp-ktls: "1.2" or "1.3" */
	const char *cipher;	 /* OpenSSL name; NULL: AES-128-GCM */
	bool sendfile;		 /* tcp, tcp-ktls client: sendfile() from a memfd */
	const char *send_mode;	 /* udp client: sendmsg, sendmmsg or gso; NULL: gso */
	uint32_t batch;		 /* udp client: datagrams per call; 0: wl_udp.c's default */
	uint32_t dgram_size;	 /* udp client: UDP payload bytes; 0: 1472 */
	const char *gro;	 /* udp server: UDP_GRO "on" or "off"; NULL: on */
	bool download;		 /* --pattern download: see below */
	uint64_t size;		 /* download: bytes the server sends per connection */
	uint64_t count;		 /* download: connections, one after another */
	bool resume;		 /* download, TLS stacks: resume sessions (QUIC: 0-RTT) */
};

/*
 * --pattern download: the client makes --count connections strictly one
 * after another. On each it sends a request (the 8-byte little-endian
 * --size), the server answers with --size bytes of the pattern from offset
 * 0 and ends the stream (QUIC: FIN on the one bidirectional stream; TCP:
 * close_notify and FIN), and the client checks every byte. The client
 * reports each connection in a {"event":"download"} line, the server in a
 * {"event":"served"} line; "done" then adds "pattern" and "downloads".
 */
#define WL_DL_REQUEST_LEN 8

/* Pattern */
void wl_pattern_init(uint32_t io_size); /* once, before any other call */
uint32_t wl_pattern_period(void);
const uint8_t *wl_pattern_region(void);
bool wl_pattern_check(uint64_t off, const uint8_t *p, size_t len);

/* Time */
uint64_t wl_now_ns(void);

/*
 * Output. Events are single JSON lines on stdout, flushed at once, written
 * under one lock so lines from different threads never interleave. Human
 * messages go to stderr.
 */
/*
 * A run's first failure: its exit code (0: none yet) and message; later
 * failures are its consequences. wl_fail records one, says it on stderr
 * once, and sets *stopping so every thread winds down.
 */
struct wl_failure {
	pthread_mutex_t lock;
	int code;
	char msg[256];
};
#define WL_FAILURE_INIT                           \
	{                                         \
		.lock = PTHREAD_MUTEX_INITIALIZER \
	}
void wl_fail(struct wl_failure *f, _Atomic bool *stopping, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/*
 * bind(fd) to the server's address o->addr:o->port (a, already filled in);
 * 0, or the exit code after saying why (proto names the socket: "TCP", "UDP").
 */
struct sockaddr_in;
int wl_bind(int fd, const struct sockaddr_in *a, const char *proto, const struct wl_opts *o);

void wl_emit(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void wl_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/*
 * Control channel (--control): stdin carries one command a line.
 *   mark NAME  answered on stdout by a {"event":"mark"} line with the role's
 *              own counters, so the caller can bracket a measurement window;
 *   start      the client connects (with --wait-start it waits for this);
 *   stop       the sender finishes its streams and the transfer ends
 *              (download: the client makes no more connections after the
 *              one under way, the server serves no more);
 *   exit       the role may exit once its report is out (so may EOF: the
 *              caller is gone); a download server first ends as on stop.
 * The caller takes its CPU readings of this process before sending "exit".
 */
struct wl_control_ops {
	void (*mark)(const char *name, void *arg);
	void (*start)(void *arg);
	void (*stop)(void *arg);
	void (*exit)(void *arg);
	void *arg;
};
int wl_control_start(const struct wl_control_ops *ops);

/* A JSON object built in a fixed buffer, for snapshots and reports. */
struct wl_json {
	char buf[8192];
	size_t len;
	bool first;
};
void wl_json_begin(struct wl_json *j);
void wl_json_u64(struct wl_json *j, const char *key, uint64_t v);
void wl_json_str(struct wl_json *j, const char *key, const char *v);
void wl_json_bool(struct wl_json *j, const char *key, bool v);
void wl_json_raw(struct wl_json *j, const char *key, const char *raw);
const char *wl_json_end(struct wl_json *j);
/* Begins a mark event: "event":"mark", its name, and t_ns now. */
void wl_json_mark(struct wl_json *j, const char *name);

/*
 * One download's connection, as the "download" (client) or "served"
 * (server) event reports it. Times are CLOCK_MONOTONIC ns; the event gives
 * them as durations from t_connect (0: not taken, the key is left out).
 * Figures the stack does not give are left out too, never written as 0.
 */
struct wl_dl {
	uint64_t i;
	uint64_t bytes;
	uint64_t t_connect;   /* client: connect started */
	uint64_t t_tcp;	      /* TLS over TCP: connect() returned */
	uint64_t t_handshake; /* QUIC: CONNECTED; TCP: connect() or SSL_connect() returned */
	uint64_t t_first_byte;
	uint64_t t_complete;	    /* the last byte received and checked */
	bool has_resumed, resumed;  /* TLS: the session was resumed */
	bool has_early, early_data; /* TLS: the request went as early data and was taken */
	bool has_counters, has_lost;
	uint64_t retransmits, lost_packets, packets_sent, packets_received;
};
void wl_emit_dl(const char *event, const struct wl_dl *d);

/* Roles */
int wl_quic_run(const struct wl_opts *o);
int wl_tcp_run(const struct wl_opts *o);
int wl_udp_run(const struct wl_opts *o);

#endif
