/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The TLS context of a transport over a QUIC library on BoringSSL
 * (quiche's, tquic's), each built against the BoringSSL its library
 * vendors: so inline here, compiled into each plugin against its own
 * headers, never into qprof-wl (whose OpenSSL has the same names).
 */
#ifndef WL_BORINGSSL_H
#define WL_BORINGSSL_H

#include <string.h>

#include <openssl/ssl.h>

#include "wl.h"

/* --proto's ALPN (wl_opts.alpn) in its wire form, a length byte first; set by wl_bssl_setup. */
static uint8_t wl_bssl_alpn[16];
static unsigned wl_bssl_alpn_len;

static inline int wl_bssl_alpn_select(SSL *ssl, const uint8_t **out, uint8_t *outlen,
				      const uint8_t *in, unsigned inlen, void *arg)
{
	(void)ssl, (void)arg;
	if (SSL_select_next_proto((uint8_t **)out, outlen, in, inlen, wl_bssl_alpn,
				  wl_bssl_alpn_len) != OPENSSL_NPN_NEGOTIATED)
		return SSL_TLSEXT_ERR_ALERT_FATAL;
	return SSL_TLSEXT_ERR_OK;
}

/*
 * ctx for the run: the server, the run's certificate and key and the ALPN
 * --proto names, chosen; the client, that ALPN offered, no chain check
 * (the run's certificate is self-signed; the handshake's signature is
 * checked) and, with --resume, new_session told of each session the
 * server's tickets give. 0, or an exit code after saying why.
 */
static inline int wl_bssl_setup(SSL_CTX *ctx, const struct wl_opts *o, bool server,
				int (*new_session)(SSL *, SSL_SESSION *))
{
	wl_bssl_alpn_len = (unsigned)(1 + strlen(o->alpn));
	wl_bssl_alpn[0] = (uint8_t)(wl_bssl_alpn_len - 1);
	memcpy(wl_bssl_alpn + 1, o->alpn, wl_bssl_alpn_len - 1);
	if (server) {
		if (SSL_CTX_use_certificate_chain_file(ctx, o->cert) != 1 ||
		    SSL_CTX_use_PrivateKey_file(ctx, o->key, SSL_FILETYPE_PEM) != 1 ||
		    SSL_CTX_check_private_key(ctx) != 1) {
			wl_warn("loading the server certificate %s and key %s failed", o->cert,
				o->key);
			return WL_EXIT_TLS_CONFIG;
		}
		SSL_CTX_set_alpn_select_cb(ctx, wl_bssl_alpn_select, NULL);
		return WL_EXIT_OK;
	}
	SSL_CTX_set_alpn_protos(ctx, wl_bssl_alpn, wl_bssl_alpn_len);
	SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
	if (o->resume) {
		SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT);
		SSL_CTX_sess_set_new_cb(ctx, new_session);
	}
	return WL_EXIT_OK;
}

#endif
