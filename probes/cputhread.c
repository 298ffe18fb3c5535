// SPDX-License-Identifier: GPL-2.0-only
// qprof-cputhread: on-CPU time of every thread of given processes, and
// with --softirqs softirq time by vector (with the part served in those
// processes' context), exact to the nanosecond where /proc/stat counts ticks.
#define _GNU_SOURCE
#include <argp.h>
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "cputhread.h"
#include "cputhread.skel.h"

static const char *const vec_names[QP_NR_SOFTIRQS] = {
	"HI",	    "TIMER",   "NET_TX", "NET_RX",  "BLOCK",
	"IRQ_POLL", "TASKLET", "SCHED",	 "HRTIMER", "RCU",
};

#define EXIT_FAIL 1	  /* BPF open/load/attach, or the system refused */
#define EXIT_NO_PROCESS 2 /* a -p names no process */

static struct probe_env env;
static bool softirqs; /* --softirqs, or --hardirqs */
static bool hardirqs; /* --hardirqs */

const char *argp_program_version = "qprof-cputhread 0.1";
static const char argp_doc[] =
	"On-CPU time of every thread of given processes, and softirq time by vector.\n"
	"\n"
	"Threads: on-CPU ns from sched_switch, the running slice included up to the\n"
	"snapshot. All totals are cumulative since attach.\n"
	"\n"
	"With --softirqs, also softirqs: system-wide time per vector, the part served\n"
	"while a thread of a given process was current (IN-TARGET) and in ksoftirqd.\n"
	"That attaches softirq_entry and softirq_exit, two programs and two clock\n"
	"reads per softirq (~200k a second in a TCP transfer over veth); without\n"
	"it they are not attached and the softirq figures are null.\n"
	"\n"
	"With --hardirqs (which implies --softirqs), also hardirq time (device\n"
	"handlers, the local timer, scheduler and function-call IPIs), and softirq\n"
	"times less the hardirqs that interrupted them; without, softirq times\n"
	"include those. Timing every hardirq sits in the path of every timer and\n"
	"cross-CPU wake-up: it cost ~5% of TCP throughput over veth on a 2-CPU VM.\n"
	"\n"
	"USAGE: qprof-cputhread -p PID[,PID...] [--softirqs] [--hardirqs] [--json]\n"
	"                       [--control | INTERVAL [COUNT]]\n"
	"\v"
	"EXAMPLES:\n"
	"    qprof-cputhread -p 1234            # print totals every second\n"
	"    qprof-cputhread -p 1234,1240 5 2   # every 5 s, twice\n"
	"    qprof-cputhread -p 1234 --json     # one JSON line per interval\n"
	"    qprof-cputhread -p 1234 --softirqs # softirq time by vector too\n"
	"    qprof-cputhread -p 1234 --control  # JSON on 'mark NAME' lines on stdin\n";

static const struct argp_option opts[] = {
	{"pid", 'p', "PID[,PID...]", 0, "Processes to follow (all their threads)", 0},
	{"softirqs", 's', NULL, 0, "Also time softirqs by vector (two programs a softirq)", 0},
	{"hardirqs", 'H', NULL, 0, "Also time hardirqs, out of softirq time (implies -s)", 0},
	{},
};

/* The tgid /proc gives for pid, 0 if there is no such task. */
static pid_t proc_tgid(pid_t pid)
{
	char path[64], line[128];
	pid_t tgid = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	f = fopen(path, "r");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Tgid: %d", &tgid) == 1)
			break;
	fclose(f);
	return tgid;
}

static error_t parse_arg(int key, char *arg, struct argp_state *state)
{
	switch (key) {
	case 'p':
		if (probe_parse_pids(&env, arg))
			argp_failure(state, argp_err_exit_status, 0,
				     "invalid PID list '%s': give process ids, comma-separated",
				     arg);
		break;
	case 's': softirqs = true; break;
	/* Nested hardirq time is taken out of the softirq it interrupted. */
	case 'H': hardirqs = softirqs = true; break;
	case ARGP_KEY_INIT: state->child_inputs[0] = &env; break;
	case ARGP_KEY_END:
		if (!env.npids)
			argp_failure(state, argp_err_exit_status, 0, "-p PID is required");
		break;
	default: return ARGP_ERR_UNKNOWN;
	}
	return 0;
}

/* Filtering is by tgid: a gone pid or a thread's id would match nothing. */
static int check_pids(void)
{
	pid_t tgid;
	int i;

	for (i = 0; i < env.npids; i++) {
		tgid = proc_tgid(env.pids[i]);
		if (!tgid) {
			fprintf(stderr, "qprof-cputhread: no process %d; see 'ps -e'\n",
				env.pids[i]);
			return EXIT_NO_PROCESS;
		}
		if (tgid != env.pids[i]) {
			fprintf(stderr,
				"qprof-cputhread: %d is a thread of process %d; give the process id\n",
				env.pids[i], tgid);
			return EXIT_NO_PROCESS;
		}
	}
	return 0;
}

/*
 * Running once on every CPU switches out whatever ran there. After attach
 * that closes the slices already running (counted from attach_ns); before
 * a snapshot it closes any slice whose switch-in raised no event (see
 * sched_switch), which would otherwise be missing from a busy thread's
 * total for as long as it stays on-CPU. Costs each CPU two switches.
 */
static int touch_every_cpu(void)
{
	cpu_set_t orig, one;
	int cpu, err = 0;

	if (sched_getaffinity(0, sizeof(orig), &orig))
		return -errno;
	for (cpu = 0; cpu < CPU_SETSIZE; cpu++) {
		if (!CPU_ISSET(cpu, &orig))
			continue;
		CPU_ZERO(&one);
		CPU_SET(cpu, &one);
		if (sched_setaffinity(0, sizeof(one), &one)) {
			err = -errno;
			break;
		}
	}
	if (sched_setaffinity(0, sizeof(orig), &orig) && !err)
		err = -errno;
	return err;
}

/*
 * One consistent copy of a thread's entry: b is taken only if a and c,
 * read before and after it, show the same even seq (no update overlapped
 * b). Returns 0, or -1 if the slot holds no thread yet.
 */
static int read_thread(int fd, __u32 slot, struct thread_cpu *out)
{
	struct thread_cpu a, c;
	int tries;

	for (tries = 0; tries < 100; tries++) {
		if (bpf_map_lookup_elem(fd, &slot, &a) || bpf_map_lookup_elem(fd, &slot, out) ||
		    bpf_map_lookup_elem(fd, &slot, &c))
			return -1;
		if (!(a.seq & 1) && a.seq == c.seq)
			break;
	}
	/* a thread switching this often is off by at most a slice */
	return out->tid && out->tgid ? 0 : -1;
}

/* True if b, read between a and c, saw no update in progress. */
static bool consistent(const struct thread_cpu *a, const struct thread_cpu *c)
{
	return !(a->seq & 1) && a->seq == c->seq;
}

struct thread_row {
	__u32 slot;
	struct thread_cpu t;
	__u64 oncpu_ns; /* with the running slice */
	__u64 *cpu_ns;	/* the same by CPU: ncpu entries in the rows' cpu block */
};

/* read_threads' answer: n rows, and the block their cpu_ns point into. */
struct thread_rows {
	struct thread_row *rows;
	__u64 *cpu_block;
	int n;
	int ncpu;
};

static void free_threads(struct thread_rows *r)
{
	free(r->rows);
	free(r->cpu_block);
}

/* By tgid and tid, and a reused tid's slots oldest first. */
static int cmp_rows(const void *pa, const void *pb)
{
	const struct thread_row *a = pa, *b = pb;

	if (a->t.tgid != b->t.tgid)
		return a->t.tgid < b->t.tgid ? -1 : 1;
	if (a->t.tid != b->t.tid)
		return a->t.tid < b->t.tid ? -1 : 1;
	return a->slot < b->slot ? -1 : a->slot > b->slot;
}

/* A later thread with the same tid: its totals added, its name and state kept. */
static void merge_row(struct thread_row *to, const struct thread_row *r, int ncpu)
{
	int cpu;

	for (cpu = 0; cpu < ncpu; cpu++)
		to->cpu_ns[cpu] += r->cpu_ns[cpu];
	to->oncpu_ns += r->oncpu_ns;
	to->t.switches += r->t.switches;
	to->t.involuntary += r->t.involuntary;
	to->t.wakeups += r->t.wakeups;
	to->t.runq_ns += r->t.runq_ns;
	to->t.untraced_slices += r->t.untraced_slices;
	to->t.untraced_ns += r->t.untraced_ns;
	to->t.exited = r->t.exited;
	memcpy(to->t.comm, r->t.comm, sizeof(to->t.comm));
}

/*
 * Every thread seen, sorted by tgid and tid, into *out (free_threads); 0
 * or -errno, having said why. A thread on-CPU now has since_ns set (the
 * snapshot's touch_every_cpu just switched it out and in, both seen) and
 * its slice counts up to the read, on the CPU it runs on. The exception:
 * one switched back in straight from a task whose switches raise no
 * event, between that visit and the read; its slice from then on is
 * counted at its next switch-out. A tid the kernel reused for a new
 * thread got a slot of its own; its rows are merged into one, as the tid
 * always was. The time by CPU is read after the entries, so a slice that
 * ends between the two reads can count on its CPU twice, at most a
 * slice's worth.
 */
static int read_threads(struct cputhread_bpf *skel, struct thread_rows *out)
{
	int fd = bpf_map__fd(skel->maps.threads), ncpu = libbpf_num_possible_cpus(), m = 0, i;
	__u32 slot, nslots = skel->bss->nr_slots;
	struct thread_cpu *a, *b, *c;
	struct thread_row *rows;
	__u64 *cpu_block;
	int err;
	__u64 now;

	memset(out, 0, sizeof(*out));
	if (ncpu < 0) {
		fprintf(stderr, "qprof-cputhread: counting the CPUs failed: %s\n", strerror(-ncpu));
		return ncpu;
	}
	if (nslots > QP_MAX_THREADS)
		nslots = QP_MAX_THREADS;
	rows = calloc(nslots + 1, sizeof(*rows));
	a = calloc(3 * ((size_t)nslots + 1), sizeof(*a));
	cpu_block = calloc(((size_t)nslots + 1) * ncpu, sizeof(*cpu_block));
	if (!rows || !a || !cpu_block) {
		free(rows);
		free(a);
		free(cpu_block);
		fprintf(stderr, "qprof-cputhread: out of memory\n");
		return -ENOMEM;
	}
	b = a + nslots + 1;
	c = b + nslots + 1;
	/*
	 * The whole array three times, each in one call, so every thread is read
	 * at one instant; a slot whose entry changed under the middle read is
	 * read again on its own.
	 */
	err = probe_read_array(fd, nslots, a, sizeof(*a));
	if (!err)
		err = probe_read_array(fd, nslots, b, sizeof(*b));
	now = probe_now_ns();
	if (!err)
		err = probe_read_array(fd, nslots, c, sizeof(*c));
	if (!err)
		err = probe_read_array(bpf_map__fd(skel->maps.thread_cpu_ns), nslots, cpu_block,
				       ncpu * sizeof(*cpu_block));
	if (err) {
		fprintf(stderr, "qprof-cputhread: reading the threads failed: %s\n",
			strerror(-err));
		free(rows);
		free(a);
		free(cpu_block);
		return err;
	}
	for (slot = 0; slot < nslots; slot++) {
		struct thread_row *r = &rows[m];
		__u64 read_ns = now;

		r->t = b[slot];
		if (!consistent(&a[slot], &c[slot])) {
			if (read_thread(fd, slot, &r->t))
				continue;
			read_ns = probe_now_ns();
		}
		if (!r->t.tid || !r->t.tgid)
			continue;
		r->slot = slot;
		r->cpu_ns = cpu_block + (size_t)slot * ncpu;
		r->oncpu_ns = r->t.oncpu_ns;
		if (r->t.since_ns && read_ns > r->t.since_ns) {
			r->oncpu_ns += read_ns - r->t.since_ns;
			if (r->t.cpu < (__u32)ncpu)
				r->cpu_ns[r->t.cpu] += read_ns - r->t.since_ns;
		}
		m++;
	}
	free(a);
	qsort(rows, m, sizeof(*rows), cmp_rows);
	for (i = 0; i < m; i++) {
		if (out->n && rows[out->n - 1].t.tgid == rows[i].t.tgid &&
		    rows[out->n - 1].t.tid == rows[i].t.tid)
			merge_row(&rows[out->n - 1], &rows[i], ncpu);
		else
			rows[out->n++] = rows[i];
	}
	out->rows = rows;
	out->cpu_block = cpu_block;
	out->ncpu = ncpu;
	return 0;
}

struct irq_totals {
	struct softirq_stats vec[QP_NR_SOFTIRQS];
	__u64 in_target_ns[PROBE_MAX_PIDS][QP_NR_SOFTIRQS]; /* by env.pids index */
	struct hardirq_stats hard;
};

/*
 * A softirq running elsewhere now is counted at its exit: at most one per
 * CPU, NET_RX's bounded by net.core.netdev_budget_usecs (2 ms). Each map
 * in one call; 0 or -errno, having said why.
 */
static int read_irqs(struct cputhread_bpf *skel, struct irq_totals *tot)
{
	int ncpu = libbpf_num_possible_cpus(), i, cpu, err;
	struct softirq_stats *s = NULL;
	struct hardirq_stats *h = NULL;
	__u64 *ns = NULL;
	__u32 vec, n_in_target = (__u32)env.npids * QP_NR_SOFTIRQS;

	memset(tot, 0, sizeof(*tot));
	err = ncpu < 0 ? ncpu : 0;
	if (!err) {
		s = calloc((size_t)ncpu * QP_NR_SOFTIRQS, sizeof(*s));
		ns = calloc((size_t)ncpu * (n_in_target + 1), sizeof(*ns));
		h = calloc(ncpu, sizeof(*h));
		err = !s || !ns || !h ? -ENOMEM : 0;
	}
	if (!err)
		err = probe_read_array(bpf_map__fd(skel->maps.softirqs), QP_NR_SOFTIRQS, s,
				       ncpu * sizeof(*s));
	/* Softirq time served while a thread of env.pids[i] was the current task. */
	if (!err)
		err = probe_read_array(bpf_map__fd(skel->maps.softirq_in_target), n_in_target, ns,
				       ncpu * sizeof(*ns));
	if (!err)
		err = probe_read_array(bpf_map__fd(skel->maps.hardirqs), 1, h, ncpu * sizeof(*h));
	if (err) {
		fprintf(stderr, "qprof-cputhread: reading the interrupt counters failed: %s\n",
			strerror(-err));
		goto out;
	}
	for (vec = 0; vec < QP_NR_SOFTIRQS; vec++)
		for (cpu = 0; cpu < ncpu; cpu++) {
			const struct softirq_stats *v = &s[vec * ncpu + cpu];

			tot->vec[vec].count += v->count;
			tot->vec[vec].time_ns += v->time_ns;
			tot->vec[vec].ksoftirqd_ns += v->ksoftirqd_ns;
		}
	for (i = 0; i < env.npids; i++)
		for (vec = 0; vec < QP_NR_SOFTIRQS; vec++)
			for (cpu = 0; cpu < ncpu; cpu++)
				tot->in_target_ns[i][vec] +=
					ns[((size_t)i * QP_NR_SOFTIRQS + vec) * ncpu + cpu];
	for (cpu = 0; cpu < ncpu; cpu++) {
		tot->hard.count += h[cpu].count;
		tot->hard.time_ns += h[cpu].time_ns;
		tot->hard.in_softirq_ns += h[cpu].in_softirq_ns;
	}
out:
	free(s);
	free(ns);
	free(h);
	return err;
}

static void print_json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			printf("\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			printf("\\u%04x", *s);
		else
			putchar(*s);
	}
	putchar('"');
}

/* "[...vectors...]" and the hardirq members after it (null when not timed). */
static void print_json_irqs(const struct irq_totals *tot)
{
	int i, vec;

	putchar('[');
	for (vec = 0; vec < QP_NR_SOFTIRQS; vec++) {
		printf("%s{\"vec\":\"%s\",\"count\":%llu,\"time_ns\":%llu,\"in_target_ns\":{",
		       vec ? "," : "", vec_names[vec], tot->vec[vec].count, tot->vec[vec].time_ns);
		for (i = 0; i < env.npids; i++)
			printf("%s\"%d\":%llu", i ? "," : "", env.pids[i],
			       tot->in_target_ns[i][vec]);
		printf("},\"in_ksoftirqd_ns\":%llu}", tot->vec[vec].ksoftirqd_ns);
	}
	if (hardirqs)
		printf("],\"softirq_includes_hardirqs\":false,\"hardirq_count\":%llu,\"hardirq_ns\":%llu,"
		       "\"hardirq_in_softirq_ns\":%llu",
		       tot->hard.count, tot->hard.time_ns, tot->hard.in_softirq_ns);
	else
		printf("],\"softirq_includes_hardirqs\":true,\"hardirq_count\":null,\"hardirq_ns\":null,"
		       "\"hardirq_in_softirq_ns\":null");
}

static int print_json(const char *name, struct cputhread_bpf *skel)
{
	__u64 t_ns = probe_now_ns();
	struct thread_rows tr;
	struct thread_row *rows;
	struct irq_totals tot;
	int n, i, cpu;
	bool first;

	if (read_threads(skel, &tr))
		return -EIO;
	rows = tr.rows;
	n = tr.n;
	if (softirqs && read_irqs(skel, &tot)) {
		free_threads(&tr);
		return -EIO;
	}
	printf("{\"event\":\"mark\",\"name\":");
	print_json_str(name);
	printf(",\"t_ns\":%llu,\"read_ns\":%llu,\"attach_ns\":%llu,\"threads\":[", t_ns,
	       probe_now_ns() - t_ns, skel->bss->attach_ns);
	for (i = 0; i < n; i++) {
		printf("%s{\"tgid\":%u,\"tid\":%u,\"comm\":", i ? "," : "", rows[i].t.tgid,
		       rows[i].t.tid);
		print_json_str(rows[i].t.comm);
		printf(",\"oncpu_ns\":%llu,\"switches\":%llu,\"involuntary\":%llu,\"wakeups\":%llu,"
		       "\"runq_ns\":%llu,\"untraced_slices\":%llu,\"untraced_ns\":%llu,\"exited\":%s",
		       rows[i].oncpu_ns, rows[i].t.switches, rows[i].t.involuntary,
		       rows[i].t.wakeups, rows[i].t.runq_ns, rows[i].t.untraced_slices,
		       rows[i].t.untraced_ns, rows[i].t.exited ? "true" : "false");
		/* Where it ran: the CPUs it had time on, by number. */
		printf(",\"oncpu_ns_by_cpu\":{");
		for (cpu = 0, first = true; cpu < tr.ncpu; cpu++) {
			if (!rows[i].cpu_ns[cpu])
				continue;
			printf("%s\"%d\":%llu", first ? "" : ",", cpu, rows[i].cpu_ns[cpu]);
			first = false;
		}
		printf("}}");
	}
	printf("],\"threads_lost\":%llu,\"softirq\":", skel->bss->lost_threads);
	/* Not timed is absent, not zero. */
	if (softirqs)
		print_json_irqs(&tot);
	else
		printf("null,\"softirq_includes_hardirqs\":null,\"hardirq_count\":null,"
		       "\"hardirq_ns\":null,\"hardirq_in_softirq_ns\":null");
	probe_json_progs(stdout, skel->obj);
	printf("}\n");
	free_threads(&tr);
	return 0;
}

static void print_table_irqs(const struct irq_totals *tot)
{
	__u64 in_target;
	int i, vec;

	printf("\n%-9s %10s %12s %15s %15s\n", "VECTOR", "COUNT", "TIME (ms)", "IN-TARGET (ms)",
	       "KSOFTIRQD (ms)");
	for (vec = 0; vec < QP_NR_SOFTIRQS; vec++) {
		for (in_target = 0, i = 0; i < env.npids; i++)
			in_target += tot->in_target_ns[i][vec];
		printf("%-9s %10llu %12.1f %15.1f %15.1f\n", vec_names[vec], tot->vec[vec].count,
		       tot->vec[vec].time_ns / 1e6, in_target / 1e6,
		       tot->vec[vec].ksoftirqd_ns / 1e6);
	}
	if (hardirqs)
		printf("%-9s %10llu %12.1f\n", "HARDIRQ", tot->hard.count, tot->hard.time_ns / 1e6);
}

static int print_table(struct cputhread_bpf *skel)
{
	struct thread_rows tr;
	struct thread_row *rows;
	struct irq_totals tot;
	int n, i;

	if (read_threads(skel, &tr))
		return -EIO;
	rows = tr.rows;
	n = tr.n;
	if (softirqs && read_irqs(skel, &tot)) {
		free_threads(&tr);
		return -EIO;
	}
	printf("%-8s %-8s %-16s %12s %10s %10s\n", "PID", "TID", "COMM", "ON-CPU (ms)", "SWITCHES",
	       "INVOL");
	for (i = 0; i < n; i++)
		printf("%-8u %-8u %-16s %12.1f %10llu %10llu\n", rows[i].t.tgid, rows[i].t.tid,
		       rows[i].t.comm, rows[i].oncpu_ns / 1e6, rows[i].t.switches,
		       rows[i].t.involuntary);
	if (softirqs)
		print_table_irqs(&tot);
	printf("\n");
	free_threads(&tr);
	return 0;
}

static int snapshot(const char *name, void *arg)
{
	int err = touch_every_cpu();

	if (err)
		fprintf(stderr, "failed to run on every CPU, a running slice may be missing: %s\n",
			strerror(-err));
	return env.json ? print_json(name, arg) : print_table(arg);
}

int main(int argc, char **argv)
{
	static const struct argp_child children[] = {{&probe_common_argp, 0, NULL, 0}, {}};
	static const struct argp argp = {
		.options = opts, .parser = parse_arg, .doc = argp_doc, .children = children};
	struct cputhread_bpf *skel;
	int err, i;

	err = argp_parse(&argp, argc, argv, 0, NULL, NULL);
	if (err)
		return err;
	err = check_pids();
	if (err)
		return err;
	if (!env.interval_s)
		env.interval_s = 1;
	probe_setup_libbpf(env.verbose);

	skel = cputhread_bpf__open();
	if (!skel) {
		fprintf(stderr, "failed to open BPF object: %s\n", strerror(errno));
		return EXIT_FAIL;
	}
	probe_set_targets(&env, skel->rodata->targ_tgids, &skel->rodata->targ_ntgids);
	/* Untimed, the softirq programs are not even attached: that is the saving. */
	if (!softirqs) {
		bpf_program__set_autoload(skel->progs.softirq_entry, false);
		bpf_program__set_autoload(skel->progs.softirq_exit, false);
	}
	env.ready_info = softirqs ? "\"softirq_time\":true" : "\"softirq_time\":false";
	if (!hardirqs) {
		struct bpf_program *progs[] = {
			skel->progs.irq_handler_entry,
			skel->progs.irq_handler_exit,
			skel->progs.local_timer_entry,
			skel->progs.local_timer_exit,
			skel->progs.reschedule_entry,
			skel->progs.reschedule_exit,
			skel->progs.call_function_entry,
			skel->progs.call_function_exit,
			skel->progs.call_function_single_entry,
			skel->progs.call_function_single_exit,
		};

		for (i = 0; i < (int)(sizeof(progs) / sizeof(progs[0])); i++)
			bpf_program__set_autoload(progs[i], false);
	}
	err = cputhread_bpf__load(skel);
	if (err) {
		fprintf(stderr, "failed to load BPF object: %s\n", strerror(-err));
		goto cleanup;
	}
	skel->bss->attach_ns = probe_now_ns();
	err = cputhread_bpf__attach(skel);
	if (err) {
		fprintf(stderr, "failed to attach BPF programs: %s\n", strerror(-err));
		goto cleanup;
	}
	err = touch_every_cpu();
	if (err) {
		fprintf(stderr, "failed to run on every CPU: %s\n", strerror(-err));
		goto cleanup;
	}
	err = probe_main_loop(&env, snapshot, skel);

cleanup:
	cputhread_bpf__destroy(skel);
	return err != 0 ? EXIT_FAIL : 0;
}
