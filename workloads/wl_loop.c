// SPDX-License-Identifier: GPL-2.0-only
/*
 * The one event loop of wl_transport.h: an epoll set on the role's main
 * thread with an eventfd any thread may wake it through. Its fds are
 * added, changed and removed on that thread (or before wl_loop_run), so
 * the table needs no lock; an fd's slot carries a generation, so an event
 * already fetched for an fd removed (or reused) in the same batch is
 * dropped rather than handed to the wrong callback. wl_loop_again calls
 * an fd's function once more after the batch, without a syscall: a
 * transport with more to send than one pass may send (ngtcp2's send
 * quantum) goes on after the other fds' events, as ngtcp2's examples do
 * on the socket's writability.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "wl_transport.h"

#define LOOP_EVENTS 64

struct slot {
	wl_loop_fn fn;
	void *arg;
	uint32_t gen;
};

static struct {
	int ep, wake;
	struct slot *slots; /* by fd */
	int nslots;
	uint32_t gen;
	uint64_t *again, *running; /* wl_loop_again's calls due: (gen << 32 | fd) each */
	int nagain, cap;
} loop = {.ep = -1, .wake = -1};

int wl_loop_init(void)
{
	struct epoll_event e = {.events = EPOLLIN, .data.u64 = UINT64_MAX};

	loop.ep = epoll_create1(EPOLL_CLOEXEC);
	if (loop.ep < 0)
		return -1;
	loop.wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (loop.wake < 0 || epoll_ctl(loop.ep, EPOLL_CTL_ADD, loop.wake, &e))
		return -1;
	return 0;
}

static struct slot *slot_for(int fd)
{
	if (fd >= loop.nslots) {
		int n = loop.nslots ? loop.nslots : 64;
		struct slot *s;

		while (n <= fd)
			n *= 2;
		s = realloc(loop.slots, (size_t)n * sizeof(*s));
		if (!s)
			return NULL;
		memset(s + loop.nslots, 0, (size_t)(n - loop.nslots) * sizeof(*s));
		loop.slots = s;
		loop.nslots = n;
	}
	return &loop.slots[fd];
}

static int ctl(int op, int fd, uint32_t events, wl_loop_fn fn, void *arg)
{
	struct slot *s = fd >= 0 ? slot_for(fd) : NULL;
	struct epoll_event e = {.events = events};

	if (!s) {
		errno = fd < 0 ? EBADF : ENOMEM;
		return -1;
	}
	if (op == EPOLL_CTL_ADD)
		s->gen = ++loop.gen;
	e.data.u64 = (uint64_t)s->gen << 32 | (uint32_t)fd;
	if (epoll_ctl(loop.ep, op, fd, &e))
		return -1;
	s->fn = fn;
	s->arg = arg;
	return 0;
}

int wl_loop_add(int fd, uint32_t events, wl_loop_fn fn, void *arg)
{
	return ctl(EPOLL_CTL_ADD, fd, events, fn, arg);
}

int wl_loop_mod(int fd, uint32_t events, wl_loop_fn fn, void *arg)
{
	return ctl(EPOLL_CTL_MOD, fd, events, fn, arg);
}

void wl_loop_del(int fd)
{
	if (fd < 0 || fd >= loop.nslots || !loop.slots[fd].fn)
		return;
	epoll_ctl(loop.ep, EPOLL_CTL_DEL, fd, NULL);
	loop.slots[fd] = (struct slot){0};
}

void wl_loop_again(int fd)
{
	uint64_t d, *a, *b;
	int i;

	if (fd < 0 || fd >= loop.nslots || !loop.slots[fd].fn)
		return;
	d = (uint64_t)loop.slots[fd].gen << 32 | (uint32_t)fd;
	for (i = 0; i < loop.nagain; i++)
		if (loop.again[i] == d)
			return;
	if (loop.nagain == loop.cap) {
		int n = loop.cap ? 2 * loop.cap : 16;

		a = realloc(loop.again, (size_t)n * sizeof(*a));
		if (a)
			loop.again = a;
		b = realloc(loop.running, (size_t)n * sizeof(*b));
		if (b)
			loop.running = b;
		if (!a || !b) {
			wl_warn("out of memory for the loop's calls again");
			return;
		}
		loop.cap = n;
	}
	loop.again[loop.nagain++] = d;
}

static void call(uint64_t d, uint32_t events)
{
	int fd = (int)(uint32_t)d;
	struct slot *s = fd < loop.nslots ? &loop.slots[fd] : NULL;

	if (s && s->fn && s->gen == (uint32_t)(d >> 32))
		s->fn(fd, events, s->arg);
}

void wl_loop_wake(void)
{
	uint64_t one = 1;

	if (loop.wake >= 0 && write(loop.wake, &one, sizeof(one)) < 0 && errno != EAGAIN)
		wl_warn("cannot wake the event loop: %s", strerror(errno));
}

int wl_loop_run(bool (*done)(void *arg), void *arg)
{
	struct epoll_event evs[LOOP_EVENTS];

	while (!done(arg)) {
		/* Calls due again: the fds' events now, without sleeping. */
		int n = epoll_wait(loop.ep, evs, LOOP_EVENTS, loop.nagain ? 0 : -1), i, m;
		uint64_t *due;

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		for (i = 0; i < n; i++) {
			uint64_t d = evs[i].data.u64, v;

			if (d == UINT64_MAX) {
				if (read(loop.wake, &v, sizeof(v)) < 0 && errno != EAGAIN)
					wl_warn("reading the loop's eventfd failed: %s",
						strerror(errno));
				continue;
			}
			call(d, evs[i].events);
		}
		/* Those asked for meanwhile wait for the next batch. */
		due = loop.again;
		m = loop.nagain;
		loop.again = loop.running;
		loop.running = due;
		loop.nagain = 0;
		for (i = 0; i < m; i++)
			call(due[i], 0);
	}
	return 0;
}
