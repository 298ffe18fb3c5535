// SPDX-License-Identifier: GPL-2.0-only
/*
 * libqprof-offload.so: an LD_PRELOAD interposer that makes UDP GSO or GRO
 * look unsupported to one process, so a stack that probes for them (msquic)
 * runs its own fallback. The stack is never patched.
 *
 *   QPROF_GSO=off  a sendmsg() asking the kernel to segment (a SOL_UDP
 *                  UDP_SEGMENT cmsg of nonzero size, more payload than one
 *                  segment) fails with EIO, as on a device without UDP GSO;
 *                  sendmmsg() sends the messages before the first such one,
 *                  or fails with EIO if it is the first; setsockopt(SOL_UDP,
 *                  UDP_SEGMENT, nonzero) fails with ENOPROTOOPT, as on a
 *                  kernel without it.
 *   QPROF_GRO=off  setsockopt(SOL_UDP, UDP_GRO, nonzero) returns 0 without
 *                  enabling it, so the socket receives one datagram per
 *                  message, as on a kernel without UDP GRO.
 *   QPROF_OFFLOAD_REPORT=FILE
 *                  each steered call appends one JSON line to FILE:
 *                  {"pid":N,"call":"sendmsg","option":"UDP_SEGMENT","action":"EIO","fd":N}
 *                  (action: EIO, ENOPROTOOPT, ignored, or short for a
 *                  sendmmsg cut before its first GSO message).
 * Anything else, or unset, passes every call through untouched.
 *
 * msquic 2.5.1 (CxPlatDataPathCalculateFeatureSupport) decides both once at
 * start-up: setsockopt(UDP_GRO) on a probe socket, an 8 x 1476-byte
 * sendmsg with UDP_SEGMENT to it, then recvmsg expecting 11808 bytes and a
 * UDP_GRO cmsg. With QPROF_GSO=off the send fails, msquic sends with
 * sendmmsg of single datagrams, and it never tests GRO: GRO is off too.
 * With QPROF_GRO=off the probe receives one 1476-byte datagram, so GRO is
 * off and GSO stays on.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "../wl_udpio.h" /* SOL_UDP, UDP_SEGMENT and UDP_GRO, as the workloads name them */

#define EXPORT __attribute__((visibility("default")))

static bool gso_off, gro_off;
static const char *report_path;

typedef ssize_t (*sendmsg_fn)(int, const struct msghdr *, int);
typedef int (*sendmmsg_fn)(int, struct mmsghdr *, unsigned int, int);
typedef int (*setsockopt_fn)(int, int, int, const void *, socklen_t);

static void *next(void **slot, const char *name)
{
	void *f = __atomic_load_n(slot, __ATOMIC_ACQUIRE);

	if (!f) {
		f = dlsym(RTLD_NEXT, name);
		__atomic_store_n(slot, f, __ATOMIC_RELEASE);
	}
	return f;
}

static bool env_off(const char *name)
{
	const char *v = getenv(name);

	if (!v || !*v || !strcmp(v, "on"))
		return false;
	if (!strcmp(v, "off"))
		return true;
	fprintf(stderr, "libqprof-offload: %s=%s is neither on nor off; leaving it on\n", name, v);
	return false;
}

__attribute__((constructor)) static void init(void)
{
	gso_off = env_off("QPROF_GSO");
	gro_off = env_off("QPROF_GRO");
	report_path = getenv("QPROF_OFFLOAD_REPORT");
	if (report_path && !*report_path)
		report_path = NULL;
}

/* One line per steered call: these are rare start-up events. Keeps errno. */
static void report(const char *call, const char *option, const char *action, int fd)
{
	int saved = errno, rfd, n;
	char line[160];

	if (!report_path)
		return;
	n = snprintf(line, sizeof(line),
		     "{\"pid\":%d,\"call\":\"%s\",\"option\":\"%s\",\"action\":\"%s\",\"fd\":%d}\n",
		     (int)getpid(), call, option, action, fd);
	rfd = open(report_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (rfd >= 0) {
		if (write(rfd, line, (size_t)n) != n)
			fprintf(stderr, "libqprof-offload: short write to %s\n", report_path);
		close(rfd);
	} else {
		fprintf(stderr, "libqprof-offload: cannot open %s: %s\n", report_path,
			strerror(errno));
	}
	errno = saved;
}

/* Does the message ask the kernel to cut its payload into UDP segments? */
static bool asks_gso(const struct msghdr *m)
{
	struct msghdr *mm = (struct msghdr *)m; /* CMSG_NXTHDR takes no const */
	struct cmsghdr *c;
	size_t len = 0, i;
	uint16_t seg = 0;

	if (!m || !m->msg_control)
		return false;
	for (c = CMSG_FIRSTHDR(mm); c; c = CMSG_NXTHDR(mm, c))
		if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_SEGMENT &&
		    c->cmsg_len >= CMSG_LEN(sizeof(seg)))
			memcpy(&seg, CMSG_DATA(c), sizeof(seg));
	if (!seg)
		return false;
	for (i = 0; i < m->msg_iovlen; i++)
		len += m->msg_iov[i].iov_len;
	return len > seg;
}

static bool nonzero(const void *v, socklen_t len)
{
	const unsigned char *p = v;
	socklen_t i;

	if (!p)
		return false;
	for (i = 0; i < len && i < sizeof(int); i++)
		if (p[i])
			return true;
	return false;
}

EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	static void *real;
	sendmsg_fn f = (sendmsg_fn)next(&real, "sendmsg");

	if (gso_off && asks_gso(msg)) {
		report("sendmsg", "UDP_SEGMENT", "EIO", fd);
		errno = EIO;
		return -1;
	}
	if (!f) {
		errno = ENOSYS;
		return -1;
	}
	return f(fd, msg, flags);
}

EXPORT int sendmmsg(int fd, struct mmsghdr *vec, unsigned int vlen, int flags)
{
	static void *real;
	sendmmsg_fn f = (sendmmsg_fn)next(&real, "sendmmsg");
	unsigned int i;

	if (gso_off && vec) {
		for (i = 0; i < vlen && !asks_gso(&vec[i].msg_hdr); i++)
			;
		if (i == 0 && vlen) {
			report("sendmmsg", "UDP_SEGMENT", "EIO", fd);
			errno = EIO;
			return -1;
		}
		if (i < vlen) {
			/* As the kernel does: what went before the failing message is sent. */
			report("sendmmsg", "UDP_SEGMENT", "short", fd);
			vlen = i;
		}
	}
	if (!f) {
		errno = ENOSYS;
		return -1;
	}
	return f(fd, vec, vlen, flags);
}

EXPORT int setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
	static void *real;
	setsockopt_fn f = (setsockopt_fn)next(&real, "setsockopt");

	if (level == SOL_UDP && name == UDP_SEGMENT && gso_off && nonzero(val, len)) {
		report("setsockopt", "UDP_SEGMENT", "ENOPROTOOPT", fd);
		errno = ENOPROTOOPT;
		return -1;
	}
	if (level == SOL_UDP && name == UDP_GRO && gro_off && nonzero(val, len)) {
		report("setsockopt", "UDP_GRO", "ignored", fd);
		return 0;
	}
	if (!f) {
		errno = ENOSYS;
		return -1;
	}
	return f(fd, level, name, val, len);
}
