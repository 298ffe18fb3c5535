// SPDX-License-Identifier: GPL-2.0-only
/*
 * What a pattern (bulk, download, rr) sees of a transport (msquic; TCP
 * plain, with OpenSSL in user space, with kernel TLS), and the one event
 * loop every role's main thread runs. Modelled on msquic's perf tool,
 * which turns QUIC and TCP into one set of handlers (PerfClient over
 * TcpEngine), and on iperf3's struct protocol.
 *
 * A pattern is written once over these calls; a transport holds nothing
 * of a pattern. Which pattern runs is the pattern's business; a transport
 * learns only what it must to move bytes well (the WL_CONN_* hints).
 *
 * UDP (wl_udp.c) is a datagram transport: no connection, no stream, no
 * order, and loss is counted rather than failed, so bulk's content check
 * of an ordered stream cannot run on it. It runs its own pattern
 * (wl_udp_bulk, the sender and the sequence-number receiver) and gives
 * the role only init, listen (bind; "ready" follows), its report fields
 * and fini; connect and every stream operation are NULL, as they do not
 * apply to datagrams, and the other patterns never run on it.
 *
 * OBJECTS
 *   struct wl_conn    a connection (QUIC connection, TCP connection).
 *   struct wl_stream  an ordered byte stream with a FIN in each direction:
 *                     a QUIC stream; on TCP the connection's one stream.
 *   Both belong to the transport; the pattern hangs its own context on
 *   each (ctx) and gets it back in every handler. Neither may be used
 *   after its closed handler has returned.
 *
 * THREADS
 *   - Handlers of one connection and its streams never run concurrently.
 *     QUIC: msquic's worker for that connection. TCP, a WL_CONN_DEDICATED
 *     connection: its own thread, blocking I/O (as iperf3 -P), because a
 *     thread per bulk connection is what moves TCP fastest. TCP, other
 *     connections: the loop's thread (wl_loop_run), non-blocking sockets
 *     in the loop's epoll set. ngtcp2 (wl_ngtcp2.c): every connection on
 *     the loop's thread, its UDP socket and expiry timerfd in the epoll set.
 *   - A pattern may call into the transport from a handler of the same
 *     connection, or from the loop's thread (timers, control commands).
 *     No QUIC transport calls a handler from inside such a call: msquic's
 *     come on its worker; ngtcp2's, quiche's and quinn's do what was
 *     asked in a service of the connection, the one under way (a
 *     handler's call) or one on the loop's next pass.
 *     For a TCP connection whose handlers run on the loop's thread that
 *     is one thread; for msquic any thread will do. A dedicated TCP
 *     connection is driven only from its own handlers, except close().
 *   - Figures shared between connections are the pattern's, in atomics.
 *
 * SENDING
 *   wl_send() takes a message: a short header, copied (up to WL_HDR_MAX
 *   bytes), and a body that points into the read-only pattern region and
 *   so lives for the whole run; either may be empty. The transport takes
 *   the message whole or fails the stream:
 *     msquic: StreamSend, the header held until its SEND_COMPLETE;
 *     TCP, dedicated: written before it returns (blocking), SSL_write or
 *       sendfile() from the memfd at the body's offset in the region;
 *     TCP, on the loop: written now as far as the socket takes it, the
 *       rest queued and written on EPOLLOUT (TLS: SSL_write retried with
 *       the same bytes, as OpenSSL requires).
 *     ngtcp2: queued (ngtcp2 does not copy stream data) until its bytes
 *       are acknowledged (acked_stream_data_offset), then freed.
 *   wl_room() says how many more bytes the transport takes before they
 *   would only wait in a queue: msquic, the ideal send buffer (from its
 *   IDEAL_SEND_BUFFER_SIZE event, 2 x --io-size until then) less what is
 *   posted and not completed; TCP dedicated, SIZE_MAX (the send blocks);
 *   TCP on the loop, SIZE_MAX with nothing queued, else 0; ngtcp2, 8 MiB
 *   a stream less what is queued and not acknowledged. A sender keeps
 *   sending while wl_room() > 0 and goes on in its writable handler.
 *   WL_SEND_FIN ends this side of the stream after the message (TCP: TLS
 *   close_notify, then shutdown(SHUT_WR)).
 *
 * ENDING
 *   A stream's closed handler comes once both directions are over (the
 *   FIN or an abort each way); graceful says both ended with a FIN and
 *   everything sent was delivered (msquic: SEND_SHUTDOWN_COMPLETE
 *   graceful; TCP: every byte written and the peer's FIN read). Then the
 *   connection's closed handler, with what the transport saw (wl_end),
 *   comes once the connection is gone: msquic SHUTDOWN_COMPLETE; TCP the
 *   socket closed after an orderly close (close_notify, FIN, drain to the
 *   peer's FIN, as wl_tcp.c's orderly_close did) or after an error.
 */
#ifndef QPROF_WL_TRANSPORT_H
#define QPROF_WL_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wl.h"

struct wl_conn;
struct wl_stream;

/* How a connection ended, as the transport saw it; wl_end_why says it in words. */
struct wl_end {
	bool connected;		  /* its handshake completed */
	uint64_t t_connected;	  /* CLOCK_MONOTONIC ns */
	bool closed_by_transport; /* the transport gave up: idle timeout, reset, TLS alert, I/O error */
	const char *transport_status; /* msquic: QUIC_STATUS_* name; TCP: strerror/OpenSSL reason */
	bool closed_by_peer;	      /* the peer closed it (msquic: with an application code) */
	uint64_t peer_error;	      /* msquic: the peer's application error code; TCP: 0 */
	uint64_t t_peer_closed;
	/*
	 * The transport's own verdict, not yet said: nonzero (e.g. TCP: 4 for a
	 * connect or TLS handshake that failed or timed out, 3 for SSL_new or
	 * --sendfile without kTLS), transport_status then its whole sentence.
	 * The pattern fails the run with both. 0: the pattern judges the end.
	 */
	int exit_code;
};
/* "the peer closed it with error 2", "CONNECTION_IDLE", ... for messages. */
const char *wl_end_why(const struct wl_end *e);

/*
 * Application error codes a pattern closes with (msquic sends them to the
 * peer; TCP has no such field: an abortive close is a plain close()).
 */
#define WL_CLOSE_OK 0
#define WL_CLOSE_ERROR 1
#define WL_CLOSE_VERIFY 2 /* this end's content check failed */

struct wl_stream_handlers {
	/* More may be sent: after open (client) or accept (server), and whenever room frees. */
	void (*writable)(struct wl_stream *s, void *ctx);
	/* Bytes in stream order (each call's bytes follow the last call's). */
	void (*data)(struct wl_stream *s, void *ctx, const uint8_t *p, size_t len);
	/* The peer ended its side (FIN, close_notify); no more data. */
	void (*fin)(struct wl_stream *s, void *ctx);
	/* The peer aborted the stream (msquic: PEER_SEND_ABORTED / RECEIVE_ABORTED; TCP: reset). */
	void (*aborted)(struct wl_stream *s, void *ctx);
	/* A message handed to wl_send with this tag has left the pattern's hands (NULL: not wanted). */
	void (*sent)(struct wl_stream *s, void *ctx, void *tag, bool canceled);
	/* Both directions are over; the last call for s. */
	void (*closed)(struct wl_stream *s, void *ctx, bool graceful);
};

struct wl_conn_handlers {
	/* The handshake completed (TCP without TLS: connect() did). */
	void (*connected)(struct wl_conn *c, void *ctx);
	/*
	 * Server: the peer opened s (QUIC: PEER_STREAM_STARTED; TCP: the
	 * connection's stream, right after connected). Return its handlers
	 * and set *sctx, or NULL to refuse it (the transport closes it).
	 */
	const struct wl_stream_handlers *(*stream)(struct wl_conn *c, void *ctx,
						   struct wl_stream *s, void **sctx);
	/* The connection is gone; the last call for c. */
	void (*closed)(struct wl_conn *c, void *ctx, const struct wl_end *e);
};

/* Hints a pattern gives a connection (or, server, every accepted one: wl_listen). */
#define WL_CONN_DEDICATED 1u /* TCP: a thread and blocking I/O of its own */
#define WL_CONN_SENDER 2u    /* this end sends the bulk of the bytes (TLS: buffer writes) */
#define WL_CONN_RESUME 4u    /* client: offer the last connection's session (QUIC: its ticket) */
#define WL_CONN_NODELAY 8u   /* small messages both ways: TCP_NODELAY (download, rr) */
#define WL_CONN_STATS 16u    /* the marks and "done" show its statistics (the first such one's) */
#define WL_CONN_PEER_UNI 32u /* client, QUIC: the peer may open unidirectional streams (HTTP/3's) */

/*
 * Server: a connection arrived. Return its handlers and set *ctx, or NULL
 * to refuse it (one bulk connection a run, or after "stop").
 */
struct wl_accept {
	const struct wl_conn_handlers *(*accept)(void *arg, struct wl_conn *c, void **ctx);
	void *arg;
	unsigned flags; /* WL_CONN_* for every accepted connection */
	/* msquic: how many streams the peer may open (bidi or unidirectional ones) */
	uint16_t peer_bidi_streams, peer_uni_streams;
};

#define WL_SEND_FIN 1u
#define WL_SEND_EARLY 2u /* may go before the handshake completes (QUIC 0-RTT) */
/*
 * The body is the caller's own buffer (an application layer's framed
 * message, wl_app.h), alive until its sent handler, not the read-only
 * pattern region: its bytes may differ from an earlier body's at the
 * same address, so nothing of an earlier send may stand for it.
 */
#define WL_SEND_OWNED 4u
#define WL_STREAM_UNI 1u  /* open: send-only (QUIC unidirectional stream) */
#define WL_STREAM_LAZY 2u /* open: the first send follows at once and starts it (QUIC: START) */
#define WL_HDR_MAX 16

struct wl_transport {
	const char *name;
	/* Many streams on one connection: QUIC. Else one connection per stream. */
	bool multistream;
	/* Can send a request before the handshake completes when resuming (QUIC 0-RTT). */
	bool early_data;

	/*
	 * Once, before anything else (before the control channel: a failure
	 * here gives no "done"): o's transport options checked; an exit code.
	 */
	int (*init)(const struct wl_opts *o, bool server);
	/*
	 * Once, after the control channel is up, before listen or connect:
	 * setup whose failure the caller must hear in "done" (TLS: the
	 * SSL_CTX, an unknown cipher). An exit code, after saying why. NULL: none.
	 */
	int (*setup)(void);
	/*
	 * Server: bind and listen; "ready" is the pattern's to emit after. An
	 * exit code. udp: binds the receiving socket; a is NULL (no connections).
	 */
	int (*listen)(const struct wl_accept *a);
	/* Server: accept no more connections (stop). */
	void (*listen_stop)(void);
	/*
	 * Client: connect to --addr:--port. The handlers come later, on the
	 * transport's thread (dedicated: the connection's own). 0 or an exit
	 * code (after saying why on stderr); *out is set before any handler.
	 */
	int (*connect)(const struct wl_conn_handlers *h, void *ctx, unsigned flags,
		       struct wl_conn **out);
	/*
	 * Open a stream (client; on TCP the connection's one stream, once).
	 * WL_STREAM_UNI: send-only. writable follows. 0 or an exit code.
	 */
	int (*open)(struct wl_conn *c, const struct wl_stream_handlers *h, void *ctx,
		    unsigned flags, struct wl_stream **out);
	int (*send)(struct wl_stream *s, const uint8_t *hdr, uint32_t hdr_len, const uint8_t *body,
		    uint32_t body_len, unsigned flags, void *tag);
	size_t (*room)(struct wl_stream *s);
	/* Stop reading s until resumed (a server whose answers wait); TCP on the loop only. */
	void (*pause)(struct wl_stream *s, bool paused);
	/* Abort the stream both ways. */
	void (*abort)(struct wl_stream *s);
	/* Close the connection: code 0 gracefully, else abortively (sent to a QUIC peer). */
	void (*close)(struct wl_conn *c, uint64_t code);
	/* QUIC: the stream's ID, once started (its writable handler has come); -1 before. NULL: TCP. */
	int64_t (*stream_id)(struct wl_stream *s);
	/* A download's figures: handshake times, resumption, early data, counters. */
	void (*conn_info)(struct wl_conn *c, struct wl_dl *r);

	/*
	 * A mark's read of app_bytes calls it under wl_role.counts_seq: the
	 * counts json_mark then reports, as of that moment (udp's datagrams
	 * with the bytes they carried). NULL: json_mark reads its own as it goes.
	 */
	void (*mark_snapshot)(void);
	/* The transport's own fields of the reports. */
	void (*json_connected)(struct wl_json *j);
	void (*json_mark)(struct wl_json *j);
	void (*json_done)(struct wl_json *j, const struct wl_end *last);
	/* Once, after the done report, when the role may exit. */
	void (*fini)(void);
};

extern const struct wl_transport wl_quic, wl_tcp, wl_udp;
/*
 * A transport in a library of its own (wl_plugin.c), loaded for its stack:
 * build/lib/libqprof-wl-STACK.so's wl_STACK; NULL, having said why.
 */
const struct wl_transport *wl_plugin(const char *stack);
/* The size of struct NAME as this program was built (a plugin in Rust checks its mirrors: wlffi). */
size_t wl_abi_size(const char *name);

/* Thin wrappers, so patterns read as calls. */
int wl_send(struct wl_stream *s, const uint8_t *hdr, uint32_t hdr_len, const uint8_t *body,
	    uint32_t body_len, unsigned flags, void *tag);
size_t wl_room(struct wl_stream *s);

/*
 * THE LOOP (wl_loop.c): the one scheduler. The role's main thread runs
 * it; it watches an eventfd (wl_loop_wake, any thread: a QUIC callback, a
 * dedicated TCP thread, the control thread), the patterns' timers (the rr
 * schedule's timerfd) and the TCP transport's non-blocking sockets, and
 * calls each fd's callback on the main thread.
 */
typedef void (*wl_loop_fn)(int fd, uint32_t events, void *arg);
int wl_loop_init(void);						    /* -1: errno */
int wl_loop_add(int fd, uint32_t events, wl_loop_fn fn, void *arg); /* EPOLL* events */
int wl_loop_mod(int fd, uint32_t events, wl_loop_fn fn, void *arg);
void wl_loop_del(int fd);
void wl_loop_wake(void);
/* Loop's thread: call fd's function again after this batch (events 0), once; dropped if fd goes first. */
void wl_loop_again(int fd);
/*
 * A transport the loop drives (ngtcp2's, quiche's; quinn's in Rust), asked
 * for something by a pattern (connect, open, send, abort, close): done by
 * a service, never inside the call (THREADS above): inside a handler's
 * (busy), once the service it runs in goes round (*again); else on the
 * loop's next pass, through the connection's timer fd.
 */
static inline void wl_loop_asked(bool *again, int busy, int timer_fd)
{
	*again = true;
	if (!busy)
		wl_loop_again(timer_fd);
}
/*
 * Run until done(arg) is true, checking it after every batch of events
 * and every wake (a time to act is a timerfd in the loop). -1 if epoll
 * fails.
 */
int wl_loop_run(bool (*done)(void *arg), void *arg);

#endif
