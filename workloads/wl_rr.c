// SPDX-License-Identifier: GPL-2.0-only
/*
 * --pattern rr, the part every stack shares: the client's open-loop
 * schedule, the message (wl.h says its layout) and its check, the client's
 * account of each answer, and the counters marks and reports give. The
 * stacks (wl_quic.c, wl_tcp.c) move the bytes.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wl.h"

struct wl_rr wl_rr;

void wl_rr_init(const struct wl_opts *o)
{
	const bool server = !strcmp(o->role, "server");

	wl_rr.request = o->request ? o->request : o->payload;
	wl_rr.response = o->response ? o->response : o->payload;
	wl_rr.rx_size = server ? wl_rr.request : wl_rr.response;
	wl_rr.tx_size = server ? wl_rr.response : wl_rr.request;
	wl_rr.closed = o->rr_closed;
	wl_rr.period_ns = o->rr_closed ? 0 : o->period_us * 1000;
}

uint64_t wl_rr_drain_ns(void)
{
	uint64_t periods = WL_RR_DRAIN_PERIODS * wl_rr.period_ns;

	return periods > WL_RR_DRAIN_MIN_NS ? periods : WL_RR_DRAIN_MIN_NS;
}

const uint8_t *wl_rr_body(uint32_t size)
{
	return wl_pattern_region() + size + WL_RR_HDR;
}

size_t wl_rr_rx_feed(struct wl_rr_rx *m, const uint8_t *p, size_t len)
{
	size_t n = wl_rr.rx_size - m->got, h = 0;

	if (n > len)
		n = len;
	if (m->got < WL_RR_HDR) {
		h = WL_RR_HDR - m->got < n ? WL_RR_HDR - m->got : n;
		memcpy(m->hdr + m->got, p, h);
	}
	if (n > h && !wl_pattern_check(wl_rr.rx_size + m->got + h, p + h, n - h))
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
	uint64_t seq = wl_get_le64(m->hdr), due;

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
			"the response to request %llu failed the content check (are --request and --response the same on both roles?)",
			(unsigned long long)req->seq);
		return WL_EXIT_VERIFY;
	}
	due = wl_rr.closed ? req->sent_ns : wl_rr_due(req->seq);
	wl_emit_packed("rr", "seq,due_ns,sent_ns,answered_ns,conn",
		       (const uint64_t[]){req->seq, due, req->sent_ns, t_ns, conn}, 5);
	if (!wl_rr.closed && t_ns > due + wl_rr.period_ns)
		atomic_fetch_add(&wl_rr.late, 1);
	atomic_store(&wl_rr.t_last_answer, t_ns);
	atomic_fetch_add(&wl_rr.responses, 1);
	return 0;
}

int wl_rr_sched_open(struct wl_rr_sched *s)
{
	*s = (struct wl_rr_sched){.phase = WL_RR_WAIT_CONN};
	s->timer = wl_timer_open();
	return s->timer < 0 ? -1 : 0;
}

void wl_rr_sched_close(struct wl_rr_sched *s)
{
	if (s->timer >= 0)
		close(s->timer);
	s->timer = -1;
}

int wl_rr_sched_start(struct wl_rr_sched *s, uint64_t duration_ms)
{
	wl_rr.t0_ns = wl_now_ns();
	if (duration_ms)
		s->t_end = wl_rr.t0_ns + duration_ms * 1000000ull;
	s->phase = WL_RR_SENDING;
	if (wl_rr.closed) /* answers send the requests; the timer says when to stop */
		return s->t_end ? wl_timer_arm(s->timer, s->t_end) : 0;
	return wl_timer_arm(s->timer, wl_rr.t0_ns);
}

/* The timer, idle from now on, wakes the loop at the drain's end. */
static int sched_drain(struct wl_rr_sched *s, uint64_t from)
{
	s->phase = WL_RR_DRAINING;
	s->drain_end = from + wl_rr_drain_ns();
	return wl_timer_arm(s->timer, s->drain_end);
}

/* Sends each request due by now (open loop), late or not, each keeping its due time. */
static void send_due(struct wl_rr_sched *s, uint64_t now, void (*send)(uint64_t seq, void *arg),
		     void *arg, const struct wl_failure *f)
{
	while (wl_rr_due(s->next) <= now && !f->code &&
	       !(s->t_end && wl_rr_due(s->next) >= s->t_end)) {
		atomic_fetch_add(&wl_rr.due, 1);
		send(s->next++, arg);
	}
}

int wl_rr_sched_tick(struct wl_rr_sched *s, void (*send)(uint64_t seq, void *arg), void *arg,
		     const struct wl_failure *f)
{
	uint64_t now = wl_now_ns(), expirations;

	if (read(s->timer, &expirations, sizeof(expirations)) < 0 && errno != EAGAIN)
		wl_warn("reading the request timer failed: %s", strerror(errno));
	if (s->phase != WL_RR_SENDING)
		return 0;
	if (wl_rr.closed)
		return now >= s->t_end ? sched_drain(s, s->t_end)
				       : wl_timer_arm(s->timer, s->t_end);
	/* Late or not, each request keeps its due time: the answer's latency counts the wait. */
	send_due(s, now, send, arg, f);
	if (s->t_end && wl_rr_due(s->next) >= s->t_end)
		return sched_drain(s, s->t_end);
	return wl_timer_arm(s->timer, wl_rr_due(s->next));
}

int wl_rr_sched_stop(struct wl_rr_sched *s, uint64_t now, void (*send)(uint64_t seq, void *arg),
		     void *arg, const struct wl_failure *f)
{
	if (s->phase == WL_RR_DRAINING)
		return 0;
	/*
	 * What fell due before "stop" goes out first, as the tick the loop had
	 * not yet run would have sent it: in a slow guest a TLS handshake held
	 * the loop past 60 periods, and "stop" dropped those requests unsent
	 * and uncounted.
	 */
	if (s->phase == WL_RR_SENDING && !wl_rr.closed)
		send_due(s, now, send, arg, f);
	return sched_drain(s, now);
}

bool wl_rr_sched_over(const struct wl_rr_sched *s, uint64_t now)
{
	return s->phase == WL_RR_DRAINING && now >= s->drain_end;
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
	wl_json_u64(j, "request", wl_rr.request);
	wl_json_u64(j, "response", wl_rr.response);
	if (wl_rr.request == wl_rr.response)
		wl_json_u64(j, "payload", wl_rr.request);
	if (server) {
		wl_json_u64(j, "requests_served", atomic_load(&wl_rr.served));
		wl_json_u64(j, "connections_accepted", atomic_load(&wl_rr.connections));
		return;
	}
	wl_json_str(j, "rr_mode", wl_rr.closed ? "closed" : "open");
	if (!wl_rr.closed)
		wl_json_u64(j, "period_us", wl_rr.period_ns / 1000);
	wl_json_u64(j, "requests_due", atomic_load(&wl_rr.due));
	wl_json_u64(j, "requests_sent", sent);
	wl_json_u64(j, "responses", responses);
	wl_json_u64(j, "late", atomic_load(&wl_rr.late));
	wl_json_u64(j, "outstanding", sent - responses);
	wl_json_u64(j, "connections_opened", atomic_load(&wl_rr.connections));
}
