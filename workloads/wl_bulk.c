// SPDX-License-Identifier: GPL-2.0-only
/*
 * --pattern bulk: the client uploads, the server checks every byte.
 * --streams N: N unidirectional streams on one connection of a
 * multistream transport (QUIC), else N connections, each with a thread
 * and blocking I/O (TCP, as iperf3 -P). The sender keeps the transport's
 * room filled straight out of the pattern region; it sends for
 * --duration-ms from the handshake (the last connection's, with many),
 * or --bytes per stream, or until "stop".
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "wl_role.h"

struct bconn {
	struct wl_conn *c;
	int idx;
	int nstreams;	    /* streams it carries */
	int streams_closed; /* client: ... closed, gracefully or not */
	int streams_fin;    /* server: ... the peer ended */
	bool connected;
};

struct bstream {
	struct bconn *bc;
	struct wl_stream *s;
	int idx;
	uint64_t off; /* sender: bytes handed to the transport; receiver: checked */
	bool fin;     /* sender: FIN sent; receiver: the peer's came */
	bool bad;     /* receiver: failed the check; the rest is dropped */
};

static struct {
	int nconns;
	struct bconn conns[WL_MAX_STREAMS];
	struct bstream streams[WL_MAX_STREAMS];
	_Atomic int accepted, started, next_stream, connected, closed;
	_Atomic int streams_done;  /* client: closed after its FIN; server: FIN received */
	_Atomic int streams_ended; /* client: closed at all */
	/* TCP client: every connection sends only once all are up (the barrier). */
	pthread_mutex_t lock;
	pthread_cond_t all_up;
	bool released;
	int timer; /* client --duration-ms */
} bulk = {.lock = PTHREAD_MUTEX_INITIALIZER, .all_up = PTHREAD_COND_INITIALIZER, .timer = -1};

static const char *unit(void)
{
	return wl_role.t->multistream ? "stream" : "connection";
}

static void release(void)
{
	pthread_mutex_lock(&bulk.lock);
	bulk.released = true;
	pthread_cond_broadcast(&bulk.all_up);
	pthread_mutex_unlock(&bulk.lock);
}

/* Sender: fill the room; FIN after --bytes, or once told to stop. */
static void send_more(struct wl_stream *s, void *ctx)
{
	struct bstream *bs = ctx;
	const uint32_t period = wl_pattern_period(), io = wl_role.o->io_size;
	const uint64_t end = wl_role.o->bytes;

	while (!bs->fin && wl_room(s) > 0) {
		const uint8_t *body = NULL;
		uint32_t len = 0;
		unsigned flags = 0;

		if (wl_role_stopping()) {
			flags = WL_SEND_FIN;
		} else {
			/* io_size divides the period: a send never crosses its end. */
			body = wl_pattern_region() + bs->off % period;
			len = io;
			if (end && bs->off + len >= end) {
				len = (uint32_t)(end - bs->off);
				flags = WL_SEND_FIN;
			}
		}
		if (wl_send(s, NULL, 0, body, len, flags, NULL)) {
			/* The connection's end says how it went. */
			wl_role.t->close(bs->bc->c, WL_CLOSE_ERROR);
			return;
		}
		bs->off += len;
		atomic_fetch_add_explicit(&wl_role.app_bytes, len, memory_order_relaxed);
		if (flags & WL_SEND_FIN)
			bs->fin = true;
	}
}

static void sender_closed(struct wl_stream *s, void *ctx, bool graceful)
{
	struct bstream *bs = ctx;
	struct bconn *bc = bs->bc;

	(void)s, (void)graceful;
	/* As before: a stream that sent its FIN counts (msquic's refused one too). */
	if (bs->fin)
		atomic_fetch_add(&bulk.streams_done, 1);
	if (atomic_fetch_add(&bulk.streams_ended, 1) + 1 == wl_role.o->streams)
		wl_role.t_transfer_done_ns = wl_now_ns();
	if (++bc->streams_closed == bc->nstreams)
		wl_role.t->close(bc->c, WL_CLOSE_OK);
}

static const struct wl_stream_handlers sender = {
	.writable = send_more,
	.data = wl_ignore_data,
	.fin = wl_ignore,
	.aborted = wl_ignore,
	.closed = sender_closed,
};

static void arm_timer(void)
{
	uint64_t end = wl_role.t_connected_ns + wl_role.o->duration_ms * 1000000ull;
	struct itimerspec its = {.it_value = {.tv_sec = (time_t)(end / 1000000000ull),
					      .tv_nsec = (long)(end % 1000000000ull)}};

	if (bulk.timer >= 0 && timerfd_settime(bulk.timer, TFD_TIMER_ABSTIME, &its, NULL))
		wl_role_fail(WL_EXIT_INTERNAL, "cannot arm the duration timer: %s",
			     strerror(errno));
}

static void client_connected(struct wl_conn *c, void *ctx)
{
	struct bconn *bc = ctx;
	int i, code;

	bc->connected = true;
	if (atomic_fetch_add(&bulk.connected, 1) + 1 == bulk.nconns) {
		if (!wl_role.failure.code) {
			/* The clock starts at the handshake, not at the process. */
			wl_role_connected(wl_now_ns());
			if (wl_role.o->duration_ms)
				arm_timer();
		}
		release();
	} else {
		/* Only with a connection per stream: its own thread may wait. */
		pthread_mutex_lock(&bulk.lock);
		while (!bulk.released)
			pthread_cond_wait(&bulk.all_up, &bulk.lock);
		pthread_mutex_unlock(&bulk.lock);
	}
	for (i = 0; i < bc->nstreams; i++) {
		struct bstream *bs = &bulk.streams[bc->idx + i];

		bs->bc = bc;
		bs->idx = bc->idx + i;
		code = wl_role.t->open(c, &sender, bs, WL_STREAM_UNI, &bs->s);
		if (code) {
			wl_role_fail(code, "opening %s %d failed", unit(), bs->idx);
			wl_role.t->close(c, WL_CLOSE_ERROR);
			return;
		}
	}
}

/* Server: the bytes checked so far, on every stream. */
static uint64_t received(void)
{
	uint64_t sum = 0;
	int i;

	for (i = 0; i < wl_role.o->streams; i++)
		sum += atomic_load_explicit(&wl_role.stream_bytes[i], memory_order_relaxed);
	return sum;
}

static void client_closed(struct wl_conn *c, void *ctx, const struct wl_end *e)
{
	struct bconn *bc = ctx;
	int fins = 0, i;

	(void)c;
	wl_role.end = *e;
	for (i = 0; i < bc->nstreams; i++)
		fins += bulk.streams[bc->idx + i].fin;
	if (e->exit_code)
		wl_role_fail_end(e);
	else if (!e->connected)
		wl_role_handshake_failed(e, "");
	else if (bc->streams_closed == bc->nstreams && fins == bc->nstreams)
		;
	else if (wl_role.t->multistream)
		wl_role_fail(WL_EXIT_CONN_LOST,
			     "connection ended after %llu bytes, before the transfer finished: %s",
			     (unsigned long long)atomic_load(&wl_role.app_bytes), wl_end_why(e));
	else
		wl_role_fail(WL_EXIT_CONN_LOST,
			     "sending on connection %d failed after %llu bytes: %s", bc->idx,
			     (unsigned long long)bulk.streams[bc->idx].off, wl_end_why(e));
	if (!bc->connected)
		release();
	atomic_fetch_add(&bulk.closed, 1);
	wl_loop_wake();
}

static const struct wl_conn_handlers client_conn = {
	.connected = client_connected,
	.closed = client_closed,
};

static void on_timer(int fd, uint32_t events, void *arg)
{
	uint64_t v;

	(void)events, (void)arg;
	if (read(fd, &v, sizeof(v)) > 0)
		atomic_store(&wl_role.stopping, true);
}

static bool all_closed(void *arg)
{
	(void)arg;
	return atomic_load(&bulk.closed) == atomic_load(&bulk.started);
}

static int bulk_client(void)
{
	const bool multi = wl_role.t->multistream;
	const unsigned flags = WL_CONN_SENDER | WL_CONN_STATS | (multi ? 0 : WL_CONN_DEDICATED);
	int i, code = 0;

	bulk.nconns = multi ? 1 : wl_role.o->streams;
	if (wl_role.o->duration_ms) {
		bulk.timer = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
		if (bulk.timer < 0 || wl_loop_add(bulk.timer, EPOLLIN, on_timer, NULL)) {
			wl_warn("cannot make the duration timer: %s", strerror(errno));
			return WL_EXIT_INTERNAL;
		}
	}
	if (!wl_role_wait_start())
		return WL_EXIT_OK;
	for (i = 0; i < bulk.nconns; i++) {
		struct bconn *bc = &bulk.conns[i];

		bc->idx = i;
		bc->nstreams = multi ? wl_role.o->streams : 1;
		atomic_fetch_add(&bulk.started, 1);
		code = wl_role.t->connect(&client_conn, bc, flags, &bc->c);
		if (code) {
			atomic_fetch_sub(&bulk.started, 1);
			wl_role_fail_said(code);
			release();
			break;
		}
	}
	wl_role_loop(all_closed, NULL);
	return wl_role.failure.code;
}

static void receive(struct wl_stream *s, void *ctx, const uint8_t *p, size_t len)
{
	struct bstream *bs = ctx;

	(void)s;
	if (bs->bad)
		return;
	if (!wl_pattern_check(bs->off, p, len)) {
		bs->bad = true;
		wl_role_verify_failed(bs->off, (uint64_t)bs->idx, "verify_fail_stream");
		wl_role_fail(WL_EXIT_VERIFY,
			     "received data failed the content check on %s %d at offset %llu",
			     unit(), bs->idx, (unsigned long long)bs->off);
		wl_role.t->close(bs->bc->c, WL_CLOSE_VERIFY);
		return;
	}
	bs->off += len;
	/* The receiver's app_bytes are its streams' sum (wl_role.c): one store, no atomic add. */
	atomic_store_explicit(&wl_role.stream_bytes[bs->idx], bs->off, memory_order_relaxed);
}

static void receive_fin(struct wl_stream *s, void *ctx)
{
	struct bstream *bs = ctx;

	bs->fin = true;
	bs->bc->streams_fin++;
	if (atomic_fetch_add(&bulk.streams_done, 1) + 1 == wl_role.o->streams)
		wl_role.t_transfer_done_ns = wl_now_ns();
	/* Ours needs no ending: QUIC's stream is the peer's alone, a dedicated TCP one ends itself. */
	(void)s;
}

static void receive_closed(struct wl_stream *s, void *ctx, bool graceful)
{
	(void)s, (void)ctx, (void)graceful;
}

static const struct wl_stream_handlers receiver = {
	.writable = wl_ignore,
	.data = receive,
	.fin = receive_fin,
	.aborted = wl_ignore, /* the transport aborts it back */
	.closed = receive_closed,
};

static void server_connected(struct wl_conn *c, void *ctx)
{
	(void)c;
	((struct bconn *)ctx)->connected = true;
	if (atomic_fetch_add(&bulk.connected, 1) + 1 == bulk.nconns && !wl_role.failure.code)
		wl_role_connected(wl_now_ns());
}

static const struct wl_stream_handlers *server_stream(struct wl_conn *c, void *ctx,
						      struct wl_stream *s, void **sctx)
{
	struct bconn *bc = ctx;
	struct bstream *bs;
	int i = bc->idx;

	(void)c;
	if (wl_role.t->multistream) {
		i = atomic_fetch_add(&bulk.next_stream, 1);
		if (i >= wl_role.o->streams)
			return NULL;
		atomic_store(&wl_role.streams_seen, i + 1);
	}
	bs = &bulk.streams[i];
	bs->bc = bc;
	bs->s = s;
	bs->idx = i;
	*sctx = bs;
	return &receiver;
}

static void server_closed(struct wl_conn *c, void *ctx, const struct wl_end *e)
{
	struct bconn *bc = ctx;

	(void)c;
	wl_role.end = *e;
	if (e->exit_code)
		wl_role_fail_end(e);
	else if (!e->connected)
		wl_role_handshake_failed(e, "");
	else if (bc->streams_fin < bc->nstreams && wl_role.t->multistream)
		wl_role_fail(WL_EXIT_CONN_LOST,
			     "connection ended after %llu bytes, before the transfer finished: %s",
			     (unsigned long long)received(), wl_end_why(e));
	else if (bc->streams_fin < bc->nstreams)
		wl_role_fail(WL_EXIT_CONN_LOST, "connection %d ended after %llu bytes: %s", bc->idx,
			     (unsigned long long)bulk.streams[bc->idx].off, wl_end_why(e));
	else if (e->closed_by_peer && e->peer_error)
		wl_role_fail(WL_EXIT_CONN_LOST, "client closed the connection with error %llu",
			     (unsigned long long)e->peer_error);
	atomic_fetch_add(&bulk.closed, 1);
	wl_loop_wake();
}

static const struct wl_conn_handlers server_conn = {
	.connected = server_connected,
	.stream = server_stream,
	.closed = server_closed,
};

/* One connection a run with many streams, else one per stream; latecomers are refused. */
static const struct wl_conn_handlers *accept_conn(void *arg, struct wl_conn *c, void **ctx)
{
	int i = atomic_fetch_add(&bulk.accepted, 1);
	struct bconn *bc;

	(void)arg;
	if (i >= bulk.nconns)
		return NULL;
	bc = &bulk.conns[i];
	bc->c = c;
	bc->idx = i;
	bc->nstreams = wl_role.t->multistream ? wl_role.o->streams : 1;
	/* TCP: stream_bytes[i] is the i-th connection accepted. */
	if (!wl_role.t->multistream)
		atomic_store(&wl_role.streams_seen, i + 1);
	*ctx = bc;
	return &server_conn;
}

static bool server_over(void *arg)
{
	(void)arg;
	return atomic_load(&bulk.closed) == bulk.nconns;
}

static int bulk_server(void)
{
	const struct wl_accept a = {
		.accept = accept_conn,
		.flags = WL_CONN_STATS | (wl_role.t->multistream ? 0 : WL_CONN_DEDICATED),
		.peer_uni_streams = (uint16_t)wl_role.o->streams,
	};

	bulk.nconns = wl_role.t->multistream ? 1 : wl_role.o->streams;
	wl_role.per_stream = true;
	return wl_role_serve(&a, server_over, NULL, NULL);
}

static void bulk_json_done(struct wl_json *j, int code)
{
	(void)code;
	wl_json_u64(j, "streams_completed", (uint64_t)atomic_load(&bulk.streams_done));
}

const struct wl_pattern wl_bulk = {
	.name = "bulk",
	.server = bulk_server,
	.client = bulk_client,
	.json_done = bulk_json_done,
};
