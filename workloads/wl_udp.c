// SPDX-License-Identifier: GPL-2.0-only
/*
 * Raw UDP (udp): a datagram transport with no reliability and no crypto,
 * the kernel's floor for a UDP transport, and the one pattern that runs
 * on it, a bulk sender and a verifying receiver in the spirit of the
 * kernel's udpgso_bench_tx/rx. The role (wl_role.c) runs them as it runs
 * the others: the control channel, "ready", "connected", the marks,
 * "done", the failure, the stop.
 *
 * Why a pattern of its own (as iperf3 -u is a mode under iperf3's one
 * test loop): a datagram flow with loss has no ordered stream, so bulk's
 * content check of a byte stream at its offset has nothing to run on.
 * Each datagram is checked on its own, by its sequence number, and what
 * goes missing is counted rather than failed. So the transport gives the
 * role only what the role asks of every transport (init, listen, its
 * fields of the reports, fini); the stream operations are NULL: this
 * pattern drives its one socket itself, in batches the kernel cuts
 * (GSO) or joins (GRO).
 *
 * Datagram seq carries seq as an 8-byte little-endian word, then the
 * pattern bytes at offset (seq mod UDP_SLOTS) * UDP_STRIDE + 8 onwards.
 * The stride does not depend on the datagram size, so the receiver needs
 * no --dgram-size; the sender sends out of a ring built once and writes
 * only the 8-byte headers per datagram. The end of a transfer is told by
 * UDP_END_REPEATS end datagrams (seq UDP_END_SEQ, then the count of data
 * datagrams sent) spread over ~30 ms. The receiver's done report says why
 * it ended (end_reason): "end" (an end datagram), "idle" (IDLE_TIMEOUT_MS
 * without data once data came), "stop" ("stop", "exit" or EOF on --control)
 * or "error"; without an end datagram, loss counts gaps only, not the tail.
 *
 * The sender's socket blocks: its send buffer paces it to the device, with
 * nothing else pacing it, as udpgso_bench. The receiver's socket asks for
 * INT32_MAX bytes of receive buffer (capped by net.core.rmem_max), as
 * msquic's sockets do, so the floor is compared with QUIC on equal terms.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "wl_role.h"
#include "wl_udpio.h"

/* Defaults and limits */
#define UDP_DGRAM_DEFAULT 1472 /* MTU 1500 - IPv4 - UDP headers */
#define UDP_DGRAM_MIN 16
#define UDP_DGRAM_MAX 65507  /* 65535 - IPv4 - UDP headers */
#define UDP_GSO_DEF_SEGS 64  /* the default's cap: UDP_MAX_SEGMENTS of older kernels */
#define UDP_GSO_MAX_SEGS 128 /* UDP_MAX_SEGMENTS since it was raised (6.18 has it) */
#define UDP_MMSG_MAX 1024    /* UIO_MAXIOV: sendmmsg's vlen limit */
#define UDP_HDR 8	     /* the sequence number */
#define UDP_STRIDE 65536u
#define UDP_SLOTS (wl_pattern_period() / UDP_STRIDE)
#define UDP_END_SEQ UINT64_MAX
#define UDP_END_LEN 16
#define UDP_END_REPEATS 6	   /* gaps 1, 2, 4, 8, 16 ms */
#define RECV_VLEN 32		   /* messages per recvmmsg */
#define RECV_BUF 65536u		   /* a whole GRO message or any datagram */
#define RECV_SLOT (RECV_BUF + 192) /* spread buffers over cache sets */
#define RECV_POLL_MS 100	   /* how often a blocked receiver looks at stop */
#define IDLE_TIMEOUT_MS 2000	   /* receiver ends this long after data stops */
#define DUP_WINDOW 65536	   /* seqs behind the highest checked for duplicates */

enum send_mode { MODE_SENDMSG, MODE_SENDMMSG, MODE_GSO };
static const char *const mode_names[] = {"sendmsg", "sendmmsg", "gso"};

/* The role's wl_role holds the rest: app_bytes, stopping, the failure, the times. */
static struct {
	enum send_mode mode;
	uint32_t dgram, batch;
	bool gro;
	int fd;
	int sockbuf; /* SO_SNDBUF (client) or SO_RCVBUF (server) */

	/* Written by the one transfer thread (the role's main thread), read by marks. */
	_Atomic uint64_t io_calls;
	_Atomic uint64_t datagrams; /* data datagrams sent, or received once */
	_Atomic uint64_t lost, reordered, duplicates, highest_seq, gro_segments;

	bool have_data, got_end;
	uint64_t expected; /* from the end datagram */
	const char *end_reason;
} udp_state = {.fd = -1, .sockbuf = -1};

/*
 * Single writer: a relaxed load and store, no locked instruction per
 * datagram (wl_role.app_bytes too: only the transfer thread writes it).
 */
static inline void bump(_Atomic uint64_t *c, uint64_t n)
{
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
			      memory_order_relaxed);
}

static inline uint64_t get(_Atomic uint64_t *c)
{
	return atomic_load_explicit(c, memory_order_relaxed);
}

static int udp_addr(struct sockaddr_in *a)
{
	memset(a, 0, sizeof(*a));
	a->sin_family = AF_INET;
	a->sin_port = htons((uint16_t)wl_role.o->port);
	return inet_pton(AF_INET, wl_role.o->addr, &a->sin_addr) == 1 ? 0 : -1;
}

/* --- receiver ---------------------------------------------------------------- */

static uint64_t seen[DUP_WINDOW / 64]; /* seqs in (highest - DUP_WINDOW, highest] */

static inline bool seen_test_set(uint64_t seq)
{
	uint64_t bit = 1ull << (seq % 64), *w = &seen[(seq / 64) % (DUP_WINDOW / 64)];
	bool was = *w & bit;

	*w |= bit;
	return was;
}

static inline void seen_clear(uint64_t seq)
{
	seen[(seq / 64) % (DUP_WINDOW / 64)] &= ~(1ull << (seq % 64));
}

static inline void unlose(void)
{
	if (get(&udp_state.lost))
		atomic_store_explicit(&udp_state.lost, get(&udp_state.lost) - 1,
				      memory_order_relaxed);
}

/*
 * Loss, reordering and duplicates of one data datagram. A seq above the
 * highest counts the gap below it as lost; one below the highest was lost
 * and is now found (reordered), unless the window says it was seen already
 * (duplicate). Beyond the window a late seq counts as reordered. Returns
 * whether seq is a duplicate.
 */
static bool account(uint64_t seq)
{
	uint64_t hi = get(&udp_state.highest_seq), s;

	if (!udp_state.have_data) {
		udp_state.have_data = true;
		bump(&udp_state.lost, seq);
		atomic_store_explicit(&udp_state.highest_seq, seq, memory_order_relaxed);
		seen_test_set(seq);
		return false;
	}
	if (seq > hi) {
		bump(&udp_state.lost, seq - hi - 1);
		if (seq - hi >= DUP_WINDOW)
			memset(seen, 0, sizeof(seen));
		else
			for (s = hi + 1; s < seq; s++)
				seen_clear(s);
		seen_clear(seq);
		seen_test_set(seq);
		atomic_store_explicit(&udp_state.highest_seq, seq, memory_order_relaxed);
		return false;
	}
	if (hi - seq < DUP_WINDOW && seen_test_set(seq)) {
		bump(&udp_state.duplicates, 1);
		return true;
	}
	bump(&udp_state.reordered, 1);
	unlose();
	return false;
}

/* One datagram; false when the transfer must end (a failure). */
static bool on_datagram(const uint8_t *p, size_t len)
{
	uint64_t seq;

	if (len < UDP_HDR) {
		wl_role_fail(WL_EXIT_VERIFY,
			     "a %zu-byte datagram arrived, too short for a sequence number", len);
		return false;
	}
	memcpy(&seq, p, 8);
	seq = le64toh(seq);
	if (seq == UDP_END_SEQ) {
		if (len != UDP_END_LEN) {
			wl_role_fail(WL_EXIT_VERIFY,
				     "an end datagram of %zu bytes arrived; it has %d", len,
				     UDP_END_LEN);
			return false;
		}
		memcpy(&udp_state.expected, p + 8, 8);
		udp_state.expected = le64toh(udp_state.expected);
		udp_state.got_end = true;
		return true;
	}
	if (!wl_pattern_check((seq % UDP_SLOTS) * UDP_STRIDE + UDP_HDR, p + UDP_HDR,
			      len - UDP_HDR)) {
		/* No offset or stream to name in "done": the message says the seq. */
		atomic_store(&wl_role.verify_failed, true);
		wl_role_fail(WL_EXIT_VERIFY,
			     "datagram seq %llu (%zu bytes) failed the content check",
			     (unsigned long long)seq, len);
		return false;
	}
	wl_seq_write_begin(&wl_role.counts_seq);
	if (!account(seq)) {
		bump(&udp_state.datagrams, 1);
		bump(&wl_role.app_bytes, len);
	}
	wl_seq_write_end(&wl_role.counts_seq);
	return true;
}

/* One received message: one datagram, or with a UDP_GRO cmsg several of gso_size. */
static bool on_message(struct msghdr *m, const uint8_t *p, size_t len)
{
	size_t seg, off;

	if (m->msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
		wl_role_fail(WL_EXIT_VERIFY, "a message of %zu bytes was truncated (flags 0x%x)",
			     len, m->msg_flags);
		return false;
	}
	seg = wl_udp_gro_size(m);
	if (!seg || seg >= len) {
		return on_datagram(p, len);
	}
	bump(&udp_state.gro_segments, 1);
	for (off = 0; off < len; off += seg)
		if (!on_datagram(p + off, len - off < seg ? len - off : seg))
			return false;
	return true;
}

/* The role's socket in udp_state.fd and the server's address in *a, or an exit code. */
static int udp_socket(struct sockaddr_in *a)
{
	if (udp_addr(a)) {
		wl_warn("bad IPv4 address %s", wl_role.o->addr);
		return WL_EXIT_USAGE;
	}
	udp_state.fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (udp_state.fd < 0) {
		wl_warn("socket(AF_INET, SOCK_DGRAM) failed: %s", strerror(errno));
		return WL_EXIT_INTERNAL;
	}
	return 0;
}

/* The transport's listen: the receiving socket, bound; a datagram flow has no connections (a: NULL). */
static int udp_listen(const struct wl_accept *a)
{
	struct sockaddr_in sa;
	struct timeval tv = {.tv_usec = RECV_POLL_MS * 1000};
	int big = 0x7fffffff, rc;
	socklen_t len = sizeof(udp_state.sockbuf);

	(void)a;
	if ((rc = udp_socket(&sa)))
		return rc;
	if (setsockopt(udp_state.fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big)) ||
	    setsockopt(udp_state.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) ||
	    getsockopt(udp_state.fd, SOL_SOCKET, SO_RCVBUF, &udp_state.sockbuf, &len)) {
		wl_warn("setsockopt/getsockopt(SO_RCVBUF, SO_RCVTIMEO) failed: %s",
			strerror(errno));
		return WL_EXIT_INTERNAL;
	}
	if (udp_state.gro && wl_udp_gro_on(udp_state.fd)) {
		wl_warn("setsockopt(UDP_GRO) failed: %s; this kernel lacks UDP GRO (Linux 5.0+): run the server with --gro off",
			strerror(errno));
		return WL_EXIT_LIB_OPEN;
	}
	return wl_bind(udp_state.fd, &sa, "UDP", wl_role.o);
}

/* The pattern's server: receive until the end datagram, idle, "stop" or a failure. */
static int dgram_server(void)
{
	static struct mmsghdr msgs[RECV_VLEN];
	static struct iovec iov[RECV_VLEN];
	static char ctrl[RECV_VLEN][CMSG_SPACE(sizeof(int)) + 16] __attribute__((aligned(8)));
	uint8_t *bufs;
	uint64_t last_rx_ns = 0;
	int code, i;

	bufs = aligned_alloc(4096, (size_t)RECV_VLEN * RECV_SLOT);
	if (!bufs) {
		wl_warn("cannot allocate %u receive buffers", RECV_VLEN);
		return WL_EXIT_INTERNAL;
	}
	for (i = 0; i < RECV_VLEN; i++) {
		iov[i].iov_base = bufs + (size_t)i * RECV_SLOT;
		iov[i].iov_len = RECV_BUF;
		msgs[i].msg_hdr.msg_iov = &iov[i];
		msgs[i].msg_hdr.msg_iovlen = 1;
		msgs[i].msg_hdr.msg_control = ctrl[i];
	}
	code = wl_role_listen(NULL);
	if (code) {
		free(bufs);
		return code;
	}
	udp_state.end_reason = "stop";
	while (!wl_role_stopping()) {
		int n;

		for (i = 0; i < RECV_VLEN; i++) {
			msgs[i].msg_hdr.msg_controllen = sizeof(ctrl[i]);
			msgs[i].msg_hdr.msg_flags = 0;
		}
		n = recvmmsg(udp_state.fd, msgs, RECV_VLEN, MSG_WAITFORONE, NULL);
		bump(&udp_state.io_calls, 1);
		if (n < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
				if (last_rx_ns &&
				    wl_now_ns() - last_rx_ns > IDLE_TIMEOUT_MS * 1000000ull) {
					udp_state.end_reason = "idle";
					break;
				}
				continue;
			}
			wl_role_fail(WL_EXIT_INTERNAL, "recvmmsg failed after %llu datagrams: %s",
				     (unsigned long long)get(&udp_state.datagrams),
				     strerror(errno));
			break;
		}
		last_rx_ns = wl_now_ns();
		if (!wl_role.t_connected_ns)
			wl_role_connected(last_rx_ns);
		for (i = 0; i < n; i++)
			if (!on_message(&msgs[i].msg_hdr, iov[i].iov_base, msgs[i].msg_len))
				break;
		if (wl_role.failure.code)
			break;
		if (udp_state.got_end) {
			udp_state.end_reason = "end";
			break;
		}
	}
	if (wl_role.failure.code)
		udp_state.end_reason = "error";
	wl_role.t_transfer_done_ns = udp_state.got_end || !last_rx_ns ? wl_now_ns() : last_rx_ns;
	if (udp_state.got_end)
		atomic_store_explicit(&udp_state.lost,
				      udp_state.expected > get(&udp_state.datagrams)
					      ? udp_state.expected - get(&udp_state.datagrams)
					      : 0,
				      memory_order_relaxed);
	else if (!wl_role.failure.code && last_rx_ns)
		wl_warn("no end datagram arrived (ended by %s): loss counts the gaps only, not the tail",
			udp_state.end_reason);
	free(bufs);
	return wl_role.failure.code;
}

/* --- sender ------------------------------------------------------------------ */

/*
 * Slot i of the ring holds datagram content for seq = i mod UDP_SLOTS; the
 * batch - 1 slots past UDP_SLOTS repeat the first ones, so any batch of
 * consecutive seqs is one contiguous run of memory (one iovec for GSO).
 */
static uint8_t *make_ring(void)
{
	const uint8_t *pat = wl_pattern_region();
	size_t slots = UDP_SLOTS + udp_state.batch - 1,
	       size = (slots * udp_state.dgram + 4095) & ~(size_t)4095, i;
	uint8_t *ring = aligned_alloc(4096, size);

	if (!ring)
		return NULL;
	for (i = 0; i < slots; i++)
		memcpy(ring + i * udp_state.dgram + UDP_HDR,
		       pat + (i % UDP_SLOTS) * UDP_STRIDE + UDP_HDR, udp_state.dgram - UDP_HDR);
	return ring;
}

/*
 * The sending socket, connected to the server. The transport's connect
 * would promise handlers a datagram flow never calls, so the pattern
 * makes it here.
 */
static int client_socket(void)
{
	struct sockaddr_in a;
	socklen_t len = sizeof(udp_state.sockbuf);
	int rc;

	if ((rc = udp_socket(&a)))
		return rc;
	if (getsockopt(udp_state.fd, SOL_SOCKET, SO_SNDBUF, &udp_state.sockbuf, &len)) {
		wl_warn("getsockopt(SO_SNDBUF) failed: %s", strerror(errno));
		return WL_EXIT_INTERNAL;
	}
	if (connect(udp_state.fd, (struct sockaddr *)&a, sizeof(a))) {
		wl_warn("UDP connect to %s:%d failed: %s", wl_role.o->addr, wl_role.o->port,
			strerror(errno));
		return WL_EXIT_HANDSHAKE;
	}
	return 0;
}

static void send_failed(const char *call, uint64_t seq)
{
	int e = errno;

	if (e == ECONNREFUSED)
		wl_role_fail(
			WL_EXIT_CONN_LOST,
			"%s: nothing receives on UDP %s:%d (ICMP port unreachable) after %llu datagrams; "
			"start the server first",
			call, wl_role.o->addr, wl_role.o->port, (unsigned long long)seq);
	else if (udp_state.mode == MODE_GSO && (e == EIO || e == EINVAL || e == ENOPROTOOPT))
		wl_role_fail(
			WL_EXIT_LIB_OPEN,
			"%s with UDP_SEGMENT failed: %s; this kernel or the route's device cannot do UDP GSO "
			"of %u x %u bytes (kernels before the limit was raised take 64 segments): lower --batch or use "
			"--send-mode sendmmsg",
			call, strerror(e), udp_state.batch, udp_state.dgram);
	else
		wl_role_fail(WL_EXIT_INTERNAL, "%s failed after %llu datagrams: %s", call,
			     (unsigned long long)seq, strerror(e));
}

static void send_end(uint64_t sent)
{
	uint64_t w[2] = {htole64(UDP_END_SEQ), htole64(sent)};
	int i;

	for (i = 0; i < UDP_END_REPEATS; i++) {
		struct timespec gap = {.tv_nsec = (1l << i) * 500000};

		if (i)
			nanosleep(&gap, NULL);
		bump(&udp_state.io_calls, 1);
		/* The receiver may have gone after the first copy: its port then refuses. */
		if (send(udp_state.fd, w, sizeof(w), 0) < 0 && errno != ECONNREFUSED)
			wl_warn("send of the end datagram failed: %s", strerror(errno));
	}
}

/* The pattern's client: send for --duration-ms, --bytes or until "stop", then the end datagrams. */
static int dgram_client(void)
{
	static struct mmsghdr msgs[UDP_MMSG_MAX];
	static struct iovec iov[UDP_MMSG_MAX];
	const struct wl_opts *o = wl_role.o;
	union wl_udp_cmsg ctl;
	struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 1};
	uint64_t seq = 0, deadline = 0, limit = 0, k;
	uint8_t *ring;
	int code;

	ring = make_ring();
	if (!ring) {
		wl_warn("cannot allocate the send ring (%u slots of %u bytes)",
			UDP_SLOTS + udp_state.batch - 1, udp_state.dgram);
		return WL_EXIT_INTERNAL;
	}
	if (udp_state.mode == MODE_GSO)
		wl_udp_gso(&mh, &ctl, (uint16_t)udp_state.dgram);
	for (k = 0; k < udp_state.batch; k++) {
		msgs[k].msg_hdr.msg_iov = &iov[k];
		msgs[k].msg_hdr.msg_iovlen = 1;
	}
	if (o->bytes)
		limit = (o->bytes + udp_state.dgram - 1) / udp_state.dgram;
	if (!wl_role_wait_start()) {
		free(ring);
		return 0;
	}
	code = client_socket();
	if (code) {
		free(ring);
		return code;
	}
	wl_role_connected(wl_now_ns());
	if (o->duration_ms)
		deadline = wl_role.t_connected_ns + o->duration_ms * 1000000ull;
	while (!atomic_load_explicit(&wl_role.stopping, memory_order_relaxed)) {
		uint64_t n = udp_state.batch, j = seq % UDP_SLOTS, bytes, last = udp_state.dgram;
		uint8_t *base = ring + j * udp_state.dgram;
		ssize_t r;

		if (deadline && wl_now_ns() >= deadline)
			break;
		if (limit) {
			if (seq >= limit)
				break;
			if (n > limit - seq)
				n = limit - seq;
			if (seq + n == limit && o->bytes % udp_state.dgram)
				last = o->bytes % udp_state.dgram < UDP_HDR
					       ? UDP_HDR
					       : o->bytes % udp_state.dgram;
		}
		for (k = 0; k < n; k++) {
			uint64_t h = htole64(seq + k);
			memcpy(base + k * udp_state.dgram, &h, 8);
		}
		bytes = (n - 1) * udp_state.dgram + last;
		if (udp_state.mode == MODE_SENDMMSG) {
			for (k = 0; k < n; k++) {
				iov[k].iov_base = base + k * udp_state.dgram;
				iov[k].iov_len = k == n - 1 ? last : udp_state.dgram;
			}
			r = sendmmsg(udp_state.fd, msgs, (unsigned int)n, 0);
			if (r > 0 && (uint64_t)r < n) {
				n = (uint64_t)r;
				/* the short last datagram was not among them */
				bytes = n * udp_state.dgram;
			}
		} else {
			/* gso: the batch in one call, cut by the kernel; sendmsg: n is 1 */
			iov[0].iov_base = base;
			iov[0].iov_len = bytes;
			r = sendmsg(udp_state.fd, &mh, 0);
		}
		bump(&udp_state.io_calls, 1);
		if (r < 0) {
			if (errno == EINTR || errno == ENOBUFS)
				continue;
			send_failed(udp_state.mode == MODE_SENDMMSG ? "sendmmsg" : "sendmsg", seq);
			break;
		}
		seq += n;
		wl_seq_write_begin(&wl_role.counts_seq);
		bump(&udp_state.datagrams, n);
		bump(&wl_role.app_bytes, bytes);
		wl_seq_write_end(&wl_role.counts_seq);
	}
	wl_role.t_transfer_done_ns = wl_now_ns();
	if (!wl_role.failure.code)
		send_end(seq);
	free(ring);
	return wl_role.failure.code;
}

/* --- the reports ------------------------------------------------------------- */

/* "connected" is its time alone: a datagram flow has no handshake to tell of. */
static void udp_json_connected(struct wl_json *j)
{
	(void)j;
}

/*
 * The datagram counters as of the role's read of app_bytes (a mark): the
 * datagrams with the bytes they carried, the loss with them.
 */
static struct {
	uint64_t io_calls, datagrams, lost, reordered, duplicates, highest_seq, gro_segments;
} udp_seen;

static void udp_mark_snapshot(void)
{
	udp_seen.io_calls = get(&udp_state.io_calls);
	udp_seen.datagrams = get(&udp_state.datagrams);
	udp_seen.lost = get(&udp_state.lost);
	udp_seen.reordered = get(&udp_state.reordered);
	udp_seen.duplicates = get(&udp_state.duplicates);
	udp_seen.highest_seq = get(&udp_state.highest_seq);
	udp_seen.gro_segments = get(&udp_state.gro_segments);
}

/* The datagram counters, in marks (as the role's read saw them) and "done". */
static void udp_json_mark(struct wl_json *j)
{
	wl_json_u64(j, "io_calls", udp_seen.io_calls);
	wl_json_u64(j, "datagrams", udp_seen.datagrams);
	if (!wl_role.server)
		return;
	wl_json_u64(j, "lost", udp_seen.lost);
	wl_json_u64(j, "reordered", udp_seen.reordered);
	wl_json_u64(j, "duplicates", udp_seen.duplicates);
	wl_json_u64(j, "highest_seq", udp_seen.highest_seq);
	wl_json_u64(j, "gro_segments", udp_seen.gro_segments);
}

/* The counters and the socket as set up: GRO and the receive buffer, or how it sent. */
static void udp_json_done(struct wl_json *j, const struct wl_end *last)
{
	const uint64_t sockbuf = udp_state.sockbuf < 0 ? 0 : (uint64_t)udp_state.sockbuf;

	(void)last;
	udp_mark_snapshot(); /* the transfer is over: the counts stand still */
	udp_json_mark(j);
	if (wl_role.server) {
		wl_json_bool(j, "gro", udp_state.gro);
		wl_json_u64(j, "rcvbuf_bytes", sockbuf);
	} else {
		wl_json_str(j, "send_mode", mode_names[udp_state.mode]);
		wl_json_u64(j, "batch", udp_state.batch);
		wl_json_u64(j, "dgram_size", udp_state.dgram);
		wl_json_u64(j, "sndbuf_bytes", sockbuf);
	}
}

/* The flow's end: the role's "verified" follows on the server. */
static void dgram_json_done(struct wl_json *j, int code)
{
	if (wl_role.server) {
		wl_json_u64(j, "streams_completed", udp_state.got_end && !code);
		wl_json_u64(j, "datagrams_expected", udp_state.got_end ? udp_state.expected : 0);
		wl_json_str(j, "end_reason", udp_state.end_reason ? udp_state.end_reason : "none");
	} else {
		wl_json_u64(j, "streams_completed", !code && wl_role.t_connected_ns);
		wl_json_u64(j, "datagrams_sent", get(&udp_state.datagrams));
	}
}

/* --- the transport and the pattern ------------------------------------------ */

/* Cross-flag checks: one sentence each, before anything starts. */
static int udp_init(const struct wl_opts *o, bool server)
{
	if (server && (o->send_mode || o->batch || o->dgram_size)) {
		wl_warn("--send-mode, --batch and --dgram-size are the client's (the sender's); drop them on the server");
		return WL_EXIT_USAGE;
	}
	if (!server && o->gro) {
		wl_warn("--gro is the server's (the receiver's UDP_GRO socket option); drop it on the client");
		return WL_EXIT_USAGE;
	}
	if (o->streams != 1) {
		wl_warn("--stack udp sends one flow of datagrams; --streams must be 1");
		return WL_EXIT_USAGE;
	}
	if (o->sendfile) {
		wl_warn("--sendfile is for tcp and tcp-ktls; --stack udp sends datagrams with --send-mode");
		return WL_EXIT_USAGE;
	}
	if (o->gro && strcmp(o->gro, "on") && strcmp(o->gro, "off")) {
		wl_warn("--gro takes on or off, not %s", o->gro);
		return WL_EXIT_USAGE;
	}
	udp_state.gro = !o->gro || !strcmp(o->gro, "on");
	if (!o->send_mode || !strcmp(o->send_mode, "gso"))
		udp_state.mode = MODE_GSO;
	else if (!strcmp(o->send_mode, "sendmmsg"))
		udp_state.mode = MODE_SENDMMSG;
	else if (!strcmp(o->send_mode, "sendmsg"))
		udp_state.mode = MODE_SENDMSG;
	else {
		wl_warn("--send-mode takes sendmsg, sendmmsg or gso, not %s", o->send_mode);
		return WL_EXIT_USAGE;
	}
	udp_state.dgram = o->dgram_size ? o->dgram_size : UDP_DGRAM_DEFAULT;
	if (udp_state.dgram < UDP_DGRAM_MIN || udp_state.dgram > UDP_DGRAM_MAX) {
		wl_warn("--dgram-size %u is outside %d..%d bytes of UDP payload", udp_state.dgram,
			UDP_DGRAM_MIN, UDP_DGRAM_MAX);
		return WL_EXIT_USAGE;
	}
	udp_state.batch = o->batch;
	switch (udp_state.mode) {
	case MODE_SENDMSG:
		if (udp_state.batch > 1) {
			wl_warn("--send-mode sendmsg sends one datagram per call, so --batch must be 1 or left out");
			return WL_EXIT_USAGE;
		}
		udp_state.batch = 1;
		break;
	case MODE_GSO:
	case MODE_SENDMMSG:
		if (!udp_state.batch) {
			udp_state.batch = UDP_DGRAM_MAX / udp_state.dgram;
			if (udp_state.batch > UDP_GSO_DEF_SEGS)
				udp_state.batch = UDP_GSO_DEF_SEGS;
		}
		if (udp_state.mode == MODE_SENDMMSG && udp_state.batch > UDP_MMSG_MAX) {
			wl_warn("--batch %u is more than sendmmsg takes in one call (%d)",
				udp_state.batch, UDP_MMSG_MAX);
			return WL_EXIT_USAGE;
		}
		if (udp_state.mode == MODE_GSO && udp_state.batch > UDP_GSO_MAX_SEGS) {
			wl_warn("--batch %u is more segments than one GSO send may carry (%d)",
				udp_state.batch, UDP_GSO_MAX_SEGS);
			return WL_EXIT_USAGE;
		}
		if (udp_state.mode == MODE_GSO &&
		    (uint64_t)udp_state.batch * udp_state.dgram > UDP_DGRAM_MAX) {
			wl_warn("--batch %u of %u-byte datagrams exceeds the %d bytes one GSO send may carry; use at most %u",
				udp_state.batch, udp_state.dgram, UDP_DGRAM_MAX,
				UDP_DGRAM_MAX / udp_state.dgram);
			return WL_EXIT_USAGE;
		}
		break;
	}
	return 0;
}

static void udp_fini(void)
{
	if (udp_state.fd >= 0)
		close(udp_state.fd);
}

/*
 * A datagram transport: no stream, no connection, no order, so none of the
 * stream operations (open, send, room, pause, abort, close, conn_info) nor
 * connect's handlers apply; they are NULL, and only wl_udp_bulk runs on it.
 */
const struct wl_transport wl_udp = {
	.name = "udp",
	.init = udp_init,
	.listen = udp_listen,
	.mark_snapshot = udp_mark_snapshot,
	.json_connected = udp_json_connected,
	.json_mark = udp_json_mark,
	.json_done = udp_json_done,
	.fini = udp_fini,
};

/* The server: each datagram by its sequence number. */
static bool dgram_checks(void)
{
	return wl_role.server;
}

const struct wl_pattern wl_udp_bulk = {
	.name = "udp-bulk",
	/* The receiver runs until told; a sender still waiting for "start" never starts. */
	.exit_stops_server = true,
	.server = dgram_server,
	.client = dgram_client,
	/* Its mark fields are the transport's counters. */
	.json_done = dgram_json_done,
	.checks = dgram_checks,
	/*
	 * "stop" needs nothing past wl_role.stopping: the sender looks at it
	 * before each call, the receiver at least every RECV_POLL_MS.
	 */
};
