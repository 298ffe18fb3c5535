// SPDX-License-Identifier: GPL-2.0-only
/*
 * --pattern rr over a transport (wl.h says the pattern; wl_rr.c holds the
 * schedule, the message and its check). The client's main thread runs the
 * schedule on the loop and hands each request to the transport as it falls
 * due: on its own stream (multistream, --rr-streams per-request), on the
 * one stream of its one connection, or (--tcp-conns on-demand) on an idle
 * connection, a new one, or else it waits for the first to fall idle;
 * with --conns, on each connection in turn. Closed loop (--rr-mode
 * closed), an answer sends the next request on its connection at once,
 * until --duration-ms or, with --count, until --count are answered (qprof's
 * --pattern video: one connection fetching its segments one after another). A
 * byte-stream transport takes a request only with room (wl_room), so one
 * that cannot go yet waits here, due time and all, and its sent_ns is its
 * first write; msquic queues every request itself, as before.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "wl_role.h"

#define RR_PEER_STREAMS 1024 /* the server's limit on the client's open streams */

/* A connection and (but for per-request streams) its one stream. */
struct rconn {
	struct rconn *next, *prev;
	struct wl_conn *c;
	struct wl_stream *s;
	int idx;
	pthread_mutex_t lock;	/* q: the loop against msquic's worker */
	struct wl_rr_fifo q;	/* client: requests handed to the transport, oldest first */
	struct wl_rr_fifo held; /* client: requests waiting for room */
	struct wl_rr_rx rx;	/* the message coming in on s */
	bool up;		/* connected (client: with its stream open) */
	bool paused;		/* server: reads no more until its answers have room */
	bool aborted;		/* server: the client left */
	bool gone;		/* client: closed (msquic's handle stays open until fini) */
};

/* Client, per-request streams: a request and its stream. */
struct rreq {
	struct rconn *rc;
	struct wl_rr_req req;
	struct wl_rr_rx rx;
	uint64_t t_answer; /* the response's last byte came */
	bool failed;	   /* the run failed on it already */
};

/* Server: one stream, as many requests as it brings. */
struct rstream {
	struct rconn *rc;
	struct wl_rr_rx rx;
	bool fin_sent;
	bool spent; /* answered a bad request and ended: the rest is dropped */
};

static struct {
	pthread_mutex_t lock; /* the list, against handlers on msquic's workers */
	struct rconn *conns;
	int nconns;
	_Atomic int live;
	struct wl_rr_sched sched;  /* client */
	int want;		   /* client: connections to open at the start */
	int in_flight;		   /* closed-loop client: requests kept in flight per connection */
	_Atomic int nup;	   /* client: connections up */
	_Atomic bool up;	   /* client: all are up; the schedule may start */
	_Atomic int issuing;	   /* closed-loop client: answers sending the next request */
	struct rconn *turn;	   /* open-loop client: the connection the next request goes on */
	_Atomic bool closing;	   /* client: it closes its connections itself */
	_Atomic bool draining;	   /* client: no more requests fall due */
	struct wl_rr_fifo pending; /* on-demand client: due, with no connection to go on */
	bool refused;		   /* server: said once that it refused a connection */
} rr = {.lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP, .sched.timer = -1};

static bool one_stream(void)
{
	return !wl_role.t->multistream || wl_role.o->rr_one_stream;
}

static void list_add(struct rconn *rc)
{
	pthread_mutex_lock(&rr.lock);
	rc->next = rr.conns;
	if (rr.conns)
		rr.conns->prev = rc;
	rr.conns = rc;
	rr.nconns++;
	pthread_mutex_unlock(&rr.lock);
}

static void list_del(struct rconn *rc)
{
	pthread_mutex_lock(&rr.lock);
	if (rc->prev)
		rc->prev->next = rc->next;
	else
		rr.conns = rc->next;
	if (rc->next)
		rc->next->prev = rc->prev;
	rr.nconns--;
	pthread_mutex_unlock(&rr.lock);
}

static struct rconn *rconn_new(void)
{
	struct rconn *rc = calloc(1, sizeof(*rc));

	if (rc)
		pthread_mutex_init(&rc->lock, NULL);
	return rc;
}

static void rconn_free(struct rconn *rc)
{
	wl_rr_fifo_free(&rc->q);
	wl_rr_fifo_free(&rc->held);
	pthread_mutex_destroy(&rc->lock);
	free(rc);
}

/* Closes every connection (the closed handlers may run inside, on the loop's thread). */
static void close_all(uint64_t code)
{
	struct rconn *rc, *next;

	pthread_mutex_lock(&rr.lock);
	for (rc = rr.conns; rc; rc = next) {
		next = rc->next;
		if (!rc->gone)
			wl_role.t->close(rc->c, code);
	}
	pthread_mutex_unlock(&rr.lock);
}

static int send_msg(struct wl_stream *s, uint64_t seq, unsigned flags)
{
	uint8_t hdr[WL_RR_HDR];

	wl_put_le64(hdr, seq);
	return wl_send(s, hdr, WL_RR_HDR, wl_rr_body(wl_rr.tx_size), wl_rr.tx_size - WL_RR_HDR,
		       flags, NULL);
}

/* Client */

/* The run fails; the connections close from the loop, a failed check's with its code. */
static void client_failed(int code, const char *why, const struct rconn *rc)
{
	if (code == WL_EXIT_VERIFY)
		atomic_store(&wl_role.verify_failed, true);
	if (rc && !wl_role.t->multistream)
		wl_role_fail(code, "%s (connection %d)", why, rc->idx);
	else
		wl_role_fail(code, "%s", why);
}

static void issue(struct rconn *rc);
static bool counted_out(void);

/* rc: the connection it came on; closed loop, the next request goes on it. */
static bool answered(const struct wl_rr_req *req, const struct wl_rr_rx *rx, uint64_t t,
		     struct rconn *rc)
{
	char why[256];
	int code = wl_rr_answer(req, rx, t, rc ? (uint64_t)rc->idx : 0, why, sizeof(why));

	if (code) {
		client_failed(code, why, rc);
		return false;
	}
	atomic_fetch_add(&wl_role.app_bytes, wl_rr.rx_size);
	/* issuing first: the loop, once draining, waits for it (idle()). */
	if (wl_rr.closed && rc) {
		atomic_fetch_add(&rr.issuing, 1);
		if (!atomic_load(&rr.draining) && !wl_role.failure.code && !rc->gone)
			issue(rc);
		atomic_fetch_sub(&rr.issuing, 1);
	}
	if ((atomic_load(&rr.draining) &&
	     atomic_load(&wl_rr.responses) == atomic_load(&wl_rr.sent)) ||
	    counted_out())
		wl_loop_wake();
	return true;
}

/* Hands request seq to rc's stream now; false if it must wait for room. */
static bool hand(struct rconn *rc, uint64_t seq)
{
	uint64_t now = wl_now_ns();
	int code;

	pthread_mutex_lock(&rc->lock);
	if (wl_rr_fifo_push(&rc->q, seq)) {
		pthread_mutex_unlock(&rc->lock);
		client_failed(WL_EXIT_INTERNAL, "out of memory for the requests on a connection",
			      rc);
		return true;
	}
	wl_rr_fifo_at(&rc->q, rc->q.len - 1)->sent_ns = now;
	pthread_mutex_unlock(&rc->lock);
	atomic_fetch_add(&wl_rr.sent, 1);
	code = send_msg(rc->s, seq, 0);
	if (code) {
		char why[128];

		snprintf(why, sizeof(why), "sending request %llu failed", (unsigned long long)seq);
		client_failed(WL_EXIT_CONN_LOST, why, rc);
	}
	return true;
}

/* The held requests go while there is room (a byte-stream transport's connection). */
static void flush(struct rconn *rc)
{
	while (rc->up && !rc->gone && rc->held.len && !wl_role.failure.code && wl_room(rc->s) > 0) {
		uint64_t seq = wl_rr_fifo_at(&rc->held, 0)->seq;

		wl_rr_fifo_pop(&rc->held);
		hand(rc, seq);
	}
}

static void queue_on(struct rconn *rc, uint64_t seq)
{
	/* msquic takes every request at once and queues it itself, as before. */
	if (wl_role.t->multistream) {
		hand(rc, seq);
		return;
	}
	if (wl_rr_fifo_push(&rc->held, seq)) {
		client_failed(WL_EXIT_INTERNAL, "out of memory for the requests on a connection",
			      rc);
		return;
	}
	flush(rc);
}

static void one_writable(struct wl_stream *s, void *ctx)
{
	(void)s;
	if (!wl_role.t->multistream)
		flush(ctx);
}

static void one_data(struct wl_stream *s, void *ctx, const uint8_t *p, size_t len)
{
	struct rconn *rc = ctx;
	uint64_t t = wl_now_ns();

	(void)s;
	while (len && !wl_role.failure.code) {
		struct wl_rr_req req;
		bool waiting;
		size_t k = wl_rr_rx_feed(&rc->rx, p, len);

		p += k, len -= k;
		if (!wl_rr_rx_ready(&rc->rx))
			break;
		pthread_mutex_lock(&rc->lock);
		waiting = rc->q.len > 0;
		if (waiting) {
			req = *wl_rr_fifo_at(&rc->q, 0);
			wl_rr_fifo_pop(&rc->q);
		}
		pthread_mutex_unlock(&rc->lock);
		if (!answered(waiting ? &req : NULL, &rc->rx, t, rc))
			return;
		rc->rx = (struct wl_rr_rx){0};
		/* On-demand: an idle connection takes the oldest request that waited. */
		if (wl_role.o->tcp_on_demand && !rc->q.len && !rc->held.len && rr.pending.len) {
			uint64_t seq = wl_rr_fifo_at(&rr.pending, 0)->seq;

			wl_rr_fifo_pop(&rr.pending);
			queue_on(rc, seq);
		}
	}
}

static void one_ended(struct rconn *rc, const char *why)
{
	char msg[256];

	if (atomic_load(&rr.closing))
		return;
	if (wl_role.t->multistream)
		snprintf(msg, sizeof(msg), "the server ended the one stream mid-run");
	else
		snprintf(msg, sizeof(msg),
			 "the server closed connection %d with %u requests on it: %s", rc->idx,
			 rc->q.len + rc->held.len, why);
	wl_role_fail(WL_EXIT_CONN_LOST, "%s", msg);
}

static void one_fin(struct wl_stream *s, void *ctx)
{
	(void)s;
	one_ended(ctx, strcmp(wl_role.label, "TLS") ? "EOF" : "close_notify");
}

static void one_aborted(struct wl_stream *s, void *ctx)
{
	(void)s;
	/* TCP: the connection's end gives the reason (a reset, an error). */
	if (wl_role.t->multistream)
		one_ended(ctx, "");
}

static void one_closed(struct wl_stream *s, void *ctx, bool graceful)
{
	(void)s, (void)ctx, (void)graceful;
}

static const struct wl_stream_handlers one_h = {
	.writable = one_writable,
	.data = one_data,
	.fin = one_fin,
	.aborted = one_aborted,
	.closed = one_closed,
};

static void req_data(struct wl_stream *s, void *ctx, const uint8_t *p, size_t len)
{
	struct rreq *r = ctx;
	char why[256];

	(void)s;
	if (r->failed)
		return;
	const bool overrun = wl_rr_rx_feed(&r->rx, p, len) < len;

	if (r->rx.bad) { /* fails now, not at the FIN */
		r->failed = !answered(&r->req, &r->rx, wl_now_ns(), r->rc);
	} else if (overrun) {
		r->failed = true;
		snprintf(
			why, sizeof(why),
			"the response to request %llu is longer than --response's %u bytes (is --response the same on both roles?)",
			(unsigned long long)r->req.seq, wl_rr.rx_size);
		client_failed(WL_EXIT_VERIFY, why, NULL);
	} else if (wl_rr_rx_whole(&r->rx) && !r->t_answer) {
		r->t_answer = wl_now_ns();
	}
}

static void req_fin(struct wl_stream *s, void *ctx)
{
	struct rreq *r = ctx;
	char why[256];

	(void)s;
	if (r->failed)
		return;
	if (!wl_rr_rx_whole(&r->rx)) {
		r->failed = true;
		snprintf(
			why, sizeof(why),
			"the response to request %llu is shorter than --response's %u bytes (is --response the same on both roles?)",
			(unsigned long long)r->req.seq, wl_rr.rx_size);
		client_failed(WL_EXIT_VERIFY, why, NULL);
		return;
	}
	answered(&r->req, &r->rx, r->t_answer, r->rc);
}

static void req_aborted(struct wl_stream *s, void *ctx)
{
	struct rreq *r = ctx;
	char why[128];

	(void)s;
	if (atomic_load(&rr.closing))
		return;
	snprintf(why, sizeof(why), "the server reset request %llu's stream",
		 (unsigned long long)r->req.seq);
	client_failed(WL_EXIT_CONN_LOST, why, NULL);
}

static void req_closed(struct wl_stream *s, void *ctx, bool graceful)
{
	(void)s, (void)graceful;
	free(ctx);
}

static const struct wl_stream_handlers req_h = {
	.writable = wl_ignore,
	.data = req_data,
	.fin = req_fin,
	.aborted = req_aborted,
	.closed = req_closed,
};

/* Per-request streams: the request opens its own, started with its data. */
static void send_on_stream(struct rconn *rc, uint64_t seq)
{
	struct rreq *r = calloc(1, sizeof(*r));
	struct wl_stream *s;
	char why[128];

	if (!r) {
		client_failed(WL_EXIT_INTERNAL, "out of memory for a request", NULL);
		return;
	}
	r->rc = rc;
	r->req.seq = seq;
	if (wl_role.t->open(rc->c, &req_h, r, WL_STREAM_LAZY, &s)) {
		free(r);
		goto failed;
	}
	r->req.sent_ns = wl_now_ns();
	atomic_fetch_add(&wl_rr.sent, 1);
	/* r is the stream's (its closed handler's) from here on, once its first send went. */
	if (!send_msg(s, seq, WL_SEND_FIN))
		return;
	free(r); /* a lazy stream whose first send failed never started: no handler comes */
failed:
	snprintf(why, sizeof(why), "sending request %llu failed", (unsigned long long)seq);
	client_failed(WL_EXIT_CONN_LOST, why, NULL);
}

static const struct wl_conn_handlers client_conn;

/* A new connection (on-demand: the request waits on it until it is up). */
static struct rconn *open_conn(void)
{
	struct rconn *rc = rconn_new();
	int code;

	if (!rc) {
		client_failed(WL_EXIT_INTERNAL, "out of memory for a connection", NULL);
		return NULL;
	}
	rc->idx = atomic_fetch_add(&wl_rr.connections, 1);
	list_add(rc);
	atomic_fetch_add(&rr.live, 1);
	code = wl_role.t->connect(&client_conn, rc, WL_CONN_NODELAY | WL_CONN_STATS, &rc->c);
	if (code) {
		atomic_fetch_sub(&rr.live, 1);
		list_del(rc);
		rconn_free(rc);
		wl_role_fail_said(code);
		return NULL;
	}
	return rc;
}

/* Request seq goes on rc: on its one stream, or on a stream of its own. */
static void send_on(struct rconn *rc, uint64_t seq)
{
	if (one_stream())
		queue_on(rc, seq);
	else
		send_on_stream(rc, seq);
}

/* Closed loop: the next request, on rc; none past --count. */
static void issue(struct rconn *rc)
{
	const uint64_t count = wl_role.o->count;
	uint64_t seq = atomic_load(&wl_rr.next_seq);

	do {
		if (count && seq >= count)
			return;
	} while (!atomic_compare_exchange_weak(&wl_rr.next_seq, &seq, seq + 1));
	atomic_fetch_add(&wl_rr.due, 1);
	send_on(rc, seq);
}

/* Closed loop with --count: every request asked for has been answered. */
static bool counted_out(void)
{
	const uint64_t count = wl_role.o->count;

	return wl_rr.closed && count && atomic_load(&wl_rr.responses) >= count;
}

/* Request seq fell due (the schedule calls, on the loop's thread). */
static void dispatch(uint64_t seq, void *arg)
{
	struct rconn *rc = NULL, *it;

	(void)arg;
	if (!wl_role.o->tcp_on_demand) {
		/* Each connection in turn (client_closed moves the turn past one it frees). */
		rc = rr.turn ? rr.turn : rr.conns;
		rr.turn = rc ? rc->next : NULL;
		if (!rc || rc->gone)
			return;
		send_on(rc, seq);
		return;
	}
	for (it = rr.conns; it && !rc; it = it->next)
		if (it->up && !it->q.len && !it->held.len)
			rc = it;
	if (!rc && rr.nconns < WL_RR_MAX_CONNS && !(rc = open_conn()))
		return;
	if (!rc) {
		if (wl_rr_fifo_push(&rr.pending, seq))
			client_failed(WL_EXIT_INTERNAL, "out of memory for pending requests", NULL);
		return;
	}
	queue_on(rc, seq);
}

static void client_connected(struct wl_conn *c, void *ctx)
{
	struct rconn *rc = ctx;
	int code;

	wl_role_connected(wl_now_ns());
	if (one_stream()) {
		code = wl_role.t->open(c, &one_h, rc, 0, &rc->s);
		if (code) {
			wl_role_fail(code, "opening the stream failed");
			return;
		}
	}
	rc->up = true;
	if (atomic_fetch_add(&rr.nup, 1) + 1 >= rr.want)
		atomic_store(&rr.up, true);
	wl_loop_wake();
	if (one_stream())
		flush(rc);
}

static void client_closed(struct wl_conn *c, void *ctx, const struct wl_end *e)
{
	struct rconn *rc = ctx;

	(void)c;
	if (rc->idx == 0)
		wl_role.end = *e;
	if (e->exit_code)
		wl_role_fail_end(e);
	else if (atomic_load(&rr.closing))
		; /* closed by the run's end: one still handshaking (on-demand) too */
	else if (!e->connected)
		wl_role_handshake_failed(e, "");
	else if (wl_role.t->multistream)
		wl_role_fail(WL_EXIT_CONN_LOST, "the connection ended after %llu responses: %s",
			     (unsigned long long)atomic_load(&wl_rr.responses), wl_end_why(e));
	else
		one_ended(rc, wl_end_why(e));
	rc->gone = true;
	/* TCP's handlers run on the loop's thread, which alone looks at the list. */
	if (!wl_role.t->multistream) {
		if (rr.turn == rc)
			rr.turn = rc->next;
		list_del(rc);
		rconn_free(rc);
	}
	atomic_fetch_sub(&rr.live, 1);
	wl_loop_wake();
}

static const struct wl_conn_handlers client_conn = {
	.connected = client_connected,
	.closed = client_closed,
};

static void tick(int fd, uint32_t events, void *arg)
{
	(void)fd, (void)events, (void)arg;
	if (wl_rr_sched_tick(&rr.sched, dispatch, NULL, &wl_role.failure))
		client_failed(WL_EXIT_INTERNAL, "cannot arm the request timer", NULL);
}

static bool idle(void)
{
	struct rconn *rc;

	if (atomic_load(&rr.issuing) || atomic_load(&wl_rr.responses) != atomic_load(&wl_rr.sent) ||
	    rr.pending.len)
		return false;
	for (rc = rr.conns; rc; rc = rc->next)
		if (rc->held.len)
			return false;
	return true;
}

/* Closed loop: every connection's first requests; each answer sends the next. */
static void start_closed(void)
{
	struct rconn *rc;
	int k;

	for (rc = rr.conns; rc; rc = rc->next)
		for (k = 0; k < rr.in_flight && !wl_role.failure.code && !rc->gone; k++)
			issue(rc);
}

static bool client_over(void *arg)
{
	uint64_t now = wl_now_ns();

	(void)arg;
	wl_emit_tick();
	if (wl_role.failure.code || !atomic_load(&rr.live))
		return true;
	if (rr.sched.phase == WL_RR_WAIT_CONN && atomic_load(&rr.up)) {
		if (wl_rr_sched_start(&rr.sched, wl_role.o->duration_ms)) {
			client_failed(WL_EXIT_INTERNAL, "cannot arm the request timer", NULL);
			return true;
		}
		if (wl_rr.closed)
			start_closed();
	}
	if (wl_role_stopping() &&
	    wl_rr_sched_stop(&rr.sched, now, dispatch, NULL, &wl_role.failure)) {
		client_failed(WL_EXIT_INTERNAL, "cannot arm the request timer", NULL);
		return true;
	}
	if (counted_out()) {
		atomic_store(&rr.draining, true);
		return idle();
	}
	if (rr.sched.phase != WL_RR_DRAINING)
		return false;
	atomic_store(&rr.draining, true);
	return idle() || wl_rr_sched_over(&rr.sched, now);
}

static bool all_closed(void *arg)
{
	(void)arg;
	return !atomic_load(&rr.live);
}

static int rr_client(void)
{
	struct rconn *rc;
	int k;

	if (wl_rr_sched_open(&rr.sched) || wl_loop_add(rr.sched.timer, EPOLLIN, tick, NULL)) {
		wl_warn("cannot make the request timer: %s", strerror(errno));
		return WL_EXIT_INTERNAL;
	}
	if (!wl_role_wait_start())
		return WL_EXIT_OK;
	/* --conns connections; a TCP connection carries one request in flight, so x --streams closed. */
	rr.want = wl_role.o->conns ? wl_role.o->conns : 1;
	rr.in_flight = 1;
	if (wl_rr.closed && wl_role.t->multistream)
		rr.in_flight = wl_role.o->streams;
	else if (wl_rr.closed)
		rr.want *= wl_role.o->streams;
	for (k = 0; k < rr.want; k++)
		if (!open_conn())
			break;
	if (!wl_role.failure.code)
		wl_role_loop(client_over, NULL);
	wl_role.t_transfer_done_ns = atomic_load(&wl_rr.t_last_answer);
	atomic_store(&rr.closing, true);
	close_all(atomic_load(&wl_role.verify_failed) ? WL_CLOSE_VERIFY
		  : wl_role.failure.code	      ? WL_CLOSE_ERROR
						      : WL_CLOSE_OK);
	wl_role_loop(all_closed, NULL);
	while (rr.conns) {
		rc = rr.conns;
		list_del(rc);
		rconn_free(rc);
	}
	wl_loop_del(rr.sched.timer);
	wl_rr_sched_close(&rr.sched);
	wl_rr_fifo_free(&rr.pending);
	return wl_role.failure.code;
}

/* Server */

/*
 * Answers the request in st->rx; one that is short or failed its check is
 * the stream's last (wl.h says why).
 */
static void respond(struct wl_stream *s, struct rstream *st, bool fin)
{
	uint64_t seq = wl_get_le64(st->rx.hdr);
	const bool bad = st->rx.bad || !wl_rr_rx_whole(&st->rx);

	if (bad) {
		st->spent = true;
		fin = true;
		if (!atomic_exchange(&wl_role.verify_failed, true)) {
			if (wl_role.t->multistream)
				wl_role_fail_later(
					WL_EXIT_VERIFY,
					"request %llu %s (is --request the same on both roles?); answered at once, for the client to see, and the stream ended",
					(unsigned long long)seq,
					st->rx.bad ? "failed the content check"
						   : "is shorter than --request");
			else
				wl_role_fail_later(
					WL_EXIT_VERIFY,
					"request %llu on connection %d failed the content check (is --request the same on both roles?); answered at once, for the client to see, and the connection ended",
					(unsigned long long)seq, st->rc->idx);
		}
	}
	atomic_fetch_add(&wl_role.app_bytes, st->rx.got);
	/*
	 * An answer counts as served once the transport took it whole, as a
	 * sender's app_bytes count. Not at its sent handler: msquic's comes
	 * at the answer's acknowledgement, which a client closing at once
	 * after reading it can cancel (the server then counted one fewer
	 * than the client received, once in a CI run).
	 */
	if (!send_msg(s, seq, fin ? WL_SEND_FIN : 0)) {
		atomic_fetch_add(&wl_rr.served, 1);
		st->fin_sent = st->fin_sent || fin;
	}
}

static void server_data(struct wl_stream *s, void *ctx, const uint8_t *p, size_t len)
{
	struct rstream *st = ctx;

	while (len && !st->spent) {
		size_t k = wl_rr_rx_feed(&st->rx, p, len);

		p += k, len -= k;
		if (!wl_rr_rx_ready(&st->rx))
			break;
		respond(s, st, false);
		st->rx = (struct wl_rr_rx){0};
	}
	/* Not another request until the answers have room to go (TCP). */
	if (wl_role.t->pause && !st->rc->paused && !st->spent && wl_room(s) == 0) {
		st->rc->paused = true;
		wl_role.t->pause(s, true);
	}
}

static void server_writable(struct wl_stream *s, void *ctx)
{
	struct rstream *st = ctx;

	if (st->rc->paused && wl_room(s) > 0) {
		st->rc->paused = false;
		wl_role.t->pause(s, false);
	}
}

static void server_fin(struct wl_stream *s, void *ctx)
{
	struct rstream *st = ctx;

	if (st->spent)
		return;
	if (!wl_role.t->multistream) {
		/* The client is gone; a request cut short is the connection's loss. */
		if (st->rx.got) {
			wl_role_fail(WL_EXIT_CONN_LOST,
				     "connection %d ended %u bytes into a request: %s", st->rc->idx,
				     st->rx.got,
				     strcmp(wl_role.label, "TLS") ? "EOF" : "close_notify");
			wl_role.t->close(st->rc->c, WL_CLOSE_ERROR);
			return;
		}
		wl_role.t->close(st->rc->c, WL_CLOSE_OK);
		return;
	}
	if (st->rx.got) /* a short request */
		respond(s, st, true);
	else if (!st->fin_sent)
		wl_send(s, NULL, 0, NULL, 0, WL_SEND_FIN, NULL);
	st->fin_sent = true;
}

static void server_aborted(struct wl_stream *s, void *ctx)
{
	struct rstream *st = ctx;

	(void)s;
	st->rc->aborted = true;
	if (wl_role.t->multistream)
		return; /* the transport aborts the stream back */
	if (st->rx.got)
		wl_role_fail(WL_EXIT_CONN_LOST, "connection %d ended %u bytes into a request: %s",
			     st->rc->idx, st->rx.got, "the client went away");
	wl_role.t->close(st->rc->c, WL_CLOSE_ERROR);
}

static void server_stream_closed(struct wl_stream *s, void *ctx, bool graceful)
{
	(void)s, (void)graceful;
	free(ctx);
}

static const struct wl_stream_handlers server_stream_h = {
	.writable = server_writable,
	.data = server_data,
	.fin = server_fin,
	.aborted = server_aborted,
	.closed = server_stream_closed,
};

static void server_connected(struct wl_conn *c, void *ctx)
{
	(void)c;
	((struct rconn *)ctx)->up = true;
	wl_role_connected(wl_now_ns());
}

static const struct wl_stream_handlers *server_stream(struct wl_conn *c, void *ctx,
						      struct wl_stream *s, void **sctx)
{
	struct rstream *st = calloc(1, sizeof(*st));

	(void)c, (void)s;
	if (!st)
		return NULL;
	st->rc = ctx;
	*sctx = st;
	return &server_stream_h;
}

static void server_closed(struct wl_conn *c, void *ctx, const struct wl_end *e)
{
	struct rconn *rc = ctx;

	(void)c;
	if (e->exit_code)
		wl_role_fail_end(e);
	else if (e->closed_by_peer && e->peer_error)
		wl_role_fail_later(
			WL_EXIT_CONN_LOST, "the client closed its connection with error %llu%s",
			(unsigned long long)e->peer_error,
			e->peer_error == WL_CLOSE_VERIFY ? " (its content check failed)" : "");
	else if (e->connected && e->closed_by_transport && !rc->aborted && !wl_role_stopping() &&
		 !wl_role.t->multistream)
		wl_role_fail(WL_EXIT_CONN_LOST, "connection %d ended 0 bytes into a request: %s",
			     rc->idx, wl_end_why(e));
	list_del(rc);
	rconn_free(rc);
	atomic_fetch_sub(&rr.live, 1);
	wl_loop_wake();
}

static const struct wl_conn_handlers server_conn = {
	.connected = server_connected,
	.stream = server_stream,
	.closed = server_closed,
};

static const struct wl_conn_handlers *accept_conn(void *arg, struct wl_conn *c, void **ctx)
{
	struct rconn *rc;

	(void)arg;
	if (wl_role_stopping())
		return NULL;
	if (!wl_role.t->multistream && atomic_load(&rr.live) >= WL_RR_MAX_CONNS) {
		if (!rr.refused)
			wl_warn("refused a connection: %d are open already", WL_RR_MAX_CONNS);
		rr.refused = true;
		return NULL;
	}
	rc = rconn_new();
	if (!rc)
		return NULL;
	rc->c = c;
	/* live first: the loop ends on connections > 0 and live == 0. */
	atomic_fetch_add(&rr.live, 1);
	rc->idx = atomic_fetch_add(&wl_rr.connections, 1);
	list_add(rc);
	*ctx = rc;
	return &server_conn;
}

static bool client_gone(void *arg)
{
	(void)arg;
	return wl_role_stopping() || (atomic_load(&wl_rr.connections) && !atomic_load(&rr.live));
}

static void close_all_ok(void)
{
	close_all(WL_CLOSE_OK);
}

/* Server: every connection closed, which ends the transfer. */
static bool all_served(void *arg)
{
	if (!all_closed(arg))
		return false;
	wl_role.t_transfer_done_ns = wl_now_ns();
	return true;
}

/* Serve until the client has gone, or "stop", "exit" or EOF (--control). */
static int rr_server(void)
{
	/* Stats: the first connection's, as the client's, for the packets each way (rr.data_volume). */
	const struct wl_accept a = {
		.accept = accept_conn,
		.flags = WL_CONN_NODELAY | WL_CONN_STATS,
		.peer_bidi_streams = RR_PEER_STREAMS,
	};
	return wl_role_serve(&a, client_gone, close_all_ok, all_served);
}

static void rr_json_mark(struct wl_json *j)
{
	wl_rr_json_mark(j, wl_role.server);
}

static void rr_json_done(struct wl_json *j, int code)
{
	(void)code;
	wl_rr_json_done(j, wl_role.server);
	wl_json_u64(j, "streams_completed",
		    atomic_load(wl_role.server ? &wl_rr.served : &wl_rr.responses));
}

/* Both roles: the server its requests, the client its responses. */
static bool rr_checks(void)
{
	return true;
}

/* The messages' sizes, the loop's kind and what ends a client; then wl_rr's settings. */
static int rr_resolve(struct wl_opts *o, bool client)
{
	int code;

	if (!o->payload && (!o->request || !o->response)) {
		wl_warn("--pattern rr needs --payload N, the bytes of each request and each response, or --request and --response, on both roles");
		return WL_EXIT_USAGE;
	}
	if (client && !o->rr_closed && !o->period_us) {
		wl_warn("--pattern rr needs --period-us N on the client, the microseconds between requests, or --rr-mode closed");
		return WL_EXIT_USAGE;
	}
	if (o->rr_closed && o->period_us) {
		wl_warn("--period-us is for --rr-mode open: a closed loop sends each request when an answer comes");
		return WL_EXIT_USAGE;
	}
	if (o->count && !o->rr_closed) {
		wl_warn("--count is for --rr-mode closed: an open loop's requests fall due for --duration-ms");
		return WL_EXIT_USAGE;
	}
	if (o->rr_closed && o->tcp_on_demand) {
		wl_warn("--tcp-conns on-demand is for --rr-mode open: a closed loop keeps its --conns x --streams connections");
		return WL_EXIT_USAGE;
	}
	if (o->tcp_on_demand && o->conns > 1) {
		wl_warn("--tcp-conns on-demand opens its own connections: drop --conns");
		return WL_EXIT_USAGE;
	}
	code = o->rr_closed ? 0 : wl_one_stream(o);
	if (!code && client)
		code = wl_timed_client(o);
	if (!code)
		wl_rr_init(o);
	return code;
}

/* A period of at least twice the larger message: a message's pattern is one piece. */
static uint32_t rr_period(const struct wl_opts *o)
{
	uint32_t most = wl_rr.request > wl_rr.response ? wl_rr.request : wl_rr.response, period;

	(void)o;
	for (period = 1024; period < 2 * most; period <<= 1)
		;
	return period;
}

static const struct wl_pattern wl_rr_pattern = {
	.name = "rr",
	.exit_stops = true,
	.server = rr_server,
	.client = rr_client,
	.json_mark = rr_json_mark,
	.json_done = rr_json_done,
	.checks = rr_checks,
	.flags =
		"conns|duration-ms|count|period-us|payload|request|response|rr-streams|tcp-conns|rr-mode|app",
	.tcp_conns_most = WL_RR_MAX_CONNS,
	.resolve = rr_resolve,
	.period = rr_period,
};
WL_PATTERN(wl_rr_pattern);
