// SPDX-License-Identifier: GPL-2.0-only
/* Shared by every role of the qprof workload (qprof-wl). */
#ifndef QPROF_WL_H
#define QPROF_WL_H

#include <pthread.h>
#include <stdatomic.h>
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

/* The flags, as qprof_wl.c's table fills them. */
struct wl_opts {
	const char *stack;
	const char *role;
	const char *pattern;	/* bulk, download, rr or handshakes; sets download, rr or hs */
	const char *rr_streams; /* rr, quic: per-request or one; sets rr_one_stream */
	const char *tcp_conns;	/* rr, TCP stacks: one or on-demand; sets tcp_on_demand */
	const char *rr_mode;	/* rr: open or closed; sets rr_closed */
	const char *fault;	/* the tests' hidden --fault */
	const char *addr;
	int port;
	const char *cert;
	const char *key;
	int streams;
	int conns; /* bulk, rr: connections (QUIC, each with --streams; TCP: x --streams); 0: 1 */
	const char *direction; /* bulk: up, down or both (wl_bulk.c); NULL: up */
	/* quic: msquic's settings, "on"/"off" or a name; NULL or 0: msquic's default */
	const char *pacing, *quic_cc, *ecn, *encrypt;
	uint64_t duration_ms; /* 0: send until bytes */
	uint64_t bytes;	      /* 0: send for duration */
	uint32_t io_size;     /* bytes per send request */
	const char *exec_profile;
	bool control;		    /* commands on stdin, see wl_control_start */
	bool wait_start;	    /* client: connect only on "start" */
	const char *tls_version;    /* tcp-tls, tcp-ktls: "1.2" or "1.3" */
	const char *cipher;	    /* OpenSSL name; NULL: AES-128-GCM */
	const char *app;	    /* rr: h1 (TCP stacks) or h3 (quic), wl_app.h; NULL: none */
	const char *tcp_cc;	    /* tcp stacks: TCP_CONGESTION per socket; NULL: the netns's */
	bool sendfile;		    /* tcp, tcp-ktls client: sendfile() from a memfd */
	const char *send_mode;	    /* udp client: sendmsg, sendmmsg or gso; NULL: gso */
	uint32_t batch;		    /* udp client: datagrams per call; 0: wl_udp.c's default */
	uint32_t dgram_size;	    /* udp client: UDP payload bytes; 0: 1472 */
	const char *gro;	    /* udp server: UDP_GRO "on" or "off"; NULL: on */
	uint64_t size;		    /* download: bytes the server sends per connection */
	uint64_t count;		    /* download: connections, one after another */
	bool resume;		    /* download, TLS stacks: resume sessions (QUIC: 0-RTT) */
	uint64_t period_us;	    /* rr client: between two requests' due times */
	uint32_t payload;	    /* rr: bytes of each request and of each response */
	uint32_t request, response; /* rr: ... each apart (0: --payload) */
	bool rr_one_stream;	    /* rr, quic client: every request on one stream */
	bool tcp_on_demand; /* rr, TCP stacks client: a connection per overlapping request */
	bool rr_closed;	    /* rr client: --rr-mode closed, see below */
	const char *proto;  /* bulk, QUIC stacks: qprof (NULL) or perf, see wl_bulk.c */
	const char *
		verify; /* bulk receiver: content (NULL) or size (a peer not sending the pattern) */
	const char *alpn; /* QUIC stacks' ALPN: "perf" with --proto perf, else "qprof" */
	bool size_only;	  /* --verify size */
};

/*
 * --pattern download and --pattern handshakes (wl_exchange.c): one
 * machinery, a connection an exchange. On each connection the client
 * asks for N bytes (the request: N, 8 bytes little-endian), the server
 * answers with N bytes of the pattern from offset 0 and ends the stream
 * (QUIC: FIN on the one bidirectional stream; TCP: close_notify and FIN),
 * and the client checks every byte and closes the connection; a request
 * for another N fails the server (exit 5).
 *
 * download: N = --size, --count connections strictly one after another.
 * The client reports each connection in a {"event":"download"} line, the
 * server in a {"event":"served"} line; "done" then adds "pattern" and
 * "downloads".
 *
 * handshakes: N = WL_HS_MSG. The client keeps --conns connections opening
 * at once (default 1), each a new handshake (with --resume: the last
 * session's, QUIC sending its request as 0-RTT), opening the next as one
 * closes, until "stop", --duration-ms or --count. The client reports each
 * connection as a packed "handshake" record (wl_emit_packed: i, bytes,
 * t_connect_ns and, from it, tcp_handshake_ns, handshake_ns, complete_ns;
 * resumed, early_data as 0 or 1; wait_ns, an open loop's from the due
 * time to the connect call; WL_ABSENT where the stack or the loop has
 * none); marks and "done" add handshakes (client: checked; server:
 * delivered) and connections_opened, the client's "done" resumed and
 * early_data, and with --period-us period_us, connections_due and late.
 */
#define WL_HS_MSG 8
#define WL_DL_REQUEST_LEN 8

/* The 8-byte little-endian words on the wire: an exchange's request, an rr message's sequence number. */
void wl_put_le64(uint8_t *p, uint64_t v);
uint64_t wl_get_le64(const uint8_t *p);
/* The QUIC performance protocol's count (wl_bulk.c, --proto perf): big-endian. */
void wl_put_be64(uint8_t *p, uint64_t v);
uint64_t wl_get_be64(const uint8_t *p);

/*
 * --pattern rr: request/response, open loop. Request k falls due at
 * t0 + k * --period-us, t0 the moment the client starts sending once its
 * (first) connection is up, and goes out then whatever the replies do; a
 * client that falls behind sends late, but the request keeps its due time
 * as its reference, so its latency counts the wait (no coordinated
 * omission).
 *
 * A request is N = --request bytes and a response M = --response bytes
 * (each --payload unless given): the request's sequence number (8 bytes,
 * little-endian; a response repeats its request's), then byte q of a
 * message of N bytes (8 <= q < N) is the pattern byte at offset N + q. So every message can be checked alone, on any
 * connection or stream, in any order; a peer with another --payload fails
 * the check at its first pattern byte, whatever the framing; and with a
 * pattern period of at least 2N, a message's pattern bytes go out of the
 * pattern region in one piece.
 *
 * Byte streams (a TCP connection, QUIC's --rr-streams one) carry messages
 * back to back, framed by --payload; a QUIC stream per request carries one
 * message each way, then FIN. The server answers a request once it is
 * whole, or at once when it fails its check; then, repeating whatever
 * sequence number it read, it ends that connection or stream (FIN) and
 * exits WL_EXIT_VERIFY in the end. The client, which knows what it asked,
 * thus fails the run at once: a response that does not answer the oldest
 * request waiting on its connection or stream, or whose bytes or length
 * are wrong, is WL_EXIT_VERIFY.
 *
 * --rr-mode closed (secnetperf's rps and latency, netperf's TCP_RR): no
 * schedule. The client opens --conns connections (TCP stacks: --conns x
 * --streams, a request in flight on each), keeps --streams requests in
 * flight on each QUIC connection, and sends the next request on a
 * connection the moment an answer comes on it, for --duration-ms. A
 * request's due time is when it went (sent_ns), so its delay is the round
 * trip, and none is late. Open or closed, with several connections the
 * schedule starts once all are up, and an open loop's requests go to them
 * in turn.
 */
#define WL_RR_HDR 8
#define WL_RR_PAYLOAD_MIN 16
#define WL_RR_PAYLOAD_MAX (16u << 20) /* a video segment: 2 s at 64 Mbit/s */
#define WL_RR_PERIOD_MIN_US 100
#define WL_RR_PERIOD_MAX_US 1000000000ull
#define WL_RR_DRAIN_MIN_NS 2000000000ull /* the wait for replies after the last request */
#define WL_RR_DRAIN_PERIODS 10		 /* ... or this many periods, if longer */
#define WL_RR_MAX_CONNS 128 /* TCP: a client's connections at most, a server's open at once */

/* Pattern */
void wl_pattern_init(uint32_t io_size); /* once, before any other call */
uint32_t wl_pattern_period(void);
const uint8_t *wl_pattern_region(void);
bool wl_pattern_check(uint64_t off, const uint8_t *p, size_t len);

/* Time */
uint64_t wl_now_ns(void);
/* A non-blocking CLOCK_MONOTONIC timerfd for the loop: its fd, or -1 (errno). */
int wl_timer_open(void);
/* Fire once at t_ns (CLOCK_MONOTONIC); a time already past fires at once. 0, or -1 (errno). */
int wl_timer_arm(int fd, uint64_t t_ns);

/* --pattern rr, the part every stack shares (wl_rr.c) */
struct wl_rr {
	uint32_t request,
		response; /* each message's bytes (--request, --response; --payload both) */
	uint32_t rx_size, tx_size;  /* this role's: the server receives requests, sends responses */
	uint64_t period_ns;	    /* 0: closed loop */
	bool closed;		    /* client: --rr-mode closed; a request is due when sent */
	uint64_t t0_ns;		    /* client: request 0's due time */
	_Atomic uint64_t next_seq;  /* closed-loop client: the next request's number */
	_Atomic uint64_t due;	    /* client: requests that fell due */
	_Atomic uint64_t sent;	    /* client: requests handed to the transport */
	_Atomic uint64_t served;    /* server: responses handed to the transport */
	_Atomic uint64_t responses; /* client: answers checked */
	_Atomic uint64_t late;	    /* client: answered after the next request fell due */
	_Atomic uint64_t connections;	/* client: opened; server: accepted */
	_Atomic uint64_t t_last_answer; /* client: the last answer's time */
};
extern struct wl_rr wl_rr;

/* A request as the client keeps it until it is answered. */
struct wl_rr_req {
	uint64_t seq;
	uint64_t sent_ns;
};

/* Requests (or, on the server, responses) on one connection or stream, oldest first. */
struct wl_rr_fifo {
	struct wl_rr_req *v;
	uint32_t cap, head, len; /* cap: 0 or a power of two */
};

/* One message as it arrives, checked piece by piece. */
struct wl_rr_rx {
	uint32_t got; /* bytes of it so far */
	uint8_t hdr[WL_RR_HDR];
	bool bad; /* a byte after the header is not the pattern's */
};

void wl_rr_init(const struct wl_opts *o);
static inline uint64_t wl_rr_due(uint64_t seq)
{
	return wl_rr.t0_ns + seq * wl_rr.period_ns;
}
uint64_t wl_rr_drain_ns(void);
/* The bytes after the header of a message of size bytes, in the pattern region. */
const uint8_t *wl_rr_body(uint32_t size);
/* Takes what belongs to the message (up to rx_size in all); returns its length. */
size_t wl_rr_rx_feed(struct wl_rr_rx *m, const uint8_t *p, size_t len);
static inline bool wl_rr_rx_whole(const struct wl_rr_rx *m)
{
	return m->got == wl_rr.rx_size;
}
/* Whole, or already failed its check: either way it is to be acted on now. */
static inline bool wl_rr_rx_ready(const struct wl_rr_rx *m)
{
	return m->got == wl_rr.rx_size || m->bad;
}
int wl_rr_fifo_push(struct wl_rr_fifo *f, uint64_t seq); /* -1: out of memory */
static inline struct wl_rr_req *wl_rr_fifo_at(struct wl_rr_fifo *f, uint32_t i)
{
	return &f->v[(f->head + i) & (f->cap - 1)];
}
void wl_rr_fifo_pop(struct wl_rr_fifo *f);
void wl_rr_fifo_free(struct wl_rr_fifo *f);
/*
 * The client's account of the response m (whole, or failed its check
 * already), received at t_ns, which must answer req (NULL: none waits on
 * its connection or stream): 0 after its "rr" record, or WL_EXIT_VERIFY
 * after saying why in why.
 */
int wl_rr_answer(const struct wl_rr_req *req, const struct wl_rr_rx *m, uint64_t t_ns,
		 uint64_t conn, char *why, size_t why_len);
/* A mark's "requests" (client: sent, server: served) and "responses" (client). */
struct wl_json;
void wl_rr_json_mark(struct wl_json *j, bool server);
/* The done report's rr part: "pattern" and the counts. */
void wl_rr_json_done(struct wl_json *j, bool server);
/*
 * The client's open-loop schedule, kept once for every stack: a
 * CLOCK_MONOTONIC timerfd (non-blocking) that the stack's event loop
 * watches (wl_loop.c's one loop, beside the TCP sockets). The loop starts
 * it once the first connection is up, ticks it when the timer fires,
 * stops it on "stop", and ends once it is over or every request is
 * answered while it drains; the timer fires once more at the drain's end.
 */
struct wl_failure;
enum wl_rr_phase { WL_RR_WAIT_CONN, WL_RR_SENDING, WL_RR_DRAINING };
struct wl_rr_sched {
	int timer;
	enum wl_rr_phase phase;
	uint64_t next;	    /* the next request's sequence number */
	uint64_t t_end;	    /* none falls due from then on; 0: until "stop" */
	uint64_t drain_end; /* the replies are waited for until then */
};
int wl_rr_sched_open(struct wl_rr_sched *s); /* -1: errno says why */
void wl_rr_sched_close(struct wl_rr_sched *s);
/* t0 is now (closed loop: the timer fires at the end only); -1 if the timer cannot be armed. */
int wl_rr_sched_start(struct wl_rr_sched *s, uint64_t duration_ms);
/*
 * The timer fired: send(seq, arg) for each request due by now, unless f
 * holds a failure; -1 if the timer cannot be armed again.
 */
int wl_rr_sched_tick(struct wl_rr_sched *s, void (*send)(uint64_t seq, void *arg), void *arg,
		     const struct wl_failure *f);
/* "stop": what fell due by now goes out (the tick the loop had not run), then none falls due; the replies are waited for from now. -1 as tick. */
int wl_rr_sched_stop(struct wl_rr_sched *s, uint64_t now, void (*send)(uint64_t seq, void *arg),
		     void *arg, const struct wl_failure *f);
/* Draining and past its end: the loop ends. */
bool wl_rr_sched_over(const struct wl_rr_sched *s, uint64_t now);

/*
 * Output. Events are single JSON lines on stdout, flushed at once, written
 * under one lock so lines from different threads never interleave. Human
 * messages go to stderr.
 */
/*
 * A run's first failure: its exit code (0: none yet) and message; later
 * failures are its consequences. wl_role_fail (wl_role.h) records one,
 * says it on stderr once, and stops the role so every thread winds down.
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

/*
 * bind(fd) to the server's address o->addr:o->port (a, already filled in);
 * 0, or the exit code after saying why (proto names the socket: "TCP", "UDP").
 */
struct sockaddr_in;
int wl_bind(int fd, const struct sockaddr_in *a, const char *proto, const struct wl_opts *o);

void wl_emit(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/*
 * A record that may wait: n 64-bit values, named by fields ("seq,due_ns"),
 * gathered and written in one go, as one line
 * {"event":"<event>_batch","fields":"<fields>","b64":"..."} holding the
 * records back to back as little-endian u64s in base64 (OpenSSL's
 * EVP_EncodeBlock), once WL_DEFER_BYTES are waiting, the oldest is
 * WL_DEFER_NS old (checked here and by wl_emit_tick), another event's
 * record comes, or before any wl_emit line, so output stays in order. For
 * per-request events: a line per request, formatted and then parsed, was
 * CPU that qprof's measurement charged to the run (collectors/controlled.py
 * unpacks them). event and fields must be string constants.
 */
#define WL_DEFER_BYTES (32u << 10)
#define WL_DEFER_NS 20000000ull
void wl_emit_packed(const char *event, const char *fields, const uint64_t *v, unsigned n);
/* A packed field not measured: the reader leaves it out of the event. */
#define WL_ABSENT UINT64_MAX
void wl_emit_tick(void);
void wl_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/*
 * Control channel (--control): stdin carries one command a line.
 *   mark NAME  answered on stdout by a {"event":"mark"} line with the role's
 *              own counters, so the caller can bracket a measurement window;
 *              t_ns when it began reading them, read_ns how long it took;
 *   start      the client connects (with --wait-start it waits for this);
 *   stop       the sender finishes its streams and the transfer ends
 *              (download: the client makes no more connections after the
 *              one under way, the server serves no more; rr: the client
 *              sends no more requests and waits for the replies, the
 *              server closes its connections and ends, as it does by
 *              itself once the client's connections have all closed);
 *   exit       the role may exit once its report is out (so may EOF: the
 *              caller is gone); a download or rr role first ends as on stop.
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
/*
 * Begins a mark event: "event":"mark", its name, and t_ns now, which it
 * returns; the caller ends it with "read_ns", how long after t_ns its
 * counters were all read (a mark's figures are of that interval).
 */
uint64_t wl_json_mark(struct wl_json *j, const char *name);
/*
 * Bulk receiver (the server): "stream_bytes", the verified bytes of each
 * stream (QUIC) or connection (TCP stacks) as a JSON array, index i the
 * i-th opened (QUIC: as the server saw it start) or accepted; only the
 * first *n (streams seen so far) are written. Its marks and "done" carry
 * it. Writers update v[i] with relaxed stores; a snapshot mid-transfer is
 * per entry, not across them. A mark loads them once and gives their sum
 * as its app_bytes: loaded apart, a receiver between its two updates made
 * a window's streams miss bytes its app_bytes counted (seen in the guest).
 */
#define WL_MAX_STREAMS 64
struct wl_stream_bytes {
	int n;
	uint64_t v[WL_MAX_STREAMS];
};
/* Loads *n entries of v into s; returns their sum. */
uint64_t wl_stream_bytes_load(struct wl_stream_bytes *s, const _Atomic uint64_t *v,
			      const _Atomic int *n);
void wl_json_stream_bytes(struct wl_json *j, const struct wl_stream_bytes *s);

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
	bool no_retransmits; /* has_counters, but the library counts no retransmissions (quinn) */
	uint64_t retransmits, lost_packets, packets_sent, packets_received;
};
void wl_emit_dl(const char *event, const struct wl_dl *d);

/*
 * A sequence count over counts one thread writes and another reads whole
 * (a mark on the control thread): the writer makes it odd while it
 * updates them; a reader that saw it odd, or saw it move, reads again.
 */
static inline void wl_seq_write_begin(_Atomic uint64_t *s)
{
	atomic_store_explicit(s, atomic_load_explicit(s, memory_order_relaxed) + 1,
			      memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
}

static inline void wl_seq_write_end(_Atomic uint64_t *s)
{
	atomic_store_explicit(s, atomic_load_explicit(s, memory_order_relaxed) + 1,
			      memory_order_release);
}

static inline uint64_t wl_seq_read_begin(_Atomic uint64_t *s)
{
	uint64_t v;

	while ((v = atomic_load_explicit(s, memory_order_acquire)) & 1)
		;
	return v;
}

/* After the reads since wl_seq_read_begin returned v: whether to read again. */
static inline bool wl_seq_read_retry(_Atomic uint64_t *s, uint64_t v)
{
	atomic_thread_fence(memory_order_acquire);
	return atomic_load_explicit(s, memory_order_relaxed) != v;
}

#endif
