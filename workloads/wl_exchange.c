// SPDX-License-Identifier: GPL-2.0-only
/*
 * A connection an exchange: --pattern download and --pattern handshakes,
 * one machinery with two sets of defaults (wl.h), as secnetperf's
 * download and hps are one engine's. On each connection the client asks
 * on one stream for N bytes (the request: N, 8 bytes little-endian,
 * before the handshake ends with --resume on QUIC, as 0-RTT), the server
 * checks that it asked for N and answers with N bytes of the pattern
 * from offset 0 and ends the stream; the client checks every byte and
 * closes the connection. Connections open --conns at once (each as one
 * closes), or as an open loop's schedule says (--period-us), until
 * --count of them, --duration-ms, "stop" or a failure.
 *
 *   download    N = --size; one at a time, strictly one after another,
 *               each its own (WL_CONN_DEDICATED: TCP reads and writes it
 *               blocking), --count of them; each side reports each
 *               connection ("download", "served").
 *   handshakes  N = 8 (WL_HS_MSG): the exchange proves the handshake gave
 *               both ends working keys; --conns at once on the loop, as
 *               secnetperf's hps and netperf's TCP_CRR; the client reports
 *               each connection packed ("handshake", with its open loop's
 *               wait), the server counts them.
 *
 * An open loop: connection k falls due at t0 + k * period, t0 the
 * client's start, and opens then if fewer than --conns are open, or as
 * soon as one closes. Each reports its wait from its due time to its
 * connect call, and one that waited past the next one's due time is late,
 * so a client that fell behind shows it rather than a lower rate (no
 * coordinated omission). None falls due from the end of --duration on.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "wl_role.h"

/* What makes one pattern of the machinery: the rest is the options'. */
struct preset {
	const char *counted;	/* its count's field in marks and "done" */
	const char *one;	/* one exchange in a sentence: "download 3", "connection 3" */
	const char *verify_key; /* "done"'s field for the first failed check */
	unsigned client_flags;	/* each side's connections' WL_CONN_* hints */
	unsigned server_flags;
	bool reports_each;	 /* each side reports each connection: download's, served */
	bool counts_connections; /* connections_opened, resumed, early_data, an open loop's */
};

static const struct preset download = {
	.counted = "downloads",
	.one = "download",
	.verify_key = "verify_fail_download",
	.client_flags = WL_CONN_DEDICATED | WL_CONN_NODELAY,
	.server_flags = WL_CONN_DEDICATED | WL_CONN_SENDER | WL_CONN_NODELAY,
	.reports_each = true,
};

static const struct preset handshakes = {
	.counted = "handshakes",
	.one = "connection",
	.verify_key = "verify_fail_connection",
	.client_flags = WL_CONN_NODELAY,
	.server_flags = WL_CONN_NODELAY,
	.counts_connections = true,
};

struct ex {
	struct wl_conn *c;
	struct wl_stream *s;
	struct wl_dl r;
	uint8_t req[WL_DL_REQUEST_LEN]; /* client: sent; server: received */
	uint32_t req_len;
	_Atomic bool asked; /* client: the request is sent (early, or once connected) */
	uint64_t off;	    /* client: bytes checked; server: bytes handed to the transport */
	bool fin;	    /* client: the answer's FIN came; server: ours is sent */
	bool closing;	    /* client: it closed the connection */
	bool sending;	    /* server: the request is in, the answer under way */
	bool delivered;	    /* server: every byte and the FIN reached the client */
	bool bad, overrun;  /* client: the check failed (at off) */
	bool aborted;	    /* the peer reset the stream */
	uint64_t due_ns;    /* open loop: when it fell due */
};

static struct {
	uint64_t n;		 /* the answer's bytes */
	_Atomic uint64_t opened; /* client: connections started; server: accepted */
	_Atomic uint64_t done;	 /* client: checked; server: delivered */
	_Atomic uint64_t resumed, early;
	_Atomic int live;
	_Atomic int owed;    /* client: connections ended whose next the loop opens */
	_Atomic bool ending; /* client: no more connections; the open ones finish */
	uint64_t t_end;
	/* Open loop (--period-us), on the loop's thread. */
	uint64_t t0, period_ns;
	uint64_t due;	       /* connections due so far */
	int timer;	       /* wakes the loop at the next due time */
	_Atomic uint64_t late; /* connected after the next one fell due */
} ex = {.timer = -1};

static const struct wl_pattern wl_download;

/* The preset the role runs, by its pattern (a mark may come before its work begins). */
static const struct preset *preset(void)
{
	return wl_role.p == &wl_download ? &download : &handshakes;
}

/* The answer's bytes, once the role's work begins. */
static void set_up(void)
{
	ex.n = preset() == &download ? wl_role.o->size : WL_HS_MSG;
}

/* Client */

static void client_data(struct wl_stream *s, void *ctx, const uint8_t *p, size_t len)
{
	struct ex *x = ctx;

	(void)s;
	if (x->bad || !len)
		return;
	if (!x->r.t_first_byte)
		x->r.t_first_byte = wl_now_ns();
	if (x->off + len > ex.n || !wl_pattern_check(x->off, p, len)) {
		x->bad = true;
		x->overrun = x->off + len > ex.n;
		x->closing = true;
		wl_role.t->close(x->c, WL_CLOSE_VERIFY);
		return;
	}
	x->off += len;
	atomic_fetch_add(&wl_role.app_bytes, len);
	if (x->off == ex.n)
		x->r.t_complete = wl_now_ns();
}

/* The answer ended: the exchange is over, whole or not. */
static void client_fin(struct wl_stream *s, void *ctx)
{
	struct ex *x = ctx;

	(void)s;
	x->fin = true;
	if (!x->closing) {
		x->closing = true;
		wl_role.t->close(x->c, x->off == ex.n ? WL_CLOSE_OK : WL_CLOSE_ERROR);
	}
}

static void client_aborted(struct wl_stream *s, void *ctx)
{
	(void)s;
	((struct ex *)ctx)->aborted = true; /* the transport aborts it back */
}

/* Closed before its FIN came: the exchange failed. */
static void client_stream_closed(struct wl_stream *s, void *ctx, bool graceful)
{
	struct ex *x = ctx;

	(void)s, (void)graceful;
	if (!x->closing) {
		x->closing = true;
		wl_role.t->close(x->c, WL_CLOSE_ERROR);
	}
}

static const struct wl_stream_handlers client_stream = {
	.writable = wl_ignore,
	.data = client_data,
	.fin = client_fin,
	.aborted = client_aborted,
	.closed = client_stream_closed,
};

/*
 * The request: N as 8 bytes, little-endian. With many streams it ends the
 * stream (FIN); a TCP client asks without one and closes once the answer
 * is in.
 */
static int ask(struct ex *x, unsigned early)
{
	int code;

	wl_put_le64(x->req, ex.n);
	code = wl_role.t->open(x->c, &client_stream, x, 0, &x->s);
	if (code)
		return code;
	return wl_send(x->s, x->req, WL_DL_REQUEST_LEN, NULL, 0,
		       early | (wl_role.t->multistream ? WL_SEND_FIN : 0), NULL);
}

static void client_connected(struct wl_conn *c, void *ctx)
{
	struct ex *x = ctx;

	wl_role_connected(wl_now_ns());
	if (atomic_exchange(&x->asked, true)) /* asked already, early */
		return;
	if (ask(x, 0)) {
		wl_role_fail(WL_EXIT_CONN_LOST, "sending the request of %s %llu failed",
			     preset()->one, (unsigned long long)x->r.i);
		x->closing = true;
		wl_role.t->close(c, WL_CLOSE_ERROR);
	}
}

/* What one connection's end means for the run: 0 if its exchange was whole, -1 if the run cut it. */
static int client_outcome(struct ex *x, const struct wl_end *e)
{
	const unsigned long long i = x->r.i;
	char which[48];

	if (x->bad) {
		wl_role_verify_failed(x->off, i, preset()->verify_key);
		wl_role_fail(WL_EXIT_VERIFY, "%s %llu failed the content check at offset %llu%s",
			     preset()->one, i, (unsigned long long)x->off,
			     x->overrun ? ": more than was asked for arrived" : "");
		return WL_EXIT_VERIFY;
	}
	if (e->exit_code) {
		wl_role_fail_end(e);
		return e->exit_code;
	}
	if (!e->connected) {
		/* The run ends: a connection still opening is closed, not failed. */
		if (wl_role_stopping())
			return -1;
		snprintf(which, sizeof(which), " (%s %llu)", preset()->one, i);
		return wl_role_handshake_failed(e, which);
	}
	if (!x->fin || x->off != ex.n) {
		if (wl_role_stopping() && !x->aborted)
			return -1;
		wl_role_fail(WL_EXIT_CONN_LOST, "%s %llu ended after %llu of %llu bytes: %s",
			     preset()->one, i, (unsigned long long)x->off, (unsigned long long)ex.n,
			     wl_end_why(e));
		return WL_EXIT_CONN_LOST;
	}
	return 0;
}

/* Packed, as rr's answers: a line a handshake would be the run's own work in its window. */
static uint64_t since(uint64_t t0, uint64_t t)
{
	return t0 && t ? t - t0 : WL_ABSENT;
}

static void report(const struct wl_dl *r, uint64_t wait)
{
	const uint64_t t0 = r->t_connect;

	if (preset()->reports_each) {
		wl_emit_dl("download", r);
		return;
	}
	wl_emit_packed(
		"handshake",
		"i,bytes,t_connect_ns,tcp_handshake_ns,handshake_ns,complete_ns,resumed,early_data,wait_ns",
		(const uint64_t[]){r->i, r->bytes, t0, since(t0, r->t_tcp),
				   since(t0, r->t_handshake), since(t0, r->t_complete),
				   r->has_resumed ? r->resumed : WL_ABSENT,
				   r->has_early ? r->early_data : WL_ABSENT, wait},
		9);
}

static void client_closed(struct wl_conn *c, void *ctx, const struct wl_end *e)
{
	struct ex *x = ctx;
	uint64_t wait;
	int code;

	wl_role.t->conn_info(c, &x->r);
	code = client_outcome(x, e);
	if (!code) {
		x->r.bytes = x->off;
		wl_role.t_transfer_done_ns = x->r.t_complete;
		/* Open loop: from its due time to its connect call. */
		wait = ex.period_ns ? x->r.t_connect - x->due_ns : WL_ABSENT;
		report(&x->r, wait);
		atomic_fetch_add(&ex.late, ex.period_ns && wait > ex.period_ns);
		atomic_fetch_add(&ex.done, 1);
		atomic_fetch_add(&ex.resumed, x->r.has_resumed && x->r.resumed);
		atomic_fetch_add(&ex.early, x->r.has_early && x->r.early_data);
	}
	if (e->exit_code || code > 0 || preset()->reports_each)
		wl_role.end = *e;
	free(x);
	/*
	 * The next connection opens on the loop's thread: msquic's SetParam
	 * (a resumption ticket) from one of its workers can wait on itself.
	 * An open loop's schedule says when instead.
	 */
	if (!code && !ex.period_ns)
		atomic_fetch_add(&ex.owed, 1);
	atomic_fetch_sub(&ex.live, 1);
	wl_loop_wake();
}

static const struct wl_conn_handlers client_conn = {
	.connected = client_connected,
	.closed = client_closed,
};

/* The next connection, on the loop's thread (so opened is its number); false once --count opened. */
static bool open_one(uint64_t due_ns)
{
	const struct wl_opts *o = wl_role.o;
	struct ex *x;
	int code;

	if (o->count && atomic_load(&ex.opened) >= o->count) {
		atomic_store(&ex.ending, true);
		return false;
	}
	if (!(x = calloc(1, sizeof(*x)))) {
		wl_role_fail(WL_EXIT_INTERNAL, "out of memory for a connection");
		return false;
	}
	x->due_ns = due_ns;
	x->r.i = atomic_fetch_add(&ex.opened, 1); /* t_connect: the transport's, as it connects */
	atomic_fetch_add(&ex.live, 1);
	code = wl_role.t->connect(&client_conn, x,
				  preset()->client_flags | (o->resume ? WL_CONN_RESUME : 0), &x->c);
	if (code) {
		free(x);
		atomic_fetch_sub(&ex.live, 1);
		wl_role_fail_said(code);
		return false;
	}
	/* Every connection offers the last one's session; resumed, the request goes as 0-RTT. */
	if (o->resume && x->r.i > 0 && wl_role.t->early_data && !atomic_exchange(&x->asked, true) &&
	    ask(x, WL_SEND_EARLY)) {
		wl_role_fail(WL_EXIT_INTERNAL, "sending the request as early data failed");
		x->closing = true;
		wl_role.t->close(x->c, WL_CLOSE_ERROR);
	}
	return true;
}

static uint64_t due_at(uint64_t k)
{
	return ex.t0 + k * ex.period_ns;
}

/*
 * Open loop: every connection due by now whose turn has come, while fewer
 * than --conns are open; the timer then wakes the loop at the next due
 * time (a close wakes it anyway).
 */
static void open_due(uint64_t now, int conns)
{
	uint64_t opened = atomic_load(&ex.opened);

	while (!(ex.t_end && due_at(ex.due) >= ex.t_end) && due_at(ex.due) <= now)
		ex.due++;
	for (; opened < ex.due && atomic_load(&ex.live) < conns && !wl_role.failure.code; opened++)
		if (!open_one(due_at(opened)))
			return;
	if (ex.t_end && due_at(ex.due) >= ex.t_end && opened == ex.due)
		atomic_store(&ex.ending, true);
	else if (opened == ex.due && wl_timer_arm(ex.timer, due_at(ex.due)))
		wl_role_fail(WL_EXIT_INTERNAL, "cannot arm the connection timer: %s",
			     strerror(errno));
}

static void timer_fired(int fd, uint32_t events, void *arg)
{
	uint64_t n;

	(void)events, (void)arg;
	if (read(fd, &n, sizeof(n)) < 0 && errno != EAGAIN)
		wl_warn("reading the connection timer failed: %s", strerror(errno));
}

static bool client_over(void *arg)
{
	const int conns = wl_role.o->conns ? wl_role.o->conns : 1;
	const uint64_t now = wl_now_ns();

	(void)arg;
	wl_emit_tick();
	if (wl_role_stopping() || (ex.t_end && now >= ex.t_end && !ex.period_ns))
		atomic_store(&ex.ending, true);
	if (ex.period_ns && !atomic_load(&ex.ending))
		open_due(now, conns);
	for (; atomic_load(&ex.owed) && !atomic_load(&ex.ending); atomic_fetch_sub(&ex.owed, 1))
		open_one(0);
	return (atomic_load(&ex.ending) || wl_role.failure.code) && !atomic_load(&ex.live);
}

static int client(void)
{
	const struct wl_opts *o = wl_role.o;
	int k, code;

	set_up();
	ex.period_ns = o->period_us * 1000ull;
	if (ex.period_ns) {
		ex.timer = wl_timer_open();
		if (ex.timer < 0 || wl_loop_add(ex.timer, EPOLLIN, timer_fired, NULL)) {
			wl_warn("cannot make the connection timer: %s", strerror(errno));
			return WL_EXIT_INTERNAL;
		}
	}
	if (!wl_role_wait_start())
		return WL_EXIT_OK;
	ex.t0 = wl_now_ns();
	if (o->duration_ms)
		ex.t_end = ex.t0 + o->duration_ms * 1000000ull;
	for (k = 0; !ex.period_ns && k < (o->conns ? o->conns : 1) && !wl_role.failure.code; k++)
		if (!open_one(0))
			break;
	code = wl_role_loop(client_over, NULL) ? WL_EXIT_INTERNAL : wl_role.failure.code;
	if (ex.timer >= 0) {
		wl_loop_del(ex.timer);
		close(ex.timer);
	}
	return code;
}

/* Server */

/* The answer: N bytes of the pattern from offset 0, then FIN. */
static void answer(struct wl_stream *s, void *ctx)
{
	struct ex *x = ctx;
	const uint32_t period = wl_pattern_period(), io = wl_role.o->io_size;

	while (x->sending && !x->fin && wl_room(s) > 0) {
		uint64_t len = ex.n - x->off < io ? ex.n - x->off : io;
		unsigned flags = x->off + len == ex.n ? WL_SEND_FIN : 0;

		if (wl_send(s, NULL, 0, wl_pattern_region() + x->off % period, (uint32_t)len, flags,
			    NULL))
			return; /* the connection's end says why */
		x->off += len;
		atomic_fetch_add(&wl_role.app_bytes, len);
		x->fin = flags & WL_SEND_FIN;
	}
}

static void take_request(struct wl_stream *s, struct ex *x)
{
	uint64_t want = wl_get_le64(x->req); /* short: its missing bytes are 0 */

	if (x->req_len != WL_DL_REQUEST_LEN || want != ex.n) {
		wl_role_fail(
			WL_EXIT_VERIFY,
			"connection %llu asked for %llu bytes (a %u-byte request), not the %llu this server answers: give both roles the same --pattern and --size",
			(unsigned long long)x->r.i, (unsigned long long)want, x->req_len,
			(unsigned long long)ex.n);
		wl_role.t->close(x->c, WL_CLOSE_VERIFY);
		return;
	}
	x->sending = true;
	answer(s, x);
}

static void server_data(struct wl_stream *s, void *ctx, const uint8_t *p, size_t len)
{
	struct ex *x = ctx;
	size_t k = WL_DL_REQUEST_LEN - x->req_len;

	if (x->sending || x->req_len == WL_DL_REQUEST_LEN)
		return;
	if (k > len)
		k = len;
	memcpy(x->req + x->req_len, p, k);
	x->req_len += (uint32_t)k;
	if (x->req_len == WL_DL_REQUEST_LEN)
		take_request(s, x);
}

static void server_fin(struct wl_stream *s, void *ctx)
{
	struct ex *x = ctx;

	if (!wl_role.t->multistream) {
		/* TCP: the client's FIN is its close; on the loop, the connection is then over. */
		if (!(preset()->server_flags & WL_CONN_DEDICATED))
			wl_role.t->close(x->c, x->fin ? WL_CLOSE_OK : WL_CLOSE_ERROR);
		else if (!x->sending && x->req_len) {
			wl_role_fail(WL_EXIT_CONN_LOST,
				     "connection %llu ended after %u bytes of its request: EOF",
				     (unsigned long long)x->r.i, x->req_len);
			wl_role.t->close(x->c, WL_CLOSE_ERROR);
		}
		return;
	}
	if (!x->sending && x->req_len) /* QUIC: a short request is checked as it stands */
		take_request(s, x);
}

static void server_aborted(struct wl_stream *s, void *ctx)
{
	(void)s;
	((struct ex *)ctx)->aborted = true; /* the transport aborts it back */
}

static void server_stream_closed(struct wl_stream *s, void *ctx, bool graceful)
{
	struct ex *x = ctx;

	(void)s;
	x->delivered = x->fin && x->off == ex.n && graceful;
	if (x->delivered)
		x->r.t_complete = wl_now_ns();
}

static const struct wl_stream_handlers server_stream_h = {
	.writable = answer,
	.data = server_data,
	.fin = server_fin,
	.aborted = server_aborted,
	.closed = server_stream_closed,
};

static const struct wl_stream_handlers *server_stream(struct wl_conn *c, void *ctx,
						      struct wl_stream *s, void **sctx)
{
	struct ex *x = ctx;

	(void)c;
	if (x->s)
		return NULL; /* one stream a connection */
	x->s = s;
	*sctx = x;
	return &server_stream_h;
}

/*
 * The server's account of one connection, once it is gone: served once
 * its answer reached the client. A connection the client gave up on as
 * the run ended, or one that never asked, is not the server's failure.
 */
static void server_closed(struct wl_conn *c, void *ctx, const struct wl_end *e)
{
	struct ex *x = ctx;

	wl_role.t->conn_info(c, &x->r);
	/*
	 * A QUIC client closes without an error only once it has every byte
	 * and the FIN; its close can overtake its last ACK, and with 0-RTT
	 * come before the server's handshake ends (as a transport close, its
	 * code unseen), so that counts as delivered. (A TCP peer that left
	 * has no code: a reset is no proof.)
	 */
	if (!x->delivered && x->fin && wl_role.t->multistream && !x->aborted && !e->exit_code &&
	    !e->peer_error) {
		x->delivered = true;
		x->r.t_complete = e->closed_by_peer ? e->t_peer_closed : wl_now_ns();
	}
	if (x->delivered) {
		x->r.bytes = x->off;
		wl_role.t_transfer_done_ns = x->r.t_complete;
		if (preset()->reports_each)
			wl_emit_dl("served", &x->r);
		atomic_fetch_add(&ex.done, 1);
	} else if (wl_role.failure.code || (wl_role_stopping() && !e->exit_code)) {
		/* said already, or the run ended it */
	} else if (e->exit_code) {
		wl_role_fail_end(e);
	} else if (!e->connected || (!x->sending && !x->req_len)) {
		/* It never asked: the client's end says why (one that gave up as its run ended, none). */
	} else if (x->fin && x->off == ex.n && !wl_role.t->multistream) {
		wl_role_fail(
			WL_EXIT_CONN_LOST,
			"connection %llu: the client did not close cleanly after the %llu bytes (its check failed, or it went away)",
			(unsigned long long)x->r.i, (unsigned long long)x->off);
	} else {
		wl_role_fail(WL_EXIT_CONN_LOST,
			     "connection %llu ended after %llu of %llu bytes were sent: %s%s",
			     (unsigned long long)x->r.i, (unsigned long long)x->off,
			     (unsigned long long)ex.n, wl_end_why(e),
			     e->closed_by_peer && e->peer_error == WL_CLOSE_VERIFY
				     ? " (the client's content check failed)"
				     : "");
	}
	free(x);
	atomic_fetch_sub(&ex.live, 1);
	wl_loop_wake();
}

static const struct wl_conn_handlers server_conn = {
	.connected = wl_role_conn_up,
	.stream = server_stream,
	.closed = server_closed,
};

static const struct wl_conn_handlers *accept_conn(void *arg, struct wl_conn *c, void **ctx)
{
	struct ex *x;

	(void)arg;
	if (wl_role_stopping() || !(x = calloc(1, sizeof(*x))))
		return NULL;
	x->c = c;
	x->r.i = atomic_fetch_add(&ex.opened, 1);
	atomic_fetch_add(&ex.live, 1);
	*ctx = x;
	return &server_conn;
}

/* Served until --count connections are, "stop", "exit" or a failure. */
static bool served(void *arg)
{
	const uint64_t count = wl_role.o->count;

	(void)arg;
	return wl_role_stopping() || (count && atomic_load(&ex.done) >= count);
}

static bool all_gone(void *arg)
{
	(void)arg;
	return !atomic_load(&ex.live);
}

static int server(void)
{
	const struct wl_accept a = {
		.accept = accept_conn,
		.flags = preset()->server_flags,
		.peer_bidi_streams = 1,
	};

	set_up();
	return wl_role_serve(&a, served, NULL, all_gone);
}

static void json_mark(struct wl_json *j)
{
	wl_json_u64(j, preset()->counted, atomic_load(&ex.done));
	if (preset()->counts_connections)
		wl_json_u64(j, "connections_opened", atomic_load(&ex.opened));
}

static void json_done(struct wl_json *j, int code)
{
	(void)code;
	wl_json_str(j, "pattern", wl_role.p->name);
	json_mark(j);
	if (preset()->counts_connections && !wl_role.server) {
		wl_json_u64(j, "resumed", atomic_load(&ex.resumed));
		wl_json_u64(j, "early_data", atomic_load(&ex.early));
	}
	if (preset()->counts_connections && !wl_role.server && ex.period_ns) {
		wl_json_u64(j, "period_us", ex.period_ns / 1000);
		wl_json_u64(j, "connections_due", ex.due);
		wl_json_u64(j, "late", atomic_load(&ex.late));
	}
	wl_json_u64(j, "streams_completed", atomic_load(&ex.done));
}

/* A download's client checks the answer (its server's check of the request is no content check). */
static bool dl_checks(void)
{
	return !wl_role.server;
}

/* Both: the client the answer, the server the request (the exchange's proof both ways). */
static bool hs_checks(void)
{
	return true;
}

/* A download: one stream, --size given, one connection unless --count says. */
static int dl_resolve(struct wl_opts *o, bool client)
{
	int code = wl_one_stream(o);

	(void)client;
	if (code)
		return code;
	if (!o->size) {
		wl_warn("--pattern download needs --size N, the bytes per download, on both roles");
		return WL_EXIT_USAGE;
	}
	if (!o->count)
		o->count = 1;
	return 0;
}

/* Handshakes: one stream, and a client told when to end. */
static int hs_resolve(struct wl_opts *o, bool client)
{
	int code = wl_one_stream(o);

	return code || !client ? code : wl_timed_client(o);
}

static const struct wl_pattern wl_download = {
	.name = "download",
	.exit_stops = true,
	.server = server,
	.client = client,
	.json_mark = json_mark,
	.json_done = json_done,
	.checks = dl_checks,
	.flags = "size|count|resume|sendfile",
	.server_sends = true,
	.resolve = dl_resolve,
};
WL_PATTERN(wl_download);

static const struct wl_pattern wl_hs = {
	.name = "handshakes",
	.exit_stops = true,
	.server = server,
	.client = client,
	.json_mark = json_mark,
	.json_done = json_done,
	.checks = hs_checks,
	.flags = "conns|duration-ms|count|resume|period-us",
	.resolve = hs_resolve,
};
WL_PATTERN(wl_hs);
