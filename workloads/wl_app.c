// SPDX-License-Identifier: GPL-2.0-only
/* --app: which application layer goes over the stack's transport, and what it counted (wl_app.h). */
#include <string.h>

#include "wl_app.h"

struct wl_app_counts wl_app;
const struct wl_transport *wl_app_lower;

const struct wl_transport *wl_app_over(const struct wl_opts *o, const struct wl_transport *lower)
{
	struct wl_transport *t;

	if (!o->app)
		return lower;
	/* qprof_wl.c's rules allow each only over its stacks: h3 over msquic, h1 and h2 over TCP. */
	t = !strcmp(o->app, "h3") ? &wl_h3 : !strcmp(o->app, "h2") ? &wl_h2 : &wl_h1;
	wl_app_lower = lower;
	/* HTTP/2 multiplexes streams over TCP's one; the others have their transport's. */
	if (t != &wl_h2)
		t->multistream = lower->multistream;
	t->early_data = false;
	return t;
}

void wl_app_json(struct wl_json *j, const char *name)
{
	wl_json_str(j, "app", name);
	wl_json_u64(j, "app_tx_messages", atomic_load(&wl_app.tx_messages));
	wl_json_u64(j, "app_rx_messages", atomic_load(&wl_app.rx_messages));
	wl_json_u64(j, "app_tx_framing_bytes", atomic_load(&wl_app.tx_framing));
	wl_json_u64(j, "app_rx_framing_bytes", atomic_load(&wl_app.rx_framing));
	wl_json_u64(j, "app_tx_body_bytes", atomic_load(&wl_app.tx_body));
	wl_json_u64(j, "app_rx_body_bytes", atomic_load(&wl_app.rx_body));
}
