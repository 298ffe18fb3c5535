// SPDX-License-Identifier: GPL-2.0-only
/*
 * The one UDP datapath of qprof-wl's QUIC transports that do their own
 * I/O (wl_udpio.h): ngtcp2's (wl_ngtcp2.c), quiche's (quiche/wl_quiche.c)
 * and quinn's (rs/quinn), the last two libraries of their own, which
 * reach these through qprof-wl's exported symbols. A socket with the run's buffers and
 * offloads, a batch of datagrams of one size sent in one call (GSO), a
 * receive of what the kernel joined (GRO), and the counts a mark reads as
 * of one moment.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "wl.h"
#include "wl_transport.h"
#include "wl_udpio.h"

#define SOCK_BUF (2u << 20) /* SO_SNDBUF, SO_RCVBUF asked */

/* 2 MiB each way, forced past the sysctl limits if need be (root); granted: what the kernel took. */
static void sock_bufs(struct wl_udp_io *io, int fd)
{
	const int want = SOCK_BUF;
	int v;
	socklen_t len = sizeof(v);

	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &want, sizeof(want));
	if (getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, &len) || v / 2 < want)
		setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &want, sizeof(want));
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &want, sizeof(want));
	len = sizeof(v);
	if (getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, &len) || v / 2 < want)
		setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &want, sizeof(want));
	/* The kernel reports twice what it grants (its bookkeeping's share). */
	len = sizeof(v);
	if (!getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, &len))
		io->sndbuf = v / 2;
	len = sizeof(v);
	if (!getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, &len))
		io->rcvbuf = v / 2;
}

int wl_udp_io_socket(struct wl_udp_io *io)
{
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	sock_bufs(io, fd);
	/* GSO and GRO, each where the first socket's kernel took it. */
	if (!io->probed) {
		io->probed = true;
		io->gso = wl_udp_gso_taken(fd);
		io->gro = !wl_udp_gro_on(fd);
	} else if (io->gro) {
		wl_udp_gro_on(fd);
	}
	return fd;
}

int wl_udp_io_listen(struct wl_udp_io *io, const struct sockaddr_in *a, const struct wl_opts *o,
		     void (*fn)(int fd, uint32_t events, void *arg), void *arg, int *fd)
{
	int code;

	*fd = wl_udp_io_socket(io);
	if (*fd < 0) {
		wl_warn("socket failed: %s", strerror(errno));
		return WL_EXIT_INTERNAL;
	}
	code = wl_bind(*fd, a, "UDP", o);
	if (code)
		return code;
	if (wl_loop_add(*fd, EPOLLIN, fn, arg)) {
		wl_warn("cannot watch the UDP socket: %s", strerror(errno));
		return WL_EXIT_INTERNAL;
	}
	return WL_EXIT_OK;
}

int wl_udp_io_connect(struct wl_udp_io *io, const struct sockaddr_in *to, struct sockaddr_in *local)
{
	socklen_t len = sizeof(*local);
	int fd = wl_udp_io_socket(io), e;

	if (fd < 0)
		return -1;
	if (connect(fd, (const struct sockaddr *)to, sizeof(*to)) ||
	    getsockname(fd, (struct sockaddr *)local, &len)) {
		e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

/* One update of the counts, by the loop's thread, under the sequence count. */
static void count(struct wl_udp_io *io, bool tx, uint64_t dgrams, uint64_t bytes)
{
	wl_seq_write_begin(&io->seq);
	atomic_fetch_add_explicit(tx ? &io->tx_ios : &io->rx_ios, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(tx ? &io->tx_dgrams : &io->rx_dgrams, dgrams,
				  memory_order_relaxed);
	atomic_fetch_add_explicit(tx ? &io->tx_bytes : &io->rx_bytes, bytes, memory_order_relaxed);
	wl_seq_write_end(&io->seq);
}

size_t wl_udp_io_send(struct wl_udp_io *io, int fd, const struct sockaddr_in *to, uint8_t *buf,
		      size_t len, size_t seg)
{
	union wl_udp_cmsg ctl;
	struct iovec iov = {buf, len};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
	const size_t n = (len + seg - 1) / seg;
	int tries = 0;
	ssize_t r;

	if (to) {
		m.msg_name = (void *)to;
		m.msg_namelen = sizeof(*to);
	}
	if (n > 1 && !io->gso) {
		size_t off, sent = 0;

		for (off = 0; off < len; off += seg)
			sent += wl_udp_io_send(io, fd, to, buf + off,
					       len - off < seg ? len - off : seg, seg);
		return sent;
	}
	if (n > 1)
		wl_udp_gso(&m, &ctl, (uint16_t)seg);
	for (;;) {
		r = sendmsg(fd, &m, 0);
		if (r >= 0 || errno == EINTR)
			break;
		if ((errno == EAGAIN || errno == ENOBUFS) && tries++ < 100) {
			struct pollfd p = {.fd = fd, .events = POLLOUT};

			poll(&p, 1, 10);
			continue;
		}
		if (n > 1 && (errno == EIO || errno == EINVAL || errno == ENOPROTOOPT)) {
			/* The device or the interposer refuses GSO: one datagram a call from now on. */
			io->gso = false;
			return wl_udp_io_send(io, fd, to, buf, len, seg);
		}
		break; /* lost: the library sends it again */
	}
	if (r < 0)
		return 0;
	count(io, true, n, len);
	return n;
}

ssize_t wl_udp_io_recv(struct wl_udp_io *io, int fd, uint8_t *buf, size_t cap,
		       struct sockaddr_in *from, size_t *seg)
{
	union wl_udp_cmsg ctl;
	struct iovec iov = {buf, cap};
	struct msghdr m = {
		.msg_name = from, .msg_namelen = sizeof(*from), .msg_iov = &iov, .msg_iovlen = 1};
	ssize_t n;

	wl_udp_gro_room(&m, &ctl);
	n = recvmsg(fd, &m, 0);
	if (n <= 0)
		return 0;
	*seg = wl_udp_gro_size(&m);
	if (*seg && *seg < (size_t)n)
		io->gro_seen = true;
	if (!*seg)
		*seg = (size_t)n;
	count(io, false, ((size_t)n + *seg - 1) / *seg, (uint64_t)n);
	return n;
}

void wl_udp_io_json(struct wl_udp_io *io, struct wl_json *j)
{
	static const char *const names[] = {"udp_tx_datagrams", "udp_tx_bytes", "udp_tx_ios",
					    "udp_rx_datagrams", "udp_rx_bytes", "udp_rx_ios"};
	_Atomic uint64_t *const src[] = {&io->tx_dgrams, &io->tx_bytes, &io->tx_ios,
					 &io->rx_dgrams, &io->rx_bytes, &io->rx_ios};
	uint64_t v[6], seq;
	int i;

	do {
		seq = wl_seq_read_begin(&io->seq);
		for (i = 0; i < 6; i++)
			v[i] = atomic_load_explicit(src[i], memory_order_relaxed);
	} while (wl_seq_read_retry(&io->seq, seq));
	for (i = 0; i < 6; i++)
		wl_json_u64(j, names[i], v[i]);
}

/* Closing periods (RFC 9000 10.2.1) */

#define CLOSING_BUF 65536 /* what one receive of a closing socket can hold (GRO's most) */
/* How long the transport's end waits for its closing periods (as rs/quinn's LINGER_NS). */
#define CLOSINGS_WAIT_NS 1000000000ull
/* A period's longest (a library that gave no timer): the transports' idle timeout. */
#define CLOSING_MOST_NS 30000000000ull
/*
 * The most kept at once, two fds each (a socket, a timer): past that the
 * oldest is let go, so that a stream of handshakes (80 ms periods on a
 * loopback, thousands a second) cannot take the fds its next ones need.
 */
#define CLOSINGS_MAX 256

struct closing {
	struct closing *next;
	struct wl_udp_io *io;
	int fd, timer;
	uint64_t received; /* datagrams since the close */
	size_t len;
	uint8_t pkt[WL_CLOSE_MAX];
};

static struct closing *closings; /* the newest first */
static int nclosings;

static void closing_end(struct closing *k)
{
	struct closing **pp;

	for (pp = &closings; *pp && *pp != k; pp = &(*pp)->next)
		;
	if (*pp) {
		*pp = k->next;
		nclosings--;
	}
	wl_loop_del(k->fd);
	close(k->fd);
	if (k->timer >= 0) {
		wl_loop_del(k->timer);
		close(k->timer);
	}
	free(k);
}

/* The period is over: the socket let go. */
static void on_closing_timer(int fd, uint32_t events, void *arg)
{
	(void)fd, (void)events;
	closing_end(arg);
}

/*
 * What arrives is read and dropped; the close goes again for the 1st, 2nd,
 * 4th, 8th ... datagram since, the rate RFC 9000 10.2.1 asks be limited
 * (quic-go's closed connection answers at these counts too).
 */
static void on_closing_fd(int fd, uint32_t events, void *arg)
{
	static uint8_t buf[CLOSING_BUF];
	struct closing *k = arg;
	struct sockaddr_in from;
	size_t seg;
	ssize_t n;

	(void)events;
	while ((n = wl_udp_io_recv(k->io, fd, buf, sizeof(buf), &from, &seg)) > 0) {
		const uint64_t before = k->received;

		k->received += ((size_t)n + seg - 1) / seg;
		/* A power of two passed: the received count's highest bit moved. */
		if (!before || 63 - __builtin_clzll(k->received) > 63 - __builtin_clzll(before))
			wl_udp_io_send(k->io, fd, NULL, k->pkt, k->len, k->len);
	}
}

void wl_udp_io_closing(struct wl_udp_io *io, int fd, const uint8_t *pkt, size_t len,
		       uint64_t period_ns)
{
	struct closing *k = NULL;

	wl_loop_del(fd);
	if (!len || len > WL_CLOSE_MAX || !(k = calloc(1, sizeof(*k))) ||
	    (k->timer = wl_timer_open()) < 0) {
		/* Nothing to answer with, or no room to keep it: the socket let go now. */
		if (k)
			free(k);
		close(fd);
		return;
	}
	if (period_ns > CLOSING_MOST_NS)
		period_ns = CLOSING_MOST_NS;
	k->io = io;
	k->fd = fd;
	k->len = len;
	memcpy(k->pkt, pkt, len);
	if (wl_loop_add(fd, EPOLLIN, on_closing_fd, k) ||
	    wl_loop_add(k->timer, EPOLLIN, on_closing_timer, k) ||
	    wl_timer_arm(k->timer, wl_now_ns() + period_ns)) {
		closing_end(k); /* not yet listed: its fds let go */
		return;
	}
	if (nclosings == CLOSINGS_MAX) {
		struct closing *oldest = closings;

		while (oldest->next)
			oldest = oldest->next;
		closing_end(oldest);
	}
	k->next = closings;
	closings = k;
	nclosings++;
}

static void on_closings_deadline(int fd, uint32_t events, void *arg)
{
	uint64_t v;

	(void)events, (void)arg;
	if (read(fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		wl_warn("reading the closing periods' timer failed: %s", strerror(errno));
}

static bool closings_over(void *arg)
{
	return !closings || wl_now_ns() >= *(uint64_t *)arg;
}

void wl_udp_io_closings_wait(void)
{
	uint64_t deadline = wl_now_ns() + CLOSINGS_WAIT_NS;
	int t;

	if (!closings)
		return;
	t = wl_timer_open();
	/* No timer to wake the loop at the deadline: the periods are cut short. */
	if (t >= 0 && !wl_loop_add(t, EPOLLIN, on_closings_deadline, NULL) &&
	    !wl_timer_arm(t, deadline))
		wl_loop_run(closings_over, &deadline);
	while (closings)
		closing_end(closings);
	if (t >= 0) {
		wl_loop_del(t);
		close(t);
	}
}
