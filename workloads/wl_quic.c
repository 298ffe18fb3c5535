// SPDX-License-Identifier: GPL-2.0-only
/*
 * QUIC roles over msquic. Bulk: one connection, --streams unidirectional
 * streams from client to server. Download: --count connections one after
 * another, each with one bidirectional stream the client asks on and the
 * server answers on. Rr: one connection, a bidirectional stream per
 * request (or one for them all), see "--pattern rr" below. The sender keeps msquic's ideal send buffer posted
 * (send buffering off, as secnetperf does for throughput), straight out of
 * the read-only pattern region; the receiver checks every byte.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <msquic.h>

#include "wl.h"

/*
 * From msquicp.h (private, but answered by release builds): which offloads
 * msquic's datapath found when it probed the kernel at start-up.
 */
#define QPROF_PARAM_GLOBAL_DATAPATH_FEATURES 0x81000005
#define QPROF_FEATURE_RECV_COALESCING 0x00000002
#define QPROF_FEATURE_SEND_SEGMENTATION 0x00000004

#define MAX_STREAMS WL_MAX_STREAMS
#define IDLE_TIMEOUT_MS 10000
#define HANDSHAKE_TIMEOUT_MS 5000

struct qstream {
	HQUIC h;
	HQUIC conn; /* sender: shut down when a send fails */
	int idx;
	uint64_t off;	      /* sender: bytes posted; receiver: bytes received */
	uint64_t end;	      /* sender: FIN after this many bytes; 0: on "stop" */
	bool stoppable;	      /* sender: "stop" ends the stream early */
	uint64_t outstanding; /* sender: posted, not yet completed */
	uint64_t ideal;	      /* sender: msquic's ideal send buffer */
	bool fin;	      /* sender: FIN posted; receiver: FIN received */
	QUIC_BUFFER tail;     /* sender: the short last send */
};

/*
 * How a connection went, as its events said: every pattern keeps one per
 * connection (qconn_note fills it) and reads its outcome from it.
 */
struct qconn_end {
	bool connected;
	uint64_t t_connected;
	QUIC_STATUS transport_status; /* why the transport shut it */
	bool closed_by_transport;
	uint64_t peer_error;
	bool closed_by_peer;
	uint64_t t_peer_closed;
};

/* One download's connection: the client's one at a time, each server's own. */
struct dlconn {
	HQUIC conn;
	struct qstream s;
	struct wl_dl r;
	uint8_t req[WL_DL_REQUEST_LEN]; /* client: sent; server: received */
	uint32_t req_len;
	QUIC_BUFFER req_buf;
	bool sending;	/* server: the request is in, the answer under way */
	bool delivered; /* server: every byte and the FIN reached the client */
	bool verify_failed, overrun;
	uint64_t verify_fail_off;
	struct qconn_end end;
};

static struct {
	const struct wl_opts *o;
	const QUIC_API_TABLE *api;
	HQUIC reg, cfg, listener;
	pthread_mutex_t conn_lock; /* quic_state.conn against close while snapshotting */
	HQUIC conn;
	struct qstream streams[MAX_STREAMS];
	QUIC_BUFFER *chunks;
	uint32_t nchunks;

	_Atomic uint64_t app_bytes;		    /* client: posted; server: verified */
	_Atomic uint64_t stream_bytes[MAX_STREAMS]; /* bulk server: verified, per stream */
	_Atomic int streams_seen;		    /* bulk server: streams[] started so far */
	_Atomic bool stopping;
	_Atomic int streams_done;
	_Atomic bool verify_failed;
	uint64_t verify_fail_off;
	int verify_fail_stream;

	_Atomic bool connected; /* the run's first connection; published after t_connected_ns */
	uint64_t t_connected_ns, t_transfer_done_ns;
	struct qconn_end end; /* the connection the done report tells of (download: the last) */

	bool done_emitted;

	/* --pattern download */
	_Atomic uint64_t downloads;	/* client: checked; server: delivered */
	_Atomic uint64_t accepted;	/* server: connections so far */
	_Atomic int live_conns;		/* server: connections not yet closed */
	_Atomic bool connected_emitted; /* once a run, by its first connection */
	uint8_t *ticket;		/* client --resume: the last connection's ticket */
	uint32_t ticket_len;
	struct wl_failure failure; /* server */
	sem_t wake;		   /* server: a connection closed, or stop or exit came */

	sem_t conn_done; /* connection shutdown complete */
	sem_t may_exit;	 /* the caller has read what it needs */
	sem_t may_start; /* --wait-start: the caller is ready for us */
} quic_state = {.conn_lock = PTHREAD_MUTEX_INITIALIZER, .failure = WL_FAILURE_INIT};

static const char *status_name(QUIC_STATUS st)
{
#define N(x)         \
	if (st == x) \
	return #x
	N(QUIC_STATUS_SUCCESS);
	N(QUIC_STATUS_OUT_OF_MEMORY);
	N(QUIC_STATUS_INVALID_PARAMETER);
	N(QUIC_STATUS_INVALID_STATE);
	N(QUIC_STATUS_NOT_SUPPORTED);
	N(QUIC_STATUS_NOT_FOUND);
	N(QUIC_STATUS_BUFFER_TOO_SMALL);
	N(QUIC_STATUS_HANDSHAKE_FAILURE);
	N(QUIC_STATUS_ABORTED);
	N(QUIC_STATUS_ADDRESS_IN_USE);
	N(QUIC_STATUS_INVALID_ADDRESS);
	N(QUIC_STATUS_CONNECTION_TIMEOUT);
	N(QUIC_STATUS_CONNECTION_IDLE);
	N(QUIC_STATUS_INTERNAL_ERROR);
	N(QUIC_STATUS_CONNECTION_REFUSED);
	N(QUIC_STATUS_PROTOCOL_ERROR);
	N(QUIC_STATUS_VER_NEG_ERROR);
	N(QUIC_STATUS_UNREACHABLE);
	N(QUIC_STATUS_TLS_ERROR);
	N(QUIC_STATUS_USER_CANCELED);
	N(QUIC_STATUS_ALPN_NEG_FAILURE);
	N(QUIC_STATUS_STREAM_LIMIT_REACHED);
	N(QUIC_STATUS_ADDRESS_NOT_AVAILABLE);
	N(QUIC_STATUS_BAD_CERTIFICATE);
	N(QUIC_STATUS_UNKNOWN_CERTIFICATE);
	N(QUIC_STATUS_REQUIRED_CERTIFICATE);
	N(QUIC_STATUS_CERT_EXPIRED);
	N(QUIC_STATUS_CERT_UNTRUSTED_ROOT);
	N(QUIC_STATUS_CERT_NO_CERT);
#undef N
	return "QUIC_STATUS_UNKNOWN";
}

static const char *const perf_names[QUIC_PERF_COUNTER_MAX] = {
	[QUIC_PERF_COUNTER_CONN_CREATED] = "conn_created",
	[QUIC_PERF_COUNTER_CONN_HANDSHAKE_FAIL] = "conn_handshake_fail",
	[QUIC_PERF_COUNTER_CONN_PROTOCOL_ERRORS] = "conn_protocol_errors",
	[QUIC_PERF_COUNTER_PKTS_SUSPECTED_LOST] = "pkts_suspected_lost",
	[QUIC_PERF_COUNTER_PKTS_DROPPED] = "pkts_dropped",
	[QUIC_PERF_COUNTER_PKTS_DECRYPTION_FAIL] = "pkts_decryption_fail",
	[QUIC_PERF_COUNTER_UDP_RECV] = "udp_recv",
	[QUIC_PERF_COUNTER_UDP_SEND] = "udp_send",
	[QUIC_PERF_COUNTER_UDP_RECV_BYTES] = "udp_recv_bytes",
	[QUIC_PERF_COUNTER_UDP_SEND_BYTES] = "udp_send_bytes",
	[QUIC_PERF_COUNTER_UDP_RECV_EVENTS] = "udp_recv_events",
	[QUIC_PERF_COUNTER_UDP_SEND_CALLS] = "udp_send_calls",
	[QUIC_PERF_COUNTER_APP_SEND_BYTES] = "app_send_bytes",
	[QUIC_PERF_COUNTER_APP_RECV_BYTES] = "app_recv_bytes",
	[QUIC_PERF_COUNTER_CONN_OPER_QUEUED] = "conn_oper_queued",
	[QUIC_PERF_COUNTER_CONN_OPER_COMPLETED] = "conn_oper_completed",
	[QUIC_PERF_COUNTER_WORK_OPER_QUEUED] = "work_oper_queued",
	[QUIC_PERF_COUNTER_WORK_OPER_COMPLETED] = "work_oper_completed",
};

static void json_perf_counters(struct wl_json *j)
{
	uint64_t c[QUIC_PERF_COUNTER_MAX];
	uint32_t len = sizeof(c);
	struct wl_json p;
	int i;

	if (QUIC_FAILED(quic_state.api->GetParam(NULL, QUIC_PARAM_GLOBAL_PERF_COUNTERS, &len, c)))
		return;
	wl_json_begin(&p);
	for (i = 0; i < QUIC_PERF_COUNTER_MAX; i++)
		if (perf_names[i])
			wl_json_u64(&p, perf_names[i], c[i]);
	wl_json_raw(j, "perf_counters", wl_json_end(&p));
}

static bool bulk_receiver(void)
{
	return !quic_state.o->download && !quic_state.o->rr &&
	       !strcmp(quic_state.o->role, "server");
}

/* A bulk receiver's (the server's) bytes per stream, as the done report gives them. */
static void json_stream_bytes(struct wl_json *j)
{
	struct wl_stream_bytes sb;

	if (!bulk_receiver())
		return;
	wl_stream_bytes_load(&sb, quic_state.stream_bytes, &quic_state.streams_seen);
	wl_json_stream_bytes(j, &sb);
}

/* Connection statistics, if there is a connection; caller holds conn_lock. */
static void json_conn_stats(struct wl_json *j)
{
	QUIC_STATISTICS_V2 st;
	uint32_t len = sizeof(st);
	struct wl_json p;

	if (!quic_state.conn || QUIC_FAILED(quic_state.api->GetParam(
					quic_state.conn, QUIC_PARAM_CONN_STATISTICS_V2, &len, &st)))
		return;
	wl_json_begin(&p);
	wl_json_u64(&p, "rtt_us", st.Rtt);
	wl_json_u64(&p, "min_rtt_us", st.MinRtt);
	wl_json_u64(&p, "send_path_mtu", st.SendPathMtu);
	wl_json_u64(&p, "send_total_packets", st.SendTotalPackets);
	wl_json_u64(&p, "send_retransmittable_packets", st.SendRetransmittablePackets);
	wl_json_u64(&p, "send_suspected_lost_packets", st.SendSuspectedLostPackets);
	wl_json_u64(&p, "send_spurious_lost_packets", st.SendSpuriousLostPackets);
	wl_json_u64(&p, "send_total_bytes", st.SendTotalBytes);
	wl_json_u64(&p, "send_total_stream_bytes", st.SendTotalStreamBytes);
	wl_json_u64(&p, "send_congestion_count", st.SendCongestionCount);
	wl_json_u64(&p, "send_persistent_congestion_count", st.SendPersistentCongestionCount);
	wl_json_u64(&p, "send_congestion_window", st.SendCongestionWindow);
	wl_json_u64(&p, "recv_total_packets", st.RecvTotalPackets);
	wl_json_u64(&p, "recv_reordered_packets", st.RecvReorderedPackets);
	wl_json_u64(&p, "recv_dropped_packets", st.RecvDroppedPackets);
	wl_json_u64(&p, "recv_duplicate_packets", st.RecvDuplicatePackets);
	wl_json_u64(&p, "recv_total_bytes", st.RecvTotalBytes);
	wl_json_u64(&p, "recv_total_stream_bytes", st.RecvTotalStreamBytes);
	wl_json_u64(&p, "recv_decryption_failures", st.RecvDecryptionFailures);
	wl_json_u64(&p, "recv_valid_ack_frames", st.RecvValidAckFrames);
	wl_json_raw(j, "conn_stats", wl_json_end(&p));
}

static void json_datapath(struct wl_json *j)
{
	uint32_t f = 0, len = sizeof(f);
	uint32_t v[4] = {0};
	uint32_t vlen = sizeof(v);
	char ver[48];

	if (QUIC_SUCCEEDED(quic_state.api->GetParam(NULL, QPROF_PARAM_GLOBAL_DATAPATH_FEATURES,
						    &len, &f))) {
		wl_json_bool(j, "send_segmentation", f & QPROF_FEATURE_SEND_SEGMENTATION);
		wl_json_bool(j, "recv_coalescing", f & QPROF_FEATURE_RECV_COALESCING);
	}
	if (QUIC_SUCCEEDED(
		    quic_state.api->GetParam(NULL, QUIC_PARAM_GLOBAL_LIBRARY_VERSION, &vlen, v))) {
		snprintf(ver, sizeof(ver), "%u.%u.%u", v[0], v[1], v[2]);
		wl_json_str(j, "msquic_version", ver);
	}
}

static void on_mark(const char *name, void *arg)
{
	const bool per_stream = bulk_receiver();
	struct wl_stream_bytes sb;
	struct wl_json j;

	(void)arg;
	wl_json_mark(&j, name);
	/* A bulk receiver's bytes are its streams': one load gives both. */
	wl_json_u64(&j, "app_bytes",
		    per_stream ? wl_stream_bytes_load(&sb, quic_state.stream_bytes,
						      &quic_state.streams_seen)
			       : atomic_load(&quic_state.app_bytes));
	if (quic_state.o->download)
		wl_json_u64(&j, "downloads", atomic_load(&quic_state.downloads));
	if (quic_state.o->rr)
		wl_rr_json_mark(&j, !strcmp(quic_state.o->role, "server"));
	if (per_stream)
		wl_json_stream_bytes(&j, &sb);
	json_perf_counters(&j);
	pthread_mutex_lock(&quic_state.conn_lock);
	json_conn_stats(&j);
	pthread_mutex_unlock(&quic_state.conn_lock);
	wl_emit("%s", wl_json_end(&j));
}

static void on_start(void *arg)
{
	(void)arg;
	sem_post(&quic_state.may_start);
}

static void rr_q_wake(void);

static void on_stop(void *arg)
{
	(void)arg;
	atomic_store(&quic_state.stopping, true);
	sem_post(&quic_state.wake);
	rr_q_wake();
}

static void on_exit_cmd(void *arg)
{
	(void)arg;
	/* A download or rr role runs until told; a bulk role is done already. */
	if (quic_state.o->download || quic_state.o->rr)
		atomic_store(&quic_state.stopping, true);
	sem_post(&quic_state.wake);
	rr_q_wake();
	sem_post(&quic_state.may_exit);
}

static const struct wl_control_ops control_ops = {
	.mark = on_mark,
	.start = on_start,
	.stop = on_stop,
	.exit = on_exit_cmd,
};

/* Sender: keep the ideal send buffer posted; FIN at the end or once told to stop. */
static void send_more(struct qstream *s)
{
	const struct wl_opts *o = quic_state.o;

	while (!s->fin && s->outstanding < s->ideal) {
		const QUIC_BUFFER *buf;
		QUIC_SEND_FLAGS flags = QUIC_SEND_FLAG_NONE;
		uint64_t len = o->io_size;
		QUIC_STATUS st;

		if (s->stoppable && atomic_load(&quic_state.stopping)) {
			buf = NULL, len = 0, flags = QUIC_SEND_FLAG_FIN;
		} else {
			buf = &quic_state.chunks[(s->off % wl_pattern_period()) / o->io_size];
			if (s->end && s->off + len >= s->end) {
				len = s->end - s->off;
				s->tail.Buffer = buf->Buffer;
				s->tail.Length = (uint32_t)len;
				buf = &s->tail;
				flags = QUIC_SEND_FLAG_FIN;
			}
		}
		st = quic_state.api->StreamSend(s->h, buf, buf ? 1 : 0, flags,
						(void *)(uintptr_t)len);
		if (QUIC_FAILED(st)) {
			wl_warn("StreamSend failed: %s", status_name(st));
			quic_state.api->ConnectionShutdown(s->conn,
							   QUIC_CONNECTION_SHUTDOWN_FLAG_NONE, 1);
			return;
		}
		s->off += len;
		s->outstanding += len;
		atomic_fetch_add(&quic_state.app_bytes, len);
		if (flags & QUIC_SEND_FLAG_FIN)
			s->fin = true;
	}
}

static QUIC_STATUS QUIC_API client_stream_cb(HQUIC h, void *ctx, QUIC_STREAM_EVENT *ev)
{
	struct qstream *s = ctx;

	switch (ev->Type) {
	case QUIC_STREAM_EVENT_SEND_COMPLETE:
		s->outstanding -= (uint64_t)(uintptr_t)ev->SEND_COMPLETE.ClientContext;
		send_more(s);
		break;
	case QUIC_STREAM_EVENT_IDEAL_SEND_BUFFER_SIZE:
		s->ideal = ev->IDEAL_SEND_BUFFER_SIZE.ByteCount;
		send_more(s);
		break;
	case QUIC_STREAM_EVENT_SHUTDOWN_COMPLETE:
		quic_state.api->StreamClose(h);
		if (atomic_fetch_add(&quic_state.streams_done, 1) + 1 == quic_state.o->streams) {
			quic_state.t_transfer_done_ns = wl_now_ns();
			quic_state.api->ConnectionShutdown(quic_state.conn,
							   QUIC_CONNECTION_SHUTDOWN_FLAG_NONE, 0);
		}
		break;
	default: break;
	}
	return QUIC_STATUS_SUCCESS;
}

static QUIC_STATUS client_open_streams(void)
{
	int i;

	for (i = 0; i < quic_state.o->streams; i++) {
		struct qstream *s = &quic_state.streams[i];
		QUIC_STATUS st;

		s->idx = i;
		s->conn = quic_state.conn;
		s->end = quic_state.o->bytes;
		s->stoppable = true;
		/* Until msquic says otherwise, as secnetperf starts. */
		s->ideal = 2 * (uint64_t)quic_state.o->io_size;
		st = quic_state.api->StreamOpen(quic_state.conn,
						QUIC_STREAM_OPEN_FLAG_UNIDIRECTIONAL,
						client_stream_cb, s, &s->h);
		if (QUIC_FAILED(st))
			return st;
		st = quic_state.api->StreamStart(s->h, QUIC_STREAM_START_FLAG_IMMEDIATE);
		if (QUIC_FAILED(st))
			return st;
		send_more(s);
	}
	return QUIC_STATUS_SUCCESS;
}

static void emit_connected(void)
{
	struct wl_json j;

	wl_json_begin(&j);
	wl_json_str(&j, "event", "connected");
	wl_json_u64(&j, "t_ns", quic_state.t_connected_ns);
	json_datapath(&j);
	wl_emit("%s", wl_json_end(&j));
}

/* The run's "connected" event: its first connection's handshake, at t. */
static void run_connected(uint64_t t)
{
	if (atomic_exchange(&quic_state.connected_emitted, true))
		return;
	quic_state.t_connected_ns = t;
	atomic_store(&quic_state.connected, true);
	emit_connected();
}

/* The connection events every pattern records alike, whatever else it does on them. */
static void qconn_note(struct qconn_end *c, const QUIC_CONNECTION_EVENT *ev)
{
	switch (ev->Type) {
	case QUIC_CONNECTION_EVENT_CONNECTED:
		c->connected = true;
		c->t_connected = wl_now_ns();
		run_connected(c->t_connected);
		break;
	case QUIC_CONNECTION_EVENT_SHUTDOWN_INITIATED_BY_TRANSPORT:
		c->closed_by_transport = true;
		c->transport_status = ev->SHUTDOWN_INITIATED_BY_TRANSPORT.Status;
		break;
	case QUIC_CONNECTION_EVENT_SHUTDOWN_INITIATED_BY_PEER:
		c->closed_by_peer = true;
		c->peer_error = ev->SHUTDOWN_INITIATED_BY_PEER.ErrorCode;
		c->t_peer_closed = wl_now_ns();
		break;
	default: break;
	}
}

static const char *qconn_why(const struct qconn_end *c)
{
	return c->closed_by_transport ? status_name(c->transport_status)
	       : c->closed_by_peer    ? "closed by peer"
				      : "closed locally";
}

/* A connection that never came up; which: "" or which one, as " (...)". */
static int qconn_handshake_failed(const struct qconn_end *c, const char *which)
{
	wl_warn("QUIC handshake with %s:%d failed%s: %s", quic_state.o->addr, quic_state.o->port,
		which,
		c->closed_by_transport ? status_name(c->transport_status) : "closed by peer");
	return WL_EXIT_HANDSHAKE;
}

/* The one connection of bulk and of the rr client. */
static void conn_common(QUIC_CONNECTION_EVENT *ev)
{
	qconn_note(&quic_state.end, ev);
	if (ev->Type == QUIC_CONNECTION_EVENT_SHUTDOWN_COMPLETE)
		sem_post(&quic_state.conn_done);
}

static QUIC_STATUS QUIC_API client_conn_cb(HQUIC h, void *ctx, QUIC_CONNECTION_EVENT *ev)
{
	QUIC_STATUS st;

	(void)h, (void)ctx;
	conn_common(ev);
	if (ev->Type == QUIC_CONNECTION_EVENT_CONNECTED) {
		st = client_open_streams();
		if (QUIC_FAILED(st)) {
			wl_warn("opening streams failed: %s", status_name(st));
			quic_state.api->ConnectionShutdown(quic_state.conn,
							   QUIC_CONNECTION_SHUTDOWN_FLAG_NONE, 1);
		}
	}
	return QUIC_STATUS_SUCCESS;
}

static QUIC_STATUS QUIC_API server_stream_cb(HQUIC h, void *ctx, QUIC_STREAM_EVENT *ev)
{
	struct qstream *s = ctx;
	uint32_t i;

	switch (ev->Type) {
	case QUIC_STREAM_EVENT_RECEIVE: {
		uint64_t off = ev->RECEIVE.AbsoluteOffset;

		if (off != s->off)
			goto bad;
		for (i = 0; i < ev->RECEIVE.BufferCount; i++) {
			const QUIC_BUFFER *b = &ev->RECEIVE.Buffers[i];

			if (!wl_pattern_check(off, b->Buffer, b->Length))
				goto bad;
			off += b->Length;
		}
		s->off = off;
		atomic_store_explicit(&quic_state.stream_bytes[s->idx], off, memory_order_relaxed);
		atomic_fetch_add(&quic_state.app_bytes, ev->RECEIVE.TotalBufferLength);
		break;
	bad:
		if (!atomic_exchange(&quic_state.verify_failed, true)) {
			quic_state.verify_fail_off = off;
			quic_state.verify_fail_stream = s->idx;
			quic_state.api->ConnectionShutdown(quic_state.conn,
							   QUIC_CONNECTION_SHUTDOWN_FLAG_NONE, 2);
		}
		break;
	}
	case QUIC_STREAM_EVENT_PEER_SEND_SHUTDOWN:
		s->fin = true;
		if (atomic_fetch_add(&quic_state.streams_done, 1) + 1 == quic_state.o->streams)
			quic_state.t_transfer_done_ns = wl_now_ns();
		break;
	case QUIC_STREAM_EVENT_PEER_SEND_ABORTED:
		quic_state.api->StreamShutdown(h, QUIC_STREAM_SHUTDOWN_FLAG_ABORT, 0);
		break;
	case QUIC_STREAM_EVENT_SHUTDOWN_COMPLETE: quic_state.api->StreamClose(h); break;
	default: break;
	}
	return QUIC_STATUS_SUCCESS;
}

static QUIC_STATUS QUIC_API server_conn_cb(HQUIC h, void *ctx, QUIC_CONNECTION_EVENT *ev)
{
	static int next_stream;

	(void)ctx;
	conn_common(ev);
	if (ev->Type == QUIC_CONNECTION_EVENT_PEER_STREAM_STARTED) {
		struct qstream *s;

		if (next_stream >= quic_state.o->streams) {
			quic_state.api->StreamClose(ev->PEER_STREAM_STARTED.Stream);
			return QUIC_STATUS_SUCCESS;
		}
		s = &quic_state.streams[next_stream];
		s->idx = next_stream++;
		s->h = ev->PEER_STREAM_STARTED.Stream;
		quic_state.api->SetCallbackHandler(s->h, (void *)server_stream_cb, s);
		atomic_store(&quic_state.streams_seen, next_stream);
	}
	(void)h;
	return QUIC_STATUS_SUCCESS;
}

/*
 * --pattern download. msquic calls back on its worker threads: the
 * client's main thread waits on conn_done per connection, the server's on
 * wake. Statistics are read in the connection's last callback, where
 * GetParam runs inline and the connection has sent all it will.
 */
static void dl_counters(struct dlconn *d)
{
	QUIC_STATISTICS_V2 st;
	uint32_t len = sizeof(st);

	if (QUIC_FAILED(
		    quic_state.api->GetParam(d->conn, QUIC_PARAM_CONN_STATISTICS_V2, &len, &st)))
		return;
	/* QUIC resends frames, not packets: the packets declared lost. */
	d->r.has_counters = d->r.has_lost = true;
	d->r.retransmits = st.SendSuspectedLostPackets;
	d->r.lost_packets = st.SendSuspectedLostPackets - st.SendSpuriousLostPackets;
	d->r.packets_sent = st.SendTotalPackets;
	d->r.packets_received = st.RecvTotalPackets;
}

static void dl_connected(struct dlconn *d, const QUIC_CONNECTION_EVENT *ev)
{
	d->r.t_handshake = d->end.t_connected;
	d->r.has_resumed = true;
	d->r.resumed = ev->CONNECTED.SessionResumed;
}

static QUIC_STATUS QUIC_API dl_client_stream_cb(HQUIC h, void *ctx, QUIC_STREAM_EVENT *ev)
{
	struct dlconn *d = ctx;
	const uint64_t size = quic_state.o->size;
	uint32_t i;

	switch (ev->Type) {
	case QUIC_STREAM_EVENT_RECEIVE: {
		uint64_t off = ev->RECEIVE.AbsoluteOffset;

		if (!ev->RECEIVE.TotalBufferLength)
			break;
		if (!d->r.t_first_byte)
			d->r.t_first_byte = wl_now_ns();
		if (off != d->s.off)
			goto bad;
		if (off + ev->RECEIVE.TotalBufferLength > size) {
			d->overrun = true;
			goto bad;
		}
		for (i = 0; i < ev->RECEIVE.BufferCount; i++) {
			const QUIC_BUFFER *b = &ev->RECEIVE.Buffers[i];

			if (!wl_pattern_check(off, b->Buffer, b->Length))
				goto bad;
			off += b->Length;
		}
		d->s.off = off;
		atomic_fetch_add(&quic_state.app_bytes, ev->RECEIVE.TotalBufferLength);
		if (off == size)
			d->r.t_complete = wl_now_ns();
		break;
	bad:
		if (!d->verify_failed) {
			d->verify_failed = true;
			d->verify_fail_off = off;
			quic_state.api->ConnectionShutdown(d->conn,
							   QUIC_CONNECTION_SHUTDOWN_FLAG_NONE, 2);
		}
		break;
	}
	case QUIC_STREAM_EVENT_PEER_SEND_SHUTDOWN: d->s.fin = true; break;
	case QUIC_STREAM_EVENT_PEER_SEND_ABORTED:
		quic_state.api->StreamShutdown(h, QUIC_STREAM_SHUTDOWN_FLAG_ABORT, 0);
		break;
	case QUIC_STREAM_EVENT_SHUTDOWN_COMPLETE: {
		uint64_t early = 0;
		uint32_t len = sizeof(early);
		bool whole = d->s.fin && d->s.off == size && !d->verify_failed;

		/* The request's bytes the server acknowledged in 0-RTT packets. */
		if (QUIC_SUCCEEDED(quic_state.api->GetParam(h, QUIC_PARAM_STREAM_0RTT_LENGTH, &len,
							    &early))) {
			d->r.has_early = true;
			d->r.early_data = early > 0;
		}
		quic_state.api->StreamClose(h);
		quic_state.api->ConnectionShutdown(d->conn, QUIC_CONNECTION_SHUTDOWN_FLAG_NONE,
						   whole ? 0 : 1);
		break;
	}
	default: break;
	}
	return QUIC_STATUS_SUCCESS;
}

/* The request: --size as 8 bytes, little-endian, then FIN. */
static QUIC_STATUS dl_request(struct dlconn *d, bool early)
{
	QUIC_SEND_FLAGS flags = QUIC_SEND_FLAG_FIN | (early ? QUIC_SEND_FLAG_ALLOW_0_RTT : 0);
	QUIC_STATUS st;

	wl_put_le64(d->req, quic_state.o->size);
	d->req_buf.Buffer = d->req;
	d->req_buf.Length = WL_DL_REQUEST_LEN;
	st = quic_state.api->StreamOpen(d->conn, QUIC_STREAM_OPEN_FLAG_NONE, dl_client_stream_cb, d,
					&d->s.h);
	if (QUIC_FAILED(st))
		return st;
	st = quic_state.api->StreamStart(d->s.h, QUIC_STREAM_START_FLAG_NONE);
	if (QUIC_SUCCEEDED(st))
		st = quic_state.api->StreamSend(d->s.h, &d->req_buf, 1, flags, NULL);
	if (QUIC_FAILED(st)) {
		quic_state.api->StreamClose(d->s.h);
		d->s.h = NULL;
	}
	return st;
}

static QUIC_STATUS QUIC_API dl_client_conn_cb(HQUIC h, void *ctx, QUIC_CONNECTION_EVENT *ev)
{
	struct dlconn *d = ctx;
	QUIC_STATUS st;

	(void)h;
	qconn_note(&d->end, ev);
	switch (ev->Type) {
	case QUIC_CONNECTION_EVENT_CONNECTED:
		dl_connected(d, ev);
		if (d->s.h) /* asked already, in 0-RTT */
			break;
		st = dl_request(d, false);
		if (QUIC_FAILED(st)) {
			wl_warn("sending the request failed: %s", status_name(st));
			quic_state.api->ConnectionShutdown(d->conn,
							   QUIC_CONNECTION_SHUTDOWN_FLAG_NONE, 1);
		}
		break;
	case QUIC_CONNECTION_EVENT_RESUMPTION_TICKET_RECEIVED: {
		uint32_t len = ev->RESUMPTION_TICKET_RECEIVED.ResumptionTicketLength;
		uint8_t *t;

		if (!quic_state.o->resume || !(t = malloc(len)))
			break;
		memcpy(t, ev->RESUMPTION_TICKET_RECEIVED.ResumptionTicket, len);
		free(quic_state.ticket);
		quic_state.ticket = t;
		quic_state.ticket_len = len;
		break;
	}
	case QUIC_CONNECTION_EVENT_SHUTDOWN_COMPLETE:
		dl_counters(d);
		sem_post(&quic_state.conn_done);
		break;
	default: break;
	}
	return QUIC_STATUS_SUCCESS;
}

/* What one download's end means for the client, as an exit code. */
static int dl_client_outcome(const struct dlconn *d)
{
	const struct wl_opts *o = quic_state.o;

	if (d->verify_failed) {
		quic_state.verify_failed = true;
		quic_state.verify_fail_off = d->verify_fail_off;
		quic_state.verify_fail_stream = (int)d->r.i;
		wl_warn("download %llu failed the content check at offset %llu%s",
			(unsigned long long)d->r.i, (unsigned long long)d->verify_fail_off,
			d->overrun ? ": more than --size arrived" : "");
		return WL_EXIT_VERIFY;
	}
	quic_state.end = d->end;
	if (!d->end.connected) {
		char which[48];

		snprintf(which, sizeof(which), " (download %llu)", (unsigned long long)d->r.i);
		return qconn_handshake_failed(&d->end, which);
	}
	if (!d->s.fin || d->s.off != o->size) {
		wl_warn("download %llu ended after %llu of %llu bytes: %s",
			(unsigned long long)d->r.i, (unsigned long long)d->s.off,
			(unsigned long long)o->size, qconn_why(&d->end));
		return WL_EXIT_CONN_LOST;
	}
	return WL_EXIT_OK;
}

static QUIC_STATUS QUIC_API dl_server_stream_cb(HQUIC h, void *ctx, QUIC_STREAM_EVENT *ev)
{
	struct dlconn *d = ctx;
	uint64_t want = 0;
	uint32_t i, j;

	switch (ev->Type) {
	case QUIC_STREAM_EVENT_RECEIVE:
		if (ev->RECEIVE.Flags & QUIC_RECEIVE_FLAG_0_RTT)
			d->r.early_data = true;
		for (i = 0; i < ev->RECEIVE.BufferCount; i++) {
			const QUIC_BUFFER *b = &ev->RECEIVE.Buffers[i];

			for (j = 0; j < b->Length && d->req_len < WL_DL_REQUEST_LEN; j++)
				d->req[d->req_len++] = b->Buffer[j];
		}
		break;
	case QUIC_STREAM_EVENT_PEER_SEND_SHUTDOWN:
		want = wl_get_le64(d->req); /* short: its missing bytes are 0 */
		if (d->req_len != WL_DL_REQUEST_LEN || want != quic_state.o->size)
			wl_warn("connection %llu asked for %llu bytes (%u-byte request); sending --size, %llu",
				(unsigned long long)d->r.i, (unsigned long long)want, d->req_len,
				(unsigned long long)quic_state.o->size);
		d->r.has_early = true;
		d->sending = true;
		send_more(&d->s);
		break;
	case QUIC_STREAM_EVENT_IDEAL_SEND_BUFFER_SIZE:
		d->s.ideal = ev->IDEAL_SEND_BUFFER_SIZE.ByteCount;
		if (d->sending)
			send_more(&d->s);
		break;
	case QUIC_STREAM_EVENT_SEND_COMPLETE:
		d->s.outstanding -= (uint64_t)(uintptr_t)ev->SEND_COMPLETE.ClientContext;
		if (!ev->SEND_COMPLETE.Canceled)
			send_more(&d->s);
		break;
	case QUIC_STREAM_EVENT_SEND_SHUTDOWN_COMPLETE:
		d->delivered = d->s.fin && ev->SEND_SHUTDOWN_COMPLETE.Graceful;
		if (d->delivered)
			d->r.t_complete = wl_now_ns();
		break;
	case QUIC_STREAM_EVENT_PEER_SEND_ABORTED:
	case QUIC_STREAM_EVENT_PEER_RECEIVE_ABORTED:
		quic_state.api->StreamShutdown(h, QUIC_STREAM_SHUTDOWN_FLAG_ABORT, 0);
		break;
	case QUIC_STREAM_EVENT_SHUTDOWN_COMPLETE: quic_state.api->StreamClose(h); break;
	default: break;
	}
	return QUIC_STATUS_SUCCESS;
}

/* The server's account of one connection, once it is shut down. */
static void dl_served(struct dlconn *d)
{
	/*
	 * The client closes with 0 only once it has every byte and the FIN;
	 * its close can overtake its last ACK, so that counts as delivered.
	 */
	if (!d->delivered && d->s.fin && d->end.closed_by_peer && d->end.peer_error == 0) {
		d->delivered = true;
		d->r.t_complete = d->end.t_peer_closed;
	}
	if (d->delivered) {
		d->r.bytes = d->s.off;
		quic_state.t_transfer_done_ns = d->r.t_complete;
		wl_emit_dl("served", &d->r);
		atomic_fetch_add(&quic_state.downloads, 1);
		return;
	}
	if (!d->sending && !d->end.closed_by_transport && !d->end.peer_error)
		return; /* it asked for nothing: not a download */
	if (!d->end.connected) {
		wl_fail(&quic_state.failure, &quic_state.stopping, WL_EXIT_HANDSHAKE,
			"QUIC handshake on connection %llu failed: %s", (unsigned long long)d->r.i,
			qconn_why(&d->end));
		return;
	}
	wl_fail(&quic_state.failure, &quic_state.stopping, WL_EXIT_CONN_LOST,
		"connection %llu ended after %llu of %llu bytes were sent: %s%s",
		(unsigned long long)d->r.i, (unsigned long long)d->s.off,
		(unsigned long long)quic_state.o->size, qconn_why(&d->end),
		d->end.closed_by_peer && d->end.peer_error == 2
			? " (the client's content check failed)"
			: "");
}

static QUIC_STATUS QUIC_API dl_server_conn_cb(HQUIC h, void *ctx, QUIC_CONNECTION_EVENT *ev)
{
	struct dlconn *d = ctx;
	HQUIC stream;

	qconn_note(&d->end, ev);
	switch (ev->Type) {
	case QUIC_CONNECTION_EVENT_CONNECTED:
		dl_connected(d, ev);
		if (quic_state.o->resume)
			quic_state.api->ConnectionSendResumptionTicket(
				h, QUIC_SEND_RESUMPTION_FLAG_FINAL, 0, NULL);
		break;
	case QUIC_CONNECTION_EVENT_PEER_STREAM_STARTED:
		stream = ev->PEER_STREAM_STARTED.Stream;
		if (d->s.h ||
		    (ev->PEER_STREAM_STARTED.Flags & QUIC_STREAM_OPEN_FLAG_UNIDIRECTIONAL)) {
			quic_state.api->StreamClose(stream);
			break;
		}
		d->s.h = stream;
		d->s.conn = h;
		d->s.end = quic_state.o->size;
		d->s.ideal = 2 * (uint64_t)quic_state.o->io_size;
		quic_state.api->SetCallbackHandler(stream, (void *)dl_server_stream_cb, d);
		break;
	case QUIC_CONNECTION_EVENT_SHUTDOWN_COMPLETE:
		dl_counters(d);
		dl_served(d);
		quic_state.api->ConnectionClose(h);
		free(d);
		atomic_fetch_sub(&quic_state.live_conns, 1);
		sem_post(&quic_state.wake);
		break;
	default: break;
	}
	return QUIC_STATUS_SUCCESS;
}

static QUIC_STATUS dl_accept(HQUIC conn)
{
	struct dlconn *d;
	QUIC_STATUS st;

	if (atomic_load(&quic_state.stopping))
		return QUIC_STATUS_CONNECTION_REFUSED;
	d = calloc(1, sizeof(*d));
	if (!d)
		return QUIC_STATUS_OUT_OF_MEMORY;
	d->conn = conn;
	d->r.i = atomic_fetch_add(&quic_state.accepted, 1);
	atomic_fetch_add(&quic_state.live_conns, 1);
	quic_state.api->SetCallbackHandler(conn, (void *)dl_server_conn_cb, d);
	st = quic_state.api->ConnectionSetConfiguration(conn, quic_state.cfg);
	if (QUIC_FAILED(st)) {
		/* Refused: msquic closes it and calls us no more. */
		atomic_fetch_sub(&quic_state.live_conns, 1);
		free(d);
	}
	return st;
}

/*
 * --pattern rr. The client's main thread keeps the schedule (a timerfd)
 * and hands each request to msquic as it falls due; StreamSend never
 * blocks, so a request the connection cannot send yet (flow control, the
 * server's stream limit) waits inside msquic, keeping its due time. The
 * answers, and the server's requests, come on msquic's worker threads.
 */
#define RR_PEER_STREAMS 1024 /* the server's limit on the client's open streams */

static int open_config(bool server);

/* A message in flight: its header lives until its SEND_COMPLETE. */
struct rr_qmsg {
	uint8_t hdr[WL_RR_HDR];
	QUIC_BUFFER b[2];
};

/* Client, --rr-streams per-request: a request and its stream. */
struct rr_qreq {
	struct rr_qmsg m;
	struct wl_rr_req req;
	struct wl_rr_rx rx;
	uint64_t t_answer; /* the response's last byte came */
	bool failed;	   /* the run failed on it already */
};

/* Server: one stream, as many requests as it brings. */
struct rr_qstream {
	HQUIC h;
	struct wl_rr_rx rx;
	bool fin_sent;
	bool spent; /* answered a bad request and ended: the rest is dropped */
};

static struct {
	int wake;
	struct wl_rr_sched sched; /* client */
	_Atomic bool draining;	  /* client: no more requests fall due */
	_Atomic bool closing;	  /* client: it shuts the connection itself */
	_Atomic bool conn_ended;
	HQUIC stream;	      /* --rr-streams one: the client's stream */
	pthread_mutex_t lock; /* q, between the main thread and the worker */
	struct wl_rr_fifo q;  /* --rr-streams one: requests sent, oldest first */
	struct wl_rr_rx rx;   /* --rr-streams one: the response coming in */
} rr_quic = {.wake = -1, .sched.timer = -1, .lock = PTHREAD_MUTEX_INITIALIZER};

static void rr_q_wake(void)
{
	uint64_t one = 1;

	if (rr_quic.wake >= 0 && write(rr_quic.wake, &one, sizeof(one)) < 0)
		wl_warn("cannot wake the client: %s", strerror(errno));
}

static void rr_qmsg_init(struct rr_qmsg *m, uint64_t seq)
{
	wl_put_le64(m->hdr, seq);
	m->b[0].Buffer = m->hdr;
	m->b[0].Length = WL_RR_HDR;
	m->b[1].Buffer = (uint8_t *)wl_rr_body();
	m->b[1].Length = wl_rr.payload - WL_RR_HDR;
}

/* Client: the run fails and the connection closes (2: a failed content check). */
static void rr_q_failed(int code, const char *why)
{
	if (code == WL_EXIT_VERIFY)
		atomic_store(&quic_state.verify_failed, true);
	wl_fail(&quic_state.failure, &quic_state.stopping, code, "%s", why);
	quic_state.api->ConnectionShutdown(quic_state.conn, QUIC_CONNECTION_SHUTDOWN_FLAG_NONE,
					   code == WL_EXIT_VERIFY ? 2 : 1);
	rr_q_wake();
}

static bool rr_q_answered(const struct wl_rr_req *req, const struct wl_rr_rx *rx, uint64_t t)
{
	char why[256];
	int code = wl_rr_answer(req, rx, t, 0, why, sizeof(why));

	if (code) {
		rr_q_failed(code, why);
		return false;
	}
	atomic_fetch_add(&quic_state.app_bytes, wl_rr.payload);
	if (atomic_load(&rr_quic.draining) &&
	    atomic_load(&wl_rr.responses) == atomic_load(&wl_rr.sent))
		rr_q_wake();
	return true;
}

static QUIC_STATUS QUIC_API rr_q_req_cb(HQUIC h, void *ctx, QUIC_STREAM_EVENT *ev)
{
	struct rr_qreq *r = ctx;
	char why[256];
	uint32_t i;

	switch (ev->Type) {
	case QUIC_STREAM_EVENT_RECEIVE: {
		bool overrun = false;

		for (i = 0; i < ev->RECEIVE.BufferCount && !r->failed; i++) {
			const QUIC_BUFFER *b = &ev->RECEIVE.Buffers[i];

			overrun =
				overrun || wl_rr_rx_feed(&r->rx, b->Buffer, b->Length) < b->Length;
		}
		if (r->failed)
			break;
		if (r->rx.bad) { /* fails now, not at the FIN */
			r->failed = !rr_q_answered(&r->req, &r->rx, wl_now_ns());
		} else if (overrun) {
			r->failed = true;
			snprintf(
				why, sizeof(why),
				"the response to request %llu is longer than --payload's %u bytes (is --payload the same on both roles?)",
				(unsigned long long)r->req.seq, wl_rr.payload);
			rr_q_failed(WL_EXIT_VERIFY, why);
		} else if (wl_rr_rx_whole(&r->rx) && !r->t_answer) {
			r->t_answer = wl_now_ns();
		}
		break;
	}
	case QUIC_STREAM_EVENT_PEER_SEND_SHUTDOWN:
		if (r->failed)
			break;
		if (!wl_rr_rx_whole(&r->rx)) {
			snprintf(
				why, sizeof(why),
				"the response to request %llu is shorter than --payload's %u bytes (is --payload the same on both roles?)",
				(unsigned long long)r->req.seq, wl_rr.payload);
			rr_q_failed(WL_EXIT_VERIFY, why);
			break;
		}
		rr_q_answered(&r->req, &r->rx, r->t_answer);
		break;
	case QUIC_STREAM_EVENT_PEER_SEND_ABORTED:
		if (atomic_load(&rr_quic.closing))
			break;
		snprintf(why, sizeof(why), "the server reset request %llu's stream",
			 (unsigned long long)r->req.seq);
		rr_q_failed(WL_EXIT_CONN_LOST, why);
		break;
	case QUIC_STREAM_EVENT_SHUTDOWN_COMPLETE:
		quic_state.api->StreamClose(h);
		free(r);
		break;
	default: break;
	}
	return QUIC_STATUS_SUCCESS;
}

static QUIC_STATUS QUIC_API rr_q_one_cb(HQUIC h, void *ctx, QUIC_STREAM_EVENT *ev)
{
	uint64_t t = wl_now_ns();
	uint32_t i;

	(void)ctx;
	switch (ev->Type) {
	case QUIC_STREAM_EVENT_RECEIVE:
		for (i = 0; i < ev->RECEIVE.BufferCount && !quic_state.failure.code; i++) {
			const uint8_t *p = ev->RECEIVE.Buffers[i].Buffer;
			size_t len = ev->RECEIVE.Buffers[i].Length;

			while (len) {
				struct wl_rr_req req;
				bool waiting;
				size_t k = wl_rr_rx_feed(&rr_quic.rx, p, len);

				p += k, len -= k;
				if (!wl_rr_rx_ready(&rr_quic.rx))
					break;
				pthread_mutex_lock(&rr_quic.lock);
				waiting = rr_quic.q.len > 0;
				if (waiting) {
					req = *wl_rr_fifo_at(&rr_quic.q, 0);
					wl_rr_fifo_pop(&rr_quic.q);
				}
				pthread_mutex_unlock(&rr_quic.lock);
				if (!rr_q_answered(waiting ? &req : NULL, &rr_quic.rx, t))
					return QUIC_STATUS_SUCCESS;
				rr_quic.rx = (struct wl_rr_rx){0};
			}
		}
		break;
	case QUIC_STREAM_EVENT_SEND_COMPLETE: free(ev->SEND_COMPLETE.ClientContext); break;
	case QUIC_STREAM_EVENT_PEER_SEND_SHUTDOWN:
	case QUIC_STREAM_EVENT_PEER_SEND_ABORTED:
		if (!atomic_load(&rr_quic.closing))
			rr_q_failed(WL_EXIT_CONN_LOST, "the server ended the one stream mid-run");
		break;
	case QUIC_STREAM_EVENT_SHUTDOWN_COMPLETE: quic_state.api->StreamClose(h); break;
	default: break;
	}
	return QUIC_STATUS_SUCCESS;
}

/* Client: request seq fell due (the schedule calls); msquic takes it at once. */
static void rr_q_send(uint64_t seq, void *arg)
{
	QUIC_STATUS st;

	(void)arg;
	if (!quic_state.o->rr_one_stream) {
		struct rr_qreq *r = calloc(1, sizeof(*r));
		HQUIC h;

		if (!r) {
			rr_q_failed(WL_EXIT_INTERNAL, "out of memory for a request");
			return;
		}
		r->req.seq = seq;
		rr_qmsg_init(&r->m, seq);
		st = quic_state.api->StreamOpen(quic_state.conn, QUIC_STREAM_OPEN_FLAG_NONE,
						rr_q_req_cb, r, &h);
		if (QUIC_FAILED(st)) {
			free(r);
			goto failed;
		}
		r->req.sent_ns = wl_now_ns();
		atomic_fetch_add(&wl_rr.sent, 1);
		/* Started with its data: r is msquic's (the callback's) from here on. */
		st = quic_state.api->StreamSend(h, r->m.b, 2,
						QUIC_SEND_FLAG_START | QUIC_SEND_FLAG_FIN, NULL);
		if (QUIC_FAILED(st)) {
			quic_state.api->StreamClose(h);
			goto failed;
		}
		return;
	}
	struct rr_qmsg *m = malloc(sizeof(*m));

	if (!m) {
		rr_q_failed(WL_EXIT_INTERNAL, "out of memory for a request");
		return;
	}
	rr_qmsg_init(m, seq);
	pthread_mutex_lock(&rr_quic.lock);
	if (wl_rr_fifo_push(&rr_quic.q, seq)) {
		pthread_mutex_unlock(&rr_quic.lock);
		free(m);
		rr_q_failed(WL_EXIT_INTERNAL, "out of memory for the requests on the stream");
		return;
	}
	wl_rr_fifo_at(&rr_quic.q, rr_quic.q.len - 1)->sent_ns = wl_now_ns();
	pthread_mutex_unlock(&rr_quic.lock);
	atomic_fetch_add(&wl_rr.sent, 1);
	st = quic_state.api->StreamSend(rr_quic.stream, m->b, 2, QUIC_SEND_FLAG_NONE, m);
	if (QUIC_SUCCEEDED(st))
		return;
	free(m);
failed : {
	char why[128];

	snprintf(why, sizeof(why), "sending request %llu failed: %s", (unsigned long long)seq,
		 status_name(st));
	rr_q_failed(WL_EXIT_CONN_LOST, why);
}
}

static QUIC_STATUS QUIC_API rr_q_client_conn_cb(HQUIC h, void *ctx, QUIC_CONNECTION_EVENT *ev)
{
	(void)h, (void)ctx;
	conn_common(ev);
	if (ev->Type == QUIC_CONNECTION_EVENT_CONNECTED)
		rr_q_wake();
	if (ev->Type == QUIC_CONNECTION_EVENT_SHUTDOWN_COMPLETE) {
		atomic_store(&rr_quic.conn_ended, true);
		rr_q_wake();
	}
	return QUIC_STATUS_SUCCESS;
}

/* Client: the connection is up; t0 is now. */
static int rr_q_start(void)
{
	QUIC_STATUS st;

	if (wl_rr_sched_start(&rr_quic.sched, quic_state.o->duration_ms)) {
		rr_q_failed(WL_EXIT_INTERNAL, "cannot arm the request timer");
		return -1;
	}
	if (quic_state.o->rr_one_stream) {
		st = quic_state.api->StreamOpen(quic_state.conn, QUIC_STREAM_OPEN_FLAG_NONE,
						rr_q_one_cb, NULL, &rr_quic.stream);
		if (QUIC_SUCCEEDED(st))
			st = quic_state.api->StreamStart(rr_quic.stream,
							 QUIC_STREAM_START_FLAG_IMMEDIATE);
		if (QUIC_FAILED(st)) {
			char why[128];

			snprintf(why, sizeof(why), "opening the stream failed: %s",
				 status_name(st));
			rr_q_failed(WL_EXIT_LIB_OPEN, why);
			return -1;
		}
	}
	return 0;
}

static int rr_q_client_outcome(void)
{
	if (quic_state.failure.code)
		return quic_state.failure.code;
	if (!quic_state.end.connected)
		return qconn_handshake_failed(&quic_state.end, "");
	if (!atomic_load(&rr_quic.closing)) {
		wl_warn("the connection ended after %llu responses: %s",
			(unsigned long long)atomic_load(&wl_rr.responses),
			qconn_why(&quic_state.end));
		return WL_EXIT_CONN_LOST;
	}
	return WL_EXIT_OK;
}

static int rr_q_client(void)
{
	const struct wl_opts *o = quic_state.o;
	uint64_t v;
	QUIC_STATUS st;
	int code;

	code = open_config(false);
	if (code)
		return code;
	if (wl_rr_sched_open(&rr_quic.sched)) {
		wl_warn("cannot make the request timer: %s", strerror(errno));
		return WL_EXIT_INTERNAL;
	}
	st = quic_state.api->ConnectionOpen(quic_state.reg, rr_q_client_conn_cb, NULL,
					    &quic_state.conn);
	if (QUIC_FAILED(st)) {
		wl_warn("ConnectionOpen failed: %s", status_name(st));
		return WL_EXIT_LIB_OPEN;
	}
	if (o->wait_start)
		sem_wait(&quic_state.may_start);
	st = quic_state.api->ConnectionStart(quic_state.conn, quic_state.cfg,
					     QUIC_ADDRESS_FAMILY_INET, o->addr, (uint16_t)o->port);
	if (QUIC_FAILED(st)) {
		wl_warn("ConnectionStart to %s:%d failed: %s", o->addr, o->port, status_name(st));
		return WL_EXIT_HANDSHAKE;
	}
	atomic_store(&wl_rr.connections, 1);
	for (;;) {
		struct pollfd p[2] = {{.fd = rr_quic.wake, .events = POLLIN},
				      {.fd = rr_quic.sched.timer, .events = POLLIN}};
		int timeout_ms = -1;

		if (wl_rr_sched_over(&rr_quic.sched, wl_now_ns(), &timeout_ms))
			break;
		if (poll(p, 2, timeout_ms) < 0 && errno != EINTR) {
			wl_fail(&quic_state.failure, &quic_state.stopping, WL_EXIT_INTERNAL,
				"poll failed: %s", strerror(errno));
			break;
		}
		if ((p[0].revents & POLLIN) && read(rr_quic.wake, &v, sizeof(v)) < 0)
			v = 0;
		if (atomic_load(&rr_quic.conn_ended) || quic_state.failure.code)
			break;
		if (rr_quic.sched.phase == WL_RR_WAIT_CONN && quic_state.connected && rr_q_start())
			break;
		if ((p[1].revents & POLLIN) &&
		    wl_rr_sched_tick(&rr_quic.sched, rr_q_send, NULL, &quic_state.failure))
			rr_q_failed(WL_EXIT_INTERNAL, "cannot arm the request timer");
		if (atomic_load(&quic_state.stopping))
			wl_rr_sched_stop(&rr_quic.sched, wl_now_ns());
		if (rr_quic.sched.phase == WL_RR_DRAINING) {
			atomic_store(&rr_quic.draining, true);
			if (atomic_load(&wl_rr.responses) == atomic_load(&wl_rr.sent))
				break;
		}
		wl_emit_tick();
	}
	quic_state.t_transfer_done_ns = atomic_load(&wl_rr.t_last_answer);
	if (!atomic_load(&rr_quic.conn_ended)) {
		atomic_store(&rr_quic.closing, true);
		quic_state.api->ConnectionShutdown(quic_state.conn,
						   QUIC_CONNECTION_SHUTDOWN_FLAG_NONE,
						   atomic_load(&quic_state.verify_failed) ? 2 : 0);
	}
	sem_wait(&quic_state.conn_done);
	return rr_q_client_outcome();
}

/*
 * Server: answer the request in s->rx; one that is short or failed its
 * check is the stream's last (wl.h says why).
 */
static void rr_q_respond(struct rr_qstream *s, bool fin)
{
	uint64_t seq = wl_get_le64(s->rx.hdr);
	bool bad = s->rx.bad || !wl_rr_rx_whole(&s->rx);
	struct rr_qmsg *m;

	if (bad) {
		s->spent = true;
		fin = true;
	}
	if (bad && !atomic_exchange(&quic_state.verify_failed, true))
		wl_fail(&quic_state.failure, NULL, WL_EXIT_VERIFY,
			"request %llu %s (is --payload the same on both roles?); answered at once, for the client to see, and the stream ended",
			(unsigned long long)seq,
			s->rx.bad ? "failed the content check" : "is shorter than --payload");
	atomic_fetch_add(&quic_state.app_bytes, s->rx.got);
	m = malloc(sizeof(*m));
	if (!m) {
		quic_state.api->StreamShutdown(s->h, QUIC_STREAM_SHUTDOWN_FLAG_ABORT, 0);
		return;
	}
	rr_qmsg_init(m, seq);
	if (QUIC_FAILED(quic_state.api->StreamSend(
		    s->h, m->b, 2, fin ? QUIC_SEND_FLAG_FIN : QUIC_SEND_FLAG_NONE, m))) {
		free(m);
		return;
	}
	s->fin_sent = s->fin_sent || fin;
}

static QUIC_STATUS QUIC_API rr_q_server_stream_cb(HQUIC h, void *ctx, QUIC_STREAM_EVENT *ev)
{
	struct rr_qstream *s = ctx;
	uint32_t i;

	switch (ev->Type) {
	case QUIC_STREAM_EVENT_RECEIVE: {
		const uint32_t n = ev->RECEIVE.BufferCount;
		const bool fin = ev->RECEIVE.Flags & QUIC_RECEIVE_FLAG_FIN;

		for (i = 0; i < n && !s->spent; i++) {
			const uint8_t *p = ev->RECEIVE.Buffers[i].Buffer;
			size_t len = ev->RECEIVE.Buffers[i].Length;

			while (len && !s->spent) {
				size_t k = wl_rr_rx_feed(&s->rx, p, len);

				p += k, len -= k;
				if (!wl_rr_rx_ready(&s->rx))
					break;
				/* Per-request streams: the answer carries the FIN. */
				rr_q_respond(s, fin && !len && i + 1 == n);
				s->rx = (struct wl_rr_rx){0};
			}
		}
		break;
	}
	case QUIC_STREAM_EVENT_PEER_SEND_SHUTDOWN:
		if (s->spent)
			break;
		if (s->rx.got) /* a short request */
			rr_q_respond(s, true);
		else if (!s->fin_sent)
			quic_state.api->StreamShutdown(h, QUIC_STREAM_SHUTDOWN_FLAG_GRACEFUL, 0);
		s->fin_sent = true;
		break;
	case QUIC_STREAM_EVENT_SEND_COMPLETE:
		if (!ev->SEND_COMPLETE.Canceled)
			atomic_fetch_add(&wl_rr.served, 1);
		free(ev->SEND_COMPLETE.ClientContext);
		break;
	case QUIC_STREAM_EVENT_PEER_SEND_ABORTED:
	case QUIC_STREAM_EVENT_PEER_RECEIVE_ABORTED:
		quic_state.api->StreamShutdown(h, QUIC_STREAM_SHUTDOWN_FLAG_ABORT, 0);
		break;
	case QUIC_STREAM_EVENT_SHUTDOWN_COMPLETE:
		quic_state.api->StreamClose(h);
		free(s);
		break;
	default: break;
	}
	return QUIC_STATUS_SUCCESS;
}

static QUIC_STATUS QUIC_API rr_q_server_conn_cb(HQUIC h, void *ctx, QUIC_CONNECTION_EVENT *ev)
{
	struct rr_qstream *s;
	HQUIC stream;

	(void)ctx;
	switch (ev->Type) {
	case QUIC_CONNECTION_EVENT_CONNECTED: run_connected(wl_now_ns()); break;
	case QUIC_CONNECTION_EVENT_PEER_STREAM_STARTED:
		stream = ev->PEER_STREAM_STARTED.Stream;
		s = NULL;
		if (!(ev->PEER_STREAM_STARTED.Flags & QUIC_STREAM_OPEN_FLAG_UNIDIRECTIONAL))
			s = calloc(1, sizeof(*s));
		if (!s) {
			quic_state.api->StreamClose(stream);
			break;
		}
		s->h = stream;
		quic_state.api->SetCallbackHandler(stream, (void *)rr_q_server_stream_cb, s);
		break;
	case QUIC_CONNECTION_EVENT_SHUTDOWN_INITIATED_BY_PEER:
		if (ev->SHUTDOWN_INITIATED_BY_PEER.ErrorCode)
			wl_fail(&quic_state.failure, NULL, WL_EXIT_CONN_LOST,
				"the client closed its connection with error %llu%s",
				(unsigned long long)ev->SHUTDOWN_INITIATED_BY_PEER.ErrorCode,
				ev->SHUTDOWN_INITIATED_BY_PEER.ErrorCode == 2
					? " (its content check failed)"
					: "");
		break;
	case QUIC_CONNECTION_EVENT_SHUTDOWN_COMPLETE:
		quic_state.api->ConnectionClose(h);
		atomic_fetch_sub(&quic_state.live_conns, 1);
		sem_post(&quic_state.wake);
		break;
	default: break;
	}
	return QUIC_STATUS_SUCCESS;
}

static QUIC_STATUS rr_q_accept(HQUIC conn)
{
	QUIC_STATUS st;

	if (atomic_load(&quic_state.stopping))
		return QUIC_STATUS_CONNECTION_REFUSED;
	/* live first: the main thread ends on connections > 0 and live == 0. */
	atomic_fetch_add(&quic_state.live_conns, 1);
	atomic_fetch_add(&wl_rr.connections, 1);
	quic_state.api->SetCallbackHandler(conn, (void *)rr_q_server_conn_cb, NULL);
	st = quic_state.api->ConnectionSetConfiguration(conn, quic_state.cfg);
	if (QUIC_FAILED(st)) {
		/* Refused: msquic closes it and calls us no more. */
		atomic_fetch_sub(&quic_state.live_conns, 1);
		sem_post(&quic_state.wake);
	}
	return st;
}

/* Serve until the client has gone, or "stop", "exit" or EOF (--control). */
static int rr_q_server(void)
{
	while (!atomic_load(&quic_state.stopping) &&
	       (!atomic_load(&wl_rr.connections) || atomic_load(&quic_state.live_conns) > 0))
		sem_wait(&quic_state.wake);
	atomic_store(&quic_state.stopping, true); /* refuse latecomers */
	quic_state.api->ListenerStop(quic_state.listener);
	quic_state.api->RegistrationShutdown(quic_state.reg, QUIC_CONNECTION_SHUTDOWN_FLAG_NONE, 0);
	while (atomic_load(&quic_state.live_conns) > 0)
		sem_wait(&quic_state.wake);
	quic_state.t_transfer_done_ns = wl_now_ns();
	return quic_state.failure.code;
}

static QUIC_STATUS QUIC_API listener_cb(HQUIC h, void *ctx, QUIC_LISTENER_EVENT *ev)
{
	(void)h, (void)ctx;
	if (ev->Type != QUIC_LISTENER_EVENT_NEW_CONNECTION)
		return QUIC_STATUS_SUCCESS;
	if (quic_state.o->download)
		return dl_accept(ev->NEW_CONNECTION.Connection);
	if (quic_state.o->rr)
		return rr_q_accept(ev->NEW_CONNECTION.Connection);
	pthread_mutex_lock(&quic_state.conn_lock);
	if (quic_state.conn) {
		/* One connection per run: a second one is refused. */
		pthread_mutex_unlock(&quic_state.conn_lock);
		return QUIC_STATUS_CONNECTION_REFUSED;
	}
	quic_state.conn = ev->NEW_CONNECTION.Connection;
	pthread_mutex_unlock(&quic_state.conn_lock);
	quic_state.api->SetCallbackHandler(quic_state.conn, (void *)server_conn_cb, NULL);
	return quic_state.api->ConnectionSetConfiguration(quic_state.conn, quic_state.cfg);
}

static int open_config(bool server)
{
	const QUIC_BUFFER alpn = {sizeof("qprof") - 1, (uint8_t *)"qprof"};
	QUIC_SETTINGS set = {0};
	QUIC_CREDENTIAL_CONFIG cred = {0};
	QUIC_CERTIFICATE_FILE cf = {0};
	QUIC_STATUS st;

	set.IdleTimeoutMs = IDLE_TIMEOUT_MS;
	set.IsSet.IdleTimeoutMs = 1;
	set.HandshakeIdleTimeoutMs = HANDSHAKE_TIMEOUT_MS;
	set.IsSet.HandshakeIdleTimeoutMs = 1;
	if (server && quic_state.o->download) {
		set.PeerBidiStreamCount = 1;
		set.IsSet.PeerBidiStreamCount = 1;
		if (quic_state.o->resume) {
			set.ServerResumptionLevel = QUIC_SERVER_RESUME_AND_ZERORTT;
			set.IsSet.ServerResumptionLevel = 1;
		}
	} else if (server && quic_state.o->rr) {
		set.PeerBidiStreamCount = RR_PEER_STREAMS;
		set.IsSet.PeerBidiStreamCount = 1;
	} else if (server) {
		set.PeerUnidiStreamCount = (uint16_t)quic_state.o->streams;
		set.IsSet.PeerUnidiStreamCount = 1;
	}
	/* rr keeps msquic's send buffering: its messages are small and many. */
	if (!quic_state.o->rr && server == quic_state.o->download) { /* the sender */
		set.SendBufferingEnabled = 0;
		set.IsSet.SendBufferingEnabled = 1;
	}
	st = quic_state.api->ConfigurationOpen(quic_state.reg, &alpn, 1, &set, sizeof(set), NULL,
					       &quic_state.cfg);
	if (QUIC_FAILED(st)) {
		wl_warn("ConfigurationOpen failed: %s", status_name(st));
		return WL_EXIT_LIB_OPEN;
	}
	/* AES-128-GCM only: the AEAD the TCP+TLS stacks use by default too. */
	cred.Flags = QUIC_CREDENTIAL_FLAG_SET_ALLOWED_CIPHER_SUITES;
	cred.AllowedCipherSuites = QUIC_ALLOWED_CIPHER_SUITE_AES_128_GCM_SHA256;
	if (server) {
		cf.CertificateFile = quic_state.o->cert;
		cf.PrivateKeyFile = quic_state.o->key;
		cred.Type = QUIC_CREDENTIAL_TYPE_CERTIFICATE_FILE;
		cred.CertificateFile = &cf;
	} else {
		cred.Type = QUIC_CREDENTIAL_TYPE_NONE;
		cred.Flags |= QUIC_CREDENTIAL_FLAG_CLIENT |
			      QUIC_CREDENTIAL_FLAG_NO_CERTIFICATE_VALIDATION;
	}
	st = quic_state.api->ConfigurationLoadCredential(quic_state.cfg, &cred);
	if (QUIC_FAILED(st)) {
		wl_warn("loading the %s credential failed: %s",
			server ? "server certificate" : "client", status_name(st));
		return WL_EXIT_LIB_OPEN;
	}
	return WL_EXIT_OK;
}

static void emit_done(bool server, int code)
{
	const bool download = quic_state.o->download;
	struct wl_json j;

	wl_json_begin(&j);
	wl_json_str(&j, "event", "done");
	wl_json_str(&j, "role", server ? "server" : "client");
	wl_json_u64(&j, "exit_code", code);
	wl_json_u64(&j, "t_ns", wl_now_ns());
	wl_json_u64(&j, "t_connected_ns", quic_state.t_connected_ns);
	wl_json_u64(&j, "t_transfer_done_ns", quic_state.t_transfer_done_ns);
	wl_json_u64(&j, "app_bytes", atomic_load(&quic_state.app_bytes));
	if (download) {
		wl_json_str(&j, "pattern", "download");
		wl_json_u64(&j, "downloads", atomic_load(&quic_state.downloads));
		wl_json_u64(&j, "streams_completed", atomic_load(&quic_state.downloads));
	} else if (quic_state.o->rr) {
		wl_rr_json_done(&j, server);
		wl_json_u64(&j, "streams_completed",
			    atomic_load(server ? &wl_rr.served : &wl_rr.responses));
	} else {
		wl_json_u64(&j, "streams_completed", atomic_load(&quic_state.streams_done));
		json_stream_bytes(&j);
	}
	if (server != download || quic_state.o->rr) { /* a receiver */
		wl_json_bool(&j, "verified", code == WL_EXIT_OK);
		if (atomic_load(&quic_state.verify_failed) && !quic_state.o->rr) {
			wl_json_u64(&j, "verify_fail_offset", quic_state.verify_fail_off);
			wl_json_u64(&j, download ? "verify_fail_download" : "verify_fail_stream",
				    quic_state.verify_fail_stream);
		}
	}
	if (quic_state.end.closed_by_transport)
		wl_json_str(&j, "transport_status", status_name(quic_state.end.transport_status));
	if (quic_state.end.closed_by_peer)
		wl_json_u64(&j, "peer_error_code", quic_state.end.peer_error);
	json_datapath(&j);
	json_perf_counters(&j);
	pthread_mutex_lock(&quic_state.conn_lock);
	json_conn_stats(&j);
	pthread_mutex_unlock(&quic_state.conn_lock);
	wl_emit("%s", wl_json_end(&j));
	quic_state.done_emitted = true;
}

/* What the connection's end means for this role, as an exit code. */
static int outcome(bool server)
{
	if (atomic_load(&quic_state.verify_failed)) {
		wl_warn("received data failed the content check on stream %d at offset %llu",
			quic_state.verify_fail_stream,
			(unsigned long long)quic_state.verify_fail_off);
		return WL_EXIT_VERIFY;
	}
	if (!quic_state.end.connected)
		return qconn_handshake_failed(&quic_state.end, "");
	if (atomic_load(&quic_state.streams_done) < quic_state.o->streams) {
		wl_warn("connection ended after %llu bytes, before the transfer finished: %s",
			(unsigned long long)atomic_load(&quic_state.app_bytes),
			qconn_why(&quic_state.end));
		return WL_EXIT_CONN_LOST;
	}
	if (server && quic_state.end.closed_by_peer && quic_state.end.peer_error != 0) {
		wl_warn("client closed the connection with error %llu",
			(unsigned long long)quic_state.end.peer_error);
		return WL_EXIT_CONN_LOST;
	}
	return WL_EXIT_OK;
}

static int quic_addr(QUIC_ADDR *a, const char *ip, int port)
{
	memset(a, 0, sizeof(*a));
	a->Ipv4.sin_family = AF_INET;
	a->Ipv4.sin_port = htons((uint16_t)port);
	return inet_pton(AF_INET, ip, &a->Ipv4.sin_addr) == 1 ? 0 : -1;
}

/* Serve downloads until --count are done, "stop", "exit" or a failure. */
static int run_server_download(void)
{
	while (!atomic_load(&quic_state.stopping) &&
	       atomic_load(&quic_state.downloads) < quic_state.o->count)
		sem_wait(&quic_state.wake);
	atomic_store(&quic_state.stopping, true); /* refuse latecomers */
	quic_state.api->ListenerStop(quic_state.listener);
	while (atomic_load(&quic_state.live_conns) > 0)
		sem_wait(&quic_state.wake);
	return quic_state.failure.code;
}

static int run_server(void)
{
	QUIC_ADDR addr;
	const QUIC_BUFFER alpn = {sizeof("qprof") - 1, (uint8_t *)"qprof"};
	QUIC_STATUS st;
	int code;

	if (quic_addr(&addr, quic_state.o->addr, quic_state.o->port)) {
		wl_warn("bad IPv4 address %s", quic_state.o->addr);
		return WL_EXIT_USAGE;
	}
	code = open_config(true);
	if (code)
		return code;
	st = quic_state.api->ListenerOpen(quic_state.reg, listener_cb, NULL, &quic_state.listener);
	if (QUIC_FAILED(st)) {
		wl_warn("ListenerOpen failed: %s", status_name(st));
		return WL_EXIT_LIB_OPEN;
	}
	st = quic_state.api->ListenerStart(quic_state.listener, &alpn, 1, &addr);
	if (QUIC_FAILED(st)) {
		if (st == QUIC_STATUS_ADDRESS_IN_USE) {
			wl_warn("UDP port %s:%d is already in use", quic_state.o->addr,
				quic_state.o->port);
			return WL_EXIT_ADDR_IN_USE;
		}
		wl_warn("ListenerStart on %s:%d failed: %s", quic_state.o->addr, quic_state.o->port,
			status_name(st));
		return WL_EXIT_LIB_OPEN;
	}
	wl_emit("{\"event\":\"ready\",\"port\":%d,\"pid\":%d}", quic_state.o->port, getpid());
	if (quic_state.o->download) {
		code = run_server_download();
	} else if (quic_state.o->rr) {
		code = rr_q_server();
	} else {
		sem_wait(&quic_state.conn_done);
		quic_state.api->ListenerStop(quic_state.listener);
		code = outcome(true);
	}
	emit_done(true, code);
	return code;
}

static int run_client_download(void)
{
	const struct wl_opts *o = quic_state.o;
	static struct dlconn d;
	QUIC_STATUS st;
	uint64_t i;
	int code;

	code = open_config(false);
	if (code)
		return code;
	if (o->wait_start)
		sem_wait(&quic_state.may_start);
	for (i = 0; i < o->count && !atomic_load(&quic_state.stopping); i++) {
		memset(&d, 0, sizeof(d));
		d.r.i = i;
		st = quic_state.api->ConnectionOpen(quic_state.reg, dl_client_conn_cb, &d, &d.conn);
		if (QUIC_FAILED(st)) {
			wl_warn("ConnectionOpen failed: %s", status_name(st));
			return WL_EXIT_LIB_OPEN;
		}
		if (o->resume && quic_state.ticket) {
			/* Without it, a full handshake: "resumed" will say so. */
			st = quic_state.api->SetParam(d.conn, QUIC_PARAM_CONN_RESUMPTION_TICKET,
						      quic_state.ticket_len, quic_state.ticket);
			if (QUIC_FAILED(st))
				wl_warn("msquic refused the resumption ticket: %s",
					status_name(st));
			else if (QUIC_FAILED(st = dl_request(&d, true))) {
				wl_warn("sending the request as 0-RTT failed: %s", status_name(st));
				quic_state.api->ConnectionClose(d.conn);
				return WL_EXIT_INTERNAL;
			}
		}
		d.r.t_connect = wl_now_ns();
		st = quic_state.api->ConnectionStart(d.conn, quic_state.cfg,
						     QUIC_ADDRESS_FAMILY_INET, o->addr,
						     (uint16_t)o->port);
		if (QUIC_FAILED(st)) {
			wl_warn("ConnectionStart to %s:%d failed: %s", o->addr, o->port,
				status_name(st));
			quic_state.api->ConnectionClose(d.conn);
			return WL_EXIT_HANDSHAKE;
		}
		sem_wait(&quic_state.conn_done);
		quic_state.api->ConnectionClose(d.conn);
		code = dl_client_outcome(&d);
		if (code)
			return code;
		d.r.bytes = d.s.off;
		quic_state.t_transfer_done_ns = d.r.t_complete;
		wl_emit_dl("download", &d.r);
		atomic_fetch_add(&quic_state.downloads, 1);
	}
	return WL_EXIT_OK;
}

static int run_client(void)
{
	QUIC_STATUS st;
	int code;

	code = open_config(false);
	if (code)
		return code;
	st = quic_state.api->ConnectionOpen(quic_state.reg, client_conn_cb, NULL, &quic_state.conn);
	if (QUIC_FAILED(st)) {
		wl_warn("ConnectionOpen failed: %s", status_name(st));
		return WL_EXIT_LIB_OPEN;
	}
	if (quic_state.o->wait_start)
		sem_wait(&quic_state.may_start);
	st = quic_state.api->ConnectionStart(quic_state.conn, quic_state.cfg,
					     QUIC_ADDRESS_FAMILY_INET, quic_state.o->addr,
					     (uint16_t)quic_state.o->port);
	if (QUIC_FAILED(st)) {
		wl_warn("ConnectionStart to %s:%d failed: %s", quic_state.o->addr,
			quic_state.o->port, status_name(st));
		return WL_EXIT_HANDSHAKE;
	}
	if (quic_state.o->duration_ms) {
		struct timespec ts;
		/* The clock starts at the handshake, not at the process. */
		while (!quic_state.connected && sem_trywait(&quic_state.conn_done) != 0)
			usleep(1000);
		if (quic_state.connected) {
			uint64_t end =
				quic_state.t_connected_ns + quic_state.o->duration_ms * 1000000ull;
			ts.tv_sec = (time_t)(end / 1000000000ull);
			ts.tv_nsec = (long)(end % 1000000000ull);
			while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
				;
			atomic_store(&quic_state.stopping, true);
		} else {
			sem_post(&quic_state.conn_done);
		}
	}
	sem_wait(&quic_state.conn_done);
	code = outcome(false);
	emit_done(false, code);
	return code;
}

int wl_quic_run(const struct wl_opts *o)
{
	QUIC_REGISTRATION_CONFIG rc = {"qprof", QUIC_EXECUTION_PROFILE_LOW_LATENCY};
	bool server = !strcmp(o->role, "server");
	const uint8_t *region;
	QUIC_STATUS st;
	uint32_t i;
	int code;

	if (o->streams < 1 || o->streams > MAX_STREAMS) {
		wl_warn("--streams must be 1..%d", MAX_STREAMS);
		return WL_EXIT_USAGE;
	}
	if (!strcmp(o->exec_profile, "maxtput"))
		rc.ExecutionProfile = QUIC_EXECUTION_PROFILE_TYPE_MAX_THROUGHPUT;
	else if (strcmp(o->exec_profile, "lowlat")) {
		wl_warn("--exec-profile must be lowlat or maxtput");
		return WL_EXIT_USAGE;
	}
	quic_state.o = o;
	sem_init(&quic_state.conn_done, 0, 0);
	sem_init(&quic_state.may_exit, 0, 0);
	sem_init(&quic_state.may_start, 0, 0);
	sem_init(&quic_state.wake, 0, 0);

	if (!o->rr && server == o->download) { /* the sender */
		region = wl_pattern_region();
		quic_state.nchunks = wl_pattern_period() / o->io_size;
		quic_state.chunks = calloc(quic_state.nchunks, sizeof(*quic_state.chunks));
		if (!quic_state.chunks)
			return WL_EXIT_INTERNAL;
		for (i = 0; i < quic_state.nchunks; i++) {
			quic_state.chunks[i].Buffer = (uint8_t *)region + (uint64_t)i * o->io_size;
			quic_state.chunks[i].Length = o->io_size;
		}
	}

	st = MsQuicOpen2(&quic_state.api);
	if (QUIC_FAILED(st)) {
		wl_warn("MsQuicOpen2 failed: %s", status_name(st));
		return WL_EXIT_LIB_OPEN;
	}
	st = quic_state.api->RegistrationOpen(&rc, &quic_state.reg);
	if (QUIC_FAILED(st)) {
		wl_warn("RegistrationOpen failed: %s", status_name(st));
		MsQuicClose(quic_state.api);
		return WL_EXIT_LIB_OPEN;
	}
	if (o->control && wl_control_start(&control_ops)) {
		wl_warn("cannot start the control thread");
		return WL_EXIT_INTERNAL;
	}

	if (o->rr) {
		rr_quic.wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (rr_quic.wake < 0) {
			wl_warn("cannot make an eventfd: %s", strerror(errno));
			return WL_EXIT_INTERNAL;
		}
	}
	code = server	     ? run_server()
	       : o->download ? run_client_download()
	       : o->rr	     ? rr_q_client()
			     : run_client();
	/* Whoever waits on us learns the outcome, failures before a
	 * connection included. */
	if (!quic_state.done_emitted)
		emit_done(server, code);

	/* The caller reads our CPU use before it lets us go. */
	if (o->control)
		sem_wait(&quic_state.may_exit);
	pthread_mutex_lock(&quic_state.conn_lock);
	if (quic_state.conn)
		quic_state.api->ConnectionClose(quic_state.conn);
	quic_state.conn = NULL;
	pthread_mutex_unlock(&quic_state.conn_lock);
	if (quic_state.listener)
		quic_state.api->ListenerClose(quic_state.listener);
	if (quic_state.cfg)
		quic_state.api->ConfigurationClose(quic_state.cfg);
	quic_state.api->RegistrationClose(quic_state.reg);
	MsQuicClose(quic_state.api);
	free(quic_state.ticket);
	wl_rr_fifo_free(&rr_quic.q);
	wl_rr_sched_close(&rr_quic.sched);
	if (rr_quic.wake >= 0)
		close(rr_quic.wake);
	return code;
}
