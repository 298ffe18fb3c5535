// SPDX-License-Identifier: GPL-2.0-only
/*
 * --pattern rr, the part every stack shares: the schedule's arithmetic and
 * timer, the message (wl.h says its layout) and its check, the client's
 * account of each answer, and the counters marks and reports give. The
 * stacks (wl_quic.c, wl_tcp.c) move the bytes.
 */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <time.h>

#include "wl.h"

struct wl_rr wl_rr;

void wl_rr_init(const struct wl_opts *o)
{
	wl_rr.payload = o->payload;
	wl_rr.period_ns = o->period_us * 1000;
}

uint64_t wl_rr_drain_ns(void)
{
	uint64_t periods = WL_RR_DRAIN_PERIODS * wl_rr.period_ns;

	return periods > WL_RR_DRAIN_MIN_NS ? periods : WL_RR_DRAIN_MIN_NS;
}

void wl_rr_put_seq(uint8_t *hdr, uint64_t seq)
{
	int i;

	for (i = 0; i < WL_RR_HDR; i++)
		hdr[i] = (uint8_t)(seq >> (8 * i));
}

uint64_t wl_rr_seq(const uint8_t *hdr)
{
	uint64_t seq = 0;
	int i;

	for (i = 0; i < WL_RR_HDR; i++)
		seq |= (uint64_t)hdr[i] << (8 * i);
	return seq;
}

const uint8_t *wl_rr_body(void)
{
	return wl_pattern_region() + wl_rr.payload + WL_RR_HDR;
}

size_t wl_rr_rx_feed(struct wl_rr_rx *m, const uint8_t *p, size_t len)
{
	size_t n = wl_rr.payload - m->got, h = 0;

	if (n > len)
		n = len;
	if (m->got < WL_RR_HDR) {
		h = WL_RR_HDR - m->got < n ? WL_RR_HDR - m->got : n;
		memcpy(m->hdr + m->got, p, h);
	}
	if (n > h && !wl_pattern_check(wl_rr.payload + m->got + h, p + h, n - h))
		m->bad = true;
	m->got += (uint32_t)n;
	return n;
}

int wl_rr_fifo_push(struct wl_rr_fifo *f, uint64_t seq)
{
	if (f->len == f->cap) {
		uint32_t cap = f->cap ? 2 * f->cap : 16, i;
		struct wl_rr_req *v = malloc(cap * sizeof(*v));

		if (!v || cap < f->cap) {
			free(v);
			return -1;
		}
		for (i = 0; i < f->len; i++)
			v[i] = *wl_rr_fifo_at(f, i);
		free(f->v);
		f->v = v;
		f->cap = cap;
		f->head = 0;
	}
	f->v[(f->head + f->len) & (f->cap - 1)] = (struct wl_rr_req){.seq = seq};
	f->len++;
	return 0;
}

void wl_rr_fifo_pop(struct wl_rr_fifo *f)
{
	f->head = (f->head + 1) & (f->cap - 1);
	f->len--;
}

void wl_rr_fifo_free(struct wl_rr_fifo *f)
{
	free(f->v);
	*f = (struct wl_rr_fifo){0};
}

int wl_rr_answer(const struct wl_rr_req *req, const struct wl_rr_rx *m, uint64_t t_ns,
		 uint64_t conn, char *why, size_t why_len)
{
	uint64_t seq = wl_rr_seq(m->hdr), due;

	if (!req) {
		snprintf(why, why_len,
			 "a response (sequence number %llu) came with no request waiting for it",
			 (unsigned long long)seq);
		return WL_EXIT_VERIFY;
	}
	if (seq != req->seq) {
		snprintf(
			why, why_len,
			"the response to request %llu carries sequence number %llu: answers are matched to the wrong requests",
			(unsigned long long)req->seq, (unsigned long long)seq);
		return WL_EXIT_VERIFY;
	}
	if (m->bad) {
		snprintf(
			why, why_len,
			"the response to request %llu failed the content check (is --payload the same on both roles?)",
			(unsigned long long)req->seq);
		return WL_EXIT_VERIFY;
	}
	due = wl_rr_due(req->seq);
	wl_emit_defer(
		"{\"event\":\"rr\",\"seq\":%llu,\"due_ns\":%llu,\"sent_ns\":%llu,\"answered_ns\":%llu,\"conn\":%llu}",
		(unsigned long long)req->seq, (unsigned long long)due,
		(unsigned long long)req->sent_ns, (unsigned long long)t_ns,
		(unsigned long long)conn);
	if (t_ns > due + wl_rr.period_ns)
		atomic_fetch_add(&wl_rr.late, 1);
	atomic_store(&wl_rr.t_last_answer, t_ns);
	atomic_fetch_add(&wl_rr.responses, 1);
	return 0;
}

int wl_rr_timer_open(void)
{
	return timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
}

int wl_rr_timer_arm(int fd, uint64_t t_ns)
{
	struct itimerspec its = {0};

	/* 0 would disarm it: a time already past fires at once. */
	if (!t_ns)
		t_ns = 1;
	its.it_value.tv_sec = (time_t)(t_ns / 1000000000ull);
	its.it_value.tv_nsec = (long)(t_ns % 1000000000ull);
	return timerfd_settime(fd, TFD_TIMER_ABSTIME, &its, NULL);
}

void wl_rr_json_mark(struct wl_json *j, bool server)
{
	if (server) {
		wl_json_u64(j, "requests", atomic_load(&wl_rr.served));
		return;
	}
	wl_json_u64(j, "requests", atomic_load(&wl_rr.sent));
	wl_json_u64(j, "responses", atomic_load(&wl_rr.responses));
}

void wl_rr_json_done(struct wl_json *j, bool server)
{
	uint64_t sent = atomic_load(&wl_rr.sent), responses = atomic_load(&wl_rr.responses);

	wl_json_str(j, "pattern", "rr");
	wl_json_u64(j, "payload", wl_rr.payload);
	if (server) {
		wl_json_u64(j, "requests_served", atomic_load(&wl_rr.served));
		wl_json_u64(j, "connections_accepted", atomic_load(&wl_rr.connections));
		return;
	}
	wl_json_u64(j, "period_us", wl_rr.period_ns / 1000);
	wl_json_u64(j, "requests_due", atomic_load(&wl_rr.due));
	wl_json_u64(j, "requests_sent", sent);
	wl_json_u64(j, "responses", responses);
	wl_json_u64(j, "late", atomic_load(&wl_rr.late));
	wl_json_u64(j, "outstanding", sent - responses);
	wl_json_u64(j, "connections_opened", atomic_load(&wl_rr.connections));
}
