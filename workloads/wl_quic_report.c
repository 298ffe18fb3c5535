// SPDX-License-Identifier: GPL-2.0-only
/*
 * What msquic says about itself, as the workload reports it (wl_quic.h):
 * status names, perf counters, a connection's statistics and settings,
 * and the datapath's offloads, read through msquic's API table. The
 * transport (wl_quic.c) holds the connection these read against its
 * close.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "wl_quic.h"

/*
 * From msquicp.h (private, but answered by release builds): which offloads
 * msquic's datapath found when it probed the kernel at start-up.
 */
#define QPROF_PARAM_GLOBAL_DATAPATH_FEATURES 0x81000005
#define QPROF_FEATURE_RECV_COALESCING 0x00000002
#define QPROF_FEATURE_SEND_SEGMENTATION 0x00000004

/* clang-format off */
#define S(x) {QUIC_STATUS_##x, "QUIC_STATUS_" #x}
static const struct {
	QUIC_STATUS st;
	const char *name;
} status_names[] = {
	S(SUCCESS), S(OUT_OF_MEMORY), S(INVALID_PARAMETER), S(INVALID_STATE), S(NOT_SUPPORTED),
	S(NOT_FOUND), S(BUFFER_TOO_SMALL), S(HANDSHAKE_FAILURE), S(ABORTED), S(ADDRESS_IN_USE),
	S(INVALID_ADDRESS), S(CONNECTION_TIMEOUT), S(CONNECTION_IDLE), S(INTERNAL_ERROR),
	S(CONNECTION_REFUSED), S(PROTOCOL_ERROR), S(VER_NEG_ERROR), S(UNREACHABLE), S(TLS_ERROR),
	S(USER_CANCELED), S(ALPN_NEG_FAILURE), S(STREAM_LIMIT_REACHED), S(ADDRESS_NOT_AVAILABLE),
	S(BAD_CERTIFICATE), S(UNKNOWN_CERTIFICATE), S(REQUIRED_CERTIFICATE), S(CERT_EXPIRED),
	S(CERT_UNTRUSTED_ROOT), S(CERT_NO_CERT),
};
#undef S
/* clang-format on */

const char *wlq_status_name(QUIC_STATUS st)
{
	size_t i;

	for (i = 0; i < sizeof(status_names) / sizeof(status_names[0]); i++)
		if (status_names[i].st == st)
			return status_names[i].name;
	return "QUIC_STATUS_UNKNOWN";
}

/* clang-format off */
#define P(x, name) [QUIC_PERF_COUNTER_##x] = name
static const char *const perf_names[QUIC_PERF_COUNTER_MAX] = {
	P(CONN_CREATED, "conn_created"), P(CONN_HANDSHAKE_FAIL, "conn_handshake_fail"),
	P(CONN_PROTOCOL_ERRORS, "conn_protocol_errors"), P(PKTS_SUSPECTED_LOST, "pkts_suspected_lost"),
	P(PKTS_DROPPED, "pkts_dropped"), P(PKTS_DECRYPTION_FAIL, "pkts_decryption_fail"),
	P(UDP_RECV, "udp_recv"), P(UDP_SEND, "udp_send"), P(UDP_RECV_BYTES, "udp_recv_bytes"),
	P(UDP_SEND_BYTES, "udp_send_bytes"), P(UDP_RECV_EVENTS, "udp_recv_events"),
	P(UDP_SEND_CALLS, "udp_send_calls"), P(APP_SEND_BYTES, "app_send_bytes"),
	P(APP_RECV_BYTES, "app_recv_bytes"), P(CONN_OPER_QUEUED, "conn_oper_queued"),
	P(CONN_OPER_COMPLETED, "conn_oper_completed"), P(WORK_OPER_QUEUED, "work_oper_queued"),
	P(WORK_OPER_COMPLETED, "work_oper_completed"),
};
#undef P
/* clang-format on */

void wlq_json_perf_counters(const QUIC_API_TABLE *api, struct wl_json *j)
{
	uint64_t c[QUIC_PERF_COUNTER_MAX];
	uint32_t len = sizeof(c);
	struct wl_json p;
	int i;

	if (QUIC_FAILED(api->GetParam(NULL, QUIC_PARAM_GLOBAL_PERF_COUNTERS, &len, c)))
		return;
	wl_json_begin(&p);
	for (i = 0; i < QUIC_PERF_COUNTER_MAX; i++)
		if (perf_names[i])
			wl_json_u64(&p, perf_names[i], c[i]);
	wl_json_raw(j, "perf_counters", wl_json_end(&p));
}

void wlq_json_conn_stats(const QUIC_API_TABLE *api, HQUIC h, struct wl_json *j)
{
	QUIC_STATISTICS_V2 st;
	uint32_t len = sizeof(st);
	struct wl_json p;

	if (QUIC_FAILED(api->GetParam(h, QUIC_PARAM_CONN_STATISTICS_V2, &len, &st)))
		return;
	wl_json_begin(&p);
	wl_json_u64(&p, "rtt_us", st.Rtt);
	wl_json_u64(&p, "min_rtt_us", st.MinRtt);
	wl_json_u64(&p, "send_path_mtu", st.SendPathMtu);
	wl_json_u64(&p, "send_total_packets", st.SendTotalPackets);
	wl_json_u64(&p, "send_retransmittable_packets", st.SendRetransmittablePackets);
	wl_json_u64(&p, "send_suspected_lost_packets", st.SendSuspectedLostPackets);
	wl_json_u64(&p, "send_spurious_lost_packets", st.SendSpuriousLostPackets);
	wl_json_u64(&p, "send_total_bytes", st.SendTotalBytes);
	wl_json_u64(&p, "send_total_stream_bytes", st.SendTotalStreamBytes);
	wl_json_u64(&p, "send_congestion_count", st.SendCongestionCount);
	wl_json_u64(&p, "send_persistent_congestion_count", st.SendPersistentCongestionCount);
	wl_json_u64(&p, "send_congestion_window", st.SendCongestionWindow);
	wl_json_u64(&p, "recv_total_packets", st.RecvTotalPackets);
	wl_json_u64(&p, "recv_reordered_packets", st.RecvReorderedPackets);
	wl_json_u64(&p, "recv_dropped_packets", st.RecvDroppedPackets);
	wl_json_u64(&p, "recv_duplicate_packets", st.RecvDuplicatePackets);
	wl_json_u64(&p, "recv_total_bytes", st.RecvTotalBytes);
	wl_json_u64(&p, "recv_total_stream_bytes", st.RecvTotalStreamBytes);
	wl_json_u64(&p, "recv_decryption_failures", st.RecvDecryptionFailures);
	wl_json_u64(&p, "recv_valid_ack_frames", st.RecvValidAckFrames);
	wl_json_raw(j, "conn_stats", wl_json_end(&p));
}

void wlq_json_datapath(const QUIC_API_TABLE *api, struct wl_json *j)
{
	uint32_t f = 0, len = sizeof(f);
	uint32_t v[4] = {0};
	uint32_t vlen = sizeof(v), hlen;
	char ver[48], hash[65] = {0}, path[PATH_MAX];
	Dl_info info;

	if (QUIC_SUCCEEDED(api->GetParam(NULL, QPROF_PARAM_GLOBAL_DATAPATH_FEATURES, &len, &f))) {
		wl_json_bool(j, "send_segmentation", f & QPROF_FEATURE_SEND_SEGMENTATION);
		wl_json_bool(j, "recv_coalescing", f & QPROF_FEATURE_RECV_COALESCING);
	}
	if (QUIC_SUCCEEDED(api->GetParam(NULL, QUIC_PARAM_GLOBAL_LIBRARY_VERSION, &vlen, v))) {
		snprintf(ver, sizeof(ver), "%u.%u.%u", v[0], v[1], v[2]);
		wl_json_str(j, "msquic_version", ver);
	}
	hlen = sizeof(hash) - 1;
	if (QUIC_SUCCEEDED(api->GetParam(NULL, QUIC_PARAM_GLOBAL_LIBRARY_GIT_HASH, &hlen, hash))) {
		hash[sizeof(hash) - 1] = 0;
		wl_json_str(j, "msquic_git_hash", hash);
	}
	/* The file the loader took it from (--msquic: the user's build, proved). */
	if (dladdr((void *)MsQuicOpenVersion, &info) && info.dli_fname &&
	    realpath(info.dli_fname, path))
		wl_json_str(j, "msquic_library", path);
}

void wlq_json_conn_settings(const QUIC_API_TABLE *api, HQUIC h, struct wl_json *j)
{
	QUIC_SETTINGS set = {0};
	uint32_t len = sizeof(set), blen = sizeof(BOOLEAN);
	BOOLEAN off = 0;
	struct wl_json p;
	bool ok_enc;

	if (QUIC_FAILED(api->GetParam(h, QUIC_PARAM_CONN_SETTINGS, &len, &set)))
		return;
	ok_enc = QUIC_SUCCEEDED(
		api->GetParam(h, QUIC_PARAM_CONN_DISABLE_1RTT_ENCRYPTION, &blen, &off));
	wl_json_begin(&p);
	wl_json_bool(&p, "pacing", set.PacingEnabled);
	wl_json_str(&p, "congestion_control",
		    set.CongestionControlAlgorithm == QUIC_CONGESTION_CONTROL_ALGORITHM_BBR
			    ? "bbr"
			    : "cubic");
	wl_json_bool(&p, "ecn", set.EcnEnabled);
	wl_json_u64(&p, "maximum_mtu", set.MaximumMtu);
	/* After the handshake: off only if both ends asked (msquic's connection.c). */
	if (ok_enc)
		wl_json_bool(&p, "encryption", !off);
	wl_json_raw(j, "conn_settings", wl_json_end(&p));
}
