// SPDX-License-Identifier: GPL-2.0-only
/*
 * --pattern download (wl.h): --count connections strictly one after
 * another; on each the client asks for --size bytes on one stream and
 * checks every byte of the answer, the server answers with the pattern
 * from offset 0. Each connection is its own (WL_CONN_DEDICATED): TCP reads
 * and writes it blocking, as a one-at-a-time download wants.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "wl_role.h"

struct dl {
	struct wl_conn *c;
	struct wl_stream *s;
	struct wl_dl r;
	uint8_t req[WL_DL_REQUEST_LEN]; /* client: sent; server: received */
	uint32_t req_len;
	_Atomic bool asked; /* client: the request is sent (early, or once connected) */
	uint64_t off;	    /* client: bytes checked; server: bytes handed to the transport */
	bool fin;	    /* client: the server's FIN came; server: ours is sent */
	bool sending;	    /* server: the request is in, the answer under way */
	bool delivered;	    /* server: every byte and the FIN reached the client */
	bool bad, overrun;  /* client: the check failed (at off) */
	struct wl_end end;
	_Atomic bool closed;
};

static struct {
	_Atomic uint64_t downloads; /* client: checked; server: delivered */
	_Atomic uint64_t accepted;  /* server: connections so far */
	_Atomic int live;	    /* server: connections not yet closed */
} dl;

/* Client */

static void client_data(struct wl_stream *s, void *ctx, const uint8_t *p, size_t len)
{
	struct dl *d = ctx;
	const uint64_t size = wl_role.o->size;

	(void)s;
	if (d->bad || !len)
		return;
	if (!d->r.t_first_byte)
		d->r.t_first_byte = wl_now_ns();
	if (d->off + len > size || !wl_pattern_check(d->off, p, len)) {
		d->bad = true;
		d->overrun = d->off + len > size;
		wl_role.t->close(d->c, WL_CLOSE_VERIFY);
		return;
	}
	d->off += len;
	atomic_fetch_add(&wl_role.app_bytes, len);
	if (d->off == size)
		d->r.t_complete = wl_now_ns();
}

/* The server ended the answer (a dedicated TCP connection then ends its side itself). */
static void client_fin(struct wl_stream *s, void *ctx)
{
	(void)s;
	((struct dl *)ctx)->fin = true;
}

static void client_stream_closed(struct wl_stream *s, void *ctx, bool graceful)
{
	struct dl *d = ctx;
	bool whole = d->fin && d->off == wl_role.o->size && !d->bad;

	(void)s, (void)graceful;
	wl_role.t->close(d->c, whole ? WL_CLOSE_OK : WL_CLOSE_ERROR);
}

static const struct wl_stream_handlers client_stream = {
	.writable = wl_ignore,
	.data = client_data,
	.fin = client_fin,
	.aborted = wl_ignore, /* the transport aborts it back */
	.closed = client_stream_closed,
};

/*
 * The request: --size as 8 bytes, little-endian. With many streams it
 * ends the stream (FIN); a TCP client asks without one, as before, and
 * ends its side once the answer is in.
 */
static int ask(struct dl *d, unsigned early)
{
	unsigned flags = early;
	int code;

	wl_put_le64(d->req, wl_role.o->size);
	code = wl_role.t->open(d->c, &client_stream, d, 0, &d->s);
	if (code)
		return code;
	if (wl_role.t->multistream)
		flags |= WL_SEND_FIN;
	return wl_send(d->s, d->req, WL_DL_REQUEST_LEN, NULL, 0, flags, NULL);
}

static void client_connected(struct wl_conn *c, void *ctx)
{
	struct dl *d = ctx;

	wl_role_connected(wl_now_ns());
	if (atomic_exchange(&d->asked, true)) /* asked already, early */
		return;
	if (ask(d, 0)) {
		wl_role_fail(WL_EXIT_CONN_LOST, "sending the request of download %llu failed",
			     (unsigned long long)d->r.i);
		wl_role.t->close(c, WL_CLOSE_ERROR);
	}
}

static void client_closed(struct wl_conn *c, void *ctx, const struct wl_end *e)
{
	struct dl *d = ctx;

	wl_role.t->conn_info(c, &d->r);
	d->end = *e;
	atomic_store(&d->closed, true);
	wl_loop_wake();
}

static const struct wl_conn_handlers client_conn = {
	.connected = client_connected,
	.closed = client_closed,
};

static bool conn_over(void *arg)
{
	return atomic_load(&((struct dl *)arg)->closed);
}

/* What one download's end means for the client, as an exit code. */
static int client_outcome(struct dl *d)
{
	const uint64_t i = d->r.i, size = wl_role.o->size;
	char which[48];

	if (d->bad) {
		wl_role_verify_failed(d->off, i, "verify_fail_download");
		wl_role_fail(WL_EXIT_VERIFY,
			     "download %llu failed the content check at offset %llu%s",
			     (unsigned long long)i, (unsigned long long)d->off,
			     d->overrun ? ": more than --size arrived" : "");
		return WL_EXIT_VERIFY;
	}
	wl_role.end = d->end;
	if (wl_role.failure.code)
		return wl_role.failure.code;
	if (d->end.exit_code) {
		wl_role_fail_end(&d->end);
		return d->end.exit_code;
	}
	if (!d->end.connected) {
		snprintf(which, sizeof(which), " (download %llu)", (unsigned long long)i);
		return wl_role_handshake_failed(&d->end, which);
	}
	if (!d->fin || d->off != size) {
		wl_role_fail(WL_EXIT_CONN_LOST, "download %llu ended after %llu of %llu bytes: %s",
			     (unsigned long long)i, (unsigned long long)d->off,
			     (unsigned long long)size, wl_end_why(&d->end));
		return WL_EXIT_CONN_LOST;
	}
	return WL_EXIT_OK;
}

static int dl_client(void)
{
	const struct wl_opts *o = wl_role.o;
	static struct dl d;
	uint64_t i;
	int code;

	if (!wl_role_wait_start())
		return WL_EXIT_OK;
	for (i = 0; i < o->count && !wl_role_stopping(); i++) {
		/* Every connection offers the last one's session, if there is one. */
		unsigned flags =
			WL_CONN_DEDICATED | WL_CONN_NODELAY | (o->resume ? WL_CONN_RESUME : 0);

		memset(&d, 0, sizeof(d));
		d.r.i = i; /* t_connect: the transport's, as it starts connecting */
		code = wl_role.t->connect(&client_conn, &d, flags, &d.c);
		if (code)
			return code;
		/* Resumed: the request goes before the handshake completes (QUIC 0-RTT). */
		if (o->resume && i > 0 && wl_role.t->early_data &&
		    !atomic_exchange(&d.asked, true) && ask(&d, WL_SEND_EARLY)) {
			wl_role_fail(WL_EXIT_INTERNAL, "sending the request as early data failed");
			wl_role.t->close(d.c, WL_CLOSE_ERROR);
		}
		if (wl_role_loop(conn_over, &d))
			return WL_EXIT_INTERNAL;
		code = client_outcome(&d);
		if (code)
			return code;
		d.r.bytes = d.off;
		wl_role.t_transfer_done_ns = d.r.t_complete;
		wl_emit_dl("download", &d.r);
		atomic_fetch_add(&dl.downloads, 1);
	}
	return WL_EXIT_OK;
}

/* Server */

/* The answer: --size bytes of the pattern from offset 0, then FIN. */
static void answer(struct wl_stream *s, void *ctx)
{
	struct dl *d = ctx;
	const uint32_t period = wl_pattern_period(), io = wl_role.o->io_size;
	const uint64_t size = wl_role.o->size;

	while (d->sending && !d->fin && wl_room(s) > 0) {
		uint64_t len = size - d->off < io ? size - d->off : io;
		unsigned flags = d->off + len == size ? WL_SEND_FIN : 0;

		if (wl_send(s, NULL, 0, wl_pattern_region() + d->off % period, (uint32_t)len, flags,
			    NULL))
			return; /* the connection's end says why */
		d->off += len;
		atomic_fetch_add(&wl_role.app_bytes, len);
		d->fin = flags & WL_SEND_FIN;
	}
}

static void take_request(struct wl_stream *s, struct dl *d)
{
	uint64_t want = wl_get_le64(d->req); /* short: its missing bytes are 0 */

	if (d->req_len != WL_DL_REQUEST_LEN || want != wl_role.o->size)
		wl_warn("connection %llu asked for %llu bytes (%u-byte request); sending --size, %llu",
			(unsigned long long)d->r.i, (unsigned long long)want, d->req_len,
			(unsigned long long)wl_role.o->size);
	d->sending = true;
	answer(s, d);
}

static void server_data(struct wl_stream *s, void *ctx, const uint8_t *p, size_t len)
{
	struct dl *d = ctx;
	size_t k = WL_DL_REQUEST_LEN - d->req_len;

	if (d->sending)
		return;
	if (k > len)
		k = len;
	memcpy(d->req + d->req_len, p, k);
	d->req_len += (uint32_t)k;
	if (d->req_len == WL_DL_REQUEST_LEN)
		take_request(s, d);
}

static void server_fin(struct wl_stream *s, void *ctx)
{
	struct dl *d = ctx;

	if (d->sending)
		return;
	if (!d->req_len)
		return; /* it asked for nothing: not a download */
	/* A short request: QUIC answers it all the same, as it did; TCP gives up, as it did. */
	if (wl_role.t->multistream) {
		take_request(s, d);
		return;
	}
	wl_role_fail(WL_EXIT_CONN_LOST, "connection %llu ended after %u bytes of its request: EOF",
		     (unsigned long long)d->r.i, d->req_len);
	wl_role.t->close(d->c, WL_CLOSE_ERROR);
}

static void server_stream_closed(struct wl_stream *s, void *ctx, bool graceful)
{
	struct dl *d = ctx;

	(void)s;
	d->delivered = d->fin && d->off == wl_role.o->size && graceful;
	if (d->delivered)
		d->r.t_complete = wl_now_ns();
}

static const struct wl_stream_handlers server_stream_h = {
	.writable = answer,
	.data = server_data,
	.fin = server_fin,
	.aborted = wl_ignore, /* the transport aborts it back */
	.closed = server_stream_closed,
};

static const struct wl_stream_handlers *server_stream(struct wl_conn *c, void *ctx,
						      struct wl_stream *s, void **sctx)
{
	struct dl *d = ctx;

	(void)c;
	if (d->s)
		return NULL; /* one stream a download */
	d->s = s;
	*sctx = d;
	return &server_stream_h;
}

/* The server's account of one connection, once it is gone. */
static void server_closed(struct wl_conn *c, void *ctx, const struct wl_end *e)
{
	struct dl *d = ctx;

	wl_role.t->conn_info(c, &d->r);
	/*
	 * A QUIC client closes with 0 only once it has every byte and the
	 * FIN; its close can overtake its last ACK, so that counts as
	 * delivered. (A TCP peer that left has no code: a reset is no proof.)
	 */
	if (!d->delivered && d->fin && wl_role.t->multistream && e->closed_by_peer &&
	    e->peer_error == 0) {
		d->delivered = true;
		d->r.t_complete = e->t_peer_closed;
	}
	if (d->delivered) {
		d->r.bytes = d->off;
		wl_role.t_transfer_done_ns = d->r.t_complete;
		wl_emit_dl("served", &d->r);
		atomic_fetch_add(&dl.downloads, 1);
	} else if (e->exit_code) {
		wl_role_fail_end(e);
	} else if (!d->sending && !d->req_len && !e->closed_by_transport && !e->peer_error) {
		/* it asked for nothing: not a download */
	} else if (!e->connected) {
		wl_role_fail(WL_EXIT_HANDSHAKE, "%s handshake on connection %llu failed: %s",
			     wl_role.label, (unsigned long long)d->r.i, wl_end_why(e));
	} else if (d->fin && d->off == wl_role.o->size && !wl_role.t->multistream) {
		wl_role_fail(
			WL_EXIT_CONN_LOST,
			"connection %llu: the client did not close cleanly after the %llu bytes (its check failed, or it went away)",
			(unsigned long long)d->r.i, (unsigned long long)d->off);
	} else {
		wl_role_fail(WL_EXIT_CONN_LOST,
			     "connection %llu ended after %llu of %llu bytes were sent: %s%s",
			     (unsigned long long)d->r.i, (unsigned long long)d->off,
			     (unsigned long long)wl_role.o->size, wl_end_why(e),
			     e->closed_by_peer && e->peer_error == WL_CLOSE_VERIFY
				     ? " (the client's content check failed)"
				     : "");
	}
	free(d);
	atomic_fetch_sub(&dl.live, 1);
	wl_loop_wake();
}

static const struct wl_conn_handlers server_conn = {
	.connected = wl_role_conn_up,
	.stream = server_stream,
	.closed = server_closed,
};

static const struct wl_conn_handlers *accept_conn(void *arg, struct wl_conn *c, void **ctx)
{
	struct dl *d;

	(void)arg;
	if (wl_role_stopping() || !(d = calloc(1, sizeof(*d))))
		return NULL;
	d->c = c;
	d->r.i = atomic_fetch_add(&dl.accepted, 1);
	atomic_fetch_add(&dl.live, 1);
	*ctx = d;
	return &server_conn;
}

static bool served_enough(void *arg)
{
	(void)arg;
	return wl_role_stopping() || atomic_load(&dl.downloads) >= wl_role.o->count;
}

static bool all_gone(void *arg)
{
	(void)arg;
	return atomic_load(&dl.live) == 0;
}

/* Serve downloads until --count are done, "stop", "exit" or a failure. */
static int dl_server(void)
{
	const struct wl_accept a = {
		.accept = accept_conn,
		.flags = WL_CONN_DEDICATED | WL_CONN_SENDER | WL_CONN_NODELAY,
		.peer_bidi_streams = 1,
	};

	return wl_role_serve(&a, served_enough, NULL, all_gone);
}

static void dl_json_mark(struct wl_json *j)
{
	wl_json_u64(j, "downloads", atomic_load(&dl.downloads));
}

static void dl_json_done(struct wl_json *j, int code)
{
	(void)code;
	wl_json_str(j, "pattern", "download");
	wl_json_u64(j, "downloads", atomic_load(&dl.downloads));
	wl_json_u64(j, "streams_completed", atomic_load(&dl.downloads));
}

const struct wl_pattern wl_download = {
	.name = "download",
	.exit_stops = true,
	.server = dl_server,
	.client = dl_client,
	.json_mark = dl_json_mark,
	.json_done = dl_json_done,
};
