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
 *       QUIC_STATUS_ADDRESS_IN_USE. The server's own per-processor sockets
 *       then share the port among themselves as msquic intends.
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
		fprintf(stderr, "libqprof-bind: QPROF_BIND_ADDR=%s QPROF_BIND_PORT=%s is not an IPv4 address and port; "
				"leaving binds alone\n", a, p);
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
	n = snprintf(line, sizeof(line), "{\"pid\":%d,\"call\":\"bind\",\"from\":\"%s\",\"to\":\"%s\",\"result\":\"%s\"}\n",
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
	report(from_s, to_s, rc ? strerror(errno) : "ok");
	return rc;
}
