// SPDX-License-Identifier: GPL-2.0-only
/*
 * The quiche transport (wl_transport.h): QUIC in Cloudflare's quiche,
 * through the C API the crate exports (its "ffi" feature), on the
 * BoringSSL that boring-sys vendors, driven by the one event loop
 * (wl_loop.c) as wl_ngtcp2.c's connections are: a client's connection has
 * a connected UDP socket of its own, the server one listening socket whose
 * datagrams go to their connection by DCID; each connection has a timerfd
 * for quiche's timeout. Every handler runs on the loop's thread. So every
 * pattern qprof-wl runs (wl_role.h) runs on quiche, written once.
 *
 * A plugin: qprof-wl loads build/lib/libqprof-wl-quiche.so for --stack
 * quiche (wl_plugin.c), whose BoringSSL stays inside it (linked with
 * --exclude-libs) beside the OpenSSL qprof-wl's TCP stacks use; its calls
 * into qprof-wl (the loop, the reports) resolve against the executable.
 *
 * TLS: each connection's SSL is made here, from a context that offers TLS
 * 1.3's TLS_AES_128_GCM_SHA256 alone (BoringSSL's cipher lists leave TLS
 * 1.3 alone; SSL_CTX_set1_tls13_ciphers does not, and quiche's own
 * configuration does not reach it), ALPN "qprof", the run's certificate
 * (server), no chain check (client: the certificate is self-signed, as
 * for the other stacks). Each handshake proves the suite it ran.
 *
 * quiche copies what it is given to send: a message handed to wl_send
 * waits here only until quiche takes it (its header copied here, its
 * body in the pattern region or the caller's own buffer), and wl_room() is
 * the stream's capacity in quiche (flow control and congestion window)
 * less what waits. A stream is closed once quiche has collected it (its
 * FIN acknowledged and the peer's read, or aborted).
 *
 * Sending: every packet quiche has, consecutive ones of one size to one
 * peer in one sendmsg with a UDP_SEGMENT cmsg (GSO), sent at once (quiche
 * computes a release time, which quiche's apps without SO_TXTIME do not
 * wait for either); receiving splits what UDP_GRO coalesced. Each as the
 * kernel takes it (qprof's offload interposer makes it refuse them).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/ssl.h>
#include <quiche.h>

#include "../wl_boringssl.h"
#include "../wl_quiclib.h"
#include "../wl_transport.h"
#include "../wl_udpio.h"

#define CIDLEN 16		  /* our connection IDs: a short header's DCID is ours */
#define GSO_MAX 64		  /* segments a sendmsg (the kernel's UDP_MAX_SEGMENTS) */
#define GSO_MAX_BYTES 65507	  /* and bytes: an IPv4 UDP payload's most */
#define MAX_DATAGRAM 1350	  /* each way: quiche's apps' (quiche-server's MAX_DATAGRAM_SIZE) */
#define PKT_MAX 1500		  /* a packet's room in the batch buffer */
#define RX_BUF 65536		  /* a recvmsg's: what GRO coalesces at most */
#define RX_BURST 64		  /* recvmsg calls before the connections are served */
#define APP_BUF (128u << 10)	  /* what one stream_recv copies out at most */
#define CONN_WINDOW (64ull << 20) /* initial_max_data and the window's cap */
#define STREAM_WINDOW (16ull << 20) /* each stream's */
#define MAX_STREAMS 128		    /* initial_max_streams_*: at least WL_MAX_STREAMS */
#define FIRST_ROOM (64u << 10)	    /* a stream quiche has not seen yet takes this first */
#define IDLE_TIMEOUT_MS 30000
#define HANDSHAKE_TIMEOUT_NS 10000000000ull /* as msquic's (wl_quic.c) */
#define CIPHER_ID 0x1301		    /* TLS_AES_128_GCM_SHA256 */
#define CIPHER "TLS13_AES_128_GCM_SHA256"

/* The boring-sys version the build took (workloads/rs/quiche-ffi). */
const char *qprof_boring_sys_version(void);

struct wl_stream {
	struct wl_conn *c;
	struct wl_stream *next;
	int64_t id;
	const struct wl_stream_handlers *hd; /* NULL: refused */
	void *ctx;
	bool send_only, recv_only, started;
	struct wl_msgq q; /* not yet taken by quiche */
	bool peer_fin, aborted, abort_req, abort_done;
	bool starved; /* room() said 0: writable is owed once there is room */
	bool owe_writable, gone;
};

struct wl_conn {
	quiche_conn *qc;
	SSL *ssl;
	const struct wl_conn_handlers *hd;
	void *ctx;
	unsigned flags;
	bool server;
	int fd, timer;
	struct sockaddr_in local, remote;
	struct wl_stream *streams;
	struct wl_end end;
	uint64_t t_connect;
	uint64_t armed; /* when the timer fires; UINT64_MAX - 1: not set (it fired, or new) */
	int busy;	/* in a read, a timer or a service: handlers' asks wait */
	bool again;	/* something was asked meanwhile */
	bool dead;	/* over: its closed handlers come with the service's end */
	bool close_req;
	uint64_t close_code;
	bool touched, stats;
	int64_t next_bidi, next_uni; /* our next stream IDs */
	uint8_t cid[CIDLEN], odcid[QUICHE_MAX_CONN_ID_LEN];
	size_t odcid_len;
	struct wl_conn *next, *tnext; /* server: the live ones; touched in a read */
	uint64_t counts[4];	      /* its part of N.sums: sent, lost, lost bytes, resent */
	/* Client: the CONNECTION_CLOSE it sent, for its closing period (finish). */
	bool closing;
	size_t close_len;
	uint8_t close_pkt[WL_CLOSE_MAX];
};

static struct {
	const struct wl_opts *o;
	bool server;
	struct sockaddr_in addr;
	SSL_CTX *tls;
	quiche_config *cfg;
	struct wl_accept acc;
	int listen_fd;
	bool listening;
	struct wl_udp_io io; /* the sockets' datapath (wl_udpio.c, qprof-wl's) */
	struct wl_conn *live;
	uint8_t *txbuf, *rxbuf, *appbuf;
	/* What marks report, kept by the loop's thread under its lock. */
	struct wl_quic_sums sums;
	struct wl_conn *stats_conn; /* under sums.lock */
	/* --resume: the client's last session (the server's tickets are BoringSSL's, per context) */
	uint8_t *session;
	size_t session_len;
} N = {.listen_fd = -1, .sums.lock = PTHREAD_MUTEX_INITIALIZER, .sums.has_retrans = true};

static void service(struct wl_conn *c);

/* Statistics and reports */

static void json_library(struct wl_json *j)
{
	char crypto[160];
	const struct wl_quic_desc d = {
		.name = "quiche",
		.version = quiche_version(),
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
		.congestion_control = "cubic",
		.pacing = false,
	};

	snprintf(crypto, sizeof(crypto),
		 "BoringSSL as boring-sys %s vendors and builds it (BORINGSSL_API_VERSION %d)",
		 qprof_boring_sys_version(), BORINGSSL_API_VERSION);
	wl_quic_json_library(j, &d, &N.sums, &N.io);
}

static void q_json_mark(struct wl_json *j)
{
	wl_quic_sums_json(&N.sums, &N.io, j);
}

static void q_json_done(struct wl_json *j, const struct wl_end *last)
{
	wl_quic_json_end(j, last);
	json_library(j);
	q_json_mark(j);
}

/* The connection's counts into the sums, and (the stats connection) its levels. */
static void snapshot(struct wl_conn *c)
{
	quiche_stats st;
	quiche_path_stats ps;
	uint64_t now[4], levels[4];
	bool have = false;
	size_t i;

	if (!c->qc)
		return;
	quiche_conn_stats(c->qc, &st);
	now[0] = st.sent;
	now[1] = st.lost;
	now[2] = st.lost_bytes;
	now[3] = st.retrans; /* packets with retransmitted data */
	for (i = 0; c->stats && i < st.paths_count && !have; i++)
		if (!quiche_conn_path_stats(c->qc, i, &ps) && ps.active) {
			levels[0] = ps.cwnd;
			levels[1] = ps.rtt / 1000;
			levels[2] = ps.pmtu;
			levels[3] = WL_QUIC_NO_LEVEL; /* quiche says no pacing rate */
			have = true;
		}
	wl_quic_sums_add(&N.sums, c->counts, now, have ? levels : NULL);
}

/* Sockets: qprof-wl's one datapath (wl_udpio.c) */

/* One sendmsg of len bytes to `to`, segments of seg (GSO when more than one); a full socket waits. */
static void send_batch(struct wl_conn *c, const struct sockaddr_in *to, uint8_t *buf, size_t len,
		       size_t seg)
{
	wl_udp_io_send(&N.io, c->fd, c->server ? to : NULL, buf, len, seg);
	if (c->closing && !c->close_len && !c->server && seg <= sizeof(c->close_pkt)) {
		c->close_len = len < seg ? len : seg;
		memcpy(c->close_pkt, buf, c->close_len);
	}
}

/* Ends and errors */

static void set_transport_end(struct wl_conn *c, const char *why)
{
	wl_end_transport(&c->end, why);
}

/* The connection is over (closed, draining, or failed): what ended it, into c->end. */
static void conn_over(struct wl_conn *c)
{
	bool app;
	uint64_t code;
	const uint8_t *reason;
	size_t rlen;

	c->dead = true;
	if (c->end.closed_by_transport || c->end.closed_by_peer)
		return;
	if (quiche_conn_peer_error(c->qc, &app, &code, &reason, &rlen)) {
		if (app || code == 0) {
			c->end.closed_by_peer = true;
			c->end.peer_error = app ? code : 0;
			c->end.t_peer_closed = wl_now_ns();
		} else {
			set_transport_end(c,
					  "the peer closed the connection with a transport error");
		}
	} else if (quiche_conn_is_timed_out(c->qc)) {
		set_transport_end(c, c->end.connected ? "idle timeout" : "handshake timeout");
	} else if (quiche_conn_local_error(c->qc, &app, &code, &reason, &rlen) && !app && code) {
		set_transport_end(c, code >= 0x100 && code < 0x200
					     ? "TLS handshake failed"
					     : "quiche closed the connection");
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

static struct wl_stream *stream_of(struct wl_conn *c, int64_t id)
{
	struct wl_stream *s;

	for (s = c->streams; s; s = s->next)
		if (s->id == id)
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

static void stream_free(struct wl_stream *s)
{
	struct wl_stream **pp;

	wl_msgq_clear(&s->q, msgq_sent, s);
	for (pp = &s->c->streams; *pp && *pp != s; pp = &(*pp)->next)
		;
	if (*pp)
		*pp = s->next;
	free(s);
}

static size_t q_room(struct wl_stream *s)
{
	ssize_t cap;
	size_t room;

	if (s->c->dead || s->q.fin_req || s->aborted || s->recv_only)
		return 0;
	cap = s->started ? quiche_conn_stream_capacity(s->c->qc, (uint64_t)s->id) : FIRST_ROOM;
	room = cap > 0 && (uint64_t)cap > s->q.queued ? (size_t)((uint64_t)cap - s->q.queued) : 0;
	if (!room)
		s->starved = true;
	return room;
}

/* Ours are numbered as they are opened, in order: known at once. */
static int64_t q_stream_id(struct wl_stream *s)
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
	s->c->again = true;
}

/* wl_msgq_write's hand to quiche (which drops a FIN from a partial write: the next one has it). */
static ssize_t msgq_take(void *arg, const uint8_t *p, size_t len, bool fin)
{
	struct wl_stream *s = arg;
	uint64_t err = 0;
	ssize_t n = quiche_conn_stream_send(s->c->qc, (uint64_t)s->id, p, len, fin, &err);

	if (n == QUICHE_ERR_STREAM_STOPPED || n == QUICHE_ERR_STREAM_RESET)
		return WL_MSGQ_ABORTED;
	if (n == QUICHE_ERR_DONE || (n == 0 && len))
		return WL_MSGQ_FULL; /* no room: on when the peer's ACKs and credit come */
	if (n < 0)
		return len ? WL_MSGQ_FAILED : WL_MSGQ_FULL;
	s->started = true;
	return n;
}

/* What waits on s, to quiche, as far as it takes it; the FIN with the last byte. */
static void stream_write(struct wl_stream *s)
{
	int rv = wl_msgq_write(&s->q, msgq_take, msgq_sent, s);

	if (rv == WL_MSGQ_ABORTED) {
		peer_aborted(s);
	} else if (rv == WL_MSGQ_FAILED) {
		set_transport_end(s->c, "quiche refused a stream's data");
		s->c->dead = true;
	}
}

/* Reading: every readable stream's bytes to its handlers; a stream the peer opened first. */
static void streams_read(struct wl_conn *c)
{
	quiche_stream_iter *it = quiche_conn_readable(c->qc);
	uint64_t id;

	while (it && quiche_stream_iter_next(it, &id) && !c->dead) {
		struct wl_stream *s = stream_of(c, (int64_t)id);

		/* One of ours, gone (aborted): nothing more for it. */
		if (!s && (id & 1) != (c->server ? 0 : 1)) {
			quiche_conn_stream_shutdown(c->qc, id, QUICHE_SHUTDOWN_READ,
						    WL_CLOSE_ERROR);
			continue;
		}
		if (!s) {
			if (!(s = stream_new(c, (int64_t)id))) {
				c->dead = true;
				set_transport_end(c, "out of memory");
				break;
			}
			s->started = true;
			s->recv_only = (id & 2) != 0;
			s->hd = c->hd->stream ? c->hd->stream(c, c->ctx, s, &s->ctx) : NULL;
			if (!s->hd)
				s->abort_req = true; /* refused */
			else if (!s->recv_only)
				s->owe_writable = true;
		}
		for (;;) {
			bool fin = false;
			uint64_t err = 0;
			ssize_t n =
				quiche_conn_stream_recv(c->qc, id, N.appbuf, APP_BUF, &fin, &err);

			if (n == QUICHE_ERR_STREAM_RESET) {
				peer_aborted(s);
				break;
			}
			if (n < 0)
				break;
			if (n && s->hd && !s->aborted && s->hd->data)
				s->hd->data(s, s->ctx, N.appbuf, (size_t)n);
			if (fin && !s->peer_fin) {
				s->peer_fin = true;
				if (s->hd && !s->aborted && s->hd->fin)
					s->hd->fin(s, s->ctx);
			}
			if (fin || !n)
				break;
		}
	}
	if (it)
		quiche_stream_iter_free(it);
}

/* Over once quiche has collected it (asked of a stream that is done both ways), or aborted. */
static bool stream_over(struct wl_stream *s)
{
	if (s->abort_done)
		return true;
	if (!(s->send_only || s->peer_fin) || !(s->recv_only || s->q.fin_written))
		return false;
	/* A stream only the peer sends on is quiche's to collect once its FIN is read. */
	if (s->recv_only)
		return true;
	return quiche_conn_stream_capacity(s->c->qc, (uint64_t)s->id) ==
	       QUICHE_ERR_INVALID_STREAM_STATE;
}

/* Writing: packets, batched for GSO */

static void conn_flush(struct wl_conn *c)
{
	struct sockaddr_in to = c->remote;
	size_t off = 0, seg = 0, npkts = 0;
	quiche_send_info si;

	while (!c->dead) {
		ssize_t n = quiche_conn_send(c->qc, N.txbuf + off, PKT_MAX, &si);
		bool same;

		if (n == QUICHE_ERR_DONE)
			break;
		if (n < 0) {
			conn_over(c);
			break;
		}
		same = si.to_len == sizeof(to) && !memcmp(&si.to, &to, sizeof(to));
		/*
		 * Segments of one size to one peer, the last perhaps shorter,
		 * within one UDP payload; else the batch goes first.
		 */
		if (npkts && ((size_t)n > seg || !same || off + (size_t)n > GSO_MAX_BYTES)) {
			send_batch(c, &to, N.txbuf, off, seg);
			memmove(N.txbuf, N.txbuf + off, (size_t)n);
			off = 0;
			npkts = 0;
		}
		if (!npkts) {
			seg = (size_t)n;
			if (si.to_len == sizeof(to))
				memcpy(&to, &si.to, sizeof(to));
		}
		off += (size_t)n;
		npkts++;
		if ((size_t)n < seg || npkts == GSO_MAX || !N.io.gso) {
			send_batch(c, &to, N.txbuf, off, seg);
			off = 0;
			npkts = 0;
		}
	}
	if (npkts)
		send_batch(c, &to, N.txbuf, off, seg);
}

/* Service: what handlers asked for, the writes, then the handlers owed */

#define IMMINENT_NS 50000ull

static void arm(struct wl_conn *c)
{
	const uint64_t t = quiche_conn_timeout_as_nanos(c->qc), now = wl_now_ns();
	uint64_t e;

	if (t == UINT64_MAX)
		return;
	e = now + t;
	/*
	 * Set for no later already: it fires then, quiche_conn_on_timeout
	 * finds what is due (perhaps nothing), and it is set again; a
	 * timerfd_settime a pass cost ngtcp2's transport 10-20% of a bulk
	 * run's CPU (wl_ngtcp2.c). Due within IMMINENT_NS: the loop's next pass.
	 */
	if (e >= c->armed)
		return;
	if (e <= now + IMMINENT_NS) {
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

		if (s->hd && s->hd->closed)
			s->hd->closed(s, s->ctx, false);
		stream_free(s);
	}
	wl_loop_del(c->timer);
	close(c->timer);
	/*
	 * A client's socket: kept through its closing period if it closed the
	 * connection (quiche drops what arrives once closed); quiche's timer
	 * now is the period's end, three PTOs on.
	 */
	if (!c->server && c->fd >= 0 && c->close_len) {
		wl_udp_io_closing(&N.io, c->fd, c->close_pkt, c->close_len,
				  quiche_conn_timeout_as_nanos(c->qc));
	} else if (!c->server && c->fd >= 0) {
		wl_loop_del(c->fd);
		close(c->fd);
	}
	for (pp = &N.live; *pp && *pp != c; pp = &(*pp)->next)
		;
	if (*pp)
		*pp = c->next;
	c->hd->closed(c, c->ctx, &c->end);
	pthread_mutex_lock(&N.sums.lock);
	if (N.stats_conn == c)
		N.stats_conn = NULL;
	pthread_mutex_unlock(&N.sums.lock);
	quiche_conn_free(c->qc); /* and its SSL */
	free(c);
}

/* The handshake is done: the suite it ran proved, the session kept (--resume), connected said. */
static void handshake_done(struct wl_conn *c)
{
	const SSL_CIPHER *cs = SSL_get_current_cipher(c->ssl);
	const char *group = SSL_get_curve_name(SSL_get_curve_id(c->ssl));

	c->end.connected = true;
	c->end.t_connected = wl_now_ns();
	if (!cs || SSL_CIPHER_get_protocol_id(cs) != CIPHER_ID) {
		c->end.exit_code = WL_EXIT_TLS_CONFIG;
		c->end.transport_status =
			"the connection runs another suite than TLS_AES_128_GCM_SHA256";
		c->close_req = true;
		c->close_code = WL_CLOSE_ERROR;
		return;
	}
	wl_quic_sums_group(&N.sums, group);
	if (c->hd->connected)
		c->hd->connected(c, c->ctx);
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
		if (!c->dead && (quiche_conn_is_closed(c->qc) || quiche_conn_is_draining(c->qc)))
			conn_over(c);
		if (!c->end.connected && !c->dead && quiche_conn_is_established(c->qc))
			handshake_done(c);
		if (!c->dead)
			streams_read(c);
		for (s = c->streams; s && !c->dead; s = s->next)
			if (s->abort_req && !s->abort_done) {
				uint64_t code = WL_CLOSE_ERROR;

				s->abort_done = true;
				if (s->started || s->recv_only) {
					quiche_conn_stream_shutdown(c->qc, (uint64_t)s->id,
								    QUICHE_SHUTDOWN_READ, code);
					quiche_conn_stream_shutdown(c->qc, (uint64_t)s->id,
								    QUICHE_SHUTDOWN_WRITE, code);
				}
			}
		if (c->close_req && !c->dead) {
			quiche_conn_close(c->qc, true, c->close_code, NULL, 0);
			c->closing = true;
			conn_flush(c); /* the CONNECTION_CLOSE: the connection is over for us */
			c->dead = true;
		}
		for (s = c->streams; s && !c->dead; s = s->next)
			if (!s->abort_done && (s->q.head || (s->q.fin_req && !s->q.fin_written)))
				stream_write(s);
		if (!c->dead)
			conn_flush(c);
		for (s = c->streams; s; s = nx) {
			nx = s->next;
			if (c->dead || !stream_over(s))
				continue;
			if (s->hd && s->hd->closed)
				s->hd->closed(s, s->ctx, !s->aborted && !s->abort_done);
			stream_free(s);
			nx = c->streams; /* the list may have changed */
		}
		for (s = c->streams; s && !c->dead; s = s->next)
			if ((s->owe_writable || s->starved) && s->hd && !s->q.fin_req &&
			    !s->aborted && !s->recv_only) {
				s->owe_writable = s->starved = false;
				if (q_room(s) > 0) {
					s->starved = false;
					if (s->hd->writable)
						s->hd->writable(s, s->ctx);
				}
			}
	} while (c->again && !c->dead && ++rounds < 16);
	snapshot(c);
	if (c->dead) {
		finish(c);
		return;
	}
	arm(c);
	if (c->again)
		wl_loop_again(c->timer);
	c->busy--;
}

static void on_timer(int fd, uint32_t events, void *arg)
{
	struct wl_conn *c = arg;
	uint64_t v;

	(void)events;
	if (read(fd, &v, sizeof(v)) == (ssize_t)sizeof(v))
		c->armed = UINT64_MAX - 1; /* it fired: disarmed now */
	else if (errno != EAGAIN)
		return;
	/* A handshake that never completes: given up, as msquic's and ngtcp2's. */
	if (!c->end.connected && !c->dead && wl_now_ns() - c->t_connect > HANDSHAKE_TIMEOUT_NS) {
		set_transport_end(c, "handshake timeout");
		c->dead = true;
	} else {
		quiche_conn_on_timeout(c->qc);
	}
	service(c);
}

/* Reading */

/* One datagram to its connection. */
static void feed(struct wl_conn *c, uint8_t *p, size_t len, const struct sockaddr_in *from)
{
	quiche_recv_info ri = {
		.from = (struct sockaddr *)from,
		.from_len = sizeof(*from),
		.to = (struct sockaddr *)&c->local,
		.to_len = sizeof(c->local),
	};
	ssize_t rv;

	if (c->dead)
		return;
	c->busy++;
	rv = quiche_conn_recv(c->qc, p, len, &ri);
	if (rv < 0 && rv != QUICHE_ERR_DONE && quiche_conn_is_closed(c->qc))
		conn_over(c);
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
			feed(c, N.rxbuf + off, (size_t)n - off < seg ? (size_t)n - off : seg,
			     &from);
	c->busy--;
	service(c);
}

static struct wl_conn *find_cid(const uint8_t *dcid, size_t len)
{
	struct wl_conn *c;

	for (c = N.live; c; c = c->next)
		if ((len == CIDLEN && !memcmp(c->cid, dcid, CIDLEN)) ||
		    (len == c->odcid_len && !memcmp(c->odcid, dcid, len)))
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
	/* Client-initiated bidi streams are 0, 4, ...; uni 2, 6, ...; the server's one more. */
	c->next_bidi = server ? 1 : 0;
	c->next_uni = server ? 3 : 2;
	c->t_connect = wl_now_ns();
	if (c->timer < 0 || wl_loop_add(c->timer, EPOLLIN, on_timer, c)) {
		if (c->timer >= 0)
			close(c->timer);
		free(c);
		return NULL;
	}
	if (getrandom(c->cid, CIDLEN, 0) != CIDLEN) {
		wl_loop_del(c->timer);
		close(c->timer);
		free(c);
		return NULL;
	}
	return c;
}

static void conn_drop(struct wl_conn *c)
{
	if (c->qc)
		quiche_conn_free(c->qc);
	else if (c->ssl)
		SSL_free(c->ssl);
	if (!c->server && c->fd >= 0)
		close(c->fd);
	wl_loop_del(c->timer);
	close(c->timer);
	free(c);
}

/* quiche's connection over an SSL of our context (quiche owns the SSL from here). */
static int conn_make(struct wl_conn *c)
{
	if (!(c->ssl = SSL_new(N.tls)))
		return -1;
	if (!c->server) {
		SSL_set_tlsext_host_name(c->ssl, "localhost");
		if ((c->flags & WL_CONN_RESUME) && N.session) {
			SSL_SESSION *sess = SSL_SESSION_from_bytes(N.session, N.session_len, N.tls);

			/* Without one, a full handshake: "resumed" will say so. */
			if (sess) {
				SSL_set_session(c->ssl, sess);
				SSL_SESSION_free(sess);
			}
		}
	}
	c->qc = quiche_conn_new_with_tls(c->cid, CIDLEN, NULL, 0, (struct sockaddr *)&c->local,
					 sizeof(c->local), (struct sockaddr *)&c->remote,
					 sizeof(c->remote), N.cfg, c->ssl, c->server);
	if (!c->qc)
		c->ssl = NULL; /* quiche's now, freed with its failed connection */
	return c->qc ? 0 : -1;
}

/* Server: a client's Initial that no connection knows; NULL or the connection. */
static struct wl_conn *server_accept(const uint8_t *dcid, size_t dcid_len,
				     const struct sockaddr_in *from)
{
	struct wl_conn *c;

	if (!N.listening || dcid_len > QUICHE_MAX_CONN_ID_LEN)
		return NULL;
	if (!(c = conn_alloc(true, N.acc.flags)))
		return NULL;
	c->fd = N.listen_fd;
	c->local = N.addr;
	c->remote = *from;
	memcpy(c->odcid, dcid, dcid_len);
	c->odcid_len = dcid_len;
	if (conn_make(c)) {
		conn_drop(c);
		return NULL;
	}
	c->hd = N.acc.accept(N.acc.arg, c, &c->ctx);
	if (!c->hd) {
		conn_drop(c);
		return NULL;
	}
	c->next = N.live;
	N.live = c;
	pthread_mutex_lock(&N.sums.lock);
	if ((c->flags & WL_CONN_STATS) && !N.stats_conn)
		N.stats_conn = c, c->stats = true;
	pthread_mutex_unlock(&N.sums.lock);
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
			uint8_t *p = N.rxbuf + off;
			size_t len = (size_t)n - off < seg ? (size_t)n - off : seg;
			uint8_t scid[QUICHE_MAX_CONN_ID_LEN], dcid[QUICHE_MAX_CONN_ID_LEN];
			uint8_t token[256];
			size_t scid_len = sizeof(scid), dcid_len = sizeof(dcid);
			size_t token_len = sizeof(token);
			uint32_t version;
			uint8_t type;

			if (quiche_header_info(p, len, CIDLEN, &version, &type, scid, &scid_len,
					       dcid, &dcid_len, token, &token_len) < 0)
				continue;
			c = find_cid(dcid, dcid_len);
			/* quiche_header_info says an Initial as 1. */
			if (!c && type == 1 && quiche_version_is_supported(version))
				c = server_accept(dcid, dcid_len, &from);
			if (!c)
				continue;
			if (!c->touched) {
				c->touched = true;
				c->busy++; /* held until served below */
				c->tnext = touched;
				touched = c;
			}
			c->remote = from;
			feed(c, p, len, &from);
		}
	while ((c = touched)) {
		touched = c->tnext;
		c->touched = false;
		c->busy--;
		service(c);
	}
}

/* The operations */

/* Client, --resume: the server's ticket came; its session is the one to offer next. */
static int new_session(SSL *ssl, SSL_SESSION *sess)
{
	uint8_t *buf = NULL;
	size_t len = 0;

	(void)ssl;
	if (SSL_SESSION_to_bytes(sess, &buf, &len)) {
		OPENSSL_free(N.session);
		N.session = buf;
		N.session_len = len;
	}
	return 0; /* not kept: ours is the copy */
}

static int q_init(const struct wl_opts *o, bool server)
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

static int q_setup(void)
{
	static const uint16_t suite = CIPHER_ID;
	int code;

	N.addr.sin_family = AF_INET;
	N.addr.sin_port = htons((uint16_t)N.o->port);
	if (inet_pton(AF_INET, N.o->addr, &N.addr.sin_addr) != 1) {
		wl_warn("bad IPv4 address %s", N.o->addr);
		return WL_EXIT_USAGE;
	}
	N.tls = SSL_CTX_new(TLS_method());
	if (!N.tls || !SSL_CTX_set1_tls13_ciphers(N.tls, &suite, NULL, 1) ||
	    !SSL_CTX_set_min_proto_version(N.tls, TLS1_3_VERSION)) {
		wl_warn("BoringSSL refuses TLS_AES_128_GCM_SHA256 alone");
		return WL_EXIT_TLS_CONFIG;
	}
	code = wl_bssl_setup(N.tls, N.o, N.server, new_session);
	if (code)
		return code;
	N.cfg = quiche_config_new(QUICHE_PROTOCOL_VERSION);
	if (!N.cfg) {
		wl_warn("quiche refuses its configuration");
		return WL_EXIT_LIB_OPEN;
	}
	quiche_config_verify_peer(N.cfg, false);
	quiche_config_set_max_idle_timeout(N.cfg, IDLE_TIMEOUT_MS);
	quiche_config_set_max_recv_udp_payload_size(N.cfg, MAX_DATAGRAM);
	quiche_config_set_max_send_udp_payload_size(N.cfg, MAX_DATAGRAM);
	quiche_config_set_initial_max_data(N.cfg, CONN_WINDOW);
	quiche_config_set_max_connection_window(N.cfg, CONN_WINDOW);
	quiche_config_set_initial_max_stream_data_bidi_local(N.cfg, STREAM_WINDOW);
	quiche_config_set_initial_max_stream_data_bidi_remote(N.cfg, STREAM_WINDOW);
	quiche_config_set_initial_max_stream_data_uni(N.cfg, STREAM_WINDOW);
	quiche_config_set_max_stream_window(N.cfg, STREAM_WINDOW);
	quiche_config_set_initial_max_streams_uni(N.cfg, MAX_STREAMS);
	quiche_config_set_initial_max_streams_bidi(N.cfg, MAX_STREAMS);
	/* One path (quiche's apps' default): every packet of a GSO run goes to the one peer address. */
	quiche_config_set_disable_active_migration(N.cfg, true);
	return WL_EXIT_OK;
}

static int q_listen(const struct wl_accept *a)
{
	int code;

	N.acc = *a;
	if (a->peer_bidi_streams > MAX_STREAMS)
		quiche_config_set_initial_max_streams_bidi(N.cfg, a->peer_bidi_streams);
	if (a->peer_uni_streams > MAX_STREAMS)
		quiche_config_set_initial_max_streams_uni(N.cfg, a->peer_uni_streams);
	code = wl_udp_io_listen(&N.io, &N.addr, N.o, on_listen_fd, NULL, &N.listen_fd);
	if (code)
		return code;
	N.listening = true;
	return WL_EXIT_OK;
}

/* Latecomers' Initials are dropped; the socket stays, for the live connections. */
static void q_listen_stop(void)
{
	N.listening = false;
}

/* What a pattern asked for, in a service (wl_loop_asked). */
static void asked(struct wl_conn *c)
{
	wl_loop_asked(&c->again, c->busy, c->timer);
}

static int q_connect(const struct wl_conn_handlers *h, void *ctx, unsigned flags,
		     struct wl_conn **out)
{
	struct wl_conn *c = conn_alloc(false, flags);

	if (!c) {
		wl_warn("cannot make a connection: %s", strerror(errno));
		return WL_EXIT_INTERNAL;
	}
	c->hd = h;
	c->ctx = ctx;
	c->remote = N.addr;
	c->fd = wl_udp_io_connect(&N.io, &N.addr, &c->local);
	if (c->fd < 0) {
		wl_warn("UDP socket to %s:%d failed: %s", N.o->addr, N.o->port, strerror(errno));
		conn_drop(c);
		return WL_EXIT_LIB_OPEN;
	}
	if (conn_make(c)) {
		wl_warn("quiche cannot make a connection");
		conn_drop(c);
		return WL_EXIT_LIB_OPEN;
	}
	if (wl_loop_add(c->fd, EPOLLIN, on_client_fd, c)) {
		wl_warn("cannot watch the UDP socket: %s", strerror(errno));
		conn_drop(c);
		return WL_EXIT_INTERNAL;
	}
	pthread_mutex_lock(&N.sums.lock);
	if ((flags & WL_CONN_STATS) && !N.stats_conn)
		N.stats_conn = c, c->stats = true;
	pthread_mutex_unlock(&N.sums.lock);
	*out = c;
	asked(c); /* the Initial */
	return WL_EXIT_OK;
}

static int q_open(struct wl_conn *c, const struct wl_stream_handlers *h, void *ctx, unsigned flags,
		  struct wl_stream **out)
{
	struct wl_stream *s;
	int64_t *next = (flags & WL_STREAM_UNI) ? &c->next_uni : &c->next_bidi;

	if (c->dead)
		return WL_EXIT_CONN_LOST;
	if (!(s = stream_new(c, *next)))
		return WL_EXIT_INTERNAL;
	*next += 4;
	s->hd = h;
	s->ctx = ctx;
	s->send_only = flags & WL_STREAM_UNI;
	s->owe_writable = true;
	*out = s;
	asked(c);
	return WL_EXIT_OK;
}

static int q_send(struct wl_stream *s, const uint8_t *hdr, uint32_t hdr_len, const uint8_t *body,
		  uint32_t body_len, unsigned flags, void *tag)
{
	int code;

	if (s->c->dead || s->q.fin_req || s->aborted || hdr_len > WL_HDR_MAX)
		return WL_EXIT_CONN_LOST;
	code = wl_msgq_push(&s->q, hdr, hdr_len, body, body_len, flags & WL_SEND_FIN, tag);
	if (!code)
		asked(s->c);
	return code;
}

static void q_abort(struct wl_stream *s)
{
	s->abort_req = true;
	asked(s->c);
}

static void q_close(struct wl_conn *c, uint64_t code)
{
	if (c->dead || c->close_req)
		return;
	c->close_req = true;
	c->close_code = code;
	asked(c);
}

static void q_conn_info(struct wl_conn *c, struct wl_dl *r)
{
	quiche_stats st;

	if (c->t_connect)
		r->t_connect = c->t_connect;
	if (c->end.connected) {
		r->t_handshake = c->end.t_connected;
		r->has_resumed = r->has_early = true;
		r->resumed = quiche_conn_is_resumed(c->qc);
		r->early_data = false; /* not offered: this transport sends no 0-RTT */
	}
	quiche_conn_stats(c->qc, &st);
	r->has_counters = r->has_lost = true;
	r->retransmits = st.retrans;
	r->lost_packets = st.lost;
	r->packets_sent = st.sent;
	r->packets_received = st.recv;
}

static void q_fini(void)
{
	wl_udp_io_closings_wait();
	if (N.listen_fd >= 0) {
		wl_loop_del(N.listen_fd);
		close(N.listen_fd);
	}
	if (N.cfg)
		quiche_config_free(N.cfg);
	if (N.tls)
		SSL_CTX_free(N.tls);
	OPENSSL_free(N.session);
	free(N.txbuf);
	free(N.rxbuf);
	free(N.appbuf);
}

__attribute__((visibility("default"))) const struct wl_transport wl_quiche = {
	.name = "quiche",
	.multistream = true,
	.init = q_init,
	.setup = q_setup,
	.listen = q_listen,
	.listen_stop = q_listen_stop,
	.connect = q_connect,
	.open = q_open,
	.send = q_send,
	.room = q_room,
	.abort = q_abort,
	.close = q_close,
	.stream_id = q_stream_id,
	.conn_info = q_conn_info,
	.json_connected = json_library,
	.json_mark = q_json_mark,
	.json_done = q_json_done,
	.fini = q_fini,
};
