// SPDX-License-Identifier: GPL-2.0-only
/*
 * What the transports over a QUIC library's C API share (wl_quiclib.h):
 * a stream's queue of messages until the library has taken them, and the
 * counts their marks report.
 */
#include <stdlib.h>
#include <string.h>

#include "wl.h"
#include "wl_quiclib.h"
#include "wl_udpio.h"

int wl_msgq_push(struct wl_msgq *q, const uint8_t *hdr, uint32_t hdr_len, const uint8_t *body,
		 uint32_t body_len, bool fin, void *tag)
{
	struct wl_msg *m;

	if (hdr_len || body_len || tag) {
		if (!(m = malloc(sizeof(*m))))
			return WL_EXIT_INTERNAL;
		*m = (struct wl_msg){.hlen = hdr_len, .blen = body_len, .body = body, .tag = tag};
		memcpy(m->hdr, hdr, hdr_len);
		if (q->tail)
			q->tail->next = m;
		else
			q->head = m;
		q->tail = m;
		q->queued += hdr_len + body_len;
	}
	if (fin)
		q->fin_req = true;
	return WL_EXIT_OK;
}

static void msg_done(struct wl_msgq *q, wl_msgq_sent sent, void *arg, bool canceled)
{
	struct wl_msg *m = q->head;

	q->head = m->next;
	if (!q->head)
		q->tail = NULL;
	if (m->tag && sent)
		sent(arg, m->tag, canceled);
	free(m);
}

int wl_msgq_write(struct wl_msgq *q, wl_msgq_take take, wl_msgq_sent sent, void *arg)
{
	struct wl_msg *m;
	ssize_t n;

	while ((m = q->head)) {
		const uint32_t total = m->hlen + m->blen;

		if (m->done < total) {
			const bool in_hdr = m->done < m->hlen;
			const uint8_t *p =
				in_hdr ? m->hdr + m->done : m->body + (m->done - m->hlen);
			const size_t len = in_hdr ? m->hlen - m->done : total - m->done;
			/* The FIN with the stream's last bytes: the header's when the body is empty. */
			const bool fin = !m->next && q->fin_req && (!in_hdr || !m->blen);

			n = take(arg, p, len, fin);
			if (n <= 0)
				return n == 0 || n == WL_MSGQ_FULL ? 0 : (int)n;
			m->done += (uint32_t)n;
			q->queued -= (uint64_t)n;
			if (fin && (size_t)n == len)
				q->fin_written = true;
			if (m->done < total)
				continue; /* the body after the header, or the library's no-room next */
		}
		msg_done(q, sent, arg, false);
	}
	if (q->fin_req && !q->fin_written) {
		n = take(arg, NULL, 0, true);
		if (n < 0)
			return n == WL_MSGQ_FULL ? 0 : (int)n;
		q->fin_written = true;
	}
	return 0;
}

void wl_msgq_clear(struct wl_msgq *q, wl_msgq_sent sent, void *arg)
{
	while (q->head)
		msg_done(q, sent, arg, true);
	q->queued = 0;
}

void wl_quic_sums_add(struct wl_quic_sums *q, uint64_t mine[4], const uint64_t now[4],
		      const uint64_t *levels)
{
	size_t i;

	pthread_mutex_lock(&q->lock);
	for (i = 0; i < 4; i++) {
		q->sum[i] += now[i] - mine[i];
		mine[i] = now[i];
	}
	if (levels) {
		memcpy(q->levels, levels, sizeof(q->levels));
		q->have_levels = true;
	}
	pthread_mutex_unlock(&q->lock);
}

void wl_quic_sums_group(struct wl_quic_sums *q, const char *group)
{
	pthread_mutex_lock(&q->lock);
	if (group && !q->group[0])
		snprintf(q->group, sizeof(q->group), "%s", group);
	pthread_mutex_unlock(&q->lock);
}

void wl_quic_sums_json_group(struct wl_quic_sums *q, struct wl_json *p)
{
	pthread_mutex_lock(&q->lock);
	if (q->group[0])
		wl_json_str(p, "key_exchange", q->group);
	pthread_mutex_unlock(&q->lock);
}

void wl_quic_sums_json(struct wl_quic_sums *q, struct wl_udp_io *io, struct wl_json *j)
{
	uint64_t sum[4], levels[4];
	struct wl_json p;
	bool have, retrans;

	pthread_mutex_lock(&q->lock);
	memcpy(sum, q->sum, sizeof(sum));
	memcpy(levels, q->levels, sizeof(levels));
	have = q->have_levels;
	retrans = q->has_retrans;
	pthread_mutex_unlock(&q->lock);
	wl_json_begin(&p);
	wl_udp_io_json(io, &p);
	wl_json_u64(&p, "sent_packets", sum[0]);
	wl_json_u64(&p, "lost_packets", sum[1]);
	wl_json_u64(&p, "lost_bytes", sum[2]);
	if (retrans)
		wl_json_u64(&p, "retrans_packets", sum[3]);
	if (have) {
		wl_json_u64(&p, "cwnd", levels[0]);
		wl_json_u64(&p, "rtt_us", levels[1]);
		wl_json_u64(&p, "current_mtu", levels[2]);
		if (levels[3] != WL_QUIC_NO_LEVEL)
			wl_json_u64(&p, "pacing_rate", levels[3]);
	}
	wl_json_raw(j, "quic_stats", wl_json_end(&p));
}

void wl_quic_json_end(struct wl_json *j, const struct wl_end *last)
{
	if (last && last->closed_by_transport)
		wl_json_str(j, "transport_status", last->transport_status);
	if (last && last->closed_by_peer)
		wl_json_u64(j, "peer_error_code", last->peer_error);
}

void wl_quic_json_library(struct wl_json *j, const struct wl_quic_desc *d, struct wl_quic_sums *q,
			  struct wl_udp_io *io)
{
	struct wl_json p;

	wl_json_begin(&p);
	wl_json_str(&p, "name", d->name);
	wl_json_str(&p, "version", d->version);
	wl_json_str(&p, "crypto", d->crypto);
	wl_json_str(&p, "cipher", d->cipher);
	wl_quic_sums_json_group(q, &p);
	wl_json_raw(j, "quic_library", wl_json_end(&p));
	wl_json_begin(&p);
	wl_json_u64(&p, "initial_max_data", d->conn_window);
	wl_json_u64(&p, "max_connection_window", d->conn_window);
	wl_json_u64(&p, "initial_max_stream_data_uni", d->stream_window);
	wl_json_u64(&p, "initial_max_stream_data_bidi", d->stream_window);
	wl_json_u64(&p, "max_stream_window", d->stream_window);
	wl_json_u64(&p, "initial_max_streams_uni", d->streams_uni);
	wl_json_u64(&p, "initial_max_streams_bidi", d->streams_bidi);
	wl_json_u64(&p, "max_send_udp_payload_size", d->max_datagram);
	wl_json_u64(&p, "max_idle_timeout_ms", d->idle_timeout_ms);
	if (d->send_batch)
		wl_json_u64(&p, "send_batch_size", d->send_batch);
	wl_json_str(&p, "congestion_control", d->congestion_control);
	wl_json_bool(&p, "pacing", d->pacing);
	wl_json_bool(&p, "encryption", true);
	wl_json_u64(&p, "socket_send_buffer", (uint64_t)io->sndbuf);
	wl_json_u64(&p, "socket_recv_buffer", (uint64_t)io->rcvbuf);
	wl_json_raw(j, "quic_settings", wl_json_end(&p));
	wl_json_bool(j, "send_segmentation", io->gso);
	/* Believed once a receive came coalesced (the stacks' gro_word "receive"). */
	wl_json_bool(j, "recv_coalescing", io->gro && io->gro_seen);
}

void wl_end_transport(struct wl_end *e, const char *why)
{
	if (e->closed_by_transport || e->closed_by_peer)
		return;
	e->closed_by_transport = true;
	e->transport_status = why;
}
