/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The UDP datapath's kernel interface, once for qprof-wl's transports that
 * do their own UDP I/O (udp's wl_udp.c, ngtcp2's wl_ngtcp2.c, quiche's
 * quiche/wl_quiche.c, quinn's rs/quinn): a send of
 * consecutive datagrams of one size that the kernel cuts (GSO, a
 * UDP_SEGMENT cmsg) and a receive of datagrams the kernel joined (GRO,
 * the UDP_GRO socket option and its cmsg of the segment size), as the
 * kernel's selftests udpgso_bench_tx/rx use them (and the names the
 * offload interposer, preload/offload_preload.c, steers). Each transport keeps its own policy (udp
 * fails a refused option in one sentence; ngtcp2 falls back to one
 * datagram a call) and its own counters.
 */
#ifndef WL_UDPIO_H
#define WL_UDPIO_H

#include <netinet/in.h>
#include <netinet/udp.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>

/* Older C libraries' headers lack them (Linux 4.18 and 5.0). */
#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

/* Room for the one cmsg of either way: a GSO send's uint16_t, a GRO receive's int. */
union wl_udp_cmsg {
	char b[CMSG_SPACE(sizeof(int))];
	struct cmsghdr align;
};

/* m sends segments of seg bytes: its control is ctl, holding a UDP_SEGMENT cmsg. */
static inline void wl_udp_gso(struct msghdr *m, union wl_udp_cmsg *ctl, uint16_t seg)
{
	struct cmsghdr *c;

	memset(ctl, 0, sizeof(*ctl));
	m->msg_control = ctl->b;
	m->msg_controllen = CMSG_SPACE(sizeof(seg));
	c = CMSG_FIRSTHDR(m);
	c->cmsg_level = SOL_UDP;
	c->cmsg_type = UDP_SEGMENT;
	c->cmsg_len = CMSG_LEN(sizeof(seg));
	memcpy(CMSG_DATA(c), &seg, sizeof(seg));
}

/* m receives into ctl's room for a GRO cmsg (again before each receive: the kernel shrinks it). */
static inline void wl_udp_gro_room(struct msghdr *m, union wl_udp_cmsg *ctl)
{
	m->msg_control = ctl->b;
	m->msg_controllen = sizeof(ctl->b);
}

/* A received message's GRO segment size; 0: it is one datagram. */
static inline size_t wl_udp_gro_size(struct msghdr *m)
{
	struct cmsghdr *c;

	for (c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c)) {
		if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
			int g;

			memcpy(&g, CMSG_DATA(c), sizeof(g));
			return g > 0 ? (size_t)g : 0;
		}
	}
	return 0;
}

/* The UDP_GRO socket option on: 0, or -1 with errno (a kernel before 5.0, or the offload interposer). */
static inline int wl_udp_gro_on(int fd)
{
	int on = 1;

	return setsockopt(fd, SOL_UDP, UDP_GRO, &on, sizeof(on));
}

/* Whether the kernel takes GSO on fd: a UDP_SEGMENT socket option taken, then put back to 0, so only a
 * cmsg segments. */
static inline int wl_udp_gso_taken(int fd)
{
	int v = 1200, zero = 0;

	if (setsockopt(fd, SOL_UDP, UDP_SEGMENT, &v, sizeof(v)))
		return 0;
	setsockopt(fd, SOL_UDP, UDP_SEGMENT, &zero, sizeof(zero));
	return 1;
}

/*
 * The datapath of a QUIC transport's sockets (wl_udpio.c: ngtcp2's and
 * quiche's), written by the loop's thread: what the kernel took (GSO,
 * GRO, the buffers it granted) and the counts, under a sequence count so
 * that a mark (the control thread) reads them all as of one moment, a
 * call's datagrams with the call.
 */
struct wl_json;

struct wl_udp_io {
	bool gso, gro, gro_seen,
		probed;	    /* gro: UDP_GRO taken; gro_seen: a receive came coalesced */
	int sndbuf, rcvbuf; /* granted, as getsockopt says */
	_Atomic uint64_t seq;
	_Atomic uint64_t tx_dgrams, tx_bytes, tx_ios, rx_dgrams, rx_bytes, rx_ios;
};

/*
 * A non-blocking UDP socket with 2 MiB buffers each way and the offloads
 * the first one's kernel took; -1 (errno).
 */
int wl_udp_io_socket(struct wl_udp_io *io);
struct wl_opts;
/*
 * Server: a socket of the datapath bound to a (wl_bind's sentences) and
 * watched by the loop (fn, arg) in *fd: 0, or an exit code after saying why.
 */
int wl_udp_io_listen(struct wl_udp_io *io, const struct sockaddr_in *a, const struct wl_opts *o,
		     void (*fn)(int fd, uint32_t events, void *arg), void *arg, int *fd);
/* Client: a socket of the datapath connected to `to`, *local its address; its fd, or -1 (errno). */
int wl_udp_io_connect(struct wl_udp_io *io, const struct sockaddr_in *to,
		      struct sockaddr_in *local);
/*
 * One sendmsg of len bytes in datagrams of seg (GSO when more than one,
 * one a call once the kernel refused it), to `to` (NULL: a connected
 * socket); a full socket waits. The datagrams sent: 0, lost (the library
 * sends them again).
 */
size_t wl_udp_io_send(struct wl_udp_io *io, int fd, const struct sockaddr_in *to, uint8_t *buf,
		      size_t len, size_t seg);
/*
 * One recvmsg into buf: its length (0: nothing more), *seg the GRO
 * segment size (the length: one datagram).
 */
ssize_t wl_udp_io_recv(struct wl_udp_io *io, int fd, uint8_t *buf, size_t cap,
		       struct sockaddr_in *from, size_t *seg);
/*
 * Closing periods (RFC 9000 10.2.1), for the transports whose library
 * does not answer a closed connection's peer (ngtcp2 leaves it to the
 * application; quiche and tquic drop what arrives once closed): a client
 * connection this side closed hands over its socket fd and the datagram
 * that carried its CONNECTION_CLOSE, pkt (len bytes, at most
 * WL_CLOSE_MAX). The loop then sends that datagram again for what
 * arrives, at a limited rate, until period_ns (three PTOs) has passed,
 * and lets the socket go; a peer whose copy was lost is answered, not
 * left to its idle timeout.
 */
#define WL_CLOSE_MAX 1500
void wl_udp_io_closing(struct wl_udp_io *io, int fd, const uint8_t *pkt, size_t len,
		       uint64_t period_ns);
/*
 * At the transport's end: the loop runs on until no closing period is
 * left, for at most a second, and lets the sockets go.
 */
void wl_udp_io_closings_wait(void);
/* The counts as of one moment (udp_tx_datagrams ... udp_rx_ios), any thread. */
void wl_udp_io_json(struct wl_udp_io *io, struct wl_json *j);

#endif
