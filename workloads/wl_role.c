// SPDX-License-Identifier: GPL-2.0-only
/*
 * The role: one run of a pattern over a transport. It picks both from the
 * flags, runs the control channel (marks, start, stop, exit) and writes
 * the events every pattern shares, each as the common fields, then the
 * pattern's, then the transport's.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "wl_app.h"
#include "wl_role.h"

struct wl_role wl_role = {.failure = WL_FAILURE_INIT};

const char *wl_end_why(const struct wl_end *e)
{
	return e->closed_by_transport ? e->transport_status
	       : e->closed_by_peer    ? "closed by peer"
				      : "closed locally";
}

int wl_send(struct wl_stream *s, const uint8_t *hdr, uint32_t hdr_len, const uint8_t *body,
	    uint32_t body_len, unsigned flags, void *tag)
{
	return wl_role.t->send(s, hdr, hdr_len, body, body_len, flags, tag);
}

size_t wl_room(struct wl_stream *s)
{
	return wl_role.t->room(s);
}

static void vfail(int code, bool stop, const char *fmt, va_list ap)
{
	struct wl_failure *f = &wl_role.failure;

	pthread_mutex_lock(&f->lock);
	if (!f->code) {
		f->code = code;
		vsnprintf(f->msg, sizeof(f->msg), fmt, ap);
		wl_warn("%s", f->msg);
	}
	pthread_mutex_unlock(&f->lock);
	if (stop)
		atomic_store(&wl_role.stopping, true);
	wl_loop_wake();
}

void wl_ignore(struct wl_stream *s, void *ctx)
{
	(void)s, (void)ctx;
}

void wl_role_conn_up(struct wl_conn *c, void *ctx)
{
	(void)c, (void)ctx;
	wl_role_connected(wl_now_ns());
}

void wl_ignore_closed(struct wl_stream *s, void *ctx, bool graceful)
{
	(void)s, (void)ctx, (void)graceful;
}

void wl_ignore_data(struct wl_stream *s, void *ctx, const uint8_t *p, size_t len)
{
	(void)s, (void)ctx, (void)p, (void)len;
}

void wl_role_fail(int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfail(code, true, fmt, ap);
	va_end(ap);
}

void wl_role_fail_later(int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfail(code, false, fmt, ap);
	va_end(ap);
}

void wl_role_fail_end(const struct wl_end *e)
{
	wl_role_fail(e->exit_code, "%s", e->transport_status ? e->transport_status : "");
}

void wl_role_fail_said(int code)
{
	struct wl_failure *f = &wl_role.failure;

	pthread_mutex_lock(&f->lock);
	if (!f->code) {
		f->code = code;
		snprintf(f->msg, sizeof(f->msg), "(said by the transport)");
	}
	pthread_mutex_unlock(&f->lock);
	atomic_store(&wl_role.stopping, true);
	wl_loop_wake();
}

void wl_role_connected(uint64_t t_ns)
{
	static _Atomic bool emitted;
	struct wl_json j;

	if (atomic_exchange(&emitted, true))
		return;
	wl_role.t_connected_ns = t_ns;
	atomic_store(&wl_role.connected, true);
	wl_json_begin(&j);
	wl_json_str(&j, "event", "connected");
	wl_json_u64(&j, "t_ns", t_ns);
	wl_role.t->json_connected(&j);
	wl_emit("%s", wl_json_end(&j));
}

int wl_role_listen(const struct wl_accept *a)
{
	int code = wl_role.t->listen(a);

	if (!code)
		wl_emit("{\"event\":\"ready\",\"port\":%d,\"pid\":%d}", wl_role.o->port, getpid());
	return code;
}

int wl_role_loop(bool (*done)(void *arg), void *arg)
{
	if (!wl_loop_run(done, arg))
		return 0;
	wl_role_fail(WL_EXIT_INTERNAL, "epoll_wait failed: %s", strerror(errno));
	return WL_EXIT_INTERNAL;
}

int wl_role_serve(const struct wl_accept *a, bool (*served)(void *arg), void (*wind_down)(void),
		  bool (*gone)(void *arg))
{
	int code = wl_role_listen(a);

	if (code)
		return code;
	wl_role_loop(served, NULL);
	atomic_store(&wl_role.stopping, true); /* refuse latecomers */
	wl_role.t->listen_stop();
	if (wind_down)
		wind_down();
	if (gone)
		wl_role_loop(gone, NULL);
	return wl_role.failure.code;
}

bool wl_role_wait_start(void)
{
	if (wl_role.o->wait_start)
		sem_wait(&wl_role.may_start);
	atomic_store(&wl_role.started, true);
	return !wl_role_stopping();
}

int wl_role_handshake_failed(const struct wl_end *e, const char *which)
{
	wl_role_fail(WL_EXIT_HANDSHAKE, "%s handshake with %s:%d failed%s: %s", wl_role.label,
		     wl_role.o->addr, wl_role.o->port, which,
		     e->closed_by_transport ? e->transport_status : "closed by peer");
	return WL_EXIT_HANDSHAKE;
}

void wl_role_verify_failed(uint64_t off, uint64_t idx, const char *key)
{
	if (atomic_exchange(&wl_role.verify_failed, true))
		return;
	wl_role.verify_fail_off = off;
	wl_role.verify_fail_idx = idx;
	wl_role.verify_fail_key = key;
}

/* A bulk receiver's bytes are its streams': one load gives both (wl.h says why). */
static uint64_t app_bytes(struct wl_stream_bytes *sb)
{
	if (wl_role.per_stream)
		return wl_stream_bytes_load(sb, wl_role.stream_bytes, &wl_role.streams_seen);
	return atomic_load(&wl_role.app_bytes);
}

static void on_mark(const char *name, void *arg)
{
	struct wl_stream_bytes sb;
	struct wl_json j;
	uint64_t t_ns, bytes, seq;

	(void)arg;
	t_ns = wl_json_mark(&j, name);
	do {
		seq = wl_seq_read_begin(&wl_role.counts_seq);
		bytes = app_bytes(&sb);
		if (wl_role.t->mark_snapshot)
			wl_role.t->mark_snapshot();
	} while (wl_seq_read_retry(&wl_role.counts_seq, seq));
	wl_json_u64(&j, "app_bytes", bytes);
	if (wl_role.p->json_mark)
		wl_role.p->json_mark(&j);
	if (wl_role.per_stream)
		wl_json_stream_bytes(&j, &sb);
	wl_role.t->json_mark(&j);
	wl_json_u64(&j, "read_ns", wl_now_ns() - t_ns);
	wl_emit("%s", wl_json_end(&j));
}

static void on_start(void *arg)
{
	(void)arg;
	sem_post(&wl_role.may_start);
}

static void stop(void)
{
	atomic_store(&wl_role.stopping, true);
	if (wl_role.p->stop)
		wl_role.p->stop();
	wl_loop_wake();
}

static void on_stop(void *arg)
{
	(void)arg;
	stop();
}

static void on_exit_cmd(void *arg)
{
	const struct wl_pattern *p = wl_role.p;

	(void)arg;
	/*
	 * A download or rr role runs until told; a bulk role is done already;
	 * a client still waiting for "start" never starts (wl_role.h).
	 */
	if (p->exit_stops || (p->exit_stops_server && wl_role.server) ||
	    (!wl_role.server && wl_role.o->wait_start && !atomic_load(&wl_role.started)))
		stop();
	if (!wl_role.server)
		sem_post(&wl_role.may_start);
	sem_post(&wl_role.may_exit);
}

static const struct wl_control_ops control_ops = {
	.mark = on_mark,
	.start = on_start,
	.stop = on_stop,
	.exit = on_exit_cmd,
};

/* The receiver checks what it gets: the pattern says which role that is. */
static bool receiver(void)
{
	return wl_role.p->checks && wl_role.p->checks();
}

static void emit_done(int code)
{
	struct wl_stream_bytes sb;
	struct wl_json j;
	uint64_t bytes = app_bytes(&sb);

	wl_json_begin(&j);
	wl_json_str(&j, "event", "done");
	wl_json_str(&j, "role", wl_role.server ? "server" : "client");
	wl_json_u64(&j, "exit_code", code);
	wl_json_u64(&j, "t_ns", wl_now_ns());
	wl_json_u64(&j, "t_connected_ns", wl_role.t_connected_ns);
	wl_json_u64(&j, "t_transfer_done_ns", wl_role.t_transfer_done_ns);
	wl_json_u64(&j, "app_bytes", bytes);
	wl_role.p->json_done(&j, code);
	if (wl_role.per_stream)
		wl_json_stream_bytes(&j, &sb);
	if (receiver()) {
		const bool failed = atomic_load(&wl_role.verify_failed);

		wl_json_bool(&j, "verified", code == WL_EXIT_OK && !failed);
		if (failed && wl_role.verify_fail_key) {
			wl_json_u64(&j, "verify_fail_offset", wl_role.verify_fail_off);
			wl_json_u64(&j, wl_role.verify_fail_key, wl_role.verify_fail_idx);
		}
	}
	wl_role.t->json_done(&j, &wl_role.end);
	wl_emit("%s", wl_json_end(&j));
}

/* The stacks built in; any other is a QUIC library's transport that wl_plugin loads. */
static const struct stack {
	const char *name, *label;
	const struct wl_transport *t;
} stacks[] = {
	{"quic", "QUIC", &wl_quic},  {"ngtcp2", "QUIC", &wl_ngtcp2}, {"tcp", "TCP", &wl_tcp},
	{"tcp-tls", "TLS", &wl_tcp}, {"tcp-ktls", "TLS", &wl_tcp},
};

/* The patterns WL_PATTERN entered, between the linker's bounds of their section. */
extern const struct wl_pattern *const __start_wl_patterns[], *const __stop_wl_patterns[];

const struct wl_pattern *wl_pattern_named(const char *name)
{
	for (const struct wl_pattern *const *p = __start_wl_patterns; p < __stop_wl_patterns; p++)
		if (!strcmp((*p)->name, name))
			return *p;
	return NULL;
}

const char *wl_pattern_words(char *buf, size_t len)
{
	size_t k = 0;

	buf[0] = 0;
	/* Once the words fill buf, the last is cut short and the rest left out. */
	for (const struct wl_pattern *const *p = __start_wl_patterns;
	     p < __stop_wl_patterns && k < len; p++)
		k += (size_t)snprintf(buf + k, len - k, "%s%s", k ? "|" : "", (*p)->name);
	return buf;
}

int wl_one_stream(const struct wl_opts *o)
{
	if (o->streams == 1)
		return 0;
	wl_warn("--streams is for --pattern bulk and rr --rr-mode closed: a download, or an open loop's request, goes on one stream");
	return WL_EXIT_USAGE;
}

int wl_timed_client(const struct wl_opts *o)
{
	if (o->duration_ms || o->count || o->control)
		return 0;
	wl_warn("--pattern %s: the client needs --duration-ms (or --count, closed), or --control to go on until \"stop\"",
		o->pattern);
	return WL_EXIT_USAGE;
}

int wl_role_run(const struct wl_opts *o)
{
	int code;

	wl_role.o = o;
	wl_role.server = !strcmp(o->role, "server");
	/* udp: its datagram pattern alone (qprof_wl.c refuses download and rr there). */
	if (!strcmp(o->stack, "udp")) {
		wl_role.t = &wl_udp;
		wl_role.label = "UDP";
		wl_role.p = &wl_udp_bulk;
	} else {
		const struct stack *st = NULL;
		const struct wl_transport *t;

		for (size_t i = 0; i < sizeof(stacks) / sizeof(stacks[0]) && !st; i++)
			if (!strcmp(stacks[i].name, o->stack))
				st = &stacks[i];
		t = st ? st->t : wl_plugin(o->stack);
		if (!t)
			return WL_EXIT_LIB_OPEN;
		wl_role.t = wl_app_over(o, t);
		wl_role.label = st ? st->label : "QUIC";
		wl_role.p = wl_pattern_named(o->pattern);
		if (!wl_role.p) {
			wl_warn("--pattern %s is not built into this qprof-wl", o->pattern);
			return WL_EXIT_USAGE;
		}
	}
	sem_init(&wl_role.may_start, 0, 0);
	sem_init(&wl_role.may_exit, 0, 0);
	if (wl_loop_init()) {
		wl_warn("cannot set up the event loop: %s", strerror(errno));
		return WL_EXIT_INTERNAL;
	}
	code = wl_role.t->init(o, wl_role.server);
	if (code)
		return code;
	/* Control first: whoever waits on us must hear even a setup failure. */
	if (o->control && wl_control_start(&control_ops)) {
		wl_warn("cannot start the control thread");
		return WL_EXIT_INTERNAL;
	}
	code = wl_role.t->setup ? wl_role.t->setup() : 0;
	if (!code)
		code = wl_role.server ? wl_role.p->server() : wl_role.p->client();
	emit_done(code);
	/* The caller reads our CPU use before it lets us go. */
	if (o->control)
		sem_wait(&wl_role.may_exit);
	wl_role.t->fini();
	return code;
}
