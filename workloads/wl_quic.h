/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * msquic as the workload includes it, and what msquic says about itself
 * (wl_quic_report.c): its status names, and its counters, statistics,
 * settings and datapath as JSON, read through its API table. The
 * transport (wl_quic.c) moves the bytes and decides when to report.
 */
#ifndef WL_QUIC_H
#define WL_QUIC_H

/*
 * msquic's own library is built with both (src/core/precomp.h): BBR is a
 * preview value of QUIC_CONGESTION_CONTROL_ALGORITHM, and turning 1-RTT
 * encryption off (--encrypt off, as secnetperf -encrypt:0) an insecure one.
 */
#define QUIC_API_ENABLE_PREVIEW_FEATURES 1
#define QUIC_API_ENABLE_INSECURE_FEATURES 1
#include <msquic.h>

#include "wl.h"

/* "QUIC_STATUS_ABORTED" and the like; "QUIC_STATUS_UNKNOWN" otherwise. */
const char *wlq_status_name(QUIC_STATUS st);

/* The library's perf counters, as "perf_counters". */
void wlq_json_perf_counters(const QUIC_API_TABLE *api, struct wl_json *j);

/* Connection h's statistics (QUIC_STATISTICS_V2), as "conn_stats". */
void wlq_json_conn_stats(const QUIC_API_TABLE *api, HQUIC h, struct wl_json *j);

/* What connection h ran with, read back: the knobs qprof sets, as "conn_settings". */
void wlq_json_conn_settings(const QUIC_API_TABLE *api, HQUIC h, struct wl_json *j);

/* The offloads msquic's datapath found, its version and the file it was loaded from. */
void wlq_json_datapath(const QUIC_API_TABLE *api, struct wl_json *j);

#endif
