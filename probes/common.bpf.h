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

/*
 * Without a branch: each step's bit is ((v >> k) + 2^k - 1) >> k, 1 when
 * v >> k is not 0 (v < 2^2k there). A chain of ifs gave the verifier a
 * path per outcome, multiplied by every histogram a program fills:
 * packets' start_xmit took 687,749 of its 1,000,000 instructions and
 * 0.39 s to verify, at every run's start. The empty asm keeps the
 * compiler from turning the step back into a compare and a jump.
 */
#define LOG2_STEP(v, r, k)                                              \
	do {                                                            \
		__u64 _b = (((v) >> (k)) + ((1ULL << (k)) - 1)) >> (k); \
		asm volatile("" : "+r"(_b));                            \
		_b *= (k);                                              \
		(v) >>= _b;                                             \
		(r) += (__u32)_b;                                       \
	} while (0)

static __always_inline __u32 log2_u64(__u64 v)
{
	__u32 r = 0;

	LOG2_STEP(v, r, 32);
	LOG2_STEP(v, r, 16);
	LOG2_STEP(v, r, 8);
	LOG2_STEP(v, r, 4);
	LOG2_STEP(v, r, 2);
	LOG2_STEP(v, r, 1);
	return r;
}

/* Bucket i holds values in [2^i, 2^(i+1)); bucket 0 also holds 0. */
_Static_assert(PROBE_HIST_SLOTS == 32, "log2_slot's mask takes bit 5 of a log2 up to 63 as over");
static __always_inline __u32 log2_slot(__u64 v)
{
	__u32 s = log2_u64(v); /* at most 63 */

	/* The last bucket from 2^31 up, as a mask the verifier can bound: bit 5 set means over. */
	return (s | ((s >> 5) * (PROBE_HIST_SLOTS - 1))) & (PROBE_HIST_SLOTS - 1);
}

#endif
