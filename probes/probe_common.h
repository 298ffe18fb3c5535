// SPDX-License-Identifier: GPL-2.0-only
/* Shared by every probe, kernel and user side: limits and the histogram. */
#ifndef QPROF_PROBE_COMMON_H
#define QPROF_PROBE_COMMON_H

#define PROBE_MAX_PIDS 64
#define PROBE_HIST_SLOTS 32 /* log2 buckets: up to 2^31 (ns, bytes, segments) */

#ifndef __VMLINUX_H__
#include <argp.h>
#include <linux/types.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

struct bpf_map;

/* Options every probe tool takes (see probe_usage_common). */
struct probe_env {
	pid_t pids[PROBE_MAX_PIDS];
	int npids;
	bool json;
	bool control; /* commands on stdin: mark NAME, exit */
	bool verbose;
	bool no_bpf_stats;	/* leave the kernel's BPF run-time statistics off */
	int interval_s;		/* without --control: print every interval_s... */
	int count;		/* ...count times (0: until Ctrl-C) */
	const char *ready_info; /* more members for the ready event ("k":"v",...), or NULL */
};

/*
 * The options every probe tool takes, as an argp child: --json, --control,
 * --verbose, a hidden -h for the full help, and the positional
 * [INTERVAL [COUNT]]. Its input is the tool's struct probe_env: the tool's
 * parser sets state->child_inputs[0] to it at ARGP_KEY_INIT.
 */
extern const struct argp probe_common_argp;

/* Parses "PID[,PID...]" into env->pids, each once; returns 0 or -1. */
int probe_parse_pids(struct probe_env *env, const char *arg);

/* Puts env's pids into a DEFINE_TARGET_TGIDS probe's read-only data; before load. */
void probe_set_targets(const struct probe_env *env, volatile __u32 *tgids, volatile __u32 *ntgids);

/*
 * Drives a probe after attach: with --control, answers "mark NAME" lines
 * on stdin with snapshot(name) until "exit" or EOF; otherwise calls
 * snapshot("interval") every interval_s seconds, count times or until
 * SIGINT/SIGTERM. snapshot prints one JSON line (or a human table).
 * Before either, unless --no-bpf-stats, it turns the kernel's BPF run-time
 * statistics on in slices, a tenth of the time, while this process lives
 * (BPF_ENABLE_STATS: the kernel turns them off when the fd closes, at exit
 * or kill -9), and
 * prints {"event":"ready","bpf_stats":true|false} with --control. A snapshot
 * that fails (it returns -errno, having said why on stderr) ends the loop
 * with its error: a probe that cannot read its maps stops rather than
 * print figures it did not read.
 */
typedef int (*probe_snapshot_fn)(const char *name, void *arg);
int probe_main_loop(const struct probe_env *env, probe_snapshot_fn snapshot, void *arg);

unsigned long long probe_now_ns(void);

/*
 * Entries [0, n) of an array map into values (n * value_size bytes) with
 * bpf_map_lookup_batch: one system call, not n lookups, so a snapshot is
 * one instant even on a loaded machine that preempts the reader between
 * calls. Returns 0 or -errno.
 */
int probe_read_array(int fd, __u32 n, void *values, size_t value_size);

/* Prints "key":[n0,n1,...] for a log2 histogram, dropping trailing zeros. */
void probe_json_hist(FILE *f, const char *key, const unsigned long long *slots);

/* libbpf's messages on stderr only with -v; errors always. */
void probe_setup_libbpf(bool verbose);

struct bpf_object;
/*
 * Prints ,"bpf_stats_on_ns":..,"progs":[{"name":..,"run_time_ns":..,"run_cnt":..,
 * "recursion_misses":..},...] for every loaded program of obj: what the
 * probe itself cost so far while the statistics were on, and how long
 * they have been on (scale by the time over it for the whole).
 */
void probe_json_progs(FILE *f, struct bpf_object *obj);
#endif

#endif
