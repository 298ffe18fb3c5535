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
	char host[64];		   /* client: the Host header's value */
} h1;

static const struct wl_conn_handlers lower_conn_h;
static const struct wl_stream_handlers lower_stream_h;

static void stream_init(struct wl_conn *c, bool server)
{
	c->s.c = c;
	http_parser_init(&c->s.parser, server ? HTTP_REQUEST : HTTP_RESPONSE);
	c->s.parser.data = &c->s;
}

/* The peer's bytes were not HTTP/1.1 as this side sends it: the run fails, once. */
static int refuse(struct wl_stream *s, const char *why)
{
	if (!s->refused) {
		s->refused = true;
		atomic_store(&wl_role.verify_failed, true);
		wl_role_fail(WL_EXIT_VERIFY, "HTTP/1.1 from the %s: %s",
			     wl_role.server ? "client" : "server", why);
	}
	return -1;
}

/* http-parser's callbacks */

static int on_headers_complete(http_parser *p)
{
	struct wl_stream *s = p->data;

	if (wl_role.server && p->method != HTTP_POST)
		return refuse(s, "a request that is not a POST");
	if (!wl_role.server && p->status_code != 200) {
		char why[64];

		snprintf(why, sizeof(why), "status %u, not 200", p->status_code);
		return refuse(s, why);
	}
	return 0;
}

static int on_body(http_parser *p, const char *at, size_t len)
{
	struct wl_stream *s = p->data;

	atomic_fetch_add(&wl_app.rx_body, len);
	s->h->data(s, s->ctx, (const uint8_t *)at, len);
	return 0;
}

static int on_message_complete(http_parser *p)
{
	(void)p;
	atomic_fetch_add(&wl_app.rx_messages, 1);
	return 0;
}

static const http_parser_settings parser_settings = {
	.on_headers_complete = on_headers_complete,
	.on_body = on_body,
	.on_message_complete = on_message_complete,
};

/* The lower transport's handlers, each handing on to the pattern's */

static void l_writable(struct wl_stream *ls, void *ctx)
{
	struct wl_stream *s = ctx;

	(void)ls;
	s->h->writable(s, s->ctx);
}

static void l_data(struct wl_stream *ls, void *ctx, const uint8_t *p, size_t len)
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
		refuse(s, http_errno_description(HTTP_PARSER_ERRNO(&s->parser)));
	else if (n != len && !s->refused)
		refuse(s, "bytes after the connection's last message");
}

static void l_fin(struct wl_stream *ls, void *ctx)
{
	struct wl_stream *s = ctx;

	(void)ls;
	s->h->fin(s, s->ctx);
}

static void l_aborted(struct wl_stream *ls, void *ctx)
{
	struct wl_stream *s = ctx;

	(void)ls;
	s->h->aborted(s, s->ctx);
}

static void l_sent(struct wl_stream *ls, void *ctx, void *tag, bool canceled)
{
	struct wl_stream *s = ctx;
	struct h1_msg *m = tag;
	void *theirs = m ? m->tag : NULL;

	(void)ls;
	free(m);
	if (theirs && s->h->sent)
		s->h->sent(s, s->ctx, theirs, canceled);
}

static void l_stream_closed(struct wl_stream *ls, void *ctx, bool graceful)
{
	struct wl_stream *s = ctx;

	(void)ls;
	s->h->closed(s, s->ctx, graceful);
}

static const struct wl_stream_handlers lower_stream_h = {
	.writable = l_writable,
	.data = l_data,
	.fin = l_fin,
	.aborted = l_aborted,
	.sent = l_sent,
	.closed = l_stream_closed,
};

static void l_connected(struct wl_conn *lc, void *ctx)
{
	struct wl_conn *c = ctx;

	(void)lc;
	c->h->connected(c, c->ctx);
}

static const struct wl_stream_handlers *l_stream(struct wl_conn *lc, void *ctx,
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

static void l_conn_closed(struct wl_conn *lc, void *ctx, const struct wl_end *e)
{
	struct wl_conn *c = ctx;

	(void)lc;
	c->h->closed(c, c->ctx, e);
	free(c);
}

static const struct wl_conn_handlers lower_conn_h = {
	.connected = l_connected,
	.stream = l_stream,
	.closed = l_conn_closed,
};

static const struct wl_conn_handlers *l_accept(void *arg, struct wl_conn *lc, void **ctx)
{
	struct wl_conn *c = calloc(1, sizeof(*c));

	(void)arg;
	if (!c)
		return NULL;
	c->lower = lc;
	stream_init(c, true);
	c->h = h1.a->accept(h1.a->arg, c, &c->ctx);
	if (!c->h) {
		free(c);
		return NULL;
	}
	*ctx = c;
	return &lower_conn_h;
}

/* The transport */

static int h1_init(const struct wl_opts *o, bool server)
{
	snprintf(h1.host, sizeof(h1.host), "%s:%u", o->addr, (unsigned)o->port);
	return wl_app_lower->init(o, server);
}

static int h1_setup(void)
{
	return wl_app_lower->setup ? wl_app_lower->setup() : 0;
}

static int h1_listen(const struct wl_accept *a)
{
	static struct wl_accept mine;

	h1.a = a;
	mine = *a;
	mine.accept = l_accept;
	mine.arg = NULL;
	return wl_app_lower->listen(&mine);
}

static void h1_listen_stop(void)
{
	wl_app_lower->listen_stop();
}

static int h1_connect(const struct wl_conn_handlers *h, void *ctx, unsigned flags,
		      struct wl_conn **out)
{
	struct wl_conn *c = calloc(1, sizeof(*c));
	int code;

	if (!c)
		return WL_EXIT_INTERNAL;
	c->h = h;
	c->ctx = ctx;
	stream_init(c, false);
	*out = c;
	code = wl_app_lower->connect(&lower_conn_h, c, flags, &c->lower);
	if (code)
		free(c);
	return code;
}

static int h1_open(struct wl_conn *c, const struct wl_stream_handlers *h, void *ctx,
		   unsigned flags, struct wl_stream **out)
{
	c->s.h = h;
	c->s.ctx = ctx;
	*out = &c->s;
	return wl_app_lower->open(c->lower, &lower_stream_h, &c->s, flags, &c->s.lower);
}

/* The head of a message whose body is len bytes, into buf; its length. */
static int head(char *buf, size_t size, uint32_t len)
{
	if (wl_role.server)
		return snprintf(buf, size,
				"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
				"Content-Length: %u\r\n\r\n",
				len);
	return snprintf(buf, size,
			"POST /rr HTTP/1.1\r\nHost: %s\r\nContent-Type: application/octet-stream\r\n"
			"Content-Length: %u\r\n\r\n",
			h1.host, len);
}

/*
 * One write for the head and the message, as a client writing a small
 * request does: the message is copied behind its head (an rr message is a
 * few hundred bytes), so TLS makes one record of both.
 */
static int h1_send(struct wl_stream *s, const uint8_t *hdr, uint32_t hdr_len, const uint8_t *body,
		   uint32_t body_len, unsigned flags, void *tag)
{
	char h[192];
	uint32_t len = hdr_len + body_len, hlen;
	struct h1_msg *m;
	int code;

	/* A FIN alone is no message; its tag still comes back through l_sent. */
	hlen = len ? (uint32_t)head(h, sizeof(h), len) : 0;
	if (!(m = malloc(sizeof(*m) + hlen + len)))
		return WL_EXIT_INTERNAL;
	m->tag = tag;
	m->len = hlen + len;
	memcpy(m->bytes, h, hlen);
	memcpy(m->bytes + hlen, hdr, hdr_len);
	memcpy(m->bytes + hlen + hdr_len, body, body_len);
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

static size_t h1_room(struct wl_stream *s)
{
	return wl_app_lower->room(s->lower);
}

static void h1_pause(struct wl_stream *s, bool paused)
{
	wl_app_lower->pause(s->lower, paused);
}

static void h1_abort(struct wl_stream *s)
{
	wl_app_lower->abort(s->lower);
}

static void h1_close(struct wl_conn *c, uint64_t code)
{
	wl_app_lower->close(c->lower, code);
}

static void h1_conn_info(struct wl_conn *c, struct wl_dl *r)
{
	wl_app_lower->conn_info(c->lower, r);
}

static void h1_json_connected(struct wl_json *j)
{
	wl_app_lower->json_connected(j);
}

static void h1_json_mark(struct wl_json *j)
{
	wl_app_lower->json_mark(j);
	wl_app_json(j, "h1");
}

static void h1_json_done(struct wl_json *j, const struct wl_end *last)
{
	wl_app_lower->json_done(j, last);
	wl_app_json(j, "h1");
}

static void h1_fini(void)
{
	wl_app_lower->fini();
}

struct wl_transport wl_h1 = {
	.name = "h1",
	.init = h1_init,
	.setup = h1_setup,
	.listen = h1_listen,
	.listen_stop = h1_listen_stop,
	.connect = h1_connect,
	.open = h1_open,
	.send = h1_send,
	.room = h1_room,
	.pause = h1_pause,
	.abort = h1_abort,
	.close = h1_close,
	.conn_info = h1_conn_info,
	.json_connected = h1_json_connected,
	.json_mark = h1_json_mark,
	.json_done = h1_json_done,
	.fini = h1_fini,
};
