// SPDX-License-Identifier: GPL-2.0-only
/*
 * A connected TCP socket's byte stream, with OpenSSL over it (tcp-tls:
 * records in user space; tcp-ktls: in the kernel after the handshake) or
 * without (tcp), behind one set of calls that say what happened in one
 * way. It knows sockets and TLS, nothing of a transport's connections or
 * streams, so any user of a TCP byte stream (wl_tcp.c; HTTP/1.1 over TLS)
 * can drive it, blocking or not.
 */
#ifndef QPROF_WL_TLS_H
#define QPROF_WL_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "wl.h"

enum wl_tls_mode { WL_TLS_NONE, WL_TLS_USER, WL_TLS_KERNEL };

/* One connection's: the socket, and its TLS when the run has any. */
struct wl_tls {
	int fd;
	struct ssl_st *ssl; /* NULL: plain TCP */
	bool nonblocking;   /* would-block is an answer; a plain send raises no SIGPIPE */
	bool wbuf;	    /* the sender's buffer BIO, flushed after each write */
	bool ktls_send, ktls_recv, resumed; /* once handshaken */
	const char *why; /* what WL_IO_LEFT / WL_IO_FAILED met, or why begin failed */
	/* wl_tls_write_msg's message under way, whole in one buffer */
	uint8_t *msg;
	const uint8_t *msg_body;
	uint32_t msg_cap, msg_hlen, msg_blen, msg_off;
	bool msg_busy;
};

/*
 * What a read, write or handshake step that moved no byte says (a read's
 * 0 is the peer's orderly end); why is set for LEFT and FAILED.
 */
enum {
	WL_IO_FIN = 0,	       /* the peer's orderly end: FIN; TLS: close_notify */
	WL_IO_EOF = -1,	       /* TLS: the socket's EOF without close_notify */
	WL_IO_AGAIN = -2,      /* plain TCP: a signal came first (EINTR); call again */
	WL_IO_WANT_READ = -3,  /* would block until input comes */
	WL_IO_WANT_WRITE = -4, /* would block until the socket has room */
	WL_IO_LEFT = -5,       /* the peer went away: a reset, EPIPE, OpenSSL's "unexpected eof" */
	WL_IO_FAILED = -6,
};

/*
 * Before the control channel: --stack's TLS, --tls and --sendfile checked,
 * --sendfile's source made (an exit code, after saying why).
 */
int wl_tls_init(const struct wl_opts *o, bool server);
enum wl_tls_mode wl_tls_mode(void);
/* After it: the SSL_CTX (an unknown cipher: 9, a bad certificate: 3, after saying why). */
int wl_tls_setup(void);
/* The kept session, the sendfile source and the SSL_CTX (unless a connection uses it: in_use). */
void wl_tls_fini(bool in_use);

/*
 * TLS on a connected socket (the run's mode; none: nothing to do): sender
 * gets the write buffer (user-space TLS, blocking), resume offers the last
 * kept session (client). 0, or an exit code with why its sentence.
 */
int wl_tls_begin(struct wl_tls *t, bool sender, bool resume);
/* 1 once handshaken (at once without TLS), else a WL_IO_* (FIN counts as LEFT). */
int wl_tls_handshake(struct wl_tls *t);
/*
 * Handshaken: ktls_send/recv and resumed set (claim: the tests' ktls-claim
 * fault reports kTLS on send without it) and the run's figures updated.
 * False if --sendfile cannot work on it: TLS without kTLS on send.
 */
bool wl_tls_handshaken(struct wl_tls *t, bool claim);
/* Client: this connection's session is the one the next resume offers. */
void wl_tls_keep_session(struct wl_tls *t);
void wl_tls_free(struct wl_tls *t);
/* The tests' --fault ktls-claim is on. */
bool wl_tls_fault_claim(void);

/* Bytes moved (> 0) or a WL_IO_*. A write is all or nothing with TLS, partial without. */
ssize_t wl_tls_read(struct wl_tls *t, void *buf, size_t cap);
ssize_t wl_tls_write(struct wl_tls *t, const void *p, size_t len);
/*
 * One write call of a message, header then body, gathered in one buffer
 * (TLS: one record) from where the last call left off, so that a retry
 * after would-block sees the same bytes, as OpenSSL requires: 0 once it
 * is all written (an empty one makes no call), > 0 part of it was (call
 * again), else a WL_IO_*. A body at the same place as the last message's
 * (rr, from the read-only pattern region) is not copied again, unless
 * owned: the caller's own buffer, whose bytes may differ at one address.
 */
ssize_t wl_tls_write_msg(struct wl_tls *t, const uint8_t *hdr, uint32_t hlen, const uint8_t *body,
			 uint32_t blen, bool owned);
/*
 * Blocking: every byte, bytes of the pattern region with --sendfile
 * sendfile()d (kTLS: SSL_sendfile) from its copy in a memfd at the same
 * offset; 0 or the WL_IO_* of the call that failed. calls (if not NULL)
 * counts each write call.
 */
ssize_t wl_tls_write_all(struct wl_tls *t, const uint8_t *p, size_t len, _Atomic uint64_t *calls);
/* Blocking, after this side's end: reads to the peer's; true if orderly (FIN, close_notify). */
bool wl_tls_drain(struct wl_tls *t, void *buf, size_t cap);
/* This side's end: close_notify (TLS), then shutdown(SHUT_WR). */
void wl_tls_shutdown(struct wl_tls *t);
/* Bytes OpenSSL holds (read ahead) that no epoll event will announce. */
bool wl_tls_pending(const struct wl_tls *t);

/* OpenSSL's first queued error (or errno's), the queue then cleared. */
const char *wl_tls_reason(void);
/* tls_version, tls_cipher, ktls_send, ktls_recv (each handshaken connection had kTLS): TLS only. */
void wl_tls_json(struct wl_json *j);

#endif
