// SPDX-License-Identifier: GPL-2.0-only
/* Kernel-side helpers shared by qprof's probes. */
#ifndef QPROF_COMMON_BPF_H
#define QPROF_COMMON_BPF_H

#include "probe_common.h"

/*
 * The processes a probe watches, set by user space before load. Read-only
 * data, not a hash map: the check runs on every event of the machine, and
 * the verifier knows targ_ntgids, so it is a few compares with no helper
 * call. Index i of a tgid is its place in the -p list.
 */
#define DEFINE_TARGET_TGIDS                                   \
	const volatile __u32 targ_tgids[PROBE_MAX_PIDS] = {}; \
	const volatile __u32 targ_ntgids = 0;                 \
	static __always_inline int target_index(__u32 tgid)   \
	{                                                     \
		int i;                                        \
                                                              \
		for (i = 0; i < PROBE_MAX_PIDS; i++) {        \
			if (i >= targ_ntgids)                 \
				break;                        \
			if (targ_tgids[i] == tgid)            \
				return i;                     \
		}                                             \
		return -1;                                    \
	}                                                     \
	static __always_inline bool is_target(__u32 tgid)     \
	{                                                     \
		return target_index(tgid) >= 0;               \
	}

static __always_inline __u32 log2_u64(__u64 v)
{
	__u32 r = 0;

	if (v >> 32) {
		v >>= 32;
		r += 32;
	}
	if (v >> 16) {
		v >>= 16;
		r += 16;
	}
	if (v >> 8) {
		v >>= 8;
		r += 8;
	}
	if (v >> 4) {
		v >>= 4;
		r += 4;
	}
	if (v >> 2) {
		v >>= 2;
		r += 2;
	}
	if (v >> 1) {
		r += 1;
	}
	return r;
}

/* Bucket i holds values in [2^i, 2^(i+1)); bucket 0 also holds 0. */
static __always_inline __u32 log2_slot(__u64 v)
{
	__u32 s = log2_u64(v);

	return s < PROBE_HIST_SLOTS ? s : PROBE_HIST_SLOTS - 1;
}

#endif
