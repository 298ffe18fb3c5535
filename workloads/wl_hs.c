// SPDX-License-Identifier: GPL-2.0-only
/*
 * --pattern handshakes (wl.h): connections opened and closed as fast as
 * the client can, --conns of them at once, as secnetperf's hps and
 * netperf's TCP_CRR. On each, once its handshake is done (QUIC: CONNECTED;
 * TLS: SSL_connect; plain TCP: connect), the client sends its 8-byte
 * index on one stream (with --resume on QUIC as 0-RTT, before the
 * handshake ends), the server echoes it and ends the stream, and the
 * client checks it and closes the connection, then opens the next. The
 * echo proves the handshake gave both ends working keys. Each connection
 * is its own in the loop (TCP: non-blocking), so many are in flight.
 *
 * With --period-us, an open loop instead: connection k falls due at
 * t0 + k * period, t0 the client's start, and opens then if fewer than
 * --conns are open, or as soon as one closes. Each reports its wait
 * from its due time to its connect call, and one that waited past the
 * next one's due time is late, so a client that fell behind shows it
 * rather than a lower rate (no coordinated omission). None falls due
 * from the end of --duration on.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "wl_role.h"

struct hs {
	struct wl_conn *c;
	struct wl_stream *s;
	struct wl_dl r;
	uint8_t msg[WL_HS_MSG]; /* client: the echo; server: the request */
	uint32_t got;
	bool fin;     /* client: the echo's FIN came; server: ours went */
	bool bad;     /* client: the echo is not what went, or longer */
	bool echoed;  /* server: the echo and its FIN were handed over */
	bool aborted; /* the peer reset the stream */
	_Atomic bool asked;
	uint64_t due_ns; /* open loop: when it fell due */
};

static struct {
	_Atomic uint64_t opened; /* client: connections started; server: accepted */
	_Atomic uint64_t done; /* client: checked; server: echoed, and the client closed cleanly */
	_Atomic uint64_t resumed, early;
	_Atomic int live;
	_Atomic int owed;    /* client: connections ended whose next the loop opens */
	_Atomic bool ending; /* client: no more connections; the open ones finish */
	/* Open loop (--period-us), on the loop's thread. */
	uint64_t t0, period_ns;
	uint64_t due;	       /* connections due so far */
	int timer;	       /* wakes the loop at the next due time */
	_Atomic uint64_t late; /* connected after the next one fell due */
} hs = {.timer = -1};

static void put_index(uint8_t *p, uint64_t i)
{
	wl_put_le64(p, i ^ WL_PAT_SEED);
}

/* Client */

static void client_data(struct wl_stream *s, void *ctx, const uint8_t *p, size_t len)
{
	struct hs *d = ctx;
	uint8_t want[WL_HS_MSG];

	(void)s;
	if (d->bad || !len)
		return;
	put_index(want, d->r.i);
	if (d->got + len > WL_HS_MSG || memcmp(p, want + d->got, len)) {
		d->bad = true;
		wl_role.t->close(d->c, WL_CLOSE_VERIFY);
		return;
	}
	memcpy(d->msg + d->got, p, len);
	d->got += (uint32_t)len;
	atomic_fetch_add(&wl_role.app_bytes, len);
	if (d->got == WL_HS_MSG)
		d->r.t_complete = wl_now_ns();
}

static void client_fin(struct wl_stream *s, void *ctx)
{
	struct hs *d = ctx;

	(void)s;
	d->fin = true;
	if (!d->bad)
		wl_role.t->close(d->c, d->got == WL_HS_MSG ? WL_CLOSE_OK : WL_CLOSE_ERROR);
}

static void client_aborted(struct wl_stream *s, void *ctx)
{
	(void)s;
	((struct hs *)ctx)->aborted = true;
}

static const struct wl_stream_handlers client_stream = {
	.writable = wl_ignore,
	.data = client_data,
	.fin = client_fin,
	.aborted = client_aborted,
	.closed = wl_ignore_closed,
};

/* The request: the connection's index, then FIN where streams end apart from the connection. */
static int ask(struct hs *d, unsigned early)
{
	uint8_t req[WL_HS_MSG];
	int code;

	put_index(req, d->r.i);
	code = wl_role.t->open(d->c, &client_stream, d, 0, &d->s);
	if (code)
		return code;
	return wl_send(d->s, req, WL_HS_MSG, NULL, 0,
		       early | (wl_role.t->multistream ? WL_SEND_FIN : 0), NULL);
}

static void client_connected(struct wl_conn *c, void *ctx)
{
	struct hs *d = ctx;

	wl_role_connected(wl_now_ns());
	if (atomic_exchange(&d->asked, true)) /* asked already, early */
		return;
	if (ask(d, 0)) {
		wl_role_fail(WL_EXIT_CONN_LOST, "sending the request of connection %llu failed",
			     (unsigned long long)d->r.i);
		wl_role.t->close(c, WL_CLOSE_ERROR);
	}
}

/* What one connection's end means for the run: 0 if its handshake and echo were whole. */
static int client_outcome(struct hs *d, const struct wl_end *e)
{
	char which[48];

	if (d->bad) {
		wl_role_verify_failed(d->got, d->r.i, "verify_fail_connection");
		wl_role_fail(WL_EXIT_VERIFY,
			     "the echo on connection %llu is not the index the client sent",
			     (unsigned long long)d->r.i);
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
		snprintf(which, sizeof(which), " (connection %llu)", (unsigned long long)d->r.i);
		return wl_role_handshake_failed(e, which);
	}
	if (!d->fin || d->got != WL_HS_MSG) {
		if (wl_role_stopping() && !d->aborted)
			return -1;
		wl_role_fail(WL_EXIT_CONN_LOST,
			     "connection %llu ended after %u of the echo's %d bytes: %s",
			     (unsigned long long)d->r.i, d->got, WL_HS_MSG, wl_end_why(e));
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
	struct hs *d = ctx;
	uint64_t wait;
	int code;

	wl_role.t->conn_info(c, &d->r);
	code = client_outcome(d, e);
	if (!code) {
		d->r.bytes = d->got;
		wl_role.t_transfer_done_ns = d->r.t_complete;
		/* Open loop: from its due time to its connect call. */
		wait = hs.period_ns ? d->r.t_connect - d->due_ns : WL_ABSENT;
		report(&d->r, wait);
		atomic_fetch_add(&hs.late, hs.period_ns && wait > hs.period_ns);
		atomic_fetch_add(&hs.done, 1);
		atomic_fetch_add(&hs.resumed, d->r.has_resumed && d->r.resumed);
		atomic_fetch_add(&hs.early, d->r.has_early && d->r.early_data);
	}
	if (e->exit_code || code > 0)
		wl_role.end = *e;
	free(d);
	/*
	 * The next connection opens on the loop's thread: msquic's SetParam
	 * (a resumption ticket) from one of its workers can wait on itself.
	 * An open loop's schedule says when instead.
	 */
	if (!code && !hs.period_ns)
		atomic_fetch_add(&hs.owed, 1);
	atomic_fetch_sub(&hs.live, 1);
	wl_loop_wake();
}

static const struct wl_conn_handlers client_conn = {
	.connected = client_connected,
	.closed = client_closed,
};

static void open_one(uint64_t due_ns)
{
	const struct wl_opts *o = wl_role.o;
	struct hs *d = calloc(1, sizeof(*d));
	int code;

	if (!d) {
		wl_role_fail(WL_EXIT_INTERNAL, "out of memory for a connection");
		return;
	}
	d->due_ns = due_ns;
	d->r.i = atomic_fetch_add(&hs.opened, 1);
	atomic_fetch_add(&hs.live, 1);
	code = wl_role.t->connect(&client_conn, d,
				  WL_CONN_NODELAY | (o->resume ? WL_CONN_RESUME : 0), &d->c);
	if (code) {
		free(d);
		atomic_fetch_sub(&hs.live, 1);
		wl_role_fail_said(code);
		return;
	}
	/* Resumed: the request goes before the handshake completes (QUIC 0-RTT). */
	if (o->resume && wl_role.t->early_data && !atomic_exchange(&d->asked, true) &&
	    ask(d, WL_SEND_EARLY)) {
		wl_role_fail(WL_EXIT_INTERNAL, "sending the request as early data failed");
		wl_role.t->close(d->c, WL_CLOSE_ERROR);
	}
}

static uint64_t t_end;

static uint64_t due_at(uint64_t k)
{
	return hs.t0 + k * hs.period_ns;
}

/*
 * Open loop: every connection due by now whose turn has come, while fewer
 * than --conns are open; the timer then wakes the loop at the next due
 * time (a close wakes it anyway). Only this thread opens, so opened is
 * the next connection's number.
 */
static void open_due(uint64_t now, int conns)
{
	uint64_t opened = atomic_load(&hs.opened);

	while (!(t_end && due_at(hs.due) >= t_end) && due_at(hs.due) <= now)
		hs.due++;
	for (; opened < hs.due && atomic_load(&hs.live) < conns && !wl_role.failure.code; opened++)
		open_one(due_at(opened));
	if (t_end && due_at(hs.due) >= t_end && opened == hs.due)
		atomic_store(&hs.ending, true);
	else if (opened == hs.due && wl_timer_arm(hs.timer, due_at(hs.due)))
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
	if (wl_role_stopping() || (t_end && now >= t_end && !hs.period_ns))
		atomic_store(&hs.ending, true);
	if (hs.period_ns && !atomic_load(&hs.ending))
		open_due(now, conns);
	for (; atomic_load(&hs.owed) && !atomic_load(&hs.ending); atomic_fetch_sub(&hs.owed, 1))
		open_one(0);
	return (atomic_load(&hs.ending) || wl_role.failure.code) && !atomic_load(&hs.live);
}

static int hs_client(void)
{
	const struct wl_opts *o = wl_role.o;
	int k, code;

	hs.period_ns = o->period_us * 1000ull;
	if (hs.period_ns) {
		hs.timer = wl_timer_open();
		if (hs.timer < 0 || wl_loop_add(hs.timer, EPOLLIN, timer_fired, NULL)) {
			wl_warn("cannot make the connection timer: %s", strerror(errno));
			return WL_EXIT_INTERNAL;
		}
	}
	if (!wl_role_wait_start())
		return WL_EXIT_OK;
	hs.t0 = wl_now_ns();
	if (o->duration_ms)
		t_end = hs.t0 + o->duration_ms * 1000000ull;
	for (k = 0; !hs.period_ns && k < (o->conns ? o->conns : 1) && !wl_role.failure.code; k++)
		open_one(0);
	code = wl_role_loop(client_over, NULL) ? WL_EXIT_INTERNAL : wl_role.failure.code;
	if (hs.timer >= 0) {
		wl_loop_del(hs.timer);
		close(hs.timer);
	}
	return code;
}

/* Server */

static void server_data(struct wl_stream *s, void *ctx, const uint8_t *p, size_t len)
{
	struct hs *d = ctx;
	size_t k = WL_HS_MSG - d->got;

	if (d->echoed)
		return;
	if (k > len)
		k = len;
	memcpy(d->msg + d->got, p, k);
	d->got += (uint32_t)k;
	atomic_fetch_add(&wl_role.app_bytes, k);
	if (d->got < WL_HS_MSG)
		return;
	d->echoed = true;
	/* A send that fails: the connection's end says why. */
	wl_send(s, d->msg, WL_HS_MSG, NULL, 0, WL_SEND_FIN, NULL);
}

static void server_fin(struct wl_stream *s, void *ctx)
{
	struct hs *d = ctx;

	(void)s;
	d->fin = true;
	/* TCP: the client's FIN is its close, after the echo; the connection is over. */
	if (!wl_role.t->multistream)
		wl_role.t->close(d->c, d->echoed ? WL_CLOSE_OK : WL_CLOSE_ERROR);
}

static void server_aborted(struct wl_stream *s, void *ctx)
{
	(void)s;
	((struct hs *)ctx)->aborted = true;
}

static const struct wl_stream_handlers server_stream_h = {
	.writable = wl_ignore,
	.data = server_data,
	.fin = server_fin,
	.aborted = server_aborted,
	.closed = wl_ignore_closed,
};

static const struct wl_stream_handlers *server_stream(struct wl_conn *c, void *ctx,
						      struct wl_stream *s, void **sctx)
{
	struct hs *d = ctx;

	(void)c;
	if (d->s)
		return NULL; /* one stream a connection */
	d->s = s;
	*sctx = d;
	return &server_stream_h;
}

/*
 * The server's account of one connection: served once it echoed and the
 * client closed without an error. A connection the client gave up on as
 * the run ended, or one that never got its request, is not a failure.
 */
static void server_closed(struct wl_conn *c, void *ctx, const struct wl_end *e)
{
	struct hs *d = ctx;

	(void)c;
	if (e->exit_code && !wl_role_stopping())
		wl_role_fail_end(e);
	else if (e->closed_by_peer && e->peer_error == WL_CLOSE_VERIFY)
		wl_role_fail(WL_EXIT_VERIFY,
			     "the client's check of the echo on connection %llu failed",
			     (unsigned long long)d->r.i);
	else if (d->echoed && !e->peer_error && !d->aborted)
		atomic_fetch_add(&hs.done, 1);
	free(d);
	atomic_fetch_sub(&hs.live, 1);
	wl_loop_wake();
}

static const struct wl_conn_handlers server_conn = {
	.connected = wl_role_conn_up,
	.stream = server_stream,
	.closed = server_closed,
};

static const struct wl_conn_handlers *accept_conn(void *arg, struct wl_conn *c, void **ctx)
{
	struct hs *d;

	(void)arg;
	if (wl_role_stopping() || !(d = calloc(1, sizeof(*d))))
		return NULL;
	d->c = c;
	d->r.i = atomic_fetch_add(&hs.opened, 1);
	atomic_fetch_add(&hs.live, 1);
	*ctx = d;
	return &server_conn;
}

static bool told(void *arg)
{
	(void)arg;
	return wl_role_stopping();
}

static bool all_gone(void *arg)
{
	(void)arg;
	return !atomic_load(&hs.live);
}

/* Serve until "stop", "exit" or EOF (--control), or a failure. */
static int hs_server(void)
{
	const struct wl_accept a = {
		.accept = accept_conn,
		.flags = WL_CONN_NODELAY,
		.peer_bidi_streams = 1,
	};

	return wl_role_serve(&a, told, NULL, all_gone);
}

static void hs_json_mark(struct wl_json *j)
{
	wl_json_u64(j, "handshakes", atomic_load(&hs.done));
	wl_json_u64(j, "connections_opened", atomic_load(&hs.opened));
}

static void hs_json_done(struct wl_json *j, int code)
{
	(void)code;
	wl_json_str(j, "pattern", "handshakes");
	wl_json_u64(j, "handshakes", atomic_load(&hs.done));
	wl_json_u64(j, "connections_opened", atomic_load(&hs.opened));
	if (!wl_role.server) {
		wl_json_u64(j, "resumed", atomic_load(&hs.resumed));
		wl_json_u64(j, "early_data", atomic_load(&hs.early));
	}
	if (!wl_role.server && hs.period_ns) {
		wl_json_u64(j, "period_us", hs.period_ns / 1000);
		wl_json_u64(j, "connections_due", hs.due);
		wl_json_u64(j, "late", atomic_load(&hs.late));
	}
	wl_json_u64(j, "streams_completed", atomic_load(&hs.done));
}

const struct wl_pattern wl_hs = {
	.name = "handshakes",
	.exit_stops = true,
	.server = hs_server,
	.client = hs_client,
	.json_mark = hs_json_mark,
	.json_done = hs_json_done,
};
