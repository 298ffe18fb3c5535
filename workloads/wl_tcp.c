// SPDX-License-Identifier: GPL-2.0-only
/*
 * The TCP transport (wl_transport.h): plain TCP (tcp), TLS in OpenSSL user
 * space (tcp-tls) and TLS records in the kernel after OpenSSL's handshake
 * (tcp-ktls). A WL_CONN_DEDICATED connection has a thread and blocking
 * sockets of its own, as iperf3 -P: what moves bulk TCP fastest. Others
 * are non-blocking in the loop's epoll set, where no call blocks (connects
 * and TLS handshakes included), so an rr request goes out when it falls
 * due whatever the other connections do. OpenSSL, and the socket calls
 * with or without it, are wl_tls.c's.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <linux/tcp.h> /* its tcp_info is newer than glibc's */
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h> /* SIOCOUTQ, SIOCINQ */
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "wl_tls.h"
#include "wl_transport.h"

/*
 * The listen backlog: every connection a client opens at once (an rr
 * client's 128, bulk's --streams) fits in the accept queue before the
 * server has accepted one. A full queue drops the next SYN, and its
 * retransmission comes a second later: an rr client, which starts its
 * requests once all its connections are up, would start past a short
 * window.
 */
#define MAX_CONNS (WL_RR_MAX_CONNS > WL_MAX_STREAMS ? WL_RR_MAX_CONNS : WL_MAX_STREAMS)
#define CONNECT_TIMEOUT_S 10
#define LOOP_READ_BUF (256 * 1024)
#define ROLE (T.server ? "server" : "client")

enum conn_state { CONNECTING, HANDSHAKE, READY, DEAD };

struct tcp_counts {
	uint64_t segs_out, segs_in, retrans, bytes_acked, bytes_received;
	uint64_t data_segs_out; /* segs_out less those with no data: pure ACKs, SYN, FIN */
	uint64_t conns, ecn;	/* connections read, and those that negotiated ECN */
};

/*
 * The open connections' state at a mark, summed (rtt: their mean): the
 * kernel's levels, read with TCP_INFO and the socket's queues' ioctls.
 */
struct tcp_state {
	uint64_t conns, cwnd, rtt_us, in_flight, pacing, send_queue, recv_queue;
};

/* A message on the loop, queued until the socket has room. */
struct msg {
	uint8_t hdr[WL_HDR_MAX];
	uint32_t hlen, blen;
	const uint8_t *body;
	unsigned flags;
	void *tag;
};

/* A TCP connection's one stream: its bytes. */
struct wl_stream {
	struct wl_conn *c;
	const struct wl_stream_handlers *h; /* set: opened (client) or taken (server) */
	void *ctx;
};

struct wl_conn {
	struct wl_tls io; /* the socket, and its TLS */
	int idx;
	unsigned flags;
	const struct wl_conn_handlers *h;
	void *ctx;
	struct wl_stream s;
	enum conn_state state;
	bool server, dedicated, counted;
	bool fin_in, fin_out, failed, left; /* left: the failure was the peer's going away */
	_Atomic bool closing;		    /* dedicated: close() came, with close_code */
	_Atomic uint64_t close_code;
	uint64_t t_connect, t_tcp, t_handshake, deadline_ns;
	struct wl_end end;
	char why[256];		     /* the first reason it ended */
	struct tcp_counts counts;    /* as the socket had them when closed */
	struct wl_conn *prev, *next; /* open ones, under T.lock */
	/* On the loop: the old rr state machine */
	int busy;    /* calls of ours on the stack: its closed handlers wait for them */
	uint32_t ev; /* as the epoll set has it */
	/* A connect, handshake or write waits for room; a TLS write for input. */
	bool want_out, want_in;
	bool paused, owe_writable, flushing;
	struct msg *q; /* a ring: q[qhead] is being written */
	uint32_t qcap, qhead, qlen;
};

static struct {
	const struct wl_opts *o;
	bool server;
	struct sockaddr_in addr;
	int listen_fd, timer;
	struct wl_accept acc;
	_Atomic int nconns;
	_Atomic uint64_t io_calls; /* the workload's own send/recv calls */
	pthread_mutex_t lock;	   /* the open connections, against a mark reading their fds */
	struct wl_conn *live;
	struct tcp_counts closed; /* TCP_INFO of the connections closed so far */
	uint8_t *rbuf;		  /* the loop's reads */
	char tcp_cc_ran[16];	  /* the kernel's TCP_CA_NAME_MAX */
} T = {.listen_fd = -1, .timer = -1, .lock = PTHREAD_MUTEX_INITIALIZER};

static __thread struct wl_conn *own_conn; /* a dedicated connection's thread: its own */

static bool tcp_counts_add(int fd, struct tcp_counts *t, struct tcp_state *st)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);
	int64_t flight;
	int outq, inq;

	if (fd < 0 || getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len))
		return false;
	if (st && !ioctl(fd, SIOCOUTQ, &outq) && !ioctl(fd, SIOCINQ, &inq)) {
		st->conns++;
		st->cwnd += (uint64_t)ti.tcpi_snd_cwnd * ti.tcpi_snd_mss;
		st->rtt_us += ti.tcpi_rtt;
		/* The kernel's packets in flight (tcp_packets_in_flight), in bytes. */
		flight = (int64_t)ti.tcpi_unacked - ti.tcpi_sacked - ti.tcpi_lost + ti.tcpi_retrans;
		st->in_flight += (uint64_t)(flight > 0 ? flight : 0) * ti.tcpi_snd_mss;
		st->pacing += ti.tcpi_pacing_rate;
		st->send_queue += (unsigned)outq;
		st->recv_queue += (unsigned)inq;
	}
	t->segs_out += ti.tcpi_segs_out;
	t->data_segs_out += ti.tcpi_data_segs_out;
	t->segs_in += ti.tcpi_segs_in;
	t->retrans += ti.tcpi_total_retrans;
	t->bytes_acked += ti.tcpi_bytes_acked;
	t->bytes_received += ti.tcpi_bytes_received;
	t->conns++;
	t->ecn += !!(ti.tcpi_options & TCPI_OPT_ECN);
	return true;
}

/* io_calls, then TCP_INFO of the connections open now and of those closed before. */
static void tcp_json_mark(struct wl_json *j)
{
	struct tcp_state st = {0};
	struct tcp_counts t;
	struct wl_conn *c;
	struct wl_json p;

	wl_json_u64(j, "io_calls", atomic_load(&T.io_calls));
	pthread_mutex_lock(&T.lock);
	t = T.closed;
	for (c = T.live; c; c = c->next)
		tcp_counts_add(c->io.fd, &t, &st);
	pthread_mutex_unlock(&T.lock);
	if (st.conns) {
		wl_json_begin(&p);
		wl_json_u64(&p, "cwnd_bytes", st.cwnd);
		wl_json_u64(&p, "rtt_us", st.rtt_us / st.conns);
		wl_json_u64(&p, "in_flight_bytes", st.in_flight);
		wl_json_u64(&p, "pacing_bytes_per_s", st.pacing);
		wl_json_u64(&p, "retransmitted_packets", t.retrans);
		wl_json_u64(&p, "send_queue_bytes", st.send_queue);
		wl_json_u64(&p, "recv_queue_bytes", st.recv_queue);
		wl_json_raw(j, "state", wl_json_end(&p));
	}
	wl_json_begin(&p);
	wl_json_u64(&p, "segs_out", t.segs_out);
	wl_json_u64(&p, "data_segs_out", t.data_segs_out);
	wl_json_u64(&p, "segs_in", t.segs_in);
	wl_json_u64(&p, "total_retrans", t.retrans);
	wl_json_u64(&p, "bytes_acked", t.bytes_acked);
	wl_json_u64(&p, "bytes_received", t.bytes_received);
	wl_json_u64(&p, "connections", t.conns);
	wl_json_u64(&p, "ecn_connections", t.ecn);
	wl_json_raw(j, "tcp_info", wl_json_end(&p));
}

static void tcp_json_done(struct wl_json *j, const struct wl_end *last)
{
	(void)last;
	wl_tls_json(j);
	tcp_json_mark(j);
	if (T.tcp_cc_ran[0])
		wl_json_str(j, "tcp_congestion_control", T.tcp_cc_ran);
}

/*
 * --tcp-cc on each socket, as iperf3 -C does: a namespace other than the
 * host's may only default to the host's allowed algorithms, a socket of
 * a privileged process may use any the kernel has. Accepted sockets
 * inherit the listener's. The first socket's, as the kernel reports it,
 * goes in the done report.
 */
static int set_tcp_cc(int fd)
{
	const char *cc = T.o->tcp_cc;
	socklen_t len = sizeof(T.tcp_cc_ran);

	if (cc && setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc, strlen(cc))) {
		wl_warn("TCP congestion control '%s' was refused: %s", cc, strerror(errno));
		return WL_EXIT_USAGE;
	}
	if (!T.tcp_cc_ran[0] && getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, T.tcp_cc_ran, &len))
		T.tcp_cc_ran[0] = 0;
	return 0;
}

static int tcp_init(const struct wl_opts *o, bool server)
{
	int code = wl_tls_init(o, server);

	T.o = o;
	T.server = server;
	if (code)
		return code;
	/* A peer that leaves mid-transfer is an error (EPIPE), not a signal, as iperf3 has it. */
	signal(SIGPIPE, SIG_IGN);
	return 0;
}

/* After the control channel is up, as before: a bad cipher or address still gets its "done". */
static int tcp_setup(void)
{
	int code = wl_tls_setup();

	if (code)
		return code;
	T.addr.sin_family = AF_INET;
	T.addr.sin_port = htons((uint16_t)T.o->port);
	if (inet_pton(AF_INET, T.o->addr, &T.addr.sin_addr) != 1) {
		wl_warn("bad IPv4 address %s", T.o->addr);
		return WL_EXIT_USAGE;
	}
	return 0;
}

/* Connections, either way */

static struct wl_conn *conn_new(int fd, bool server, unsigned flags)
{
	struct wl_conn *c = fd < 0 ? NULL : calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->io.fd = fd;
	c->io.nonblocking = !(flags & WL_CONN_DEDICATED);
	c->server = server;
	c->flags = flags;
	c->dedicated = flags & WL_CONN_DEDICATED;
	c->s.c = c;
	/*
	 * Request and answer are small writes after the handshake's: Nagle
	 * holds them until the peer's delayed ACK (a resumed TLS 1.2 download
	 * took 45 ms for its first byte), so both ends write at once, as HTTP
	 * servers do.
	 */
	if (flags & WL_CONN_NODELAY)
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &(int){1}, sizeof(int));
	return c;
}

/* Closes the socket under the lock a mark reads it with; keeps its counts. */
static void release(struct wl_conn *c, bool reset)
{
	/* A failed download ends in RST, so the peer cannot take it for whole. */
	if (reset)
		setsockopt(c->io.fd, SOL_SOCKET, SO_LINGER, &(struct linger){1, 0},
			   sizeof(struct linger));
	pthread_mutex_lock(&T.lock);
	c->counted = tcp_counts_add(c->io.fd, &c->counts, NULL);
	tcp_counts_add(c->io.fd, &T.closed, NULL);
	if (c->prev)
		c->prev->next = c->next;
	else if (T.live == c)
		T.live = c->next;
	if (c->next)
		c->next->prev = c->prev;
	close(c->io.fd);
	c->io.fd = -1;
	pthread_mutex_unlock(&T.lock);
}

/* The connection's last call; then it is gone, but not its reason (a pattern may keep the wl_end). */
static void conn_closed(struct wl_conn *c)
{
	static struct kept {
		struct kept *next;
		char s[sizeof(c->why)];
	} * kept;
	struct kept *k = NULL;

	pthread_mutex_lock(&T.lock);
	for (k = kept; c->end.closed_by_transport && k && strcmp(k->s, c->why); k = k->next)
		;
	if (c->end.closed_by_transport && !k && (k = malloc(sizeof(*k)))) {
		memcpy(k->s, c->why, sizeof(k->s));
		k->next = kept;
		kept = k;
	}
	pthread_mutex_unlock(&T.lock);
	if (c->end.closed_by_transport)
		c->end.transport_status = k ? k->s : "";
	c->h->closed(c, c->ctx, &c->end);
	wl_tls_free(&c->io);
	free(c->q);
	free(c);
}

static void set_why(struct wl_conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_why(struct wl_conn *c, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	if (!c->why[0])
		vsnprintf(c->why, sizeof(c->why), fmt, ap);
	va_end(ap);
}

/*
 * An I/O call failed (why: the layer's reason); left: the peer went away
 * (writing, whatever the error: the peer no longer takes what it was sent).
 */
static void io_failed(struct wl_conn *c, bool left, const char *why)
{
	c->left = left;
	set_why(c, "%s", why ? why : strerror(errno));
	c->failed = c->end.closed_by_transport = true;
	/* On the loop, the step's end says it (not inside a pattern's wl_send). */
	if (c->dedicated && c->left && c->s.h && c->s.h->aborted)
		c->s.h->aborted(&c->s, c->s.ctx);
}

/* This side's FIN: close_notify first with TLS. */
static void send_fin(struct wl_conn *c)
{
	if (c->fin_out)
		return;
	c->fin_out = true;
	wl_tls_shutdown(&c->io);
}

/* A message is wholly written: the FIN it asked for, then its sent handler. */
static void written(struct wl_conn *c, unsigned flags, void *tag)
{
	if (flags & WL_SEND_FIN)
		send_fin(c);
	if (c->s.h->sent)
		c->s.h->sent(&c->s, c->s.ctx, tag, false);
}

/* True if the call (r: a WL_IO_*) would have blocked; the connection then waits for it. */
static bool would_block(struct wl_conn *c, ssize_t r, bool writing)
{
	c->want_out = c->want_out || r == WL_IO_WANT_WRITE;
	c->want_in = c->want_in || (r == WL_IO_WANT_READ && writing);
	return r == WL_IO_WANT_WRITE || r == WL_IO_WANT_READ;
}

/* Both ways ended with a FIN, everything written, no failure and no abortive close. */
static bool graceful(struct wl_conn *c)
{
	return !atomic_load(&c->close_code) && !c->failed && c->fin_in && c->fin_out && !c->qlen;
}

/* Reads until the socket is empty (on the loop), the peer's FIN, a failure, a pause or a close. */
static void conn_read(struct wl_conn *c, uint8_t *buf, size_t cap)
{
	while (c->state == READY && !c->paused && !c->fin_in && !c->failed &&
	       !atomic_load(&c->closing)) {
		ssize_t n = wl_tls_read(&c->io, buf, cap);

		/* After a dedicated connection's FIN, reads are the orderly close's, not the workload's. */
		if (!c->dedicated || !c->fin_out)
			atomic_fetch_add(&T.io_calls, 1);
		if (atomic_load(&c->closing))
			return; /* woken, perhaps, by close() from another thread */
		if (n > 0) {
			if (c->s.h->data)
				c->s.h->data(&c->s, c->s.ctx, buf, (size_t)n);
		} else if (would_block(c, n, false)) {
			return;
		} else if (n == WL_IO_FIN || n == WL_IO_EOF) {
			c->fin_in = c->end.closed_by_peer = true;
			c->end.t_peer_closed = wl_now_ns();
			if (c->s.h->fin)
				c->s.h->fin(&c->s, c->s.ctx);
		} else if (n != WL_IO_AGAIN) {
			io_failed(c, n == WL_IO_LEFT, c->io.why);
		}
	}
}

/* TLS on the connected socket (none: nothing to do). 0 or an exit code (why set). */
static int conn_tls(struct wl_conn *c)
{
	int code = wl_tls_begin(&c->io, c->flags & WL_CONN_SENDER, c->flags & WL_CONN_RESUME);

	if (code)
		set_why(c, "%s", c->io.why);
	return code;
}

static int handshake_failed(struct wl_conn *c)
{
	set_why(c, "TLS handshake failed on the %s (connection %d): %s", ROLE, c->idx,
		c->io.why ? c->io.why : wl_tls_reason());
	return WL_EXIT_HANDSHAKE;
}

static void tcp_close(struct wl_conn *c, uint64_t code);

/* Handshaken (without TLS: connected or accepted): connected, then the server's stream. */
static int conn_ready(struct wl_conn *c)
{
	c->t_handshake = wl_now_ns();
	if (!wl_tls_handshaken(&c->io, c->dedicated && wl_tls_fault_claim()) && c->dedicated) {
		set_why(c,
			"--sendfile needs kernel TLS on send, which OpenSSL did not enable on connection %d",
			c->idx);
		return WL_EXIT_LIB_OPEN;
	}
	c->state = READY;
	c->want_out = false;
	c->end.connected = true;
	c->end.t_connected = c->t_handshake;
	c->h->connected(c, c->ctx);
	if (!c->server || c->state != READY || atomic_load(&c->closing))
		return 0;
	c->s.h = c->h->stream(c, c->ctx, &c->s, &c->s.ctx);
	c->owe_writable = true;
	if (!c->s.h)
		tcp_close(c, WL_CLOSE_OK);
	return 0;
}

/* Dedicated connections: a thread each, blocking I/O */

static void *dedicated_main(void *arg)
{
	struct wl_conn *c = arg;
	int code = conn_tls(c);
	uint8_t *buf = NULL;

	own_conn = c;
	if (!code && wl_tls_handshake(&c->io) != 1)
		code = handshake_failed(c);
	code = code ? code : conn_ready(c);
	c->end.connected = !code;
	c->end.closed_by_transport = code;
	c->end.exit_code = code;
	if (!code && c->s.h && c->s.h->writable && !atomic_load(&c->closing))
		c->s.h->writable(&c->s, c->s.ctx);
	if (!code && !(buf = malloc(T.o->io_size)))
		io_failed(c, false, NULL);
	if (buf && c->s.h)
		conn_read(c, buf, T.o->io_size);
	if (buf && !atomic_load(&c->close_code) && !c->failed) {
		if (!c->server && (c->flags & WL_CONN_RESUME))
			wl_tls_keep_session(&c->io);
		/*
		 * Orderly close: a peer that close()s with unread bytes in its
		 * receive queue (TLS 1.3 session tickets, close_notify) sends RST
		 * and the other side can lose the tail of the stream. So:
		 * close_notify, FIN, drain to the peer's FIN, then close.
		 */
		send_fin(c);
		c->fin_in = c->fin_in || wl_tls_drain(&c->io, buf, T.o->io_size);
	}
	free(buf);
	if (!code && c->s.h)
		c->s.h->closed(&c->s, c->s.ctx, graceful(c));
	release(c, atomic_load(&c->close_code) != 0);
	conn_closed(c);
	own_conn = NULL;
	return NULL;
}

/* Connections on the loop */

static void on_conn(int fd, uint32_t events, void *arg);

/* The events the connection waits for, as its state says. */
static void loop_events(struct wl_conn *c)
{
	uint32_t ev = c->want_out ? EPOLLOUT : 0;

	if (c->state == HANDSHAKE ||
	    (c->state == READY && c->s.h && !c->fin_in && (!c->paused || c->want_in)))
		ev |= EPOLLIN;
	if (c->state != DEAD && ev != c->ev && !wl_loop_mod(c->io.fd, ev, on_conn, c))
		c->ev = ev;
}

/* Once the last call of ours lets go of a closed connection: its closed handlers. */
static void drop(struct wl_conn *c)
{
	bool whole = graceful(c);

	if (--c->busy || c->state != DEAD)
		return;
	c->busy = 1; /* for good: the handlers below may call in */
	for (; c->qlen; c->qlen--, c->qhead = (c->qhead + 1) & (c->qcap - 1))
		if (c->s.h && c->s.h->sent)
			c->s.h->sent(&c->s, c->s.ctx, c->q[c->qhead].tag, true);
	if (c->s.h)
		c->s.h->closed(&c->s, c->s.ctx, whole);
	conn_closed(c);
}

/* code: the transport's own verdict (c->why says it), a connect or handshake that failed. */
static void loop_kill(struct wl_conn *c, bool reset, int code)
{
	if (c->state == DEAD)
		return;
	c->end.exit_code = code;
	c->end.closed_by_transport = c->end.closed_by_transport || code;
	wl_loop_del(c->io.fd);
	release(c, reset);
	c->state = DEAD;
	c->busy++;
	drop(c);
}

/* Writes the queued messages, one after another, until done or the socket is full. */
static void loop_flush(struct wl_conn *c)
{
	if (c->flushing)
		return;
	c->flushing = true;
	c->want_out = c->want_in = false;
	while (c->qlen && c->state == READY && !c->failed) {
		struct msg *m = &c->q[c->qhead];
		ssize_t n = wl_tls_write_msg(&c->io, m->hdr, m->hlen, m->body, m->blen,
					     m->flags & WL_SEND_OWNED);

		if (m->hlen + m->blen)
			atomic_fetch_add(&T.io_calls, 1);
		if (n > 0 || n == WL_IO_AGAIN)
			continue;
		if (would_block(c, n, true)) {
			c->owe_writable = true;
			break;
		}
		if (n) {
			io_failed(c, true, c->io.why);
			c->want_out = true; /* the step that comes says it */
			break;
		}
		c->qhead = (c->qhead + 1) & (c->qcap - 1);
		c->qlen--;
		written(c, m->flags, m->tag);
	}
	c->flushing = false;
}

/* events 0: a connection just accepted. */
static void loop_step(struct wl_conn *c, uint32_t events)
{
	int err = 0;
	socklen_t len = sizeof(err);

	c->busy++;
	if (c->state == CONNECTING && !c->server && !(events & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
		goto out;
	if (c->state == CONNECTING && !c->server &&
	    (getsockopt(c->io.fd, SOL_SOCKET, SO_ERROR, &err, &len) || err)) {
		set_why(c, "TCP connect to %s:%d failed (connection %d): %s", T.o->addr, T.o->port,
			c->idx, strerror(err ? err : errno));
		loop_kill(c, false, WL_EXIT_HANDSHAKE);
	}
	if (c->state == CONNECTING) {
		c->t_tcp = wl_now_ns();
		err = conn_tls(c);
		c->state = err ? c->state : HANDSHAKE;
		if (err)
			loop_kill(c, false, err);
	}
	if (c->state == HANDSHAKE) {
		/* Without TLS: handshaken at once. */
		err = wl_tls_handshake(&c->io);
		c->want_out = err == WL_IO_WANT_WRITE;
		if (err == 1)
			conn_ready(c);
		else if (err != WL_IO_WANT_READ && err != WL_IO_WANT_WRITE)
			/* A client may close a connection it opened as the run ends. */
			loop_kill(c, false,
				  c->server && err == WL_IO_LEFT ? 0 : handshake_failed(c));
	}
	if (c->state == READY && c->s.h) {
		loop_flush(c);
		if (c->state == READY && c->owe_writable && !c->qlen && !c->failed) {
			c->owe_writable = false;
			if (c->s.h->writable)
				c->s.h->writable(&c->s, c->s.ctx);
		}
		/*
		 * With read-ahead, the handshake's last read may have taken what
		 * followed the peer's Finished (a request): no epoll event will
		 * tell of bytes held in OpenSSL, so a step of accept's reads them.
		 */
		if (events || wl_tls_pending(&c->io))
			conn_read(c, T.rbuf, LOOP_READ_BUF);
	}
out:
	/* A failure is said; a connection over both ways, closed; else the events to wait for. */
	if (c->state != DEAD && c->failed && c->left && c->s.h && c->s.h->aborted)
		c->s.h->aborted(&c->s, c->s.ctx);
	if (c->failed || (c->state == READY && c->fin_in && c->fin_out && !c->qlen))
		loop_kill(c, false, 0);
	loop_events(c);
	drop(c);
}

static void on_conn(int fd, uint32_t events, void *arg)
{
	(void)fd;
	loop_step(arg, events);
}

/* Client: a connection not up by its deadline fails the run. */
static void on_timer(int fd, uint32_t events, void *arg)
{
	uint64_t ticks, now = wl_now_ns();
	struct wl_conn *c;

	(void)events, (void)arg;
	if (read(fd, &ticks, sizeof(ticks)) < 0 && errno != EAGAIN)
		wl_warn("reading the connect timer failed: %s", strerror(errno));
	do {
		pthread_mutex_lock(&T.lock);
		for (c = T.live; c; c = c->next)
			if (!c->dedicated && !c->server && c->state < READY && now > c->deadline_ns)
				break;
		pthread_mutex_unlock(&T.lock);
		if (c)
			set_why(c, "connection %d to %s:%d was not up within %d s", c->idx,
				T.o->addr, T.o->port, CONNECT_TIMEOUT_S);
		if (c)
			loop_kill(c, false, WL_EXIT_HANDSHAKE);
	} while (c);
}

/* A new connection starts: on a thread of its own, or in the loop (waiting for ev). */
static int conn_start(struct wl_conn *c, uint32_t ev)
{
	struct itimerspec every_s = {.it_interval.tv_sec = 1, .it_value.tv_sec = 1};
	pthread_attr_t attr;
	pthread_t t;

	c->idx = atomic_fetch_add(&T.nconns, 1);
	c->deadline_ns = wl_now_ns() + CONNECT_TIMEOUT_S * 1000000000ull;
	if (!c->dedicated && !T.rbuf && !(T.rbuf = malloc(LOOP_READ_BUF)))
		return -1;
	if (!c->dedicated && !c->server && T.timer < 0 &&
	    ((T.timer = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)) < 0 ||
	     timerfd_settime(T.timer, 0, &every_s, NULL) ||
	     wl_loop_add(T.timer, EPOLLIN, on_timer, NULL)))
		return -1;
	c->ev = ev;
	c->want_out = ev & EPOLLOUT;
	if (!c->dedicated && wl_loop_add(c->io.fd, ev, on_conn, c))
		return -1;
	pthread_mutex_lock(&T.lock);
	c->next = T.live;
	if (T.live)
		T.live->prev = c;
	T.live = c;
	pthread_mutex_unlock(&T.lock);
	if (!c->dedicated)
		return 0;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &attr, dedicated_main, c))
		dedicated_main(c); /* no thread to spare: the loop's runs it */
	pthread_attr_destroy(&attr);
	return 0;
}

/* The operations */

static void on_listen(int fd, uint32_t events, void *arg)
{
	const bool dedicated = T.acc.flags & WL_CONN_DEDICATED;

	(void)events, (void)arg;
	for (;;) {
		/* The tests' fault: later connections wait in the backlog, handshaking. */
		if (T.o->fault && !strcmp(T.o->fault, "one-accept") && atomic_load(&T.nconns)) {
			wl_loop_del(fd);
			return;
		}
		int cfd = accept4(fd, NULL, NULL, SOCK_CLOEXEC | (dedicated ? 0 : SOCK_NONBLOCK));
		struct wl_conn *c = conn_new(cfd, true, T.acc.flags);

		if (cfd < 0 && (errno == EINTR || errno == ECONNABORTED))
			continue;
		if (cfd < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
			wl_warn("accept failed: %s", strerror(errno));
		if (cfd < 0)
			return;
		if (!c || !(c->h = T.acc.accept(T.acc.arg, c, &c->ctx))) {
			close(cfd);
			free(c);
		} else if (conn_start(c, EPOLLIN)) {
			/* The pattern took it: its closed handler says it never started. */
			set_why(c, "cannot watch connection %d: %s", c->idx, strerror(errno));
			c->end.closed_by_transport = true;
			c->end.exit_code = WL_EXIT_INTERNAL;
			release(c, false);
			conn_closed(c);
		} else if (!dedicated) {
			loop_step(c, 0);
		}
	}
}

static int tcp_listen(const struct wl_accept *a)
{
	int code;

	T.acc = *a;
	T.listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (T.listen_fd < 0) {
		wl_warn("socket failed: %s", strerror(errno));
		return WL_EXIT_INTERNAL;
	}
	setsockopt(T.listen_fd, SOL_SOCKET, SO_REUSEADDR, &(int){1}, sizeof(int));
	code = set_tcp_cc(T.listen_fd);
	if (!code)
		code = wl_bind(T.listen_fd, &T.addr, "TCP", T.o);
	if (code)
		return code;
	if (listen(T.listen_fd, MAX_CONNS) || wl_loop_add(T.listen_fd, EPOLLIN, on_listen, NULL)) {
		wl_warn("cannot listen on the TCP socket: %s", strerror(errno));
		return WL_EXIT_INTERNAL;
	}
	return 0;
}

/* The socket stays open (a latecomer waits in its backlog, as before) but unwatched. */
static void tcp_listen_stop(void)
{
	wl_loop_del(T.listen_fd);
}

static int tcp_connect(const struct wl_conn_handlers *h, void *ctx, unsigned flags,
		       struct wl_conn **out)
{
	const bool dedicated = flags & WL_CONN_DEDICATED;
	const uint64_t t0 = wl_now_ns();
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | (dedicated ? 0 : SOCK_NONBLOCK), 0);
	struct wl_conn *c = conn_new(fd, false, flags);
	int code = c ? set_tcp_cc(fd) : WL_EXIT_INTERNAL;
	struct timeval tv = {.tv_sec = CONNECT_TIMEOUT_S};

	if (!c)
		wl_warn("socket failed: %s", strerror(errno));
	if (code)
		goto fail;
	c->h = h;
	c->ctx = ctx;
	c->t_connect = t0;
	if (dedicated)
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	code = WL_EXIT_HANDSHAKE;
	if (connect(fd, (const struct sockaddr *)&T.addr, sizeof(T.addr)) &&
	    (dedicated || errno != EINPROGRESS)) {
		wl_warn("TCP connect to %s:%d failed (connection %d): %s", T.o->addr, T.o->port,
			atomic_load(&T.nconns), strerror(errno));
		goto fail;
	}
	tv.tv_sec = 0;
	if (dedicated)
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	c->t_tcp = wl_now_ns();
	*out = c;
	if (!conn_start(c, EPOLLOUT))
		return 0;
	wl_warn("cannot watch a new connection: %s", strerror(errno));
	code = WL_EXIT_INTERNAL;
fail:
	if (fd >= 0)
		close(fd);
	free(c);
	return code;
}

static int tcp_open(struct wl_conn *c, const struct wl_stream_handlers *h, void *ctx,
		    unsigned flags, struct wl_stream **out)
{
	(void)flags; /* UNI: the peer's FIN is read all the same; LAZY: TCP has nothing to start */
	if (c->s.h || c->server)
		return WL_EXIT_INTERNAL;
	c->s.h = h;
	c->s.ctx = ctx;
	*out = &c->s;
	/* A dedicated one's comes once connected returns; on the loop, with the step's end. */
	c->owe_writable = !c->dedicated;
	if (!c->dedicated && !c->busy) /* not from a step: room on the socket brings one */
		c->want_out = true;
	if (!c->dedicated && !c->busy)
		loop_events(c);
	return 0;
}

static int tcp_send(struct wl_stream *s, const uint8_t *hdr, uint32_t hdr_len, const uint8_t *body,
		    uint32_t body_len, unsigned flags, void *tag)
{
	struct wl_conn *c = s->c;
	struct msg *m;

	if (hdr_len > WL_HDR_MAX || c->fin_out || c->failed || c->state != READY)
		return WL_EXIT_CONN_LOST;
	if (c->dedicated) {
		/*
		 * Blocking: written whole (sendfile()d with --sendfile) before it
		 * returns. A header (a download's request) is not counted in
		 * io_calls, as before: they are the transfer's calls.
		 */
		if ((hdr_len && wl_tls_write_all(&c->io, hdr, hdr_len, NULL)) ||
		    (body_len && wl_tls_write_all(&c->io, body, body_len, &T.io_calls))) {
			io_failed(c, true, c->io.why);
			return WL_EXIT_CONN_LOST;
		}
		written(c, flags, tag);
		return 0;
	}
	if (c->qlen == c->qcap) {
		/* The ring doubles: its part wrapped to the front moves behind the old end. */
		uint32_t cap = c->qcap ? 2 * c->qcap : 8;

		if (!(m = realloc(c->q, cap * sizeof(*m))))
			return WL_EXIT_INTERNAL;
		memcpy(m + c->qcap, m, c->qhead * sizeof(*m));
		c->q = m;
		c->qcap = cap;
	}
	m = &c->q[(c->qhead + c->qlen++) & (c->qcap - 1)];
	*m = (struct msg){
		.hlen = hdr_len, .blen = body_len, .body = body, .flags = flags, .tag = tag};
	memcpy(m->hdr, hdr, hdr_len);
	/* Written now as far as the socket takes it, unless earlier ones wait for room. */
	if (c->qlen > 1)
		return 0;
	c->busy++;
	loop_flush(c);
	if (c->busy == 1)
		loop_events(c);
	drop(c);
	return 0;
}

static size_t tcp_room(struct wl_stream *s)
{
	return s->c->dedicated || !s->c->qlen ? SIZE_MAX : 0;
}

static void tcp_pause(struct wl_stream *s, bool paused)
{
	struct wl_conn *c = s->c;

	if (c->dedicated)
		return;
	c->paused = paused;
	if (c->state == DEAD || c->busy)
		return; /* in a step, which goes on to read */
	/* Records OpenSSL read ahead wake no epoll: room on the socket brings a step to read them. */
	c->want_out = c->want_out || (!paused && wl_tls_pending(&c->io));
	loop_events(c);
}

static void tcp_close(struct wl_conn *c, uint64_t code)
{
	if (c->dedicated) {
		atomic_store(&c->close_code, code);
		atomic_store(&c->closing, true);
		pthread_mutex_lock(&T.lock);
		/*
		 * A failed connection ends in RST (release()), set now: the
		 * process may exit, closing the socket, before the connection's
		 * thread gets there, and a FIN then told the peer all was whole.
		 */
		if (code && c->io.fd >= 0)
			setsockopt(c->io.fd, SOL_SOCKET, SO_LINGER, &(struct linger){1, 0},
				   sizeof(struct linger));
		/* From another thread: a read of the connection's own returns. */
		if (own_conn != c && c->io.fd >= 0)
			shutdown(c->io.fd, SHUT_RD);
		pthread_mutex_unlock(&T.lock);
		return;
	}
	if (c->state == DEAD)
		return;
	c->busy++;
	/* TLS 1.3 tickets come after the handshake: the session as the connection ends. */
	if (!code && c->state == READY && !c->server && (c->flags & WL_CONN_RESUME))
		wl_tls_keep_session(&c->io);
	if (!code && c->state == READY)
		send_fin(c); /* close_notify first, if there is room for it */
	loop_kill(c, code != 0, 0);
	drop(c);
}

static void tcp_abort(struct wl_stream *s)
{
	tcp_close(s->c, WL_CLOSE_ERROR);
}

static void tcp_conn_info(struct wl_conn *c, struct wl_dl *r)
{
	const bool tls = wl_tls_mode() != WL_TLS_NONE;
	struct tcp_counts t = {0};

	r->t_connect = c->server ? r->t_connect : c->t_connect;
	r->t_tcp = !c->server && tls ? c->t_tcp : 0; /* plain TCP: the handshake is the TCP one */
	r->t_handshake = c->t_handshake;
	r->has_resumed = r->has_early = tls;
	r->resumed = c->io.resumed;
	r->early_data = false; /* not offered: OpenSSL's early data is not used */
	pthread_mutex_lock(&T.lock);
	r->has_counters = c->io.fd >= 0 ? tcp_counts_add(c->io.fd, &t, NULL) : c->counted;
	t = c->io.fd >= 0 ? t : c->counts;
	pthread_mutex_unlock(&T.lock);
	r->retransmits = t.retrans;
	r->packets_sent = t.segs_out;
	r->packets_received = t.segs_in;
}

static void tcp_fini(void)
{
	bool in_use;

	wl_loop_del(T.timer);
	close(T.timer);
	close(T.listen_fd);
	pthread_mutex_lock(&T.lock);
	in_use = T.live;
	pthread_mutex_unlock(&T.lock);
	/* A connection still open (its thread running) keeps the context. */
	wl_tls_fini(in_use);
}

const struct wl_transport wl_tcp = {
	.name = "tcp",
	.init = tcp_init,
	.setup = tcp_setup,
	.listen = tcp_listen,
	.listen_stop = tcp_listen_stop,
	.connect = tcp_connect,
	.open = tcp_open,
	.send = tcp_send,
	.room = tcp_room,
	.pause = tcp_pause,
	.abort = tcp_abort,
	.close = tcp_close,
	.conn_info = tcp_conn_info,
	.json_connected = wl_tls_json,
	.json_mark = tcp_json_mark,
	.json_done = tcp_json_done,
	.fini = tcp_fini,
};
