// SPDX-License-Identifier: GPL-2.0-only
/*
 * --app h2: HTTP/2 over the TCP stacks (plain, OpenSSL, kTLS), framed by
 * nghttp2 (Debian's libnghttp2, with its HPACK), as a transport over
 * wl_tcp.c (wl_app.h says how an application layer sits).
 *
 * HTTP/2 multiplexes streams over one TCP connection, so the pattern sees
 * a multistream transport, as over QUIC: each request on a stream of its
 * own, a POST with :authority, :path, content-type and content-length
 * (the message its body), answered by a 200 with the same headers but
 * the request line's; HPACK at nghttp2's defaults (its dynamic table on).
 * Each side sends its connection preface and SETTINGS once TCP (and TLS)
 * is up, with windows that never limit (16 MiB a stream, 64 MiB the
 * connection: the QUIC libraries get the same) and RFC 9218's priorities
 * (h2_start says why), and the pattern hears "connected" then. TLS runs
 * with no ALPN (HTTP/2 with prior knowledge, as curl
 * --http2-prior-knowledge). Everything that arrives goes through
 * nghttp2, which hands on the bodies alone; a request that is not a POST,
 * a status other than 200, or anything nghttp2 refuses fails the run
 * (exit 5, as a failed content check).
 *
 * All of a connection's work runs on the loop's thread (TCP's connections
 * on the loop), so nghttp2 needs no lock. What nghttp2 has to send after
 * each step is taken with nghttp2_session_mem_send into buffers of our
 * own, up to 256 KiB each, and each written as one message while TCP has
 * room (h2_flush_some).
 *
 * Named for the flame graph's categories as wl_h1.c is: h2_* is the
 * framing's own work ("HTTP framing", with nghttp2 itself), wl_h2_* hands
 * on to the pattern or to TCP and is the workload's.
 */
#define _GNU_SOURCE
#include <nghttp2/nghttp2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wl_app.h"
#include "wl_role.h"

#define H2_STREAM_WINDOW (16 << 20)
#define H2_CONN_WINDOW (64 << 20)
#define H2_BATCH (256 << 10) /* bytes of frames a write takes at most */

struct wl_stream {
	struct wl_stream *next, *prev; /* the connection's streams */
	struct wl_conn *c;
	int32_t id; /* 0 until nghttp2 has it */
	const struct wl_stream_handlers *h;
	void *ctx;
	struct wl_app_queue
		q;	/* the pattern's messages until nghttp2 has copied them into frames */
	bool fin;	/* the pattern ended its side */
	bool submitted; /* its request or response is nghttp2's */
	bool deferred;	/* its data provider ran dry: resume when more comes */
	bool closed;	/* nghttp2 closed it; the pattern has heard */
};

struct wl_conn {
	struct wl_conn *lower;
	struct wl_stream *tcp; /* the TCP connection's one stream */
	const struct wl_conn_handlers *h;
	void *ctx;
	nghttp2_session *session;
	bool server, up, dead;
	struct wl_stream *streams;
	int reading;	     /* inside nghttp2_session_mem_recv: flush after it */
	size_t body_flushed; /* of the batch being taken: the bodies' bytes */
};

/* What wl_tcp.c writes for us: a batch of frames, ours until its sent handler. */
struct h2_out {
	uint32_t len;
	uint8_t bytes[];
};

static struct {
	const struct wl_accept *a; /* server: the pattern's */
	nghttp2_session_callbacks *callbacks;
} h2;

static const struct wl_conn_handlers lower_conn_h;
static const struct wl_stream_handlers lower_stream_h;

static struct wl_stream *stream_new(struct wl_conn *c)
{
	struct wl_stream *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->c = c;
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

/* The peer's HTTP/2 was not what this side sends: the run fails, once. */
static int h2_refuse(const char *why)
{
	wl_app_refuse("HTTP/2", why);
	return NGHTTP2_ERR_CALLBACK_FAILURE;
}

/*
 * What nghttp2 has to send, in batches of at most H2_BATCH bytes, each
 * written as one message while TCP takes them without queueing (all:
 * everything, as the connection ends); the rest stays nghttp2's until
 * TCP's writable handler, so that a WINDOW_UPDATE made meanwhile goes
 * ahead of the DATA nghttp2 has not framed yet (it puts those first)
 * rather than behind up to a window's 64 MiB queued in TCP. Every byte
 * of a batch that is not a body counts as framing (h2_read_data counts
 * the bodies as it copies them in).
 */
static void h2_flush_some(struct wl_conn *c, bool all)
{
	while (!c->reading && !c->dead && c->tcp && (all || wl_app_lower->room(c->tcp) > 0)) {
		size_t cap = 0, len = 0;
		struct h2_out *o = NULL;

		c->body_flushed = 0;
		while (all || len < H2_BATCH) {
			const uint8_t *p;
			ssize_t n = nghttp2_session_mem_send(c->session, &p);

			if (n < 0) {
				wl_role_fail(WL_EXIT_INTERNAL, "nghttp2 could not write: %s",
					     nghttp2_strerror((int)n));
				free(o);
				return;
			}
			if (!n)
				break;
			if (len + (size_t)n > cap) {
				struct h2_out *bigger;

				cap = 2 * (len + (size_t)n) + 256;
				if (!(bigger = realloc(o, sizeof(*o) + cap))) {
					wl_role_fail(WL_EXIT_INTERNAL,
						     "out of memory for HTTP/2 frames");
					free(o);
					return;
				}
				o = bigger;
			}
			memcpy(o->bytes + len, p, (size_t)n);
			len += (size_t)n;
		}
		if (!len)
			return;
		o->len = (uint32_t)len;
		atomic_fetch_add(&wl_app.tx_framing, len - c->body_flushed);
		if (wl_app_lower->send(c->tcp, NULL, 0, o->bytes, o->len, WL_SEND_OWNED, o)) {
			free(o);
			c->dead = true;
		}
	}
}

static void h2_flush(struct wl_conn *c)
{
	h2_flush_some(c, false);
}

/* The data provider: the pattern's chunks copied into DATA frames, EOF once it ended its side. */
static ssize_t h2_read_data(nghttp2_session *session, int32_t id, uint8_t *buf, size_t length,
			    uint32_t *flags, nghttp2_data_source *source, void *user)
{
	struct wl_stream *s = source->ptr;
	size_t n = 0;

	(void)session, (void)id, (void)user;
	while (s->q.head && n < length) {
		struct wl_app_chunk *k = s->q.head;
		uint32_t piece;
		const uint8_t *p = wl_app_chunk_piece(k, k->out, &piece);
		size_t take = piece < length - n ? piece : length - n;

		memcpy(buf + n, p, take);
		k->out += (uint32_t)take;
		n += take;
		if (k->out < k->len)
			continue;
		wl_app_queue_pop(&s->q);
		/* Copied into nghttp2's frame: the pattern's message has left its hands. */
		if (k->tag && s->h->sent)
			s->h->sent(s, s->ctx, k->tag, false);
		free(k);
	}
	/* The batch's framing is what is left once its bodies are taken out. */
	atomic_fetch_add(&wl_app.tx_body, n);
	s->c->body_flushed += n;
	if (!s->q.head && s->fin) {
		*flags |= NGHTTP2_DATA_FLAG_EOF;
	} else if (!n) {
		s->deferred = true;
		return NGHTTP2_ERR_DEFERRED;
	}
	return (ssize_t)n;
}

/* Names are literals; values are copied (content-length is on the stack). */
#define NV(n, v)                                                          \
	{                                                                 \
		(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), \
			NGHTTP2_NV_FLAG_NO_COPY_NAME                      \
	}

/* The request or the response of s, whose message is len bytes, now nghttp2's. */
static int h2_submit(struct wl_stream *s, uint32_t len)
{
	const nghttp2_data_provider dp = {.source.ptr = s, .read_callback = h2_read_data};
	char clen[16];
	int32_t rv;

	snprintf(clen, sizeof(clen), "%u", len);
	if (s->c->server) {
		const nghttp2_nv nva[] = {NV(":status", "200"),
					  NV("content-type", "application/octet-stream"),
					  NV("content-length", clen)};

		rv = nghttp2_submit_response(s->c->session, s->id, nva, 3, &dp);
	} else {
		const nghttp2_nv nva[] = {NV(":method", "POST"),
					  NV(":scheme", "https"),
					  NV(":authority", wl_app_authority),
					  NV(":path", "/rr"),
					  NV("content-type", "application/octet-stream"),
					  NV("content-length", clen)};

		rv = nghttp2_submit_request(s->c->session, NULL, nva, 6, &dp, s);
		if (rv > 0)
			s->id = rv;
	}
	if (rv < 0) {
		wl_role_fail(WL_EXIT_INTERNAL, "nghttp2 would not take the %s: %s",
			     s->c->server ? "response" : "request", nghttp2_strerror(rv));
		return WL_EXIT_INTERNAL;
	}
	s->submitted = true;
	atomic_fetch_add(&wl_app.tx_messages, 1);
	return 0;
}

/* nghttp2's callbacks, on the loop's thread */

static int h2_begin_headers(nghttp2_session *session, const nghttp2_frame *f, void *user)
{
	struct wl_conn *c = user;
	struct wl_stream *s;

	if (!c->server || f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;
	/* A request: a stream of the pattern's, as QUIC's peer streams are. */
	if (!(s = stream_new(c)))
		return NGHTTP2_ERR_CALLBACK_FAILURE;
	s->id = f->hd.stream_id;
	s->h = c->h->stream(c, c->ctx, s, &s->ctx);
	if (!s->h) {
		stream_free(s);
		nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, f->hd.stream_id,
					  NGHTTP2_REFUSED_STREAM);
		return 0;
	}
	nghttp2_session_set_stream_user_data(session, f->hd.stream_id, s);
	return 0;
}

static int h2_header(nghttp2_session *session, const nghttp2_frame *f, const uint8_t *name,
		     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
		     void *user)
{
	struct wl_conn *c = user;

	(void)session, (void)f, (void)flags;
	if (c->server && namelen == 7 && !memcmp(name, ":method", 7) &&
	    (valuelen != 4 || memcmp(value, "POST", 4)))
		return h2_refuse("a request that is not a POST");
	if (!c->server && namelen == 7 && !memcmp(name, ":status", 7) &&
	    (valuelen != 3 || memcmp(value, "200", 3)))
		return h2_refuse("a status other than 200");
	return 0;
}

static int wl_h2_data_chunk(nghttp2_session *session, uint8_t flags, int32_t id, const uint8_t *p,
			    size_t len, void *user)
{
	struct wl_stream *s = nghttp2_session_get_stream_user_data(session, id);

	(void)flags, (void)user;
	if (!s || s->closed)
		return 0;
	atomic_fetch_add(&wl_app.rx_body, len);
	s->h->data(s, s->ctx, p, len);
	return 0;
}

static int wl_h2_frame(nghttp2_session *session, const nghttp2_frame *f, void *user)
{
	struct wl_stream *s;

	(void)user;
	if (!(f->hd.flags & NGHTTP2_FLAG_END_STREAM) ||
	    (f->hd.type != NGHTTP2_DATA && f->hd.type != NGHTTP2_HEADERS))
		return 0;
	atomic_fetch_add(&wl_app.rx_messages, 1);
	s = nghttp2_session_get_stream_user_data(session, f->hd.stream_id);
	if (s && !s->closed)
		s->h->fin(s, s->ctx);
	return 0;
}

static int wl_h2_stream_close(nghttp2_session *session, int32_t id, uint32_t code, void *user)
{
	struct wl_stream *s = nghttp2_session_get_stream_user_data(session, id);

	(void)user;
	if (!s || s->closed)
		return 0;
	s->closed = true;
	if (code != NGHTTP2_NO_ERROR)
		s->h->aborted(s, s->ctx);
	s->h->closed(s, s->ctx, code == NGHTTP2_NO_ERROR);
	nghttp2_session_set_stream_user_data(session, id, NULL);
	stream_free(s);
	return 0;
}

/* TCP's handlers (wl_tcp.c), on the loop's thread */

static void wl_h2_writable(struct wl_stream *ls, void *ctx)
{
	struct wl_conn *c = ctx;

	(void)ls;
	h2_flush(c);
	for (struct wl_stream *s = c->streams; s; s = s->next)
		if (s->h && s->h->writable)
			s->h->writable(s, s->ctx);
}

static void wl_h2_data(struct wl_stream *ls, void *ctx, const uint8_t *p, size_t len)
{
	struct wl_conn *c = ctx;
	uint64_t body0 = atomic_load(&wl_app.rx_body);
	ssize_t n;

	(void)ls;
	if (atomic_load(&wl_role.verify_failed))
		return;
	c->reading++;
	n = nghttp2_session_mem_recv(c->session, p, len);
	c->reading--;
	atomic_fetch_add(&wl_app.rx_framing, len - (atomic_load(&wl_app.rx_body) - body0));
	if (n < 0 && n != NGHTTP2_ERR_CALLBACK_FAILURE)
		h2_refuse(nghttp2_strerror((int)n));
	h2_flush(c);
}

/* The peer ended the TCP connection: every stream still open is cut short. */
static void wl_h2_fin(struct wl_stream *ls, void *ctx)
{
	struct wl_conn *c = ctx;

	(void)ls;
	c->dead = true;
	while (c->streams) {
		struct wl_stream *s = c->streams;

		if (!s->closed) {
			s->closed = true;
			s->h->aborted(s, s->ctx);
			s->h->closed(s, s->ctx, false);
		}
		if (s->id)
			nghttp2_session_set_stream_user_data(c->session, s->id, NULL);
		stream_free(s);
	}
	wl_app_lower->close(c->lower, WL_CLOSE_OK);
}

static void wl_h2_aborted(struct wl_stream *ls, void *ctx)
{
	wl_h2_fin(ls, ctx);
}

static void wl_h2_sent(struct wl_stream *ls, void *ctx, void *tag, bool canceled)
{
	(void)ls, (void)ctx, (void)canceled;
	free(tag);
}

static void wl_h2_tcp_closed(struct wl_stream *ls, void *ctx, bool graceful)
{
	struct wl_conn *c = ctx;

	(void)ls, (void)graceful;
	c->tcp = NULL;
}

static const struct wl_stream_handlers lower_stream_h = {
	.writable = wl_h2_writable,
	.data = wl_h2_data,
	.fin = wl_h2_fin,
	.aborted = wl_h2_aborted,
	.sent = wl_h2_sent,
	.closed = wl_h2_tcp_closed,
};

/*
 * TCP is up: the preface and SETTINGS, with windows that never limit and
 * RFC 9218's priorities instead of RFC 7540's. Under RFC 7540's every
 * stream weighs the same and nghttp2 shares the connection among all
 * that have data, a frame each in turn: an open loop that asks for more
 * than the connection carries (16 MiB every 10 ms) then moved every
 * request a little, each side held a hundred or more part-way, and as
 * often as not no response came inside the window. Under RFC 9218's,
 * streams that are not incremental (no priority field: urgency 3, not
 * incremental) go one after another in the order they were opened, as
 * TCP's one stream carries HTTP/1.1's messages.
 */
static int h2_start(struct wl_conn *c)
{
	const nghttp2_settings_entry iv[] = {
		{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 1024},
		{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, H2_STREAM_WINDOW},
		{NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES, 1},
	};
	int rv = nghttp2_submit_settings(c->session, NGHTTP2_FLAG_NONE, iv, 3);

	if (!rv)
		rv = nghttp2_session_set_local_window_size(c->session, NGHTTP2_FLAG_NONE, 0,
							   H2_CONN_WINDOW);
	if (rv) {
		wl_role_fail(WL_EXIT_INTERNAL, "nghttp2 would not take its settings: %s",
			     nghttp2_strerror(rv));
		return WL_EXIT_INTERNAL;
	}
	c->up = true;
	h2_flush(c);
	return 0;
}

static void wl_h2_connected(struct wl_conn *lc, void *ctx)
{
	struct wl_conn *c = ctx;

	(void)lc;
	/* The client opens TCP's one stream; the server takes it in wl_h2_tcp_stream. */
	if (!c->server &&
	    wl_app_lower->open(c->lower, &lower_stream_h, c, 0, &c->tcp) != WL_EXIT_OK) {
		wl_role_fail(WL_EXIT_CONN_LOST, "the HTTP/2 connection's stream could not open");
		return;
	}
	if (!h2_start(c))
		c->h->connected(c, c->ctx);
}

static const struct wl_stream_handlers *wl_h2_tcp_stream(struct wl_conn *lc, void *ctx,
							 struct wl_stream *ls, void **sctx)
{
	struct wl_conn *c = ctx;

	(void)lc;
	c->tcp = ls;
	*sctx = c;
	/* Its SETTINGS go with the first flush, once the client's preface is in (TCP takes no send here). */
	return &lower_stream_h;
}

static void wl_h2_conn_closed(struct wl_conn *lc, void *ctx, const struct wl_end *e)
{
	struct wl_conn *c = ctx;

	(void)lc;
	c->dead = true;
	while (c->streams) {
		struct wl_stream *s = c->streams;

		if (!s->closed && s->h) {
			s->closed = true;
			s->h->closed(s, s->ctx, false);
		}
		stream_free(s);
	}
	c->h->closed(c, c->ctx, e);
	nghttp2_session_del(c->session);
	free(c);
}

static const struct wl_conn_handlers lower_conn_h = {
	.connected = wl_h2_connected,
	.stream = wl_h2_tcp_stream,
	.closed = wl_h2_conn_closed,
};

static struct wl_conn *conn_new(bool server)
{
	struct wl_conn *c = calloc(1, sizeof(*c));
	int rv;

	if (!c)
		return NULL;
	c->server = server;
	rv = server ? nghttp2_session_server_new(&c->session, h2.callbacks, c)
		    : nghttp2_session_client_new(&c->session, h2.callbacks, c);
	if (rv) {
		wl_warn("nghttp2 could not make a session: %s", nghttp2_strerror(rv));
		free(c);
		return NULL;
	}
	return c;
}

static const struct wl_conn_handlers *wl_h2_accept(void *arg, struct wl_conn *lc, void **ctx)
{
	struct wl_conn *c = conn_new(true);

	(void)arg;
	if (!c)
		return NULL;
	c->lower = lc;
	c->h = h2.a->accept(h2.a->arg, c, &c->ctx);
	if (!c->h) {
		nghttp2_session_del(c->session);
		free(c);
		return NULL;
	}
	*ctx = c;
	return &lower_conn_h;
}

/* The transport */

static int wl_h2_init(const struct wl_opts *o, bool server)
{
	nghttp2_session_callbacks *cb;

	if (nghttp2_session_callbacks_new(&cb)) {
		wl_warn("nghttp2 could not make its callbacks");
		return WL_EXIT_LIB_OPEN;
	}
	nghttp2_session_callbacks_set_on_begin_headers_callback(cb, h2_begin_headers);
	nghttp2_session_callbacks_set_on_header_callback(cb, h2_header);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, wl_h2_data_chunk);
	nghttp2_session_callbacks_set_on_frame_recv_callback(cb, wl_h2_frame);
	nghttp2_session_callbacks_set_on_stream_close_callback(cb, wl_h2_stream_close);
	h2.callbacks = cb;
	return wl_app_init(o, server);
}

static int wl_h2_listen(const struct wl_accept *a)
{
	static struct wl_accept mine;

	h2.a = a;
	mine = *a;
	mine.accept = wl_h2_accept;
	mine.arg = NULL;
	return wl_app_lower->listen(&mine);
}

static int wl_h2_connect(const struct wl_conn_handlers *h, void *ctx, unsigned flags,
			 struct wl_conn **out)
{
	struct wl_conn *c = conn_new(false);
	int code;

	if (!c)
		return WL_EXIT_INTERNAL;
	c->h = h;
	c->ctx = ctx;
	*out = c;
	code = wl_app_lower->connect(&lower_conn_h, c, flags, &c->lower);
	if (code) {
		nghttp2_session_del(c->session);
		free(c);
	}
	return code;
}

/* A request stream: nghttp2 numbers it when its request is submitted, with its first send. */
static int wl_h2_open(struct wl_conn *c, const struct wl_stream_handlers *h, void *ctx,
		      unsigned flags, struct wl_stream **out)
{
	struct wl_stream *s;

	(void)flags;
	if (c->dead || !(s = stream_new(c)))
		return c->dead ? WL_EXIT_CONN_LOST : WL_EXIT_INTERNAL;
	s->h = h;
	s->ctx = ctx;
	*out = s;
	return 0;
}

/*
 * The message is queued (its header copied, its body the pattern's):
 * nghttp2 copies it into its DATA frames as the flow windows allow; a
 * send with WL_SEND_FIN is the message's last.
 */
static int wl_h2_send(struct wl_stream *s, const uint8_t *hdr, uint32_t hdr_len,
		      const uint8_t *body, uint32_t body_len, unsigned flags, void *tag)
{
	struct wl_conn *c = s->c;
	const uint32_t len = hdr_len + body_len;
	int rv = 0;

	if (c->dead || s->closed)
		return WL_EXIT_CONN_LOST;
	if (len && wl_app_queue_push(&s->q, hdr, hdr_len, body, body_len, tag))
		return WL_EXIT_INTERNAL;
	s->fin = s->fin || (flags & WL_SEND_FIN);
	if (!s->submitted && len)
		rv = h2_submit(s, len);
	else if (s->submitted && s->deferred) {
		s->deferred = false;
		nghttp2_session_resume_data(c->session, s->id);
	}
	if (rv)
		return rv;
	h2_flush(c);
	return c->dead ? WL_EXIT_CONN_LOST : 0;
}

static size_t wl_h2_room(struct wl_stream *s)
{
	return s->c->tcp ? wl_app_lower->room(s->c->tcp) : 0;
}

static void wl_h2_abort(struct wl_stream *s)
{
	if (s->id && !s->closed) {
		nghttp2_submit_rst_stream(s->c->session, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_CANCEL);
		h2_flush(s->c);
	}
}

static void wl_h2_close(struct wl_conn *c, uint64_t code)
{
	if (!c->dead && c->up) {
		nghttp2_session_terminate_session(c->session,
						  code ? NGHTTP2_INTERNAL_ERROR : NGHTTP2_NO_ERROR);
		h2_flush_some(c, true);
	}
	wl_app_lower->close(c->lower, code);
}

static void wl_h2_conn_info(struct wl_conn *c, struct wl_dl *r)
{
	wl_app_lower->conn_info(c->lower, r);
}

static void wl_h2_fini(void)
{
	wl_app_fini();
	nghttp2_session_callbacks_del(h2.callbacks);
}

struct wl_transport wl_h2 = {
	.name = "h2",
	.multistream = true,
	.init = wl_h2_init,
	.setup = wl_app_setup,
	.listen = wl_h2_listen,
	.listen_stop = wl_app_listen_stop,
	.connect = wl_h2_connect,
	.open = wl_h2_open,
	.send = wl_h2_send,
	.room = wl_h2_room,
	.abort = wl_h2_abort,
	.close = wl_h2_close,
	.conn_info = wl_h2_conn_info,
	.json_connected = wl_app_json_connected,
	.json_mark = wl_app_json_mark,
	.json_done = wl_app_json_done,
	.fini = wl_h2_fini,
};
