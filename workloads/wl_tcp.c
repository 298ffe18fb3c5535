// SPDX-License-Identifier: GPL-2.0-only
/*
 * TCP roles: plain TCP (tcp), TLS in OpenSSL user space (tcp-tls) and TLS
 * records in the kernel after OpenSSL's handshake (tcp-ktls). Bulk: one TCP
 * connection per --streams, each with a thread on both sides, as iperf3 -P.
 * Download: --count connections one after another, each served whole by the
 * server's main thread before it accepts the next. Rr: one thread per role
 * with non-blocking sockets in one epoll set (see "--pattern rr" below).
 * The sender writes straight out of the read-only pattern region (or
 * sendfile()s it from a memfd holding the same bytes); the receiver checks
 * every byte against its connection offset.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <linux/tcp.h> /* its tcp_info is newer than glibc's */
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "wl.h"

#define MAX_CONNS WL_MAX_STREAMS
#define CONNECT_TIMEOUT_S 10
#define TLS_READ_BUF (128 * 1024)	       /* several 16 KiB records per read() */
#define TLS_WRITE_BUF ((1 << 20) + (64 << 10)) /* the largest --io-size and its records' headers */

enum tls_mode { TLS_NONE, TLS_USER, TLS_KERNEL };

struct tcp_counts {
	uint64_t segs_out, segs_in, retrans, bytes_acked, bytes_received;
};

struct tconn {
	int idx;
	int fd;
	SSL *ssl;
	pthread_t thread;
	uint64_t off;
	bool finished; /* server: EOF after all data; client: sent all */
	bool ktls_send, ktls_recv;
};

static struct {
	const struct wl_opts *o;
	bool server;
	enum tls_mode tls;
	SSL_CTX *ctx;
	int listen_fd;
	int memfd; /* --sendfile: the pattern region as a file */
	struct tconn conns[MAX_CONNS];
	int nconns;

	_Atomic uint64_t app_bytes;
	_Atomic uint64_t stream_bytes[MAX_CONNS]; /* bulk server: verified, per connection */
	_Atomic int conns_seen;			  /* bulk server: conns[] accepted so far */
	_Atomic uint64_t io_calls;		  /* the workload's own send/recv calls */
	_Atomic bool stopping;
	_Atomic bool verify_failed;
	_Atomic int conns_ready;
	_Atomic int conns_done;
	uint64_t verify_fail_off;
	int verify_fail_conn;
	struct wl_failure failure;
	uint64_t t_connected_ns, t_transfer_done_ns;
	const char *cipher; /* as connection 0's handshake agreed */

	/* --pattern download: conns[0] is the one connection at a time */
	_Atomic uint64_t downloads; /* client: checked; server: delivered */
	pthread_mutex_t conn_lock;  /* conns[].fd against close while a mark reads it */
	struct tcp_counts closed;   /* TCP_INFO of the connections closed so far */
	SSL_SESSION *session;	    /* client --resume: the last connection's */
	int wake_fd;		    /* server: written on "stop" and "exit" */

	sem_t all_ready;
	sem_t all_done;
	sem_t may_start;
	sem_t may_exit;
} tcp_state = {
	.failure = WL_FAILURE_INIT,
	.memfd = -1,
	.listen_fd = -1,
	.wake_fd = -1,
	.conn_lock = PTHREAD_MUTEX_INITIALIZER,
};

/* --pattern rr: the state marks and reports read; the code is below. */
#define RR_MAX_CONNS 128
#define RR_READ_BUF (256 * 1024)
#define RR_EVENTS 64

enum rr_state { RR_CONNECTING, RR_HANDSHAKE, RR_READY };

struct rrconn {
	struct tconn t;
	enum rr_state state;
	bool dead;		/* closed; freed once this batch of events is handled */
	uint64_t deadline_ns;	/* client: connected and handshaken by then */
	struct wl_rr_fifo q;	/* client: its requests; server: responses to write */
	uint32_t nw;		/* of q, those whose writing has begun */
	bool writing;		/* q[nw - 1] is partly written */
	uint32_t w_off;		/* of it, the bytes written */
	uint8_t hdr[WL_RR_HDR]; /* plain TCP: its header (wl_rr_body() is the rest) */
	uint8_t *msg;		/* TLS: the whole message, as SSL_write takes it */
	bool want_out;		/* a connect, handshake or write waits for room */
	bool want_in;		/* a TLS write waits for the peer (SSL_ERROR_WANT_READ) */
	bool paused;		/* server: reads no more until its responses have gone */
	bool spent;		/* server: answered a bad request; takes no more on it */
	bool half_closed;	/* server: ... and has sent its FIN after the answer */
	uint32_t ev;		/* as the epoll set has it */
	struct wl_rr_rx rx;
};

static struct {
	int ep;
	struct wl_rr_sched sched;	    /* client */
	struct rrconn *conns[RR_MAX_CONNS]; /* changed under tcp_state.conn_lock */
	int nconns;
	struct wl_rr_fifo pending; /* on-demand client: due, with no connection to go on */
	uint8_t *rbuf;
	struct sockaddr_in addr;
	bool handshaken;	   /* a connection is or was up */
	bool ktls_send, ktls_recv; /* ... and every one had kTLS */
	bool refused;		   /* server: said once that it refused a connection */
	char why[256];
} rr_tcp = {.ep = -1, .sched.timer = -1};

static const char *tls_version_name(void)
{
	return !strcmp(tcp_state.o->tls_version, "1.2") ? "TLSv1.2" : "TLSv1.3";
}

#define fail(code, ...) wl_fail(&tcp_state.failure, &tcp_state.stopping, (code), __VA_ARGS__)

/*
 * The tests' --fault (qprof run --inject-fault; not in --help). ktls-claim:
 * the client leaves kTLS off yet reports it on send, as a library that said
 * yes without the kernel doing it would; qprof must catch the claim with
 * the kernel's own counters.
 */
const char *wl_tcp_fault;

static bool fault_ktls_claim(void)
{
	return wl_tcp_fault && !strcmp(wl_tcp_fault, "ktls-claim");
}

static const char *ssl_reason(void)
{
	static __thread char buf[160];
	unsigned long e = ERR_get_error();

	if (!e)
		return strerror(errno);
	ERR_error_string_n(e, buf, sizeof(buf));
	ERR_clear_error();
	return buf;
}

static bool tcp_counts_add(int fd, struct tcp_counts *t)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);

	if (fd < 0 || getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len))
		return false;
	t->segs_out += ti.tcpi_segs_out;
	t->segs_in += ti.tcpi_segs_in;
	t->retrans += ti.tcpi_total_retrans;
	t->bytes_acked += ti.tcpi_bytes_acked;
	t->bytes_received += ti.tcpi_bytes_received;
	return true;
}

/* The connections open now and, in download, those closed before. */
static void json_tcp_info(struct wl_json *j)
{
	struct tcp_counts t;
	struct wl_json p;
	int i;

	pthread_mutex_lock(&tcp_state.conn_lock);
	t = tcp_state.closed;
	for (i = 0; i < tcp_state.nconns; i++)
		tcp_counts_add(tcp_state.conns[i].fd, &t);
	for (i = 0; i < rr_tcp.nconns; i++)
		tcp_counts_add(rr_tcp.conns[i]->t.fd, &t);
	pthread_mutex_unlock(&tcp_state.conn_lock);
	wl_json_begin(&p);
	wl_json_u64(&p, "segs_out", t.segs_out);
	wl_json_u64(&p, "segs_in", t.segs_in);
	wl_json_u64(&p, "total_retrans", t.retrans);
	wl_json_u64(&p, "bytes_acked", t.bytes_acked);
	wl_json_u64(&p, "bytes_received", t.bytes_received);
	wl_json_raw(j, "tcp_info", wl_json_end(&p));
}

static void json_tls(struct wl_json *j)
{
	bool send = tcp_state.nconns > 0, recv = tcp_state.nconns > 0;
	int i;

	if (tcp_state.tls == TLS_NONE)
		return;
	for (i = 0; i < tcp_state.nconns; i++) {
		send = send && tcp_state.conns[i].ktls_send;
		recv = recv && tcp_state.conns[i].ktls_recv;
	}
	if (tcp_state.o->rr) {
		send = rr_tcp.handshaken && rr_tcp.ktls_send;
		recv = rr_tcp.handshaken && rr_tcp.ktls_recv;
	}
	wl_json_str(j, "tls_version", tls_version_name());
	wl_json_str(j, "tls_cipher", tcp_state.cipher ? tcp_state.cipher : "");
	wl_json_bool(j, "ktls_send", send);
	wl_json_bool(j, "ktls_recv", recv);
}

static bool bulk_receiver(void)
{
	return tcp_state.server && !tcp_state.o->download && !tcp_state.o->rr;
}

/* A bulk receiver's (the server's) bytes per connection, as the done report gives them. */
static void json_stream_bytes(struct wl_json *j)
{
	struct wl_stream_bytes sb;

	if (!bulk_receiver())
		return;
	wl_stream_bytes_load(&sb, tcp_state.stream_bytes, &tcp_state.conns_seen);
	wl_json_stream_bytes(j, &sb);
}

static void on_mark(const char *name, void *arg)
{
	const bool per_conn = bulk_receiver();
	struct wl_stream_bytes sb;
	struct wl_json j;

	(void)arg;
	wl_json_mark(&j, name);
	/* A bulk receiver's bytes are its connections': one load gives both. */
	wl_json_u64(
		&j, "app_bytes",
		per_conn ? wl_stream_bytes_load(&sb, tcp_state.stream_bytes, &tcp_state.conns_seen)
			 : atomic_load(&tcp_state.app_bytes));
	wl_json_u64(&j, "io_calls", atomic_load(&tcp_state.io_calls));
	if (tcp_state.o->download)
		wl_json_u64(&j, "downloads", atomic_load(&tcp_state.downloads));
	if (tcp_state.o->rr)
		wl_rr_json_mark(&j, tcp_state.server);
	if (per_conn)
		wl_json_stream_bytes(&j, &sb);
	json_tcp_info(&j);
	wl_emit("%s", wl_json_end(&j));
}

static void wake_server(void)
{
	uint64_t one = 1;

	if (tcp_state.wake_fd >= 0 && write(tcp_state.wake_fd, &one, sizeof(one)) < 0)
		wl_warn("cannot wake the server: %s", strerror(errno));
}

static void on_start(void *arg)
{
	(void)arg;
	sem_post(&tcp_state.may_start);
}
static void on_stop(void *arg)
{
	(void)arg;
	atomic_store(&tcp_state.stopping, true);
	wake_server();
}
static void on_exit_cmd(void *arg)
{
	(void)arg;
	/* A download or rr role runs until told; a bulk role is done already. */
	if (tcp_state.o->download || tcp_state.o->rr) {
		atomic_store(&tcp_state.stopping, true);
		wake_server();
	}
	sem_post(&tcp_state.may_exit);
}

static const struct wl_control_ops control_ops = {
	.mark = on_mark,
	.start = on_start,
	.stop = on_stop,
	.exit = on_exit_cmd,
};

static int make_ctx(void)
{
	const char *cipher = tcp_state.o->cipher;
	bool v12 = !strcmp(tcp_state.o->tls_version, "1.2");
	int ver = v12 ? TLS1_2_VERSION : TLS1_3_VERSION;

	if (tcp_state.tls == TLS_NONE)
		return 0;
	tcp_state.ctx = SSL_CTX_new(tcp_state.server ? TLS_server_method() : TLS_client_method());
	if (!tcp_state.ctx)
		goto err;
	SSL_CTX_set_min_proto_version(tcp_state.ctx, ver);
	SSL_CTX_set_max_proto_version(tcp_state.ctx, ver);
	if (!cipher)
		cipher = v12 ? "ECDHE-ECDSA-AES128-GCM-SHA256" : "TLS_AES_128_GCM_SHA256";
	if (v12 ? !SSL_CTX_set_cipher_list(tcp_state.ctx, cipher)
		: !SSL_CTX_set_ciphersuites(tcp_state.ctx, cipher)) {
		wl_warn("OpenSSL has no TLS %s cipher '%s'", tcp_state.o->tls_version, cipher);
		return WL_EXIT_TLS_CONFIG;
	}
	if (tcp_state.tls == TLS_KERNEL && !fault_ktls_claim())
		SSL_CTX_set_options(tcp_state.ctx, SSL_OP_ENABLE_KTLS);
	if (tcp_state.tls == TLS_USER) {
		/*
		 * Read as a production server does: without read-ahead OpenSSL
		 * reads each record's 5-byte header, then its body (2.3 read()s
		 * per SSL_read measured); with it, one read() fills a buffer of
		 * several records.
		 */
		SSL_CTX_set_read_ahead(tcp_state.ctx, 1);
		SSL_CTX_set_default_read_buffer_len(tcp_state.ctx, TLS_READ_BUF);
	}
	if (tcp_state.server) {
		if (SSL_CTX_use_certificate_chain_file(tcp_state.ctx, tcp_state.o->cert) != 1 ||
		    SSL_CTX_use_PrivateKey_file(tcp_state.ctx, tcp_state.o->key,
						SSL_FILETYPE_PEM) != 1)
			goto err;
	} else {
		SSL_CTX_set_verify(tcp_state.ctx, SSL_VERIFY_NONE, NULL);
	}
	return 0;
err:
	wl_warn("TLS setup failed on the %s: %s", tcp_state.server ? "server" : "client",
		ssl_reason());
	return WL_EXIT_LIB_OPEN;
}

/*
 * User-space TLS writes one record of at most 16 KiB per write(); a buffer
 * BIO between OpenSSL and the socket gathers one SSL_write's records into
 * one write() (flushed after each SSL_write), as msquic's own TLS-over-TCP
 * path (secnetperf -tcp:1) batches its frames into one send.
 */
static int buffer_writes(struct tconn *c)
{
	BIO *buf = BIO_new(BIO_f_buffer()), *sock = SSL_get_wbio(c->ssl);

	if (!buf || BIO_set_write_buffer_size(buf, TLS_WRITE_BUF) <= 0 || !BIO_up_ref(sock)) {
		BIO_free(buf);
		fail(WL_EXIT_LIB_OPEN, "TLS write buffer failed on the client: %s", ssl_reason());
		return -1;
	}
	SSL_set0_wbio(c->ssl, BIO_push(buf, sock));
	return 0;
}

/* The TLS handshake on a connected socket; SSL_set_fd only now, as kTLS needs. */
static int tls_handshake(struct tconn *c)
{
	int rc;

	if (tcp_state.tls == TLS_NONE)
		return 0;
	c->ssl = SSL_new(tcp_state.ctx);
	if (!c->ssl || SSL_set_fd(c->ssl, c->fd) != 1) {
		fail(WL_EXIT_LIB_OPEN, "SSL_new failed on the %s: %s",
		     tcp_state.server ? "server" : "client", ssl_reason());
		return -1;
	}
	/* The sender's: the client's in bulk, the server's in download. */
	if (tcp_state.tls == TLS_USER && tcp_state.server == tcp_state.o->download &&
	    buffer_writes(c))
		return -1;
	if (tcp_state.session && SSL_set_session(c->ssl, tcp_state.session) != 1)
		wl_warn("cannot offer the last session for resumption: %s", ssl_reason());
	rc = tcp_state.server ? SSL_accept(c->ssl) : SSL_connect(c->ssl);
	if (rc != 1) {
		fail(WL_EXIT_HANDSHAKE, "TLS handshake failed on the %s (connection %d): %s",
		     tcp_state.server ? "server" : "client", c->idx, ssl_reason());
		return -1;
	}
	c->ktls_send = BIO_get_ktls_send(SSL_get_wbio(c->ssl)) || fault_ktls_claim();
	c->ktls_recv = BIO_get_ktls_recv(SSL_get_rbio(c->ssl));
	if (c->idx == 0)
		tcp_state.cipher = SSL_get_cipher_name(c->ssl);
	return 0;
}

/*
 * Orderly close: a peer that close()s with unread bytes in its receive
 * queue (TLS 1.3 session tickets, close_notify) sends RST and the other
 * side can lose the tail of the stream. So: close_notify, FIN, drain to
 * the peer's FIN, then close. 0 if the peer ended as cleanly (its
 * close_notify with TLS, its FIN without).
 */
static int orderly_close(struct tconn *c)
{
	char buf[4096];
	ssize_t n;

	if (c->ssl)
		SSL_shutdown(c->ssl);
	shutdown(c->fd, SHUT_WR);
	do
		n = c->ssl ? SSL_read(c->ssl, buf, sizeof(buf)) : read(c->fd, buf, sizeof(buf));
	while (n > 0 || (n < 0 && !c->ssl && errno == EINTR));
	if (c->ssl)
		return SSL_get_error(c->ssl, (int)n) == SSL_ERROR_ZERO_RETURN ? 0 : -1;
	return n == 0 ? 0 : -1;
}

static void *server_conn(void *p)
{
	struct tconn *c = p;
	size_t cap = tcp_state.o->io_size;
	uint8_t *buf = malloc(cap);

	if (!buf || tls_handshake(c))
		goto out;
	if (atomic_fetch_add(&tcp_state.conns_ready, 1) + 1 == tcp_state.o->streams)
		sem_post(&tcp_state.all_ready);
	for (;;) {
		ssize_t n = c->ssl ? SSL_read(c->ssl, buf, (int)cap) : recv(c->fd, buf, cap, 0);

		atomic_fetch_add(&tcp_state.io_calls, 1);
		if (n > 0) {
			if (!wl_pattern_check(c->off, buf, (size_t)n)) {
				if (!atomic_exchange(&tcp_state.verify_failed, true)) {
					tcp_state.verify_fail_off = c->off;
					tcp_state.verify_fail_conn = c->idx;
				}
				fail(WL_EXIT_VERIFY,
				     "received data failed the content check on connection %d at offset %llu",
				     c->idx, (unsigned long long)c->off);
				break;
			}
			c->off += (uint64_t)n;
			atomic_store_explicit(&tcp_state.stream_bytes[c->idx], c->off,
					      memory_order_relaxed);
			atomic_fetch_add(&tcp_state.app_bytes, (uint64_t)n);
			continue;
		}
		if (n == 0 || (c->ssl && SSL_get_error(c->ssl, (int)n) == SSL_ERROR_ZERO_RETURN)) {
			c->finished = true;
			break;
		}
		if (!c->ssl && errno == EINTR)
			continue;
		fail(WL_EXIT_CONN_LOST, "connection %d ended after %llu bytes: %s", c->idx,
		     (unsigned long long)c->off, c->ssl ? ssl_reason() : strerror(errno));
		break;
	}
	if (!atomic_load(&tcp_state.verify_failed))
		orderly_close(c);
out:
	free(buf);
	if (atomic_fetch_add(&tcp_state.conns_done, 1) + 1 == tcp_state.o->streams) {
		tcp_state.t_transfer_done_ns = wl_now_ns();
		sem_post(&tcp_state.all_done);
	}
	if (atomic_load(&tcp_state.conns_ready) < tcp_state.o->streams)
		sem_post(&tcp_state.all_ready); /* a failed handshake must not leave main waiting */
	return NULL;
}

static ssize_t client_send(struct tconn *c, uint64_t len)
{
	const uint8_t *region = wl_pattern_region();
	const uint64_t period = wl_pattern_period();
	uint64_t at = c->off % period;

	if (len > period - at)
		len = period - at;
	if (tcp_state.o->sendfile) {
		if (c->ssl)
			return SSL_sendfile(c->ssl, tcp_state.memfd, (off_t)at, len, 0);
		off_t o = (off_t)at;
		return sendfile(c->fd, tcp_state.memfd, &o, len);
	}
	if (c->ssl) {
		int n = SSL_write(c->ssl, region + at, (int)len);

		if (n > 0 && tcp_state.tls == TLS_USER && BIO_flush(SSL_get_wbio(c->ssl)) <= 0)
			return -1;
		return n;
	}
	return send(c->fd, region + at, len, 0);
}

static void *client_conn(void *p)
{
	struct tconn *c = p;

	if (tls_handshake(c))
		goto out;
	if (tcp_state.o->sendfile && c->ssl && !c->ktls_send) {
		fail(WL_EXIT_LIB_OPEN,
		     "--sendfile needs kernel TLS on send, which OpenSSL did not enable on connection %d",
		     c->idx);
		goto out;
	}
	if (atomic_fetch_add(&tcp_state.conns_ready, 1) + 1 == tcp_state.o->streams)
		sem_post(&tcp_state.all_ready);
	sem_wait(&tcp_state.may_start); /* main releases all connections at once */
	sem_post(&tcp_state.may_start);
	while (!atomic_load(&tcp_state.stopping)) {
		uint64_t len = tcp_state.o->io_size;
		ssize_t n;

		if (tcp_state.o->bytes) {
			if (c->off >= tcp_state.o->bytes)
				break;
			if (len > tcp_state.o->bytes - c->off)
				len = tcp_state.o->bytes - c->off;
		}
		n = client_send(c, len);
		atomic_fetch_add(&tcp_state.io_calls, 1);
		if (n <= 0) {
			if (!c->ssl && errno == EINTR)
				continue;
			fail(WL_EXIT_CONN_LOST,
			     "sending on connection %d failed after %llu bytes: %s", c->idx,
			     (unsigned long long)c->off, c->ssl ? ssl_reason() : strerror(errno));
			break;
		}
		c->off += (uint64_t)n;
		atomic_fetch_add(&tcp_state.app_bytes, (uint64_t)n);
	}
	c->finished = !tcp_state.failure.code;
	orderly_close(c);
out:
	if (atomic_fetch_add(&tcp_state.conns_done, 1) + 1 == tcp_state.o->streams) {
		tcp_state.t_transfer_done_ns = wl_now_ns();
		sem_post(&tcp_state.all_done);
	}
	if (atomic_load(&tcp_state.conns_ready) < tcp_state.o->streams)
		sem_post(&tcp_state.all_ready);
	return NULL;
}

static int tcp_addr(struct sockaddr_in *a)
{
	memset(a, 0, sizeof(*a));
	a->sin_family = AF_INET;
	a->sin_port = htons((uint16_t)tcp_state.o->port);
	return inet_pton(AF_INET, tcp_state.o->addr, &a->sin_addr) == 1 ? 0 : -1;
}

static void emit_connected(void)
{
	struct wl_json j;

	wl_json_begin(&j);
	wl_json_str(&j, "event", "connected");
	wl_json_u64(&j, "t_ns", tcp_state.t_connected_ns);
	json_tls(&j);
	wl_emit("%s", wl_json_end(&j));
}

/* --pattern download */

/*
 * Request and answer are small writes after the handshake's: Nagle holds
 * them until the peer's delayed ACK (a resumed TLS 1.2 download took 45 ms
 * for its first byte), so both ends write at once, as HTTP servers do.
 */
static void dl_nodelay(int fd)
{
	int one = 1;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/*
 * --tcp-cc on each socket, as iperf3 -C does: a namespace other than the
 * host's may only default to the host's allowed algorithms, a socket of
 * a privileged process may use any the kernel has. Accepted sockets
 * inherit the listener's. The first socket's, as the kernel reports it,
 * goes in the done report.
 */
static char tcp_cc_ran[16]; /* the kernel's TCP_CA_NAME_MAX */

static int set_tcp_cc(int fd)
{
	const char *cc = tcp_state.o->tcp_cc;
	socklen_t len = sizeof(tcp_cc_ran);

	if (cc && setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc, strlen(cc))) {
		fail(WL_EXIT_USAGE, "TCP congestion control '%s' was refused: %s", cc,
		     strerror(errno));
		return -1;
	}
	if (!tcp_cc_ran[0] && getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, tcp_cc_ran, &len))
		tcp_cc_ran[0] = 0;
	return 0;
}

/* Closes conns[0] under the lock a mark reads it with; keeps its counts. */
static void dl_close(struct tconn *c, bool reset)
{
	struct linger lg = {.l_onoff = 1, .l_linger = 0};

	/* A failed download ends in RST, so the peer cannot take it for whole. */
	if (reset && c->fd >= 0)
		setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	pthread_mutex_lock(&tcp_state.conn_lock);
	tcp_counts_add(c->fd, &tcp_state.closed);
	if (c->ssl)
		SSL_free(c->ssl);
	c->ssl = NULL;
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	pthread_mutex_unlock(&tcp_state.conn_lock);
}

static void dl_counters(const struct tconn *c, struct wl_dl *r)
{
	struct tcp_counts t = {0};

	if (!tcp_counts_add(c->fd, &t))
		return;
	r->has_counters = true;
	r->retransmits = t.retrans;
	r->packets_sent = t.segs_out;
	r->packets_received = t.segs_in;
}

/* After the handshake: the first connection is the run's "connected". */
static void dl_connected(struct tconn *c, struct wl_dl *r, bool ktls_send, bool ktls_recv)
{
	r->t_handshake = wl_now_ns();
	if (c->ssl) {
		r->has_resumed = r->has_early = true;
		r->resumed = SSL_session_reused(c->ssl);
		r->early_data = false; /* not offered: OpenSSL's early data is not used */
	}
	if (r->i) {
		/* The report's kTLS flags: every connection had it. */
		c->ktls_send = c->ktls_send && ktls_send;
		c->ktls_recv = c->ktls_recv && ktls_recv;
	} else {
		tcp_state.t_connected_ns = r->t_handshake;
		emit_connected();
	}
}

static ssize_t dl_read(struct tconn *c, void *buf, size_t len)
{
	ssize_t n = c->ssl ? SSL_read(c->ssl, buf, (int)len) : recv(c->fd, buf, len, 0);

	atomic_fetch_add(&tcp_state.io_calls, 1);
	return n;
}

static bool dl_eof(const struct tconn *c, ssize_t n)
{
	return n == 0 || (c->ssl && SSL_get_error(c->ssl, (int)n) == SSL_ERROR_ZERO_RETURN);
}

/* One download on a new connection; 0 or the run's failure code. */
static int client_download(struct tconn *c, const struct sockaddr_in *a, uint64_t i, uint8_t *buf,
			   size_t cap)
{
	const struct wl_opts *o = tcp_state.o;
	const bool ktls_send = c->ktls_send, ktls_recv = c->ktls_recv;
	struct timeval tv = {.tv_sec = CONNECT_TIMEOUT_S};
	struct wl_dl r = {.i = i};
	uint8_t req[WL_DL_REQUEST_LEN];
	ssize_t n;
	int fd;

	c->idx = (int)i;
	c->off = 0;
	c->finished = false;
	r.t_connect = wl_now_ns();
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		fail(WL_EXIT_INTERNAL, "socket failed: %s", strerror(errno));
		return tcp_state.failure.code;
	}
	pthread_mutex_lock(&tcp_state.conn_lock);
	c->fd = fd;
	pthread_mutex_unlock(&tcp_state.conn_lock);
	dl_nodelay(fd);
	if (set_tcp_cc(fd))
		goto out;
	setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(c->fd, (const struct sockaddr *)a, sizeof(*a))) {
		fail(WL_EXIT_HANDSHAKE, "TCP connect to %s:%d failed (download %llu): %s", o->addr,
		     o->port, (unsigned long long)i, strerror(errno));
		goto out;
	}
	tv.tv_sec = 0;
	setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	r.t_tcp = wl_now_ns();
	if (tls_handshake(c))
		goto out;
	dl_connected(c, &r, ktls_send, ktls_recv);
	if (!c->ssl)
		r.t_tcp = 0; /* plain TCP: the handshake is the TCP one */

	wl_put_le64(req, o->size);
	n = c->ssl ? SSL_write(c->ssl, req, sizeof(req)) : send(c->fd, req, sizeof(req), 0);
	if (n != sizeof(req)) {
		fail(WL_EXIT_CONN_LOST, "sending the request of download %llu failed: %s",
		     (unsigned long long)i, c->ssl ? ssl_reason() : strerror(errno));
		goto out;
	}
	for (;;) {
		n = dl_read(c, buf, cap);
		if (n > 0) {
			if (!r.t_first_byte)
				r.t_first_byte = wl_now_ns();
			if (c->off + (uint64_t)n > o->size ||
			    !wl_pattern_check(c->off, buf, (size_t)n)) {
				atomic_store(&tcp_state.verify_failed, true);
				tcp_state.verify_fail_off = c->off;
				tcp_state.verify_fail_conn = c->idx;
				fail(WL_EXIT_VERIFY,
				     "download %llu failed the content check at offset %llu%s",
				     (unsigned long long)i, (unsigned long long)c->off,
				     c->off + (uint64_t)n > o->size ? ": more than --size arrived"
								    : "");
				goto out;
			}
			c->off += (uint64_t)n;
			atomic_fetch_add(&tcp_state.app_bytes, (uint64_t)n);
			if (c->off == o->size)
				r.t_complete = wl_now_ns();
			continue;
		}
		if (dl_eof(c, n))
			break;
		if (!c->ssl && errno == EINTR)
			continue;
		break;
	}
	if (c->off != o->size) {
		fail(WL_EXIT_CONN_LOST, "download %llu ended after %llu of %llu bytes: %s",
		     (unsigned long long)i, (unsigned long long)c->off, (unsigned long long)o->size,
		     dl_eof(c, n) ? "the server closed"
		     : c->ssl	  ? ssl_reason()
				  : strerror(errno));
		goto out;
	}
	dl_counters(c, &r);
	if (c->ssl && o->resume) {
		/* TLS 1.3 tickets come after the handshake: the session as it ends. */
		SSL_SESSION *sess = SSL_get1_session(c->ssl);

		if (sess) {
			SSL_SESSION_free(tcp_state.session);
			tcp_state.session = sess;
		}
	}
	orderly_close(c);
	c->finished = true;
out:
	dl_close(c, !c->finished);
	if (!c->finished)
		return tcp_state.failure.code;
	r.bytes = c->off;
	tcp_state.t_transfer_done_ns = r.t_complete;
	wl_emit_dl("download", &r);
	atomic_fetch_add(&tcp_state.downloads, 1);
	return 0;
}

static int run_client_download(void)
{
	struct tconn *c = &tcp_state.conns[0];
	uint8_t *buf = malloc(tcp_state.o->io_size);
	struct sockaddr_in a;
	uint64_t i;
	int code = 0;

	if (!buf)
		return WL_EXIT_INTERNAL;
	if (tcp_addr(&a)) {
		wl_warn("bad IPv4 address %s", tcp_state.o->addr);
		free(buf);
		return WL_EXIT_USAGE;
	}
	if (tcp_state.o->wait_start)
		sem_wait(&tcp_state.may_start);
	tcp_state.nconns = 1;
	for (i = 0; i < tcp_state.o->count && !code && !atomic_load(&tcp_state.stopping); i++)
		code = client_download(c, &a, i, buf, tcp_state.o->io_size);
	free(buf);
	return code;
}

/* One connection, served whole: the request, --size bytes, the close. */
static void server_download(struct tconn *c, uint64_t i)
{
	const struct wl_opts *o = tcp_state.o;
	const bool ktls_send = c->ktls_send, ktls_recv = c->ktls_recv;
	struct wl_dl r = {.i = i};
	uint8_t req[WL_DL_REQUEST_LEN];
	size_t got = 0;
	uint64_t want = 0;
	ssize_t n = 0;

	c->idx = (int)i;
	c->off = 0;
	c->finished = false;
	if (tls_handshake(c))
		goto out;
	dl_connected(c, &r, ktls_send, ktls_recv);
	if (o->sendfile && c->ssl && !c->ktls_send) {
		fail(WL_EXIT_LIB_OPEN,
		     "--sendfile needs kernel TLS on send, which OpenSSL did not enable on connection %llu",
		     (unsigned long long)i);
		goto out;
	}
	while (got < sizeof(req)) {
		n = dl_read(c, req + got, sizeof(req) - got);
		if (n > 0)
			got += (size_t)n;
		else if (n < 0 && !c->ssl && errno == EINTR)
			continue;
		else
			break;
	}
	if (got < sizeof(req)) {
		if (!got && dl_eof(c, n))
			goto out; /* it asked for nothing: not a download */
		fail(WL_EXIT_CONN_LOST, "connection %llu ended after %zu bytes of its request: %s",
		     (unsigned long long)i, got, c->ssl ? ssl_reason() : strerror(errno));
		goto out;
	}
	want = wl_get_le64(req);
	if (want != o->size)
		wl_warn("connection %llu asked for %llu bytes; sending --size, %llu",
			(unsigned long long)i, (unsigned long long)want,
			(unsigned long long)o->size);
	while (c->off < o->size) {
		n = client_send(c, o->size - c->off < o->io_size ? o->size - c->off : o->io_size);
		atomic_fetch_add(&tcp_state.io_calls, 1);
		if (n <= 0) {
			if (!c->ssl && errno == EINTR)
				continue;
			fail(WL_EXIT_CONN_LOST,
			     "sending on connection %llu failed after %llu bytes: %s",
			     (unsigned long long)i, (unsigned long long)c->off,
			     c->ssl ? ssl_reason() : strerror(errno));
			goto out;
		}
		c->off += (uint64_t)n;
		atomic_fetch_add(&tcp_state.app_bytes, (uint64_t)n);
	}
	/* The client closes only once it has checked every byte. */
	if (orderly_close(c)) {
		fail(WL_EXIT_CONN_LOST,
		     "connection %llu: the client did not close cleanly after the %llu bytes (its check failed, or it went away)",
		     (unsigned long long)i, (unsigned long long)c->off);
		goto out;
	}
	r.t_complete = wl_now_ns();
	dl_counters(c, &r);
	c->finished = true;
out:
	dl_close(c, false);
	if (!c->finished)
		return;
	r.bytes = c->off;
	tcp_state.t_transfer_done_ns = r.t_complete;
	wl_emit_dl("served", &r);
	atomic_fetch_add(&tcp_state.downloads, 1);
}

/* Serve downloads until --count are done, "stop", "exit" or a failure. */
static int run_server_download(void)
{
	struct pollfd p[2] = {
		{.fd = tcp_state.listen_fd, .events = POLLIN},
		{.fd = tcp_state.wake_fd, .events = POLLIN},
	};
	uint64_t accepted = 0;
	int fd;

	tcp_state.nconns = 1;
	while (!atomic_load(&tcp_state.stopping) &&
	       atomic_load(&tcp_state.downloads) < tcp_state.o->count) {
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			wl_warn("poll failed: %s", strerror(errno));
			return WL_EXIT_INTERNAL;
		}
		if (p[1].revents)
			break;
		fd = accept4(tcp_state.listen_fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			wl_warn("accept failed: %s", strerror(errno));
			return WL_EXIT_INTERNAL;
		}
		pthread_mutex_lock(&tcp_state.conn_lock);
		tcp_state.conns[0].fd = fd;
		pthread_mutex_unlock(&tcp_state.conn_lock);
		dl_nodelay(fd);
		server_download(&tcp_state.conns[0], accepted++);
	}
	return tcp_state.failure.code;
}

/*
 * --pattern rr. Each role is one thread around one epoll set: the client's
 * timer, every connection's socket and the wake eventfd ("stop"). No call
 * blocks, connects and TLS handshakes included, so a request goes out when
 * it falls due whatever the replies (or an on-demand connection still
 * opening) do; a connection that cannot take it yet keeps it queued, due
 * time and all. The user-space TLS write buffer (buffer_writes) is left
 * out: a request or response of up to 16 KiB is one record, one write().
 */
static char rr_tag_timer, rr_tag_wake, rr_tag_listen;

static const char *rr_role(void)
{
	return tcp_state.server ? "server" : "client";
}

static int rr_watch(int fd, void *tag, uint32_t events)
{
	struct epoll_event e = {.events = events, .data.ptr = tag};

	return epoll_ctl(rr_tcp.ep, EPOLL_CTL_ADD, fd, &e);
}

/* The events the connection waits for, as its state says. */
static void rr_events(struct rrconn *c)
{
	struct epoll_event e = {.data.ptr = c};
	uint32_t ev = c->want_out ? EPOLLOUT : 0;

	if (c->state != RR_CONNECTING && (!c->paused || c->want_in))
		ev |= EPOLLIN;
	if (c->dead || ev == c->ev)
		return;
	e.events = ev;
	if (!epoll_ctl(rr_tcp.ep, EPOLL_CTL_MOD, c->t.fd, &e))
		c->ev = ev;
}

static struct rrconn *rr_add(int fd, enum rr_state state)
{
	struct rrconn *c = NULL;

	if (rr_tcp.nconns < RR_MAX_CONNS)
		c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		return NULL;
	}
	c->t.fd = fd;
	c->state = state;
	c->want_out = state == RR_CONNECTING;
	c->ev = c->want_out ? EPOLLOUT : EPOLLIN;
	if (rr_watch(fd, c, c->ev)) {
		close(fd);
		free(c);
		return NULL;
	}
	c->t.idx = (int)atomic_fetch_add(&wl_rr.connections, 1);
	pthread_mutex_lock(&tcp_state.conn_lock);
	rr_tcp.conns[rr_tcp.nconns++] = c;
	pthread_mutex_unlock(&tcp_state.conn_lock);
	return c;
}

/* Closes the socket now (close_notify first, if there is room for it); rr_reap frees. */
static void rr_close(struct rrconn *c)
{
	if (c->dead)
		return;
	c->dead = true;
	epoll_ctl(rr_tcp.ep, EPOLL_CTL_DEL, c->t.fd, NULL);
	if (c->t.ssl && c->state == RR_READY) {
		ERR_clear_error();
		SSL_shutdown(c->t.ssl);
		ERR_clear_error();
	}
	pthread_mutex_lock(&tcp_state.conn_lock);
	tcp_counts_add(c->t.fd, &tcp_state.closed);
	close(c->t.fd);
	c->t.fd = -1;
	pthread_mutex_unlock(&tcp_state.conn_lock);
}

/* Frees the closed connections; the others keep their order. */
static void rr_reap(void)
{
	int i, n = 0;

	pthread_mutex_lock(&tcp_state.conn_lock);
	for (i = 0; i < rr_tcp.nconns; i++) {
		struct rrconn *c = rr_tcp.conns[i];

		if (!c->dead) {
			rr_tcp.conns[n++] = c;
			continue;
		}
		SSL_free(c->t.ssl);
		wl_rr_fifo_free(&c->q);
		free(c->msg);
		free(c);
	}
	rr_tcp.nconns = n;
	pthread_mutex_unlock(&tcp_state.conn_lock);
}

static void rr_close_all(void)
{
	int i;

	for (i = 0; i < rr_tcp.nconns; i++)
		rr_close(rr_tcp.conns[i]);
	rr_reap();
}

/*
 * The peer went away rather than failed: EOF (OpenSSL 3 says "unexpected
 * eof" for one without close_notify), close_notify or a reset.
 */
static bool rr_peer_left(struct rrconn *c, ssize_t n)
{
	int e;

	if (!c->t.ssl)
		return n == 0 || errno == ECONNRESET || errno == EPIPE;
	e = SSL_get_error(c->t.ssl, (int)n);
	return e == SSL_ERROR_ZERO_RETURN || e == SSL_ERROR_SYSCALL ||
	       (e == SSL_ERROR_SSL &&
		ERR_GET_REASON(ERR_peek_error()) == SSL_R_UNEXPECTED_EOF_WHILE_READING);
}

/* True if the call would have blocked; the connection then waits for what it needs. */
static bool rr_would_block(struct rrconn *c, ssize_t n, bool writing)
{
	if (c->t.ssl) {
		int e = SSL_get_error(c->t.ssl, (int)n);

		if (e == SSL_ERROR_WANT_WRITE)
			c->want_out = true;
		else if (e == SSL_ERROR_WANT_READ)
			c->want_in = c->want_in || writing;
		return e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ;
	}
	if (n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
		return false;
	if (writing)
		c->want_out = true;
	return true;
}

/* Connected, and handshaken with TLS: the first one is the run's "connected". */
static void rr_ready(struct rrconn *c)
{
	c->state = RR_READY;
	c->want_out = false;
	if (c->t.ssl) {
		c->t.ktls_send = BIO_get_ktls_send(SSL_get_wbio(c->t.ssl));
		c->t.ktls_recv = BIO_get_ktls_recv(SSL_get_rbio(c->t.ssl));
		if (!tcp_state.cipher)
			tcp_state.cipher = SSL_get_cipher_name(c->t.ssl);
	}
	rr_tcp.ktls_send = (!rr_tcp.handshaken || rr_tcp.ktls_send) && c->t.ktls_send;
	rr_tcp.ktls_recv = (!rr_tcp.handshaken || rr_tcp.ktls_recv) && c->t.ktls_recv;
	if (rr_tcp.handshaken)
		return;
	rr_tcp.handshaken = true;
	tcp_state.t_connected_ns = wl_now_ns();
	emit_connected();
	if (!tcp_state.server && rr_tcp.sched.phase == WL_RR_WAIT_CONN &&
	    wl_rr_sched_start(&rr_tcp.sched, tcp_state.o->duration_ms))
		fail(WL_EXIT_INTERNAL, "cannot arm the request timer: %s", strerror(errno));
}

/* After connect(): the TLS handshake, or ready at once without TLS. */
static int rr_tls_start(struct rrconn *c)
{
	if (tcp_state.tls == TLS_NONE) {
		rr_ready(c);
		return 0;
	}
	c->t.ssl = SSL_new(tcp_state.ctx);
	c->msg = malloc(wl_rr.payload);
	if (!c->t.ssl || !c->msg || SSL_set_fd(c->t.ssl, c->t.fd) != 1) {
		fail(WL_EXIT_LIB_OPEN, "SSL_new failed on the %s: %s", rr_role(), ssl_reason());
		return -1;
	}
	memcpy(c->msg + WL_RR_HDR, wl_rr_body(), wl_rr.payload - WL_RR_HDR);
	if (tcp_state.server)
		SSL_set_accept_state(c->t.ssl);
	else
		SSL_set_connect_state(c->t.ssl);
	c->state = RR_HANDSHAKE;
	return 0;
}

static void rr_handshake(struct rrconn *c)
{
	int r, e;

	ERR_clear_error();
	r = SSL_do_handshake(c->t.ssl);
	if (r == 1) {
		rr_ready(c);
		return;
	}
	e = SSL_get_error(c->t.ssl, r);
	if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
		c->want_out = e == SSL_ERROR_WANT_WRITE;
		return;
	}
	/* A client may close a connection it opened as the run ends. */
	if (!tcp_state.server || !rr_peer_left(c, r))
		fail(WL_EXIT_HANDSHAKE, "TLS handshake failed on the %s (connection %d): %s",
		     rr_role(), c->t.idx, ssl_reason());
	ERR_clear_error();
	rr_close(c);
}

static ssize_t rr_send(struct rrconn *c)
{
	const uint8_t *body = wl_rr_body() - WL_RR_HDR; /* as if the header were there */
	struct iovec iov[2];
	struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 1};

	if (c->t.ssl) {
		/* After WANT_WRITE, OpenSSL wants the very same call again. */
		ERR_clear_error();
		return SSL_write(c->t.ssl, c->msg, (int)wl_rr.payload);
	}
	if (c->w_off < WL_RR_HDR) {
		iov[0] = (struct iovec){c->hdr + c->w_off, WL_RR_HDR - c->w_off};
		iov[1] = (struct iovec){(void *)(body + WL_RR_HDR), wl_rr.payload - WL_RR_HDR};
		mh.msg_iovlen = 2;
	} else {
		iov[0] = (struct iovec){(void *)(body + c->w_off), wl_rr.payload - c->w_off};
	}
	return sendmsg(c->t.fd, &mh, MSG_NOSIGNAL);
}

/* Writes the queued messages, one after another, until done or the socket is full. */
static void rr_write(struct rrconn *c)
{
	if (c->state != RR_READY || c->dead)
		return;
	c->want_out = c->want_in = false;
	for (;;) {
		ssize_t n;

		if (!c->writing) {
			struct wl_rr_req *r;

			if (c->nw == c->q.len)
				return;
			r = wl_rr_fifo_at(&c->q, c->nw++);
			wl_put_le64(c->t.ssl ? c->msg : c->hdr, r->seq);
			c->writing = true;
			c->w_off = 0;
			if (!tcp_state.server) {
				r->sent_ns = wl_now_ns();
				atomic_fetch_add(&wl_rr.sent, 1);
			}
		}
		n = rr_send(c);
		atomic_fetch_add(&tcp_state.io_calls, 1);
		if (n > 0) {
			c->w_off += (uint32_t)n;
			if (c->w_off < wl_rr.payload)
				continue;
			c->writing = false;
			if (tcp_state.server) {
				wl_rr_fifo_pop(&c->q);
				c->nw--;
				atomic_fetch_add(&wl_rr.served, 1);
			}
			continue;
		}
		if (rr_would_block(c, n, true))
			return;
		if (!c->t.ssl && errno == EINTR)
			continue;
		if (tcp_state.server) {
			/* The client went away; what it did not wait for is its account. */
			ERR_clear_error();
			rr_close(c);
			return;
		}
		fail(WL_EXIT_CONN_LOST, "sending request %llu on connection %d failed: %s",
		     (unsigned long long)wl_rr_fifo_at(&c->q, c->nw - 1)->seq, c->t.idx,
		     c->t.ssl ? ssl_reason() : strerror(errno));
		return;
	}
}

/*
 * Server: a whole request, or one that failed its check, which is answered
 * at once and is the connection's last (wl.h says why).
 */
static void rr_request(struct rrconn *c)
{
	uint64_t seq = wl_get_le64(c->rx.hdr);

	if (c->rx.bad) {
		c->spent = true;
		if (!atomic_exchange(&tcp_state.verify_failed, true))
			wl_fail(&tcp_state.failure, NULL, WL_EXIT_VERIFY,
				"request %llu on connection %d failed the content check (is --payload the same on both roles?); answered at once, for the client to see, and the connection ended",
				(unsigned long long)seq, c->t.idx);
	}
	atomic_fetch_add(&tcp_state.app_bytes, c->rx.got);
	if (wl_rr_fifo_push(&c->q, seq))
		fail(WL_EXIT_INTERNAL, "out of memory for connection %d's responses", c->t.idx);
}

/* Client: a whole response, which must answer the oldest request sent on c. */
static void rr_response(struct rrconn *c, uint64_t t)
{
	const struct wl_rr_req *req = NULL;
	int code;

	if (c->q.len && c->nw && !(c->writing && c->nw == 1))
		req = wl_rr_fifo_at(&c->q, 0);
	code = wl_rr_answer(req, &c->rx, t, (uint64_t)c->t.idx, rr_tcp.why, sizeof(rr_tcp.why));
	if (code) {
		atomic_store(&tcp_state.verify_failed, true);
		fail(code, "%s (connection %d)", rr_tcp.why, c->t.idx);
		return;
	}
	atomic_fetch_add(&tcp_state.app_bytes, wl_rr.payload);
	wl_rr_fifo_pop(&c->q);
	c->nw--;
	if (tcp_state.o->tcp_on_demand && !c->q.len && rr_tcp.pending.len) {
		if (wl_rr_fifo_push(&c->q, wl_rr_fifo_at(&rr_tcp.pending, 0)->seq))
			fail(WL_EXIT_INTERNAL, "out of memory for connection %d's requests",
			     c->t.idx);
		wl_rr_fifo_pop(&rr_tcp.pending);
	}
}

/* Server: once a bad request's answer is out, FIN; what comes after is read and dropped. */
static void rr_spent(struct rrconn *c)
{
	if (!c->spent || c->q.len || c->half_closed || c->dead)
		return;
	if (c->t.ssl) {
		ERR_clear_error();
		SSL_shutdown(c->t.ssl);
		ERR_clear_error();
	}
	shutdown(c->t.fd, SHUT_WR);
	c->half_closed = true;
}

static void rr_take(struct rrconn *c, const uint8_t *p, size_t len, uint64_t t)
{
	while (len && !c->dead && !c->spent) {
		size_t k = wl_rr_rx_feed(&c->rx, p, len);

		p += k, len -= k;
		if (!wl_rr_rx_ready(&c->rx))
			break;
		if (tcp_state.server)
			rr_request(c);
		else
			rr_response(c, t);
		if (!tcp_state.server && tcp_state.failure.code)
			return;
		c->rx = (struct wl_rr_rx){0};
	}
	if (tcp_state.server && !c->dead) {
		/* Not another request until the answers have room to go. */
		rr_write(c);
		c->paused = c->q.len > 0;
		rr_spent(c);
	}
}

static void rr_ended(struct rrconn *c, ssize_t n)
{
	const char *why = c->t.ssl ? (SSL_get_error(c->t.ssl, (int)n) == SSL_ERROR_ZERO_RETURN
					      ? "close_notify"
					      : ssl_reason())
			  : n == 0 ? "EOF"
				   : strerror(errno);

	if (!tcp_state.server)
		fail(WL_EXIT_CONN_LOST,
		     "the server closed connection %d with %u requests on it: %s", c->t.idx,
		     c->q.len, why);
	else if (c->rx.got || !rr_peer_left(c, n))
		fail(WL_EXIT_CONN_LOST, "connection %d ended %u bytes into a request: %s", c->t.idx,
		     c->rx.got, why);
	ERR_clear_error();
	rr_close(c);
}

static void rr_read(struct rrconn *c)
{
	while (c->state == RR_READY && !c->dead && !c->paused) {
		ssize_t n;

		if (c->t.ssl) {
			ERR_clear_error();
			n = SSL_read(c->t.ssl, rr_tcp.rbuf, RR_READ_BUF);
		} else {
			n = recv(c->t.fd, rr_tcp.rbuf, RR_READ_BUF, 0);
		}
		atomic_fetch_add(&tcp_state.io_calls, 1);
		if (n > 0) {
			rr_take(c, rr_tcp.rbuf, (size_t)n, wl_now_ns());
			if (!tcp_state.server && tcp_state.failure.code)
				return;
			continue;
		}
		if (rr_would_block(c, n, false))
			return;
		if (!c->t.ssl && n < 0 && errno == EINTR)
			continue;
		rr_ended(c, n);
		return;
	}
}

static void rr_drive(struct rrconn *c, uint32_t events)
{
	if (c->state == RR_CONNECTING) {
		int err = 0;
		socklen_t len = sizeof(err);

		if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
			return;
		if (getsockopt(c->t.fd, SOL_SOCKET, SO_ERROR, &err, &len) || err) {
			fail(WL_EXIT_HANDSHAKE, "TCP connect to %s:%d failed (connection %d): %s",
			     tcp_state.o->addr, tcp_state.o->port, c->t.idx,
			     strerror(err ? err : errno));
			rr_close(c);
			return;
		}
		if (rr_tls_start(c)) {
			rr_close(c);
			return;
		}
	}
	if (c->state == RR_HANDSHAKE)
		rr_handshake(c);
	if (c->state == RR_READY) {
		rr_write(c);
		if (tcp_state.server && !c->q.len)
			c->paused = false;
		rr_spent(c);
		rr_read(c);
		if (!tcp_state.server)
			rr_write(c); /* a pending request it took on */
	}
	rr_events(c);
}

static struct rrconn *rr_open(void)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	struct rrconn *c;

	if (fd < 0) {
		fail(WL_EXIT_INTERNAL, "socket failed: %s", strerror(errno));
		return NULL;
	}
	dl_nodelay(fd);
	if (set_tcp_cc(fd)) {
		close(fd);
		return NULL;
	}
	if (connect(fd, (const struct sockaddr *)&rr_tcp.addr, sizeof(rr_tcp.addr)) &&
	    errno != EINPROGRESS) {
		fail(WL_EXIT_HANDSHAKE, "TCP connect to %s:%d failed: %s", tcp_state.o->addr,
		     tcp_state.o->port, strerror(errno));
		close(fd);
		return NULL;
	}
	c = rr_add(fd, RR_CONNECTING);
	if (!c) {
		fail(WL_EXIT_INTERNAL, "cannot watch a new connection: %s", strerror(errno));
		return NULL;
	}
	c->deadline_ns = wl_now_ns() + CONNECT_TIMEOUT_S * 1000000000ull;
	return c;
}

/* Client: request seq fell due; it goes out now if a connection can take it. */
/* Client: request seq fell due (the schedule calls). */
static void rr_dispatch(uint64_t seq, void *arg)
{
	struct rrconn *c = NULL;
	int i;

	(void)arg;
	if (!tcp_state.o->tcp_on_demand) {
		c = rr_tcp.conns[0];
	} else {
		for (i = 0; i < rr_tcp.nconns && !c; i++)
			if (rr_tcp.conns[i]->state == RR_READY && !rr_tcp.conns[i]->q.len)
				c = rr_tcp.conns[i];
		if (!c && rr_tcp.nconns < RR_MAX_CONNS && !(c = rr_open()))
			return;
		if (!c) {
			if (wl_rr_fifo_push(&rr_tcp.pending, seq))
				fail(WL_EXIT_INTERNAL, "out of memory for pending requests");
			return;
		}
	}
	if (wl_rr_fifo_push(&c->q, seq)) {
		fail(WL_EXIT_INTERNAL, "out of memory for connection %d's requests", c->t.idx);
		return;
	}
	rr_write(c);
	rr_events(c);
}

/* Client: the timer fired; every request due by now goes. */
static void rr_tick(void)
{
	if (wl_rr_sched_tick(&rr_tcp.sched, rr_dispatch, NULL, &tcp_state.failure))
		fail(WL_EXIT_INTERNAL, "cannot arm the request timer: %s", strerror(errno));
}

static void rr_unwake(void)
{
	uint64_t v;

	if (read(tcp_state.wake_fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		wl_warn("reading the wake eventfd failed: %s", strerror(errno));
}

/* Client: nothing queued or waiting for a reply. */
static bool rr_idle(void)
{
	int i;

	for (i = 0; i < rr_tcp.nconns; i++)
		if (rr_tcp.conns[i]->q.len)
			return false;
	return !rr_tcp.pending.len;
}

static int rr_setup(void)
{
	rr_tcp.ep = epoll_create1(EPOLL_CLOEXEC);
	rr_tcp.rbuf = malloc(RR_READ_BUF);
	if (rr_tcp.ep < 0 || !rr_tcp.rbuf || rr_watch(tcp_state.wake_fd, &rr_tag_wake, EPOLLIN)) {
		wl_warn("cannot set up the event loop: %s", strerror(errno));
		return WL_EXIT_INTERNAL;
	}
	if (tcp_state.server)
		return 0;
	if (wl_rr_sched_open(&rr_tcp.sched) ||
	    rr_watch(rr_tcp.sched.timer, &rr_tag_timer, EPOLLIN)) {
		wl_warn("cannot set up the request timer: %s", strerror(errno));
		return WL_EXIT_INTERNAL;
	}
	return 0;
}

static void rr_teardown(void)
{
	rr_close_all();
	wl_rr_fifo_free(&rr_tcp.pending);
	free(rr_tcp.rbuf);
	rr_tcp.rbuf = NULL;
	wl_rr_sched_close(&rr_tcp.sched);
	if (rr_tcp.ep >= 0)
		close(rr_tcp.ep);
	rr_tcp.ep = -1;
}

/* Client: a connection not up by its deadline fails the run. */
static void rr_check_deadlines(uint64_t now)
{
	int i;

	for (i = 0; i < rr_tcp.nconns; i++) {
		struct rrconn *c = rr_tcp.conns[i];

		if (c->state != RR_READY && !c->dead && now > c->deadline_ns) {
			fail(WL_EXIT_HANDSHAKE, "connection %d to %s:%d was not up within %d s",
			     c->t.idx, tcp_state.o->addr, tcp_state.o->port, CONNECT_TIMEOUT_S);
			return;
		}
	}
}

static int rr_run_client(void)
{
	struct epoll_event evs[RR_EVENTS];
	int code;

	if (tcp_addr(&rr_tcp.addr)) {
		wl_warn("bad IPv4 address %s", tcp_state.o->addr);
		return WL_EXIT_USAGE;
	}
	code = rr_setup();
	if (code)
		return code;
	if (tcp_state.o->wait_start)
		sem_wait(&tcp_state.may_start);
	if (!rr_open())
		goto out;
	while (!tcp_state.failure.code) {
		int n, i, timeout_ms = 1000; /* the connect deadlines are looked at */
		uint64_t now;

		if (wl_rr_sched_over(&rr_tcp.sched, wl_now_ns(), &timeout_ms))
			break;
		n = epoll_wait(rr_tcp.ep, evs, RR_EVENTS, timeout_ms);
		if (n < 0 && errno != EINTR) {
			fail(WL_EXIT_INTERNAL, "epoll_wait failed: %s", strerror(errno));
			break;
		}
		for (i = 0; i < n && !tcp_state.failure.code; i++) {
			void *p = evs[i].data.ptr;

			if (p == &rr_tag_timer)
				rr_tick();
			else if (p == &rr_tag_wake)
				rr_unwake();
			else if (!((struct rrconn *)p)->dead)
				rr_drive(p, evs[i].events);
		}
		rr_reap();
		now = wl_now_ns();
		if (atomic_load(&tcp_state.stopping))
			wl_rr_sched_stop(&rr_tcp.sched, now);
		if (rr_tcp.sched.phase == WL_RR_DRAINING && rr_idle())
			break;
		rr_check_deadlines(now);
		wl_emit_tick();
	}
out:
	tcp_state.t_transfer_done_ns = atomic_load(&wl_rr.t_last_answer);
	rr_teardown();
	return tcp_state.failure.code;
}

static void rr_accept(void)
{
	for (;;) {
		int fd = accept4(tcp_state.listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		struct rrconn *c;

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				wl_warn("accept failed: %s", strerror(errno));
			return;
		}
		dl_nodelay(fd);
		c = rr_add(fd, RR_READY);
		if (!c) {
			if (!rr_tcp.refused)
				wl_warn("refused a connection: %d are open already", RR_MAX_CONNS);
			rr_tcp.refused = true;
			continue;
		}
		if (rr_tls_start(c))
			rr_close(c);
	}
}

/*
 * Serve until the client has gone (its connections, one or more, have all
 * closed), as the bulk and download servers end by themselves, or until
 * "stop", "exit" or EOF (--control).
 */
static int rr_run_server(void)
{
	struct epoll_event evs[RR_EVENTS];
	int code = rr_setup(), flags = fcntl(tcp_state.listen_fd, F_GETFL);

	if (!code && (flags < 0 || fcntl(tcp_state.listen_fd, F_SETFL, flags | O_NONBLOCK) ||
		      rr_watch(tcp_state.listen_fd, &rr_tag_listen, EPOLLIN))) {
		wl_warn("cannot watch the listening socket: %s", strerror(errno));
		code = WL_EXIT_INTERNAL;
	}
	while (!code && !atomic_load(&tcp_state.stopping)) {
		int n = epoll_wait(rr_tcp.ep, evs, RR_EVENTS, -1), i;

		if (n < 0 && errno != EINTR) {
			fail(WL_EXIT_INTERNAL, "epoll_wait failed: %s", strerror(errno));
			break;
		}
		for (i = 0; i < n; i++) {
			void *p = evs[i].data.ptr;

			if (p == &rr_tag_listen)
				rr_accept();
			else if (p == &rr_tag_wake)
				rr_unwake();
			else if (!((struct rrconn *)p)->dead)
				rr_drive(p, evs[i].events);
		}
		rr_reap();
		if (atomic_load(&wl_rr.connections) && !rr_tcp.nconns)
			break;
	}
	tcp_state.t_transfer_done_ns = wl_now_ns();
	rr_teardown();
	return code ? code : tcp_state.failure.code;
}

static int run_server(void)
{
	struct sockaddr_in a;
	int one = 1, i, err;

	if (tcp_addr(&a)) {
		wl_warn("bad IPv4 address %s", tcp_state.o->addr);
		return WL_EXIT_USAGE;
	}
	tcp_state.listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (tcp_state.listen_fd < 0)
		return WL_EXIT_INTERNAL;
	setsockopt(tcp_state.listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (set_tcp_cc(tcp_state.listen_fd))
		return tcp_state.failure.code;
	err = wl_bind(tcp_state.listen_fd, &a, "TCP", tcp_state.o);
	if (err)
		return err;
	if (listen(tcp_state.listen_fd, MAX_CONNS))
		return WL_EXIT_INTERNAL;
	wl_emit("{\"event\":\"ready\",\"port\":%d,\"pid\":%d}", tcp_state.o->port, getpid());
	if (tcp_state.o->download)
		return run_server_download();
	if (tcp_state.o->rr)
		return rr_run_server();
	for (i = 0; i < tcp_state.o->streams; i++) {
		struct tconn *c = &tcp_state.conns[i];

		c->idx = i;
		c->fd = accept4(tcp_state.listen_fd, NULL, NULL, SOCK_CLOEXEC);
		if (c->fd < 0) {
			wl_warn("accept failed: %s", strerror(errno));
			return WL_EXIT_INTERNAL;
		}
		tcp_state.nconns = i + 1;
		atomic_store(&tcp_state.conns_seen, i + 1);
		pthread_create(&c->thread, NULL, server_conn, c);
	}
	sem_wait(&tcp_state.all_ready);
	if (!tcp_state.failure.code) {
		tcp_state.t_connected_ns = wl_now_ns();
		emit_connected();
	}
	sem_wait(&tcp_state.all_done);
	for (i = 0; i < tcp_state.nconns; i++)
		pthread_join(tcp_state.conns[i].thread, NULL);
	return tcp_state.failure.code;
}

static int run_client(void)
{
	struct sockaddr_in a;
	int i;

	if (tcp_addr(&a)) {
		wl_warn("bad IPv4 address %s", tcp_state.o->addr);
		return WL_EXIT_USAGE;
	}
	if (tcp_state.o->wait_start)
		sem_wait(&tcp_state.may_start);
	for (i = 0; i < tcp_state.o->streams; i++) {
		struct tconn *c = &tcp_state.conns[i];
		struct timeval tv = {.tv_sec = CONNECT_TIMEOUT_S};

		c->idx = i;
		c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (c->fd < 0)
			return WL_EXIT_INTERNAL;
		if (set_tcp_cc(c->fd))
			return tcp_state.failure.code;
		setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
		if (connect(c->fd, (struct sockaddr *)&a, sizeof(a))) {
			wl_warn("TCP connect to %s:%d failed: %s", tcp_state.o->addr,
				tcp_state.o->port, strerror(errno));
			return WL_EXIT_HANDSHAKE;
		}
		tv.tv_sec = 0;
		setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
		tcp_state.nconns = i + 1;
	}
	for (i = 0; i < tcp_state.nconns; i++)
		pthread_create(&tcp_state.conns[i].thread, NULL, client_conn, &tcp_state.conns[i]);
	sem_wait(&tcp_state.all_ready);
	if (tcp_state.failure.code) {
		atomic_store(&tcp_state.stopping, true);
		sem_post(&tcp_state.may_start);
	} else {
		tcp_state.t_connected_ns = wl_now_ns();
		emit_connected();
		if (tcp_state.o->duration_ms) {
			struct timespec ts;
			uint64_t end =
				tcp_state.t_connected_ns + tcp_state.o->duration_ms * 1000000ull;

			sem_post(&tcp_state.may_start);
			ts.tv_sec = (time_t)(end / 1000000000ull);
			ts.tv_nsec = (long)(end % 1000000000ull);
			while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
				;
			atomic_store(&tcp_state.stopping, true);
		} else {
			sem_post(&tcp_state.may_start);
		}
	}
	sem_wait(&tcp_state.all_done);
	for (i = 0; i < tcp_state.nconns; i++)
		pthread_join(tcp_state.conns[i].thread, NULL);
	return tcp_state.failure.code;
}

static void emit_done(int code)
{
	struct wl_json j;
	uint64_t done = 0;
	int i;

	for (i = 0; i < tcp_state.nconns; i++)
		done += tcp_state.conns[i].finished;
	if (tcp_state.o->download)
		done = atomic_load(&tcp_state.downloads);
	if (tcp_state.o->rr)
		done = atomic_load(tcp_state.server ? &wl_rr.served : &wl_rr.responses);
	wl_json_begin(&j);
	wl_json_str(&j, "event", "done");
	wl_json_str(&j, "role", tcp_state.server ? "server" : "client");
	wl_json_u64(&j, "exit_code", code);
	wl_json_u64(&j, "t_ns", wl_now_ns());
	wl_json_u64(&j, "t_connected_ns", tcp_state.t_connected_ns);
	wl_json_u64(&j, "t_transfer_done_ns", tcp_state.t_transfer_done_ns);
	wl_json_u64(&j, "app_bytes", atomic_load(&tcp_state.app_bytes));
	wl_json_u64(&j, "io_calls", atomic_load(&tcp_state.io_calls));
	if (tcp_state.o->download) {
		wl_json_str(&j, "pattern", "download");
		wl_json_u64(&j, "downloads", done);
	}
	if (tcp_state.o->rr)
		wl_rr_json_done(&j, tcp_state.server);
	wl_json_u64(&j, "streams_completed", done);
	json_stream_bytes(&j);
	if (tcp_state.server != tcp_state.o->download || tcp_state.o->rr) /* a receiver */
		wl_json_bool(&j, "verified",
			     code == WL_EXIT_OK && !atomic_load(&tcp_state.verify_failed));
	json_tls(&j);
	json_tcp_info(&j);
	if (tcp_cc_ran[0])
		wl_json_str(&j, "tcp_congestion_control", tcp_cc_ran);
	wl_emit("%s", wl_json_end(&j));
}

static int make_memfd(void)
{
	const uint8_t *region = wl_pattern_region();
	const size_t period = wl_pattern_period();
	size_t left = period;

	tcp_state.memfd = memfd_create("qprof-pattern", MFD_CLOEXEC);
	if (tcp_state.memfd < 0)
		return -1;
	while (left) {
		ssize_t n = write(tcp_state.memfd, region + (period - left), left);
		if (n <= 0)
			return -1;
		left -= (size_t)n;
	}
	return 0;
}

int wl_tcp_run(const struct wl_opts *o)
{
	int code, i;

	tcp_state.o = o;
	tcp_state.server = !strcmp(o->role, "server");
	tcp_state.tls = !strcmp(o->stack, "tcp-tls")	? TLS_USER
			: !strcmp(o->stack, "tcp-ktls") ? TLS_KERNEL
							: TLS_NONE;
	for (i = 0; i < MAX_CONNS; i++)
		tcp_state.conns[i].fd = -1;
	sem_init(&tcp_state.all_ready, 0, 0);
	sem_init(&tcp_state.all_done, 0, 0);
	sem_init(&tcp_state.may_start, 0, 0);
	sem_init(&tcp_state.may_exit, 0, 0);
	if (strcmp(o->tls_version, "1.2") && strcmp(o->tls_version, "1.3")) {
		wl_warn("--tls must be 1.2 or 1.3, not %s", o->tls_version);
		return WL_EXIT_TLS_CONFIG;
	}
	if (o->sendfile && (tcp_state.server != o->download || tcp_state.tls == TLS_USER)) {
		wl_warn("--sendfile is for the %s of tcp or tcp-ktls: user-space TLS must encrypt in user space",
			o->download ? "server (the sender) of a download" : "client");
		return WL_EXIT_USAGE;
	}
	if (o->sendfile && make_memfd()) {
		wl_warn("cannot make the sendfile source: %s", strerror(errno));
		return WL_EXIT_INTERNAL;
	}
	if (o->download || o->rr) {
		/* A peer that leaves mid-transfer is an error, not a signal. */
		signal(SIGPIPE, SIG_IGN);
		if (tcp_state.server || o->rr) {
			tcp_state.wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
			if (tcp_state.wake_fd < 0)
				return WL_EXIT_INTERNAL;
		}
	}
	/* Control first: whoever waits on us must hear even a setup failure. */
	if (o->control && wl_control_start(&control_ops))
		return WL_EXIT_INTERNAL;
	code = make_ctx();
	if (!code)
		code = tcp_state.server ? run_server()
		       : o->download	? run_client_download()
		       : o->rr		? rr_run_client()
					: run_client();
	emit_done(code);
	if (o->control)
		sem_wait(&tcp_state.may_exit);
	pthread_mutex_lock(&tcp_state.conn_lock);
	for (i = 0; i < tcp_state.nconns; i++) {
		if (tcp_state.conns[i].ssl)
			SSL_free(tcp_state.conns[i].ssl);
		if (tcp_state.conns[i].fd >= 0)
			close(tcp_state.conns[i].fd);
		tcp_state.conns[i].fd = -1;
	}
	pthread_mutex_unlock(&tcp_state.conn_lock);
	SSL_SESSION_free(tcp_state.session);
	if (tcp_state.ctx)
		SSL_CTX_free(tcp_state.ctx);
	if (tcp_state.listen_fd >= 0)
		close(tcp_state.listen_fd);
	return code;
}
