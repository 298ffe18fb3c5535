// SPDX-License-Identifier: GPL-2.0-only
/*
 * --app: an application protocol between a pattern and its transport.
 * Each is itself a struct wl_transport over the stack's own (HTTP/1.1
 * over TCP, plain or TLS: wl_h1.c; HTTP/2 over TCP: wl_h2.c, its streams
 * over TCP's one; HTTP/3 over msquic: wl_h3.c), so the
 * patterns do not change: a pattern's message (one rr request or
 * response, one wl_send) becomes one HTTP message whose body it is, and
 * what arrives is parsed and handed on as the body's bytes alone. A send with no bytes (a FIN alone) is no
 * message and passes straight through.
 *
 * The framing is done by the protocol's own library, never by hand:
 * http-parser (Debian's libhttp-parser, node's) for HTTP/1.1, nghttp2
 * (Debian's libnghttp2, with its HPACK) for HTTP/2, nghttp3 (Debian's
 * libnghttp3, with its QPACK) for HTTP/3.
 *
 * What the framing adds is counted apart from the pattern's bytes, per
 * side, so the record can split the bytes per request by layer: the
 * payload (the pattern's), the application's framing and headers (these
 * counters), and the rest (TLS records, transport headers, ACKs and
 * other control, handshakes), which is the wire's total less the two.
 */
#ifndef QPROF_WL_APP_H
#define QPROF_WL_APP_H

#include <stdatomic.h>

#include "wl_transport.h"

/* What the application layer moved, both ways, as marks and "done" report it. */
struct wl_app_counts {
	_Atomic uint64_t tx_messages, rx_messages; /* whole HTTP messages */
	_Atomic uint64_t tx_framing, rx_framing;   /* start lines, headers, frames */
	_Atomic uint64_t tx_body, rx_body;	   /* the pattern's bytes inside them */
};
extern struct wl_app_counts wl_app;

/* The transport o->app puts over lower (o->app NULL: lower itself). */
const struct wl_transport *wl_app_over(const struct wl_opts *o, const struct wl_transport *lower);

extern struct wl_transport wl_h1, wl_h2, wl_h3;
/* Set by wl_app_over before init: the transport each protocol runs over, and the peer's name. */
extern const struct wl_transport *wl_app_lower;
extern char wl_app_authority[64]; /* "ADDR:PORT": Host, :authority */

/*
 * What every layer's table shares: the lower transport's own step, and the
 * marks' and "done"'s fields, the lower's and then "app" with its counts.
 */
int wl_app_init(const struct wl_opts *o, bool server);
int wl_app_setup(void);
void wl_app_listen_stop(void);
void wl_app_json_connected(struct wl_json *j);
void wl_app_json_mark(struct wl_json *j);
void wl_app_json_done(struct wl_json *j, const struct wl_end *last);
void wl_app_fini(void);

/* The peer's bytes were not the protocol this side sends (exit 5), said once. */
void wl_app_refuse(const char *protocol, const char *why);

/*
 * A message the pattern handed over until the protocol's library has
 * taken it: its header copied (at most WL_HDR_MAX bytes), its body where
 * the pattern keeps it (the read-only region, alive for the whole run,
 * wl_transport.h), so a queue of 16 MiB messages costs no copies. Its tag
 * comes back to the pattern once taken, or canceled if the stream goes
 * first.
 */
struct wl_app_chunk {
	struct wl_app_chunk *next;
	void *tag;
	const uint8_t *body;
	uint32_t hdr_len, len, out, acked; /* out: handed to the library; acked: the peer has it */
	uint8_t hdr[WL_HDR_MAX];
};
struct wl_app_queue {
	struct wl_app_chunk *head, *tail;
};
/* hdr then body, appended; -1 out of memory or a header over WL_HDR_MAX. */
int wl_app_queue_push(struct wl_app_queue *q, const uint8_t *hdr, uint32_t hdr_len,
		      const uint8_t *body, uint32_t body_len, void *tag);
/* The oldest chunk, taken off (the caller frees it). */
struct wl_app_chunk *wl_app_queue_pop(struct wl_app_queue *q);
/* Bytes queued in all. */
uint32_t wl_app_queue_len(const struct wl_app_queue *q);
/* k's bytes from off on that lie in one piece (its header's or its body's), *n of them. */
const uint8_t *wl_app_chunk_piece(const struct wl_app_chunk *k, uint32_t off, uint32_t *n);

#endif
