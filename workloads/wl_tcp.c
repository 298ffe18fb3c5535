// SPDX-License-Identifier: GPL-2.0-only
/*
 * TCP roles: plain TCP (tcp), TLS in OpenSSL user space (tcp-tls) and TLS
 * records in the kernel after OpenSSL's handshake (tcp-ktls). One TCP
 * connection per --streams, each with a thread on both sides, as iperf3 -P.
 * The client writes straight out of the read-only pattern region (or
 * sendfile()s it from a memfd holding the same bytes); the server checks
 * every byte against its connection offset.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <linux/tcp.h> /* its tcp_info is newer than glibc's */
#include <pthread.h>
#include <semaphore.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "wl.h"

#define MAX_CONNS 64
#define CONNECT_TIMEOUT_S 10
#define TLS_READ_BUF (128 * 1024)	       /* several 16 KiB records per read() */
#define TLS_WRITE_BUF ((1 << 20) + (64 << 10)) /* the largest --io-size and its records' headers */

enum tls_mode { TLS_NONE, TLS_USER, TLS_KERNEL };

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
	_Atomic uint64_t io_calls; /* the workload's own send/recv calls */
	_Atomic bool stopping;
	_Atomic bool verify_failed;
	_Atomic int conns_ready;
	_Atomic int conns_done;
	uint64_t verify_fail_off;
	int verify_fail_conn;
	struct wl_failure failure;
	uint64_t t_connected_ns, t_transfer_done_ns;

	sem_t all_ready;
	sem_t all_done;
	sem_t may_start;
	sem_t may_exit;
} tcp_state = {.failure = WL_FAILURE_INIT, .memfd = -1, .listen_fd = -1};

static const char *tls_version_name(void)
{
	return !strcmp(tcp_state.o->tls_version, "1.2") ? "TLSv1.2" : "TLSv1.3";
}

#define fail(code, ...) wl_fail(&tcp_state.failure, &tcp_state.stopping, (code), __VA_ARGS__)

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

static void json_tcp_info(struct wl_json *j)
{
	uint64_t segs_out = 0, segs_in = 0, retrans = 0, bytes_acked = 0, bytes_received = 0;
	struct wl_json p;
	int i;

	for (i = 0; i < tcp_state.nconns; i++) {
		struct tcp_info ti;
		socklen_t len = sizeof(ti);

		if (tcp_state.conns[i].fd < 0 ||
		    getsockopt(tcp_state.conns[i].fd, IPPROTO_TCP, TCP_INFO, &ti, &len))
			continue;
		segs_out += ti.tcpi_segs_out;
		segs_in += ti.tcpi_segs_in;
		retrans += ti.tcpi_total_retrans;
		bytes_acked += ti.tcpi_bytes_acked;
		bytes_received += ti.tcpi_bytes_received;
	}
	wl_json_begin(&p);
	wl_json_u64(&p, "segs_out", segs_out);
	wl_json_u64(&p, "segs_in", segs_in);
	wl_json_u64(&p, "total_retrans", retrans);
	wl_json_u64(&p, "bytes_acked", bytes_acked);
	wl_json_u64(&p, "bytes_received", bytes_received);
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
	wl_json_str(j, "tls_version", tls_version_name());
	wl_json_str(j, "tls_cipher",
		    tcp_state.conns[0].ssl ? SSL_get_cipher_name(tcp_state.conns[0].ssl) : "");
	wl_json_bool(j, "ktls_send", send);
	wl_json_bool(j, "ktls_recv", recv);
}

static void on_mark(const char *name, void *arg)
{
	struct wl_json j;

	(void)arg;
	wl_json_mark(&j, name);
	wl_json_u64(&j, "app_bytes", atomic_load(&tcp_state.app_bytes));
	wl_json_u64(&j, "io_calls", atomic_load(&tcp_state.io_calls));
	json_tcp_info(&j);
	wl_emit("%s", wl_json_end(&j));
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
}
static void on_exit_cmd(void *arg)
{
	(void)arg;
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
	if (tcp_state.tls == TLS_KERNEL)
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
	if (tcp_state.tls == TLS_USER && !tcp_state.server && buffer_writes(c))
		return -1;
	rc = tcp_state.server ? SSL_accept(c->ssl) : SSL_connect(c->ssl);
	if (rc != 1) {
		fail(WL_EXIT_HANDSHAKE, "TLS handshake failed on the %s (connection %d): %s",
		     tcp_state.server ? "server" : "client", c->idx, ssl_reason());
		return -1;
	}
	c->ktls_send = BIO_get_ktls_send(SSL_get_wbio(c->ssl));
	c->ktls_recv = BIO_get_ktls_recv(SSL_get_rbio(c->ssl));
	return 0;
}

/*
 * Orderly close: a peer that close()s with unread bytes in its receive
 * queue (TLS 1.3 session tickets, close_notify) sends RST and the other
 * side can lose the tail of the stream. So: close_notify, FIN, drain to
 * the peer's FIN, then close.
 */
static void orderly_close(struct tconn *c)
{
	char buf[4096];

	if (c->ssl)
		SSL_shutdown(c->ssl);
	shutdown(c->fd, SHUT_WR);
	for (;;) {
		ssize_t n =
			c->ssl ? SSL_read(c->ssl, buf, sizeof(buf)) : read(c->fd, buf, sizeof(buf));
		if (n <= 0)
			break;
	}
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
	err = wl_bind(tcp_state.listen_fd, &a, "TCP", tcp_state.o);
	if (err)
		return err;
	if (listen(tcp_state.listen_fd, MAX_CONNS))
		return WL_EXIT_INTERNAL;
	wl_emit("{\"event\":\"ready\",\"port\":%d,\"pid\":%d}", tcp_state.o->port, getpid());
	for (i = 0; i < tcp_state.o->streams; i++) {
		struct tconn *c = &tcp_state.conns[i];

		c->idx = i;
		c->fd = accept4(tcp_state.listen_fd, NULL, NULL, SOCK_CLOEXEC);
		if (c->fd < 0) {
			wl_warn("accept failed: %s", strerror(errno));
			return WL_EXIT_INTERNAL;
		}
		tcp_state.nconns = i + 1;
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
	wl_json_begin(&j);
	wl_json_str(&j, "event", "done");
	wl_json_str(&j, "role", tcp_state.server ? "server" : "client");
	wl_json_u64(&j, "exit_code", code);
	wl_json_u64(&j, "t_ns", wl_now_ns());
	wl_json_u64(&j, "t_connected_ns", tcp_state.t_connected_ns);
	wl_json_u64(&j, "t_transfer_done_ns", tcp_state.t_transfer_done_ns);
	wl_json_u64(&j, "app_bytes", atomic_load(&tcp_state.app_bytes));
	wl_json_u64(&j, "io_calls", atomic_load(&tcp_state.io_calls));
	wl_json_u64(&j, "streams_completed", done);
	if (tcp_state.server)
		wl_json_bool(&j, "verified",
			     code == WL_EXIT_OK && !atomic_load(&tcp_state.verify_failed));
	json_tls(&j);
	json_tcp_info(&j);
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
	if (o->sendfile && (tcp_state.server || tcp_state.tls == TLS_USER)) {
		wl_warn("--sendfile is for the client of tcp or tcp-ktls: user-space TLS must encrypt in user space");
		return WL_EXIT_USAGE;
	}
	if (o->sendfile && make_memfd()) {
		wl_warn("cannot make the sendfile source: %s", strerror(errno));
		return WL_EXIT_INTERNAL;
	}
	/* Control first: whoever waits on us must hear even a setup failure. */
	if (o->control && wl_control_start(&control_ops))
		return WL_EXIT_INTERNAL;
	code = make_ctx();
	if (!code)
		code = tcp_state.server ? run_server() : run_client();
	emit_done(code);
	if (o->control)
		sem_wait(&tcp_state.may_exit);
	for (i = 0; i < tcp_state.nconns; i++) {
		if (tcp_state.conns[i].ssl)
			SSL_free(tcp_state.conns[i].ssl);
		if (tcp_state.conns[i].fd >= 0)
			close(tcp_state.conns[i].fd);
	}
	if (tcp_state.ctx)
		SSL_CTX_free(tcp_state.ctx);
	if (tcp_state.listen_fd >= 0)
		close(tcp_state.listen_fd);
	return code;
}
