// SPDX-License-Identifier: GPL-2.0-only
/*
 * --app h1: HTTP/1.1 over the TCP stacks (plain, OpenSSL, kTLS), as a
 * transport over wl_tcp.c (wl_app.h says how an application layer sits).
 *
 * Each message of the pattern is one HTTP/1.1 message with a
 * Content-Length, its body the message: the client's a POST, the
 * server's a 200 answer, both with the headers a plain client and server
 * send (Host, Content-Type, Content-Length; no Date or Server, which would
 * make the sizes drift). Requests on one connection follow each other
 * without waiting (pipelining, as HTTP/1.1 allows; the server answers in
 * order), and --tcp-conns on-demand opens another connection when every
 * open one waits, as the seed's HTTP/1.1 client did. Every byte that
 * arrives goes through http-parser; a message it refuses, a status other
 * than 200 or a method other than POST fails the run (exit 5, as a failed
 * content check: the peer's bytes were not what they must be).
 */
#define _GNU_SOURCE
#include <http_parser.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wl_app.h"
#include "wl_role.h"

/* The one stream of a connection, the pattern's view of the TCP one. */
struct wl_stream {
	struct wl_stream *lower;
	struct wl_conn *c;
	const struct wl_stream_handlers *h;
	void *ctx;
	http_parser parser;
	bool refused; /* the parser or a check failed: nothing more is handed on */
};

struct wl_conn {
	struct wl_conn *lower;
	const struct wl_conn_handlers *h;
	void *ctx;
	struct wl_stream s;
};

/* A message in flight: its bytes (the head, then the pattern's) until the lower transport lets go. */
struct h1_msg {
	void *tag; /* the pattern's */
	uint32_t len;
	uint8_t bytes[];
};

static struct {
	const struct wl_accept *a; /* server: the pattern's */
} h1;

static const struct wl_conn_handlers lower_conn_h;
static const struct wl_stream_handlers lower_stream_h;

static void wl_h1_stream_init(struct wl_conn *c, bool server)
{
	c->s.c = c;
	http_parser_init(&c->s.parser, server ? HTTP_REQUEST : HTTP_RESPONSE);
	c->s.parser.data = &c->s;
}

/* The peer's bytes were not HTTP/1.1 as this side sends it: the run fails, once. */
static int h1_refuse(struct wl_stream *s, const char *why)
{
	if (!s->refused) {
		s->refused = true;
		wl_app_refuse("HTTP/1.1", why);
	}
	return -1;
}

/*
 * http-parser's callbacks. Named for the flame graph's categories: h1_*
 * is the framing's own work ("HTTP framing"), wl_h1_* hands on to the
 * pattern and is the workload's, so what the pattern does under it is not
 * counted as framing.
 */

static int h1_on_headers(http_parser *p)
{
	struct wl_stream *s = p->data;

	if (wl_role.server && p->method != HTTP_POST)
		return h1_refuse(s, "a request that is not a POST");
	if (!wl_role.server && p->status_code != 200) {
		char why[64];

		snprintf(why, sizeof(why), "status %u, not 200", p->status_code);
		return h1_refuse(s, why);
	}
	return 0;
}

static int wl_h1_on_body(http_parser *p, const char *at, size_t len)
{
	struct wl_stream *s = p->data;

	atomic_fetch_add(&wl_app.rx_body, len);
	s->h->data(s, s->ctx, (const uint8_t *)at, len);
	return 0;
}

static int h1_on_message(http_parser *p)
{
	(void)p;
	atomic_fetch_add(&wl_app.rx_messages, 1);
	return 0;
}

static const http_parser_settings parser_settings = {
	.on_headers_complete = h1_on_headers,
	.on_body = wl_h1_on_body,
	.on_message_complete = h1_on_message,
};

/* The lower transport's handlers, each handing on to the pattern's */

static void wl_h1_writable(struct wl_stream *ls, void *ctx)
{
	struct wl_stream *s = ctx;

	(void)ls;
	s->h->writable(s, s->ctx);
}

static void wl_h1_data(struct wl_stream *ls, void *ctx, const uint8_t *p, size_t len)
{
	struct wl_stream *s = ctx;
	uint64_t body0 = atomic_load(&wl_app.rx_body);
	size_t n;

	(void)ls;
	if (s->refused)
		return;
	n = http_parser_execute(&s->parser, &parser_settings, (const char *)p, len);
	/* Every byte parsed that was no body's was the framing's. */
	atomic_fetch_add(&wl_app.rx_framing, n - (atomic_load(&wl_app.rx_body) - body0));
	if (HTTP_PARSER_ERRNO(&s->parser) != HPE_OK && !s->refused)
		h1_refuse(s, http_errno_description(HTTP_PARSER_ERRNO(&s->parser)));
	else if (n != len && !s->refused)
		h1_refuse(s, "bytes after the connection's last message");
}

static void wl_h1_fin(struct wl_stream *ls, void *ctx)
{
	struct wl_stream *s = ctx;

	(void)ls;
	s->h->fin(s, s->ctx);
}

static void wl_h1_aborted(struct wl_stream *ls, void *ctx)
{
	struct wl_stream *s = ctx;

	(void)ls;
	s->h->aborted(s, s->ctx);
}

static void wl_h1_sent(struct wl_stream *ls, void *ctx, void *tag, bool canceled)
{
	struct wl_stream *s = ctx;
	struct h1_msg *m = tag;
	void *theirs = m ? m->tag : NULL;

	(void)ls;
	free(m);
	if (theirs && s->h->sent)
		s->h->sent(s, s->ctx, theirs, canceled);
}

static void wl_h1_stream_closed(struct wl_stream *ls, void *ctx, bool graceful)
{
	struct wl_stream *s = ctx;

	(void)ls;
	s->h->closed(s, s->ctx, graceful);
}

static const struct wl_stream_handlers lower_stream_h = {
	.writable = wl_h1_writable,
	.data = wl_h1_data,
	.fin = wl_h1_fin,
	.aborted = wl_h1_aborted,
	.sent = wl_h1_sent,
	.closed = wl_h1_stream_closed,
};

static void wl_h1_connected(struct wl_conn *lc, void *ctx)
{
	struct wl_conn *c = ctx;

	(void)lc;
	c->h->connected(c, c->ctx);
}

static const struct wl_stream_handlers *wl_h1_stream(struct wl_conn *lc, void *ctx,
						     struct wl_stream *ls, void **sctx)
{
	struct wl_conn *c = ctx;

	(void)lc;
	c->s.lower = ls;
	c->s.h = c->h->stream(c, c->ctx, &c->s, &c->s.ctx);
	if (!c->s.h)
		return NULL;
	*sctx = &c->s;
	return &lower_stream_h;
}

static void wl_h1_conn_closed(struct wl_conn *lc, void *ctx, const struct wl_end *e)
{
	struct wl_conn *c = ctx;

	(void)lc;
	c->h->closed(c, c->ctx, e);
	free(c);
}

static const struct wl_conn_handlers lower_conn_h = {
	.connected = wl_h1_connected,
	.stream = wl_h1_stream,
	.closed = wl_h1_conn_closed,
};

static const struct wl_conn_handlers *wl_h1_accept(void *arg, struct wl_conn *lc, void **ctx)
{
	struct wl_conn *c = calloc(1, sizeof(*c));

	(void)arg;
	if (!c)
		return NULL;
	c->lower = lc;
	wl_h1_stream_init(c, true);
	c->h = h1.a->accept(h1.a->arg, c, &c->ctx);
	if (!c->h) {
		free(c);
		return NULL;
	}
	*ctx = c;
	return &lower_conn_h;
}

/* The transport */

static int wl_h1_listen(const struct wl_accept *a)
{
	static struct wl_accept mine;

	h1.a = a;
	mine = *a;
	mine.accept = wl_h1_accept;
	mine.arg = NULL;
	return wl_app_lower->listen(&mine);
}

static int wl_h1_connect(const struct wl_conn_handlers *h, void *ctx, unsigned flags,
			 struct wl_conn **out)
{
	struct wl_conn *c = calloc(1, sizeof(*c));
	int code;

	if (!c)
		return WL_EXIT_INTERNAL;
	c->h = h;
	c->ctx = ctx;
	wl_h1_stream_init(c, false);
	*out = c;
	code = wl_app_lower->connect(&lower_conn_h, c, flags, &c->lower);
	if (code)
		free(c);
	return code;
}

static int wl_h1_open(struct wl_conn *c, const struct wl_stream_handlers *h, void *ctx,
		      unsigned flags, struct wl_stream **out)
{
	c->s.h = h;
	c->s.ctx = ctx;
	*out = &c->s;
	return wl_app_lower->open(c->lower, &lower_stream_h, &c->s, flags, &c->s.lower);
}

/* The head of a message whose body is len bytes, into buf; its length. */
static int h1_head(char *buf, size_t size, uint32_t len)
{
	if (wl_role.server)
		return snprintf(buf, size,
				"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
				"Content-Length: %u\r\n\r\n",
				len);
	return snprintf(
		buf, size,
		"POST /rr HTTP/1.1\r\nHost: %s\r\nContent-Type: application/octet-stream\r\n"
		"Content-Length: %u\r\n\r\n",
		wl_app_authority, len);
}

/*
 * The message framed, head and all, in a buffer of its own: one write for
 * both, as a client writing a small request does (an rr message is a few
 * hundred bytes, copied behind its head), so TLS makes one record of them.
 * A FIN alone (len 0) is no message: an empty one, for its tag.
 */
static struct h1_msg *h1_frame(const uint8_t *hdr, uint32_t hdr_len, const uint8_t *body,
			       uint32_t body_len, uint32_t *head_len)
{
	char h[192];
	const uint32_t len = hdr_len + body_len;
	struct h1_msg *m;

	*head_len = len ? (uint32_t)h1_head(h, sizeof(h), len) : 0;
	if (!(m = malloc(sizeof(*m) + *head_len + len)))
		return NULL;
	m->len = *head_len + len;
	memcpy(m->bytes, h, *head_len);
	memcpy(m->bytes + *head_len, hdr, hdr_len);
	memcpy(m->bytes + *head_len + hdr_len, body, body_len);
	return m;
}

/* Framed, then handed down whole; a FIN's tag still comes back through wl_h1_sent. */
static int wl_h1_send(struct wl_stream *s, const uint8_t *hdr, uint32_t hdr_len,
		      const uint8_t *body, uint32_t body_len, unsigned flags, void *tag)
{
	const uint32_t len = hdr_len + body_len;
	uint32_t hlen;
	struct h1_msg *m = h1_frame(hdr, hdr_len, body, body_len, &hlen);
	int code;

	if (!m)
		return WL_EXIT_INTERNAL;
	m->tag = tag;
	/* m is TCP's from here: written at once, it is freed (wl_h1_sent) before send returns. */
	code = wl_app_lower->send(s->lower, NULL, 0, len ? m->bytes : NULL, m->len,
				  flags | WL_SEND_OWNED, m);
	if (code) {
		free(m);
		return code;
	}
	if (!len)
		return 0;
	atomic_fetch_add(&wl_app.tx_messages, 1);
	atomic_fetch_add(&wl_app.tx_framing, hlen);
	atomic_fetch_add(&wl_app.tx_body, len);
	return 0;
}

static size_t wl_h1_room(struct wl_stream *s)
{
	return wl_app_lower->room(s->lower);
}

static void wl_h1_pause(struct wl_stream *s, bool paused)
{
	wl_app_lower->pause(s->lower, paused);
}

static void wl_h1_abort(struct wl_stream *s)
{
	wl_app_lower->abort(s->lower);
}

static void wl_h1_close(struct wl_conn *c, uint64_t code)
{
	wl_app_lower->close(c->lower, code);
}

static void wl_h1_conn_info(struct wl_conn *c, struct wl_dl *r)
{
	wl_app_lower->conn_info(c->lower, r);
}

struct wl_transport wl_h1 = {
	.name = "h1",
	.init = wl_app_init,
	.setup = wl_app_setup,
	.listen = wl_h1_listen,
	.listen_stop = wl_app_listen_stop,
	.connect = wl_h1_connect,
	.open = wl_h1_open,
	.send = wl_h1_send,
	.room = wl_h1_room,
	.pause = wl_h1_pause,
	.abort = wl_h1_abort,
	.close = wl_h1_close,
	.conn_info = wl_h1_conn_info,
	.json_connected = wl_app_json_connected,
	.json_mark = wl_app_json_mark,
	.json_done = wl_app_json_done,
	.fini = wl_app_fini,
};
