// SPDX-License-Identifier: GPL-2.0-only
// Counts skbs, bytes, wire packets and GSO/GRO super-packets per network
// device and direction where the driver sees them: net_dev_start_xmit (TX)
// and netif_receive_skb after GRO (RX), plus what GRO did with each packet.
// User space loads the RX and GRO programs only when asked (--rx): every
// received packet of the machine runs them. tp_btf: no tracefs needed.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_tracing.h>

#include "packets.h"
#include "common.bpf.h"

#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define NH_UNSET 0xffff

/*
 * The devices, set by user space before load; device i has slot i in
 * stats. Read-only data, not a hash: every packet of the machine is
 * checked, and comparing the ifindex first leaves most of them before the
 * namespace is read.
 */
const volatile struct pk_dev_key targ_devs[PK_MAX_DEVS] = {};
const volatile __u32 targ_ndevs = 0;

/*
 * Per CPU: a device's counters are hit from both CPUs at packet rate, and
 * shared atomics would bounce one cache line in the very softirq CPU time
 * qprof measures. Plain adds are safe: TX runs with BH disabled and RX in
 * softirq, so nothing else on the CPU updates a slot mid-add.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, PK_MAX_DEVS);
	__type(key, __u32);
	__type(value, struct pk_dev_stats);
} stats SEC(".maps");

/*
 * napi_gro_receive_exit carries only the result, so the entry leaves the
 * device's slot + 1 here (0: not ours); GRO does not nest on one CPU.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} gro_slot SEC(".maps");

#ifndef QP_PORTABLE
/*
 * A view of kernel memory the program may load from directly (a fault
 * reads 0) without a bpf_probe_read_kernel call per field; the verifier
 * turns the kfunc into a move. Kernel 6.2 and later.
 */
extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __ksym;
#define kernel_cast(p, type) ((type *)bpf_rdonly_cast((p), bpf_core_type_id_kernel(type)))
/* Byte i of the header of the given type at p. */
#define HDR_BYTE(p, type, i) (((const __u8 *)kernel_cast((p), type))[i])
#define SHINFO_FIELD(sh, field) (kernel_cast((sh), struct skb_shared_info)->field)
#else
/*
 * The same reads on kernels without bpf_rdonly_cast (before 6.2): a
 * helper call each. User space builds this variant as packets_portable
 * and loads it when the kernel's BTF has no such kfunc.
 */
static __always_inline __u8 kernel_byte(const void *p)
{
	__u8 v = 0;

	bpf_probe_read_kernel(&v, sizeof(v), p);
	return v;
}
#define HDR_BYTE(p, type, i) kernel_byte((const __u8 *)(p) + (i))
#define SHINFO_FIELD(sh, field) BPF_CORE_READ((sh), field)
#endif

/*
 * tp_btf hands over typed pointers: their fields are plain loads, no
 * BPF_CORE_READ (a helper call each).
 */
static __always_inline int dev_slot(const struct net_device *dev)
{
	__u32 ifindex, netns_ino = 0;
	int i;

	if (!dev)
		return -1;
	ifindex = dev->ifindex;
	for (i = 0; i < PK_MAX_DEVS; i++) {
		if (i >= targ_ndevs)
			break;
		if (targ_devs[i].ifindex != ifindex)
			continue;
		if (!netns_ino)
			netns_ino = dev->nd_net.net->ns.inum;
		if (targ_devs[i].netns_ino == netns_ino)
			return i;
	}
	return -1;
}

/*
 * The L4 protocol of the packet whose L3 header starts at l3, and in *hdr
 * the L3 + L4 header bytes every segment repeats. Wire formats, not
 * kernel structs: read as bytes at their fixed offsets, no CO-RE. IPv6
 * extension headers are not followed (counted as other).
 */
static __always_inline __u8 l4_proto(const unsigned char *l3, __u16 protocol, __u32 *hdr)
{
	__u8 proto, b0;

	*hdr = 0;
	if (protocol == bpf_htons(ETH_P_IP)) {
		b0 = HDR_BYTE(l3, struct iphdr, 0);
		if ((b0 >> 4) != 4)
			return 0;
		*hdr = (b0 & 0xf) * 4;
		proto = HDR_BYTE(l3, struct iphdr, 9);
	} else if (protocol == bpf_htons(ETH_P_IPV6)) {
		b0 = HDR_BYTE(l3, struct ipv6hdr, 0);
		if ((b0 >> 4) != 6)
			return 0;
		*hdr = 40;
		proto = HDR_BYTE(l3, struct ipv6hdr, 6);
	} else {
		return 0;
	}
	if (proto == IPPROTO_UDP)
		*hdr += 8;
	else if (proto == IPPROTO_TCP)
		*hdr += (HDR_BYTE(l3 + *hdr, struct tcphdr, 12) >> 4) * 4;
	return proto;
}

static __always_inline void count_skb(struct pk_dir_stats *d, const struct sk_buff *skb, bool tx)
{
	unsigned char *head = skb->head, *data = skb->data;
	struct skb_shared_info *sh = (struct skb_shared_info *)(head + skb->end);
	__u32 len = skb->len, gso_size = SHINFO_FIELD(sh, gso_size),
	      segs = SHINFO_FIELD(sh, gso_segs);
	const unsigned char *l3 = data;
	__u32 l2 = 0, hdr;
	__u8 proto;

	/*
	 * At start_xmit data is at the MAC header and network_header is set
	 * by the stack. At netif_receive_skb eth_type_trans has pulled the
	 * MAC header, and __netif_receive_skb_core resets network_header only
	 * after the tracepoint, so data is the reliable L3 start there.
	 */
	if (tx) {
		__u16 nh = skb->network_header;

		if (nh != NH_UNSET && head + nh >= data) {
			l3 = head + nh;
			l2 = l3 - data;
		}
	}
	proto = l4_proto(l3, skb->protocol, &hdr);

	d->skbs++;
	d->bytes += len;
	d->len_hist_bytes[log2_slot(len)]++;
	d->gso_size_hist_bytes[log2_slot(gso_size)]++;
	d->gso_segs_hist[log2_slot(segs)]++;
	if (segs > 1) {
		d->gso_skbs++;
		d->wire_packets += segs;
		d->wire_bytes += len + (segs - 1) * (proto ? l2 + hdr : 0);
	} else {
		d->wire_packets++;
		d->wire_bytes += len;
	}
	if (proto == IPPROTO_UDP)
		d->udp_skbs++;
	else if (proto == IPPROTO_TCP)
		d->tcp_skbs++;
	else
		d->other_skbs++;
}

SEC("tp_btf/net_dev_start_xmit")
int BPF_PROG(start_xmit, const struct sk_buff *skb, const struct net_device *dev)
{
	struct pk_dev_stats *s;
	int slot = dev_slot(dev);

	if (slot < 0)
		return 0;
	s = bpf_map_lookup_elem(&stats, &slot);
	if (s)
		count_skb(&s->dir[PK_TX], skb, true);
	return 0;
}

SEC("tp_btf/netif_receive_skb")
int BPF_PROG(receive_skb, struct sk_buff *skb)
{
	struct pk_dev_stats *s;
	int slot = dev_slot(skb->dev);

	if (slot < 0)
		return 0;
	s = bpf_map_lookup_elem(&stats, &slot);
	if (s)
		count_skb(&s->dir[PK_RX], skb, false);
	return 0;
}

SEC("tp_btf/napi_gro_receive_entry")
int BPF_PROG(gro_entry, const struct sk_buff *skb)
{
	__u32 zero = 0, *cur = bpf_map_lookup_elem(&gro_slot, &zero);
	struct pk_dev_stats *s;
	int slot;

	if (!cur)
		return 0;
	*cur = 0;
	slot = dev_slot(skb->dev);
	if (slot < 0)
		return 0;
	s = bpf_map_lookup_elem(&stats, &slot);
	if (!s)
		return 0;
	s->gro_entry++;
	*cur = slot + 1;
	return 0;
}

SEC("tp_btf/napi_gro_receive_exit")
int BPF_PROG(gro_exit, int ret)
{
	__u32 zero = 0, *cur = bpf_map_lookup_elem(&gro_slot, &zero), slot, r;
	struct pk_dev_stats *s;

	if (!cur || !*cur)
		return 0;
	slot = *cur - 1;
	*cur = 0;
	s = bpf_map_lookup_elem(&stats, &slot);
	if (!s)
		return 0;
	/* One register for the check and the index, or the verifier loses the bound. */
	r = ret;
	barrier_var(r);
	if (r < PK_NGRO)
		s->gro_result[r]++;
	else
		s->gro_result_unknown++;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
