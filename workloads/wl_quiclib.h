/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * What the transports over a QUIC library's C API share (quiche's,
 * quiche/wl_quiche.c; tquic's, tquic/wl_tquic.c), once in qprof-wl, which
 * the plugins call as they call the loop (wl_quiclib.c):
 *   - a stream's queue of messages, kept until the library has taken
 *     them (both copy what they are given), and handed to it in order,
 *     the FIN with the last byte;
 *   - the counts their marks report (every connection's sent and lost
 *     packets, the stats connection's levels), under a lock, as the loop's
 *     thread writes them and the control thread reads them.
 */
#ifndef WL_QUICLIB_H
#define WL_QUICLIB_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "wl_transport.h"

struct wl_udp_io;

/* A message handed to wl_send: its header copied, its body the caller's. */
struct wl_msg {
	struct wl_msg *next;
	uint32_t hlen, blen, done; /* done: its bytes the library has taken */
	const uint8_t *body;
	void *tag;
	uint8_t hdr[WL_HDR_MAX];
};

struct wl_msgq {
	struct wl_msg *head, *tail;
	uint64_t queued; /* their bytes not yet taken */
	bool fin_req, fin_written;
};

/*
 * Hands the library len bytes at p (fin: they end the stream; it may take
 * fewer, and then no FIN): the bytes taken (a FIN alone: 0 once taken), or
 * a WL_MSGQ_* below.
 */
typedef ssize_t (*wl_msgq_take)(void *arg, const uint8_t *p, size_t len, bool fin);
/* A message's bytes were all taken (canceled: it never will be); its tag, not NULL. */
typedef void (*wl_msgq_sent)(void *arg, void *tag, bool canceled);

enum {
	WL_MSGQ_ABORTED = -1, /* the peer stopped or reset the stream */
	WL_MSGQ_FAILED = -2,  /* the library refused the stream's data */
	WL_MSGQ_FULL = -3,    /* no room now: again once the library has room */
};

/* wl_send's message (and WL_SEND_FIN) into q: 0, or WL_EXIT_INTERNAL. */
int wl_msgq_push(struct wl_msgq *q, const uint8_t *hdr, uint32_t hdr_len, const uint8_t *body,
		 uint32_t body_len, bool fin, void *tag);
/*
 * What waits in q to take(), in order, as far as it takes it; the FIN with
 * the last bytes (or alone, once all is taken). sent() for each message
 * taken whole. 0 once it takes no more or all is taken, or take()'s
 * WL_MSGQ_ABORTED or WL_MSGQ_FAILED.
 */
int wl_msgq_write(struct wl_msgq *q, wl_msgq_take take, wl_msgq_sent sent, void *arg);
/* Every message left, canceled. */
void wl_msgq_clear(struct wl_msgq *q, wl_msgq_sent sent, void *arg);

/* The counts the marks report: the connections' sums, the stats connection's levels. */
struct wl_quic_sums {
	pthread_mutex_t lock;
	/* sent, lost packets, lost bytes, packets with resent data: every connection's, gone or live */
	uint64_t sum[4];
	bool has_retrans; /* the library counts the last (else it is left out of the marks) */
	bool have_levels;
	uint64_t levels[4]; /* the stats connection's cwnd, RTT (us), path MTU, pacing (B/s) */
	char group[64];	    /* the first handshake's key exchange */
};

/* A level the library does not give (its key is left out of the marks). */
#define WL_QUIC_NO_LEVEL UINT64_MAX
/* A connection's counts now into the sums (mine: its part so far); levels NULL or its four. */
void wl_quic_sums_add(struct wl_quic_sums *q, uint64_t mine[4], const uint64_t now[4],
		      const uint64_t *levels);
/* The first handshake's key exchange (NULL: none said). */
void wl_quic_sums_group(struct wl_quic_sums *q, const char *group);
/* "key_exchange" into p where a handshake said it. */
void wl_quic_sums_json_group(struct wl_quic_sums *q, struct wl_json *p);
/* The mark's "quic_stats": the datapath's counts and the sums. */
void wl_quic_sums_json(struct wl_quic_sums *q, struct wl_udp_io *io, struct wl_json *j);
/* What a transport says of its library and what it set it to (the reports' quic_library, quic_settings). */
struct wl_quic_desc {
	const char *name, *version, *crypto, *cipher;
	uint64_t conn_window, stream_window; /* initial_max_data (and its cap), each stream's */
	uint64_t streams_uni, streams_bidi;  /* initial_max_streams_* */
	uint64_t max_datagram, idle_timeout_ms;
	uint64_t send_batch; /* packets a send gathers (0: the library says none) */
	const char *congestion_control;
	bool pacing;
};
/*
 * The connected report's quic_library (with the first handshake's key
 * exchange), quic_settings (with the sockets' buffers), and what the
 * datapath found (GRO once a receive came coalesced).
 */
void wl_quic_json_library(struct wl_json *j, const struct wl_quic_desc *d, struct wl_quic_sums *q,
			  struct wl_udp_io *io);
/* The connection's end by the transport's word, unless another end was said first. */
void wl_end_transport(struct wl_end *e, const char *why);
/* The done report's fields of the last connection's end. */
void wl_quic_json_end(struct wl_json *j, const struct wl_end *last);

#endif
