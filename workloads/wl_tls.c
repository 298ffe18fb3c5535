// SPDX-License-Identifier: GPL-2.0-only
/*
 * The OpenSSL layer of the TCP stacks (wl_tls.h): the run's SSL_CTX, a
 * connection's TLS on its connected socket, and read/write/sendfile/
 * shutdown calls that hide whether TLS is there at all.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "wl_tls.h"

#define TLS_READ_BUF (128 * 1024)	       /* several 16 KiB records per read() */
#define TLS_WRITE_BUF ((1 << 20) + (64 << 10)) /* the largest --io-size and its records' headers */
#define ROLE (L.server ? "server" : "client")

static struct {
	const struct wl_opts *o;
	bool server, fault_claim;
	enum wl_tls_mode mode;
	SSL_CTX *ctx;
	int memfd;			       /* --sendfile's pattern region as a file */
	pthread_mutex_t lock;		       /* the session and the figures below */
	SSL_SESSION *session;		       /* client: the last kept one */
	const char *cipher;		       /* as the first handshake agreed */
	bool handshaken, ktls_send, ktls_recv; /* one was up, and every one had kTLS */
} L = {.memfd = -1, .lock = PTHREAD_MUTEX_INITIALIZER};

static __thread char sentence[256]; /* wl_tls_begin's why */

const char *wl_tls_reason(void)
{
	static __thread char buf[160];
	unsigned long e = ERR_get_error();

	if (!e)
		return strerror(errno);
	ERR_error_string_n(e, buf, sizeof(buf));
	ERR_clear_error();
	return buf;
}

int wl_tls_init(const struct wl_opts *o, bool server)
{
	const uint8_t *region = wl_pattern_region();
	size_t done = 0;
	ssize_t n = 1;

	L.o = o;
	L.server = server;
	L.mode = !strcmp(o->stack, "tcp-tls")	 ? WL_TLS_USER
		 : !strcmp(o->stack, "tcp-ktls") ? WL_TLS_KERNEL
						 : WL_TLS_NONE;
	/*
	 * The tests' --fault ktls-claim (not in --help): the client leaves
	 * kTLS off yet reports it on send, as a library that said yes without
	 * the kernel doing it would; qprof must catch the claim with the
	 * kernel's own counters.
	 */
	L.fault_claim = o->fault && !strcmp(o->fault, "ktls-claim");
	if (strcmp(o->tls_version, "1.2") && strcmp(o->tls_version, "1.3")) {
		wl_warn("--tls must be 1.2 or 1.3, not %s", o->tls_version);
		return WL_EXIT_TLS_CONFIG;
	}
	if (o->sendfile && L.mode == WL_TLS_USER) {
		wl_warn("--sendfile is for tcp or tcp-ktls: user-space TLS must encrypt in user space");
		return WL_EXIT_USAGE;
	}
	if (o->sendfile && (L.memfd = memfd_create("qprof-pattern", MFD_CLOEXEC)) >= 0)
		while (done < wl_pattern_period() &&
		       (n = write(L.memfd, region + done, wl_pattern_period() - done)) > 0)
			done += (size_t)n;
	if (o->sendfile && (L.memfd < 0 || n <= 0)) {
		wl_warn("cannot make the sendfile source: %s", strerror(errno));
		return WL_EXIT_INTERNAL;
	}
	return 0;
}

enum wl_tls_mode wl_tls_mode(void)
{
	return L.mode;
}

bool wl_tls_fault_claim(void)
{
	return L.fault_claim;
}

int wl_tls_setup(void)
{
	const char *cipher = L.o->cipher;
	bool v12 = !strcmp(L.o->tls_version, "1.2");
	int ver = v12 ? TLS1_2_VERSION : TLS1_3_VERSION;

	if (L.mode == WL_TLS_NONE)
		return 0;
	L.ctx = SSL_CTX_new(L.server ? TLS_server_method() : TLS_client_method());
	if (!L.ctx)
		goto err;
	SSL_CTX_set_min_proto_version(L.ctx, ver);
	SSL_CTX_set_max_proto_version(L.ctx, ver);
	if (!cipher)
		cipher = v12 ? "ECDHE-ECDSA-AES128-GCM-SHA256" : "TLS_AES_128_GCM_SHA256";
	if (v12 ? !SSL_CTX_set_cipher_list(L.ctx, cipher)
		: !SSL_CTX_set_ciphersuites(L.ctx, cipher)) {
		wl_warn("OpenSSL has no TLS %s cipher '%s'", L.o->tls_version, cipher);
		return WL_EXIT_TLS_CONFIG;
	}
	if (L.mode == WL_TLS_KERNEL && !L.fault_claim)
		SSL_CTX_set_options(L.ctx, SSL_OP_ENABLE_KTLS);
	if (L.mode == WL_TLS_USER) {
		/*
		 * Read as a production server does: without read-ahead OpenSSL
		 * reads each record's 5-byte header, then its body (2.3 read()s
		 * per SSL_read measured); with it, one read() fills a buffer of
		 * several records.
		 */
		SSL_CTX_set_read_ahead(L.ctx, 1);
		SSL_CTX_set_default_read_buffer_len(L.ctx, TLS_READ_BUF);
	}
	if (!L.server)
		SSL_CTX_set_verify(L.ctx, SSL_VERIFY_NONE, NULL);
	else if (SSL_CTX_use_certificate_chain_file(L.ctx, L.o->cert) != 1 ||
		 SSL_CTX_use_PrivateKey_file(L.ctx, L.o->key, SSL_FILETYPE_PEM) != 1)
		goto err;
	return 0;
err:
	wl_warn("TLS setup failed on the %s: %s", ROLE, wl_tls_reason());
	return WL_EXIT_LIB_OPEN;
}

void wl_tls_fini(bool in_use)
{
	close(L.memfd);
	pthread_mutex_lock(&L.lock);
	SSL_SESSION_free(L.session);
	L.session = NULL;
	pthread_mutex_unlock(&L.lock);
	if (!in_use)
		SSL_CTX_free(L.ctx);
}

/* SSL_set_fd only now, on the connected socket, as kTLS needs. */
int wl_tls_begin(struct wl_tls *t, bool sender, bool resume)
{
	BIO *buf = NULL;

	if (L.mode == WL_TLS_NONE)
		return 0;
	t->ssl = SSL_new(L.ctx);
	if (!t->ssl || SSL_set_fd(t->ssl, t->fd) != 1) {
		snprintf(sentence, sizeof(sentence), "SSL_new failed on the %s: %s", ROLE,
			 wl_tls_reason());
		t->why = sentence;
		return WL_EXIT_LIB_OPEN;
	}
	/*
	 * User-space TLS writes one record of at most 16 KiB per write(); a
	 * buffer BIO between OpenSSL and the socket gathers one SSL_write's
	 * records into one write() (flushed after each SSL_write), as msquic's
	 * own TLS-over-TCP path (secnetperf -tcp:1) batches its frames into
	 * one send. The bulk sender's only: on the loop a request or response
	 * of up to 16 KiB is one record.
	 */
	t->wbuf = sender && !t->nonblocking && L.mode == WL_TLS_USER;
	if (t->wbuf && (!(buf = BIO_new(BIO_f_buffer())) ||
			BIO_set_write_buffer_size(buf, TLS_WRITE_BUF) <= 0 ||
			!BIO_up_ref(SSL_get_wbio(t->ssl)))) {
		BIO_free(buf);
		snprintf(sentence, sizeof(sentence), "TLS write buffer failed on the %s: %s", ROLE,
			 wl_tls_reason());
		t->why = sentence;
		return WL_EXIT_LIB_OPEN;
	}
	if (t->wbuf)
		SSL_set0_wbio(t->ssl, BIO_push(buf, SSL_get_wbio(t->ssl)));
	pthread_mutex_lock(&L.lock);
	if (!L.server && resume && L.session && SSL_set_session(t->ssl, L.session) != 1)
		wl_warn("cannot offer the last session for resumption: %s", wl_tls_reason());
	pthread_mutex_unlock(&L.lock);
	if (L.server)
		SSL_set_accept_state(t->ssl);
	else
		SSL_set_connect_state(t->ssl);
	return 0;
}

/*
 * An OpenSSL call that moved nothing, in WL_IO_* terms. reading: a read's
 * 0 is the socket's EOF, and close_notify the orderly end (in a handshake,
 * the peer's going away).
 */
static int tls_result(struct wl_tls *t, int n, bool reading)
{
	int e = SSL_get_error(t->ssl, n);
	bool left;

	if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
		return e == SSL_ERROR_WANT_READ ? WL_IO_WANT_READ : WL_IO_WANT_WRITE;
	if (reading && (e == SSL_ERROR_ZERO_RETURN || n == 0)) {
		ERR_clear_error();
		return e == SSL_ERROR_ZERO_RETURN ? WL_IO_FIN : WL_IO_EOF;
	}
	left = e == SSL_ERROR_ZERO_RETURN || e == SSL_ERROR_SYSCALL ||
	       (e == SSL_ERROR_SSL &&
		ERR_GET_REASON(ERR_peek_error()) == SSL_R_UNEXPECTED_EOF_WHILE_READING);
	t->why = wl_tls_reason();
	return left ? WL_IO_LEFT : WL_IO_FAILED;
}

/* A socket call that moved nothing (n < 0, or a read's 0), in WL_IO_* terms. */
static int sock_result(struct wl_tls *t, ssize_t n, bool reading)
{
	if (n == 0 && reading)
		return WL_IO_FIN;
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return reading ? WL_IO_WANT_READ : WL_IO_WANT_WRITE;
	if (n < 0 && errno == EINTR)
		return WL_IO_AGAIN;
	t->why = strerror(errno);
	return n < 0 && (errno == ECONNRESET || errno == EPIPE) ? WL_IO_LEFT : WL_IO_FAILED;
}

int wl_tls_handshake(struct wl_tls *t)
{
	int r;

	if (!t->ssl)
		return 1;
	if (t->nonblocking)
		ERR_clear_error();
	r = SSL_do_handshake(t->ssl);
	return r == 1 ? 1 : tls_result(t, r, false);
}

bool wl_tls_handshaken(struct wl_tls *t, bool claim)
{
	if (t->ssl) {
		t->ktls_send = BIO_get_ktls_send(SSL_get_wbio(t->ssl)) || claim;
		t->ktls_recv = BIO_get_ktls_recv(SSL_get_rbio(t->ssl));
		t->resumed = SSL_session_reused(t->ssl);
	}
	pthread_mutex_lock(&L.lock);
	if (t->ssl && !L.cipher)
		L.cipher = SSL_get_cipher_name(t->ssl);
	/* The reports' kTLS flags: every connection had it. */
	L.ktls_send = (!L.handshaken || L.ktls_send) && t->ktls_send;
	L.ktls_recv = (!L.handshaken || L.ktls_recv) && t->ktls_recv;
	L.handshaken = true;
	pthread_mutex_unlock(&L.lock);
	return L.memfd < 0 || !t->ssl || t->ktls_send;
}

/* TLS 1.3 tickets come after the handshake: the session as the connection ends. */
void wl_tls_keep_session(struct wl_tls *t)
{
	SSL_SESSION *sess = t->ssl ? SSL_get1_session(t->ssl) : NULL;

	if (!sess)
		return;
	pthread_mutex_lock(&L.lock);
	SSL_SESSION_free(L.session);
	L.session = sess;
	pthread_mutex_unlock(&L.lock);
}

void wl_tls_free(struct wl_tls *t)
{
	SSL_free(t->ssl);
	t->ssl = NULL;
	free(t->msg);
	t->msg = NULL;
}

ssize_t wl_tls_read(struct wl_tls *t, void *buf, size_t cap)
{
	ssize_t n;

	if (!t->ssl) {
		n = recv(t->fd, buf, cap, 0);
		return n > 0 ? n : sock_result(t, n, true);
	}
	if (t->nonblocking)
		ERR_clear_error();
	n = SSL_read(t->ssl, buf, (int)cap);
	return n > 0 ? n : tls_result(t, (int)n, true);
}

ssize_t wl_tls_write(struct wl_tls *t, const void *p, size_t len)
{
	ssize_t n;

	if (!t->ssl) {
		n = send(t->fd, p, len, t->nonblocking ? MSG_NOSIGNAL : 0);
		return n > 0 ? n : sock_result(t, n, false);
	}
	if (t->nonblocking)
		ERR_clear_error();
	n = SSL_write(t->ssl, p, (int)len);
	if (n <= 0)
		return tls_result(t, (int)n, false);
	if (t->wbuf && BIO_flush(SSL_get_wbio(t->ssl)) <= 0) {
		t->why = wl_tls_reason();
		return WL_IO_FAILED;
	}
	return n;
}

ssize_t wl_tls_write_msg(struct wl_tls *t, const uint8_t *hdr, uint32_t hlen, const uint8_t *body,
			 uint32_t blen, bool owned)
{
	const uint32_t len = hlen + blen;
	ssize_t n;

	if (!len)
		return 0;
	if (!t->msg_busy && t->msg_cap < len) {
		free(t->msg);
		t->msg_body = NULL;
		t->msg_cap = (t->msg = malloc(len)) ? len : 0;
	}
	if (!t->msg) {
		t->why = strerror(ENOMEM);
		return WL_IO_FAILED;
	}
	if (!t->msg_busy &&
	    (owned || t->msg_body != body || t->msg_hlen != hlen || t->msg_blen != blen))
		memcpy(t->msg + hlen, body, blen);
	if (!t->msg_busy) {
		memcpy(t->msg, hdr, hlen);
		t->msg_body = body;
		t->msg_hlen = hlen;
		t->msg_blen = blen;
		t->msg_busy = true;
	}
	/* TLS writes it whole or not at all: msg_off stays 0 there. */
	n = wl_tls_write(t, t->msg + t->msg_off, len - t->msg_off);
	if (n <= 0)
		return n;
	t->msg_off += (uint32_t)n;
	if (t->msg_off < len)
		return n;
	t->msg_off = 0;
	t->msg_busy = false;
	return 0;
}

/* From file fd at off: sendfile(), or SSL_sendfile with kTLS on send. */
static ssize_t tls_sendfile(struct wl_tls *t, int fd, off_t off, size_t len)
{
	ssize_t n;

	if (!t->ssl) {
		n = sendfile(t->fd, fd, &off, len);
		return n > 0 ? n : sock_result(t, n, false);
	}
	n = SSL_sendfile(t->ssl, fd, off, len, 0);
	return n > 0 ? n : tls_result(t, (int)n, false);
}

ssize_t wl_tls_write_all(struct wl_tls *t, const uint8_t *p, size_t len, _Atomic uint64_t *calls)
{
	const uint8_t *region = wl_pattern_region();
	off_t off = L.memfd >= 0 && p >= region && p + len <= region + wl_pattern_period()
			    ? p - region
			    : -1;

	while (len) {
		ssize_t n = off >= 0 ? tls_sendfile(t, L.memfd, off, len) : wl_tls_write(t, p, len);

		if (calls)
			atomic_fetch_add(calls, 1);
		if (n == WL_IO_AGAIN)
			continue;
		if (n <= 0)
			return n;
		p += n;
		off += off >= 0 ? n : 0;
		len -= (size_t)n;
	}
	return 0;
}

bool wl_tls_drain(struct wl_tls *t, void *buf, size_t cap)
{
	ssize_t n;

	do
		n = wl_tls_read(t, buf, cap);
	while (n > 0 || n == WL_IO_AGAIN);
	return n == WL_IO_FIN;
}

void wl_tls_shutdown(struct wl_tls *t)
{
	if (t->ssl) {
		ERR_clear_error();
		SSL_shutdown(t->ssl);
		ERR_clear_error();
	}
	shutdown(t->fd, SHUT_WR);
}

bool wl_tls_pending(const struct wl_tls *t)
{
	return t->ssl && SSL_has_pending(t->ssl);
}

void wl_tls_json(struct wl_json *j)
{
	bool send, recv;
	const char *cipher;

	if (L.mode == WL_TLS_NONE)
		return;
	pthread_mutex_lock(&L.lock);
	send = L.handshaken && L.ktls_send;
	recv = L.handshaken && L.ktls_recv;
	cipher = L.cipher;
	pthread_mutex_unlock(&L.lock);
	wl_json_str(j, "tls_version", !strcmp(L.o->tls_version, "1.2") ? "TLSv1.2" : "TLSv1.3");
	wl_json_str(j, "tls_cipher", cipher ? cipher : "");
	wl_json_bool(j, "ktls_send", send);
	wl_json_bool(j, "ktls_recv", recv);
}
