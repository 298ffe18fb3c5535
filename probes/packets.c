// SPDX-License-Identifier: GPL-2.0-only
// qprof-packets: skbs, bytes, wire packets and GSO/GRO super-packets on
// given network devices, TX and (with --rx) RX, with length and segment
// histograms.
#define _GNU_SOURCE
#include <argp.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>

#include "packets.h"
#include "packets.skel.h"
#include "packets_portable.skel.h"

/* Exit codes, besides argp's 64 for bad syntax. */
#define EXIT_FAIL 1	 /* BPF open/load/attach, or the system refused */
#define EXIT_NO_DEVICE 2 /* a -d names no device or namespace */

struct pk_dev {
	char ifname[IF_NAMESIZE];
	char netns[64];		      /* name under /run/netns, or "host" */
	char label[IF_NAMESIZE + 64]; /* IFNAME@NETNS */
	struct pk_dev_key key;
};

static struct pk_dev devs[PK_MAX_DEVS];
static int ndevs;
static struct probe_env env;
static bool portable; /* --portable: the bpf_probe_read_kernel build even where not needed */
static bool rx;	      /* --rx */

static const char *const gro_names[PK_NGRO] = {"merged", "merged_free", "held", "normal",
					       "consumed"};

const char *argp_program_version = "qprof-packets 0.1";
static const char argp_doc[] =
	"Count skbs, bytes, wire packets and GSO/GRO super-packets on network devices.\n"
	"\n"
	"USAGE: qprof-packets -d IF[@NETNS]... [--rx] [--json] [--control | INTERVAL [COUNT]]\n"
	"\n"
	"NETNS is a name under /run/netns (ip netns add) or 'host' (the default):\n"
	"this tool's own namespace. TX is counted at net_dev_start_xmit (length\n"
	"from the MAC header). With --rx, RX too, at netif_receive_skb after GRO\n"
	"(from the network header), and what GRO did with each packet\n"
	"(napi_gro_receive_entry/exit): a program or three more per received\n"
	"packet, so without it they are not attached and RX is null. Over veth\n"
	"each skb arrives as the peer's TX sent it, unless the receiving end runs\n"
	"GRO. Headers are read through the bpf_rdonly_cast kfunc (kernel 6.2\n"
	"and later); on older kernels, or with --portable, a build of the same\n"
	"program that copies them with bpf_probe_read_kernel is loaded instead.\n"
	"Exit status: 2 if a device or namespace does not exist, 1 if BPF or the\n"
	"system fails.\n"
	"\n"
	"EXAMPLES:\n"
	"    qprof-packets -d lo                     # loopback, totals every second\n"
	"    qprof-packets -d eth0 5 2               # every 5 s, twice\n"
	"    qprof-packets -d veth0@ns1 -d veth1@ns2 # both ends of a veth pair\n"
	"    qprof-packets -d eth0 --rx              # received packets and GRO too\n"
	"    qprof-packets -d lo --json              # one JSON line per interval\n"
	"    qprof-packets -d lo@host --control      # JSON per 'mark NAME' on stdin\n";

static const struct argp_option opts[] = {
	{"dev", 'd', "IFNAME[@NETNS]", 0, "A device to count (repeatable, up to 8)", 0},
	{"portable", 'P', NULL, 0, "Copy headers with bpf_probe_read_kernel, as before 6.2", 0},
	{"rx", 'r', NULL, 0, "Also count received skbs and GRO (up to three programs a packet)", 0},
	{},
};

static int parse_dev(const char *arg)
{
	const char *at = strrchr(arg, '@');
	size_t n = at ? (size_t)(at - arg) : strlen(arg);
	const char *ns = at ? at + 1 : "host";
	struct pk_dev *d;

	if (ndevs >= PK_MAX_DEVS || n == 0 || n >= IF_NAMESIZE || !*ns ||
	    strlen(ns) >= sizeof(d->netns) || strchr(ns, '/') || !strcmp(ns, ".") ||
	    !strcmp(ns, ".."))
		return -1;
	d = &devs[ndevs++];
	memcpy(d->ifname, arg, n);
	d->ifname[n] = 0;
	strcpy(d->netns, ns);
	strcpy(d->label, d->ifname);
	strcat(d->label, "@");
	strcat(d->label, d->netns);
	return 0;
}

static error_t parse_arg(int key, char *arg, struct argp_state *state)
{
	switch (key) {
	case 'd':
		if (parse_dev(arg))
			argp_failure(state, argp_err_exit_status, 0,
				     "invalid device '%s': give IFNAME@NETNS (up to %d of them), "
				     "NETNS a name under /run/netns or 'host'",
				     arg, PK_MAX_DEVS);
		break;
	case 'P': portable = true; break;
	case 'r': rx = true; break;
	case ARGP_KEY_INIT: state->child_inputs[0] = &env; break;
	case ARGP_KEY_END:
		if (!ndevs) {
			fprintf(stderr, "-d IFNAME[@NETNS] is required\n");
			argp_usage(state);
		}
		break;
	default: return ARGP_ERR_UNKNOWN;
	}
	return 0;
}

/*
 * d's namespace inode and ifindex; 0 or an exit code. A name is only
 * meaningful inside its namespace, so the lookup enters it (this thread
 * only) and comes back.
 */
static int resolve_dev(struct pk_dev *d, int self_fd)
{
	bool host = !strcmp(d->netns, "host");
	int fd = self_fd, ret = EXIT_FAIL;
	char path[128], hint[96];
	unsigned int ifindex;
	struct stat st;

	if (!host) {
		snprintf(path, sizeof(path), "/run/netns/%s", d->netns);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			fprintf(stderr,
				"qprof-packets: no network namespace '%s' (%s: %s); "
				"see 'ip netns list', or use @host\n",
				d->netns, path, strerror(errno));
			return EXIT_NO_DEVICE;
		}
	}
	if (fstat(fd, &st)) {
		fprintf(stderr, "qprof-packets: failed to stat namespace '%s': %s\n", d->netns,
			strerror(errno));
		goto out;
	}
	d->key.netns_ino = (__u32)st.st_ino;
	if (!host && setns(fd, CLONE_NEWNET)) {
		fprintf(stderr,
			"qprof-packets: failed to enter namespace '%s' (%s): %s; is it a network namespace?\n",
			d->netns, path, strerror(errno));
		ret = EXIT_NO_DEVICE;
		goto out;
	}
	ifindex = if_nametoindex(d->ifname);
	if (!host && setns(self_fd, CLONE_NEWNET)) {
		fprintf(stderr, "qprof-packets: failed to return to this tool's namespace: %s\n",
			strerror(errno));
		goto out;
	}
	if (!ifindex) {
		if (host)
			snprintf(hint, sizeof(hint), "ip link");
		else
			snprintf(hint, sizeof(hint), "ip -n %s link", d->netns);
		fprintf(stderr, "qprof-packets: no device '%s' in namespace '%s'; see '%s'\n",
			d->ifname, d->netns, hint);
		ret = EXIT_NO_DEVICE;
		goto out;
	}
	d->key.ifindex = ifindex;
	ret = 0;
out:
	if (!host)
		close(fd);
	return ret;
}

/* Every -d resolved, each device once; 0 or an exit code. */
static int resolve_devs(void)
{
	int self_fd, err = 0, i, j;

	self_fd = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	if (self_fd < 0) {
		fprintf(stderr, "qprof-packets: failed to open /proc/self/ns/net: %s\n",
			strerror(errno));
		return EXIT_FAIL;
	}
	for (i = 0; i < ndevs && !err; i++)
		err = resolve_dev(&devs[i], self_fd);
	close(self_fd);
	if (err)
		return err;
	for (i = 0; i < ndevs; i++)
		for (j = 0; j < i; j++)
			if (!memcmp(&devs[i].key, &devs[j].key, sizeof(devs[i].key))) {
				fprintf(stderr,
					"qprof-packets: %s and %s are the same device; give it once\n",
					devs[j].label, devs[i].label);
				return EXIT_NO_DEVICE;
			}
	return 0;
}

/* One device's counters, summed over CPUs. */
static int read_dev(struct packets_bpf *skel, __u32 slot, struct pk_dev_stats *out)
{
	int ncpu = libbpf_num_possible_cpus(), c, d, i;
	struct pk_dev_stats *v;
	int err;

	if (ncpu < 0)
		return ncpu;
	v = calloc(ncpu, sizeof(*v));
	if (!v)
		return -ENOMEM;
	err = bpf_map__lookup_elem(skel->maps.stats, &slot, sizeof(slot), v, ncpu * sizeof(*v), 0);
	memset(out, 0, sizeof(*out));
	for (c = 0; !err && c < ncpu; c++) {
		for (d = 0; d < PK_NDIR; d++) {
			struct pk_dir_stats *o = &out->dir[d], *s = &v[c].dir[d];

			o->skbs += s->skbs;
			o->bytes += s->bytes;
			o->wire_packets += s->wire_packets;
			o->wire_bytes += s->wire_bytes;
			o->gso_skbs += s->gso_skbs;
			o->udp_skbs += s->udp_skbs;
			o->tcp_skbs += s->tcp_skbs;
			o->other_skbs += s->other_skbs;
			for (i = 0; i < PROBE_HIST_SLOTS; i++) {
				o->len_hist_bytes[i] += s->len_hist_bytes[i];
				o->gso_size_hist_bytes[i] += s->gso_size_hist_bytes[i];
				o->gso_segs_hist[i] += s->gso_segs_hist[i];
			}
		}
		out->gro_entry += v[c].gro_entry;
		for (i = 0; i < PK_NGRO; i++)
			out->gro_result[i] += v[c].gro_result[i];
		out->gro_result_unknown += v[c].gro_result_unknown;
	}
	free(v);
	return err;
}

/* Events the kernel skipped because the program was already running on that CPU. */
static unsigned long long recursion_misses(struct packets_bpf *skel)
{
	struct bpf_program *prog;
	unsigned long long n = 0;

	bpf_object__for_each_program(prog, skel->obj)
	{
		struct bpf_prog_info info = {};
		__u32 len = sizeof(info);

		if (!bpf_obj_get_info_by_fd(bpf_program__fd(prog), &info, &len))
			n += info.recursion_misses;
	}
	return n;
}

static void json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			putchar('\\');
		if ((unsigned char)*s >= 0x20)
			putchar(*s);
	}
	putchar('"');
}

static void print_json_dir(const struct pk_dir_stats *s)
{
	printf("{\"skbs\":%llu,\"bytes\":%llu,\"wire_packets\":%llu,\"wire_bytes\":%llu,\"gso_skbs\":%llu,"
	       "\"udp_skbs\":%llu,\"tcp_skbs\":%llu,\"other_skbs\":%llu,",
	       s->skbs, s->bytes, s->wire_packets, s->wire_bytes, s->gso_skbs, s->udp_skbs,
	       s->tcp_skbs, s->other_skbs);
	probe_json_hist(stdout, "len_hist_bytes", s->len_hist_bytes);
	putchar(',');
	probe_json_hist(stdout, "gso_size_hist_bytes", s->gso_size_hist_bytes);
	putchar(',');
	probe_json_hist(stdout, "gso_segs_hist", s->gso_segs_hist);
}

/* Every device's counters into s[ndevs]; 0 or -errno, having said why. */
static int read_devs(struct packets_bpf *skel, struct pk_dev_stats *s)
{
	int i, err;

	for (i = 0; i < ndevs; i++) {
		err = read_dev(skel, i, &s[i]);
		if (err) {
			fprintf(stderr, "qprof-packets: reading %s's counters failed: %s\n",
				devs[i].label, strerror(-err));
			return err;
		}
	}
	return 0;
}

static int print_json(const char *name, struct packets_bpf *skel)
{
	struct pk_dev_stats s[PK_MAX_DEVS];
	__u64 t_ns = probe_now_ns();
	int i, g, err;

	err = read_devs(skel, s);
	if (err)
		return err;
	printf("{\"event\":\"mark\",\"name\":");
	json_str(name);
	printf(",\"t_ns\":%llu,\"read_ns\":%llu,\"prog_recursion_misses\":%llu,\"devices\":[", t_ns,
	       probe_now_ns() - t_ns, recursion_misses(skel));
	for (i = 0; i < ndevs; i++) {
		printf("%s{\"dev\":", i ? "," : "");
		json_str(devs[i].label);
		printf(",\"netns_ino\":%u,\"ifindex\":%u,\"tx\":", devs[i].key.netns_ino,
		       devs[i].key.ifindex);
		print_json_dir(&s[i].dir[PK_TX]);
		printf("},\"rx\":");
		/* Not counted is absent, not zero. */
		if (!rx) {
			printf("null}");
			continue;
		}
		print_json_dir(&s[i].dir[PK_RX]);
		printf(",\"gro_entry\":%llu,\"gro_result\":{", s[i].gro_entry);
		for (g = 0; g < PK_NGRO; g++)
			printf("\"%s\":%llu,", gro_names[g], s[i].gro_result[g]);
		printf("\"unknown\":%llu}}}", s[i].gro_result_unknown);
	}
	putchar(']');
	probe_json_progs(stdout, skel->obj);
	printf("}\n");
	return 0;
}

static int print_table(struct packets_bpf *skel)
{
	struct pk_dev_stats s[PK_MAX_DEVS];
	unsigned long long missed;
	int i, d, err;

	err = read_devs(skel, s);
	if (err)
		return err;
	printf("%-24s %-3s %12s %14s %12s %10s %12s %12s %12s\n", "DEV", "DIR", "SKBS", "BYTES",
	       "WIRE PKTS", "GSO SKBS", "AVG LEN (B)", "UDP", "TCP");
	for (i = 0; i < ndevs; i++) {
		for (d = 0; d < (rx ? PK_NDIR : PK_RX); d++) {
			const struct pk_dir_stats *t = &s[i].dir[d];

			printf("%-24s %-3s %12llu %14llu %12llu %10llu %12.1f %12llu %12llu\n",
			       devs[i].label, d == PK_TX ? "TX" : "RX", t->skbs, t->bytes,
			       t->wire_packets, t->gso_skbs,
			       t->skbs ? (double)t->bytes / t->skbs : 0.0, t->udp_skbs,
			       t->tcp_skbs);
		}
	}
	missed = recursion_misses(skel);
	if (missed)
		printf("(%llu events missed: a program was already running on that CPU)\n", missed);
	printf("\n");
	return 0;
}

static int snapshot(const char *name, void *arg)
{
	return env.json ? print_json(name, arg) : print_table(arg);
}

/* Does this kernel's BTF have the bpf_rdonly_cast kfunc (6.2 and later)? */
static bool kernel_has_rdonly_cast(void)
{
	struct btf *btf = btf__load_vmlinux_btf();
	bool has;

	if (!btf)
		return false;
	has = btf__find_by_name_kind(btf, "bpf_rdonly_cast", BTF_KIND_FUNC) > 0;
	btf__free(btf);
	return has;
}

/*
 * The skeleton, opened on the portable build's ELF where asked: both are
 * built from packets.bpf.c and differ only in code, so one skeleton's
 * maps, programs and variables describe either (tests count the same
 * traffic with both at once).
 */
static struct packets_bpf *open_skel(bool portable_build)
{
	struct packets_bpf *skel = calloc(1, sizeof(*skel));

	if (!skel)
		return NULL;
	if (packets_bpf__create_skeleton(skel))
		goto fail;
	if (portable_build)
		skel->skeleton->data =
			(void *)packets_portable_bpf__elf_bytes(&skel->skeleton->data_sz);
	if (bpf_object__open_skeleton(skel->skeleton, NULL))
		goto fail;
	return skel;
fail:
	packets_bpf__destroy(skel);
	return NULL;
}

int main(int argc, char **argv)
{
	static const struct argp_child children[] = {{&probe_common_argp, 0, NULL, 0}, {}};
	static const struct argp argp = {
		.options = opts, .parser = parse_arg, .doc = argp_doc, .children = children};
	struct packets_bpf *skel;
	char ready[64];
	int err, i;

	err = argp_parse(&argp, argc, argv, 0, NULL, NULL);
	if (err)
		return err;
	if (!env.interval_s)
		env.interval_s = 1;
	probe_setup_libbpf(env.verbose);

	err = resolve_devs();
	if (err)
		return err;

	if (!portable && !kernel_has_rdonly_cast()) {
		portable = true;
		if (env.verbose)
			fprintf(stderr,
				"no bpf_rdonly_cast in this kernel: loading the portable build\n");
	}
	/* Which build counted, and which directions, is part of how a figure was measured. */
	snprintf(ready, sizeof(ready), "\"build\":\"%s\",\"rx\":%s",
		 portable ? "portable" : "rdonly_cast", rx ? "true" : "false");
	env.ready_info = ready;
	skel = open_skel(portable);
	if (!skel) {
		fprintf(stderr, "failed to open BPF object: %s\n", strerror(errno));
		return EXIT_FAIL;
	}
	/* Without --rx the receive programs are not even attached: that is the saving. */
	if (!rx) {
		bpf_program__set_autoload(skel->progs.receive_skb, false);
		bpf_program__set_autoload(skel->progs.gro_entry, false);
		bpf_program__set_autoload(skel->progs.gro_exit, false);
	}
	for (i = 0; i < ndevs; i++)
		skel->rodata->targ_devs[i] = devs[i].key;
	skel->rodata->targ_ndevs = (__u32)ndevs;
	err = packets_bpf__load(skel);
	if (err) {
		fprintf(stderr, "failed to load BPF object: %s\n", strerror(-err));
		goto cleanup;
	}
	err = packets_bpf__attach(skel);
	if (err) {
		fprintf(stderr, "failed to attach BPF programs: %s\n", strerror(-err));
		goto cleanup;
	}
	err = probe_main_loop(&env, snapshot, skel);

cleanup:
	packets_bpf__destroy(skel);
	return err != 0 ? EXIT_FAIL : 0;
}
