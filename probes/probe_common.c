// SPDX-License-Identifier: GPL-2.0-only
/* User-side helpers shared by qprof's probe tools. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "probe_common.h"

static volatile sig_atomic_t exiting;
static bool stats_on;

/*
 * The statistics cost two clock reads around every program run (~100 ns
 * here, as much as a program itself), so they are on for STATS_ON_NS of
 * every STATS_PERIOD_NS only, and user space scales a window's run time
 * and runs by its wall time over stats_on_ns. The slices start at whole
 * periods of CLOCK_MONOTONIC, the same instants in every probe tool: the
 * kernel's switch is one for the machine, so the tools' slices must
 * coincide for each tool's own on-time to be the machine's. The toggling
 * thread runs SCHED_FIFO, so a busy machine does not delay a slice's edge.
 */
#define STATS_PERIOD_NS 500000000ull
#define STATS_ON_NS 50000000ull

static pthread_mutex_t stats_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned long long stats_on_ns;	  /* closed slices */
static unsigned long long stats_on_since; /* the open slice's start, or 0 */

static void sleep_until(unsigned long long ns)
{
	struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull),
			      .tv_nsec = (long)(ns % 1000000000ull)};

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

static void *stats_slices(void *arg)
{
	struct sched_param sp = {.sched_priority = 1};
	unsigned long long next, t0, t1;
	int fd;

	(void)arg;
	pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp); /* best effort */
	for (;;) {
		next = (probe_now_ns() / STATS_PERIOD_NS + 1) * STATS_PERIOD_NS;
		sleep_until(next);
		fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
		if (fd < 0)
			continue;
		t0 = probe_now_ns();
		pthread_mutex_lock(&stats_mu);
		stats_on_since = t0;
		pthread_mutex_unlock(&stats_mu);
		sleep_until(next + STATS_ON_NS);
		close(fd);
		t1 = probe_now_ns();
		pthread_mutex_lock(&stats_mu);
		stats_on_ns += t1 - t0;
		stats_on_since = 0;
		pthread_mutex_unlock(&stats_mu);
	}
	return NULL;
}

static void enable_stats(const struct probe_env *env)
{
	pthread_t th;
	int fd;

	if (env->no_bpf_stats)
		return;
	/* Once here: the tool says whether the kernel has them at all. */
	fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
	if (fd < 0) {
		if (env->verbose)
			fprintf(stderr, "BPF run-time statistics unavailable: %s\n",
				strerror(errno));
		return;
	}
	close(fd);
	stats_on = !pthread_create(&th, NULL, stats_slices, NULL);
	if (stats_on)
		pthread_detach(th);
}

void probe_json_progs(FILE *f, struct bpf_object *obj)
{
	struct bpf_program *prog;
	unsigned long long on;
	int i = 0;

	pthread_mutex_lock(&stats_mu);
	on = stats_on_ns + (stats_on_since ? probe_now_ns() - stats_on_since : 0);
	pthread_mutex_unlock(&stats_mu);
	fprintf(f, ",\"bpf_stats_on_ns\":%llu,\"progs\":[", on);
	bpf_object__for_each_program(prog, obj)
	{
		struct bpf_prog_info info = {};
		__u32 len = sizeof(info);
		int fd = bpf_program__fd(prog);

		if (fd < 0 || bpf_obj_get_info_by_fd(fd, &info, &len))
			continue; /* not loaded (autoload off) */
		fprintf(f,
			"%s{\"name\":\"%s\",\"run_time_ns\":%llu,\"run_cnt\":%llu,\"recursion_misses\":%llu}",
			i++ ? "," : "", bpf_program__name(prog),
			(unsigned long long)info.run_time_ns, (unsigned long long)info.run_cnt,
			(unsigned long long)info.recursion_misses);
	}
	fputc(']', f);
}

static void sig_handler(int sig)
{
	(void)sig;
	exiting = 1;
}

int probe_parse_pids(struct probe_env *env, const char *arg)
{
	char *copy = strdup(arg), *rest, *tok;

	if (!copy)
		return -1;
	/* strsep, not strtok: "1,,2" is an error, not PIDs 1 and 2. */
	for (rest = copy; (tok = strsep(&rest, ",")) != NULL;) {
		char *end;
		long pid = strtol(tok, &end, 10);

		int i;

		if (!*tok || *end || pid <= 0 || env->npids >= PROBE_MAX_PIDS) {
			free(copy);
			return -1;
		}
		/* Each once: the probes index their per-process counters by place in the list. */
		for (i = 0; i < env->npids && env->pids[i] != (pid_t)pid; i++)
			;
		if (i == env->npids)
			env->pids[env->npids++] = (pid_t)pid;
	}
	free(copy);
	return env->npids ? 0 : -1;
}

void probe_set_targets(const struct probe_env *env, volatile __u32 *tgids, volatile __u32 *ntgids)
{
	int i;

	for (i = 0; i < env->npids; i++)
		tgids[i] = (__u32)env->pids[i];
	*ntgids = (__u32)env->npids;
}

unsigned long long probe_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

int probe_read_array(int fd, __u32 n, void *values, size_t value_size)
{
	__u32 *keys, done = 0, next = 0, count;
	int err = 0;

	keys = calloc(n ? n : 1, sizeof(*keys));
	if (!keys)
		return -ENOMEM;
	while (done < n) {
		count = n - done;
		err = bpf_map_lookup_batch(fd, done ? &next : NULL, &next, keys + done,
					   (char *)values + (size_t)done * value_size, &count,
					   NULL);
		done += count;
		if (err == -ENOENT && done) /* the map's end: everything there is */
			err = 0;
		if (err || !count)
			break;
	}
	free(keys);
	return err;
}

void probe_json_hist(FILE *f, const char *key, const unsigned long long *slots)
{
	int last = -1, i;

	for (i = 0; i < PROBE_HIST_SLOTS; i++)
		if (slots[i])
			last = i;
	fprintf(f, "\"%s\":[", key);
	for (i = 0; i <= last; i++)
		fprintf(f, "%s%llu", i ? "," : "", slots[i]);
	fputc(']', f);
}

static int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list args)
{
	(void)level;
	return vfprintf(stderr, fmt, args);
}

static int libbpf_print_warn(enum libbpf_print_level level, const char *fmt, va_list args)
{
	if (level == LIBBPF_DEBUG || level == LIBBPF_INFO)
		return 0;
	return vfprintf(stderr, fmt, args);
}

void probe_setup_libbpf(bool verbose)
{
	libbpf_set_print(verbose ? libbpf_print : libbpf_print_warn);
}

/* The positional [INTERVAL [COUNT]]: 0, or -1 for a bad value or one too many. */
static int parse_interval(struct probe_env *env, unsigned int pos, const char *arg)
{
	char *end;
	long v;

	if (pos > 1)
		return -1;
	errno = 0;
	v = strtol(arg, &end, 10);
	if (errno || *end || v < (pos == 0 ? 1 : 0) || v > INT_MAX)
		return -1;
	if (pos == 0)
		env->interval_s = (int)v;
	else
		env->count = (int)v;
	return 0;
}

static error_t parse_common(int key, char *arg, struct argp_state *state)
{
	struct probe_env *env = state->input;

	switch (key) {
	case 'j': env->json = true; break;
	case 'c':
		env->control = true;
		env->json = true;
		break;
	case 'v': env->verbose = true; break;
	case 'S': env->no_bpf_stats = true; break;
	case 'h': argp_state_help(state, stderr, ARGP_HELP_STD_HELP); break;
	case ARGP_KEY_ARG:
		if (parse_interval(env, state->arg_num, arg)) {
			fprintf(stderr, "invalid interval/count: %s\n", arg);
			argp_usage(state);
		}
		break;
	default: return ARGP_ERR_UNKNOWN;
	}
	return 0;
}

static const struct argp_option common_opts[] = {
	{"json", 'j', NULL, 0, "One JSON line per snapshot", 0},
	{"control", 'c', NULL, 0, "Snapshot on 'mark NAME' lines on stdin; 'exit' ends", 0},
	{"verbose", 'v', NULL, 0, "libbpf's debug output", 0},
	{"no-bpf-stats", 'S', NULL, 0,
	 "Leave the kernel's BPF run-time statistics off (they cost two clock reads a program run)",
	 0},
	{NULL, 'h', NULL, OPTION_HIDDEN, "Show the full help", 0},
	{},
};

const struct argp probe_common_argp = {.options = common_opts, .parser = parse_common};

int probe_main_loop(const struct probe_env *env, probe_snapshot_fn snapshot, void *arg)
{
	struct sigaction sa = {.sa_handler = sig_handler};
	char line[256];
	int n = 0, err = 0;

	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	enable_stats(env);
	if (env->control) {
		printf("{\"event\":\"ready\",\"pid\":%d,\"bpf_stats\":%s%s%s}\n", getpid(),
		       stats_on ? "true" : "false", env->ready_info ? "," : "",
		       env->ready_info ? env->ready_info : "");
		fflush(stdout);
		while (!err && !exiting && fgets(line, sizeof(line), stdin)) {
			char name[64];

			if (sscanf(line, "mark %63s", name) == 1)
				err = snapshot(name, arg);
			else if (!strcmp(line, "exit\n"))
				break;
			else
				fprintf(stderr, "ignoring control line: %s", line);
			fflush(stdout);
		}
		return err;
	}
	while (!err && !exiting) {
		sleep(env->interval_s > 0 ? (unsigned)env->interval_s : 1);
		if (exiting)
			break;
		err = snapshot("interval", arg);
		fflush(stdout);
		if (env->count && ++n >= env->count)
			break;
	}
	return err;
}
