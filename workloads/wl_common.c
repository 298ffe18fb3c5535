// SPDX-License-Identifier: GPL-2.0-only
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>

#include <openssl/evp.h>

#include "wl.h"

static uint8_t *pattern;
static uint64_t pattern_mask; /* period - 1; the period is a power of two */

static inline uint64_t pat_word(uint64_t aligned_off, uint64_t mask)
{
	return (aligned_off & mask) ^ WL_PAT_SEED;
}

void wl_pattern_init(uint32_t io_size)
{
	uint64_t period = io_size > WL_PAT_PERIOD_MIN ? io_size : WL_PAT_PERIOD_MIN, i;

	pattern_mask = period - 1;
	pattern = aligned_alloc(4096, period);
	if (!pattern)
		abort();
	for (i = 0; i < period; i += 8) {
		uint64_t w = pat_word(i, pattern_mask);
		memcpy(pattern + i, &w, 8);
	}
}

uint32_t wl_pattern_period(void)
{
	return (uint32_t)(pattern_mask + 1);
}

const uint8_t *wl_pattern_region(void)
{
	return pattern;
}

static inline uint8_t pat_byte(uint64_t off, uint64_t mask)
{
	return (uint8_t)(pat_word(off & ~7ull, mask) >> (8 * (off & 7)));
}

__attribute__((target_clones("avx2", "default"))) bool wl_pattern_check(uint64_t off,
									const uint8_t *p,
									size_t len)
{
	const uint64_t mask = pattern_mask;
	uint64_t bad = 0;
	size_t i, words;

	while (len && (off & 7)) {
		if (*p != pat_byte(off, mask))
			return false;
		p++, off++, len--;
	}
	words = len / 8;
	/* One OR-reduction over the whole buffer so the loop vectorises. */
	for (i = 0; i < words; i++) {
		uint64_t w;
		memcpy(&w, p + 8 * i, 8);
		bad |= w ^ pat_word(off + 8 * i, mask);
	}
	if (bad)
		return false;
	p += 8 * words, off += 8 * words, len -= 8 * words;
	for (; len; p++, off++, len--)
		if (*p != pat_byte(off, mask))
			return false;
	return true;
}

void wl_put_le64(uint8_t *p, uint64_t v)
{
	int i;

	for (i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

uint64_t wl_get_le64(const uint8_t *p)
{
	uint64_t v = 0;
	int i;

	for (i = 0; i < 8; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

void wl_put_be64(uint8_t *p, uint64_t v)
{
	int i;

	for (i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (56 - 8 * i));
}

uint64_t wl_get_be64(const uint8_t *p)
{
	uint64_t v = 0;
	int i;

	for (i = 0; i < 8; i++)
		v = v << 8 | p[i];
	return v;
}

uint64_t wl_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int wl_timer_open(void)
{
	return timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
}

int wl_timer_arm(int fd, uint64_t t_ns)
{
	struct itimerspec its = {0};

	/* 0 would disarm it. */
	if (!t_ns)
		t_ns = 1;
	its.it_value.tv_sec = (time_t)(t_ns / 1000000000ull);
	its.it_value.tv_nsec = (long)(t_ns % 1000000000ull);
	return timerfd_settime(fd, TFD_TIMER_ABSTIME, &its, NULL);
}

static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;

/* wl_emit_packed's records, under out_lock: one event at a time. */
static struct {
	uint8_t buf[WL_DEFER_BYTES];
	size_t len;
	const char *event, *fields;
	uint64_t t_first; /* when the oldest waiting record came */
} deferred;

static void defer_flush_locked(void)
{
	static char b64[4 * ((WL_DEFER_BYTES + 2) / 3) + 1];

	if (!deferred.len)
		return;
	EVP_EncodeBlock((unsigned char *)b64, deferred.buf, (int)deferred.len);
	fprintf(stdout, "{\"event\":\"%s_batch\",\"fields\":\"%s\",\"b64\":\"%s\"}\n",
		deferred.event, deferred.fields, b64);
	fflush(stdout);
	deferred.len = 0;
}

void wl_emit_packed(const char *event, const char *fields, const uint64_t *v, unsigned n)
{
	const size_t bytes = (size_t)n * 8;
	uint64_t now = wl_now_ns();
	unsigned i;

	pthread_mutex_lock(&out_lock);
	if (deferred.len &&
	    (deferred.event != event || deferred.len + bytes > sizeof(deferred.buf)))
		defer_flush_locked();
	if (!deferred.len) {
		deferred.t_first = now;
		deferred.event = event;
		deferred.fields = fields;
	}
	for (i = 0; i < n; i++, deferred.len += 8)
		wl_put_le64(deferred.buf + deferred.len, v[i]);
	if (deferred.len + bytes > sizeof(deferred.buf) || now - deferred.t_first >= WL_DEFER_NS)
		defer_flush_locked();
	pthread_mutex_unlock(&out_lock);
}

void wl_emit_tick(void)
{
	pthread_mutex_lock(&out_lock);
	if (deferred.len && wl_now_ns() - deferred.t_first >= WL_DEFER_NS)
		defer_flush_locked();
	pthread_mutex_unlock(&out_lock);
}

void wl_emit(const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&out_lock);
	defer_flush_locked();
	va_start(ap, fmt);
	vfprintf(stdout, fmt, ap);
	va_end(ap);
	fputc('\n', stdout);
	fflush(stdout);
	pthread_mutex_unlock(&out_lock);
}

void wl_warn(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("qprof-wl: ", stderr);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static void *control_main(void *p)
{
	const struct wl_control_ops *ops = p;
	char line[256];

	while (fgets(line, sizeof(line), stdin)) {
		char name[64];

		if (sscanf(line, "mark %63s", name) == 1)
			ops->mark(name, ops->arg);
		else if (!strcmp(line, "start\n"))
			ops->start(ops->arg);
		else if (!strcmp(line, "stop\n"))
			ops->stop(ops->arg);
		else if (!strcmp(line, "exit\n"))
			break;
		else
			wl_warn("ignoring control line: %s", line);
	}
	ops->exit(ops->arg);
	return NULL;
}

int wl_control_start(const struct wl_control_ops *ops)
{
	pthread_t t;
	int err;

	err = pthread_create(&t, NULL, control_main, (void *)ops);
	if (err)
		return -err;
	pthread_setname_np(t, "wl-control");
	pthread_detach(t);
	return 0;
}

/* Appends to the object; an object that would overflow is cut short and
 * later appends are dropped, so the buffer is never overrun. */
static void json_put(struct wl_json *j, const char *fmt, ...)
{
	size_t room = sizeof(j->buf) - j->len;
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(j->buf + j->len, room, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= room)
		j->len = sizeof(j->buf) - 1;
	else
		j->len += (size_t)n;
}

static void json_key(struct wl_json *j, const char *key)
{
	json_put(j, "%s\"%s\":", j->first ? "" : ",", key);
	j->first = false;
}

void wl_json_begin(struct wl_json *j)
{
	j->len = 0;
	j->first = true;
	json_put(j, "{");
}

void wl_json_u64(struct wl_json *j, const char *key, uint64_t v)
{
	json_key(j, key);
	json_put(j, "%llu", (unsigned long long)v);
}

void wl_json_str(struct wl_json *j, const char *key, const char *v)
{
	json_key(j, key);
	/* Values are identifiers and status names written by this program. */
	json_put(j, "\"%s\"", v);
}

void wl_json_bool(struct wl_json *j, const char *key, bool v)
{
	json_key(j, key);
	json_put(j, "%s", v ? "true" : "false");
}

void wl_json_raw(struct wl_json *j, const char *key, const char *raw)
{
	json_key(j, key);
	json_put(j, "%s", raw);
}

const char *wl_json_end(struct wl_json *j)
{
	json_put(j, "}");
	return j->buf;
}

uint64_t wl_json_mark(struct wl_json *j, const char *name)
{
	uint64_t t_ns = wl_now_ns();

	wl_json_begin(j);
	wl_json_str(j, "event", "mark");
	wl_json_str(j, "name", name);
	wl_json_u64(j, "t_ns", t_ns);
	return t_ns;
}

uint64_t wl_stream_bytes_load(struct wl_stream_bytes *s, const _Atomic uint64_t *v,
			      const _Atomic int *n)
{
	uint64_t sum = 0;
	int i;

	s->n = atomic_load(n);
	if (s->n > WL_MAX_STREAMS)
		s->n = WL_MAX_STREAMS;
	for (i = 0; i < s->n; i++) {
		s->v[i] = atomic_load_explicit(&v[i], memory_order_relaxed);
		sum += s->v[i];
	}
	return sum;
}

void wl_json_stream_bytes(struct wl_json *j, const struct wl_stream_bytes *s)
{
	int i;

	json_key(j, "stream_bytes");
	json_put(j, "[");
	for (i = 0; i < s->n; i++)
		json_put(j, "%s%llu", i ? "," : "", (unsigned long long)s->v[i]);
	json_put(j, "]");
}

static void json_since(struct wl_json *j, const char *key, uint64_t t0, uint64_t t)
{
	if (t0 && t)
		wl_json_u64(j, key, t - t0);
}

void wl_emit_dl(const char *event, const struct wl_dl *d)
{
	struct wl_json j;

	wl_json_begin(&j);
	wl_json_str(&j, "event", event);
	wl_json_u64(&j, "i", d->i);
	wl_json_u64(&j, "bytes", d->bytes);
	if (d->t_connect)
		wl_json_u64(&j, "t_connect_ns", d->t_connect);
	json_since(&j, "tcp_handshake_ns", d->t_connect, d->t_tcp);
	json_since(&j, "handshake_ns", d->t_connect, d->t_handshake);
	json_since(&j, "first_byte_ns", d->t_connect, d->t_first_byte);
	json_since(&j, "complete_ns", d->t_connect, d->t_complete);
	if (d->has_resumed)
		wl_json_bool(&j, "resumed", d->resumed);
	if (d->has_early)
		wl_json_bool(&j, "early_data", d->early_data);
	if (d->has_counters) {
		if (!d->no_retransmits)
			wl_json_u64(&j, "retransmits", d->retransmits);
		if (d->has_lost)
			wl_json_u64(&j, "lost_packets", d->lost_packets);
		wl_json_u64(&j, "packets_sent", d->packets_sent);
		wl_json_u64(&j, "packets_received", d->packets_received);
	}
	wl_emit("%s", wl_json_end(&j));
}

int wl_bind(int fd, const struct sockaddr_in *a, const char *proto, const struct wl_opts *o)
{
	if (!bind(fd, (const struct sockaddr *)a, sizeof(*a)))
		return 0;
	if (errno == EADDRINUSE) {
		wl_warn("%s port %s:%d is already in use", proto, o->addr, o->port);
		return WL_EXIT_ADDR_IN_USE;
	}
	wl_warn("bind %s:%d failed: %s", o->addr, o->port, strerror(errno));
	return WL_EXIT_INTERNAL;
}
