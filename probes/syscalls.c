// qprof-syscalls: network and waiting syscalls of given processes, per
// thread: calls, errors, bytes, mmsg messages, time inside.
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
	"sendmsg", "sendmmsg", "recvmsg", "recvmmsg", "sendto", "recvfrom",
	"write", "writev", "read", "readv", "sendfile", "splice",
	"epoll_wait", "epoll_pwait", "epoll_pwait2", "io_uring_enter", "futex",
};

static struct probe_env env;

const char *argp_program_version = "qprof-syscalls 0.1";
static const char argp_doc[] =
"Count the network and waiting syscalls of given processes, per thread.\n"
"\n"
"USAGE: qprof-syscalls -p PID[,PID...] [--json] [--control | INTERVAL [COUNT]]\n"
"\n"
"EXAMPLES:\n"
"    qprof-syscalls -p 1234           # print totals every second\n"
"    qprof-syscalls -p 1234,1240 5 2  # every 5 s, twice\n"
"    qprof-syscalls -p 1234 --json    # one JSON line per interval\n"
"    qprof-syscalls -p 1234 --control # JSON on 'mark NAME' lines on stdin\n";

static const struct argp_option opts[] = {
	{ "pid", 'p', "PID[,PID...]", 0, "Processes to follow (all their threads)", 0 },
	{ "json", 'j', NULL, 0, "One JSON line per snapshot", 0 },
	{ "control", 'c', NULL, 0, "Snapshot on 'mark NAME' lines on stdin; 'exit' ends", 0 },
	{ "verbose", 'v', NULL, 0, "libbpf's debug output", 0 },
	{ NULL, 'h', NULL, OPTION_HIDDEN, "Show the full help", 0 },
	{},
};

static error_t parse_arg(int key, char *arg, struct argp_state *state)
{
	static int pos;

	switch (key) {
	case 'p':
		if (probe_parse_pids(&env, arg)) {
			fprintf(stderr, "invalid PID list: %s\n", arg);
			argp_usage(state);
		}
		break;
	case 'j': env.json = true; break;
	case 'c': env.control = true; env.json = true; break;
	case 'v': env.verbose = true; break;
	case 'h': argp_state_help(state, stderr, ARGP_HELP_STD_HELP); break;
	case ARGP_KEY_ARG:
		errno = 0;
		if (pos == 0)
			env.interval_s = (int)strtol(arg, NULL, 10);
		else if (pos == 1)
			env.count = (int)strtol(arg, NULL, 10);
		else
			argp_usage(state);
		if (errno || (pos == 0 && env.interval_s <= 0)) {
			fprintf(stderr, "invalid interval/count: %s\n", arg);
			argp_usage(state);
		}
		pos++;
		break;
	case ARGP_KEY_END:
		if (!env.npids) {
			fprintf(stderr, "-p PID is required\n");
			argp_usage(state);
		}
		break;
	default:
		return ARGP_ERR_UNKNOWN;
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

static void print_json(const char *name, struct syscalls_bpf *skel)
{
	int fd = bpf_map__fd(skel->maps.stats);
	struct sys_key key, next, *prev = NULL;
	struct sys_stats s;
	bool first = true;

	printf("{\"event\":\"mark\",\"name\":\"%s\",\"t_ns\":%llu,\"threads\":[", name, probe_now_ns());
	while (bpf_map_get_next_key(fd, prev, &next) == 0) {
		char comm[32];

		key = next;
		prev = &key;
		if (bpf_map_lookup_elem(fd, &key, &s))
			continue;
		read_comm(key.tgid, key.tid, comm, sizeof(comm));
		printf("%s{\"tgid\":%u,\"tid\":%u,\"comm\":\"%s\",\"sys\":\"%s\",\"calls\":%llu,"
		       "\"errors\":%llu,\"eagain\":%llu,\"bytes\":%llu,\"msgs_requested\":%llu,"
		       "\"msgs_returned\":%llu,\"mmsg_truncated\":%llu,\"time_ns\":%llu,",
		       first ? "" : ",", key.tgid, key.tid, comm,
		       key.sys < QP_NSYS ? sys_names[key.sys] : "?", s.calls, s.errors, s.eagain,
		       s.bytes, s.msgs_requested, s.msgs_returned, s.mmsg_truncated, s.time_ns);
		probe_json_hist(stdout, "time_hist_ns", s.time_hist_ns);
		putchar('}');
		first = false;
	}
	printf("]}\n");
}

static void print_table(struct syscalls_bpf *skel)
{
	int fd = bpf_map__fd(skel->maps.stats);
	struct sys_key key, next, *prev = NULL;
	struct sys_stats s, tot[PROBE_MAX_PIDS][QP_NSYS];
	__u32 tgids[PROBE_MAX_PIDS];
	int ntgid = 0, i, j;

	memset(tot, 0, sizeof(tot));
	while (bpf_map_get_next_key(fd, prev, &next) == 0) {
		key = next;
		prev = &key;
		if (bpf_map_lookup_elem(fd, &key, &s) || key.sys >= QP_NSYS)
			continue;
		for (i = 0; i < ntgid && tgids[i] != key.tgid; i++)
			;
		if (i == ntgid) {
			if (ntgid == PROBE_MAX_PIDS)
				continue;
			tgids[ntgid++] = key.tgid;
		}
		tot[i][key.sys].calls += s.calls;
		tot[i][key.sys].errors += s.errors;
		tot[i][key.sys].bytes += s.bytes;
		tot[i][key.sys].msgs_returned += s.msgs_returned;
		tot[i][key.sys].time_ns += s.time_ns;
	}
	printf("%-8s %-15s %12s %10s %14s %10s %14s\n", "PID", "SYSCALL", "CALLS", "ERRORS",
	       "BYTES", "MSGS", "TIME (us)");
	for (i = 0; i < ntgid; i++)
		for (j = 0; j < QP_NSYS; j++)
			if (tot[i][j].calls)
				printf("%-8u %-15s %12llu %10llu %14llu %10llu %14.1f\n", tgids[i],
				       sys_names[j], tot[i][j].calls, tot[i][j].errors, tot[i][j].bytes,
				       tot[i][j].msgs_returned, tot[i][j].time_ns / 1e3);
	printf("\n");
}

static void snapshot(const char *name, void *arg)
{
	if (env.json)
		print_json(name, arg);
	else
		print_table(arg);
}

int main(int argc, char **argv)
{
	static const struct argp argp = { .options = opts, .parser = parse_arg, .doc = argp_doc };
	struct syscalls_bpf *skel;
	int err;

	err = argp_parse(&argp, argc, argv, 0, NULL, NULL);
	if (err)
		return err;
	if (!env.interval_s)
		env.interval_s = 1;
	probe_setup_libbpf(env.verbose);

	skel = syscalls_bpf__open();
	if (!skel) {
		fprintf(stderr, "failed to open BPF object: %s\n", strerror(errno));
		return 1;
	}
	probe_set_targets(&env, skel->rodata->targ_tgids, &skel->rodata->targ_ntgids);
	err = syscalls_bpf__load(skel);
	if (err) {
		fprintf(stderr, "failed to load BPF object: %s\n", strerror(-err));
		goto cleanup;
	}
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
