// SPDX-License-Identifier: GPL-2.0-only
// Counts the run's network and waiting syscalls per thread: calls, errors,
// bytes and mmsg messages at sys_exit alone; with call_time also the time
// inside, which costs a sys_enter program and two clock reads a call; from
// sys_exit_datagrams also the UDP datagrams each receive call took, which
// reads every received message's control data. From
// the raw_syscalls tracepoints through BTF (tp_btf: no tracefs needed, one
// attach point for all).
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "syscalls.h"
#include "common.bpf.h"

#define EAGAIN 11
#define SOL_UDP 17
#define UDP_GRO 104
/* Control messages looked at per received message before UDP_GRO's is given up. */
#define QP_MAX_CMSGS 4

DEFINE_TARGET_TGIDS

/*
 * Set by user space before load (--time). Off, sys_enter is not even
 * attached: everything but the time is in sys_exit's registers, and the
 * verifier drops the branch that is not taken.
 */
const volatile bool call_time = false;

struct inflight {
	__u64 ts;   /* call_time: when the call of ours in flight began; 0: none */
	__u32 slot; /* 1 + the thread's slot; 0: none yet */
	__u32 pad;
};

/*
 * Per thread, in the thread's own storage: its slot, and when the call it
 * is inside began. Found through the task, with no hash, allocation or
 * lock per call as a tid-keyed hash would need; freed with the thread,
 * while its counters stay in stats.
 */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct inflight);
} inflight SEC(".maps");

/*
 * Counters in an array, not a hash keyed by {tgid, tid, syscall}: the
 * element's address is computed in line, and a call's exit touches only
 * its own thread's counters, which keeps the probe cheap when the
 * transfer itself keeps the caches cold. A thread takes its slot at its
 * first call; threads says whose slot is whose.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, QP_MAX_THREADS);
	__type(key, __u32);
	__type(value, struct sys_thread);
} threads SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, QP_MAX_THREADS *QP_NSYS);
	__type(key, __u32);
	__type(value, struct sys_stats);
} stats SEC(".maps");

/* Slots handed out, lost ones included; threads[0..nr_slots) are in use. */
__u32 nr_slots;
/* Threads not followed: every slot was taken. */
__u64 lost_threads;

/*
 * A slot for the current thread, once; false if none is left. The number
 * comes from one fetch-and-add (-mcpu=v3); tid is written last, so user
 * space skips a slot whose tid is still 0.
 */
static __always_inline bool take_slot(struct inflight *in, struct task_struct *task)
{
	struct sys_thread *t;
	__u32 n;

	if (in->slot)
		return in->slot <= QP_MAX_THREADS;
	n = __sync_fetch_and_add(&nr_slots, 1);
	t = bpf_map_lookup_elem(&threads, &n);
	if (!t) {
		in->slot = QP_MAX_THREADS + 1;
		__sync_fetch_and_add(&lost_threads, 1);
		return false;
	}
	t->tgid = task->tgid;
	asm volatile("" ::: "memory");
	t->tid = task->pid;
	in->slot = n + 1;
	return true;
}

/* x86_64 syscall numbers. */
static __always_inline int sys_index(long nr)
{
	switch (nr) {
	case 46: return QP_SENDMSG;
	case 307: return QP_SENDMMSG;
	case 47: return QP_RECVMSG;
	case 299: return QP_RECVMMSG;
	case 44: return QP_SENDTO;
	case 45: return QP_RECVFROM;
	case 1: return QP_WRITE;
	case 20: return QP_WRITEV;
	case 0: return QP_READ;
	case 19: return QP_READV;
	case 40: return QP_SENDFILE;
	case 275: return QP_SPLICE;
	case 232: return QP_EPOLL_WAIT;
	case 281: return QP_EPOLL_PWAIT;
	case 441: return QP_EPOLL_PWAIT2;
	case 426: return QP_IO_URING_ENTER;
	case 202: return QP_FUTEX;
	default: return -1;
	}
}

/* Only with call_time: when a followed call of a target began. */
SEC("tp_btf/sys_enter")
int BPF_PROG(sys_enter, struct pt_regs *regs, long id)
{
	struct task_struct *task;
	struct inflight *in;

	/* The switch first: it costs less than the tgid check and drops most calls. */
	if (sys_index(id) < 0)
		return 0;
	task = bpf_get_current_task_btf();
	if (!is_target(task->tgid))
		return 0;
	in = bpf_task_storage_get(&inflight, task, NULL, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!in || !take_slot(in, task))
		return 0;
	in->ts = bpf_ktime_get_ns();
	return 0;
}

/* Sum of msg_len over the messages an mmsg call completed. */
static __always_inline __u64 mmsg_bytes(__u64 msgvec, long n)
{
	struct mmsghdr *v = (struct mmsghdr *)msgvec;
	__u64 sum = 0;
	int i;

	for (i = 0; i < QP_MAX_MMSG; i++) {
		unsigned int len = 0;

		if (i >= n)
			break;
		bpf_probe_read_user(&len, sizeof(len), &v[i].msg_len);
		sum += len;
	}
	return sum;
}

/*
 * The datagrams one received message holds: a GRO'd one carries its
 * segment size in a UDP_GRO control message (the kernel's udp_cmsg_recv,
 * which msg_controllen, rewritten by the call, covers), splitting its
 * length into that many; without one it is a single datagram.
 */
static __always_inline __u64 msg_datagrams(struct user_msghdr *h, __u64 len)
{
	__u64 ctllen = 0, off = 0;
	void *ctl = NULL;
	int i;

	bpf_probe_read_user(&ctl, sizeof(ctl), &h->msg_control);
	bpf_probe_read_user(&ctllen, sizeof(ctllen), &h->msg_controllen);
	for (i = 0; i < QP_MAX_CMSGS; i++) {
		struct cmsghdr c = {};
		int seg = 0;

		if (!ctl || off + sizeof(c) > ctllen)
			break;
		if (bpf_probe_read_user(&c, sizeof(c), ctl + off))
			break;
		if (c.cmsg_level == SOL_UDP && c.cmsg_type == UDP_GRO) {
			/* CMSG_DATA: right after the header, which is 8-byte aligned already. */
			bpf_probe_read_user(&seg, sizeof(seg), ctl + off + sizeof(c));
			return seg > 0 && len > 0 ? (len + seg - 1) / seg : 1;
		}
		if (c.cmsg_len < sizeof(c))
			break;
		off += (c.cmsg_len + 7) & ~7ULL;
	}
	return 1;
}

struct mmsg_walk {
	struct mmsghdr *v;
	__u64 sum;
};

static int mmsg_step(__u32 i, void *arg)
{
	struct mmsg_walk *w = arg;
	unsigned int len = 0;

	bpf_probe_read_user(&len, sizeof(len), &w->v[i].msg_len);
	w->sum += msg_datagrams(&w->v[i].msg_hdr, len);
	return 0;
}

/*
 * The datagrams over the messages an mmsg receive completed. bpf_loop
 * (5.17): the verifier checks one step, where an unrolled loop of
 * QP_MAX_MMSG message walks went past its million instructions.
 */
static __always_inline __u64 mmsg_datagrams(__u64 msgvec, long n)
{
	struct mmsg_walk w = {.v = (struct mmsghdr *)msgvec};

	bpf_loop(n < QP_MAX_MMSG ? n : QP_MAX_MMSG, mmsg_step, &w, 0);
	return w.sum;
}

/*
 * The syscall's number and arguments are still in the registers the entry
 * saved (orig_ax; si and dx hold an mmsg call's vector and vlen), so one
 * program at exit counts everything but the time.
 */
static __always_inline int count_exit(struct pt_regs *regs, long ret, const bool count_datagrams)
{
	struct task_struct *task;
	struct sys_stats *s;
	struct inflight *in;
	__u64 dur = 0;
	__u32 key;
	int idx;

	idx = sys_index(regs->orig_ax);
	if (idx < 0)
		return 0;
	task = bpf_get_current_task_btf();
	if (!is_target(task->tgid))
		return 0;
	if (call_time) {
		/* Only calls whose entry was seen: their time is whole. */
		in = bpf_task_storage_get(&inflight, task, NULL, 0);
		if (!in || !in->ts)
			return 0;
		dur = bpf_ktime_get_ns() - in->ts;
		in->ts = 0;
	} else {
		in = bpf_task_storage_get(&inflight, task, NULL, BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (!in || !take_slot(in, task))
			return 0;
	}
	key = (in->slot - 1) * QP_NSYS + idx;
	s = bpf_map_lookup_elem(&stats, &key);
	if (!s)
		return 0;
	/*
	 * Plain adds: the slot is the thread's, and a thread exits one call at
	 * a time, so no one else writes this entry.
	 */
	s->calls++;
	if (call_time) {
		s->time_ns += dur;
		s->time_hist_ns[log2_slot(dur)]++;
	}
	if (ret < 0) {
		s->errors++;
		if (ret == -EAGAIN)
			s->eagain++;
		return 0;
	}
	switch (idx) {
	case QP_SENDMMSG:
	case QP_RECVMMSG: {
		/*
		 * The vector's bytes read first, then the call's counts added
		 * together: a reader that copies the entry meanwhile finds the
		 * two a few instructions apart, not a whole vector's reads.
		 */
		__u64 sum = mmsg_bytes(regs->si, ret);

		s->msgs_requested += (__u32)regs->dx;
		s->msgs_returned += ret;
		s->bytes += sum;
		if (ret > QP_MAX_MMSG)
			s->mmsg_truncated++;
		if (count_datagrams && idx == QP_RECVMMSG) {
			__u64 d = mmsg_datagrams(regs->si, ret);

			s->datagrams += d;
			if (d > s->datagrams_most)
				s->datagrams_most = d;
		}
		break;
	}
	case QP_RECVMSG:
		s->bytes += ret;
		if (count_datagrams) {
			__u64 d = msg_datagrams((struct user_msghdr *)regs->si, ret);

			s->datagrams += d;
			if (d > s->datagrams_most)
				s->datagrams_most = d;
		}
		break;
	case QP_RECVFROM:
		/* No control data: one datagram a call. */
		s->bytes += ret;
		if (count_datagrams) {
			s->datagrams++;
			s->datagrams_most = 1;
		}
		break;
	case QP_EPOLL_WAIT:
	case QP_EPOLL_PWAIT:
	case QP_EPOLL_PWAIT2:
	case QP_IO_URING_ENTER: s->msgs_returned += ret; break;
	case QP_FUTEX: break;
	default: s->bytes += ret; break;
	}
	return 0;
}

SEC("tp_btf/sys_exit")
int BPF_PROG(sys_exit, struct pt_regs *regs, long ret)
{
	return count_exit(regs, ret, false);
}

/*
 * Loaded instead of sys_exit with --datagrams: its bpf_loop needs 5.17,
 * which the plain count does not.
 */
SEC("tp_btf/sys_exit")
int BPF_PROG(sys_exit_datagrams, struct pt_regs *regs, long ret)
{
	return count_exit(regs, ret, true);
}

char LICENSE[] SEC("license") = "GPL";
