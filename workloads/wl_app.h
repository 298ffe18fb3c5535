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

/* The application fields of a mark and of "done": "app" and its counts. */
void wl_app_json(struct wl_json *j, const char *name);

extern struct wl_transport wl_h1, wl_h2, wl_h3;
/* Set by wl_app_over before init: the transport each protocol runs over. */
extern const struct wl_transport *wl_app_lower;

#endif
