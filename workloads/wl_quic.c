// SPDX-License-Identifier: GPL-2.0-only
/*
 * The msquic transport (wl_transport.h). Send buffering is off, as
 * secnetperf runs both roles: a bulk sender keeps msquic's ideal send
 * buffer posted straight out of the read-only pattern region: every whole
 * --io-size chunk of the region has its QUIC_BUFFER built once, so such a
 * send allocates nothing. The handlers run on msquic's workers.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "wl_quic.h"
#include "wl.h"
#include "wl_transport.h"

#define IDLE_TIMEOUT_MS 10000
/*
 * msquic's own default (QUIC_DEFAULT_HANDSHAKE_IDLE_TIMEOUT). At 5 s, one
 * of three handshakes in the guest (TCG, 40 ms, 1% loss) timed out in CI.
 */
#define HANDSHAKE_TIMEOUT_MS 10000

struct wl_conn {
	HQUIC h;
	const struct wl_conn_handlers *hd;
	void *ctx;
	unsigned flags;
	bool server;
	bool reported; /* q.stats_conn: fini closes its handle */
	struct wl_end end;
	uint64_t t_connect;	    /* client: just before ConnectionStart */
	_Atomic bool start_at_send; /* ticket taken: started by its first send */
	bool resumed;
	bool has_early, early;	   /* conn_info's early data, see there */
	_Atomic bool early_probed; /* client: a stream opened here reads the 0-RTT figure */
};

/* One StreamSend's arguments; len: its bytes, counted in outstanding. */
struct qpost {
	const QUIC_BUFFER *b;
	uint32_t nb, len;
	QUIC_SEND_FLAGS f;
	void *cc;
};

struct wl_stream {
	HQUIC h;
	struct wl_conn *c;
	const struct wl_stream_handlers *hd;
	void *ctx;
	_Atomic uint64_t outstanding; /* posted, not yet completed */
	_Atomic uint64_t ideal;	      /* msquic's ideal send buffer */
	bool send_only, recv_only;
	bool early_probe; /* the connection's first stream opened here */
	bool lazy;	  /* WL_STREAM_LAZY: its first send starts it */
	_Atomic bool fin_sent;
	bool send_graceful, peer_fin, aborted;
	QUIC_BUFFER tail; /* the short last send */
	/*
	 * A peer's stream whose FIN rides on the bytes data() is handed: the
	 * last message sent from there waits for fin(), so that an answer
	 * and its FIN go in one StreamSend, as the old rr server's did. Its
	 * sends come from its own handlers, on the worker.
	 */
	bool fin_rides, has_held;
	struct qpost held;
};

/*
 * A send with a header or a tag, held until its SEND_COMPLETE. Any other
 * send passes its length as the ClientContext, tagged by its low bit
 * (this struct, malloc'd, is aligned).
 */
struct qsend {
	QUIC_BUFFER b[2];
	void *tag;
	uint32_t len;
	uint8_t hdr[WL_HDR_MAX];
};

static struct {
	const struct wl_opts *o;
	const QUIC_API_TABLE *api;
	HQUIC reg, listener;
	HQUIC cfg; /* every connection's, client or server */
	struct wl_accept acc;
	const uint8_t *region;
	QUIC_BUFFER *chunks; /* the region's --io-size chunks */
	uint32_t nchunks;
	/*
	 * The connection whose statistics marks and "done" give: the first
	 * with WL_CONN_STATS (the pattern's word: bulk's, the rr client's).
	 * Its handle stays open until fini, so "done" reads it after its
	 * end; lock holds it against that close while a mark reads it.
	 */
	_Atomic(HQUIC) stats_conn;
	pthread_mutex_t lock;
	/* ticket_lock: taken for a copy, never around a call into msquic. */
	pthread_mutex_t ticket_lock;
	uint8_t *ticket; /* WL_CONN_RESUME: the last connection's ticket */
	uint32_t ticket_len;
} q = {.lock = PTHREAD_MUTEX_INITIALIZER, .ticket_lock = PTHREAD_MUTEX_INITIALIZER};

/* --proto's ALPN (wl_opts.alpn), set by q_init. */
static QUIC_BUFFER alpn;

static void q_json_mark(struct wl_json *j)
{
	HQUIC h;

	wlq_json_perf_counters(q.api, j);
	/* The lock holds the reported connection against fini's close. */
	pthread_mutex_lock(&q.lock);
	h = atomic_load(&q.stats_conn);
	if (h)
		wlq_json_conn_stats(q.api, h, j);
	pthread_mutex_unlock(&q.lock);
}

static void q_json_done(struct wl_json *j, const struct wl_end *last)
{
	HQUIC h;

	if (last && last->closed_by_transport)
		wl_json_str(j, "transport_status", last->transport_status);
	if (last && last->closed_by_peer)
		wl_json_u64(j, "peer_error_code", last->peer_error);
	wlq_json_datapath(q.api, j);
	wlq_json_perf_counters(q.api, j);
	pthread_mutex_lock(&q.lock);
	h = atomic_load(&q.stats_conn);
	if (h) {
		wlq_json_conn_stats(q.api, h, j);
		wlq_json_conn_settings(q.api, h, j);
	}
	pthread_mutex_unlock(&q.lock);
}

static void json_datapath(struct wl_json *j)
{
	wlq_json_datapath(q.api, j);
}

static void writable(struct wl_stream *s)
{
	if (!s->fin_sent && s->hd->writable)
		s->hd->writable(s, s->ctx);
}

static void send_complete(struct wl_stream *s, void *cc, bool canceled)
{
	uintptr_t v = (uintptr_t)cc;
	uint64_t len = v >> 1;
	void *tag = NULL;

	if (!(v & 1)) {
		struct qsend *m = cc;

		len = m->len;
		tag = m->tag;
		free(m);
	}
	atomic_fetch_sub_explicit(&s->outstanding, len, memory_order_relaxed);
	if (s->hd->sent)
		s->hd->sent(s, s->ctx, tag, canceled);
	if (!canceled)
		writable(s);
}

static void peer_fin(struct wl_stream *s)
{
	s->peer_fin = true;
	/* A server's early_data is known once the request is whole. */
	if (s->c->server)
		s->c->has_early = true;
	if (s->hd->fin)
		s->hd->fin(s, s->ctx);
}

/* 0, or (after saying why) WL_EXIT_CONN_LOST with the send undone. */
static int post(struct wl_stream *s, const struct qpost *p)
{
	QUIC_STATUS st = q.api->StreamSend(s->h, p->b, p->nb, p->f, p->cc);

	if (QUIC_SUCCEEDED(st))
		return WL_EXIT_OK;
	atomic_fetch_sub_explicit(&s->outstanding, p->len, memory_order_relaxed);
	if (!((uintptr_t)p->cc & 1))
		free(p->cc);
	wl_warn("StreamSend failed: %s", wlq_status_name(st));
	return WL_EXIT_CONN_LOST;
}

/* The held message goes (fin: with the FIN); the pattern heard 0, so a failure fails the stream. */
static int post_held(struct wl_stream *s, bool fin)
{
	int code;

	s->has_held = false;
	if (fin)
		s->held.f |= QUIC_SEND_FLAG_FIN;
	code = post(s, &s->held);
	if (code)
		q.api->StreamShutdown(s->h, QUIC_STREAM_SHUTDOWN_FLAG_ABORT, 0);
	return code;
}

static QUIC_STATUS QUIC_API stream_cb(HQUIC h, void *ctx, QUIC_STREAM_EVENT *ev)
{
	struct wl_stream *s = ctx;
	const struct wl_stream_handlers *hd = s->hd;
	uint32_t i;

	switch (ev->Type) {
	case QUIC_STREAM_EVENT_START_COMPLETE:
		if (QUIC_SUCCEEDED(ev->START_COMPLETE.Status))
			writable(s);
		/* ABORTED: the connection is going, and its end says why. */
		else if (ev->START_COMPLETE.Status != QUIC_STATUS_ABORTED)
			wl_warn("opening a stream failed: %s",
				wlq_status_name(ev->START_COMPLETE.Status));
		break;
	case QUIC_STREAM_EVENT_RECEIVE:
		if (ev->RECEIVE.Flags & QUIC_RECEIVE_FLAG_0_RTT)
			s->c->early = true;
		s->fin_rides = s->c->server && (ev->RECEIVE.Flags & QUIC_RECEIVE_FLAG_FIN);
		for (i = 0; i < ev->RECEIVE.BufferCount && hd->data; i++)
			if (ev->RECEIVE.Buffers[i].Length)
				hd->data(s, s->ctx, ev->RECEIVE.Buffers[i].Buffer,
					 ev->RECEIVE.Buffers[i].Length);
		if (s->fin_rides) {
			s->fin_rides = false;
			peer_fin(s);
			if (s->has_held)
				post_held(s, false);
		}
		break;
	case QUIC_STREAM_EVENT_SEND_COMPLETE:
		send_complete(s, ev->SEND_COMPLETE.ClientContext, ev->SEND_COMPLETE.Canceled);
		break;
	case QUIC_STREAM_EVENT_IDEAL_SEND_BUFFER_SIZE:
		atomic_store_explicit(&s->ideal, ev->IDEAL_SEND_BUFFER_SIZE.ByteCount,
				      memory_order_relaxed);
		writable(s);
		break;
	case QUIC_STREAM_EVENT_PEER_SEND_SHUTDOWN:
		if (!s->peer_fin)
			peer_fin(s);
		break;
	case QUIC_STREAM_EVENT_PEER_SEND_ABORTED:
	case QUIC_STREAM_EVENT_PEER_RECEIVE_ABORTED:
		s->aborted = true;
		if (hd->aborted)
			hd->aborted(s, s->ctx);
		q.api->StreamShutdown(h, QUIC_STREAM_SHUTDOWN_FLAG_ABORT, 0);
		break;
	case QUIC_STREAM_EVENT_SEND_SHUTDOWN_COMPLETE:
		s->send_graceful = ev->SEND_SHUTDOWN_COMPLETE.Graceful;
		break;
	case QUIC_STREAM_EVENT_SHUTDOWN_COMPLETE: {
		uint64_t early = 0;
		uint32_t len = sizeof(early);

		/* The request's bytes the server acknowledged in 0-RTT packets. */
		if (s->early_probe && QUIC_SUCCEEDED(q.api->GetParam(
					      h, QUIC_PARAM_STREAM_0RTT_LENGTH, &len, &early))) {
			s->c->has_early = true;
			s->c->early = early > 0;
		}
		hd->closed(s, s->ctx,
			   (s->recv_only || s->send_graceful) && (s->send_only || s->peer_fin) &&
				   !s->aborted);
		q.api->StreamClose(h);
		free(s);
		break;
	}
	default: break;
	}
	return QUIC_STATUS_SUCCESS;
}

static struct wl_stream *stream_new(struct wl_conn *c)
{
	struct wl_stream *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->c = c;
	/* Until msquic says otherwise, as secnetperf starts. */
	atomic_init(&s->ideal, 2 * (uint64_t)q.o->io_size);
	return s;
}

/* The peer opened a stream: the pattern takes it, or it is closed. */
static void peer_stream(struct wl_conn *c, HQUIC h, bool uni)
{
	struct wl_stream *s = stream_new(c);

	if (s) {
		s->h = h;
		s->recv_only = uni;
		s->hd = c->hd->stream ? c->hd->stream(c, c->ctx, s, &s->ctx) : NULL;
	}
	if (!s || !s->hd) {
		free(s);
		q.api->StreamClose(h);
		return;
	}
	q.api->SetCallbackHandler(h, (void *)stream_cb, s);
	if (!uni)
		writable(s);
}

static QUIC_STATUS QUIC_API conn_cb(HQUIC h, void *ctx, QUIC_CONNECTION_EVENT *ev)
{
	struct wl_conn *c = ctx;
	struct wl_end *e = &c->end;

	switch (ev->Type) {
	case QUIC_CONNECTION_EVENT_CONNECTED:
		e->connected = true;
		e->t_connected = wl_now_ns();
		c->resumed = ev->CONNECTED.SessionResumed;
		if (c->hd->connected)
			c->hd->connected(c, c->ctx);
		if (c->server && q.o->resume)
			q.api->ConnectionSendResumptionTicket(h, QUIC_SEND_RESUMPTION_FLAG_FINAL, 0,
							      NULL);
		break;
	case QUIC_CONNECTION_EVENT_SHUTDOWN_INITIATED_BY_TRANSPORT:
		e->closed_by_transport = true;
		e->transport_status = wlq_status_name(ev->SHUTDOWN_INITIATED_BY_TRANSPORT.Status);
		break;
	case QUIC_CONNECTION_EVENT_SHUTDOWN_INITIATED_BY_PEER:
		e->closed_by_peer = true;
		e->peer_error = ev->SHUTDOWN_INITIATED_BY_PEER.ErrorCode;
		e->t_peer_closed = wl_now_ns();
		break;
	case QUIC_CONNECTION_EVENT_PEER_STREAM_STARTED:
		peer_stream(c, ev->PEER_STREAM_STARTED.Stream,
			    ev->PEER_STREAM_STARTED.Flags & QUIC_STREAM_OPEN_FLAG_UNIDIRECTIONAL);
		break;
	case QUIC_CONNECTION_EVENT_RESUMPTION_TICKET_RECEIVED: {
		uint32_t len = ev->RESUMPTION_TICKET_RECEIVED.ResumptionTicketLength;
		uint8_t *t;

		if (!(c->flags & WL_CONN_RESUME) || !(t = malloc(len)))
			break;
		memcpy(t, ev->RESUMPTION_TICKET_RECEIVED.ResumptionTicket, len);
		/* Handshakes in flight: another worker may be offering the last one. */
		pthread_mutex_lock(&q.ticket_lock);
		free(q.ticket);
		q.ticket = t;
		q.ticket_len = len;
		pthread_mutex_unlock(&q.ticket_lock);
		break;
	}
	case QUIC_CONNECTION_EVENT_SHUTDOWN_COMPLETE:
		c->hd->closed(c, c->ctx, e);
		if (!c->reported)
			q.api->ConnectionClose(h);
		free(c);
		break;
	default: break;
	}
	return QUIC_STATUS_SUCCESS;
}

/* A connection that never started: msquic may still say goodbye on close. */
static QUIC_STATUS QUIC_API quiet_conn_cb(HQUIC h, void *ctx, QUIC_CONNECTION_EVENT *ev)
{
	(void)h, (void)ctx, (void)ev;
	return QUIC_STATUS_SUCCESS;
}

static void report(struct wl_conn *c)
{
	HQUIC none = NULL;

	c->reported = (c->flags & WL_CONN_STATS) &&
		      atomic_compare_exchange_strong(&q.stats_conn, &none, c->h);
}

/* The configuration of a server (a: its limits) or of a client's connections. */
static int open_config(const struct wl_accept *a)
{
	const bool server = a != NULL;
	QUIC_SETTINGS set = {0};
	QUIC_CREDENTIAL_CONFIG cred = {0};
	QUIC_CERTIFICATE_FILE cf = {0};
	QUIC_STATUS st;

	set.IdleTimeoutMs = IDLE_TIMEOUT_MS;
	set.IsSet.IdleTimeoutMs = 1;
	set.HandshakeIdleTimeoutMs = HANDSHAKE_TIMEOUT_MS;
	set.IsSet.HandshakeIdleTimeoutMs = 1;
	if (server && a->peer_bidi_streams) {
		set.PeerBidiStreamCount = a->peer_bidi_streams;
		set.IsSet.PeerBidiStreamCount = 1;
	}
	if (server && a->peer_uni_streams) {
		set.PeerUnidiStreamCount = a->peer_uni_streams;
		set.IsSet.PeerUnidiStreamCount = 1;
	}
	if (server && q.o->resume) {
		set.ServerResumptionLevel = QUIC_SERVER_RESUME_AND_ZERORTT;
		set.IsSet.ServerResumptionLevel = 1;
	}
	/*
	 * msquic's send buffering off, on both roles, as secnetperf's client
	 * and server run: each send's buffer stays ours until SEND_COMPLETE.
	 * With it on, a closed loop's client sent each response's ACK in a
	 * packet of its own, ahead of the next request, where secnetperf's
	 * request carries it: 2.13 packets a request against 1.05, and ~8%
	 * more of the machine's CPU a request (RESULTS.md, latency).
	 */
	set.SendBufferingEnabled = 0;
	set.IsSet.SendBufferingEnabled = 1;
	/*
	 * A stream's receive window holds a whole message and its framing
	 * (--payload, --request, --response: the messages of rr and video).
	 * msquic sends first come, first served, but passes to the next stream
	 * while one waits for its peer's stream window (64 KiB by default, and
	 * slow to grow under load): an open loop of 16 MiB messages queued
	 * faster than they go advanced every stream together and almost none
	 * came whole (1 to 19 responses in 2 s over 20 runs; CI once saw none).
	 * Messages inside the default keep it, as secnetperf runs.
	 */
	{
		uint32_t req = q.o->request ? q.o->request : q.o->payload;
		uint32_t resp = q.o->response ? q.o->response : q.o->payload;
		uint64_t need = (uint64_t)(req > resp ? req : resp) + 4096, win = 1;

		while (win < need)
			win <<= 1;
		if (win > 65536) { /* at most 32 MiB: --request and --response stop at 16 MiB */
			set.StreamRecvWindowDefault = (uint32_t)win;
			set.IsSet.StreamRecvWindowDefault = 1;
		}
	}
	/* The knobs that isolate a cost (secnetperf's -pacing, -cc, -ecn); unset: msquic's defaults. */
	if (q.o->pacing) {
		set.PacingEnabled = !strcmp(q.o->pacing, "on");
		set.IsSet.PacingEnabled = 1;
	}
	if (q.o->quic_cc) {
		set.CongestionControlAlgorithm = !strcmp(q.o->quic_cc, "bbr")
							 ? QUIC_CONGESTION_CONTROL_ALGORITHM_BBR
							 : QUIC_CONGESTION_CONTROL_ALGORITHM_CUBIC;
		set.IsSet.CongestionControlAlgorithm = 1;
	}
	if (q.o->ecn) {
		set.EcnEnabled = !strcmp(q.o->ecn, "on");
		set.IsSet.EcnEnabled = 1;
	}

	st = q.api->ConfigurationOpen(q.reg, &alpn, 1, &set, sizeof(set), NULL, &q.cfg);
	if (QUIC_FAILED(st)) {
		wl_warn("ConfigurationOpen failed: %s", wlq_status_name(st));
		return WL_EXIT_LIB_OPEN;
	}
	/* AES-128-GCM only: the AEAD the TCP+TLS stacks use by default too. */
	cred.Flags = QUIC_CREDENTIAL_FLAG_SET_ALLOWED_CIPHER_SUITES;
	cred.AllowedCipherSuites = QUIC_ALLOWED_CIPHER_SUITE_AES_128_GCM_SHA256;
	if (server) {
		cf.CertificateFile = q.o->cert;
		cf.PrivateKeyFile = q.o->key;
		cred.Type = QUIC_CREDENTIAL_TYPE_CERTIFICATE_FILE;
		cred.CertificateFile = &cf;
	} else {
		cred.Type = QUIC_CREDENTIAL_TYPE_NONE;
		cred.Flags |= QUIC_CREDENTIAL_FLAG_CLIENT |
			      QUIC_CREDENTIAL_FLAG_NO_CERTIFICATE_VALIDATION;
	}
	st = q.api->ConfigurationLoadCredential(q.cfg, &cred);
	if (QUIC_FAILED(st)) {
		wl_warn("loading the %s credential failed: %s",
			server ? "server certificate" : "client", wlq_status_name(st));
		return WL_EXIT_LIB_OPEN;
	}
	return WL_EXIT_OK;
}

/*
 * --encrypt off: ask for 1-RTT packets without encryption, on each end
 * before its handshake; only if both ask does the connection run so
 * (conn_settings' "encryption" says what it ran). False after saying why.
 */
static bool encrypt_off(HQUIC h)
{
	BOOLEAN v = 1;
	QUIC_STATUS st;

	if (!q.o->encrypt || strcmp(q.o->encrypt, "off"))
		return true;
	st = q.api->SetParam(h, QUIC_PARAM_CONN_DISABLE_1RTT_ENCRYPTION, sizeof(v), &v);
	if (QUIC_SUCCEEDED(st))
		return true;
	wl_warn("msquic refused to turn 1-RTT encryption off: %s", wlq_status_name(st));
	return false;
}

static QUIC_STATUS QUIC_API listener_cb(HQUIC h, void *ctx, QUIC_LISTENER_EVENT *ev)
{
	struct wl_conn *c;
	QUIC_STATUS st;
	HQUIC ch;

	(void)h, (void)ctx;
	if (ev->Type != QUIC_LISTENER_EVENT_NEW_CONNECTION)
		return QUIC_STATUS_SUCCESS;
	ch = ev->NEW_CONNECTION.Connection;
	c = calloc(1, sizeof(*c));
	if (!c)
		return QUIC_STATUS_OUT_OF_MEMORY;
	c->h = ch;
	c->server = true;
	c->flags = q.acc.flags;
	c->hd = q.acc.accept(q.acc.arg, c, &c->ctx);
	if (!c->hd) {
		free(c);
		return QUIC_STATUS_CONNECTION_REFUSED;
	}
	q.api->SetCallbackHandler(ch, (void *)conn_cb, c);
	st = encrypt_off(ch) ? q.api->ConnectionSetConfiguration(ch, q.cfg)
			     : QUIC_STATUS_INTERNAL_ERROR;
	if (QUIC_FAILED(st)) {
		/* Refused: msquic closes it and calls us no more; the pattern took it, so it hears. */
		c->hd->closed(c, c->ctx, &c->end);
		free(c);
		return st;
	}
	/* Its events wait for this callback (the same worker) to return. */
	report(c);
	return st;
}

static int quic_addr(QUIC_ADDR *a, const char *ip, int port)
{
	memset(a, 0, sizeof(*a));
	a->Ipv4.sin_family = AF_INET;
	a->Ipv4.sin_port = htons((uint16_t)port);
	return inet_pton(AF_INET, ip, &a->Ipv4.sin_addr) == 1 ? 0 : -1;
}

static int q_listen(const struct wl_accept *a)
{
	const struct wl_opts *o = q.o;
	QUIC_ADDR addr;
	QUIC_STATUS st;
	int code;

	if (quic_addr(&addr, o->addr, o->port)) {
		wl_warn("bad IPv4 address %s", o->addr);
		return WL_EXIT_USAGE;
	}
	q.acc = *a;
	code = open_config(a);
	if (code)
		return code;
	st = q.api->ListenerOpen(q.reg, listener_cb, NULL, &q.listener);
	if (QUIC_FAILED(st)) {
		wl_warn("ListenerOpen failed: %s", wlq_status_name(st));
		return WL_EXIT_LIB_OPEN;
	}
	st = q.api->ListenerStart(q.listener, &alpn, 1, &addr);
	if (QUIC_FAILED(st)) {
		if (st == QUIC_STATUS_ADDRESS_IN_USE) {
			wl_warn("UDP port %s:%d is already in use", o->addr, o->port);
			return WL_EXIT_ADDR_IN_USE;
		}
		wl_warn("ListenerStart on %s:%d failed: %s", o->addr, o->port, wlq_status_name(st));
		return WL_EXIT_LIB_OPEN;
	}
	return WL_EXIT_OK;
}

static void q_listen_stop(void)
{
	if (q.listener)
		q.api->ListenerStop(q.listener);
}

/* 0, or after saying why WL_EXIT_HANDSHAKE with c closed (the reported one kept, see q_fini). */
static int conn_start(struct wl_conn *c)
{
	const struct wl_opts *o = q.o;
	QUIC_STATUS st;

	c->t_connect = wl_now_ns();
	st = q.api->ConnectionStart(c->h, q.cfg, QUIC_ADDRESS_FAMILY_INET, o->addr,
				    (uint16_t)o->port);
	if (QUIC_SUCCEEDED(st))
		return WL_EXIT_OK;
	wl_warn("ConnectionStart to %s:%d failed: %s", o->addr, o->port, wlq_status_name(st));
	q.api->SetCallbackHandler(c->h, (void *)quiet_conn_cb, NULL);
	if (!c->reported)
		q.api->ConnectionClose(c->h);
	return WL_EXIT_HANDSHAKE;
}

/* HTTP/3's three: a control stream and QPACK's encoder and decoder streams (RFC 9114, 9204). */
#define PEER_UNI_STREAMS 3

/* The client takes none of the server's unidirectional streams unless asked (HTTP/3). */
static bool peer_uni(HQUIC h)
{
	QUIC_SETTINGS set = {0};
	QUIC_STATUS st;

	set.PeerUnidiStreamCount = PEER_UNI_STREAMS;
	set.IsSet.PeerUnidiStreamCount = 1;
	st = q.api->SetParam(h, QUIC_PARAM_CONN_SETTINGS, sizeof(set), &set);
	if (QUIC_FAILED(st))
		wl_warn("allowing the server's unidirectional streams failed: %s",
			wlq_status_name(st));
	return QUIC_SUCCEEDED(st);
}

static int q_connect(const struct wl_conn_handlers *h, void *ctx, unsigned flags,
		     struct wl_conn **out)
{
	uint8_t *ticket = NULL;
	uint32_t ticket_len = 0;
	struct wl_conn *c;
	QUIC_STATUS st;
	int code;

	if (!q.cfg && (code = open_config(NULL)))
		return code;
	c = calloc(1, sizeof(*c));
	if (!c) {
		wl_warn("out of memory for a connection");
		return WL_EXIT_INTERNAL;
	}
	c->hd = h;
	c->ctx = ctx;
	c->flags = flags;
	st = q.api->ConnectionOpen(q.reg, conn_cb, c, &c->h);
	if (QUIC_FAILED(st)) {
		wl_warn("ConnectionOpen failed: %s", wlq_status_name(st));
		free(c);
		return WL_EXIT_LIB_OPEN;
	}
	if (!encrypt_off(c->h) || ((flags & WL_CONN_PEER_UNI) && !peer_uni(c->h))) {
		q.api->ConnectionClose(c->h);
		free(c);
		return WL_EXIT_LIB_OPEN;
	}
	report(c);
	*out = c;
	/*
	 * Without a ticket, a full handshake: "resumed" will say so. With
	 * one, the early request is queued before the start, as it was, so
	 * it goes in the first flight whatever the threads do.
	 */
	/*
	 * A copy: another worker may replace the ticket meanwhile, and
	 * SetParam may wait on a worker that waits on the lock.
	 */
	pthread_mutex_lock(&q.ticket_lock);
	if ((flags & WL_CONN_RESUME) && q.ticket && (ticket = malloc(q.ticket_len))) {
		memcpy(ticket, q.ticket, q.ticket_len);
		ticket_len = q.ticket_len;
	}
	pthread_mutex_unlock(&q.ticket_lock);
	if (ticket) {
		st = q.api->SetParam(c->h, QUIC_PARAM_CONN_RESUMPTION_TICKET, ticket_len, ticket);
		free(ticket);
		if (QUIC_SUCCEEDED(st)) {
			c->start_at_send = true;
			return WL_EXIT_OK;
		}
		wl_warn("msquic refused the resumption ticket: %s", wlq_status_name(st));
	}
	code = conn_start(c);
	if (code) {
		free(c);
		*out = NULL;
	}
	return code;
}

static int64_t q_stream_id(struct wl_stream *s)
{
	uint64_t id;
	uint32_t len = sizeof(id);

	return QUIC_SUCCEEDED(q.api->GetParam(s->h, QUIC_PARAM_STREAM_ID, &len, &id)) ? (int64_t)id
										      : -1;
}

static int q_open(struct wl_conn *c, const struct wl_stream_handlers *h, void *ctx, unsigned flags,
		  struct wl_stream **out)
{
	struct wl_stream *s = stream_new(c);
	QUIC_STREAM_START_FLAGS sf;
	QUIC_STATUS st;

	if (!s) {
		wl_warn("out of memory for a stream");
		return WL_EXIT_INTERNAL;
	}
	s->hd = h;
	s->ctx = ctx;
	s->send_only = flags & WL_STREAM_UNI;
	s->early_probe = !c->server && !atomic_exchange(&c->early_probed, true);
	*out = s;
	st = q.api->StreamOpen(c->h,
			       s->send_only ? QUIC_STREAM_OPEN_FLAG_UNIDIRECTIONAL
					    : QUIC_STREAM_OPEN_FLAG_NONE,
			       stream_cb, s, &s->h);
	if (QUIC_FAILED(st))
		goto failed;
	s->lazy = flags & WL_STREAM_LAZY;
	if (s->lazy)
		return WL_EXIT_OK;
	/*
	 * A bulk stream is announced at once, a request stream with its
	 * first bytes, as before. A start that fails later ends in
	 * SHUTDOWN_COMPLETE, hence closed.
	 */
	sf = s->send_only ? QUIC_STREAM_START_FLAG_IMMEDIATE : QUIC_STREAM_START_FLAG_NONE;
	st = q.api->StreamStart(s->h, sf | QUIC_STREAM_START_FLAG_SHUTDOWN_ON_FAIL);
	if (QUIC_SUCCEEDED(st))
		return WL_EXIT_OK;
	q.api->StreamClose(s->h);
failed:
	wl_warn("opening a stream failed: %s", wlq_status_name(st));
	free(s);
	*out = NULL;
	return WL_EXIT_LIB_OPEN;
}

/* The prebuilt buffer of p if it is a whole chunk of the region, else NULL. */
static const QUIC_BUFFER *whole_chunk(const uint8_t *p, uint32_t len)
{
	uintptr_t off = (uintptr_t)p - (uintptr_t)q.region;

	if (len != q.o->io_size || off % len || off / len >= q.nchunks)
		return NULL;
	return &q.chunks[off / len];
}

static int q_send(struct wl_stream *s, const uint8_t *hdr, uint32_t hdr_len, const uint8_t *body,
		  uint32_t body_len, unsigned flags, void *tag)
{
	struct qpost p = {.len = hdr_len + body_len, .f = QUIC_SEND_FLAG_NONE};
	struct qsend *m = NULL;
	struct wl_conn *c;
	bool lazy;
	int code;

	p.cc = (void *)(((uintptr_t)p.len << 1) | 1);
	if (flags & WL_SEND_FIN)
		p.f |= QUIC_SEND_FLAG_FIN;
	if (flags & WL_SEND_EARLY)
		p.f |= QUIC_SEND_FLAG_ALLOW_0_RTT;
	/* As the old rr did: a stream opened and started by its one request. */
	if (s->lazy)
		p.f |= QUIC_SEND_FLAG_START;
	if (!hdr_len && !tag && body_len) {
		p.b = whole_chunk(body, body_len);
		if (!p.b && (flags & WL_SEND_FIN)) { /* the short last send */
			s->tail.Buffer = (uint8_t *)body;
			s->tail.Length = body_len;
			p.b = &s->tail;
		}
		p.nb = p.b != NULL;
	}
	if (hdr_len || tag || (body_len && !p.b)) {
		if (hdr_len > WL_HDR_MAX || !(m = malloc(sizeof(*m)))) {
			wl_warn("cannot send a %u-byte header", hdr_len);
			return WL_EXIT_INTERNAL;
		}
		m->tag = tag;
		m->len = p.len;
		if (hdr_len) {
			memcpy(m->hdr, hdr, hdr_len);
			m->b[p.nb++] = (QUIC_BUFFER){hdr_len, m->hdr};
		}
		if (body_len)
			m->b[p.nb++] = (QUIC_BUFFER){body_len, (uint8_t *)body};
		p.b = m->b;
		p.cc = m;
	}
	if (flags & WL_SEND_FIN)
		s->fin_sent = true;
	if (s->has_held) {
		/* The bare FIN the held answer waited for: one send. */
		if (!p.len && !m && (flags & WL_SEND_FIN))
			return post_held(s, true);
		if ((code = post_held(s, false)))
			return code;
	}
	/* Before the send: its completion may come first, on a worker. */
	atomic_fetch_add_explicit(&s->outstanding, p.len, memory_order_relaxed);
	if (s->fin_rides && !(flags & WL_SEND_FIN)) {
		s->held = p;
		s->has_held = true;
		return WL_EXIT_OK;
	}
	/*
	 * Once StreamSend took a FIN, the stream may complete, close and be
	 * freed on a worker before it returns: nothing of s is read after.
	 */
	lazy = s->lazy;
	c = s->c;
	s->lazy = false;
	code = post(s, &p);
	if (code) {
		s->fin_sent = false;
		s->lazy = lazy;
		/* Never started, so no event will ever close it: gone now, no closed handler. */
		if (lazy) {
			q.api->StreamClose(s->h);
			free(s);
		}
		return code;
	}
	if (atomic_load_explicit(&c->start_at_send, memory_order_relaxed) &&
	    atomic_exchange(&c->start_at_send, false))
		return conn_start(c);
	return WL_EXIT_OK;
}

static size_t q_room(struct wl_stream *s)
{
	uint64_t ideal = atomic_load_explicit(&s->ideal, memory_order_relaxed);
	uint64_t out = atomic_load_explicit(&s->outstanding, memory_order_relaxed);

	return ideal > out ? ideal - out : 0;
}

static void q_abort(struct wl_stream *s)
{
	q.api->StreamShutdown(s->h, QUIC_STREAM_SHUTDOWN_FLAG_ABORT, 0);
}

static void q_close(struct wl_conn *c, uint64_t code)
{
	q.api->ConnectionShutdown(c->h, QUIC_CONNECTION_SHUTDOWN_FLAG_NONE, code);
}

/* From c's closed handler the counters are final and read inline. */
static void q_conn_info(struct wl_conn *c, struct wl_dl *r)
{
	QUIC_STATISTICS_V2 st;
	uint32_t len = sizeof(st);

	if (c->t_connect)
		r->t_connect = c->t_connect;
	if (c->end.connected) {
		r->t_handshake = c->end.t_connected;
		r->has_resumed = true;
		r->resumed = c->resumed;
	}
	if (c->has_early) {
		r->has_early = true;
		r->early_data = c->early;
	}
	if (QUIC_FAILED(q.api->GetParam(c->h, QUIC_PARAM_CONN_STATISTICS_V2, &len, &st)))
		return;
	/* QUIC resends frames, not packets: the packets declared lost. */
	r->has_counters = r->has_lost = true;
	r->retransmits = st.SendSuspectedLostPackets;
	r->lost_packets = st.SendSuspectedLostPackets - st.SendSpuriousLostPackets;
	r->packets_sent = st.SendTotalPackets;
	r->packets_received = st.RecvTotalPackets;
}

static int q_init(const struct wl_opts *o, bool server)
{
	QUIC_REGISTRATION_CONFIG rc = {"qprof", QUIC_EXECUTION_PROFILE_LOW_LATENCY};
	QUIC_STATUS st;
	uint32_t i;

	(void)server;
	/* qprof_wl.c's option table lets only lowlat and maxtput through. */
	if (!strcmp(o->exec_profile, "maxtput"))
		rc.ExecutionProfile = QUIC_EXECUTION_PROFILE_TYPE_MAX_THROUGHPUT;
	q.o = o;
	alpn.Buffer = (uint8_t *)o->alpn;
	alpn.Length = (uint32_t)strlen(o->alpn);
	q.region = wl_pattern_region();
	q.nchunks = wl_pattern_period() / o->io_size;
	q.chunks = calloc(q.nchunks, sizeof(*q.chunks));
	if (!q.chunks)
		return WL_EXIT_INTERNAL;
	for (i = 0; i < q.nchunks; i++) {
		q.chunks[i].Buffer = (uint8_t *)q.region + (uint64_t)i * o->io_size;
		q.chunks[i].Length = o->io_size;
	}
	st = MsQuicOpen2(&q.api);
	if (QUIC_FAILED(st)) {
		wl_warn("MsQuicOpen2 failed: %s", wlq_status_name(st));
		return WL_EXIT_LIB_OPEN;
	}
	st = q.api->RegistrationOpen(&rc, &q.reg);
	if (QUIC_FAILED(st)) {
		wl_warn("RegistrationOpen failed: %s", wlq_status_name(st));
		MsQuicClose(q.api);
		q.api = NULL;
		return WL_EXIT_LIB_OPEN;
	}
	return WL_EXIT_OK;
}

static void q_fini(void)
{
	HQUIC h;

	if (!q.api)
		return;
	/* Out of a mark's hands first; closed outside the lock, which its last events may want. */
	pthread_mutex_lock(&q.lock);
	h = atomic_exchange(&q.stats_conn, NULL);
	pthread_mutex_unlock(&q.lock);
	if (h)
		q.api->ConnectionClose(h);
	if (q.listener)
		q.api->ListenerClose(q.listener);
	if (q.cfg)
		q.api->ConfigurationClose(q.cfg);
	q.api->RegistrationClose(q.reg);
	MsQuicClose(q.api);
	q.api = NULL;
	free(q.ticket);
	free(q.chunks);
}

const struct wl_transport wl_quic = {
	.name = "quic",
	.multistream = true,
	.early_data = true,
	.init = q_init,
	.listen = q_listen,
	.listen_stop = q_listen_stop,
	.connect = q_connect,
	.open = q_open,
	.send = q_send,
	.room = q_room,
	/* No pause: msquic's sends never wait on the reader, so nothing to hold back. */
	.abort = q_abort,
	.close = q_close,
	.stream_id = q_stream_id,
	.conn_info = q_conn_info,
	.json_connected = json_datapath,
	.json_mark = q_json_mark,
	.json_done = q_json_done,
	.fini = q_fini,
};
