// SPDX-License-Identifier: GPL-2.0-only
/*
 * --app h3: HTTP/3 over a QUIC transport's streams (msquic's, wl_quic.c;
 * ngtcp2's, quiche's, quinn's), framed by nghttp3 (Debian's libnghttp3),
 * as a transport over it (wl_app.h says how an application layer sits).
 *
 * Each request of the pattern goes on a bidirectional stream of its own
 * as one HTTP/3 request (POST, :authority, :path, content-type,
 * content-length; the message its body), answered by a 200 with the same
 * headers but the request line's; QPACK encodes the headers as nghttp3's
 * defaults do (no dynamic table). Each side opens HTTP/3's three
 * unidirectional streams once its QUIC handshake is done: the control
 * stream (SETTINGS) and QPACK's encoder and decoder streams, and the
 * pattern hears "connected" once all three have their IDs and are bound.
 * Everything that arrives, on any stream, goes through nghttp3, which
 * hands on the bodies alone; a request that is not a POST, a status
 * other than 200, or anything nghttp3 refuses fails the run (exit 5, as a
 * failed content check).
 *
 * nghttp3 is not thread-safe, and a connection's streams call in from
 * msquic's worker while the pattern calls from the loop, so each
 * connection's calls into it hold the connection's (recursive) lock. What
 * nghttp3 writes is handed to the transport as it comes (a send a frame
 * piece, WL_SEND_OWNED), and handed back to nghttp3 as acknowledged
 * (nghttp3_conn_add_ack_offset) once the transport's sent handler says it
 * has left nghttp3's hands: msquic's SEND_COMPLETE, which with send
 * buffering off is the peer's acknowledgment; ngtcp2's acknowledgment;
 * quiche and quinn once they have taken it (a copy). nghttp3 keeps what
 * it wrote only until then, for a transport that sends from it.
 *
 * Named for the flame graph's categories as wl_h1.c is: h3_* is the
 * framing's own work ("HTTP framing", with nghttp3 itself), wl_h3_* hands
 * on to the pattern or to the transport and is the workload's.
 */
#define _GNU_SOURCE
#include <nghttp3/nghttp3.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wl_app.h"
#include "wl_role.h"

#define H3_VECS 16
#define H3_UNI 3 /* control, QPACK encoder, QPACK decoder */

enum kind { REQUEST, LOCAL_UNI, PEER_UNI };

struct wl_stream {
	struct wl_stream *next, *prev; /* the connection's streams */
	struct wl_conn *c;
	struct wl_stream *lower;
	enum kind kind;
	int64_t id; /* -1 until the transport has started it */
	const struct wl_stream_handlers *h;
	void *ctx;
	/* Sending: the pattern's messages until the peer has them all (nghttp3's word). */
	struct wl_app_queue q;
	bool fin;	/* the pattern ended its side */
	bool submitted; /* its request or response is nghttp3's */
	bool bad_status;
};

struct wl_conn {
	pthread_mutex_t lock;
	struct wl_conn *lower;
	const struct wl_conn_handlers *h;
	void *ctx;
	nghttp3_conn *h3;
	bool server;
	struct wl_stream *streams;
	struct wl_stream *uni[H3_UNI];
	bool bound, told_connected;
	int reading;	 /* inside nghttp3_conn_read_stream: flush after it */
	bool want_flush; /* something to write came while reading */
};

static struct {
	const struct wl_accept *a; /* server: the pattern's */
	nghttp3_settings settings;
} h3;

static const struct wl_conn_handlers lower_conn_h;
static const struct wl_stream_handlers lower_stream_h;

static void lock(struct wl_conn *c)
{
	pthread_mutex_lock(&c->lock);
}

static void unlock(struct wl_conn *c)
{
	pthread_mutex_unlock(&c->lock);
}

static struct wl_stream *stream_new(struct wl_conn *c, enum kind kind)
{
	struct wl_stream *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->c = c;
	s->kind = kind;
	s->id = -1;
	s->next = c->streams;
	if (c->streams)
		c->streams->prev = s;
	c->streams = s;
	return s;
}

static void stream_free(struct wl_stream *s)
{
	struct wl_conn *c = s->c;
	struct wl_app_chunk *k;

	if (s->prev)
		s->prev->next = s->next;
	else
		c->streams = s->next;
	if (s->next)
		s->next->prev = s->prev;
	while ((k = wl_app_queue_pop(&s->q))) {
		if (k->tag && s->h && s->h->sent)
			s->h->sent(s, s->ctx, k->tag, true);
		free(k);
	}
	free(s);
}

static struct wl_stream *by_id(struct wl_conn *c, int64_t id)
{
	for (struct wl_stream *s = c->streams; s; s = s->next)
		if (s->id == id)
			return s;
	return NULL;
}

/* The peer's HTTP/3 was not what this side sends: the run fails, once. */
static int h3_refuse(const char *why)
{
	wl_app_refuse("HTTP/3", why);
	return NGHTTP3_ERR_CALLBACK_FAILURE;
}

/* Writing: what nghttp3 has to send, to the transport */

/* A send's tag: its length, so its acknowledgment can be handed back to nghttp3. */
static void *len_tag(size_t len)
{
	return (void *)(uintptr_t)len;
}

static bool is_body(const struct wl_stream *s, const uint8_t *p)
{
	for (const struct wl_app_chunk *k = s->q.head; k; k = k->next)
		if ((p >= k->hdr && p < k->hdr + k->hdr_len) ||
		    (p >= k->body && p < k->body + (k->len - k->hdr_len)))
			return true;
	return false;
}

/*
 * Everything nghttp3 has to write, handed to the transport; every byte of it that
 * is not a body counts as framing. A failure fails the run.
 */
static void h3_flush(struct wl_conn *c)
{
	nghttp3_vec vec[H3_VECS];
	int64_t id;
	int fin;

	if (c->reading) {
		c->want_flush = true;
		return;
	}
	c->want_flush = false;
	for (;;) {
		nghttp3_ssize n = nghttp3_conn_writev_stream(c->h3, &id, &fin, vec, H3_VECS);
		struct wl_stream *s;
		size_t total = 0;

		if (n < 0) {
			wl_role_fail(WL_EXIT_INTERNAL, "nghttp3 could not write: %s",
				     nghttp3_strerror((int)n));
			return;
		}
		if (id < 0)
			return;
		s = by_id(c, id);
		if (!s) {
			wl_role_fail(WL_EXIT_INTERNAL,
				     "nghttp3 wrote to stream %lld, which is gone", (long long)id);
			return;
		}
		for (nghttp3_ssize i = 0; i < n; i++) {
			const bool last = i == n - 1 && fin;
			const uint8_t *p = vec[i].base;

			if (wl_app_lower->send(s->lower, NULL, 0, p, (uint32_t)vec[i].len,
					       (last ? WL_SEND_FIN : 0) | WL_SEND_OWNED,
					       len_tag(vec[i].len))) {
				wl_role_fail(WL_EXIT_CONN_LOST, "an HTTP/3 stream could not send");
				return;
			}
			total += vec[i].len;
			if (!(s->kind == REQUEST && is_body(s, p)))
				atomic_fetch_add(&wl_app.tx_framing, vec[i].len);
		}
		if (!n && fin &&
		    wl_app_lower->send(s->lower, NULL, 0, NULL, 0, WL_SEND_FIN, NULL)) {
			wl_role_fail(WL_EXIT_CONN_LOST, "an HTTP/3 stream could not end");
			return;
		}
		if (nghttp3_conn_add_write_offset(c->h3, id, total)) {
			wl_role_fail(WL_EXIT_INTERNAL, "nghttp3 refused what was written");
			return;
		}
	}
}

/* The data reader: the pattern's chunks as they come, EOF once it ended its side. */
static nghttp3_ssize h3_read_data(nghttp3_conn *conn, int64_t id, nghttp3_vec *vec, size_t veccnt,
				  uint32_t *flags, void *cu, void *su)
{
	struct wl_stream *s = su;
	size_t n = 0;

	(void)conn, (void)id, (void)cu;
	for (struct wl_app_chunk *k = s->q.head; k && n < veccnt; k = k->next) {
		while (k->out < k->len && n < veccnt) {
			uint32_t piece;
			const uint8_t *p = wl_app_chunk_piece(k, k->out, &piece);

			vec[n++] = (nghttp3_vec){.base = (uint8_t *)p, .len = piece};
			atomic_fetch_add(&wl_app.tx_body, piece);
			k->out += piece;
		}
	}
	if (s->fin && n < veccnt)
		*flags |= NGHTTP3_DATA_FLAG_EOF;
	else if (!n)
		return NGHTTP3_ERR_WOULDBLOCK;
	return (nghttp3_ssize)n;
}

static const nghttp3_data_reader data_reader = {.read_data = h3_read_data};

#define NV(n, v)                                                                               \
	{                                                                                      \
		(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP3_NV_FLAG_NONE \
	}

/* The request or the response of s, whose message is len bytes, now nghttp3's. */
static int h3_submit(struct wl_stream *s, uint32_t len)
{
	char clen[16];
	int rv;

	snprintf(clen, sizeof(clen), "%u", len);
	if (s->c->server) {
		const nghttp3_nv nva[] = {NV(":status", "200"),
					  NV("content-type", "application/octet-stream"),
					  NV("content-length", clen)};

		rv = nghttp3_conn_submit_response(s->c->h3, s->id, nva, 3, &data_reader);
	} else {
		const nghttp3_nv nva[] = {NV(":method", "POST"),
					  NV(":scheme", "https"),
					  NV(":authority", wl_app_authority),
					  NV(":path", "/rr"),
					  NV("content-type", "application/octet-stream"),
					  NV("content-length", clen)};

		rv = nghttp3_conn_submit_request(s->c->h3, s->id, nva, 6, &data_reader, s);
	}
	if (rv) {
		wl_role_fail(WL_EXIT_INTERNAL, "nghttp3 would not take the %s: %s",
			     s->c->server ? "response" : "request", nghttp3_strerror(rv));
		return WL_EXIT_INTERNAL;
	}
	s->submitted = true;
	atomic_fetch_add(&wl_app.tx_messages, 1);
	return 0;
}

/* A request stream of the client's with its ID and its message: submitted. */
static void try_submit(struct wl_stream *s)
{
	if (s->submitted || s->id < 0 || !s->q.head || !s->c->bound)
		return;
	if (!h3_submit(s, wl_app_queue_len(&s->q)))
		h3_flush(s->c);
}

/* nghttp3's callbacks, under the connection's lock */

static int wl_h3_acked(nghttp3_conn *conn, int64_t id, uint64_t n, void *cu, void *su)
{
	struct wl_stream *s = su;

	(void)conn, (void)id, (void)cu;
	while (s && n && s->q.head) {
		struct wl_app_chunk *k = s->q.head;
		uint64_t take = k->len - k->acked < n ? k->len - k->acked : n;

		k->acked += (uint32_t)take;
		n -= take;
		if (k->acked < k->len)
			break;
		wl_app_queue_pop(&s->q);
		if (k->tag && s->h->sent)
			s->h->sent(s, s->ctx, k->tag, false);
		free(k);
	}
	return 0;
}

static int wl_h3_recv_data(nghttp3_conn *conn, int64_t id, const uint8_t *p, size_t len, void *cu,
			   void *su)
{
	struct wl_stream *s = su;

	(void)conn, (void)id, (void)cu;
	if (!s || s->kind != REQUEST)
		return 0;
	atomic_fetch_add(&wl_app.rx_body, len);
	s->h->data(s, s->ctx, p, len);
	return 0;
}

static int h3_header(nghttp3_conn *conn, int64_t id, int32_t token, nghttp3_rcbuf *name,
		     nghttp3_rcbuf *value, uint8_t flags, void *cu, void *su)
{
	struct wl_conn *c = cu;
	nghttp3_vec v = nghttp3_rcbuf_get_buf(value);

	(void)conn, (void)id, (void)name, (void)flags, (void)su;
	if (c->server && token == NGHTTP3_QPACK_TOKEN__METHOD &&
	    (v.len != 4 || memcmp(v.base, "POST", 4)))
		return h3_refuse("a request that is not a POST");
	if (!c->server && token == NGHTTP3_QPACK_TOKEN__STATUS &&
	    (v.len != 3 || memcmp(v.base, "200", 3)))
		return h3_refuse("a status other than 200");
	return 0;
}

static int wl_h3_end_stream(nghttp3_conn *conn, int64_t id, void *cu, void *su)
{
	struct wl_stream *s = su;

	(void)conn, (void)id, (void)cu;
	atomic_fetch_add(&wl_app.rx_messages, 1);
	if (s && s->kind == REQUEST)
		s->h->fin(s, s->ctx);
	return 0;
}

static int h3_begin_headers(nghttp3_conn *conn, int64_t id, void *cu, void *su)
{
	struct wl_conn *c = cu;

	(void)su;
	/* The server's request streams: the pattern's context rides on nghttp3's stream. */
	if (c->server)
		nghttp3_conn_set_stream_user_data(conn, id, by_id(c, id));
	return 0;
}

static int h3_stop(nghttp3_conn *conn, int64_t id, uint64_t code, void *cu, void *su)
{
	struct wl_stream *s = su;

	(void)conn, (void)id, (void)code, (void)cu;
	if (s && s->lower)
		wl_app_lower->abort(s->lower);
	return 0;
}

static const nghttp3_callbacks callbacks = {
	.acked_stream_data = wl_h3_acked,
	.recv_data = wl_h3_recv_data,
	.begin_headers = h3_begin_headers,
	.recv_header = h3_header,
	.end_stream = wl_h3_end_stream,
	.stop_sending = h3_stop,
	.reset_stream = h3_stop,
};

/* The connection's three unidirectional streams, once each has its ID: bound, and the pattern told. */
static void try_bind(struct wl_conn *c)
{
	int rv;

	if (c->bound)
		return;
	for (int i = 0; i < H3_UNI; i++)
		if (!c->uni[i] || c->uni[i]->id < 0)
			return;
	rv = nghttp3_conn_bind_control_stream(c->h3, c->uni[0]->id);
	if (!rv)
		rv = nghttp3_conn_bind_qpack_streams(c->h3, c->uni[1]->id, c->uni[2]->id);
	if (rv) {
		wl_role_fail(WL_EXIT_INTERNAL, "nghttp3 would not bind its streams: %s",
			     nghttp3_strerror(rv));
		return;
	}
	c->bound = true;
	h3_flush(c);
	for (struct wl_stream *s = c->streams; s; s = s->next)
		if (s->kind == REQUEST)
			try_submit(s);
	if (!c->told_connected) {
		c->told_connected = true;
		c->h->connected(c, c->ctx);
	}
}

/* The transport's handlers, each under the connection's lock */

static void wl_h3_writable(struct wl_stream *ls, void *ctx)
{
	struct wl_stream *s = ctx;
	struct wl_conn *c = s->c;

	(void)ls;
	lock(c);
	if (s->id < 0 && (s->id = wl_app_lower->stream_id(s->lower)) >= 0) {
		if (s->kind == LOCAL_UNI)
			try_bind(c);
		else
			try_submit(s);
	}
	if (s->kind == REQUEST && s->h->writable)
		s->h->writable(s, s->ctx);
	unlock(c);
}

static void h3_read(struct wl_stream *s, const uint8_t *p, size_t len, bool fin)
{
	struct wl_conn *c = s->c;
	nghttp3_ssize n;

	if (atomic_load(&wl_role.verify_failed))
		return;
	c->reading++;
	n = nghttp3_conn_read_stream(c->h3, s->id, p, len, fin);
	c->reading--;
	if (n < 0 && n != NGHTTP3_ERR_CALLBACK_FAILURE) {
		char why[128];

		snprintf(why, sizeof(why), "stream %lld: %s", (long long)s->id,
			 nghttp3_strerror((int)n));
		h3_refuse(why);
	}
	if (!c->reading && c->want_flush)
		h3_flush(c);
}

static void wl_h3_data(struct wl_stream *ls, void *ctx, const uint8_t *p, size_t len)
{
	struct wl_stream *s = ctx;
	uint64_t body0 = atomic_load(&wl_app.rx_body);

	(void)ls;
	lock(s->c);
	h3_read(s, p, len, false);
	atomic_fetch_add(&wl_app.rx_framing, len - (atomic_load(&wl_app.rx_body) - body0));
	unlock(s->c);
}

static void wl_h3_fin(struct wl_stream *ls, void *ctx)
{
	struct wl_stream *s = ctx;

	(void)ls;
	lock(s->c);
	h3_read(s, NULL, 0, true);
	unlock(s->c);
}

static void wl_h3_aborted(struct wl_stream *ls, void *ctx)
{
	struct wl_stream *s = ctx;

	(void)ls;
	lock(s->c);
	if (s->kind == REQUEST)
		s->h->aborted(s, s->ctx);
	else
		wl_role_fail(WL_EXIT_CONN_LOST, "the %s aborted an HTTP/3 control stream",
			     wl_role.server ? "client" : "server");
	unlock(s->c);
}

static void wl_h3_sent(struct wl_stream *ls, void *ctx, void *tag, bool canceled)
{
	struct wl_stream *s = ctx;

	(void)ls;
	if (!tag || canceled || s->id < 0)
		return;
	lock(s->c);
	nghttp3_conn_add_ack_offset(s->c->h3, s->id, (uint64_t)(uintptr_t)tag);
	unlock(s->c);
}

static void wl_h3_stream_closed(struct wl_stream *ls, void *ctx, bool graceful)
{
	struct wl_stream *s = ctx;
	struct wl_conn *c = s->c;

	(void)ls;
	lock(c);
	if (s->id >= 0)
		nghttp3_conn_close_stream(c->h3, s->id, 0);
	if (s->kind == REQUEST)
		s->h->closed(s, s->ctx, graceful);
	for (int i = 0; i < H3_UNI; i++)
		if (c->uni[i] == s)
			c->uni[i] = NULL;
	s->h = NULL;
	stream_free(s);
	unlock(c);
}

static const struct wl_stream_handlers lower_stream_h = {
	.writable = wl_h3_writable,
	.data = wl_h3_data,
	.fin = wl_h3_fin,
	.aborted = wl_h3_aborted,
	.sent = wl_h3_sent,
	.closed = wl_h3_stream_closed,
};

static void wl_h3_connected(struct wl_conn *lc, void *ctx)
{
	struct wl_conn *c = ctx;

	(void)lc;
	lock(c);
	for (int i = 0; i < H3_UNI; i++) {
		struct wl_stream *s = stream_new(c, LOCAL_UNI);

		/* Its place first: its writable handler binds the three once all have IDs. */
		c->uni[i] = s;
		if (!s ||
		    wl_app_lower->open(c->lower, &lower_stream_h, s, WL_STREAM_UNI, &s->lower)) {
			wl_role_fail(WL_EXIT_INTERNAL, "HTTP/3's control streams could not open");
			c->uni[i] = NULL;
			if (s)
				stream_free(s);
			break;
		}
	}
	unlock(c);
}

static const struct wl_stream_handlers *wl_h3_stream(struct wl_conn *lc, void *ctx,
						     struct wl_stream *ls, void **sctx)
{
	struct wl_conn *c = ctx;
	int64_t id = wl_app_lower->stream_id(ls);
	struct wl_stream *s;

	(void)lc;
	lock(c);
	/* Peer-initiated: bit 1 of the ID says unidirectional (RFC 9000, 2.1). */
	s = stream_new(c, id & 2 ? PEER_UNI : REQUEST);
	if (!s) {
		unlock(c);
		return NULL;
	}
	s->lower = ls;
	s->id = id;
	if (s->kind == REQUEST) {
		s->h = c->h->stream(c, c->ctx, s, &s->ctx);
		if (!s->h) {
			s->h = NULL;
			stream_free(s);
			unlock(c);
			return NULL;
		}
	}
	*sctx = s;
	unlock(c);
	return &lower_stream_h;
}

static void wl_h3_conn_closed(struct wl_conn *lc, void *ctx, const struct wl_end *e)
{
	struct wl_conn *c = ctx;

	(void)lc;
	c->h->closed(c, c->ctx, e);
	nghttp3_conn_del(c->h3);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

static const struct wl_conn_handlers lower_conn_h = {
	.connected = wl_h3_connected,
	.stream = wl_h3_stream,
	.closed = wl_h3_conn_closed,
};

static struct wl_conn *conn_new(bool server)
{
	struct wl_conn *c = calloc(1, sizeof(*c));
	pthread_mutexattr_t ma;
	int rv;

	if (!c)
		return NULL;
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&c->lock, &ma);
	pthread_mutexattr_destroy(&ma);
	c->server = server;
	rv = server ? nghttp3_conn_server_new(&c->h3, &callbacks, &h3.settings, NULL, c)
		    : nghttp3_conn_client_new(&c->h3, &callbacks, &h3.settings, NULL, c);
	if (rv) {
		wl_warn("nghttp3 could not make a connection: %s", nghttp3_strerror(rv));
		pthread_mutex_destroy(&c->lock);
		free(c);
		return NULL;
	}
	if (server)
		nghttp3_conn_set_max_client_streams_bidi(c->h3, h3.a->peer_bidi_streams);
	return c;
}

static const struct wl_conn_handlers *wl_h3_accept(void *arg, struct wl_conn *lc, void **ctx)
{
	struct wl_conn *c = conn_new(true);

	(void)arg;
	if (!c)
		return NULL;
	c->lower = lc;
	c->h = h3.a->accept(h3.a->arg, c, &c->ctx);
	if (!c->h) {
		nghttp3_conn_del(c->h3);
		free(c);
		return NULL;
	}
	*ctx = c;
	return &lower_conn_h;
}

/* The transport */

static int wl_h3_init(const struct wl_opts *o, bool server)
{
	nghttp3_settings_default(&h3.settings);
	return wl_app_init(o, server);
}

static int wl_h3_listen(const struct wl_accept *a)
{
	static struct wl_accept mine;

	h3.a = a;
	mine = *a;
	mine.accept = wl_h3_accept;
	mine.arg = NULL;
	/* The client's control stream and its two QPACK streams. */
	if (mine.peer_uni_streams < H3_UNI)
		mine.peer_uni_streams = H3_UNI;
	return wl_app_lower->listen(&mine);
}

static int wl_h3_connect(const struct wl_conn_handlers *h, void *ctx, unsigned flags,
			 struct wl_conn **out)
{
	struct wl_conn *c = conn_new(false);
	int code;

	if (!c)
		return WL_EXIT_INTERNAL;
	c->h = h;
	c->ctx = ctx;
	*out = c;
	code = wl_app_lower->connect(&lower_conn_h, c, flags | WL_CONN_PEER_UNI, &c->lower);
	if (code) {
		nghttp3_conn_del(c->h3);
		free(c);
	}
	return code;
}

/* A request stream; started now (not with its first send), for the ID its request needs. */
static int wl_h3_open(struct wl_conn *c, const struct wl_stream_handlers *h, void *ctx,
		      unsigned flags, struct wl_stream **out)
{
	struct wl_stream *s;
	int code;

	lock(c);
	s = stream_new(c, REQUEST);
	if (!s) {
		unlock(c);
		return WL_EXIT_INTERNAL;
	}
	s->h = h;
	s->ctx = ctx;
	*out = s;
	code = wl_app_lower->open(c->lower, &lower_stream_h, s, flags & ~WL_STREAM_LAZY, &s->lower);
	if (code) {
		s->h = NULL;
		stream_free(s);
	}
	unlock(c);
	return code;
}

/*
 * The message is queued (its header copied, its body the pattern's):
 * nghttp3 writes it, framed, when the stream has its ID and the
 * connection its control streams; a send with WL_SEND_FIN is the
 * message's last.
 */
static int wl_h3_send(struct wl_stream *s, const uint8_t *hdr, uint32_t hdr_len,
		      const uint8_t *body, uint32_t body_len, unsigned flags, void *tag)
{
	struct wl_conn *c = s->c;
	const uint32_t len = hdr_len + body_len;

	lock(c);
	if (len && wl_app_queue_push(&s->q, hdr, hdr_len, body, body_len, tag)) {
		unlock(c);
		return WL_EXIT_INTERNAL;
	}
	s->fin = s->fin || (flags & WL_SEND_FIN);
	if (!s->submitted) {
		/*
		 * Submitted once the connection's own streams are bound (msquic
		 * binds them before a request can be answered; a transport on the
		 * loop may read a request in the pass that completes the handshake).
		 */
		try_submit(s);
	} else {
		nghttp3_conn_resume_stream(c->h3, s->id);
		h3_flush(c);
	}
	unlock(c);
	return 0;
}

static size_t wl_h3_room(struct wl_stream *s)
{
	return wl_app_lower->room(s->lower);
}

static void wl_h3_abort(struct wl_stream *s)
{
	wl_app_lower->abort(s->lower);
}

static void wl_h3_close(struct wl_conn *c, uint64_t code)
{
	wl_app_lower->close(c->lower, code);
}

static int64_t wl_h3_stream_id(struct wl_stream *s)
{
	return s->id;
}

static void wl_h3_conn_info(struct wl_conn *c, struct wl_dl *r)
{
	wl_app_lower->conn_info(c->lower, r);
}

struct wl_transport wl_h3 = {
	.name = "h3",
	.init = wl_h3_init,
	.setup = wl_app_setup,
	.listen = wl_h3_listen,
	.listen_stop = wl_app_listen_stop,
	.connect = wl_h3_connect,
	.open = wl_h3_open,
	.send = wl_h3_send,
	.room = wl_h3_room,
	.abort = wl_h3_abort,
	.close = wl_h3_close,
	.stream_id = wl_h3_stream_id,
	.conn_info = wl_h3_conn_info,
	.json_connected = wl_app_json_connected,
	.json_mark = wl_app_json_mark,
	.json_done = wl_app_json_done,
	.fini = wl_app_fini,
};
