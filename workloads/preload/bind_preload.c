// SPDX-License-Identifier: GPL-2.0-only
/*
 * libqprof-bind.so: an LD_PRELOAD interposer that keeps the QUIC server on
 * the address qprof gave it. msquic 2.5.1 binds every listener to the
 * dual-mode wildcard [::]:PORT (listener.c: "Listeners always grab the
 * dual-mode wildcard binding ... and then manually filter on the specific
 * address at the QUIC layer"), one socket per processor sharing the port
 * through SO_REUSEPORT. So a loopback run answered on every interface, and
 * a second server on the same port silently shared it, failing the
 * handshake instead of saying "port in use". msquic is not patched.
 *
 *   QPROF_BIND_ADDR=a.b.c.d, QPROF_BIND_PORT=N
 *       a bind() of a wildcard address (AF_INET6 ::, or AF_INET 0.0.0.0) to
 *       port N binds to a.b.c.d instead (::ffff:a.b.c.d on msquic's
 *       dual-mode AF_INET6 sockets). Before the first such bind, a probe
 *       socket without SO_REUSEPORT is bound to the same address and port:
 *       if anything else holds it (wildcard or not, reuseport or not), the
 *       bind fails with EADDRINUSE, which msquic reports as
 *       QUIC_STATUS_ADDRESS_IN_USE. After each such bind, /proc/net/udp and
 *       udp6 are read: a socket other than this one on the port, on the
 *       address or a wildcard, is a server that bound between the probe
 *       and the bind (two started at once share the port through
 *       SO_REUSEPORT, ~1 start in 40 here), and the bind fails with
 *       EADDRINUSE too; of two such servers at least the later one fails.
 *       The server's own per-processor sockets, bound after the first to
 *       the address it got, share the port among themselves as msquic
 *       intends, so SO_REUSEPORT is left alone.
 *   QPROF_BIND_REPORT=FILE
 *       each steered call appends one JSON line to FILE:
 *       {"pid":N,"call":"bind","from":"[::]:N","to":"[::ffff:a.b.c.d]:N","result":"ok"}
 * Anything else, or unset, passes every call through untouched.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

typedef int (*bind_fn)(int, const struct sockaddr *, socklen_t);

static struct in_addr bind_addr;
static int bind_port = -1;
static const char *report_path;
static bool checked;

__attribute__((constructor)) static void init(void)
{
	const char *a = getenv("QPROF_BIND_ADDR"), *p = getenv("QPROF_BIND_PORT");
	char *end;
	long port;

	report_path = getenv("QPROF_BIND_REPORT");
	if (!a || !p)
		return;
	port = strtol(p, &end, 10);
	if (inet_pton(AF_INET, a, &bind_addr) != 1 || *end || port < 1 || port > 65535) {
		fprintf(stderr,
			"libqprof-bind: QPROF_BIND_ADDR=%s QPROF_BIND_PORT=%s is not an IPv4 address and port; "
			"leaving binds alone\n",
			a, p);
		return;
	}
	bind_port = (int)port;
}

static bind_fn real_bind(void)
{
	static bind_fn f;

	if (!f)
		f = (bind_fn)dlsym(RTLD_NEXT, "bind");
	return f;
}

static void report(const char *from, const char *to, const char *result)
{
	int saved = errno, fd, n;
	char line[256];

	if (!report_path || !*report_path)
		return;
	n = snprintf(
		line, sizeof(line),
		"{\"pid\":%d,\"call\":\"bind\",\"from\":\"%s\",\"to\":\"%s\",\"result\":\"%s\"}\n",
		(int)getpid(), from, to, result);
	fd = open(report_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (fd >= 0) {
		if (write(fd, line, (size_t)n) != n)
			fprintf(stderr, "libqprof-bind: short write to %s\n", report_path);
		close(fd);
	}
	errno = saved;
}

/* "[addr]:port" of a sockaddr, for the report. */
static void name(const struct sockaddr *sa, char *out, size_t len)
{
	char host[INET6_ADDRSTRLEN] = "?";
	int port = 0;

	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;

		inet_ntop(AF_INET6, &s6->sin6_addr, host, sizeof(host));
		port = ntohs(s6->sin6_port);
	} else if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;

		inet_ntop(AF_INET, &s4->sin_addr, host, sizeof(host));
		port = ntohs(s4->sin_port);
	}
	snprintf(out, len, "[%s]:%d", host, port);
}

/* Is anything else bound to this address and port? A socket without
 * SO_REUSEPORT cannot share it with any other. */
static bool held_elsewhere(const struct sockaddr *sa, socklen_t len)
{
	int fd = socket(sa->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0), off = 0, rc;

	if (fd < 0)
		return false;
	if (sa->sa_family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
	rc = real_bind()(fd, sa, len);
	close(fd);
	return rc < 0 && errno == EADDRINUSE;
}

/* Does /proc/net/NAME list a UDP socket on port, on addr or a wildcard
 * (v4, or v6 unspecified or v4-mapped), other than inode self? */
static bool other_socket_in(const char *name, int port, struct in_addr addr, unsigned long self)
{
	char path[32], line[512];
	bool found = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/net/%s", name);
	f = fopen(path, "re");
	if (!f)
		return false;
	if (!fgets(line, sizeof(line), f)) /* the header */
		goto out;
	while (!found && fgets(line, sizeof(line), f)) {
		unsigned int w[4] = {0}; /* as the kernel prints them: raw 32-bit words */
		unsigned int p;
		unsigned long ino;
		bool n;

		if (!strcmp(name, "udp"))
			n = sscanf(line, "%*d: %8x:%4x %*s %*s %*s %*s %*s %*s %*s %lu", &w[3], &p,
				   &ino) == 3;
		else
			n = sscanf(line, "%*d: %8x%8x%8x%8x:%4x %*s %*s %*s %*s %*s %*s %*s %lu",
				   &w[0], &w[1], &w[2], &w[3], &p, &ino) == 6;
		if (!n || (int)p != port || ino == self)
			continue;
		if (strcmp(name, "udp") && (w[0] || w[1] || (w[2] && w[2] != htonl(0xffff))))
			continue; /* an IPv6 address, which IPv4 does not overlap */
		found = !w[3] || w[3] == addr.s_addr;
	}
out:
	fclose(f);
	return found;
}

static bool shared(int fd)
{
	int type = 0;
	socklen_t tlen = sizeof(type);
	struct stat st;

	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tlen) || type != SOCK_DGRAM ||
	    fstat(fd, &st))
		return false;
	return other_socket_in("udp", bind_port, bind_addr, st.st_ino) ||
	       other_socket_in("udp6", bind_port, bind_addr, st.st_ino);
}

/* Unbind fd as a failed bind would have left it: a fresh socket of the
 * same kind in its place, so the port is free the moment bind returns. */
static void release(int fd)
{
	int domain = 0, proto = 0, fl = fcntl(fd, F_GETFL), fdfl = fcntl(fd, F_GETFD), nfd;
	socklen_t l1 = sizeof(domain), l2 = sizeof(proto);

	if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &l1) ||
	    getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &l2))
		return;
	nfd = socket(domain, SOCK_DGRAM, proto);
	if (nfd < 0)
		return;
	if (dup3(nfd, fd, fdfl & FD_CLOEXEC ? O_CLOEXEC : 0) >= 0 && fl >= 0)
		fcntl(fd, F_SETFL, fl);
	close(nfd);
}

EXPORT int bind(int fd, const struct sockaddr *sa, socklen_t len)
{
	struct sockaddr_storage to;
	char from_s[80], to_s[80];
	int rc;

	if (bind_port < 0 || !sa)
		return real_bind()(fd, sa, len);
	if (sa->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&to;

		memcpy(s6, sa, sizeof(*s6));
		if (ntohs(s6->sin6_port) != bind_port || !IN6_IS_ADDR_UNSPECIFIED(&s6->sin6_addr))
			return real_bind()(fd, sa, len);
		memset(&s6->sin6_addr, 0, sizeof(s6->sin6_addr));
		s6->sin6_addr.s6_addr[10] = s6->sin6_addr.s6_addr[11] = 0xff;
		memcpy(&s6->sin6_addr.s6_addr[12], &bind_addr, 4);
		len = sizeof(*s6);
	} else if (sa->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&to;

		memcpy(s4, sa, sizeof(*s4));
		if (ntohs(s4->sin_port) != bind_port || s4->sin_addr.s_addr != htonl(INADDR_ANY))
			return real_bind()(fd, sa, len);
		s4->sin_addr = bind_addr;
		len = sizeof(*s4);
	} else {
		return real_bind()(fd, sa, len);
	}
	name(sa, from_s, sizeof(from_s));
	name((struct sockaddr *)&to, to_s, sizeof(to_s));
	if (!checked) {
		checked = true;
		if (held_elsewhere((struct sockaddr *)&to, len)) {
			report(from_s, to_s, "EADDRINUSE");
			errno = EADDRINUSE;
			return -1;
		}
	}
	rc = real_bind()(fd, (struct sockaddr *)&to, len);
	if (rc == 0 && shared(fd)) {
		release(fd);
		report(from_s, to_s, "EADDRINUSE");
		errno = EADDRINUSE;
		return -1;
	}
	report(from_s, to_s, rc ? strerror(errno) : "ok");
	return rc;
}
