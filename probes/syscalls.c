// SPDX-License-Identifier: GPL-2.0-only
// qprof-syscalls: network and waiting syscalls of given processes, per
// thread: calls, errors, bytes, mmsg messages; with --time, time inside;
// with --datagrams, the UDP datagrams each receive call took.
#define _GNU_SOURCE
#include <argp.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "syscalls.h"
#include "syscalls.skel.h"

static const char *const sys_names[QP_NSYS] = {
	"sendmsg",    "sendmmsg",    "recvmsg",	     "recvmmsg",       "sendto",   "recvfrom",
	"write",      "writev",	     "read",	     "readv",	       "sendfile", "splice",
	"epoll_wait", "epoll_pwait", "epoll_pwait2", "io_uring_enter", "futex",
};

static struct probe_env env;
static bool warned_lost;
static bool time_calls; /* --time */
static bool datagrams;	/* --datagrams */
static char ready_info[64];

const char *argp_program_version = "qprof-syscalls 0.1";
static const char argp_doc[] =
	"Count the network and waiting syscalls of given processes, per thread.\n"
	"\n"
	"With --time, also the time inside each call (sum and log2 histogram):\n"
	"that needs a program at sys_enter and two clock reads a call; without\n"
	"it the time is null and only sys_exit is attached.\n"
	"\n"
	"With --datagrams, also the UDP datagrams each receive call took from its\n"
	"socket, a GRO'd message's segments counted from its UDP_GRO control\n"
	"message: that reads every received message's control data; without it\n"
	"the count is null.\n"
	"\n"
	"USAGE: qprof-syscalls -p PID[,PID...] [--time] [--datagrams] [--json] [--control | INTERVAL [COUNT]]\n"
	"\n"
	"EXAMPLES:\n"
	"    qprof-syscalls -p 1234           # print totals every second\n"
	"    qprof-syscalls -p 1234,1240 5 2  # every 5 s, twice\n"
	"    qprof-syscalls -p 1234 --json    # one JSON line per interval\n"
	"    qprof-syscalls -p 1234 --control # JSON on 'mark NAME' lines on stdin\n";

static const struct argp_option opts[] = {
	{"pid", 'p', "PID[,PID...]", 0, "Processes to follow (all their threads)", 0},
	{"time", 't', NULL, 0, "Also time each call (sys_enter and two clock reads a call)", 0},
	{"datagrams", 'g', NULL, 0, "Also count the UDP datagrams each receive call took", 0},
	{},
};

static error_t parse_arg(int key, char *arg, struct argp_state *state)
{
	switch (key) {
	case 'p':
		if (probe_parse_pids(&env, arg)) {
			fprintf(stderr, "invalid PID list: %s\n", arg);
			argp_usage(state);
		}
		break;
	case 't': time_calls = true; break;
	case 'g': datagrams = true; break;
	case ARGP_KEY_INIT: state->child_inputs[0] = &env; break;
	case ARGP_KEY_END:
		if (!env.npids) {
			fprintf(stderr, "-p PID is required\n");
			argp_usage(state);
		}
		break;
	default: return ARGP_ERR_UNKNOWN;
	}
	return 0;
}

static void read_comm(__u32 tgid, __u32 tid, char *buf, size_t len)
{
	char path[64];
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%u/task/%u/comm", tgid, tid);
	buf[0] = 0;
	f = fopen(path, "r");
	if (!f)
		return;
	if (fgets(buf, (int)len, f))
		buf[strcspn(buf, "\n")] = 0;
	fclose(f);
}

struct row {
	struct sys_key key;
	struct sys_stats s;
};

static int cmp_rows(const void *a, const void *b)
{
	const struct sys_key *x = &((const struct row *)a)->key, *y = &((const struct row *)b)->key;

	if (x->tgid != y->tgid)
		return x->tgid < y->tgid ? -1 : 1;
	if (x->tid != y->tid)
		return x->tid < y->tid ? -1 : 1;
	return x->sys < y->sys ? -1 : x->sys > y->sys;
}

static void add_stats(struct sys_stats *to, const struct sys_stats *s)
{
	int i;

	to->calls += s->calls;
	to->errors += s->errors;
	to->eagain += s->eagain;
	to->bytes += s->bytes;
	to->msgs_requested += s->msgs_requested;
	to->msgs_returned += s->msgs_returned;
	to->mmsg_truncated += s->mmsg_truncated;
	to->datagrams += s->datagrams;
	if (s->datagrams_most > to->datagrams_most)
		to->datagrams_most = s->datagrams_most;
	to->time_ns += s->time_ns;
	for (i = 0; i < PROBE_HIST_SLOTS; i++)
		to->time_hist_ns[i] += s->time_hist_ns[i];
}

/*
 * One row per thread and syscall that was called, in tgid, tid, syscall
 * order, into *out (caller frees). A tid the kernel reused for a new
 * thread got a slot of its own; its rows are merged, as one key they
 * always were. Returns 0 or -errno, having said why.
 */
static int read_rows(struct syscalls_bpf *skel, struct row **out, int *n)
{
	int tfd = bpf_map__fd(skel->maps.threads), sfd = bpf_map__fd(skel->maps.stats), m = 0, err;
	__u32 slot, nslots = skel->bss->nr_slots, sys, k;
	struct sys_thread *threads;
	struct sys_stats *stats;
	struct row *rows;

	if (nslots > QP_MAX_THREADS)
		nslots = QP_MAX_THREADS;
	threads = calloc(nslots + 1, sizeof(*threads));
	stats = calloc((size_t)(nslots + 1) * QP_NSYS, sizeof(*stats));
	rows = calloc((size_t)(nslots + 1) * QP_NSYS, sizeof(*rows));
	err = !threads || !stats || !rows ? -ENOMEM : 0;
	/* Counters first: a slot's owner is written before it counts anything. */
	if (!err)
		err = probe_read_array(sfd, nslots * QP_NSYS, stats, sizeof(*stats));
	if (!err)
		err = probe_read_array(tfd, nslots, threads, sizeof(*threads));
	if (err) {
		fprintf(stderr, "qprof-syscalls: reading the counters failed: %s\n",
			strerror(-err));
		free(rows);
		goto out;
	}
	for (slot = 0; slot < nslots; slot++) {
		if (!threads[slot].tid)
			continue;
		for (sys = 0; sys < QP_NSYS; sys++) {
			k = slot * QP_NSYS + sys;
			if (!stats[k].calls)
				continue;
			rows[m].key = (struct sys_key){
				.tgid = threads[slot].tgid, .tid = threads[slot].tid, .sys = sys};
			rows[m].s = stats[k];
			m++;
		}
	}
	qsort(rows, m, sizeof(*rows), cmp_rows);
	*n = 0;
	for (k = 0; k < (__u32)m; k++) {
		if (*n && !cmp_rows(&rows[*n - 1], &rows[k]))
			add_stats(&rows[*n - 1].s, &rows[k].s);
		else
			rows[(*n)++] = rows[k];
	}
	if (skel->bss->lost_threads && !warned_lost) {
		fprintf(stderr, "qprof-syscalls: %llu threads beyond the first %d not followed\n",
			(unsigned long long)skel->bss->lost_threads, QP_MAX_THREADS);
		warned_lost = true;
	}
	*out = rows;
out:
	free(threads);
	free(stats);
	return err;
}

/*
 * t_ns is when the read began and read_ns how long it took: the counters
 * are as they stood in between.
 */
static int print_json(const char *name, struct syscalls_bpf *skel)
{
	__u64 t_ns = probe_now_ns(), read_ns;
	struct row *rows;
	int n = 0, i, err;

	err = read_rows(skel, &rows, &n);
	if (err)
		return err;
	read_ns = probe_now_ns() - t_ns;
	printf("{\"event\":\"mark\",\"name\":\"%s\",\"t_ns\":%llu,\"read_ns\":%llu,\"threads\":[",
	       name, t_ns, read_ns);
	for (i = 0; i < n; i++) {
		const struct sys_key *key = &rows[i].key;
		const struct sys_stats *s = &rows[i].s;
		char comm[32];

		read_comm(key->tgid, key->tid, comm, sizeof(comm));
		printf("%s{\"tgid\":%u,\"tid\":%u,\"comm\":\"%s\",\"sys\":\"%s\",\"calls\":%llu,"
		       "\"errors\":%llu,\"eagain\":%llu,\"bytes\":%llu,\"msgs_requested\":%llu,"
		       "\"msgs_returned\":%llu,\"mmsg_truncated\":%llu,",
		       i ? "," : "", key->tgid, key->tid, comm, sys_names[key->sys], s->calls,
		       s->errors, s->eagain, s->bytes, s->msgs_requested, s->msgs_returned,
		       s->mmsg_truncated);
		/* Not counted or not timed: null, never a zero. */
		if (datagrams)
			printf("\"datagrams\":%llu,\"datagrams_most\":%llu,", s->datagrams,
			       s->datagrams_most);
		else
			printf("\"datagrams\":null,\"datagrams_most\":null,");
		if (time_calls) {
			printf("\"time_ns\":%llu,", s->time_ns);
			probe_json_hist(stdout, "time_hist_ns", s->time_hist_ns);
		} else {
			printf("\"time_ns\":null,\"time_hist_ns\":null");
		}
		putchar('}');
	}
	putchar(']');
	probe_json_progs(stdout, skel->obj);
	printf("}\n");
	free(rows);
	return 0;
}

static int print_table(struct syscalls_bpf *skel)
{
	struct sys_stats tot[PROBE_MAX_PIDS][QP_NSYS];
	__u32 tgids[PROBE_MAX_PIDS];
	int ntgid = 0, n = 0, i, j, r, err;
	struct row *rows;

	memset(tot, 0, sizeof(tot));
	err = read_rows(skel, &rows, &n);
	if (err)
		return err;
	for (r = 0; r < n; r++) {
		const struct sys_key *key = &rows[r].key;

		for (i = 0; i < ntgid && tgids[i] != key->tgid; i++)
			;
		if (i == ntgid) {
			if (ntgid == PROBE_MAX_PIDS)
				continue;
			tgids[ntgid++] = key->tgid;
		}
		add_stats(&tot[i][key->sys], &rows[r].s);
	}
	free(rows);
	printf("%-8s %-15s %12s %10s %14s %10s %14s\n", "PID", "SYSCALL", "CALLS", "ERRORS",
	       "BYTES", "MSGS", "TIME (us)");
	for (i = 0; i < ntgid; i++)
		for (j = 0; j < QP_NSYS; j++) {
			if (!tot[i][j].calls)
				continue;
			printf("%-8u %-15s %12llu %10llu %14llu %10llu ", tgids[i], sys_names[j],
			       tot[i][j].calls, tot[i][j].errors, tot[i][j].bytes,
			       tot[i][j].msgs_returned);
			if (time_calls)
				printf("%14.1f\n", tot[i][j].time_ns / 1e3);
			else
				printf("%14s\n", "-");
		}
	printf("\n");
	return 0;
}

static int snapshot(const char *name, void *arg)
{
	return env.json ? print_json(name, arg) : print_table(arg);
}

/* The object with the programs the flags ask for, loaded; 0 or -errno, said. */
static int open_and_load(struct syscalls_bpf **out)
{
	struct syscalls_bpf *skel;
	int err;

	*out = NULL;
	skel = syscalls_bpf__open();
	if (!skel) {
		fprintf(stderr, "failed to open BPF object: %s\n", strerror(errno));
		return -errno;
	}
	probe_set_targets(&env, skel->rodata->targ_tgids, &skel->rodata->targ_ntgids);
	skel->rodata->call_time = time_calls;
	/* Untimed, sys_enter is not attached at all: that is the saving. */
	if (!time_calls)
		bpf_program__set_autoload(skel->progs.sys_enter, false);
	bpf_program__set_autoload(datagrams ? skel->progs.sys_exit : skel->progs.sys_exit_datagrams,
				  false);
	err = syscalls_bpf__load(skel);
	if (err) {
		fprintf(stderr, "failed to load BPF object: %s\n", strerror(-err));
		syscalls_bpf__destroy(skel);
		return err;
	}
	*out = skel;
	return 0;
}

int main(int argc, char **argv)
{
	static const struct argp_child children[] = {{&probe_common_argp, 0, NULL, 0}, {}};
	static const struct argp argp = {
		.options = opts, .parser = parse_arg, .doc = argp_doc, .children = children};
	struct syscalls_bpf *skel;
	int err;

	err = argp_parse(&argp, argc, argv, 0, NULL, NULL);
	if (err)
		return err;
	if (!env.interval_s)
		env.interval_s = 1;
	probe_setup_libbpf(env.verbose);

	err = open_and_load(&skel);
	/* Kernels before 5.17 have no bpf_loop: count without the datagrams, and say so. */
	if (err && datagrams) {
		fprintf(stderr,
			"qprof-syscalls: --datagrams did not load (it needs bpf_loop, Linux 5.17); "
			"counting without it\n");
		datagrams = false;
		err = open_and_load(&skel);
	}
	if (err)
		return 1;
	snprintf(ready_info, sizeof(ready_info), "\"call_time\":%s,\"datagrams\":%s",
		 time_calls ? "true" : "false", datagrams ? "true" : "false");
	env.ready_info = ready_info;
	err = syscalls_bpf__attach(skel);
	if (err) {
		fprintf(stderr, "failed to attach BPF programs: %s\n", strerror(-err));
		goto cleanup;
	}
	err = probe_main_loop(&env, snapshot, skel);

cleanup:
	syscalls_bpf__destroy(skel);
	return err != 0;
}
