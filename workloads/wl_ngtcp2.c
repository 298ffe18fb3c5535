// SPDX-License-Identifier: GPL-2.0-only
/*
 * The ngtcp2 transport (wl_transport.h): QUIC in ngtcp2 (Debian 12's
 * 0.12) with its GnuTLS crypto helper, driven by the one event loop
 * (wl_loop.c) as wl_tcp.c's non-blocking connections are: a client's
 * connection has a connected UDP socket of its own, the server one
 * listening socket whose datagrams go to their connection by DCID; each
 * connection has a timerfd for ngtcp2's expiry. Every handler runs on the
 * loop's thread.
 *
 * ngtcp2 does not copy stream data: a message handed to wl_send (its
 * header copied here, its body in the read-only pattern region) is kept
 * until ngtcp2 says its bytes were acknowledged (acked_stream_data_offset),
 * and wl_room() is SEND_WINDOW less what is queued and not acknowledged.
 * Calls into ngtcp2 are never made from inside its callbacks: what a
 * handler asks for there (a send, a close, an abort) waits for the
 * connection's service, which runs once ngtcp2 has returned.
 *
 * Sending batches consecutive packets of one size into one sendmsg with a
 * UDP_SEGMENT cmsg (GSO), receiving splits what UDP_GRO coalesced, each
 * when the kernel takes the setsockopt (qprof's offload interposer makes
 * it refuse them).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <ngtcp2/ngtcp2.h>
#include <ngtcp2/ngtcp2_crypto.h>
#include <ngtcp2/ngtcp2_crypto_gnutls.h>

#include "wl_transport.h"
#include "wl_udpio.h"

#define CIDLEN 18
#define MAX_CIDS 8
#define GSO_MAX 64		      /* segments a sendmsg */
#define PKT_MAX 1500		      /* a packet's room in the batch buffer */
#define RX_BUF 65536		      /* a recvmsg's: what GRO coalesces at most */
#define RX_BURST 64		      /* recvmsg calls before the connections are served */
#define MAX_DATA (64ull << 20)	      /* initial_max_data */
#define MAX_STREAM_DATA (16ull << 20) /* initial_max_stream_data_* */
#define MAX_STREAMS 128		      /* initial_max_streams_*: at least WL_MAX_STREAMS */
#define SEND_WINDOW (8ull << 20)      /* a stream's bytes queued and not acknowledged */
#define IDLE_TIMEOUT_NS (30ull * NGTCP2_SECONDS)
#define HANDSHAKE_TIMEOUT_NS (10ull * NGTCP2_SECONDS) /* as msquic's (wl_quic.c) */
#define CIPHER "TLS13_AES_128_GCM_SHA256"

/* TLS 1.3 and AES-128-GCM only, as the other stacks; groups and compat mode as ngtcp2's examples. */
static const char priority[] = "NORMAL:-VERS-ALL:+VERS-TLS1.3:-CIPHER-ALL:+AES-128-GCM:"
			       "-GROUP-ALL:+GROUP-SECP256R1:+GROUP-X25519:"
			       "%DISABLE_TLS13_COMPAT_MODE";
/* --proto's ALPN (wl_opts.alpn), set by ng_init. */
static gnutls_datum_t alpn;

/* A message on a stream, kept until ngtcp2 has its bytes acknowledged. */
struct msg {
	struct msg *next;
	uint64_t off; /* its first byte's stream offset */
	uint32_t hlen, blen;
	const uint8_t *body;
	void *tag;
	uint8_t hdr[WL_HDR_MAX];
};

struct wl_stream {
	struct wl_conn *c;
	struct wl_stream *next;
	int64_t id;
	const struct wl_stream_handlers *hd; /* NULL: refused */
	void *ctx;
	bool send_only, recv_only;
	struct msg *head, *tail; /* not yet acknowledged */
	struct msg *wmsg;	 /* the first with bytes not yet given to ngtcp2 */
	uint64_t woff, qend, acked;
	bool fin_req, fin_written, peer_fin, aborted, abort_req, abort_done;
	bool owe_writable, blocked, closed_ng, close_flagged_error;
};

struct wl_conn {
	ngtcp2_conn *qc;
	gnutls_session_t tls;
	ngtcp2_crypto_conn_ref ref;
	const struct wl_conn_handlers *hd;
	void *ctx;
	unsigned flags;
	bool server;
	int fd, timer;
	struct sockaddr_in local, remote;
	struct wl_stream *streams, *cursor; /* cursor: the next to send, in turn */
	struct wl_end end;
	uint64_t t_connect;
	uint64_t armed; /* when the timer fires; UINT64_MAX - 1: not set (it fired, or new) */
	int busy;	/* in a read, a timer or a service: handlers' asks wait */
	bool again;	/* something was asked meanwhile */
	bool dead;	/* over: its closed handlers come with the service's end */
	bool close_req, more;
	uint64_t close_code;
	bool touched, stats;
	bool resumed;		      /* the handshake resumed a session (GnuTLS says) */
	struct wl_conn *next, *tnext; /* server: the live ones; touched in a read */
	ngtcp2_cid cids[MAX_CIDS];    /* server: the DCIDs it is known by */
	int ncids;
	uint64_t pkts_sent, pkts_recv, stream_lost;
	/* Client: the CONNECTION_CLOSE it sent, for its closing period (finish). */
	size_t close_len;
	uint8_t close_pkt[WL_CLOSE_MAX];
};

static struct {
	const struct wl_opts *o;
	bool server;
	struct sockaddr_in addr;
	gnutls_certificate_credentials_t cred;
	struct wl_accept acc;
	int listen_fd;
	bool listening;
	struct wl_udp_io io; /* the sockets' datapath (wl_udpio.c) */
	struct wl_conn *live;
	uint8_t *txbuf, *rxbuf;
	/* The reported connection's figures, for a mark on the control thread. */
	pthread_mutex_t lock;
	struct wl_conn *stats_conn;
	bool have_stat;
	ngtcp2_conn_stat stat;
	uint64_t stat_lost;
	char cipher[64];
	/*
	 * --resume: the server's session ticket key; the client's last
	 * session, from the ticket the server sent after its handshake
	 * (resumption without 0-RTT: the transport takes no early data).
	 */
	gnutls_datum_t ticket_key, session;
} N = {.listen_fd = -1, .lock = PTHREAD_MUTEX_INITIALIZER};

static void service(struct wl_conn *c);

/* Statistics and reports */

static void json_library(struct wl_json *j)
{
	struct wl_json p;
	char crypto[64];

	wl_json_begin(&p);
	wl_json_str(&p, "name", "ngtcp2");
	wl_json_str(&p, "version", ngtcp2_version(0)->version_str);
	snprintf(crypto, sizeof(crypto), "GnuTLS %s", gnutls_check_version(NULL));
	wl_json_str(&p, "crypto", crypto);
	wl_json_str(&p, "cipher", N.cipher[0] ? N.cipher : CIPHER);
	wl_json_raw(j, "quic_library", wl_json_end(&p));
	wl_json_begin(&p);
	wl_json_u64(&p, "receive_window", MAX_DATA);
	wl_json_u64(&p, "stream_receive_window", MAX_STREAM_DATA);
	wl_json_u64(&p, "send_window", SEND_WINDOW);
	wl_json_u64(&p, "socket_send_buffer", (uint64_t)N.io.sndbuf);
	wl_json_u64(&p, "socket_recv_buffer", (uint64_t)N.io.rcvbuf);
	wl_json_raw(j, "quic_settings", wl_json_end(&p));
	wl_json_bool(j, "send_segmentation", N.io.gso);
	wl_json_bool(j, "recv_coalescing", N.io.gro);
}

static void ng_json_mark(struct wl_json *j)
{
	struct wl_json p;
	ngtcp2_conn_stat st;
	uint64_t lost;
	bool have;

	wl_json_begin(&p);
	wl_udp_io_json(&N.io, &p);
	pthread_mutex_lock(&N.lock);
	have = N.have_stat;
	st = N.stat;
	lost = N.stat_lost;
	pthread_mutex_unlock(&N.lock);
	if (have) {
		wl_json_u64(&p, "cwnd", st.cwnd);
		wl_json_u64(&p, "rtt_us", st.smoothed_rtt / NGTCP2_MICROSECONDS);
		wl_json_u64(&p, "min_rtt_us", st.min_rtt / NGTCP2_MICROSECONDS);
		wl_json_u64(&p, "bytes_in_flight", st.bytes_in_flight);
		wl_json_u64(&p, "pto_count", st.pto_count);
		/* ngtcp2_conn_get_stream_loss_count of its closed streams: packets with STREAM frames. */
		wl_json_u64(&p, "stream_lost_packets", lost);
	}
	wl_json_raw(j, "quic_stats", wl_json_end(&p));
}

static void ng_json_done(struct wl_json *j, const struct wl_end *last)
{
	if (last && last->closed_by_transport)
		wl_json_str(j, "transport_status", last->transport_status);
	if (last && last->closed_by_peer)
		wl_json_u64(j, "peer_error_code", last->peer_error);
	json_library(j);
	ng_json_mark(j);
}

static void snapshot(struct wl_conn *c)
{
	if (!c->stats || !c->qc)
		return;
	uint64_t lost = c->stream_lost;
	struct wl_stream *s;

	for (s = c->streams; s; s = s->next)
		if (!s->closed_ng)
			lost += ngtcp2_conn_get_stream_loss_count(c->qc, s->id);
	pthread_mutex_lock(&N.lock);
	ngtcp2_conn_get_conn_stat(c->qc, &N.stat);
	N.stat_lost = lost;
	N.have_stat = true;
	pthread_mutex_unlock(&N.lock);
}

/* Sockets: the one datapath (wl_udpio.c) */

/* One sendmsg of len bytes, segments of seg (GSO when more than one); a full socket waits. */
static void send_batch(struct wl_conn *c, uint8_t *buf, size_t len, size_t seg)
{
	c->pkts_sent += wl_udp_io_send(&N.io, c->fd, c->server ? &c->remote : NULL, buf, len, seg);
}

/* Ends and errors */

static void set_transport_end(struct wl_conn *c, const char *why)
{
	if (c->end.closed_by_transport || c->end.closed_by_peer)
		return;
	c->end.closed_by_transport = true;
	c->end.transport_status = why;
}

/* Writes the CONNECTION_CLOSE ccerr asks for; the connection is over. */
static void send_close(struct wl_conn *c, const ngtcp2_connection_close_error *ccerr)
{
	ngtcp2_path_storage ps;
	ngtcp2_pkt_info pi;
	ngtcp2_ssize n;

	c->dead = true;
	if (ngtcp2_conn_is_in_closing_period(c->qc) || ngtcp2_conn_is_in_draining_period(c->qc))
		return;
	ngtcp2_path_storage_zero(&ps);
	n = ngtcp2_conn_write_connection_close(c->qc, &ps.path, &pi, N.txbuf, PKT_MAX, ccerr,
					       wl_now_ns());
	if (n <= 0)
		return;
	send_batch(c, N.txbuf, (size_t)n, (size_t)n);
	if (!c->server && (size_t)n <= sizeof(c->close_pkt)) {
		memcpy(c->close_pkt, N.txbuf, (size_t)n);
		c->close_len = (size_t)n;
	}
}

/* An ngtcp2 call failed with rv: what it means for the connection. */
static void conn_error(struct wl_conn *c, int rv)
{
	ngtcp2_connection_close_error ccerr;

	if (rv == NGTCP2_ERR_DRAINING) {
		ngtcp2_conn_get_connection_close_error(c->qc, &ccerr);
		c->dead = true;
		if (c->end.closed_by_transport || c->end.closed_by_peer)
			return;
		if (ccerr.type == NGTCP2_CONNECTION_CLOSE_ERROR_CODE_TYPE_APPLICATION ||
		    ccerr.error_code == NGTCP2_NO_ERROR) {
			c->end.closed_by_peer = true;
			c->end.peer_error =
				ccerr.type == NGTCP2_CONNECTION_CLOSE_ERROR_CODE_TYPE_APPLICATION
					? ccerr.error_code
					: 0;
			c->end.t_peer_closed = wl_now_ns();
		} else {
			set_transport_end(c,
					  "the peer closed the connection with a transport error");
		}
		return;
	}
	if (rv == NGTCP2_ERR_IDLE_CLOSE || rv == NGTCP2_ERR_DROP_CONN ||
	    rv == NGTCP2_ERR_HANDSHAKE_TIMEOUT) {
		set_transport_end(c, rv == NGTCP2_ERR_IDLE_CLOSE	  ? "idle timeout"
				     : rv == NGTCP2_ERR_HANDSHAKE_TIMEOUT ? "handshake timeout"
									  : ngtcp2_strerror(rv));
		c->dead = true;
		return;
	}
	ngtcp2_connection_close_error_default(&ccerr);
	if (rv == NGTCP2_ERR_CRYPTO) {
		uint8_t alert = ngtcp2_conn_get_tls_alert(c->qc);
		const char *name = gnutls_alert_get_name((gnutls_alert_description_t)alert);

		ngtcp2_connection_close_error_set_transport_error_tls_alert(&ccerr, alert, NULL, 0);
		set_transport_end(c, name ? name : "TLS handshake failed");
	} else {
		ngtcp2_connection_close_error_set_transport_error_liberr(&ccerr, rv, NULL, 0);
		set_transport_end(c, ngtcp2_strerror(rv));
	}
	send_close(c, &ccerr);
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

static void stream_free(struct wl_stream *s, bool canceled)
{
	struct wl_stream **pp;
	struct msg *m;

	/*
	 * A peer that closed with 0 had what it wanted: its close may overtake
	 * its last ACK, so what was written counts as gone (as msquic's did).
	 */
	const bool peer_ok = s->c->end.closed_by_peer && !s->c->end.peer_error;

	while ((m = s->head)) {
		s->head = m->next;
		if (canceled && m->tag && s->hd && s->hd->sent)
			s->hd->sent(s, s->ctx, m->tag,
				    !(peer_ok && m->off + m->hlen + m->blen <= s->woff));
		free(m);
	}
	if (s->c->cursor == s)
		s->c->cursor = s->next;
	for (pp = &s->c->streams; *pp && *pp != s; pp = &(*pp)->next)
		;
	if (*pp)
		*pp = s->next;
	free(s);
}

static size_t ng_room(struct wl_stream *s)
{
	uint64_t q = s->qend - s->acked;

	return s->c->dead || s->fin_req || q >= SEND_WINDOW ? 0 : (size_t)(SEND_WINDOW - q);
}

/* Has bytes (or a FIN) not yet given to ngtcp2. */
static bool pending(const struct wl_stream *s)
{
	return s->id >= 0 && !s->blocked && !s->abort_req && !s->aborted &&
	       (s->woff < s->qend || (s->fin_req && !s->fin_written));
}

/* The stream's next bytes from woff, as at most n vectors. */
static size_t stream_vecs(struct wl_stream *s, ngtcp2_vec *v, size_t n)
{
	struct msg *m;
	size_t k = 0;
	uint64_t p = s->woff;

	for (m = s->wmsg; m && k < n; m = m->next) {
		uint64_t in = p - m->off;

		if (in < m->hlen && k < n) {
			v[k++] = (ngtcp2_vec){m->hdr + in, m->hlen - in};
			in = m->hlen;
		}
		if (m->blen && in < (uint64_t)m->hlen + m->blen && k < n)
			v[k++] = (ngtcp2_vec){(uint8_t *)m->body + (in - m->hlen),
					      m->hlen + m->blen - in};
		p = m->off + m->hlen + m->blen;
	}
	return k;
}

static void advance(struct wl_stream *s, uint64_t n)
{
	s->woff += n;
	while (s->wmsg && s->woff >= s->wmsg->off + s->wmsg->hlen + s->wmsg->blen)
		s->wmsg = s->wmsg->next;
}

/* ngtcp2's callbacks (no call back into ngtcp2 but the window's extension) */

static ngtcp2_conn *get_conn(ngtcp2_crypto_conn_ref *ref)
{
	return ((struct wl_conn *)ref->user_data)->qc;
}

static void rand_cb(uint8_t *dest, size_t len, const ngtcp2_rand_ctx *ctx)
{
	(void)ctx;
	gnutls_rnd(GNUTLS_RND_RANDOM, dest, len);
}

static int new_cid_cb(ngtcp2_conn *qc, ngtcp2_cid *cid, uint8_t *token, size_t cidlen, void *user)
{
	struct wl_conn *c = user;

	(void)qc;
	if (gnutls_rnd(GNUTLS_RND_RANDOM, cid->data, cidlen) ||
	    gnutls_rnd(GNUTLS_RND_RANDOM, token, NGTCP2_STATELESS_RESET_TOKENLEN))
		return NGTCP2_ERR_CALLBACK_FAILURE;
	cid->datalen = cidlen;
	if (c->server && c->ncids < MAX_CIDS)
		c->cids[c->ncids++] = *cid;
	return 0;
}

static int remove_cid_cb(ngtcp2_conn *qc, const ngtcp2_cid *cid, void *user)
{
	struct wl_conn *c = user;
	int i;

	(void)qc;
	for (i = 0; i < c->ncids; i++)
		if (ngtcp2_cid_eq(&c->cids[i], cid)) {
			c->cids[i] = c->cids[--c->ncids];
			break;
		}
	return 0;
}

static int stream_open_cb(ngtcp2_conn *qc, int64_t id, void *user)
{
	struct wl_conn *c = user;
	struct wl_stream *s = stream_new(c, id);

	if (!s)
		return NGTCP2_ERR_CALLBACK_FAILURE;
	s->recv_only = !ngtcp2_is_bidi_stream(id);
	ngtcp2_conn_set_stream_user_data(qc, id, s);
	s->hd = c->hd->stream ? c->hd->stream(c, c->ctx, s, &s->ctx) : NULL;
	if (!s->hd)
		s->abort_req = true; /* refused */
	else if (!s->recv_only)
		s->owe_writable = true;
	c->again = true;
	return 0;
}

static int recv_data_cb(ngtcp2_conn *qc, uint32_t flags, int64_t id, uint64_t off,
			const uint8_t *data, size_t len, void *user, void *sud)
{
	struct wl_stream *s = sud;

	(void)off, (void)user;
	ngtcp2_conn_extend_max_stream_offset(qc, id, len);
	ngtcp2_conn_extend_max_offset(qc, len);
	if (!s || !s->hd || s->aborted)
		return 0;
	if (len && s->hd->data)
		s->hd->data(s, s->ctx, data, len);
	if ((flags & NGTCP2_STREAM_DATA_FLAG_FIN) && !s->peer_fin) {
		s->peer_fin = true;
		if (s->hd->fin)
			s->hd->fin(s, s->ctx);
	}
	return 0;
}

static int acked_cb(ngtcp2_conn *qc, int64_t id, uint64_t off, uint64_t len, void *user, void *sud)
{
	struct wl_stream *s = sud;
	struct msg *m;

	(void)qc, (void)id, (void)user;
	if (!s)
		return 0;
	if (off + len > s->acked)
		s->acked = off + len;
	while ((m = s->head) && m->off + m->hlen + m->blen <= s->acked && m != s->wmsg) {
		s->head = m->next;
		if (!s->head)
			s->tail = NULL;
		if (m->tag && s->hd && s->hd->sent)
			s->hd->sent(s, s->ctx, m->tag, false);
		free(m);
	}
	s->owe_writable = true;
	s->c->again = true;
	return 0;
}

static int stream_close_cb(ngtcp2_conn *qc, uint32_t flags, int64_t id, uint64_t code, void *user,
			   void *sud)
{
	struct wl_conn *c = user;
	struct wl_stream *s = sud;

	c->stream_lost += ngtcp2_conn_get_stream_loss_count(qc, id);
	if (!ngtcp2_conn_is_local_stream(qc, id)) {
		if (ngtcp2_is_bidi_stream(id))
			ngtcp2_conn_extend_max_streams_bidi(qc, 1);
		else
			ngtcp2_conn_extend_max_streams_uni(qc, 1);
	}
	if (!s)
		return 0;
	s->closed_ng = true;
	s->close_flagged_error = (flags & NGTCP2_STREAM_CLOSE_FLAG_APP_ERROR_CODE_SET) && code;
	c->again = true;
	return 0;
}

static void peer_aborted(struct wl_stream *s)
{
	if (!s || s->aborted)
		return;
	s->aborted = true;
	if (s->hd && s->hd->aborted)
		s->hd->aborted(s, s->ctx);
	s->abort_req = true;
	s->c->again = true;
}

static int stream_reset_cb(ngtcp2_conn *qc, int64_t id, uint64_t size, uint64_t code, void *user,
			   void *sud)
{
	(void)qc, (void)id, (void)size, (void)code, (void)user;
	peer_aborted(sud);
	return 0;
}

static int stop_sending_cb(ngtcp2_conn *qc, int64_t id, uint64_t code, void *user, void *sud)
{
	(void)qc, (void)id, (void)code, (void)user;
	peer_aborted(sud);
	return 0;
}

static const ngtcp2_callbacks callbacks = {
	.client_initial = ngtcp2_crypto_client_initial_cb,
	.recv_client_initial = ngtcp2_crypto_recv_client_initial_cb,
	.recv_crypto_data = ngtcp2_crypto_recv_crypto_data_cb,
	.encrypt = ngtcp2_crypto_encrypt_cb,
	.decrypt = ngtcp2_crypto_decrypt_cb,
	.hp_mask = ngtcp2_crypto_hp_mask_cb,
	.recv_stream_data = recv_data_cb,
	.acked_stream_data_offset = acked_cb,
	.stream_open = stream_open_cb,
	.stream_close = stream_close_cb,
	.recv_retry = ngtcp2_crypto_recv_retry_cb,
	.rand = rand_cb,
	.get_new_connection_id = new_cid_cb,
	.remove_connection_id = remove_cid_cb,
	.update_key = ngtcp2_crypto_update_key_cb,
	.stream_reset = stream_reset_cb,
	.delete_crypto_aead_ctx = ngtcp2_crypto_delete_crypto_aead_ctx_cb,
	.delete_crypto_cipher_ctx = ngtcp2_crypto_delete_crypto_cipher_ctx_cb,
	.get_path_challenge_data = ngtcp2_crypto_get_path_challenge_data_cb,
	.stream_stop_sending = stop_sending_cb,
	.version_negotiation = ngtcp2_crypto_version_negotiation_cb,
};

/* Writing: packets from the streams' queues, batched for GSO */

/* The next stream with bytes to send, in turn from the cursor (streams share the packets). */
static struct wl_stream *next_pending(struct wl_conn *c)
{
	struct wl_stream *s;

	for (s = c->cursor; s; s = s->next)
		if (pending(s))
			return s;
	for (s = c->streams; s && s != c->cursor; s = s->next)
		if (pending(s))
			return s;
	return NULL;
}

static void conn_write(struct wl_conn *c)
{
	const ngtcp2_tstamp ts = wl_now_ns();
	/* The largest ngtcp2 may write (its PMTUD probes too); it shapes packets to the path's. */
	const size_t max = ngtcp2_conn_get_max_tx_udp_payload_size(c->qc);
	const size_t mtu = max && max < PKT_MAX ? max : PKT_MAX;
	size_t quantum = ngtcp2_conn_get_send_quantum(c->qc) / mtu;
	size_t off = 0, seg = 0, npkts = 0, total = 0;
	ngtcp2_path_storage ps;
	struct wl_stream *s, *t;
	ngtcp2_pkt_info pi;

	if (quantum < 1)
		quantum = 1;
	if (quantum > GSO_MAX)
		quantum = GSO_MAX;
	ngtcp2_path_storage_zero(&ps);
	for (t = c->streams; t; t = t->next)
		t->blocked = false;
	while (!c->dead && total < quantum) {
		ngtcp2_vec v[16];
		size_t nv = 0;
		ngtcp2_ssize n, ndata = -1;
		uint32_t fl = NGTCP2_WRITE_STREAM_FLAG_MORE;
		bool fin = false;

		s = next_pending(c);
		if (s) {
			uint64_t sum = 0;
			size_t i;

			nv = stream_vecs(s, v, 16);
			for (i = 0; i < nv; i++)
				sum += v[i].len;
			/* The FIN goes with the last bytes queued. */
			fin = s->fin_req && s->woff + sum == s->qend;
			if (fin)
				fl |= NGTCP2_WRITE_STREAM_FLAG_FIN;
		} else {
			fl = 0;
		}
		n = ngtcp2_conn_writev_stream(c->qc, &ps.path, &pi, N.txbuf + off, mtu, &ndata, fl,
					      s ? s->id : -1, v, nv, ts);
		if (n == NGTCP2_ERR_WRITE_MORE) {
			s->blocked = ndata <= 0; /* nothing taken: not again this round */
			advance(s, ndata > 0 ? (uint64_t)ndata : 0);
			if (fin && s->woff == s->qend)
				s->fin_written = true;
			continue;
		}
		if (n == NGTCP2_ERR_STREAM_DATA_BLOCKED || n == NGTCP2_ERR_STREAM_SHUT_WR ||
		    n == NGTCP2_ERR_STREAM_NOT_FOUND) {
			s->blocked = true;
			continue;
		}
		if (n < 0) {
			if (npkts)
				send_batch(c, N.txbuf, off, seg);
			npkts = 0;
			conn_error(c, (int)n);
			break;
		}
		if (s && ndata >= 0) {
			c->cursor = s->next;
			advance(s, (uint64_t)ndata);
			if (fin && s->woff == s->qend)
				s->fin_written = true;
		}
		if (n == 0)
			break;
		total++;
		/* Segments of one size, the last perhaps shorter; else the batch goes first. */
		if (npkts && (size_t)n > seg) {
			send_batch(c, N.txbuf, off, seg);
			memmove(N.txbuf, N.txbuf + off, (size_t)n);
			off = 0;
			npkts = 0;
		}
		if (!npkts)
			seg = (size_t)n;
		off += (size_t)n;
		npkts++;
		if ((size_t)n < seg || npkts == GSO_MAX || !N.io.gso) {
			send_batch(c, N.txbuf, off, seg);
			off = 0;
			npkts = 0;
		}
	}
	if (npkts)
		send_batch(c, N.txbuf, off, seg);
	if (c->dead)
		return;
	/*
	 * Paced once the handshake is done: before an RTT sample, ngtcp2 0.12
	 * paces at cwnd / initial_rtt (333 ms), which held a client's Finished
	 * and its request ~26 ms behind its Initial.
	 */
	if (ngtcp2_conn_get_handshake_completed(c->qc))
		ngtcp2_conn_update_pkt_tx_time(c->qc, ts);
	/* More may go at once (as ngtcp2's examples, on the socket's writability): the timer fires now. */
	if (total >= quantum)
		c->more = true;
}

/* Service: what handlers asked for, the writes, then the handlers owed */

#define IMMINENT_NS 50000ull

static void arm(struct wl_conn *c)
{
	ngtcp2_tstamp e = ngtcp2_conn_get_expiry(c->qc);

	/*
	 * Set for no later already: it fires then, ngtcp2_conn_handle_expiry
	 * finds what is due (perhaps nothing), and it is set again. The expiry
	 * moves with every packet; a timerfd_settime each pass was 10-20% of a
	 * bulk run's CPU on either side.
	 */
	if (e >= c->armed)
		return;
	/*
	 * Due within IMMINENT_NS (pacing's next packet, mostly): handled on
	 * the loop's next pass, without a timer; setting one for it each
	 * pass cost more than the wait.
	 */
	if (e <= wl_now_ns() + IMMINENT_NS) {
		wl_loop_again(c->timer);
		return;
	}
	c->armed = e;
	wl_timer_arm(c->timer, e);
}

static void finish(struct wl_conn *c)
{
	struct wl_conn **pp;

	c->busy = 1; /* for good: what its handlers ask now does nothing */
	snapshot(c);
	while (c->streams) {
		struct wl_stream *s = c->streams;

		if (!s->closed_ng)
			c->stream_lost += ngtcp2_conn_get_stream_loss_count(c->qc, s->id);
		if (s->hd && s->hd->closed)
			s->hd->closed(s, s->ctx, false);
		stream_free(s, true);
	}
	if (c->timer >= 0) {
		wl_loop_del(c->timer);
		close(c->timer);
	}
	/*
	 * A client's socket: kept through its closing period if it closed
	 * the connection (ngtcp2 leaves answering the peer to us).
	 */
	if (!c->server && c->fd >= 0 && c->close_len) {
		wl_udp_io_closing(&N.io, c->fd, c->close_pkt, c->close_len,
				  3 * ngtcp2_conn_get_pto(c->qc));
	} else if (!c->server && c->fd >= 0) {
		wl_loop_del(c->fd);
		close(c->fd);
	}
	for (pp = &N.live; *pp && *pp != c; pp = &(*pp)->next)
		;
	if (*pp)
		*pp = c->next;
	c->hd->closed(c, c->ctx, &c->end);
	pthread_mutex_lock(&N.lock);
	if (N.stats_conn == c)
		N.stats_conn = NULL;
	pthread_mutex_unlock(&N.lock);
	ngtcp2_conn_del(c->qc);
	gnutls_deinit(c->tls);
	free(c);
}

static void service(struct wl_conn *c)
{
	struct wl_stream *s, *nx;
	int rounds = 0;

	if (c->busy) {
		c->again = true;
		return;
	}
	c->busy++;
	do {
		c->again = false;
		if (!c->end.connected && !c->dead && ngtcp2_conn_get_handshake_completed(c->qc)) {
			const char *cs = gnutls_ciphersuite_get(c->tls);

			c->end.connected = true;
			c->end.t_connected = wl_now_ns();
			c->resumed = gnutls_session_is_resumed(c->tls);
			/* The name the other QUIC workloads give, unless GnuTLS ran another. */
			if (cs && strcmp(cs, "TLS_AES_128_GCM_SHA256") && !N.cipher[0])
				snprintf(N.cipher, sizeof(N.cipher), "%s", cs);
			if (c->hd->connected)
				c->hd->connected(c, c->ctx);
		}
		for (s = c->streams; s && !c->dead; s = s->next)
			if (s->abort_req && !s->abort_done && !s->closed_ng) {
				s->abort_done = true;
				ngtcp2_conn_shutdown_stream(c->qc, s->id, WL_CLOSE_ERROR);
			}
		if (c->close_req && !c->dead) {
			ngtcp2_connection_close_error ccerr;

			ngtcp2_connection_close_error_default(&ccerr);
			ngtcp2_connection_close_error_set_application_error(&ccerr, c->close_code,
									    NULL, 0);
			send_close(c, &ccerr);
		}
		if (!c->dead)
			conn_write(c);
		for (s = c->streams; s; s = nx) {
			nx = s->next;
			if (!s->closed_ng)
				continue;
			if (s->hd && s->hd->closed)
				s->hd->closed(s, s->ctx,
					      !s->close_flagged_error && !s->aborted &&
						      (s->send_only || s->peer_fin) &&
						      (s->recv_only || s->fin_written));
			stream_free(s, true);
			nx = c->streams; /* the list may have changed */
		}
		for (s = c->streams; s && !c->dead; s = s->next)
			if (s->owe_writable && s->hd && !s->closed_ng && !s->fin_req &&
			    ng_room(s) > 0) {
				s->owe_writable = false;
				if (s->hd->writable)
					s->hd->writable(s, s->ctx);
			}
	} while (c->again && !c->dead && ++rounds < 16);
	snapshot(c);
	if (c->dead) {
		finish(c);
		return;
	}
	arm(c);
	if (c->again || c->more) {
		/*
		 * Asked meanwhile, or more to write: another service at once,
		 * after the loop's other fds. Not through the timer: arming it
		 * to fire now, a timerfd_settime and a read a pass, was 19% of
		 * a bulk sender's CPU.
		 */
		c->more = false;
		wl_loop_again(c->timer);
	}
	c->busy--;
}

static void on_timer(int fd, uint32_t events, void *arg)
{
	struct wl_conn *c = arg;
	uint64_t v;
	int rv;

	(void)events;
	if (read(fd, &v, sizeof(v)) == (ssize_t)sizeof(v))
		c->armed = UINT64_MAX - 1; /* it fired: disarmed now */
	else if (errno != EAGAIN)
		return;
	c->busy++;
	rv = ngtcp2_conn_handle_expiry(c->qc, wl_now_ns());
	if (rv)
		conn_error(c, rv);
	c->busy--;
	service(c);
}

/* Reading */

/* One datagram to its connection. */
static void feed(struct wl_conn *c, const uint8_t *p, size_t len)
{
	ngtcp2_path path = {
		{(struct sockaddr *)&c->local, sizeof(c->local)},
		{(struct sockaddr *)&c->remote, sizeof(c->remote)},
		NULL,
	};
	ngtcp2_pkt_info pi = {0};
	int rv;

	if (c->dead)
		return;
	c->pkts_recv++;
	c->busy++;
	rv = ngtcp2_conn_read_pkt(c->qc, &path, &pi, p, len, wl_now_ns());
	if (rv)
		conn_error(c, rv);
	c->busy--;
}

/* recvmsg into the read buffer: its length (0: nothing more), *seg the GRO segment size. */
static ssize_t recv_one(int fd, struct sockaddr_in *from, size_t *seg)
{
	return wl_udp_io_recv(&N.io, fd, N.rxbuf, RX_BUF, from, seg);
}

static void on_client_fd(int fd, uint32_t events, void *arg)
{
	struct wl_conn *c = arg;
	struct sockaddr_in from;
	size_t seg, off;
	ssize_t n;
	int i;

	(void)events;
	c->busy++;
	for (i = 0; i < RX_BURST && !c->dead && (n = recv_one(fd, &from, &seg)) > 0; i++)
		for (off = 0; off < (size_t)n && !c->dead; off += seg)
			feed(c, N.rxbuf + off, (size_t)n - off < seg ? (size_t)n - off : seg);
	c->busy--;
	service(c);
}

static struct wl_conn *find_cid(const uint8_t *dcid, size_t len)
{
	struct wl_conn *c;
	int i;

	for (c = N.live; c; c = c->next)
		for (i = 0; i < c->ncids; i++)
			if (c->cids[i].datalen == len && !memcmp(c->cids[i].data, dcid, len))
				return c;
	return NULL;
}

static struct wl_conn *conn_alloc(bool server, unsigned flags)
{
	struct wl_conn *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->server = server;
	c->flags = flags;
	c->fd = -1;
	c->timer = wl_timer_open();
	c->armed = UINT64_MAX - 1;
	c->ref.get_conn = get_conn;
	c->ref.user_data = c;
	if (c->timer < 0 || wl_loop_add(c->timer, EPOLLIN, on_timer, c)) {
		if (c->timer >= 0)
			close(c->timer);
		free(c);
		return NULL;
	}
	return c;
}

/* Client, --resume: a NewSessionTicket came; its session is the one to offer next. */
static int ticket_hook(gnutls_session_t tls, unsigned htype, unsigned when, unsigned incoming,
		       const gnutls_datum_t *msg)
{
	gnutls_datum_t data;

	(void)htype, (void)when, (void)incoming, (void)msg;
	if (gnutls_session_get_data2(tls, &data))
		return 0;
	gnutls_free(N.session.data);
	N.session = data;
	return 0;
}

static int tls_session(struct wl_conn *c)
{
	int rv = gnutls_init(&c->tls, (c->server ? GNUTLS_SERVER : GNUTLS_CLIENT) |
					      GNUTLS_NO_END_OF_EARLY_DATA);

	if (rv)
		return rv;
	rv = c->server ? ngtcp2_crypto_gnutls_configure_server_session(c->tls)
		       : ngtcp2_crypto_gnutls_configure_client_session(c->tls);
	if (rv)
		return GNUTLS_E_INTERNAL_ERROR;
	if ((rv = gnutls_priority_set_direct(c->tls, priority, NULL)) ||
	    (rv = gnutls_credentials_set(c->tls, GNUTLS_CRD_CERTIFICATE, N.cred)))
		return rv;
	gnutls_session_set_ptr(c->tls, &c->ref);
	gnutls_alpn_set_protocols(c->tls, &alpn, 1, GNUTLS_ALPN_MANDATORY);
	/* No verification: as msquic's client with NO_CERTIFICATE_VALIDATION. */
	if (!c->server)
		gnutls_server_name_set(c->tls, GNUTLS_NAME_DNS, "localhost", strlen("localhost"));
	if (N.o->resume && c->server)
		return gnutls_session_ticket_enable_server(c->tls, &N.ticket_key);
	if (N.o->resume) {
		gnutls_handshake_set_hook_function(c->tls, GNUTLS_HANDSHAKE_NEW_SESSION_TICKET,
						   GNUTLS_HOOK_POST, ticket_hook);
		/* Without a session yet, a full handshake: "resumed" will say so. */
		if ((c->flags & WL_CONN_RESUME) && N.session.size &&
		    (rv = gnutls_session_set_data(c->tls, N.session.data, N.session.size)))
			wl_warn("cannot offer the last session for resumption: %s",
				gnutls_strerror(rv));
	}
	return 0;
}

static void settings_params(ngtcp2_settings *set, ngtcp2_transport_params *tp, bool server)
{
	ngtcp2_settings_default(set);
	set->initial_ts = wl_now_ns();
	set->cc_algo = NGTCP2_CC_ALGO_CUBIC;
	set->max_window = MAX_DATA;
	set->max_stream_window = MAX_STREAM_DATA;
	set->handshake_timeout = HANDSHAKE_TIMEOUT_NS;
	ngtcp2_transport_params_default(tp);
	tp->initial_max_data = MAX_DATA;
	tp->initial_max_stream_data_bidi_local = MAX_STREAM_DATA;
	tp->initial_max_stream_data_bidi_remote = MAX_STREAM_DATA;
	tp->initial_max_stream_data_uni = MAX_STREAM_DATA;
	tp->initial_max_streams_bidi = server ? MAX_STREAMS : 0;
	/* The client's peer may open unidirectional streams too (HTTP/3's control and QPACK streams). */
	tp->initial_max_streams_uni = MAX_STREAMS;
	if (server && N.acc.peer_bidi_streams > MAX_STREAMS)
		tp->initial_max_streams_bidi = N.acc.peer_bidi_streams;
	if (server && N.acc.peer_uni_streams > MAX_STREAMS)
		tp->initial_max_streams_uni = N.acc.peer_uni_streams;
	tp->max_idle_timeout = IDLE_TIMEOUT_NS;
}

/* Server: a client's Initial that no connection knows; 0 or the connection. */
static struct wl_conn *server_accept(const uint8_t *p, size_t len, const struct sockaddr_in *from)
{
	ngtcp2_settings set;
	ngtcp2_transport_params tp;
	ngtcp2_pkt_hd hd;
	ngtcp2_cid scid;
	ngtcp2_path path;
	struct wl_conn *c;

	if (!N.listening || ngtcp2_accept(&hd, p, len))
		return NULL;
	if (!(c = conn_alloc(true, N.acc.flags)))
		return NULL;
	c->fd = N.listen_fd;
	c->local = N.addr;
	c->remote = *from;
	scid.datalen = CIDLEN;
	gnutls_rnd(GNUTLS_RND_RANDOM, scid.data, CIDLEN);
	settings_params(&set, &tp, true);
	tp.original_dcid = hd.dcid;
	path = (ngtcp2_path){{(struct sockaddr *)&c->local, sizeof(c->local)},
			     {(struct sockaddr *)&c->remote, sizeof(c->remote)},
			     NULL};
	if (ngtcp2_conn_server_new(&c->qc, &hd.scid, &scid, &path, hd.version, &callbacks, &set,
				   &tp, NULL, c) ||
	    tls_session(c)) {
		if (c->qc)
			ngtcp2_conn_del(c->qc);
		if (c->tls)
			gnutls_deinit(c->tls);
		wl_loop_del(c->timer);
		close(c->timer);
		free(c);
		return NULL;
	}
	ngtcp2_conn_set_tls_native_handle(c->qc, c->tls);
	c->cids[c->ncids++] = hd.dcid;
	c->cids[c->ncids++] = scid;
	c->hd = N.acc.accept(N.acc.arg, c, &c->ctx);
	if (!c->hd) {
		ngtcp2_conn_del(c->qc);
		gnutls_deinit(c->tls);
		wl_loop_del(c->timer);
		close(c->timer);
		free(c);
		return NULL;
	}
	c->next = N.live;
	N.live = c;
	pthread_mutex_lock(&N.lock);
	if ((c->flags & WL_CONN_STATS) && !N.stats_conn)
		N.stats_conn = c, c->stats = true;
	pthread_mutex_unlock(&N.lock);
	return c;
}

static void on_listen_fd(int fd, uint32_t events, void *arg)
{
	struct wl_conn *touched = NULL, *c;
	struct sockaddr_in from;
	size_t seg, off;
	ssize_t n;
	int i;

	(void)events, (void)arg;
	for (i = 0; i < RX_BURST && (n = recv_one(fd, &from, &seg)) > 0; i++)
		for (off = 0; off < (size_t)n; off += seg) {
			const uint8_t *p = N.rxbuf + off;
			size_t len = (size_t)n - off < seg ? (size_t)n - off : seg;
			ngtcp2_version_cid vc;

			if (ngtcp2_pkt_decode_version_cid(&vc, p, len, CIDLEN))
				continue;
			c = find_cid(vc.dcid, vc.dcidlen);
			if (!c)
				c = server_accept(p, len, &from);
			if (!c)
				continue;
			if (!c->touched) {
				c->touched = true;
				c->busy++; /* held until served below */
				c->tnext = touched;
				touched = c;
			}
			c->remote = from;
			feed(c, p, len);
		}
	while ((c = touched)) {
		touched = c->tnext;
		c->touched = false;
		c->busy--;
		service(c);
	}
}

/* The operations */

static int ng_init(const struct wl_opts *o, bool server)
{
	N.o = o;
	N.server = server;
	alpn.data = (unsigned char *)o->alpn;
	alpn.size = (unsigned)strlen(o->alpn);
	N.txbuf = malloc((size_t)GSO_MAX * PKT_MAX + PKT_MAX);
	N.rxbuf = malloc(RX_BUF);
	if (!N.txbuf || !N.rxbuf)
		return WL_EXIT_INTERNAL;
	if (!ngtcp2_version(0) || gnutls_global_init()) {
		wl_warn("cannot initialise ngtcp2 and GnuTLS");
		return WL_EXIT_LIB_OPEN;
	}
	return WL_EXIT_OK;
}

static int ng_setup(void)
{
	int rv;

	N.addr.sin_family = AF_INET;
	N.addr.sin_port = htons((uint16_t)N.o->port);
	if (inet_pton(AF_INET, N.o->addr, &N.addr.sin_addr) != 1) {
		wl_warn("bad IPv4 address %s", N.o->addr);
		return WL_EXIT_USAGE;
	}
	if ((rv = gnutls_certificate_allocate_credentials(&N.cred))) {
		wl_warn("gnutls_certificate_allocate_credentials failed: %s", gnutls_strerror(rv));
		return WL_EXIT_LIB_OPEN;
	}
	if (N.server && (rv = gnutls_certificate_set_x509_key_file(N.cred, N.o->cert, N.o->key,
								   GNUTLS_X509_FMT_PEM))) {
		wl_warn("loading the server certificate %s and key %s failed: %s", N.o->cert,
			N.o->key, gnutls_strerror(rv));
		return WL_EXIT_LIB_OPEN;
	}
	if (N.server && N.o->resume && (rv = gnutls_session_ticket_key_generate(&N.ticket_key))) {
		wl_warn("making a session ticket key failed: %s", gnutls_strerror(rv));
		return WL_EXIT_LIB_OPEN;
	}
	return WL_EXIT_OK;
}

static int ng_listen(const struct wl_accept *a)
{
	int code;

	N.acc = *a;
	code = wl_udp_io_listen(&N.io, &N.addr, N.o, on_listen_fd, NULL, &N.listen_fd);
	if (code)
		return code;
	N.listening = true;
	return WL_EXIT_OK;
}

/* Latecomers' Initials are dropped; the socket stays, for the live connections. */
static void ng_listen_stop(void)
{
	N.listening = false;
}

/* What a pattern asked for, in a service (wl_loop_asked). */
static void asked(struct wl_conn *c)
{
	wl_loop_asked(&c->again, c->busy, c->timer);
}

static int ng_connect(const struct wl_conn_handlers *h, void *ctx, unsigned flags,
		      struct wl_conn **out)
{
	ngtcp2_settings set;
	ngtcp2_transport_params tp;
	ngtcp2_cid dcid, scid;
	ngtcp2_path path;
	struct wl_conn *c = conn_alloc(false, flags);
	int rv;

	if (!c) {
		wl_warn("cannot make a connection: %s", strerror(errno));
		return WL_EXIT_INTERNAL;
	}
	c->hd = h;
	c->ctx = ctx;
	c->t_connect = wl_now_ns();
	c->remote = N.addr;
	c->fd = wl_udp_io_connect(&N.io, &N.addr, &c->local);
	if (c->fd < 0) {
		wl_warn("UDP socket to %s:%d failed: %s", N.o->addr, N.o->port, strerror(errno));
		goto fail;
	}
	dcid.datalen = scid.datalen = CIDLEN;
	gnutls_rnd(GNUTLS_RND_RANDOM, dcid.data, CIDLEN);
	gnutls_rnd(GNUTLS_RND_RANDOM, scid.data, CIDLEN);
	settings_params(&set, &tp, false);
	path = (ngtcp2_path){{(struct sockaddr *)&c->local, sizeof(c->local)},
			     {(struct sockaddr *)&c->remote, sizeof(c->remote)},
			     NULL};
	rv = ngtcp2_conn_client_new(&c->qc, &dcid, &scid, &path, NGTCP2_PROTO_VER_V1, &callbacks,
				    &set, &tp, NULL, c);
	if (rv) {
		wl_warn("ngtcp2_conn_client_new failed: %s", ngtcp2_strerror(rv));
		goto fail;
	}
	if ((rv = tls_session(c))) {
		wl_warn("setting up the GnuTLS session failed: %s", gnutls_strerror(rv));
		goto fail;
	}
	ngtcp2_conn_set_tls_native_handle(c->qc, c->tls);
	if (wl_loop_add(c->fd, EPOLLIN, on_client_fd, c)) {
		wl_warn("cannot watch the UDP socket: %s", strerror(errno));
		goto fail;
	}
	pthread_mutex_lock(&N.lock);
	if ((flags & WL_CONN_STATS) && !N.stats_conn)
		N.stats_conn = c, c->stats = true;
	pthread_mutex_unlock(&N.lock);
	*out = c;
	asked(c); /* the Initial */
	return WL_EXIT_OK;
fail:
	if (c->qc)
		ngtcp2_conn_del(c->qc);
	if (c->tls)
		gnutls_deinit(c->tls);
	if (c->fd >= 0)
		close(c->fd);
	wl_loop_del(c->timer);
	close(c->timer);
	free(c);
	return WL_EXIT_LIB_OPEN;
}

static int ng_open(struct wl_conn *c, const struct wl_stream_handlers *h, void *ctx, unsigned flags,
		   struct wl_stream **out)
{
	struct wl_stream *s;
	int64_t id;
	int rv;

	if (c->dead)
		return WL_EXIT_CONN_LOST;
	rv = (flags & WL_STREAM_UNI) ? ngtcp2_conn_open_uni_stream(c->qc, &id, NULL)
				     : ngtcp2_conn_open_bidi_stream(c->qc, &id, NULL);
	if (rv) {
		wl_warn("opening a stream failed: %s", ngtcp2_strerror(rv));
		return WL_EXIT_LIB_OPEN;
	}
	if (!(s = stream_new(c, id))) {
		ngtcp2_conn_shutdown_stream(c->qc, id, WL_CLOSE_ERROR);
		return WL_EXIT_INTERNAL;
	}
	ngtcp2_conn_set_stream_user_data(c->qc, id, s);
	s->hd = h;
	s->ctx = ctx;
	s->send_only = flags & WL_STREAM_UNI;
	s->owe_writable = true;
	*out = s;
	asked(c);
	return WL_EXIT_OK;
}

static int ng_send(struct wl_stream *s, const uint8_t *hdr, uint32_t hdr_len, const uint8_t *body,
		   uint32_t body_len, unsigned flags, void *tag)
{
	struct wl_conn *c = s->c;
	struct msg *m;

	if (c->dead || s->fin_req || s->aborted || hdr_len > WL_HDR_MAX)
		return WL_EXIT_CONN_LOST;
	if (hdr_len || body_len || tag) {
		if (!(m = malloc(sizeof(*m))))
			return WL_EXIT_INTERNAL;
		*m = (struct msg){.off = s->qend,
				  .hlen = hdr_len,
				  .blen = body_len,
				  .body = body,
				  .tag = tag};
		memcpy(m->hdr, hdr, hdr_len);
		if (s->tail)
			s->tail->next = m;
		else
			s->head = m;
		s->tail = m;
		if (!s->wmsg)
			s->wmsg = m;
		s->qend += hdr_len + body_len;
		advance(s, 0); /* an empty message at the write position is written */
	}
	if (flags & WL_SEND_FIN)
		s->fin_req = true;
	asked(c);
	return WL_EXIT_OK;
}

/* Ours are numbered by ngtcp2 as they are opened: known at once. */
static int64_t ng_stream_id(struct wl_stream *s)
{
	return s->id;
}

static void ng_abort(struct wl_stream *s)
{
	s->abort_req = true;
	asked(s->c);
}

static void ng_close(struct wl_conn *c, uint64_t code)
{
	if (c->dead || c->close_req)
		return;
	c->close_req = true;
	c->close_code = code;
	asked(c);
}

static void ng_conn_info(struct wl_conn *c, struct wl_dl *r)
{
	if (c->t_connect)
		r->t_connect = c->t_connect;
	if (c->end.connected)
		r->t_handshake = c->end.t_connected;
	if (c->end.connected) {
		r->has_resumed = r->has_early = true;
		r->resumed = c->resumed;
		r->early_data = false; /* not offered: this transport sends no 0-RTT */
	}
	/* Datagrams each way; retransmits: packets with STREAM frames declared lost. */
	r->has_counters = true;
	r->retransmits = c->stream_lost;
	r->packets_sent = c->pkts_sent;
	r->packets_received = c->pkts_recv;
}

static void ng_fini(void)
{
	wl_udp_io_closings_wait();
	if (N.listen_fd >= 0) {
		wl_loop_del(N.listen_fd);
		close(N.listen_fd);
	}
	if (N.cred)
		gnutls_certificate_free_credentials(N.cred);
	if (N.ticket_key.data) {
		gnutls_memset(N.ticket_key.data, 0, N.ticket_key.size);
		gnutls_free(N.ticket_key.data);
	}
	gnutls_free(N.session.data);
	free(N.txbuf);
	free(N.rxbuf);
}

const struct wl_transport wl_ngtcp2 = {
	.name = "ngtcp2",
	.multistream = true,
	.init = ng_init,
	.setup = ng_setup,
	.listen = ng_listen,
	.listen_stop = ng_listen_stop,
	.connect = ng_connect,
	.open = ng_open,
	.send = ng_send,
	.room = ng_room,
	.abort = ng_abort,
	.close = ng_close,
	.stream_id = ng_stream_id,
	.conn_info = ng_conn_info,
	.json_connected = json_library,
	.json_mark = ng_json_mark,
	.json_done = ng_json_done,
	.fini = ng_fini,
};
