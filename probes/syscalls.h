// SPDX-License-Identifier: GPL-2.0-only
/* syscalls: the types both sides of the probe share. */
#ifndef QPROF_SYSCALLS_H
#define QPROF_SYSCALLS_H

#include "probe_common.h"

/* The syscalls this probe follows, in the order tables print them. */
enum qp_sys {
	QP_SENDMSG,
	QP_SENDMMSG,
	QP_RECVMSG,
	QP_RECVMMSG,
	QP_SENDTO,
	QP_RECVFROM,
	QP_WRITE,
	QP_WRITEV,
	QP_READ,
	QP_READV,
	QP_SENDFILE,
	QP_SPLICE,
	QP_EPOLL_WAIT,
	QP_EPOLL_PWAIT,
	QP_EPOLL_PWAIT2,
	QP_IO_URING_ENTER,
	QP_FUTEX,
	QP_NSYS,
};

/* Most messages of one sendmmsg/recvmmsg whose lengths are summed. */
#define QP_MAX_MMSG 256

/* Threads followed; each has QP_NSYS entries in stats from its slot on. */
#define QP_MAX_THREADS 512

/* Who slot i is (threads[i]; tid 0: not yet); its counters are stats[i * QP_NSYS + sys]. */
struct sys_thread {
	__u32 tgid;
	__u32 tid;
};

struct sys_key {
	__u32 tgid;
	__u32 tid;
	__u32 sys; /* enum qp_sys */
	__u32 pad;
};

struct sys_stats {
	__u64 calls;
	__u64 errors;	      /* returned < 0, EAGAIN included */
	__u64 eagain;	      /* returned -EAGAIN */
	__u64 bytes;	      /* read/write/send/recv: bytes returned */
	__u64 msgs_requested; /* mmsg: vlen asked for */
	__u64 msgs_returned;  /* mmsg: messages done; epoll: events */
	__u64 mmsg_truncated; /* mmsg calls past QP_MAX_MMSG: bytes undercounted */
	__u64 datagrams; /* --datagrams only: UDP datagrams received (a GRO message's segments) */
	__u64 datagrams_most; /* --datagrams only: the most one call received */
	__u64 time_ns;	      /* --time only: inside the call, blocking included */
	__u64 time_hist_ns[PROBE_HIST_SLOTS];
};

#endif
