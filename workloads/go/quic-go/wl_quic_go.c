// SPDX-License-Identifier: GPL-2.0-only
/*
 * quic-go's transport as qprof-wl sees it: the struct wl_transport that
 * wl_plugin.c finds as wl_quic_go, each call a Go function of
 * transport.go (exported by cgo, declared in _cgo_export.h). C holds the
 * table because a Go file that exports functions may only declare C.
 */
#include "_cgo_export.h"
#include "wl_quic_go.h"

static int t_init(const struct wl_opts *o, bool server)
{
	return goInit((struct wl_opts *)o, server);
}

static int t_listen(const struct wl_accept *a)
{
	return goListen((struct wl_accept *)a);
}

static int t_connect(const struct wl_conn_handlers *h, void *ctx, unsigned flags,
		     struct wl_conn **out)
{
	return goConnect((struct wl_conn_handlers *)h, (uintptr_t)ctx, flags, out);
}

static int t_open(struct wl_conn *c, const struct wl_stream_handlers *h, void *ctx, unsigned flags,
		  struct wl_stream **out)
{
	return goOpen(c, (struct wl_stream_handlers *)h, (uintptr_t)ctx, flags, out);
}

static int t_send(struct wl_stream *s, const uint8_t *hdr, uint32_t hdr_len, const uint8_t *body,
		  uint32_t body_len, unsigned flags, void *tag)
{
	return goSend(s, (uint8_t *)hdr, hdr_len, (uint8_t *)body, body_len, flags, (uintptr_t)tag);
}

static void t_json_done(struct wl_json *j, const struct wl_end *last)
{
	if (last && last->closed_by_transport)
		wl_json_str(j, "transport_status", last->transport_status);
	if (last && last->closed_by_peer)
		wl_json_u64(j, "peer_error_code", last->peer_error);
	goJsonConnected(j);
	goJsonMark(j);
}

const struct wl_transport wl_quic_go = {
	.name = "quic-go",
	.multistream = true,
	.early_data = true,
	.init = t_init,
	.setup = goSetup,
	.listen = t_listen,
	.listen_stop = goListenStop,
	.connect = t_connect,
	.open = t_open,
	.send = t_send,
	.room = goRoom,
	.abort = goAbort,
	.close = goClose,
	.stream_id = goStreamID,
	.conn_info = goConnInfo,
	.json_connected = goJsonConnected,
	.json_mark = goJsonMark,
	.json_done = t_json_done,
	.fini = goFini,
};
