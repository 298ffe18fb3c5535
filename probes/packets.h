// SPDX-License-Identifier: GPL-2.0-only
/* packets: the types both sides of the probe share. */
#ifndef QPROF_PACKETS_H
#define QPROF_PACKETS_H

#include "probe_common.h"

#define PK_MAX_DEVS 8

enum pk_dir { PK_TX, PK_RX, PK_NDIR };

/* enum gro_result in the kernel; napi_gro_receive_exit's ret. */
enum pk_gro {
	PK_GRO_MERGED,
	PK_GRO_MERGED_FREE,
	PK_GRO_HELD,
	PK_GRO_NORMAL,
	PK_GRO_CONSUMED,
	PK_NGRO
};

/* A device is its namespace (nsfs inode) and its index inside it. */
struct pk_dev_key {
	__u32 netns_ino;
	__u32 ifindex;
};

struct pk_dir_stats {
	__u64 skbs;
	__u64 bytes;	    /* skb->len: TX from the MAC header, RX from the network header */
	__u64 wire_packets; /* sum of max(1, gso_segs) */
	__u64 wire_bytes;   /* bytes + headers repeated by segmentation: (gso_segs - 1) * hdr */
	__u64 gso_skbs;	    /* gso_segs > 1: GSO (TX) or GRO (RX) super-packets */
	__u64 udp_skbs;
	__u64 tcp_skbs;
	__u64 other_skbs; /* neither, or not IPv4/IPv6 */
	__u64 len_hist_bytes[PROBE_HIST_SLOTS];
	__u64 gso_size_hist_bytes[PROBE_HIST_SLOTS]; /* bucket 0: not a GSO skb */
	__u64 gso_segs_hist[PROBE_HIST_SLOTS];	     /* bucket 0: 0 or 1 segment */
};

/* One device's slot; per CPU in the kernel, summed by user space. */
struct pk_dev_stats {
	struct pk_dir_stats dir[PK_NDIR];
	__u64 gro_entry;	   /* napi_gro_receive_entry */
	__u64 gro_result[PK_NGRO]; /* napi_gro_receive_exit, by result */
	__u64 gro_result_unknown;  /* a result this build does not know */
};

#endif
