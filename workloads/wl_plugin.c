// SPDX-License-Identifier: GPL-2.0-only
/*
 * A transport that lives in a library of its own, loaded when its stack
 * runs: build/lib/libqprof-wl-STACK.so beside this program's bin/, whose
 * symbol wl_STACK (a '-' of the stack's name a '_': wl_quic_go for
 * quic-go) is its struct wl_transport. What such a library links
 * (quiche's BoringSSL beside qprof-wl's OpenSSL) stays inside it; its
 * calls into qprof-wl (the loop, the reports: wl_transport.h, wl.h)
 * resolve against this program, which exports them (-rdynamic).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "wl_transport.h"
#include "wl_udpio.h"

const struct wl_transport *wl_plugin(const char *stack)
{
	char exe[PATH_MAX], path[PATH_MAX + 64], sym[64];
	const struct wl_transport *t;
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	char *slash;
	void *h;

	if (n <= 0) {
		wl_warn("cannot find this program's path to load --stack %s's transport", stack);
		return NULL;
	}
	exe[n] = 0;
	slash = strrchr(exe, '/');
	if (slash)
		*slash = 0;
	snprintf(path, sizeof(path), "%s/../lib/libqprof-wl-%s.so", exe, stack);
	h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		wl_warn("cannot load --stack %s's transport: %s; run make build", stack, dlerror());
		return NULL;
	}
	snprintf(sym, sizeof(sym), "wl_%s", stack);
	for (slash = sym; *slash; slash++)
		if (*slash == '-')
			*slash = '_';
	t = dlsym(h, sym);
	if (!t)
		wl_warn("%s has no %s: %s", path, sym, dlerror());
	return t;
}

/*
 * A plugin written in another language mirrors these structures
 * (workloads/rs/wlffi): their sizes as this program was built, so that it
 * can refuse to run against another layout; 0 for a name it does not know.
 */
size_t wl_abi_size(const char *what)
{
	static const struct {
		const char *name;
		size_t size;
	} sizes[] = {
		{"wl_json", sizeof(struct wl_json)},
		{"wl_opts", sizeof(struct wl_opts)},
		{"wl_end", sizeof(struct wl_end)},
		{"wl_dl", sizeof(struct wl_dl)},
		{"wl_stream_handlers", sizeof(struct wl_stream_handlers)},
		{"wl_conn_handlers", sizeof(struct wl_conn_handlers)},
		{"wl_accept", sizeof(struct wl_accept)},
		{"wl_transport", sizeof(struct wl_transport)},
		{"wl_udp_io", sizeof(struct wl_udp_io)},
		{"sockaddr_in", sizeof(struct sockaddr_in)},
	};
	size_t i;

	for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		if (!strcmp(sizes[i].name, what))
			return sizes[i].size;
	return 0;
}
