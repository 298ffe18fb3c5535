/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * What transport.go's Go needs of C: qprof-wl's interface
 * (wl_transport.h, whose calls resolve against qprof-wl when it loads
 * this library), the opaque objects as this transport keeps them (a
 * cgo.Handle of the Go object: C holds no Go pointer), and calls of the
 * pattern's handlers, which Go cannot make through a C function pointer.
 */
#ifndef WL_QUIC_GO_H
#define WL_QUIC_GO_H

#include <stdlib.h>

#include "wl_transport.h"

struct wl_conn {
	uintptr_t h;
};
struct wl_stream {
	uintptr_t h;
};

static inline void wlg_warn(const char *s)
{
	wl_warn("%s", s);
}

/*
 * The pattern's pointers (ctx, tag) go to Go as integers: Go's stack
 * copier refuses a pointer-typed value it cannot account for (a small
 * integer tag), and these are never Go's to follow.
 */
static inline const struct wl_conn_handlers *wlg_accept(const struct wl_accept *a,
							struct wl_conn *c, uintptr_t *ctx)
{
	void *p = NULL;
	const struct wl_conn_handlers *h = a->accept(a->arg, c, &p);

	*ctx = (uintptr_t)p;
	return h;
}

static inline void wlg_connected(const struct wl_conn_handlers *h, struct wl_conn *c, uintptr_t ctx)
{
	h->connected(c, (void *)ctx);
}

static inline const struct wl_stream_handlers *wlg_stream(const struct wl_conn_handlers *h,
							  struct wl_conn *c, uintptr_t ctx,
							  struct wl_stream *s, uintptr_t *sctx)
{
	void *p = NULL;
	const struct wl_stream_handlers *sh = h->stream(c, (void *)ctx, s, &p);

	*sctx = (uintptr_t)p;
	return sh;
}

static inline void wlg_conn_closed(const struct wl_conn_handlers *h, struct wl_conn *c,
				   uintptr_t ctx, const struct wl_end *e)
{
	h->closed(c, (void *)ctx, e);
}

static inline void wlg_writable(const struct wl_stream_handlers *h, struct wl_stream *s,
				uintptr_t ctx)
{
	h->writable(s, (void *)ctx);
}

static inline void wlg_data(const struct wl_stream_handlers *h, struct wl_stream *s, uintptr_t ctx,
			    const uint8_t *p, size_t len)
{
	h->data(s, (void *)ctx, p, len);
}

static inline void wlg_fin(const struct wl_stream_handlers *h, struct wl_stream *s, uintptr_t ctx)
{
	h->fin(s, (void *)ctx);
}

static inline void wlg_aborted(const struct wl_stream_handlers *h, struct wl_stream *s,
			       uintptr_t ctx)
{
	h->aborted(s, (void *)ctx);
}

static inline void wlg_sent(const struct wl_stream_handlers *h, struct wl_stream *s, uintptr_t ctx,
			    uintptr_t tag, bool canceled)
{
	if (h->sent)
		h->sent(s, (void *)ctx, (void *)tag, canceled);
}

static inline void wlg_stream_closed(const struct wl_stream_handlers *h, struct wl_stream *s,
				     uintptr_t ctx, bool graceful)
{
	h->closed(s, (void *)ctx, graceful);
}

#endif
