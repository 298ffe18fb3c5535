/* Kernel-side helpers shared by qprof's probes. */
#ifndef QPROF_COMMON_BPF_H
#define QPROF_COMMON_BPF_H

#include "probe_common.h"

/*
 * The processes a probe watches: tgid -> 1, filled by user space before the
 * window. Filtering in the kernel keeps the rest of the machine's events
 * out of every map.
 */
#define DEFINE_TARGET_TGIDS                                         \
	struct {                                                    \
		__uint(type, BPF_MAP_TYPE_HASH);                    \
		__uint(max_entries, PROBE_MAX_PIDS);                \
		__type(key, __u32);                                 \
		__type(value, __u8);                                \
	} target_tgids SEC(".maps");                                \
	static __always_inline bool is_target(__u32 tgid)           \
	{                                                           \
		return bpf_map_lookup_elem(&target_tgids, &tgid) != NULL; \
	}

static __always_inline __u32 log2_u64(__u64 v)
{
	__u32 r = 0;

	if (v >> 32) { v >>= 32; r += 32; }
	if (v >> 16) { v >>= 16; r += 16; }
	if (v >> 8)  { v >>= 8;  r += 8; }
	if (v >> 4)  { v >>= 4;  r += 4; }
	if (v >> 2)  { v >>= 2;  r += 2; }
	if (v >> 1)  { r += 1; }
	return r;
}

/* Bucket i holds values in [2^i, 2^(i+1)); bucket 0 also holds 0. */
static __always_inline __u32 log2_slot(__u64 v)
{
	__u32 s = log2_u64(v);

	return s < PROBE_HIST_SLOTS ? s : PROBE_HIST_SLOTS - 1;
}

#endif
