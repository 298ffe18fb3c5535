// SPDX-License-Identifier: GPL-2.0-only
/*
 * The role (wl_role.c) and the patterns it runs (wl_bulk.c,
 * wl_exchange.c, wl_rr_pattern.c, each entered by WL_PATTERN), written
 * once over wl_transport.h. The
 * role picks the transport by --stack, runs the control channel, and
 * gives the events every pattern shares: "ready", "connected" (once a
 * run), the marks and "done", each with the pattern's fields and then the
 * transport's. A transport needs none of this file.
 *
 * udp (wl_udp.c) is a datagram transport with a pattern of its own,
 * wl_udp_bulk, the only one that runs on it: a flow of datagrams with
 * loss has no ordered stream for bulk's content check, so each datagram
 * is checked by its sequence number and what goes missing is counted
 * (iperf3 -u is a mode under iperf3's one test loop in the same way). It
 * shares the rest of the role: the control channel, the events, the
 * failure, app_bytes and the times.
 */
#ifndef QPROF_WL_ROLE_H
#define QPROF_WL_ROLE_H

#include <semaphore.h>
#include <stdatomic.h>

#include "wl.h"
#include "wl_transport.h"

struct wl_pattern {
	const char *name; /* --pattern's word (WL_PATTERN enters it) */
	/*
	 * What "exit" (or EOF) ends as "stop" does, before the role may go (a
	 * bulk role is done by then). exit_stops: the role (download and rr
	 * run until told). exit_stops_server: the server only (udp's receiver
	 * runs until told or its end datagram). Whatever the pattern, a client
	 * still waiting for --wait-start's "start" never starts then: over
	 * SSH, EOF is all a remote side hears of a qprof that went away.
	 */
	bool exit_stops, exit_stops_server;
	/* The role's work, server and client; an exit code, the run's first failure's if any. */
	int (*server)(void);
	int (*client)(void);
	/* The pattern's fields of a mark (after app_bytes) and of "done" (after app_bytes). */
	void (*json_mark)(struct wl_json *j);
	void (*json_done)(struct wl_json *j, int code);
	/* "stop" or "exit" came (the control thread): wl_role.stopping is set already. */
	void (*stop)(void);
	/* Whether this role checks what it receives ("done"'s verified); NULL: it checks nothing. */
	bool (*checks)(void);
	/*
	 * The flags of some patterns only (qprof_wl.c's table marks them) that
	 * this one takes, "a|b"; one given to another pattern is refused.
	 */
	const char *flags;
	/* udp runs it, as its own datagram pattern (bulk: wl_udp_bulk). */
	bool on_datagrams;
	/* The server sends the payload (a download): --sendfile is the server's. */
	bool server_sends;
	/* A connection a request in flight on TCP: at most this many (0: no cap). */
	unsigned tcp_conns_most;
	/*
	 * Its rules between its own flags, one sentence each, and its defaults,
	 * after the flags' own checks (qprof_wl.c): 0 or WL_EXIT_USAGE. NULL: none.
	 */
	int (*resolve)(struct wl_opts *o, bool client);
	/* The payload pattern's period its messages need; NULL: --io-size's. */
	uint32_t (*period)(const struct wl_opts *o);
};

/* The pattern --pattern NAME names, or NULL: none is built in. */
const struct wl_pattern *wl_pattern_named(const char *name);
/* Every pattern's word, "a|b|c", in buf. */
const char *wl_pattern_words(char *buf, size_t len);
/* A rule the patterns share: one stream a connection unless said (0 or WL_EXIT_USAGE). */
int wl_one_stream(const struct wl_opts *o);
/* Another: a timed client needs --duration-ms, --count or --control (0 or WL_EXIT_USAGE). */
int wl_timed_client(const struct wl_opts *o);

/*
 * A pattern is its file: WL_PATTERN(p) at its end enters p in the table
 * wl_role_run picks --pattern's from (a section of pointers the linker
 * gathers), so no other file names it. udp's wl_udp_bulk is its
 * transport's own and not entered.
 */
#define WL_PATTERN(p)                                              \
	static const struct wl_pattern *const wl_pattern_entry_##p \
		__attribute__((used, section("wl_patterns"), aligned(sizeof(void *)))) = &(p)

/* wl_ngtcp2.c: QUIC in ngtcp2 with GnuTLS, on the loop (--stack ngtcp2). */
extern const struct wl_transport wl_ngtcp2;

extern const struct wl_pattern wl_udp_bulk;

struct wl_role {
	const struct wl_opts *o;
	const struct wl_transport *t;
	const struct wl_pattern *p;
	bool server;
	const char *label; /* the stack as messages name it: "QUIC", "TCP", "TLS", "UDP" */

	_Atomic bool stopping;	    /* "stop", the duration's end, or the first failure */
	struct wl_failure failure;  /* wl_role_fail */
	_Atomic uint64_t app_bytes; /* sender: handed to the transport; receiver: checked */
	/*
	 * Around a transfer thread's update of app_bytes with a transport's
	 * own counts of the same bytes (udp's datagrams): a mark reads them
	 * as of one moment (wl_seq_*, the transport's mark_snapshot).
	 */
	_Atomic uint64_t counts_seq;
	_Atomic bool started; /* client: past wl_role_wait_start */

	_Atomic bool connected; /* "connected" is out; t_connected_ns set before */
	uint64_t t_connected_ns, t_transfer_done_ns;
	/* The connection "done" tells of (transport_status, peer_error_code): the pattern's to set. */
	struct wl_end end;

	/* A receiver's first failed check, for "done"; verify_failed alone for rr and udp. */
	_Atomic bool verify_failed;
	uint64_t verify_fail_off, verify_fail_idx;
	const char *verify_fail_key; /* "verify_fail_stream" or "verify_fail_download" */

	/* Bulk receiver: wl.h's stream_bytes, in its marks and "done". */
	bool per_stream;
	_Atomic uint64_t stream_bytes[WL_MAX_STREAMS];
	_Atomic int streams_seen;

	sem_t may_start; /* --wait-start: "start" came */
	sem_t may_exit;	 /* --control: "exit" or EOF came */
};
extern struct wl_role wl_role;

/* Handlers for what a pattern does not act on (a transport calls every one but sent). */
void wl_ignore(struct wl_stream *s, void *ctx);
void wl_ignore_data(struct wl_stream *s, void *ctx, const uint8_t *p, size_t len);
void wl_ignore_closed(struct wl_stream *s, void *ctx, bool graceful);
/* A connection's connected handler that only says the run's "connected" (once, now). */
void wl_role_conn_up(struct wl_conn *c, void *ctx);

/* qprof_wl.c: every stack. */
int wl_role_run(const struct wl_opts *o);

/* The run fails (first failure wins, said once on stderr); stopping is set and the loop woken. */
void wl_role_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The same, but the role goes on (an rr server answers on, and exits with it in the end). */
void wl_role_fail_later(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A failure the transport said already (connect's code): recorded, not said again. */
void wl_role_fail_said(int code);
/* The transport's own verdict on a connection (wl_end.exit_code, its sentence in transport_status). */
void wl_role_fail_end(const struct wl_end *e);
static inline bool wl_role_stopping(void)
{
	return atomic_load(&wl_role.stopping);
}
/* The run's "connected" event, once, at t_ns (the transport's json_connected fields). */
void wl_role_connected(uint64_t t_ns);
/* Server: the transport listens (udp: binds; a is NULL), then "ready"; an exit code. */
int wl_role_listen(const struct wl_accept *a);
/* The loop until done(arg); an epoll failure fails the run (WL_EXIT_INTERNAL, else 0). */
int wl_role_loop(bool (*done)(void *arg), void *arg);
/*
 * Server: listen and "ready", serve until served(), refuse latecomers and
 * stop listening, then wind_down() and wait until gone() (either NULL:
 * none); the run's exit code.
 */
int wl_role_serve(const struct wl_accept *a, bool (*served)(void *arg), void (*wind_down)(void),
		  bool (*gone)(void *arg));
/* Client, --wait-start: until "start"; false if "exit" or EOF came first (it must not start). */
bool wl_role_wait_start(void);
/* "QUIC handshake with 10.0.0.1:4433 failed (download 3): QUIC_STATUS_..."; WL_EXIT_HANDSHAKE. */
int wl_role_handshake_failed(const struct wl_end *e, const char *which);
/* Receiver: the first failed check, kept for "done" (offset, stream or download index). */
void wl_role_verify_failed(uint64_t off, uint64_t idx, const char *key);

#endif
