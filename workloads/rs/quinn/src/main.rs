// SPDX-License-Identifier: GPL-2.0-only
//! qprof-wl-quinn: qprof's workload on quinn, speaking qprof-wl's protocol
//! (wlproto). Bulk (the client sends on --streams unidirectional streams
//! of one connection, the server checks every byte) and download (--count
//! connections one after another, each a request on one bidirectional
//! stream answered with --size bytes of the pattern) and rr (requests and
//! their responses on one connection, on a bidirectional stream each or
//! all on one; wlproto::rr holds the schedule, the message and its check).
//!
//! The configuration, recorded in the "connected" event: TLS 1.3 with
//! AES-128-GCM only, rustls on its default provider (aws-lc-rs); GSO and
//! GRO as quinn-udp finds them (qprof's interposer turns either off, as
//! for msquic); flow-control windows that never limit a transfer on one
//! host (RECEIVE_WINDOW, STREAM_WINDOW, SEND_WINDOW); quinn's defaults
//! otherwise. One thread: tokio's current-thread runtime runs the
//! endpoint's driver and the streams, as quinn's own perf tool can.

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn::{Connection, ConnectionError, Endpoint, ReadError, RecvStream, SendStream, TransportConfig, VarInt};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CipherSuite, DigitallySignedStruct, SignatureScheme};
use serde_json::{json, Map, Value};
use tokio::io::unix::AsyncFd;
use tokio::sync::{watch, Notify};
use tokio::task::JoinSet;
use wlproto::rr::{Rr, RxMsg, Schedule};
use wlproto::{exit, now_ns, Download, Role};

const ALPN: &[u8] = b"qprof";
const SERVER_NAME: &str = "qprof";
/// The connection's window: unlimited (quinn's VarInt::MAX).
const RECEIVE_WINDOW: VarInt = VarInt::MAX;
/// Each stream's window and what a sender may have unacknowledged: far
/// above any bandwidth-delay product between two namespaces or a --link.
const STREAM_WINDOW: u32 = 16 << 20;
const SEND_WINDOW: u64 = 64 << 20;
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// rr: the server's limit on the client's open bidirectional streams
/// (qprof-wl's RR_PEER_STREAMS); an open loop may have many requests out.
const RR_PEER_STREAMS: u32 = 1024;
/// rr: the application codes the client closes with (qprof-wl's
/// WL_CLOSE_OK, WL_CLOSE_ERROR, WL_CLOSE_VERIFY).
const CLOSE_OK: u32 = 0;
const CLOSE_ERROR: u32 = 1;
const CLOSE_VERIFY: u32 = 2;
/// The server's limit on the client's bidirectional streams, when it set one (rr).
static PEER_BIDI_STREAMS: OnceLock<u32> = OnceLock::new();
/// What the reports say of this process's set-up, found before anything is
/// measured (main): GSO and GRO segments, rustls's key exchange groups.
struct Setup {
    offload: (usize, usize),
    key_exchange: Vec<String>,
}
static SETUP: std::sync::OnceLock<Setup> = std::sync::OnceLock::new();
/// The socket buffers asked for, each way: quinn's perf tool's default.
const SOCKET_BUFFER: usize = 2 << 20;
/// What the kernel granted (send, receive).
static SOCKET_BUFFERS: std::sync::OnceLock<(usize, usize)> = std::sync::OnceLock::new();

type Stop = watch::Receiver<bool>;

fn main() {
    // aws-lc seeds its jitter entropy source on the first random draw:
    // ~40 ms of CPU here, which would land in the first handshake. Drawn
    // now, before anything is measured, as msquic's set-up is; so is what
    // the reports say of GSO, GRO and the key exchange, asked once.
    if provider().secure_random.fill(&mut [0u8; 16]).is_err() {
        wlproto::warn("aws-lc's random source failed");
        std::process::exit(exit::LIB_OPEN);
    }
    let _ = SETUP.set(Setup {
        offload: offload(),
        key_exchange: provider().kx_groups.iter().map(|g| format!("{:?}", g.name())).collect(),
    });
    let lib = Quinn::default();
    let role = Role::begin("quinn", Box::new(lib.clone()));
    let code = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt.block_on(run(role, lib)),
        Err(e) => {
            role.fail(exit::INTERNAL, format!("cannot start tokio's runtime: {e}"));
            exit::INTERNAL
        }
    };
    std::process::exit(role.done(code));
}

async fn run(role: &'static Role, lib: Quinn) -> i32 {
    let (tx, stop) = watch::channel(false);
    role.on_stop(Box::new(move || {
        let _ = tx.send(true);
    }));
    let ip: IpAddr = match role.opts.addr.parse() {
        Ok(ip) => ip,
        Err(_) => return usage(role, format!("--addr {} is not an IP address", role.opts.addr)),
    };
    let addr = SocketAddr::new(ip, role.opts.port);
    let r = if role.server() {
        server(role, lib, addr, stop).await
    } else {
        client(role, lib, addr, stop).await
    };
    match r {
        Ok(()) => exit::OK,
        Err((code, why)) => {
            role.fail(code, why);
            code
        }
    }
}

fn usage(role: &Role, why: String) -> i32 {
    role.fail(exit::USAGE, why);
    exit::USAGE
}

type Fail = (i32, String);

// ------------------------------------------------------------ configuration

fn provider() -> Arc<CryptoProvider> {
    let mut p = rustls::crypto::aws_lc_rs::default_provider();
    p.cipher_suites
        .retain(|s| s.suite() == CipherSuite::TLS13_AES_128_GCM_SHA256);
    Arc::new(p)
}

/// peer_bidi: the bidirectional streams the peer may open at once (None: quinn's default).
fn transport(peer_bidi: Option<u32>) -> Arc<TransportConfig> {
    let mut t = TransportConfig::default();
    t.receive_window(RECEIVE_WINDOW)
        .stream_receive_window(VarInt::from_u32(STREAM_WINDOW))
        .send_window(SEND_WINDOW)
        .max_concurrent_uni_streams(VarInt::from_u32(wlproto::MAX_STREAMS as u32))
        .max_idle_timeout(Some(IDLE_TIMEOUT.try_into().unwrap()));
    if let Some(n) = peer_bidi {
        t.max_concurrent_bidi_streams(VarInt::from_u32(n));
        let _ = PEER_BIDI_STREAMS.set(n);
    }
    Arc::new(t)
}

fn server_config(role: &Role) -> Result<quinn::ServerConfig, Fail> {
    let tls = |what: &str, e: &dyn std::fmt::Display| (exit::TLS_CONFIG, format!("{what}: {e}"));
    let (Some(cert), Some(key)) = (&role.opts.cert, &role.opts.key) else {
        return Err((exit::USAGE, "the server needs --cert and --key".into()));
    };
    let certs: Vec<CertificateDer> = CertificateDer::pem_file_iter(cert)
        .and_then(|it| it.collect())
        .map_err(|e| tls(&format!("cannot read the certificate {cert}"), &e))?;
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| tls(&format!("cannot read the key {key}"), &e))?;
    let mut c = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| tls("rustls refuses TLS 1.3", &e))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| tls("rustls refuses the certificate", &e))?;
    c.alpn_protocols = vec![ALPN.to_vec()];
    let q = QuicServerConfig::try_from(c).map_err(|e| tls("quinn refuses the TLS configuration", &e))?;
    let mut s = quinn::ServerConfig::with_crypto(Arc::new(q));
    s.transport_config(transport(role.opts.rr().then_some(RR_PEER_STREAMS)));
    Ok(s)
}

/// The client checks the server's signature over the handshake, as every
/// TLS client must, but not its certificate's chain: the run's certificate
/// is self-signed (qprof-wl's msquic client: NO_CERTIFICATE_VALIDATION).
#[derive(Debug)]
struct NoChain(Arc<CryptoProvider>);

impl ServerCertVerifier for NoChain {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

fn client_config() -> Result<quinn::ClientConfig, Fail> {
    let tls = |what: &str, e: &dyn std::fmt::Display| (exit::TLS_CONFIG, format!("{what}: {e}"));
    let p = provider();
    let mut c = rustls::ClientConfig::builder_with_provider(p.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| tls("rustls refuses TLS 1.3", &e))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(NoChain(p)))
        .with_no_client_auth();
    c.alpn_protocols = vec![ALPN.to_vec()];
    let q = QuicClientConfig::try_from(c).map_err(|e| tls("quinn refuses the TLS configuration", &e))?;
    let mut cc = quinn::ClientConfig::new(Arc::new(q));
    cc.transport_config(transport(None));
    Ok(cc)
}

// ------------------------------------------------------------ what it says of itself

/// quinn's counters that add up over connections (a download's many).
const COUNTERS: [&str; 10] = [
    "udp_tx_datagrams",
    "udp_tx_bytes",
    "udp_tx_ios",
    "udp_rx_datagrams",
    "udp_rx_bytes",
    "udp_rx_ios",
    "sent_packets",
    "lost_packets",
    "lost_bytes",
    "congestion_events",
];

fn counts(c: &Connection) -> [u64; 10] {
    let s = c.stats();
    [
        s.udp_tx.datagrams,
        s.udp_tx.bytes,
        s.udp_tx.ios,
        s.udp_rx.datagrams,
        s.udp_rx.bytes,
        s.udp_rx.ios,
        s.path.sent_packets,
        s.path.lost_packets,
        s.path.lost_bytes,
        s.path.congestion_events,
    ]
}

/// quinn's figures for marks and reports, as quinn counts them: the
/// role's connections' statistics summed (those gone, and the one open),
/// and the open one's levels (cwnd, RTT, MTU).
#[derive(Default, Clone)]
struct Quinn {
    conns: Arc<Mutex<Conns>>,
}

#[derive(Default)]
struct Conns {
    open: Option<Connection>,
    gone: [u64; 10],
}

impl Quinn {
    fn track(&self, c: &Connection) {
        self.conns.lock().unwrap().open = Some(c.clone());
    }

    /// A connection is over: its counts join those gone.
    fn retire(&self, c: &Connection) {
        let mut g = self.conns.lock().unwrap();
        if g.open.as_ref().is_some_and(|o| o.stable_id() == c.stable_id()) {
            g.open = None;
        }
        for (t, n) in g.gone.iter_mut().zip(counts(c)) {
            *t += n;
        }
    }
}

impl wlproto::Stack for Quinn {
    fn counters(&self, out: &mut Map<String, Value>) {
        let g = self.conns.lock().unwrap();
        let mut sum = g.gone;
        let mut m = Map::new();
        if let Some(c) = &g.open {
            for (t, n) in sum.iter_mut().zip(counts(c)) {
                *t += n;
            }
            let p = c.stats().path;
            m.insert("cwnd".into(), p.cwnd.into());
            m.insert("rtt_us".into(), (p.rtt.as_micros() as u64).into());
            m.insert("current_mtu".into(), p.current_mtu.into());
        }
        for (k, v) in COUNTERS.iter().zip(sum) {
            m.insert((*k).into(), v.into());
        }
        out.insert("quic_stats".into(), Value::Object(m));
    }

    fn describe(&self, out: &mut Map<String, Value>) {
        let Some(setup) = SETUP.get() else { return };
        let (gso, gro) = setup.offload;
        out.insert("send_segmentation".into(), (gso > 1).into());
        out.insert("recv_coalescing".into(), (gro > 1).into());
        out.insert(
            "quic_library".into(),
            json!({
                "name": "quinn",
                "version": env!("QPROF_QUINN_VERSION"),
                "crypto": format!("rustls {} on aws-lc-rs {}", env!("QPROF_RUSTLS_VERSION"), env!("QPROF_AWS_LC_RS_VERSION")),
                "cipher": "TLS13_AES_128_GCM_SHA256",
                // The provider's key exchange groups, most preferred first (rustls's defaults).
                "key_exchange": setup.key_exchange,
            }),
        );
        out.insert(
            "quic_settings".into(),
            json!({
                "receive_window": RECEIVE_WINDOW.into_inner(),
                "stream_receive_window": STREAM_WINDOW,
                "send_window": SEND_WINDOW,
                "socket_send_buffer": SOCKET_BUFFERS.get().map(|b| b.0),
                "socket_recv_buffer": SOCKET_BUFFERS.get().map(|b| b.1),
            }),
        );
        if let (Some(n), Some(Value::Object(q))) = (PEER_BIDI_STREAMS.get(), out.get_mut("quic_settings")) {
            q.insert("max_concurrent_bidi_streams".into(), (*n).into());
        }
    }
}

/// GSO and GRO as quinn-udp finds them on a socket of this process (the
/// endpoint's own socket was set up the same way, through the same calls
/// qprof's interposer steers): its segments per send and per receive.
fn offload() -> (usize, usize) {
    let Ok(sock) = std::net::UdpSocket::bind("0.0.0.0:0") else {
        return (1, 1);
    };
    match quinn_udp::UdpSocketState::new((&sock).into()) {
        Ok(s) => (s.max_gso_segments(), s.gro_segments()),
        Err(_) => (1, 1),
    }
}

/// The endpoint's socket, bound, with SOCKET_BUFFER asked of the kernel
/// each way, as quinn's perf tool asks (the kernel caps it at
/// net.core.[rw]mem_max; the record gives what it granted).
fn bind(addr: SocketAddr) -> std::io::Result<std::net::UdpSocket> {
    let sock = std::net::UdpSocket::bind(addr)?;
    let state = quinn_udp::UdpSocketState::new((&sock).into())?;
    state.set_send_buffer_size((&sock).into(), SOCKET_BUFFER)?;
    state.set_recv_buffer_size((&sock).into(), SOCKET_BUFFER)?;
    let granted = (
        state.send_buffer_size((&sock).into())?,
        state.recv_buffer_size((&sock).into())?,
    );
    let _ = SOCKET_BUFFERS.set(granted);
    Ok(sock)
}

fn endpoint(sock: std::net::UdpSocket, server: Option<quinn::ServerConfig>) -> Result<Endpoint, Fail> {
    Endpoint::new(
        quinn::EndpointConfig::default(),
        server,
        sock,
        Arc::new(quinn::TokioRuntime),
    )
    .map_err(|e| (exit::INTERNAL, format!("quinn cannot make its endpoint: {e}")))
}

// ------------------------------------------------------------ server

async fn server(role: &'static Role, lib: Quinn, addr: SocketAddr, stop: Stop) -> Result<(), Fail> {
    let cfg = server_config(role)?;
    let sock = bind(addr).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AddrInUse {
            (exit::ADDR_IN_USE, format!("UDP port {addr} is already in use"))
        } else {
            (exit::INTERNAL, format!("cannot listen on UDP {addr}: {e}"))
        }
    })?;
    let ep = endpoint(sock, Some(cfg))?;
    role.ready();
    let r = if role.opts.rr() {
        rr_server(role, &lib, &ep, stop).await
    } else if role.opts.download() {
        download_server(role, &lib, &ep, stop).await
    } else {
        bulk_server(role, &lib, &ep, stop).await
    };
    ep.close(0u32.into(), b"");
    ep.wait_idle().await;
    r
}

async fn accept(ep: &Endpoint, mut stop: Stop) -> Option<Result<Connection, ConnectionError>> {
    tokio::select! {
        inc = ep.accept() => match inc?.accept() {
            Ok(connecting) => Some(connecting.await),
            Err(e) => Some(Err(e)),
        },
        _ = stop.wait_for(|s| *s) => None,
    }
}

fn lost(role: &Role, what: &str, e: impl std::fmt::Display) -> Fail {
    (
        exit::CONN_LOST,
        format!(
            "QUIC connection {} lost {what}: {e}",
            if role.server() {
                "from the client"
            } else {
                "to the server"
            }
        ),
    )
}

async fn bulk_server(role: &'static Role, lib: &Quinn, ep: &Endpoint, stop: Stop) -> Result<(), Fail> {
    let conn = match accept(ep, stop).await {
        None => return Ok(()),
        Some(r) => r.map_err(|e| (exit::HANDSHAKE, format!("QUIC handshake with a client failed: {e}")))?,
    };
    lib.track(&conn);
    role.connected(now_ns());
    let mut streams = JoinSet::new();
    for _ in 0..role.opts.streams {
        let rs = conn
            .accept_uni()
            .await
            .map_err(|e| lost(role, "before its streams opened", e))?;
        let idx = role.streams_seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        streams.spawn(receive(role, rs, idx));
    }
    while let Some(r) = streams.join_next().await {
        r.map_err(|e| (exit::INTERNAL, format!("a stream's task failed: {e}")))??;
    }
    role.t_transfer_done_ns
        .store(now_ns(), std::sync::atomic::Ordering::SeqCst);
    // The client closes once every stream is acknowledged, with code 0.
    match conn.closed().await {
        ConnectionError::ApplicationClosed(c) if c.error_code == VarInt::from_u32(0) => Ok(()),
        e => Err(lost(role, "at the end", e)),
    }
}

/// A bulk stream, checked byte by byte as quinn hands its chunks over, in order.
async fn receive(role: &'static Role, mut rs: quinn::RecvStream, idx: usize) -> Result<(), Fail> {
    let counted = &role.stream_bytes[idx.min(wlproto::MAX_STREAMS - 1)];
    loop {
        match rs.read_chunk(usize::MAX, true).await {
            Ok(Some(c)) => {
                if !role.pattern.check(c.offset, &c.bytes) {
                    role.verify_failed(
                        role.pattern.first_bad(c.offset, &c.bytes),
                        idx as u64,
                        "verify_fail_stream",
                    );
                    return Err((exit::VERIFY, "stream failed the content check".into()));
                }
                counted.fetch_add(c.bytes.len() as u64, std::sync::atomic::Ordering::Relaxed);
            }
            Ok(None) => {
                role.streams_done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                return Ok(());
            }
            Err(e) => return Err(lost(role, &format!("on stream {idx}"), e)),
        }
    }
}

async fn download_server(role: &'static Role, lib: &Quinn, ep: &Endpoint, stop: Stop) -> Result<(), Fail> {
    let mut i = 0u64;
    let mut served = JoinSet::new();
    while !role.stopping() && i < role.opts.count {
        let Some(conn) = accept(ep, stop.clone()).await else {
            break;
        };
        let conn = conn.map_err(|e| (exit::HANDSHAKE, format!("QUIC handshake with a client failed: {e}")))?;
        lib.track(&conn);
        role.connected(now_ns());
        served.spawn(serve(role, lib.clone(), conn, i));
        i += 1;
        // Strictly one after another, as the client downloads.
        if let Some(r) = served.join_next().await {
            r.map_err(|e| (exit::INTERNAL, format!("a download's task failed: {e}")))??;
        }
    }
    Ok(())
}

async fn serve(role: &'static Role, lib: Quinn, conn: Connection, i: u64) -> Result<(), Fail> {
    let (mut tx, mut rx) = conn
        .accept_bi()
        .await
        .map_err(|e| lost(role, "before its request", e))?;
    let mut req = [0u8; wlproto::DL_REQUEST_LEN];
    rx.read_exact(&mut req)
        .await
        .map_err(|e| lost(role, "in its request", e))?;
    let size = u64::from_le_bytes(req);
    send_pattern(role, &mut tx, size, 0).await?;
    tx.finish().map_err(|e| lost(role, "at its FIN", e))?;
    let _ = tx.stopped().await;
    // The client closes once it has every byte.
    let end = conn.closed().await;
    if !matches!(end, ConnectionError::ApplicationClosed(_)) {
        return Err(lost(role, &format!("in download {i}"), end));
    }
    role.downloads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    role.app_bytes.fetch_add(size, std::sync::atomic::Ordering::Relaxed);
    lib.retire(&conn);
    let s = conn.stats();
    Download {
        i,
        bytes: size,
        counters: Some((None, s.path.lost_packets, s.path.sent_packets, s.udp_rx.datagrams)),
        ..Default::default()
    }
    .emit("served");
    Ok(())
}

/// Sends `limit` bytes of the pattern (0: until `t_end` or "stop"), io_size
/// a call, straight out of the pattern region (no copy until quinn packs
/// them into packets). `count`: add them to the role's app_bytes as they go.
async fn send_pattern(role: &Role, tx: &mut quinn::SendStream, limit: u64, t_end: u64) -> Result<u64, Fail> {
    let io = role.opts.io_size as u64;
    let region = Bytes::from_static(role.pattern.region());
    let period = region.len() as u64;
    let mut off = 0u64;
    while limit == 0 || off < limit {
        if role.stopping() || (t_end != 0 && now_ns() >= t_end) {
            break;
        }
        let n = if limit == 0 { io } else { io.min(limit - off) };
        let start = (off % period) as usize;
        tx.write_chunk(region.slice(start..start + n as usize))
            .await
            .map_err(|e| lost(role, "while sending", e))?;
        off += n;
        if !role.opts.download() {
            role.app_bytes.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        }
    }
    Ok(off)
}

// ------------------------------------------------------------ client

async fn client(role: &'static Role, lib: Quinn, addr: SocketAddr, stop: Stop) -> Result<(), Fail> {
    let any: IpAddr = if addr.is_ipv6() {
        "::".parse().unwrap()
    } else {
        "0.0.0.0".parse().unwrap()
    };
    let sock = bind(SocketAddr::new(any, 0)).map_err(|e| (exit::INTERNAL, format!("cannot open a UDP socket: {e}")))?;
    let mut ep = endpoint(sock, None)?;
    ep.set_default_client_config(client_config()?);
    let r = if role.opts.rr() {
        rr_client(role, &lib, &ep, addr, stop).await
    } else if role.opts.download() {
        download_client(role, &lib, &ep, addr).await
    } else {
        bulk_client(role, &lib, &ep, addr, stop).await
    };
    ep.wait_idle().await;
    r
}

async fn connect(ep: &Endpoint, addr: SocketAddr) -> Result<Connection, Fail> {
    let hs = |e: &dyn std::fmt::Display| (exit::HANDSHAKE, format!("QUIC handshake with {addr} failed: {e}"));
    ep.connect(addr, SERVER_NAME)
        .map_err(|e| hs(&e))?
        .await
        .map_err(|e| hs(&e))
}

async fn bulk_client(
    role: &'static Role,
    lib: &Quinn,
    ep: &Endpoint,
    addr: SocketAddr,
    _stop: Stop,
) -> Result<(), Fail> {
    let conn = connect(ep, addr).await?;
    lib.track(&conn);
    let t0 = now_ns();
    role.connected(t0);
    let t_end = if role.opts.duration_ms > 0 {
        t0 + role.opts.duration_ms * 1_000_000
    } else {
        0
    };
    let mut streams = JoinSet::new();
    for i in 0..role.opts.streams {
        let mut tx = conn
            .open_uni()
            .await
            .map_err(|e| lost(role, &format!("opening stream {i}"), e))?;
        streams.spawn(async move {
            send_pattern(role, &mut tx, role.opts.bytes, t_end).await?;
            tx.finish().map_err(|e| lost(role, "at a stream's FIN", e))?;
            // Every byte acknowledged and read: the server's check is done.
            tx.stopped()
                .await
                .map_err(|e| lost(role, "before the server read a stream", e))?;
            role.streams_done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok::<(), Fail>(())
        });
    }
    while let Some(r) = streams.join_next().await {
        r.map_err(|e| (exit::INTERNAL, format!("a stream's task failed: {e}")))??;
    }
    role.t_transfer_done_ns
        .store(now_ns(), std::sync::atomic::Ordering::SeqCst);
    conn.close(0u32.into(), b"done");
    Ok(())
}

async fn download_client(role: &'static Role, lib: &Quinn, ep: &Endpoint, addr: SocketAddr) -> Result<(), Fail> {
    let size = role.opts.size;
    for i in 0..role.opts.count {
        if role.stopping() {
            break;
        }
        let mut d = Download {
            i,
            bytes: 0,
            t_connect: now_ns(),
            ..Default::default()
        };
        let conn = connect(ep, addr).await?;
        d.t_handshake = now_ns();
        lib.track(&conn);
        role.connected(d.t_handshake);
        let (mut tx, mut rx) = conn.open_bi().await.map_err(|e| lost(role, "opening its stream", e))?;
        tx.write_all(&size.to_le_bytes())
            .await
            .map_err(|e| lost(role, "sending its request", e))?;
        tx.finish().map_err(|e| lost(role, "at its request's FIN", e))?;
        loop {
            match rx.read_chunk(usize::MAX, true).await {
                Ok(Some(c)) => {
                    if d.t_first_byte == 0 {
                        d.t_first_byte = now_ns();
                    }
                    if !role.pattern.check(c.offset, &c.bytes) || c.offset + c.bytes.len() as u64 > size {
                        role.verify_failed(role.pattern.first_bad(c.offset, &c.bytes), i, "verify_fail_download");
                        return Err((exit::VERIFY, "a download failed the content check".into()));
                    }
                    d.bytes += c.bytes.len() as u64;
                    role.app_bytes
                        .fetch_add(c.bytes.len() as u64, std::sync::atomic::Ordering::Relaxed);
                }
                Ok(None) => break,
                Err(e) => return Err(lost(role, &format!("in download {i}"), e)),
            }
        }
        if d.bytes != size {
            role.verify_failed(d.bytes, i, "verify_fail_download");
            return Err((
                exit::VERIFY,
                format!("download {i} ended after {} of {size} bytes", d.bytes),
            ));
        }
        d.t_complete = now_ns();
        conn.close(0u32.into(), b"done");
        let s = conn.stats();
        d.counters = Some((None, s.path.lost_packets, s.path.sent_packets, s.udp_rx.datagrams));
        lib.retire(&conn);
        role.downloads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        d.emit("download");
    }
    role.t_transfer_done_ns
        .store(now_ns(), std::sync::atomic::Ordering::SeqCst);
    Ok(())
}

// ------------------------------------------------------------ rr

/// The role's rr figures (Some with --pattern rr, which alone calls here).
fn rr_of(role: &'static Role) -> &'static Rr {
    role.rr.as_ref().expect("--pattern rr")
}

/// Request or response `seq` as quinn takes it: its header (8 bytes, the
/// one copy), then its body straight out of the pattern region.
fn rr_chunks(role: &'static Role, rr: &Rr, seq: u64) -> [Bytes; 2] {
    let (hdr, body) = rr.message(&role.pattern, seq);
    [Bytes::copy_from_slice(&hdr), Bytes::from_static(body)]
}

/// wlproto's timerfd on tokio's reactor: the rr client wakes at its
/// requests' due times to the microsecond (tokio's own timer rounds a
/// deadline up to its next millisecond).
struct Timer {
    fd: AsyncFd<wlproto::Timerfd>,
}

impl Timer {
    fn new() -> std::io::Result<Timer> {
        // SAFETY: the Timerfd owns its fd for as long as the AsyncFd holds it.
        let fd = unsafe { AsyncFd::register_with_interest(wlproto::Timerfd::new()?, tokio::io::Interest::READABLE) }?;
        Ok(Timer { fd })
    }

    /// Fire once at `at` (CLOCK_MONOTONIC ns; a time past fires at once), or never (None).
    fn arm(&mut self, at: Option<u64>) -> std::io::Result<()> {
        self.fd.get_mut().arm(at)
    }

    /// The time armed has come (cancel safe: a fire not waited for stays
    /// readable). Its count is not read: tokio waits edge-triggered, and
    /// arming again resets it.
    async fn fired(&mut self) -> std::io::Result<()> {
        let mut g = self.fd.readable_mut().await?;
        g.clear_ready();
        g.get_inner_mut().fired();
        Ok(())
    }
}

/// The rr client's one connection, as its tasks share it: the loop (the
/// schedule), the sender (requests to quinn, oldest first) and the readers
/// (a stream per request, or the one stream's).
struct RrClient {
    conn: Connection,
    q: Mutex<RrQueue>,
    /// The sender: a request is held.
    more: Notify,
    /// The loop: every request sent is answered, while it drains.
    idle: Notify,
    draining: AtomicBool,
    /// The loop closes the connection: what fails from here on is its doing.
    closing: AtomicBool,
    /// Closed loop: the next request's sequence number.
    next_seq: AtomicU64,
}

#[derive(Default)]
struct RrQueue {
    /// Requests due, not yet handed to quinn, oldest first.
    held: VecDeque<u64>,
    /// The one stream's requests handed to quinn and not yet answered,
    /// oldest first: (seq, sent_ns).
    waiting: VecDeque<(u64, u64)>,
}

impl RrClient {
    fn hold(&self, seqs: std::ops::Range<u64>) {
        if seqs.is_empty() {
            return;
        }
        self.q.lock().unwrap().held.extend(seqs);
        self.more.notify_one();
    }

    /// Closed loop: the next request goes at once.
    fn issue(&self, rr: &Rr) {
        rr.due.fetch_add(1, Relaxed);
        let seq = self.next_seq.fetch_add(1, Relaxed);
        self.hold(seq..seq + 1);
    }

    /// Every request sent is answered and none is held.
    fn idle(&self, rr: &Rr) -> bool {
        rr.responses.load(Relaxed) == rr.sent.load(Relaxed) && self.q.lock().unwrap().held.is_empty()
    }

    /// The run fails, unless the loop is closing the connection.
    fn fail(&self, role: &Role, code: i32, why: String) {
        if !self.closing.load(Relaxed) {
            role.fail(code, why);
        }
    }

    /// A whole response (or one failing its check) for req, the oldest
    /// request waiting on its stream; false: the run failed on it.
    fn answered(&self, role: &Role, rr: &Rr, req: Option<(u64, u64)>, m: &RxMsg, t_ns: u64) -> bool {
        if let Err(why) = rr.answer(req, m, t_ns, 0) {
            self.fail(role, exit::VERIFY, why);
            return false;
        }
        role.app_bytes.fetch_add(rr.rx_size as u64, Relaxed);
        let draining = self.draining.load(Relaxed);
        if rr.closed && !draining && role.failed() == 0 && !self.closing.load(Relaxed) {
            self.issue(rr);
        }
        if draining && rr.responses.load(Relaxed) == rr.sent.load(Relaxed) {
            self.idle.notify_one();
        }
        true
    }
}

/// How a request's send ended badly: the connection went (the loop says
/// why), or the stream did.
enum SendFail {
    Lost,
    Stream(String),
}

impl From<quinn::WriteError> for SendFail {
    fn from(e: quinn::WriteError) -> SendFail {
        match e {
            quinn::WriteError::ConnectionLost(_) => SendFail::Lost,
            e => SendFail::Stream(e.to_string()),
        }
    }
}

async fn rr_client(
    role: &'static Role,
    lib: &Quinn,
    ep: &Endpoint,
    addr: SocketAddr,
    mut stop: Stop,
) -> Result<(), Fail> {
    let rr = rr_of(role);
    let mut timer = Timer::new().map_err(|e| (exit::INTERNAL, format!("cannot make the request timer: {e}")))?;
    rr.connections.fetch_add(1, Relaxed);
    let conn = connect(ep, addr).await?;
    lib.track(&conn);
    role.connected(now_ns());
    let one = if rr.per_request {
        None
    } else {
        Some(conn.open_bi().await.map_err(|e| lost(role, "opening its stream", e))?)
    };
    let c = Arc::new(RrClient {
        conn: conn.clone(),
        q: Mutex::new(RrQueue {
            held: VecDeque::with_capacity(1024),
            waiting: VecDeque::with_capacity(1024),
        }),
        more: Notify::new(),
        idle: Notify::new(),
        draining: AtomicBool::new(false),
        closing: AtomicBool::new(false),
        next_seq: AtomicU64::new(0),
    });
    let tx = one.map(|(tx, rx)| {
        tokio::spawn(rr_one_stream(role, c.clone(), rx));
        tx
    });
    tokio::spawn(rr_sender(role, c.clone(), tx));
    let mut sched = Schedule::default();
    sched.start(rr, role.opts.duration_ms);
    if rr.closed {
        for _ in 0..role.opts.streams {
            c.issue(rr);
        }
    }
    let mut stop_seen = false;
    loop {
        wlproto::emit_tick();
        if role.failed() != 0 {
            break;
        }
        let now = now_ns();
        let due = if role.stopping() {
            sched.stop(rr, now)
        } else {
            sched.due(rr, now)
        };
        if !due.is_empty() {
            c.hold(due);
            // The sender hands them to quinn now, before the timer is armed
            // again: a system call (~7 us in a VM) that would otherwise
            // count in each request's send lag.
            tokio::task::yield_now().await;
        }
        if sched.draining() {
            c.draining.store(true, Relaxed);
            if c.idle(rr) || sched.over(now) {
                break;
            }
        }
        if let Err(e) = timer.arm(sched.wake_at(rr)) {
            role.fail(exit::INTERNAL, format!("cannot arm the request timer: {e}"));
            break;
        }
        tokio::select! {
            e = conn.closed() => {
                let n = rr.responses.load(Relaxed);
                c.fail(role, exit::CONN_LOST, lost(role, &format!("after {n} responses"), e).1);
                break;
            }
            _ = stop.wait_for(|s| *s), if !stop_seen => stop_seen = true,
            r = timer.fired() => {
                if let Err(e) = r {
                    role.fail(exit::INTERNAL, format!("the request timer failed: {e}"));
                    break;
                }
            }
            _ = c.idle.notified() => {}
        }
    }
    role.t_transfer_done_ns
        .store(rr.t_last_answer.load(Relaxed), std::sync::atomic::Ordering::SeqCst);
    c.closing.store(true, Relaxed);
    let (code, why): (u32, &[u8]) = match role.failed() {
        exit::OK => (CLOSE_OK, b"done"),
        exit::VERIFY => (CLOSE_VERIFY, b"a response failed the content check"),
        _ => (CLOSE_ERROR, b"failed"),
    };
    conn.close(code.into(), why);
    c.more.notify_one();
    Ok(())
}

/// Hands the held requests to quinn, oldest first, each as soon as quinn
/// takes it: on a new stream each, or on the one stream (`one`). A request
/// is sent (sent_ns) once its first bytes are with quinn.
async fn rr_sender(role: &'static Role, c: Arc<RrClient>, mut one: Option<SendStream>) {
    let rr = rr_of(role);
    loop {
        let seq = loop {
            if c.closing.load(Relaxed) || role.failed() != 0 {
                return;
            }
            if let Some(&seq) = c.q.lock().unwrap().held.front() {
                break seq;
            }
            c.more.notified().await;
        };
        let r = match one.as_mut() {
            Some(tx) => rr_send_one(role, rr, &c, tx, seq).await,
            None => rr_send_stream(role, rr, &c, seq).await,
        };
        match r {
            Ok(()) => {}
            Err(SendFail::Lost) => return,
            Err(SendFail::Stream(e)) => {
                c.fail(role, exit::CONN_LOST, format!("sending request {seq} failed: {e}"));
                return;
            }
        }
    }
}

/// Request seq on the one stream, behind those before it.
async fn rr_send_one(
    role: &'static Role,
    rr: &Rr,
    c: &RrClient,
    tx: &mut SendStream,
    seq: u64,
) -> Result<(), SendFail> {
    let mut bufs = rr_chunks(role, rr, seq);
    let w = tx.write_chunks(&mut bufs).await?;
    {
        let mut q = c.q.lock().unwrap();
        q.held.pop_front();
        q.waiting.push_back((seq, now_ns()));
    }
    rr.sent.fetch_add(1, Relaxed);
    tx.write_all_chunks(&mut bufs[w.chunks..]).await?;
    Ok(())
}

/// Request seq on a stream of its own, then FIN; a task reads its response.
async fn rr_send_stream(role: &'static Role, rr: &Rr, c: &Arc<RrClient>, seq: u64) -> Result<(), SendFail> {
    let (mut tx, rx) = c.conn.open_bi().await.map_err(|_| SendFail::Lost)?;
    let mut bufs = rr_chunks(role, rr, seq);
    let w = tx.write_chunks(&mut bufs).await?;
    c.q.lock().unwrap().held.pop_front();
    let sent_ns = now_ns();
    rr.sent.fetch_add(1, Relaxed);
    tokio::spawn(rr_response(role, c.clone(), rx, seq, sent_ns));
    tx.write_all_chunks(&mut bufs[w.chunks..]).await?;
    tx.finish().map_err(|e| SendFail::Stream(e.to_string()))?;
    Ok(())
}

/// The response to request seq on its own stream: whole, then FIN.
async fn rr_response(role: &'static Role, c: Arc<RrClient>, mut rx: RecvStream, seq: u64, sent_ns: u64) {
    let rr = rr_of(role);
    let mut m = RxMsg::default();
    let mut t_answer = 0;
    loop {
        match rx.read_chunk(usize::MAX, true).await {
            Ok(Some(ch)) => {
                let took = m.feed(rr, &role.pattern, &ch.bytes);
                if m.bad {
                    // Fails now, not at the FIN.
                    c.answered(role, rr, Some((seq, sent_ns)), &m, now_ns());
                    return;
                }
                if took < ch.bytes.len() {
                    c.fail(
                        role,
                        exit::VERIFY,
                        format!(
                            "the response to request {seq} is longer than --response's {} bytes (is --response the same on both roles?)",
                            rr.rx_size
                        ),
                    );
                    return;
                }
                if m.whole(rr) && t_answer == 0 {
                    t_answer = now_ns();
                }
            }
            Ok(None) => {
                if !m.whole(rr) {
                    c.fail(
                        role,
                        exit::VERIFY,
                        format!(
                            "the response to request {seq} is shorter than --response's {} bytes (is --response the same on both roles?)",
                            rr.rx_size
                        ),
                    );
                    return;
                }
                c.answered(role, rr, Some((seq, sent_ns)), &m, t_answer);
                return;
            }
            // The loop says why the connection went.
            Err(ReadError::ConnectionLost(_)) => return,
            Err(e) => {
                c.fail(
                    role,
                    exit::CONN_LOST,
                    format!("the server reset request {seq}'s stream: {e}"),
                );
                return;
            }
        }
    }
}

/// The one stream's responses, back to back, each for the oldest request waiting.
async fn rr_one_stream(role: &'static Role, c: Arc<RrClient>, mut rx: RecvStream) {
    let rr = rr_of(role);
    let mut m = RxMsg::default();
    loop {
        match rx.read_chunk(usize::MAX, true).await {
            Ok(Some(ch)) => {
                let t = now_ns();
                let mut p: &[u8] = &ch.bytes;
                while !p.is_empty() {
                    let k = m.feed(rr, &role.pattern, p);
                    p = &p[k..];
                    if !m.ready(rr) {
                        break;
                    }
                    let req = c.q.lock().unwrap().waiting.pop_front();
                    if !c.answered(role, rr, req, &m, t) {
                        return;
                    }
                    m = RxMsg::default();
                }
            }
            Ok(None) => {
                c.fail(role, exit::CONN_LOST, "the server ended the one stream mid-run".into());
                return;
            }
            Err(ReadError::ConnectionLost(_)) => return,
            Err(e) => {
                c.fail(
                    role,
                    exit::CONN_LOST,
                    format!("the server ended the one stream mid-run: {e}"),
                );
                return;
            }
        }
    }
}

/// Serves the client's connection, a task per stream, until it closes it
/// or "stop"/"exit".
async fn rr_server(role: &'static Role, lib: &Quinn, ep: &Endpoint, stop: Stop) -> Result<(), Fail> {
    let rr = rr_of(role);
    let conn = match accept(ep, stop.clone()).await {
        None => return Ok(()),
        Some(r) => r.map_err(|e| (exit::HANDSHAKE, format!("QUIC handshake with a client failed: {e}")))?,
    };
    rr.connections.fetch_add(1, Relaxed);
    lib.track(&conn);
    role.connected(now_ns());
    let mut stop = stop;
    let end = loop {
        tokio::select! {
            s = conn.accept_bi() => match s {
                Ok((tx, rx)) => {
                    tokio::spawn(rr_serve(role, conn.clone(), tx, rx));
                }
                Err(e) => break Some(e),
            },
            _ = stop.wait_for(|s| *s) => break None,
        }
    };
    if end.is_none() {
        conn.close(CLOSE_OK.into(), b"");
    }
    role.t_transfer_done_ns
        .store(now_ns(), std::sync::atomic::Ordering::SeqCst);
    // Said here, not returned: the run's first failure (a bad request's) keeps its code.
    let lost_why = match end {
        None | Some(ConnectionError::LocallyClosed) => None,
        Some(ConnectionError::ApplicationClosed(c)) if c.error_code == VarInt::from_u32(CLOSE_OK) => None,
        Some(ConnectionError::ApplicationClosed(c)) => Some(format!(
            "the client closed its connection with error {}{}",
            c.error_code,
            if c.error_code == VarInt::from_u32(CLOSE_VERIFY) {
                " (its content check failed)"
            } else {
                ""
            }
        )),
        Some(e) => Some(lost(role, &format!("after {} requests", rr.served.load(Relaxed)), e).1),
    };
    if let Some(why) = lost_why {
        role.fail(exit::CONN_LOST, why);
    }
    Ok(())
}

/// One stream's requests (one, or many back to back), each answered once
/// whole; FIN when the client's FIN comes. A bad request is answered at
/// once and ends the stream.
async fn rr_serve(role: &'static Role, conn: Connection, mut tx: SendStream, mut rx: RecvStream) {
    let rr = rr_of(role);
    let mut m = RxMsg::default();
    loop {
        match rx.read_chunk(usize::MAX, true).await {
            Ok(Some(ch)) => {
                let mut p: &[u8] = &ch.bytes;
                while !p.is_empty() {
                    let k = m.feed(rr, &role.pattern, p);
                    p = &p[k..];
                    if !m.ready(rr) {
                        break;
                    }
                    match rr_respond(role, rr, &mut tx, &m, false).await {
                        Ok(false) => m = RxMsg::default(),
                        // Spent: the rest is dropped, the stream held (no
                        // STOP_SENDING before the client has its answer) until the end.
                        Ok(true) => {
                            conn.closed().await;
                            return;
                        }
                        Err(()) => return,
                    }
                }
            }
            Ok(None) => {
                if m.got != 0 {
                    // A short request.
                    let _ = rr_respond(role, rr, &mut tx, &m, true).await;
                } else {
                    let _ = tx.finish();
                }
                return;
            }
            // The client reset it, or the connection ended: its end says why.
            Err(_) => return,
        }
    }
}

/// Answers m's request (its seq, whatever it is); a bad or short one is
/// the stream's last: Ok(true).
async fn rr_respond(role: &'static Role, rr: &Rr, tx: &mut SendStream, m: &RxMsg, fin: bool) -> Result<bool, ()> {
    let seq = m.seq();
    let why = rr.request_failed(m);
    let bad = why.is_some();
    if let Some(why) = why {
        // The client sees the answer first; the run fails once it is done.
        role.fail_later(exit::VERIFY, why);
    }
    role.app_bytes.fetch_add(m.got as u64, Relaxed);
    tx.write_all_chunks(&mut rr_chunks(role, rr, seq))
        .await
        .map_err(|_| ())?;
    if fin || bad {
        tx.finish().map_err(|_| ())?;
    }
    rr.served.fetch_add(1, Relaxed);
    Ok(bad)
}
