// SPDX-License-Identifier: GPL-2.0-only
/*
 * --pattern bulk: one side sends, the other checks every byte.
 * --streams N: N streams on one connection of a multistream transport
 * (QUIC), else N connections, each with a thread and blocking I/O (TCP,
 * as iperf3 -P). The sender keeps the transport's room filled straight
 * out of the pattern region; it sends for --duration-ms from the
 * handshake (the last connection's, with many), or --bytes per stream,
 * or until "stop".
 *
 * --direction: up (the client sends on N unidirectional streams), down
 * (the server sends: as secnetperf's download and iperf3 -R) or both (N
 * streams each way, as iperf3 --bidir). The client opens every stream; a
 * down stream (QUIC: bidirectional; TCP: its connection) starts with the
 * client's 8-byte request, WL_BULK_DOWN, and the server answers with the
 * pattern from offset 0 until --duration-ms, --bytes or "stop" (the
 * sender's), then FIN; the client ends its side on that FIN. An up
 * stream's first word is the pattern's, WL_PAT_SEED, never the request,
 * so with both a server tells the two apart by the first 8 bytes.
 * Streams are numbered up first (0..N-1), then down (N..2N-1); each side
 * counts in stream_bytes the streams it receives, at their numbers.
 * QUIC both ways opens two connections, the up streams on one and the
 * down streams on the other, as iperf3 --bidir gives each direction its
 * own sockets: on one connection (one msquic worker a side) the down
 * direction starved, 3.6 MB against 3.4 GB up in 2 s on loopback.
 *
 * --proto perf (QUIC stacks): the same transfer in the QUIC performance
 * protocol (draft-banks-quic-performance; ALPN "perf", as msquic's
 * secnetperf, quinn's and quic-go's perf tools speak it). Every stream
 * is bidirectional and starts with the client's 8-byte big-endian count
 * of bytes it wants back: an up stream 0, then the pattern until
 * --duration-ms or --bytes, FIN; a down stream --bytes (2^64-1 with
 * --duration-ms, which the client stops at its end by aborting the
 * stream, as secnetperf's timed download does), FIN at once. The server
 * reads the count and the request to its FIN, then answers with that
 * many bytes of the pattern from offset 0 and FIN (an up stream's answer
 * is the FIN alone); it needs no --duration-ms or --bytes of its own.
 * --verify size: a receiver whose peer is not qprof-wl counts what came
 * rather than checking it against the pattern.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "wl_role.h"

/* A down stream's request, the client's first 8 bytes on it (little-endian): "qwl-down". */
#define WL_BULK_DOWN 0x6e776f642d6c7771ull

struct bconn {
	struct wl_conn *c;
	int idx;
	int first;	    /* client: the number of its first stream */
	int nstreams;	    /* streams it carries */
	int streams_closed; /* closed, gracefully or not */
	int streams_fin;    /* the peer ended */
	bool connected;
};

struct bstream {
	struct bconn *bc;
	struct wl_stream *s;
	int idx;       /* its number: up streams first (stream_bytes, messages) */
	bool down;     /* the server sends on it */
	bool known;    /* server, --direction down or both: its request (or first word) came */
	uint64_t off;  /* sender: bytes handed to the transport; receiver: checked */
	bool fin;      /* sender: FIN sent; receiver: the peer's came */
	bool bad;      /* receiver: failed the check; the rest is dropped */
	bool req;      /* client: the request (down) or perf's count (up) is sent */
	bool go;       /* perf server, down: the request is whole, the answer may go */
	bool stopped;  /* perf client, down: aborted at --duration-ms */
	uint64_t want; /* perf server: the bytes asked (UINT64_MAX: until stopped) */
	uint8_t word[8];
	uint32_t nword; /* server, not yet known: the first bytes so far */
};

static struct {
	int nconns, per_conn; /* connections; streams on each */
	int up, down, total;  /* streams each way; total = up + down */
	bool learn;	      /* server: a stream's way comes with its first bytes */
	bool perf;	      /* --proto perf */
	struct bconn conns[WL_MAX_STREAMS];
	struct bstream streams[WL_MAX_STREAMS];
	/* Stream number -> its connection's index (server: accepted order), for "done": -1 unknown. */
	_Atomic int stream_conn[WL_MAX_STREAMS];
	_Atomic int accepted, started, next_slot, next_up, next_down, connected, closed;
	_Atomic int streams_done; /* sent: closed after its FIN; received: its FIN came */
	_Atomic uint64_t
		request_bytes; /* perf server: what down streams' requests carried past the count */
	/* TCP client: every connection sends only once all are up (the barrier). */
	pthread_mutex_t lock;
	pthread_cond_t all_up;
	bool released;
	int timer;		/* the sender's --duration-ms */
	_Atomic bool timed_out; /* perf client: its own --duration-ms ran out */
} bulk = {.lock = PTHREAD_MUTEX_INITIALIZER, .all_up = PTHREAD_COND_INITIALIZER, .timer = -1};

static const char *unit(void)
{
	return wl_role.t->multistream ? "stream" : "connection";
}

/* Does this role send on any stream, receive on any? */
static bool sends(void)
{
	return wl_role.server ? bulk.down > 0 : bulk.up > 0;
}

static bool receives(void)
{
	return wl_role.server ? bulk.up > 0 : bulk.down > 0;
}

static void set_ways(void)
{
	int i;

	for (i = 0; i < WL_MAX_STREAMS; i++)
		atomic_store(&bulk.stream_conn[i], -1);
	const char *d = wl_role.o->direction ? wl_role.o->direction : "up";
	const int n = wl_role.o->streams * (wl_role.o->conns ? wl_role.o->conns : 1);

	bulk.up = strcmp(d, "down") ? n : 0;
	bulk.down = strcmp(d, "up") ? n : 0;
	bulk.total = bulk.up + bulk.down;
	/*
	 * QUIC: --conns connections each way, --streams on each (both ways: a
	 * connection carries one way only, as iperf3 --bidir's sockets; see
	 * the header). TCP: a connection per stream. Connection k carries
	 * streams k * per_conn onwards: the up ones first.
	 */
	bulk.per_conn = wl_role.t->multistream ? wl_role.o->streams : 1;
	bulk.nconns = bulk.total / bulk.per_conn;
	bulk.perf = wl_role.o->proto && !strcmp(wl_role.o->proto, "perf");
	bulk.learn = wl_role.server && (bulk.down > 0 || bulk.perf);
	/* A role that receives counts its streams' bytes at their numbers (wl_role.c). */
	wl_role.per_stream = receives();
}

static void release(void)
{
	pthread_mutex_lock(&bulk.lock);
	bulk.released = true;
	pthread_cond_broadcast(&bulk.all_up);
	pthread_mutex_unlock(&bulk.lock);
}

/* A stream is done on this side (sent and closed, or received whole); the last ends the transfer. */
static void stream_done(void)
{
	if (atomic_fetch_add(&bulk.streams_done, 1) + 1 == bulk.total)
		wl_role.t_transfer_done_ns = wl_now_ns();
}

/* Sender: fill the room; FIN after --bytes, or once told to stop. */
static void send_more(struct wl_stream *s, void *ctx)
{
	struct bstream *bs = ctx;
	const uint32_t period = wl_pattern_period(), io = wl_role.o->io_size;
	/* perf's server: what the stream asked (0: the FIN alone); UINT64_MAX runs until stopped. */
	const uint64_t end = bulk.perf && wl_role.server ? bs->want : wl_role.o->bytes;
	const bool asked = bulk.perf && wl_role.server;

	while (!bs->fin && wl_room(s) > 0) {
		const uint8_t *body = NULL;
		uint8_t count[8] = {0};
		uint32_t len = 0, hdr_len = 0;
		unsigned flags = 0;

		if (bulk.perf && !wl_role.server && !bs->req) {
			/* perf's up stream: its count of bytes wanted back, 0, goes first. */
			bs->req = true;
			hdr_len = sizeof(count);
		}
		if (asked && !end) {
			flags = WL_SEND_FIN;
		} else if (wl_role_stopping() && !(asked && end != UINT64_MAX)) {
			flags = WL_SEND_FIN;
		} else {
			/* io_size divides the period: a send never crosses its end. */
			body = wl_pattern_region() + bs->off % period;
			len = io;
			if (end && end != UINT64_MAX && bs->off + len >= end) {
				len = (uint32_t)(end - bs->off);
				flags = WL_SEND_FIN;
			}
		}
		if (wl_send(s, count, hdr_len, body, len, flags, NULL)) {
			/* The connection's end says how it went. */
			wl_role.t->close(bs->bc->c, WL_CLOSE_ERROR);
			return;
		}
		bs->off += len;
		atomic_fetch_add_explicit(&wl_role.app_bytes, len, memory_order_relaxed);
		if (flags & WL_SEND_FIN) {
			bs->fin = true;
			/* perf's server: the answer is whole (else the client's FIN after it says so). */
			if (asked && bs->down)
				stream_done();
		}
	}
}

/* Client: a stream is over both ways; the connection closes after its last. */
static void client_stream_closed(struct bstream *bs)
{
	struct bconn *bc = bs->bc;

	if (++bc->streams_closed == bc->nstreams)
		wl_role.t->close(bc->c, WL_CLOSE_OK);
}

static void sender_closed(struct wl_stream *s, void *ctx, bool graceful)
{
	struct bstream *bs = ctx;

	(void)s, (void)graceful;
	/* As before: a stream that sent its FIN counts (msquic's refused one too). */
	if (bs->fin)
		stream_done();
	client_stream_closed(bs);
}

static const struct wl_stream_handlers sender = {
	.writable = send_more,
	.data = wl_ignore_data,
	.fin = wl_ignore,
	.aborted = wl_ignore,
	.closed = sender_closed,
};

/* What arrived on bs failed its check at off: the rest is dropped, the run fails, the connection closes. */
static void stream_failed(struct bstream *bs, uint64_t off, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void stream_failed(struct bstream *bs, uint64_t off, const char *fmt, ...)
{
	char why[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	bs->bad = true;
	wl_role_verify_failed(off, (uint64_t)bs->idx, "verify_fail_stream");
	wl_role_fail(WL_EXIT_VERIFY, "%s", why);
	wl_role.t->close(bs->bc->c, WL_CLOSE_VERIFY);
}

/* Receiver: check every byte at its offset; the first failure fails the run. */
static void check(struct bstream *bs, const uint8_t *p, size_t len)
{
	if (bs->bad)
		return;
	if (!wl_role.o->size_only && !wl_pattern_check(bs->off, p, len)) {
		stream_failed(bs, bs->off,
			      "received data failed the content check on %s %d at offset %llu",
			      unit(), bs->idx, (unsigned long long)bs->off);
		return;
	}
	bs->off += len;
	/* The receiver's app_bytes are its streams' sum (wl_role.c): one store, no atomic add. */
	atomic_store_explicit(&wl_role.stream_bytes[bs->idx], bs->off, memory_order_relaxed);
}

static void receive(struct wl_stream *s, void *ctx, const uint8_t *p, size_t len)
{
	(void)s;
	check(ctx, p, len);
}

/* perf client, an up stream: it asked for 0 bytes back, so any that come fail it. */
static void unasked(struct wl_stream *s, void *ctx, const uint8_t *p, size_t len)
{
	struct bstream *bs = ctx;

	(void)s, (void)p;
	if (!bs->bad)
		stream_failed(bs, 0, "the server answered %zu bytes on %s %d, which asked for none",
			      len, unit(), bs->idx);
}

static const struct wl_stream_handlers perf_sender = {
	.writable = send_more,
	.data = unasked,
	.fin = wl_ignore, /* the server's answer: its FIN alone */
	.aborted = wl_ignore,
	.closed = sender_closed,
};

/* The received side of a stream is whole; with every stream's, the transfer is. */
static void received_fin(struct bstream *bs)
{
	bs->fin = true;
	bs->bc->streams_fin++;
	stream_done();
}

/* Client, a down stream: its request, then the server's bytes. */
static void request_down(struct wl_stream *s, void *ctx)
{
	struct bstream *bs = ctx;
	uint8_t req[8];

	if (bs->req)
		return;
	bs->req = true;
	if (bulk.perf) {
		/* The count wanted back, and the request ends there. */
		wl_put_be64(req, wl_role.o->bytes ? wl_role.o->bytes : UINT64_MAX);
	} else {
		wl_put_le64(req, WL_BULK_DOWN);
	}
	if (wl_send(s, req, sizeof(req), NULL, 0, bulk.perf ? WL_SEND_FIN : 0, NULL))
		wl_role.t->close(bs->bc->c, WL_CLOSE_ERROR);
}

/* The server's FIN: ours follows (TCP: the orderly close's, sent here already). */
static void down_fin(struct wl_stream *s, void *ctx)
{
	struct bstream *bs = ctx;

	if (bulk.perf && wl_role.o->bytes && !bs->bad && bs->off != wl_role.o->bytes)
		stream_failed(bs, bs->off,
			      "the server ended %s %d after %llu bytes of the %llu asked", unit(),
			      bs->idx, (unsigned long long)bs->off,
			      (unsigned long long)wl_role.o->bytes);
	received_fin(bs);
	if (!bulk.perf && wl_send(s, NULL, 0, NULL, 0, WL_SEND_FIN, NULL))
		wl_role.t->close(bs->bc->c, WL_CLOSE_ERROR);
}

static void down_closed(struct wl_stream *s, void *ctx, bool graceful)
{
	struct bstream *bs = ctx;

	(void)s, (void)graceful;
	/* perf, timed: the client's abort at --duration-ms ended the answer, as asked. */
	if (bs->stopped && !bs->fin)
		received_fin(bs);
	client_stream_closed(bs);
}

/*
 * A down stream's bytes. perf, timed: the stream asked for 2^64-1 bytes,
 * and once the client's own --duration-ms has run out, or "stop" came to
 * a client that only receives (its server is not one qprof can tell), the
 * client stops it by aborting it, as secnetperf's timed download does:
 * here, in a handler of its own, where the stream is sure to be alive
 * (the next bytes come at once). A client told "stop" that sends too
 * (--direction both) stops its own streams only: the run stops its
 * server too, whose FIN ends the answer whole.
 */
static void receive_down(struct wl_stream *s, void *ctx, const uint8_t *p, size_t len)
{
	struct bstream *bs = ctx;

	check(bs, p, len);
	if (bulk.perf && !wl_role.o->bytes && !bs->stopped && wl_role_stopping() &&
	    (atomic_load(&bulk.timed_out) || !sends())) {
		bs->stopped = true;
		wl_role.t->abort(s);
	}
}

static const struct wl_stream_handlers down_receiver = {
	.writable = request_down,
	.data = receive_down,
	.fin = down_fin,
	.aborted = wl_ignore,
	.closed = down_closed,
};

static void on_timer(int fd, uint32_t events, void *arg)
{
	uint64_t v;

	(void)events, (void)arg;
	if (read(fd, &v, sizeof(v)) > 0) {
		atomic_store(&bulk.timed_out, true);
		atomic_store(&wl_role.stopping, true);
		wl_loop_wake();
	}
}

/* The sender's --duration-ms, on the loop; an exit code. */
static int make_timer(void)
{
	/* perf: the client's clock ends the downloads too; the server answers what is asked. */
	const bool timed = bulk.perf ? !wl_role.server : sends();

	if (!wl_role.o->duration_ms || !timed)
		return WL_EXIT_OK;
	bulk.timer = wl_timer_open();
	if (bulk.timer < 0 || wl_loop_add(bulk.timer, EPOLLIN, on_timer, NULL)) {
		wl_warn("cannot make the duration timer: %s", strerror(errno));
		return WL_EXIT_INTERNAL;
	}
	return WL_EXIT_OK;
}

static void arm_timer(void)
{
	uint64_t end = wl_role.t_connected_ns + wl_role.o->duration_ms * 1000000ull;

	if (bulk.timer >= 0 && wl_timer_arm(bulk.timer, end))
		wl_role_fail(WL_EXIT_INTERNAL, "cannot arm the duration timer: %s",
			     strerror(errno));
}

/* Every connection is up: the run's "connected", and the sender's clock starts. */
static void all_connected(void)
{
	if (wl_role.failure.code)
		return;
	/* The clock starts at the handshake, not at the process. */
	wl_role_connected(wl_now_ns());
	arm_timer();
}

static void client_connected(struct wl_conn *c, void *ctx)
{
	struct bconn *bc = ctx;
	int i, code;

	bc->connected = true;
	if (atomic_fetch_add(&bulk.connected, 1) + 1 == bulk.nconns) {
		all_connected();
		release();
	} else if (!wl_role.t->multistream) {
		/* Only with a connection per stream: its own thread may wait (not msquic's worker). */
		pthread_mutex_lock(&bulk.lock);
		while (!bulk.released)
			pthread_cond_wait(&bulk.all_up, &bulk.lock);
		pthread_mutex_unlock(&bulk.lock);
	}
	for (i = 0; i < bc->nstreams; i++) {
		struct bstream *bs = &bulk.streams[bc->first + i];

		bs->bc = bc;
		bs->idx = bc->first + i;
		atomic_store(&bulk.stream_conn[bs->idx], bc->idx);
		bs->down = bs->idx >= bulk.up;
		code = bs->down	   ? wl_role.t->open(c, &down_receiver, bs, 0, &bs->s)
		       : bulk.perf ? wl_role.t->open(c, &perf_sender, bs, 0, &bs->s)
				   : wl_role.t->open(c, &sender, bs, WL_STREAM_UNI, &bs->s);
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

	for (i = 0; i < bulk.total; i++)
		sum += atomic_load_explicit(&wl_role.stream_bytes[i], memory_order_relaxed);
	return sum;
}

static void client_closed(struct wl_conn *c, void *ctx, const struct wl_end *e)
{
	struct bconn *bc = ctx;
	int fins = 0, i;

	(void)c;
	wl_role.end = *e;
	/* An up stream's FIN is ours; a down one's, the server's. */
	for (i = 0; i < bc->nstreams; i++)
		fins += bulk.streams[bc->first + i].fin;
	if (e->exit_code)
		wl_role_fail_end(e);
	else if (!e->connected)
		wl_role_handshake_failed(e, "");
	else if (bc->streams_closed == bc->nstreams && fins == bc->nstreams)
		;
	else if (wl_role.t->multistream)
		wl_role_fail(WL_EXIT_CONN_LOST,
			     "connection ended after %llu bytes, before the transfer finished: %s",
			     (unsigned long long)(bulk.up ? atomic_load(&wl_role.app_bytes)
							  : received()),
			     wl_end_why(e));
	else
		wl_role_fail(WL_EXIT_CONN_LOST, "%s on connection %d failed after %llu bytes: %s",
			     bulk.streams[bc->first].down ? "receiving" : "sending", bc->idx,
			     (unsigned long long)bulk.streams[bc->first].off, wl_end_why(e));
	if (!bc->connected)
		release();
	atomic_fetch_add(&bulk.closed, 1);
	wl_loop_wake();
}

static const struct wl_conn_handlers client_conn = {
	.connected = client_connected,
	.closed = client_closed,
};

static bool all_closed(void *arg)
{
	(void)arg;
	return atomic_load(&bulk.closed) == atomic_load(&bulk.started);
}

static int bulk_client(void)
{
	const bool multi = wl_role.t->multistream;
	int i, code;

	set_ways();
	/* The streams it receives are all there from the start. */
	if (receives())
		atomic_store(&wl_role.streams_seen, bulk.total);
	code = make_timer();
	if (code)
		return code;
	if (!wl_role_wait_start())
		return WL_EXIT_OK;
	for (i = 0; i < bulk.nconns; i++) {
		struct bconn *bc = &bulk.conns[i];

		bc->idx = i;
		/* QUIC: the up streams on one, the down streams on the other; TCP: one each. */
		bc->first = i * bulk.per_conn;
		bc->nstreams = bulk.per_conn;
		atomic_fetch_add(&bulk.started, 1);
		code = wl_role.t->connect(&client_conn, bc,
					  (bc->first < bulk.up ? WL_CONN_SENDER : 0) |
						  WL_CONN_STATS | (multi ? 0 : WL_CONN_DEDICATED),
					  &bc->c);
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

static void receive_fin(struct wl_stream *s, void *ctx)
{
	struct bstream *bs = ctx;

	if (!bs->known && bulk.learn && !bs->bad) {
		/* Ended before its first 8 bytes: neither a request nor the pattern. */
		stream_failed(bs, 0, "%s %d ended after %u bytes, before its first 8", unit(),
			      bs->idx, bs->nword);
	}
	if (bulk.perf && bs->known && !bs->bad) {
		/* perf: the request is whole; the answer follows (an up stream's: the FIN alone). */
		bs->bc->streams_fin++;
		if (!bs->down)
			stream_done(); /* what it sent is all here */
		bs->go = true;
		send_more(s, bs);
		return;
	}
	received_fin(bs);
	/* Ours needs no ending: an up stream is the peer's alone, a dedicated TCP one ends itself. */
	(void)s;
}

static void receive_closed(struct wl_stream *s, void *ctx, bool graceful)
{
	(void)s, (void)ctx, (void)graceful;
}

/* Server, a stream whose way is known: its number, and it is seen. */
static void number(struct bstream *bs, bool down)
{
	int n;

	bs->known = true;
	bs->down = down;
	bs->idx = down ? bulk.up + atomic_fetch_add(&bulk.next_down, 1)
		       : atomic_fetch_add(&bulk.next_up, 1);
	atomic_store(&bulk.stream_conn[bs->idx], bs->bc->idx);
	n = atomic_load(&wl_role.streams_seen);
	while (n < bs->idx + 1 &&
	       !atomic_compare_exchange_weak(&wl_role.streams_seen, &n, bs->idx + 1))
		;
}

/*
 * perf server: a stream's first 8 bytes are the count it wants back
 * (big-endian). Its way is this server's --direction; both ways, the
 * count says it: 0 up, more down. An up stream's count is answered too
 * (secnetperf's timed upload asks for 2^64-1 and stops the answer as it
 * comes). More streams either way than --direction and --streams here
 * fail the check.
 */
static void perf_request(struct bstream *bs)
{
	const uint64_t want = wl_get_be64(bs->word);
	const bool down = bulk.down && (!bulk.up || want > 0);

	bs->want = want;
	if (down ? atomic_load(&bulk.next_down) < bulk.down
		 : atomic_load(&bulk.next_up) < bulk.up) {
		number(bs, down);
		return;
	}
	bs->known = true;
	stream_failed(bs, 0,
		      "%s %d asked for %llu bytes back, one %s stream more than --direction %s "
		      "--streams %d here",
		      unit(), bs->idx, (unsigned long long)want, down ? "down" : "up",
		      wl_role.o->direction ? wl_role.o->direction : "up", wl_role.o->streams);
}

/*
 * Server, --direction down or both: a stream's first 8 bytes say its way.
 * The request (WL_BULK_DOWN): answer with the pattern, and nothing more
 * may come on it but the FIN. Else (both) an up stream, its first word
 * the pattern's. Anything else, or more than each allows, fails the check.
 */
static void learn(struct wl_stream *s, void *ctx, const uint8_t *p, size_t len)
{
	struct bstream *bs = ctx;
	size_t k;

	if (bs->bad)
		return;
	if (bs->known && !bs->down) {
		check(bs, p, len);
		return;
	}
	if (bs->known && bulk.perf) {
		/* A down stream's request may carry bytes (secnetperf's timed download sends 64 KiB). */
		atomic_fetch_add_explicit(&bulk.request_bytes, len, memory_order_relaxed);
		return;
	}
	if (!bs->known) {
		k = sizeof(bs->word) - bs->nword < len ? sizeof(bs->word) - bs->nword : len;
		memcpy(bs->word + bs->nword, p, k);
		bs->nword += (uint32_t)k;
		p += k;
		len -= k;
		if (bs->nword < sizeof(bs->word))
			return;
		if (bulk.perf) {
			perf_request(bs);
			if (bs->bad)
				return;
			if (!bs->down)
				check(bs, p, len);
			else
				atomic_fetch_add_explicit(&bulk.request_bytes, len,
							  memory_order_relaxed);
			return;
		} else if (wl_get_le64(bs->word) == WL_BULK_DOWN &&
			   atomic_load(&bulk.next_down) < bulk.down) {
			number(bs, true);
		} else if (bulk.up && atomic_load(&bulk.next_up) < bulk.up) {
			number(bs, false);
			check(bs, bs->word, sizeof(bs->word));
			if (len)
				check(bs, p, len);
			return;
		} else {
			bs->known = true;
			stream_failed(
				bs, 0,
				"%s %d began with 0x%016llx, neither the download request nor the pattern",
				unit(), bs->idx, (unsigned long long)wl_get_le64(bs->word));
			return;
		}
		if (!len) {
			send_more(s, bs);
			return;
		}
	}
	stream_failed(bs, 0, "the client sent %zu bytes after its request on %s %d", len, unit(),
		      bs->idx);
}

/* Server, down or both: more may be sent once the request made it a down stream. */
static void server_writable(struct wl_stream *s, void *ctx)
{
	struct bstream *bs = ctx;

	if (bs->known && (bulk.perf ? bs->go : bs->down))
		send_more(s, bs);
}

/* The client stopped a stream: perf's timed download ends so, as asked; nothing more goes. */
static void server_aborted(struct wl_stream *s, void *ctx)
{
	struct bstream *bs = ctx;

	(void)s;
	if (bulk.perf && bs->go && !bs->fin) {
		bs->fin = true;
		if (bs->down)
			stream_done();
	}
}

static const struct wl_stream_handlers receiver = {
	.writable = wl_ignore,
	.data = receive,
	.fin = receive_fin,
	.aborted = wl_ignore, /* the transport aborts it back */
	.closed = receive_closed,
};

static const struct wl_stream_handlers learner = {
	.writable = server_writable,
	.data = learn,
	.fin = receive_fin,
	.aborted = server_aborted,
	.closed = receive_closed,
};

static void server_connected(struct wl_conn *c, void *ctx)
{
	(void)c;
	((struct bconn *)ctx)->connected = true;
	if (atomic_fetch_add(&bulk.connected, 1) + 1 == bulk.nconns)
		all_connected();
}

static const struct wl_stream_handlers *server_stream(struct wl_conn *c, void *ctx,
						      struct wl_stream *s, void **sctx)
{
	struct bconn *bc = ctx;
	struct bstream *bs;
	int i = bc->idx;

	(void)c;
	if (wl_role.t->multistream) {
		i = atomic_fetch_add(&bulk.next_slot, 1);
		if (i >= bulk.total)
			return NULL;
		if (!bulk.learn)
			atomic_store(&wl_role.streams_seen, i + 1);
	}
	bs = &bulk.streams[i];
	bs->bc = bc;
	bs->s = s;
	bs->idx = i;
	if (!bulk.learn)
		atomic_store(&bulk.stream_conn[i], bc->idx);
	*sctx = bs;
	return bulk.learn ? &learner : &receiver;
}

/*
 * perf: a timed download's answer (2^64-1 asked) that the client ended by
 * closing the connection, its STOP_SENDING not seen first (s2n-quic's
 * client sends both at once), ended as asked all the same.
 */
static void closed_answers(struct bconn *bc)
{
	int i;

	for (i = 0; i < bulk.total; i++) {
		struct bstream *bs = &bulk.streams[i];

		if (bs->bc == bc && bs->down && bs->go && !bs->fin && bs->want == UINT64_MAX) {
			bs->fin = true;
			stream_done();
		}
	}
}

static void server_closed(struct wl_conn *c, void *ctx, const struct wl_end *e)
{
	struct bconn *bc = ctx;

	(void)c;
	wl_role.end = *e;
	if (bulk.perf && e->connected && !e->exit_code && !(e->closed_by_peer && e->peer_error))
		closed_answers(bc);
	if (e->exit_code)
		wl_role_fail_end(e);
	else if (!e->connected)
		wl_role_handshake_failed(e, "");
	else if (bc->streams_fin < bc->nstreams && wl_role.t->multistream)
		wl_role_fail(WL_EXIT_CONN_LOST,
			     "connection ended after %llu bytes, before the transfer finished: %s",
			     (unsigned long long)(bulk.up ? received()
							  : atomic_load(&wl_role.app_bytes)),
			     wl_end_why(e));
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
	bc->nstreams = bulk.per_conn;
	/* TCP, up: stream_bytes[i] is the i-th connection accepted (else numbered as it learns). */
	if (!wl_role.t->multistream && !bulk.learn)
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
	struct wl_accept a = {.accept = accept_conn};
	int code;

	set_ways();
	a.flags = WL_CONN_STATS | (sends() ? WL_CONN_SENDER : 0) |
		  (wl_role.t->multistream ? 0 : WL_CONN_DEDICATED);
	/* perf: every stream bidirectional. */
	a.peer_uni_streams = (uint16_t)(bulk.perf ? 0 : bulk.up);
	a.peer_bidi_streams = (uint16_t)(bulk.perf ? bulk.total : bulk.down);
	code = make_timer();
	return code ? code : wl_role_serve(&a, server_over, NULL, NULL);
}

static void bulk_json_mark(struct wl_json *j)
{
	/* Both ways: app_bytes are what it checked, these what it sent. */
	if (bulk.up && bulk.down)
		wl_json_u64(j, "sent_bytes", atomic_load(&wl_role.app_bytes));
}

static void bulk_json_done(struct wl_json *j, int code)
{
	char buf[WL_MAX_STREAMS * 4 + 4];
	size_t k = 0;
	int i;

	(void)code;
	wl_json_u64(j, "streams_completed", (uint64_t)atomic_load(&bulk.streams_done));
	if (bulk.perf && wl_role.server)
		wl_json_u64(j, "request_bytes", atomic_load(&bulk.request_bytes));
	bulk_json_mark(j);
	/* Which connection each stream went on: the receiver's per-connection goodput. */
	if (wl_role.per_stream) {
		buf[k++] = '[';
		for (i = 0; i < bulk.total; i++)
			k += (size_t)snprintf(buf + k, sizeof(buf) - k, "%s%d", i ? "," : "",
					      atomic_load(&bulk.stream_conn[i]));
		buf[k++] = ']';
		buf[k] = 0;
		wl_json_raw(j, "stream_conn", buf);
	}
}

/* The receiving roles, by --direction (per_stream). */
static bool bulk_checks(void)
{
	return wl_role.per_stream;
}

/* Its streams' limit; what ends each side (--direction down: the client's is the server's FIN). */
static int bulk_resolve(struct wl_opts *o, bool client)
{
	const bool up = !o->direction || !strcmp(o->direction, "up");
	const bool both = o->direction && !strcmp(o->direction, "both");

	if ((o->conns ? o->conns : 1) * o->streams * (both ? 2 : 1) > WL_MAX_STREAMS) {
		wl_warn("--conns x --streams (x 2 with --direction both) is at most %d streams in all",
			WL_MAX_STREAMS);
		return WL_EXIT_USAGE;
	}
	if (o->duration_ms || o->bytes || o->control)
		return 0;
	if (o->proto && !strcmp(o->proto, "perf")) {
		if (!client)
			return 0; /* it answers what each stream asks */
		wl_warn("--proto perf: the client needs --duration-ms, --bytes or --control");
		return WL_EXIT_USAGE;
	}
	if (client && (up || both)) {
		wl_warn("the client needs --duration-ms, --bytes or --control");
		return WL_EXIT_USAGE;
	}
	if (!client && !up) {
		wl_warn("--direction %s: the server sends, and needs --duration-ms, --bytes or --control",
			o->direction);
		return WL_EXIT_USAGE;
	}
	return 0;
}

static const struct wl_pattern wl_bulk = {
	.name = "bulk",
	.server = bulk_server,
	.client = bulk_client,
	.json_mark = bulk_json_mark,
	.json_done = bulk_json_done,
	.checks = bulk_checks,
	.flags = "conns|direction|duration-ms|bytes|sendfile|proto|verify",
	.on_datagrams = true,
	.resolve = bulk_resolve,
};
WL_PATTERN(wl_bulk);
