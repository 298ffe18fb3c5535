// Counts the run's network and waiting syscalls per thread: calls, errors,
// bytes, mmsg messages and time inside, from the raw_syscalls tracepoints
// through BTF (tp_btf: no tracefs needed, one attach point for all).
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>

#include "syscalls.h"
#include "common.bpf.h"

#define EAGAIN 11

DEFINE_TARGET_TGIDS

struct inflight {
	__u64 ts;
	__u64 msgvec;
	__u32 sys;
	__u32 vlen;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct inflight);
} inflight SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, struct sys_key);
	__type(value, struct sys_stats);
} stats SEC(".maps");

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

SEC("tp_btf/sys_enter")
int BPF_PROG(sys_enter, struct pt_regs *regs, long id)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)pid_tgid;
	struct inflight in = {};
	int idx;

	if (!is_target(pid_tgid >> 32))
		return 0;
	idx = sys_index(id);
	if (idx < 0)
		return 0;
	in.ts = bpf_ktime_get_ns();
	in.sys = idx;
	if (idx == QP_SENDMMSG || idx == QP_RECVMMSG) {
		in.msgvec = BPF_CORE_READ(regs, si);
		in.vlen = (__u32)BPF_CORE_READ(regs, dx);
	}
	bpf_map_update_elem(&inflight, &tid, &in, BPF_ANY);
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

SEC("tp_btf/sys_exit")
int BPF_PROG(sys_exit, struct pt_regs *regs, long ret)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)pid_tgid;
	struct sys_key key = {};
	struct sys_stats *s, zero = {};
	struct inflight *in;
	__u64 dur;

	in = bpf_map_lookup_elem(&inflight, &tid);
	if (!in)
		return 0;
	dur = bpf_ktime_get_ns() - in->ts;
	key.tgid = pid_tgid >> 32;
	key.tid = tid;
	key.sys = in->sys;
	s = bpf_map_lookup_elem(&stats, &key);
	if (!s) {
		bpf_map_update_elem(&stats, &key, &zero, BPF_NOEXIST);
		s = bpf_map_lookup_elem(&stats, &key);
		if (!s)
			goto out;
	}
	__sync_fetch_and_add(&s->calls, 1);
	__sync_fetch_and_add(&s->time_ns, dur);
	__sync_fetch_and_add(&s->time_hist_ns[log2_slot(dur)], 1);
	if (ret < 0) {
		__sync_fetch_and_add(&s->errors, 1);
		if (ret == -EAGAIN)
			__sync_fetch_and_add(&s->eagain, 1);
		goto out;
	}
	switch (in->sys) {
	case QP_SENDMMSG:
	case QP_RECVMMSG:
		__sync_fetch_and_add(&s->msgs_requested, in->vlen);
		__sync_fetch_and_add(&s->msgs_returned, ret);
		__sync_fetch_and_add(&s->bytes, mmsg_bytes(in->msgvec, ret));
		if (ret > QP_MAX_MMSG)
			__sync_fetch_and_add(&s->mmsg_truncated, 1);
		break;
	case QP_EPOLL_WAIT:
	case QP_EPOLL_PWAIT:
	case QP_EPOLL_PWAIT2:
	case QP_IO_URING_ENTER:
		__sync_fetch_and_add(&s->msgs_returned, ret);
		break;
	case QP_FUTEX:
		break;
	default:
		__sync_fetch_and_add(&s->bytes, ret);
		break;
	}
out:
	bpf_map_delete_elem(&inflight, &tid);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
