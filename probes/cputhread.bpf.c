// SPDX-License-Identifier: GPL-2.0-only
// On-CPU time of every thread of the given processes, from sched_switch;
// softirq time by vector and hardirq time, system-wide, with the softirq
// time served on a target's stack or in ksoftirqd set apart, each only
// where user space loads its programs (--softirqs, --hardirqs): the
// softirq pair runs on every softirq of the machine. tp_btf throughout:
// no tracefs, and the task_structs come with the event.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>

#include "cputhread.h"
#include "common.bpf.h"

#define TASK_RUNNING 0
#define PF_KTHREAD 0x00200000

DEFINE_TARGET_TGIDS

/*
 * Written by user space just before attach: where the slice of a thread
 * that was already on-CPU then starts (its switch-in was never seen).
 */
__u64 attach_ns;
/* Slots handed out, lost ones included; threads[0..nr_slots) are in use. */
__u32 nr_slots;
/* Threads not followed because every slot was taken. */
__u64 lost_threads;

/*
 * Per thread, in the thread's own storage: 1 + its slot in threads, or 0
 * before its first event. Found through the task pointer the event hands
 * us, with no hash of the tid per switch; freed with the thread, while
 * its entry stays in threads.
 */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, __u32);
} slots SEC(".maps");

/*
 * Each thread's on-CPU time per CPU, at its slot: the finished slices, each
 * added on the CPU it ran on as it ends (where each thread ran, for
 * --cpus). Per CPU, so the add needs no atomic and the map grows with the
 * CPUs, not with a bitmask's width.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, QP_MAX_THREADS);
	__type(key, __u32);
	__type(value, __u64);
} thread_cpu_ns SEC(".maps");

/* Each thread's entry, at its slot; user space reads [0, nr_slots). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, QP_MAX_THREADS);
	__type(key, __u32);
	__type(value, struct thread_cpu);
} threads SEC(".maps");

struct irq_state {
	__u64 softirq_start_ns;
	__u64 softirq_hardirq_ns; /* hardirqs nested in the running softirq */
	__u64 hardirq_start_ns;
	__u32 softirq_target; /* 1 + target_index() of the task current at entry, or 0 */
	__u32 in_ksoftirqd;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct irq_state);
} irq_state SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, QP_NR_SOFTIRQS);
	__type(key, __u32);
	__type(value, struct softirq_stats);
} softirqs SEC(".maps");

/* Per CPU, at target_index() * QP_NR_SOFTIRQS + vector. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, PROBE_MAX_PIDS *QP_NR_SOFTIRQS);
	__type(key, __u32);
	__type(value, __u64);
} softirq_in_target SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hardirq_stats);
} hardirqs SEC(".maps");

/*
 * The entry of task, made at its first event (*created, when asked). The
 * slot number comes from one fetch-and-add (-mcpu=v3); tid is written
 * last, so user space skips a slot whose tid is still 0.
 */
static __always_inline struct thread_cpu *thread_get(struct task_struct *task, bool *created,
						     __u32 *slotp)
{
	struct thread_cpu *t;
	__u32 *slot, n;

	slot = bpf_task_storage_get(&slots, task, NULL, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!slot)
		return NULL;
	if (*slot) {
		n = *slot - 1;
		if (slotp)
			*slotp = n;
		return bpf_map_lookup_elem(&threads, &n);
	}
	n = __sync_fetch_and_add(&nr_slots, 1);
	t = bpf_map_lookup_elem(&threads, &n);
	if (!t) {
		*slot = QP_MAX_THREADS + 1;
		__sync_fetch_and_add(&lost_threads, 1);
		return NULL;
	}
	*slot = n + 1;
	if (slotp)
		*slotp = n;
	t->tgid = task->tgid;
	t->sum_exec_ns = task->se.sum_exec_runtime;
	asm volatile("" ::: "memory");
	t->tid = task->pid;
	if (created)
		*created = true;
	return t;
}

/*
 * Two loads straight from the task (tp_btf hands us a typed pointer), not
 * a helper call per switch; the kernel pads comm with NULs.
 */
static __always_inline void copy_comm(struct thread_cpu *t, struct task_struct *task)
{
	const __u64 *src = (const __u64 *)task->comm;
	__u64 *dst = (__u64 *)t->comm;

	dst[0] = src[0];
	dst[1] = src[1];
}

/*
 * A thread's entry is written by its own switches, exit and wakeups, which
 * the scheduler already serializes (the rq lock; a task is switched in
 * elsewhere only once its switch-out here is done), so seq needs no lock;
 * the atomics order the writes for the reader.
 */
static __always_inline void seq_begin(struct thread_cpu *t)
{
	__sync_fetch_and_add(&t->seq, 1);
}

static __always_inline void seq_end(struct thread_cpu *t)
{
	__sync_fetch_and_add(&t->seq, 1);
}

SEC("tp_btf/sched_switch")
int BPF_PROG(sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	bool created = false, prev_ours = is_target(prev->tgid), next_ours = is_target(next->tgid);
	__u64 now, sum_exec, slice = 0, *on_this_cpu;
	struct thread_cpu *t;
	__u32 slot = 0;

	if (!prev_ours && !next_ours)
		return 0;
	now = bpf_ktime_get_ns();
	if (prev_ours) {
		t = thread_get(prev, &created, &slot);
		if (t) {
			sum_exec = prev->se.sum_exec_runtime;
			seq_begin(t);
			if (t->since_ns) {
				slice = now > t->since_ns ? now - t->since_ns : 0;
			} else if (created) {
				/* On-CPU since before attach. */
				slice = now > attach_ns ? now - attach_ns : 0;
			} else if (sum_exec > t->sum_exec_ns) {
				/*
				 * Its switch-in raised no event: some hosts deliver
				 * none while their own agent's tasks are current, so
				 * a switch away from one is never seen. The kernel's
				 * count of the slice is the next best thing.
				 */
				slice = sum_exec - t->sum_exec_ns;
				t->untraced_slices++;
				t->untraced_ns += slice;
			}
			t->oncpu_ns += slice;
			t->sum_exec_ns = sum_exec;
			t->since_ns = 0;
			t->woken_ns = 0;
			t->switches++;
			/* Same rule as the kernel's nivcsw. */
			if (preempt || prev_state == TASK_RUNNING)
				t->involuntary++;
			copy_comm(t, prev);
			seq_end(t);
			on_this_cpu = bpf_map_lookup_elem(&thread_cpu_ns, &slot);
			if (on_this_cpu)
				*on_this_cpu += slice;
		}
	}
	if (next_ours) {
		t = thread_get(next, NULL, NULL);
		if (t) {
			seq_begin(t);
			t->since_ns = now;
			t->cpu = bpf_get_smp_processor_id();
			if (t->woken_ns && now > t->woken_ns) {
				t->wakeups++;
				t->runq_ns += now - t->woken_ns;
			}
			t->woken_ns = 0;
			seq_end(t);
		}
	}
	return 0;
}

/*
 * Fires under the rq lock of the CPU the task will run on, as its
 * switch-in does. A wakeup of a task still on-CPU (it had not gone to
 * sleep yet) is no wait.
 */
static __always_inline void wakeup(struct task_struct *p)
{
	struct thread_cpu *t;

	if (!is_target(p->tgid))
		return;
	t = thread_get(p, NULL, NULL);
	if (!t || t->since_ns)
		return;
	seq_begin(t);
	t->woken_ns = bpf_ktime_get_ns();
	seq_end(t);
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(sched_wakeup, struct task_struct *p)
{
	wakeup(p);
	return 0;
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(sched_wakeup_new, struct task_struct *p)
{
	wakeup(p);
	return 0;
}

/* Its last slice still ends in sched_switch; this keeps its name. */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(sched_process_exit, struct task_struct *p, bool group_dead)
{
	struct thread_cpu *t;

	if (!is_target(p->tgid))
		return 0;
	t = thread_get(p, NULL, NULL);
	if (!t)
		return 0;
	seq_begin(t);
	t->exited = 1;
	copy_comm(t, p);
	seq_end(t);
	return 0;
}

static __always_inline struct irq_state *this_irq_state(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&irq_state, &zero);
}

/*
 * The per-CPU ksoftirqd pointer is not in kallsyms without
 * CONFIG_KALLSYMS_ALL, so go by name; only a kernel thread can carry it.
 * The name is read from the task directly: no helper call per softirq.
 */
static __always_inline bool in_ksoftirqd(struct task_struct *task)
{
	const char *comm = task->comm;

	if (!(task->flags & PF_KTHREAD))
		return false;
	return comm[0] == 'k' && comm[1] == 's' && comm[2] == 'o' && comm[3] == 'f' &&
	       comm[4] == 't' && comm[5] == 'i' && comm[6] == 'r' && comm[7] == 'q' &&
	       comm[8] == 'd' && comm[9] == '/';
}

SEC("tp_btf/softirq_entry")
int BPF_PROG(softirq_entry, unsigned int vec_nr)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct irq_state *c = this_irq_state();

	if (!c)
		return 0;
	c->softirq_target = target_index(task->tgid) + 1;
	c->in_ksoftirqd = in_ksoftirqd(task);
	c->softirq_hardirq_ns = 0;
	c->softirq_start_ns = bpf_ktime_get_ns();
	return 0;
}

/* Per-CPU counters, plain adds: a softirq does not nest in another on its CPU. */
SEC("tp_btf/softirq_exit")
int BPF_PROG(softirq_exit, unsigned int vec_nr)
{
	struct irq_state *c = this_irq_state();
	struct softirq_stats *s;
	__u64 dur, *v;
	__u32 key;

	if (!c || !c->softirq_start_ns)
		return 0;
	dur = bpf_ktime_get_ns() - c->softirq_start_ns;
	dur = dur > c->softirq_hardirq_ns ? dur - c->softirq_hardirq_ns : 0;
	c->softirq_start_ns = 0;
	s = bpf_map_lookup_elem(&softirqs, &vec_nr);
	if (!s)
		return 0;
	s->count++;
	s->time_ns += dur;
	if (c->in_ksoftirqd)
		s->ksoftirqd_ns += dur;
	if (!c->softirq_target || vec_nr >= QP_NR_SOFTIRQS)
		return 0;
	key = (c->softirq_target - 1) * QP_NR_SOFTIRQS + vec_nr;
	v = bpf_map_lookup_elem(&softirq_in_target, &key);
	if (v)
		*v += dur;
	return 0;
}

/* Hardirq handlers do not nest (they run with interrupts off). */
static __always_inline void hardirq_enter(void)
{
	struct irq_state *c = this_irq_state();

	if (c)
		c->hardirq_start_ns = bpf_ktime_get_ns();
}

static __always_inline void hardirq_exit(void)
{
	struct irq_state *c = this_irq_state();
	struct hardirq_stats *h;
	__u32 zero = 0;
	__u64 dur;

	if (!c || !c->hardirq_start_ns)
		return;
	dur = bpf_ktime_get_ns() - c->hardirq_start_ns;
	c->hardirq_start_ns = 0;
	h = bpf_map_lookup_elem(&hardirqs, &zero);
	if (!h)
		return;
	h->count++;
	h->time_ns += dur;
	if (c->softirq_start_ns) {
		c->softirq_hardirq_ns += dur;
		h->in_softirq_ns += dur;
	}
}

SEC("tp_btf/irq_handler_entry")
int BPF_PROG(irq_handler_entry, int irq, struct irqaction *action)
{
	hardirq_enter();
	return 0;
}

SEC("tp_btf/irq_handler_exit")
int BPF_PROG(irq_handler_exit, int irq, struct irqaction *action, int ret)
{
	hardirq_exit();
	return 0;
}

/* x86 system vectors do not go through irq_handler_entry. */
SEC("tp_btf/local_timer_entry")
int BPF_PROG(local_timer_entry, int vector)
{
	hardirq_enter();
	return 0;
}

SEC("tp_btf/local_timer_exit")
int BPF_PROG(local_timer_exit, int vector)
{
	hardirq_exit();
	return 0;
}

SEC("tp_btf/reschedule_entry")
int BPF_PROG(reschedule_entry, int vector)
{
	hardirq_enter();
	return 0;
}

SEC("tp_btf/reschedule_exit")
int BPF_PROG(reschedule_exit, int vector)
{
	hardirq_exit();
	return 0;
}

SEC("tp_btf/call_function_entry")
int BPF_PROG(call_function_entry, int vector)
{
	hardirq_enter();
	return 0;
}

SEC("tp_btf/call_function_exit")
int BPF_PROG(call_function_exit, int vector)
{
	hardirq_exit();
	return 0;
}

SEC("tp_btf/call_function_single_entry")
int BPF_PROG(call_function_single_entry, int vector)
{
	hardirq_enter();
	return 0;
}

SEC("tp_btf/call_function_single_exit")
int BPF_PROG(call_function_single_exit, int vector)
{
	hardirq_exit();
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
