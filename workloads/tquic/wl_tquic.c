// SPDX-License-Identifier: GPL-2.0-only
/*
 * The tquic transport (wl_transport.h): QUIC in Tencent's tquic, through
 * the C API the crate exports (its "ffi" feature), on the BoringSSL tquic
 * vendors and builds itself, driven by the one event loop (wl_loop.c): a
 * client's connection has a connected UDP socket of its own, the server
 * one listening socket. tquic is callback based: one endpoint takes every
 * datagram (quic_endpoint_recv), finds its connection itself, and calls
 * back here for what happened (a connection made, established or closed;
 * a stream created, readable, writable or closed) when it processes its
 * connections (quic_endpoint_process_connections), which also hands the
 * packets it has to on_packets_send. The endpoint's one timeout is a
 * timerfd. Every handler runs on the loop's thread. So every pattern
 * qprof-wl runs (wl_role.h) runs on tquic, written once.
 *
 * A plugin: qprof-wl loads build/lib/libqprof-wl-tquic.so for --stack
 * tquic (wl_plugin.c), whose BoringSSL stays inside it (linked with
 * --exclude-libs) beside the OpenSSL qprof-wl's TCP stacks use.
 *
 * TLS: tquic runs over an SSL_CTX made here (quic_tls_config_new_with_ssl_ctx):
 * TLS 1.3, whose suites this BoringSSL cannot narrow (it puts
 * TLS_AES_128_GCM_SHA256 first where AES is in hardware), ALPN --proto's, the
 * run's certificate (server), no chain check (client); its handshake
 * callback proves the suite every handshake ran. --resume: the client
 * keeps the last session BoringSSL gave it and offers it to the next
 * connection (quic_endpoint_connect's session).
 *
 * tquic copies what it is given to send: a message handed to wl_send
 * waits here only until tquic takes it, and wl_room() is the stream's
 * capacity in tquic (flow control, its send buffer) less what waits.
 *
 * Sending: the packets tquic hands over in one on_packets_send,
 * consecutive ones of one size to one peer in one sendmsg with a
 * UDP_SEGMENT cmsg (GSO); receiving splits what UDP_GRO coalesced. Each as
 * the kernel takes it (qprof's offload interposer makes it refuse them).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/uio.h>
#include <unistd.h>

#include <openssl/ssl.h>
#include <tquic.h>

#include "../wl_boringssl.h"
#include "../wl_quiclib.h"
#include "../wl_transport.h"
#include "../wl_udpio.h"

#define GSO_MAX 64		    /* segments a sendmsg (the kernel's UDP_MAX_SEGMENTS) */
#define GSO_MAX_BYTES 65507	    /* and bytes: an IPv4 UDP payload's most */
#define MAX_DATAGRAM 1350	    /* each way, as quiche's transport */
#define PKT_MAX 1500		    /* a packet's room in the batch buffer */
#define RX_BUF 65536		    /* a recvmsg's: what GRO coalesces at most */
#define RX_BURST 64		    /* recvmsg calls before the connections are processed */
#define APP_BUF (128u << 10)	    /* what one quic_stream_read copies out at most */
#define CONN_WINDOW (64ull << 20)   /* initial_max_data and the window's cap */
#define STREAM_WINDOW (16ull << 20) /* each stream's */
#define MAX_STREAMS 128		    /* initial_max_streams_*: at least WL_MAX_STREAMS */
#define IDLE_TIMEOUT_MS 30000
#define HANDSHAKE_TIMEOUT_MS 10000 /* as msquic's (wl_quic.c) */
#define SEND_BATCH 64		   /* packets tquic gathers before on_packets_send */
#define CIPHER_ID 0x1301	   /* TLS_AES_128_GCM_SHA256 */
#define CIPHER "TLS13_AES_128_GCM_SHA256"
#define ERR_DONE (-100)
#define ERR_STREAM_STOPPED (-110)
#define ERR_STREAM_RESET (-111)

/* The tquic version the build took (workloads/rs/tquic-ffi). */
const char *qprof_tquic_version(void);

struct wl_stream {
	struct wl_conn *c;
	struct wl_stream *next;
	int64_t id; /* -1: not yet made in tquic */
	const struct wl_stream_handlers *hd;
	void *ctx;
	bool send_only, recv_only;
	struct wl_msgq q; /* what waits until tquic takes it */
	bool peer_fin, aborted, abort_req, abort_done;
	bool owe_writable, want;
};

struct wl_conn {
	quic_conn_t *qc; /* NULL: not yet made, or let go */
	const struct wl_conn_handlers *hd;
	void *ctx;
	unsigned flags;
	bool server;
	int fd;
	struct sockaddr_in local, remote;
	struct wl_stream *streams;
	struct wl_end end;
	uint64_t t_connect;
	bool pending; /* client: quic_endpoint_connect to come */
	bool dead;    /* over: finished at the end of the pass */
	bool close_req, stats;
	uint64_t close_code;
	struct wl_conn *next;
	uint64_t counts[4]; /* its part of N.sums: sent, lost, lost bytes, 0 (resent) */
	uint64_t received;  /* packets, as of its last snapshot */
	bool resumed;	    /* its handshake resumed a session */
	/* Client: the CONNECTION_CLOSE it sent, for its closing period (finish). */
	size_t close_len;
	uint8_t close_pkt[WL_CLOSE_MAX];
};

static struct {
	const struct wl_opts *o;
	bool server;
	struct sockaddr_in addr;
	SSL_CTX *tls;
	quic_tls_config_t *tcfg;
	quic_config_t *cfg;
	quic_endpoint_t *ep;
	struct wl_accept acc;
	int listen_fd, timer;
	bool listening;
	struct wl_udp_io io;
	struct wl_conn *live, *connecting;
	uint8_t *txbuf, *rxbuf, *appbuf;
	uint64_t armed;
	int busy;
	bool again;
	unsigned bad_suites;	    /* handshakes that ran another suite */
	struct wl_quic_sums sums;   /* what marks report */
	struct wl_conn *stats_conn; /* under sums.lock */
	uint8_t *session;
	size_t session_len;
} N = {.listen_fd = -1, .timer = -1, .sums.lock = PTHREAD_MUTEX_INITIALIZER};

static void pump(void);

/* Statistics and reports */

static void json_library(struct wl_json *j)
{
	char crypto[160];
	const struct wl_quic_desc d = {
		.name = "tquic",
		.version = qprof_tquic_version(),
		.crypto = crypto,
		.cipher = CIPHER,
		.conn_window = CONN_WINDOW,
		.stream_window = STREAM_WINDOW,
		.streams_uni = MAX_STREAMS,
		.streams_bidi = N.server && N.acc.peer_bidi_streams > MAX_STREAMS
					? N.acc.peer_bidi_streams
					: MAX_STREAMS,
		.max_datagram = MAX_DATAGRAM,
		.idle_timeout_ms = IDLE_TIMEOUT_MS,
		.send_batch = SEND_BATCH,
		.congestion_control = "bbr", /* tquic's defaults, as its tools run it */
		.pacing = true,
	};

	snprintf(crypto, sizeof(crypto),
		 "BoringSSL as tquic %s vendors and builds it (BORINGSSL_API_VERSION %d)",
		 qprof_tquic_version(), BORINGSSL_API_VERSION);
	wl_quic_json_library(j, &d, &N.sums, &N.io);
}

static void t_json_mark(struct wl_json *j)
{
	wl_quic_sums_json(&N.sums, &N.io, j);
}

static void t_json_done(struct wl_json *j, const struct wl_end *last)
{
	wl_quic_json_end(j, last);
	json_library(j);
	t_json_mark(j);
}

/* The connection's counts into the sums, and (the stats connection) its levels. */
static void snapshot(struct wl_conn *c)
{
	const quic_conn_stats_t *st;
	const quic_path_stats_t *ps = NULL;
	quic_path_address_t pa;
	uint64_t now[4], levels[4];

	if (!c->qc || !(st = quic_conn_stats(c->qc)))
		return;
	now[0] = st->sent_count;
	now[1] = st->lost_count;
	now[2] = st->lost_bytes;
	now[3] = 0; /* tquic counts no resent packets apart from its losses */
	c->received = st->recv_count;
	if (c->stats && quic_conn_active_path(c->qc, &pa))
		ps = quic_conn_path_stats(c->qc, (struct sockaddr *)&pa.local_addr,
					  pa.local_addr_len, (struct sockaddr *)&pa.remote_addr,
					  pa.remote_addr_len);
	if (ps) {
		levels[0] = ps->final_cwnd;
		levels[1] = ps->srtt; /* tquic says it in microseconds */
		levels[2] = MAX_DATAGRAM;
		levels[3] = ps->pacing_rate; /* bytes/s: its congestion control's (0: none) */
	}
	wl_quic_sums_add(&N.sums, c->counts, now, ps ? levels : NULL);
}

/* Ends */

static void set_transport_end(struct wl_conn *c, const char *why)
{
	wl_end_transport(&c->end, why);
}

/* What ended the connection, as tquic says it, into c->end. */
static void conn_over(struct wl_conn *c)
{
	bool app;
	uint64_t code;
	const uint8_t *reason;
	size_t rlen;

	c->dead = true;
	if (c->end.closed_by_transport || c->end.closed_by_peer || !c->qc)
		return;
	if (quic_conn_peer_error(c->qc, &app, &code, &reason, &rlen)) {
		if (app || code == 0) {
			c->end.closed_by_peer = true;
			c->end.peer_error = app ? code : 0;
			c->end.t_peer_closed = wl_now_ns();
		} else {
			set_transport_end(c,
					  "the peer closed the connection with a transport error");
		}
	} else if (quic_conn_is_handshake_timeout(c->qc)) {
		set_transport_end(c, "handshake timeout");
	} else if (quic_conn_is_idle_timeout(c->qc)) {
		set_transport_end(c, c->end.connected ? "idle timeout" : "handshake timeout");
	} else if (quic_conn_is_reset(c->qc)) {
		set_transport_end(c, "the peer reset the connection (stateless reset)");
	} else if (quic_conn_local_error(c->qc, &app, &code, &reason, &rlen) && !app && code) {
		set_transport_end(c, code >= 0x100 && code < 0x200 ? "TLS handshake failed"
								   : "tquic closed the connection");
	} else if (!c->close_req) {
		set_transport_end(c, "tquic closed the connection");
	}
}

/* Streams */

static struct wl_stream *stream_new(struct wl_conn *c, int64_t id)
{
	struct wl_stream *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->c = c;
	s->id = id;
	s->next = c->streams;
	c->streams = s;
	return s;
}

static struct wl_stream *stream_of(struct wl_conn *c, uint64_t id)
{
	struct wl_stream *s;

	for (s = c->streams; s; s = s->next)
		if (s->id == (int64_t)id)
			return s;
	return NULL;
}

/* A message's sent handler (wl_msgq_write's, wl_msgq_clear's). */
static void msgq_sent(void *arg, void *tag, bool canceled)
{
	struct wl_stream *s = arg;

	if (s->hd && s->hd->sent)
		s->hd->sent(s, s->ctx, tag, canceled);
}

/* s's closed handler, then s gone. */
static void stream_end(struct wl_stream *s, bool graceful)
{
	struct wl_stream **pp;

	wl_msgq_clear(&s->q, msgq_sent, s);
	if (s->hd && s->hd->closed)
		s->hd->closed(s, s->ctx, graceful);
	for (pp = &s->c->streams; *pp && *pp != s; pp = &(*pp)->next)
		;
	if (*pp)
		*pp = s->next;
	free(s);
}

static size_t t_room(struct wl_stream *s)
{
	ssize_t cap;

	if (s->c->dead || s->q.fin_req || s->aborted || s->recv_only)
		return 0;
	if (s->id < 0 || !s->c->qc)
		return STREAM_WINDOW > s->q.queued ? (size_t)(STREAM_WINDOW - s->q.queued) : 0;
	cap = quic_stream_capacity(s->c->qc, (uint64_t)s->id);
	return cap > 0 && (uint64_t)cap > s->q.queued ? (size_t)((uint64_t)cap - s->q.queued) : 0;
}

static int64_t t_stream_id(struct wl_stream *s)
{
	return s->id;
}

static void peer_aborted(struct wl_stream *s)
{
	if (s->aborted)
		return;
	s->aborted = true;
	if (s->hd && s->hd->aborted)
		s->hd->aborted(s, s->ctx);
	s->abort_req = true;
}

/* wl_msgq_write's hand to tquic: no more than the stream's room (tquic copies all it is given first). */
static ssize_t msgq_take(void *arg, const uint8_t *p, size_t len, bool fin)
{
	struct wl_stream *s = arg;
	ssize_t cap = len ? quic_stream_capacity(s->c->qc, (uint64_t)s->id) : 0, n;

	if (cap == ERR_STREAM_STOPPED || cap == ERR_STREAM_RESET)
		return WL_MSGQ_ABORTED;
	if (len && cap <= 0)
		return WL_MSGQ_FULL; /* on when the peer's ACKs and credit come */
	if (len && (size_t)cap < len) {
		len = (size_t)cap;
		fin = false;
	}
	n = quic_stream_write(s->c->qc, (uint64_t)s->id, p, len, fin);
	if (n == ERR_STREAM_STOPPED || n == ERR_STREAM_RESET)
		return WL_MSGQ_ABORTED;
	if (n == ERR_DONE || (n == 0 && len))
		return WL_MSGQ_FULL;
	return n < 0 ? WL_MSGQ_FAILED : n;
}

/* What waits on s, to tquic, as far as it takes it; the FIN with the last byte. */
static void stream_write(struct wl_stream *s)
{
	int rv = wl_msgq_write(&s->q, msgq_take, msgq_sent, s);

	if (rv == WL_MSGQ_ABORTED) {
		peer_aborted(s);
	} else if (rv == WL_MSGQ_FAILED) {
		set_transport_end(s->c, "tquic refused a stream's data");
		s->c->dead = true;
	}
}

/* Whether tquic says s is writable: only while something waits or the sender wants room. */
static void want_write(struct wl_stream *s, bool want)
{
	if (s->want == want || s->id < 0 || !s->c->qc || s->recv_only)
		return;
	s->want = want;
	quic_stream_wantwrite(s->c->qc, (uint64_t)s->id, want);
}

/* Writes and the writable handler: from a writable callback, or a pass after an ask. */
static void stream_serve(struct wl_stream *s)
{
	int rounds = 0;

	if (s->abort_done || s->aborted || s->recv_only || s->id < 0 || s->c->dead)
		return;
	do {
		if (s->q.head || (s->q.fin_req && !s->q.fin_written))
			stream_write(s);
		if (s->aborted || s->c->dead || s->q.head || s->q.fin_req || !s->hd ||
		    !s->hd->writable || t_room(s) == 0)
			break;
		s->owe_writable = false;
		s->hd->writable(s, s->ctx);
	} while (++rounds < 4 && (s->q.head || (s->q.fin_req && !s->q.fin_written)));
	want_write(s, !s->aborted && !s->c->dead &&
			      (s->q.head || (s->q.fin_req && !s->q.fin_written) || !s->q.fin_req));
}

/* tquic's callbacks, in quic_endpoint_process_connections (and _recv, _connect) */

static void stream_accept(struct wl_conn *c, uint64_t id)
{
	struct wl_stream *s = stream_new(c, (int64_t)id);

	if (!s) {
		c->close_req = true;
		c->close_code = WL_CLOSE_ERROR;
		set_transport_end(c, "out of memory");
		return;
	}
	s->recv_only = (id & 2) != 0;
	s->want = !s->recv_only;
	s->hd = c->hd->stream ? c->hd->stream(c, c->ctx, s, &s->ctx) : NULL;
	if (!s->hd)
		s->abort_req = true; /* refused */
	else if (!s->recv_only)
		s->owe_writable = true;
	N.again = true;
}

static void on_conn_created(void *tctx, quic_conn_t *qc)
{
	struct wl_conn *c = N.connecting;

	(void)tctx;
	if (c) { /* ours, from quic_endpoint_connect */
		c->qc = qc;
		quic_conn_set_context(qc, c);
		return;
	}
	if (!N.server || !N.listening || !(c = calloc(1, sizeof(*c)))) {
		quic_conn_close(qc, false, 0x2 /* CONNECTION_REFUSED */, NULL, 0);
		return;
	}
	c->server = true;
	c->flags = N.acc.flags;
	c->fd = N.listen_fd;
	c->qc = qc;
	c->local = N.addr;
	c->t_connect = wl_now_ns();
	c->hd = N.acc.accept(N.acc.arg, c, &c->ctx);
	if (!c->hd) {
		free(c);
		quic_conn_close(qc, true, WL_CLOSE_ERROR, NULL, 0);
		return;
	}
	quic_conn_set_context(qc, c);
	c->next = N.live;
	N.live = c;
	pthread_mutex_lock(&N.sums.lock);
	if ((c->flags & WL_CONN_STATS) && !N.stats_conn)
		N.stats_conn = c, c->stats = true;
	pthread_mutex_unlock(&N.sums.lock);
}

static void on_conn_established(void *tctx, quic_conn_t *qc)
{
	struct wl_conn *c = quic_conn_context(qc);

	(void)tctx;
	if (!c || c->dead)
		return;
	c->end.connected = true;
	c->end.t_connected = wl_now_ns();
	c->resumed = quic_conn_is_resumed(qc);
	if (N.bad_suites) {
		c->end.exit_code = WL_EXIT_TLS_CONFIG;
		c->end.transport_status =
			"the connection runs another suite than TLS_AES_128_GCM_SHA256";
		c->close_req = true;
		c->close_code = WL_CLOSE_ERROR;
		N.again = true;
		return;
	}
	if (c->hd->connected)
		c->hd->connected(c, c->ctx);
	N.again = true;
}

static void on_conn_closed(void *tctx, quic_conn_t *qc)
{
	struct wl_conn *c = quic_conn_context(qc);

	(void)tctx;
	if (!c)
		return; /* let go before */
	conn_over(c);
	snapshot(c);
	quic_conn_set_context(qc, NULL);
	c->qc = NULL;
	N.again = true;
}

static void on_stream_created(void *tctx, quic_conn_t *qc, uint64_t id)
{
	struct wl_conn *c = quic_conn_context(qc);

	(void)tctx;
	if (!c || c->dead || stream_of(c, id))
		return;
	/* Ours are made with their wl_stream (pump); another one is the peer's. */
	if ((id & 1) != (c->server ? 1u : 0u))
		stream_accept(c, id);
}

static void on_stream_readable(void *tctx, quic_conn_t *qc, uint64_t id)
{
	struct wl_conn *c = quic_conn_context(qc);
	struct wl_stream *s = c ? stream_of(c, id) : NULL;

	(void)tctx;
	if (!s) {
		/* Nothing to take it: read and dropped (one let go, or aborted). */
		bool fin = false;

		while (quic_stream_read(qc, id, N.appbuf, APP_BUF, &fin) > 0 && !fin)
			;
		return;
	}
	for (;;) {
		bool fin = false;
		ssize_t n = quic_stream_read(qc, id, N.appbuf, APP_BUF, &fin);

		if (n < 0) {
			/* A stream tquic says readable with nothing to read: the peer reset it. */
			if (!s->peer_fin && !quic_stream_finished(qc, id) &&
			    quic_stream_capacity(qc, id) == ERR_STREAM_RESET)
				peer_aborted(s);
			break;
		}
		if (n && s->hd && !s->aborted && s->hd->data)
			s->hd->data(s, s->ctx, N.appbuf, (size_t)n);
		if (fin && !s->peer_fin) {
			s->peer_fin = true;
			if (s->hd && !s->aborted && s->hd->fin)
				s->hd->fin(s, s->ctx);
		}
		if (fin || !n || c->dead)
			break;
	}
	N.again = true;
}

static void on_stream_writable(void *tctx, quic_conn_t *qc, uint64_t id)
{
	struct wl_conn *c = quic_conn_context(qc);
	struct wl_stream *s = c ? stream_of(c, id) : NULL;

	(void)tctx;
	if (!s) {
		quic_stream_wantwrite(qc, id, false);
		return;
	}
	stream_serve(s);
}

static void on_stream_closed(void *tctx, quic_conn_t *qc, uint64_t id)
{
	struct wl_conn *c = quic_conn_context(qc);
	struct wl_stream *s = c ? stream_of(c, id) : NULL;

	(void)tctx;
	if (!s)
		return;
	stream_end(s, !s->aborted && !s->abort_done && (s->send_only || s->peer_fin) &&
			      (s->recv_only || s->q.fin_written));
}

static void on_new_token(void *tctx, quic_conn_t *qc, const uint8_t *token, size_t len)
{
	(void)tctx, (void)qc, (void)token, (void)len;
}

static const quic_transport_methods_t methods = {
	.on_conn_created = on_conn_created,
	.on_conn_established = on_conn_established,
	.on_conn_closed = on_conn_closed,
	.on_stream_created = on_stream_created,
	.on_stream_readable = on_stream_readable,
	.on_stream_writable = on_stream_writable,
	.on_stream_closed = on_stream_closed,
	.on_new_token = on_new_token,
};

/* Sending: the packets tquic has, batched for GSO on qprof-wl's datapath */

/* The client connection a packet leaves by, by its source port; NULL: the server's, or none. */
static struct wl_conn *conn_of(const struct sockaddr_in *src)
{
	struct wl_conn *c;

	if (N.server)
		return NULL;
	for (c = N.live; c; c = c->next)
		if (c->fd >= 0 && src && c->local.sin_port == src->sin_port)
			return c;
	return NULL;
}

/*
 * A client's first datagram after it closed the connection: its
 * CONNECTION_CLOSE, kept for its closing period (finish).
 */
static void keep_close(struct wl_conn *c, const quic_packet_out_spec_t *p, size_t n)
{
	size_t k, off = 0;

	if (!c || !c->close_req || c->close_len || n > sizeof(c->close_pkt))
		return;
	for (k = 0; k < p->iovlen; k++) {
		memcpy(c->close_pkt + off, p->iov[k].iov_base, p->iov[k].iov_len);
		off += p->iov[k].iov_len;
	}
	c->close_len = n;
}

static void send_batch(int fd, const struct sockaddr_in *to, size_t len, size_t seg)
{
	if (fd >= 0)
		wl_udp_io_send(&N.io, fd, N.server ? to : NULL, N.txbuf, len, seg);
}

static int on_packets_send(void *psctx, quic_packet_out_spec_t *pkts, unsigned count)
{
	struct sockaddr_in to = {0};
	size_t off = 0, seg = 0, npkts = 0;
	struct wl_conn *pc;
	int fd = -1;
	unsigned i;

	(void)psctx;
	for (i = 0; i < count; i++) {
		const struct sockaddr_in *dst = pkts[i].dst_addr;
		const struct sockaddr_in *src = pkts[i].src_addr;
		size_t n = 0, k;
		int pfd;
		bool same;

		for (k = 0; k < pkts[i].iovlen; k++)
			n += pkts[i].iov[k].iov_len;
		if (n > PKT_MAX || pkts[i].dst_addr_len != sizeof(to))
			continue;
		pc = conn_of(pkts[i].src_addr_len == sizeof(*src) ? src : NULL);
		pfd = N.server ? N.listen_fd : pc ? pc->fd : -1;
		keep_close(pc, &pkts[i], n);
		same = pfd == fd && !memcmp(dst, &to, sizeof(to));
		/* Segments of one size to one peer, the last perhaps shorter; else the batch goes first. */
		if (npkts && (n > seg || !same || off + n > GSO_MAX_BYTES)) {
			send_batch(fd, &to, off, seg);
			off = 0;
			npkts = 0;
		}
		if (!npkts) {
			seg = n;
			fd = pfd;
			memcpy(&to, dst, sizeof(to));
		}
		for (k = 0; k < pkts[i].iovlen; k++) {
			memcpy(N.txbuf + off, pkts[i].iov[k].iov_base, pkts[i].iov[k].iov_len);
			off += pkts[i].iov[k].iov_len;
		}
		npkts++;
		if (n < seg || npkts == GSO_MAX || !N.io.gso) {
			send_batch(fd, &to, off, seg);
			off = 0;
			npkts = 0;
		}
	}
	if (npkts)
		send_batch(fd, &to, off, seg);
	return (int)count; /* every one taken: what a full socket drops tquic sends again */
}

static const quic_packet_send_methods_t send_methods = {.on_packets_send = on_packets_send};

/* The pass: what patterns asked, tquic's processing (its callbacks), the ends, the timer */

static void arm(void)
{
	const uint64_t ms = quic_endpoint_timeout(N.ep), now = wl_now_ns();
	uint64_t e;

	if (ms == UINT64_MAX)
		return;
	/* Due now: the loop's next pass. Else the timerfd, set only when sooner. */
	if (ms == 0) {
		wl_loop_again(N.timer);
		return;
	}
	e = now + ms * 1000000ull;
	if (e >= N.armed)
		return;
	N.armed = e;
	wl_timer_arm(N.timer, e);
}

static void conn_connect(struct wl_conn *c)
{
	uint64_t idx;
	int rv;

	c->pending = false;
	N.connecting = c;
	rv = quic_endpoint_connect(
		N.ep, (struct sockaddr *)&c->local, sizeof(c->local), (struct sockaddr *)&c->remote,
		sizeof(c->remote), "localhost", (c->flags & WL_CONN_RESUME) ? N.session : NULL,
		(c->flags & WL_CONN_RESUME) ? N.session_len : 0, NULL, 0, NULL, &idx);
	N.connecting = NULL;
	if (rv < 0 || !c->qc) {
		set_transport_end(c, "tquic cannot make a connection");
		c->end.exit_code = WL_EXIT_LIB_OPEN;
		c->dead = true;
	}
}

/* What the patterns asked of c since its last pass. */
static void conn_asks(struct wl_conn *c)
{
	struct wl_stream *s;

	if (c->pending)
		conn_connect(c);
	if (!c->qc || c->dead)
		return;
	if (c->close_req) {
		quic_conn_close(c->qc, true, c->close_code, NULL, 0);
		c->dead =
			true; /* its CONNECTION_CLOSE goes in this pass; the connection is over for us */
		return;
	}
	for (s = c->streams; s; s = s->next) {
		if (s->abort_req && !s->abort_done) {
			s->abort_done = true;
			if (s->id >= 0) {
				quic_stream_shutdown(c->qc, (uint64_t)s->id, QUIC_SHUTDOWN_READ,
						     WL_CLOSE_ERROR);
				if (!s->recv_only)
					quic_stream_shutdown(c->qc, (uint64_t)s->id,
							     QUIC_SHUTDOWN_WRITE, WL_CLOSE_ERROR);
			}
			continue;
		}
		if (s->id < 0 && c->end.connected) {
			uint64_t id;
			int rv = s->send_only ? quic_stream_uni_new(c->qc, 0, false, &id)
					      : quic_stream_bidi_new(c->qc, 0, false, &id);

			if (rv < 0)
				continue; /* the peer's stream limit: again when it grants more */
			s->id = (int64_t)id;
			s->want = true;
			s->owe_writable = true;
		}
		if (s->id >= 0 &&
		    (s->owe_writable || s->q.head || (s->q.fin_req && !s->q.fin_written)))
			stream_serve(s);
	}
}

/*
 * c's probe timeout (RFC 9002 6.2.1) from tquic's estimates of its path,
 * the peer's max_ack_delay taken as the RFC's 25 ms; unknown: the
 * estimate before any sample (333 ms initial RTT).
 */
static uint64_t pto_ns(struct wl_conn *c)
{
	const quic_path_stats_t *ps = NULL;
	quic_path_address_t pa;
	uint64_t var;

	if (c->qc && quic_conn_active_path(c->qc, &pa))
		ps = quic_conn_path_stats(c->qc, (struct sockaddr *)&pa.local_addr,
					  pa.local_addr_len, (struct sockaddr *)&pa.remote_addr,
					  pa.remote_addr_len);
	if (!ps || !ps->srtt)
		return (333000 + 4 * 166500 + 25000) * 1000ull;
	var = 4 * ps->rttvar > 1000 ? 4 * ps->rttvar : 1000; /* tquic says them in microseconds */
	return (ps->srtt + var + 25000) * 1000ull;
}

/* c is over for the pattern: its streams' and its closed handlers; tquic's connection let go. */
static void finish(struct wl_conn *c)
{
	struct wl_conn **pp;

	conn_over(c);
	snapshot(c);
	while (c->streams)
		stream_end(c->streams, false);
	if (c->qc)
		quic_conn_set_context(c->qc, NULL);
	if (c->qc && c->server && !quic_conn_is_closing(c->qc) && !quic_conn_is_closed(c->qc) &&
	    !quic_conn_is_draining(c->qc))
		quic_conn_close(c->qc, true, WL_CLOSE_ERROR, NULL, 0);
	/*
	 * A client's socket: kept through its closing period if it closed the
	 * connection (tquic drops what arrives once it is closing).
	 */
	if (!c->server && c->fd >= 0 && c->close_len) {
		wl_udp_io_closing(&N.io, c->fd, c->close_pkt, c->close_len, 3 * pto_ns(c));
	} else if (!c->server && c->fd >= 0) {
		wl_loop_del(c->fd);
		close(c->fd);
	}
	c->qc = NULL;
	for (pp = &N.live; *pp && *pp != c; pp = &(*pp)->next)
		;
	if (*pp)
		*pp = c->next;
	pthread_mutex_lock(&N.sums.lock);
	if (N.stats_conn == c)
		N.stats_conn = NULL;
	pthread_mutex_unlock(&N.sums.lock);
	c->hd->closed(c, c->ctx, &c->end);
	free(c);
}

static void pump(void)
{
	struct wl_conn *c, *nx;
	int rounds = 0;

	if (N.busy) {
		N.again = true;
		return;
	}
	N.busy++;
	do {
		N.again = false;
		for (c = N.live; c; c = c->next)
			conn_asks(c);
		quic_endpoint_process_connections(N.ep);
		for (c = N.live; c; c = nx) {
			nx = c->next;
			if (!c->dead && !c->pending && !c->qc)
				c->dead = true;
			if (c->dead) {
				finish(c);
				nx = N.live; /* the list may have changed */
				N.again = true;
			} else {
				snapshot(c);
			}
		}
	} while (N.again && ++rounds < 16);
	arm();
	if (N.again)
		wl_loop_again(N.timer);
	N.busy--;
}

static void on_timer(int fd, uint32_t events, void *arg)
{
	uint64_t v;

	(void)events, (void)arg;
	if (read(fd, &v, sizeof(v)) == (ssize_t)sizeof(v))
		N.armed = UINT64_MAX - 1;
	else if (errno != EAGAIN)
		return;
	quic_endpoint_on_timeout(N.ep);
	pump();
}

/* Receiving: datagrams to tquic's endpoint, GRO's split */

static void on_fd(int fd, uint32_t events, void *arg)
{
	struct wl_conn *c = arg; /* client: the connection; server: NULL */
	struct sockaddr_in from, local;
	size_t seg, off;
	ssize_t n;
	int i;

	(void)events;
	local = c ? c->local : N.addr;
	N.busy++;
	for (i = 0;
	     i < RX_BURST && (n = wl_udp_io_recv(&N.io, fd, N.rxbuf, RX_BUF, &from, &seg)) > 0; i++)
		for (off = 0; off < (size_t)n; off += seg) {
			quic_packet_info_t pi = {
				.src = (struct sockaddr *)&from,
				.src_len = sizeof(from),
				.dst = (struct sockaddr *)&local,
				.dst_len = sizeof(local),
			};

			quic_endpoint_recv(N.ep, N.rxbuf + off,
					   (size_t)n - off < seg ? (size_t)n - off : seg, &pi);
		}
	N.busy--;
	pump();
}

/* The operations */

/* A big-endian length of 8 bytes, then the bytes: tquic's session format. */
static uint8_t *put_field(uint8_t *p, const uint8_t *b, size_t len)
{
	int i;

	for (i = 7; i >= 0; i--)
		*p++ = (uint8_t)((uint64_t)len >> (8 * i));
	memcpy(p, b, len);
	return p + len;
}

/*
 * Client, --resume: the server's ticket came; its session is the one to
 * offer next, as tquic's own callback keeps it (quic_endpoint_connect
 * takes the SSL session and the peer's transport parameters, each its
 * length first).
 */
static int new_session(SSL *ssl, SSL_SESSION *sess)
{
	const uint8_t *params = NULL;
	uint8_t *buf = NULL, *out;
	size_t len = 0, plen = 0;

	SSL_get_peer_quic_transport_params(ssl, &params, &plen);
	if (!SSL_SESSION_to_bytes(sess, &buf, &len))
		return 0;
	out = malloc(16 + len + plen);
	if (out) {
		put_field(put_field(out, buf, len), params, plen);
		free(N.session);
		N.session = out;
		N.session_len = 16 + len + plen;
	}
	OPENSSL_free(buf);
	return 0; /* not kept: ours is the copy */
}

/* Every handshake's end: the suite it ran proved, the first one's key exchange kept. */
static void handshake_info(const SSL *ssl, int where, int ret)
{
	const SSL_CIPHER *cs;

	(void)ret;
	if (!(where & SSL_CB_HANDSHAKE_DONE))
		return;
	cs = SSL_get_current_cipher(ssl);
	if (!cs || SSL_CIPHER_get_protocol_id(cs) != CIPHER_ID)
		N.bad_suites++;
	wl_quic_sums_group(&N.sums, SSL_get_curve_name(SSL_get_curve_id(ssl)));
}

static int t_init(const struct wl_opts *o, bool server)
{
	N.o = o;
	N.server = server;
	N.txbuf = malloc((size_t)GSO_MAX * PKT_MAX + PKT_MAX);
	N.rxbuf = malloc(RX_BUF);
	N.appbuf = malloc(APP_BUF);
	if (!N.txbuf || !N.rxbuf || !N.appbuf)
		return WL_EXIT_INTERNAL;
	return WL_EXIT_OK;
}

static int tls_setup(void)
{
	int code;

	/*
	 * The BoringSSL tquic vendors has no way to name TLS 1.3's suites: it
	 * offers TLS_AES_128_GCM_SHA256 first where AES is in hardware, and
	 * handshake_info proves each handshake ran it.
	 */
	N.tls = SSL_CTX_new(TLS_method());
	if (!N.tls || !SSL_CTX_set_min_proto_version(N.tls, TLS1_3_VERSION)) {
		wl_warn("BoringSSL refuses a TLS 1.3 context");
		return WL_EXIT_TLS_CONFIG;
	}
	SSL_CTX_set_info_callback(N.tls, handshake_info);
	code = wl_bssl_setup(N.tls, N.o, N.server, new_session);
	if (code)
		return code;
	N.tcfg = quic_tls_config_new_with_ssl_ctx(N.tls);
	return N.tcfg ? WL_EXIT_OK : WL_EXIT_TLS_CONFIG;
}

static int t_setup(void)
{
	int code;

	N.addr.sin_family = AF_INET;
	N.addr.sin_port = htons((uint16_t)N.o->port);
	if (inet_pton(AF_INET, N.o->addr, &N.addr.sin_addr) != 1) {
		wl_warn("bad IPv4 address %s", N.o->addr);
		return WL_EXIT_USAGE;
	}
	if ((code = tls_setup()))
		return code;
	N.cfg = quic_config_new();
	if (!N.cfg) {
		wl_warn("tquic refuses its configuration");
		return WL_EXIT_LIB_OPEN;
	}
	quic_config_set_max_idle_timeout(N.cfg, IDLE_TIMEOUT_MS);
	quic_config_set_max_handshake_timeout(N.cfg, HANDSHAKE_TIMEOUT_MS);
	quic_config_set_recv_udp_payload_size(N.cfg, MAX_DATAGRAM);
	quic_config_set_send_udp_payload_size(N.cfg, MAX_DATAGRAM);
	quic_config_set_initial_max_data(N.cfg, CONN_WINDOW);
	quic_config_set_max_connection_window(N.cfg, CONN_WINDOW);
	quic_config_set_initial_max_stream_data_bidi_local(N.cfg, STREAM_WINDOW);
	quic_config_set_initial_max_stream_data_bidi_remote(N.cfg, STREAM_WINDOW);
	quic_config_set_initial_max_stream_data_uni(N.cfg, STREAM_WINDOW);
	quic_config_set_max_stream_window(N.cfg, STREAM_WINDOW);
	quic_config_set_initial_max_streams_uni(N.cfg, MAX_STREAMS);
	quic_config_set_initial_max_streams_bidi(N.cfg, MAX_STREAMS);
	quic_config_set_send_batch_size(N.cfg, SEND_BATCH);
	/* No Retry, no address validation round trip: as the other stacks' servers. */
	quic_config_enable_retry(N.cfg, false);
	quic_config_set_max_concurrent_conns(N.cfg, 1000000);
	quic_config_set_tls_config(N.cfg, N.tcfg); /* over N.tls; N.tcfg stays ours */
	N.timer = wl_timer_open();
	N.armed = UINT64_MAX - 1;
	if (N.timer < 0 || wl_loop_add(N.timer, EPOLLIN, on_timer, NULL)) {
		wl_warn("cannot make tquic's timer: %s", strerror(errno));
		return WL_EXIT_INTERNAL;
	}
	if (N.server)
		return WL_EXIT_OK; /* the endpoint once listen knows the streams a peer may open */
	N.ep = quic_endpoint_new(N.cfg, false, &methods, NULL, &send_methods, NULL);
	if (!N.ep) {
		wl_warn("tquic refuses to make an endpoint");
		return WL_EXIT_LIB_OPEN;
	}
	return WL_EXIT_OK;
}

static int t_listen(const struct wl_accept *a)
{
	int code;

	N.acc = *a;
	if (a->peer_bidi_streams > MAX_STREAMS)
		quic_config_set_initial_max_streams_bidi(N.cfg, a->peer_bidi_streams);
	if (a->peer_uni_streams > MAX_STREAMS)
		quic_config_set_initial_max_streams_uni(N.cfg, a->peer_uni_streams);
	N.ep = quic_endpoint_new(N.cfg, true, &methods, NULL, &send_methods, NULL);
	if (!N.ep) {
		wl_warn("tquic refuses to make an endpoint");
		return WL_EXIT_LIB_OPEN;
	}
	code = wl_udp_io_listen(&N.io, &N.addr, N.o, on_fd, NULL, &N.listen_fd);
	if (code)
		return code;
	N.listening = true;
	return WL_EXIT_OK;
}

static void t_listen_stop(void)
{
	N.listening = false;
}

static void asked(void)
{
	wl_loop_asked(&N.again, N.busy, N.timer);
}

static int t_connect(const struct wl_conn_handlers *h, void *ctx, unsigned flags,
		     struct wl_conn **out)
{
	struct wl_conn *c = calloc(1, sizeof(*c));

	if (!c) {
		wl_warn("cannot make a connection: %s", strerror(errno));
		return WL_EXIT_INTERNAL;
	}
	c->hd = h;
	c->ctx = ctx;
	c->flags = flags;
	c->remote = N.addr;
	c->t_connect = wl_now_ns();
	c->fd = wl_udp_io_connect(&N.io, &N.addr, &c->local);
	if (c->fd < 0) {
		wl_warn("UDP socket to %s:%d failed: %s", N.o->addr, N.o->port, strerror(errno));
		free(c);
		return WL_EXIT_LIB_OPEN;
	}
	if (wl_loop_add(c->fd, EPOLLIN, on_fd, c)) {
		wl_warn("cannot watch the UDP socket: %s", strerror(errno));
		close(c->fd);
		free(c);
		return WL_EXIT_INTERNAL;
	}
	c->pending = true;
	c->next = N.live;
	N.live = c;
	pthread_mutex_lock(&N.sums.lock);
	if ((flags & WL_CONN_STATS) && !N.stats_conn)
		N.stats_conn = c, c->stats = true;
	pthread_mutex_unlock(&N.sums.lock);
	*out = c;
	asked(); /* the Initial */
	return WL_EXIT_OK;
}

static int t_open(struct wl_conn *c, const struct wl_stream_handlers *h, void *ctx, unsigned flags,
		  struct wl_stream **out)
{
	struct wl_stream *s;

	if (c->dead)
		return WL_EXIT_CONN_LOST;
	if (!(s = stream_new(c, -1)))
		return WL_EXIT_INTERNAL;
	s->hd = h;
	s->ctx = ctx;
	s->send_only = flags & WL_STREAM_UNI;
	*out = s;
	asked();
	return WL_EXIT_OK;
}

static int t_send(struct wl_stream *s, const uint8_t *hdr, uint32_t hdr_len, const uint8_t *body,
		  uint32_t body_len, unsigned flags, void *tag)
{
	int code;

	if (s->c->dead || s->q.fin_req || s->aborted || hdr_len > WL_HDR_MAX)
		return WL_EXIT_CONN_LOST;
	code = wl_msgq_push(&s->q, hdr, hdr_len, body, body_len, flags & WL_SEND_FIN, tag);
	if (!code)
		asked();
	return code;
}

static void t_abort(struct wl_stream *s)
{
	s->abort_req = true;
	asked();
}

static void t_close(struct wl_conn *c, uint64_t code)
{
	if (c->dead || c->close_req)
		return;
	c->close_req = true;
	c->close_code = code;
	asked();
}

static void t_conn_info(struct wl_conn *c, struct wl_dl *r)
{
	/* Its figures as of its last snapshot: the closed handler asks after tquic let it go. */
	snapshot(c);
	if (c->t_connect)
		r->t_connect = c->t_connect;
	if (c->end.connected) {
		r->t_handshake = c->end.t_connected;
		r->has_resumed = r->has_early = true;
		r->resumed = c->resumed;
		r->early_data = false; /* not offered: this transport sends no 0-RTT */
	}
	r->has_counters = r->has_lost = true;
	r->retransmits = c->counts[1]; /* tquic sends again what it declared lost */
	r->lost_packets = c->counts[1];
	r->packets_sent = c->counts[0];
	r->packets_received = c->received;
}

static void t_fini(void)
{
	wl_udp_io_closings_wait();
	if (N.ep)
		quic_endpoint_free(N.ep);
	if (N.listen_fd >= 0) {
		wl_loop_del(N.listen_fd);
		close(N.listen_fd);
	}
	if (N.timer >= 0) {
		wl_loop_del(N.timer);
		close(N.timer);
	}
	if (N.cfg)
		quic_config_free(N.cfg);
	if (N.tcfg)
		quic_tls_config_free(N.tcfg);
	if (N.tls)
		SSL_CTX_free(N.tls);
	free(N.session);
	free(N.txbuf);
	free(N.rxbuf);
	free(N.appbuf);
}

__attribute__((visibility("default"))) const struct wl_transport wl_tquic = {
	.name = "tquic",
	.multistream = true,
	.init = t_init,
	.setup = t_setup,
	.listen = t_listen,
	.listen_stop = t_listen_stop,
	.connect = t_connect,
	.open = t_open,
	.send = t_send,
	.room = t_room,
	.abort = t_abort,
	.close = t_close,
	.stream_id = t_stream_id,
	.conn_info = t_conn_info,
	.json_connected = json_library,
	.json_mark = t_json_mark,
	.json_done = t_json_done,
	.fini = t_fini,
};
