// SPDX-License-Identifier: GPL-2.0-only
/* --app: which application layer goes over the stack's transport, and what it counted (wl_app.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wl_app.h"
#include "wl_role.h"

struct wl_app_counts wl_app;
const struct wl_transport *wl_app_lower;
char wl_app_authority[64];
static const char *app_name;

const struct wl_transport *wl_app_over(const struct wl_opts *o, const struct wl_transport *lower)
{
	struct wl_transport *t;

	if (!o->app)
		return lower;
	/* qprof_wl.c's rules allow each only over its stacks: h3 over msquic, h1 and h2 over TCP. */
	t = !strcmp(o->app, "h3") ? &wl_h3 : !strcmp(o->app, "h2") ? &wl_h2 : &wl_h1;
	wl_app_lower = lower;
	app_name = o->app;
	snprintf(wl_app_authority, sizeof(wl_app_authority), "%s:%u", o->addr, (unsigned)o->port);
	/* HTTP/2 multiplexes streams over TCP's one; the others have their transport's. */
	if (t != &wl_h2)
		t->multistream = lower->multistream;
	t->early_data = false;
	return t;
}

static void app_json(struct wl_json *j)
{
	wl_json_str(j, "app", app_name);
	wl_json_u64(j, "app_tx_messages", atomic_load(&wl_app.tx_messages));
	wl_json_u64(j, "app_rx_messages", atomic_load(&wl_app.rx_messages));
	wl_json_u64(j, "app_tx_framing_bytes", atomic_load(&wl_app.tx_framing));
	wl_json_u64(j, "app_rx_framing_bytes", atomic_load(&wl_app.rx_framing));
	wl_json_u64(j, "app_tx_body_bytes", atomic_load(&wl_app.tx_body));
	wl_json_u64(j, "app_rx_body_bytes", atomic_load(&wl_app.rx_body));
}

int wl_app_init(const struct wl_opts *o, bool server)
{
	return wl_app_lower->init(o, server);
}

int wl_app_setup(void)
{
	return wl_app_lower->setup ? wl_app_lower->setup() : 0;
}

void wl_app_listen_stop(void)
{
	wl_app_lower->listen_stop();
}

void wl_app_json_connected(struct wl_json *j)
{
	wl_app_lower->json_connected(j);
}

void wl_app_json_mark(struct wl_json *j)
{
	wl_app_lower->json_mark(j);
	app_json(j);
}

void wl_app_json_done(struct wl_json *j, const struct wl_end *last)
{
	wl_app_lower->json_done(j, last);
	app_json(j);
}

void wl_app_fini(void)
{
	wl_app_lower->fini();
}

void wl_app_refuse(const char *protocol, const char *why)
{
	if (!atomic_exchange(&wl_role.verify_failed, true))
		wl_role_fail(WL_EXIT_VERIFY, "%s from the %s: %s", protocol,
			     wl_role.server ? "client" : "server", why);
}

int wl_app_queue_push(struct wl_app_queue *q, const uint8_t *hdr, uint32_t hdr_len,
		      const uint8_t *body, uint32_t body_len, void *tag)
{
	struct wl_app_chunk *k;

	if (hdr_len > WL_HDR_MAX || !(k = malloc(sizeof(*k))))
		return -1;
	*k = (struct wl_app_chunk){
		.tag = tag, .body = body, .hdr_len = hdr_len, .len = hdr_len + body_len};
	if (hdr_len)
		memcpy(k->hdr, hdr, hdr_len);
	if (q->tail)
		q->tail->next = k;
	else
		q->head = k;
	q->tail = k;
	return 0;
}

struct wl_app_chunk *wl_app_queue_pop(struct wl_app_queue *q)
{
	struct wl_app_chunk *k = q->head;

	if (k && !(q->head = k->next))
		q->tail = NULL;
	return k;
}

uint32_t wl_app_queue_len(const struct wl_app_queue *q)
{
	uint32_t len = 0;

	for (const struct wl_app_chunk *k = q->head; k; k = k->next)
		len += k->len;
	return len;
}

const uint8_t *wl_app_chunk_piece(const struct wl_app_chunk *k, uint32_t off, uint32_t *n)
{
	if (off < k->hdr_len) {
		*n = k->hdr_len - off;
		return k->hdr + off;
	}
	*n = k->len - off;
	return k->body + (off - k->hdr_len);
}
