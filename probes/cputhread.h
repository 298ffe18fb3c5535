// SPDX-License-Identifier: GPL-2.0-only
/* cputhread: the types both sides of the probe share. */
#ifndef QPROF_CPUTHREAD_H
#define QPROF_CPUTHREAD_H

#include "probe_common.h"

#define QP_COMM_LEN 16
#define QP_MAX_THREADS 8192
/* HI, TIMER, NET_TX, NET_RX, BLOCK, IRQ_POLL, TASKLET, SCHED, HRTIMER, RCU */
#define QP_NR_SOFTIRQS 10

/*
 * One thread of a target process, in the slot it took at its first event.
 * Kept after the thread exits, so the totals stay cumulative since attach;
 * a new thread that reuses the tid takes a slot of its own.
 *
 * The kernel makes seq odd while it changes the entry; user space takes
 * an entry only between two equal, even reads of seq (see read_thread).
 */
struct thread_cpu {
	__u64 seq;
	__u64 oncpu_ns;	       /* finished slices */
	__u64 since_ns;	       /* on-CPU since (CLOCK_MONOTONIC); 0 when off-CPU */
	__u64 switches;	       /* switched out */
	__u64 involuntary;     /* ...preempted, or still runnable */
	__u64 woken_ns;	       /* last wakeup not yet followed by a switch-in, or 0 */
	__u64 wakeups;	       /* switch-ins that followed a wakeup */
	__u64 runq_ns;	       /* ...summed from the wakeup to the switch-in */
	__u64 sum_exec_ns;     /* the kernel's se.sum_exec_runtime at the last switch-out */
	__u64 untraced_slices; /* slices whose switch-in raised no event... */
	__u64 untraced_ns;     /* ...timed by sum_exec_runtime instead (in oncpu_ns) */
	__u32 tgid;
	__u32 exited; /* seen in sched_process_exit */
	__u32 tid;    /* 0 until the slot's entry is made */
	__u32 cpu;    /* where its current slice runs (with since_ns) */
	char comm[QP_COMM_LEN];
};

/* Per CPU, indexed by vector; user space sums the CPUs. */
struct softirq_stats {
	__u64 count;
	__u64 time_ns;	    /* with --hardirqs, those that interrupted it taken out */
	__u64 ksoftirqd_ns; /* ...of which in ksoftirqd */
};

/* Per CPU: device IRQ handlers, the local APIC timer, scheduler and
 * function-call IPIs. */
struct hardirq_stats {
	__u64 count;
	__u64 time_ns;
	__u64 in_softirq_ns; /* ...of which interrupted a softirq */
};

#endif
