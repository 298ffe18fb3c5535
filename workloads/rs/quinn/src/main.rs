// SPDX-License-Identifier: GPL-2.0-only
//! qprof-wl-quinn: qprof's workload on quinn, speaking qprof-wl's protocol
//! (wlproto). Bulk (the client sends on --streams unidirectional streams
//! of one connection, the server checks every byte) and download (--count
//! connections one after another, each a request on one bidirectional
//! stream answered with --size bytes of the pattern).
//!
//! The configuration, recorded in the "connected" event: TLS 1.3 with
//! AES-128-GCM only, rustls on its default provider (aws-lc-rs); GSO and
//! GRO as quinn-udp finds them (qprof's interposer turns either off, as
//! for msquic); flow-control windows that never limit a transfer on one
//! host (RECEIVE_WINDOW, STREAM_WINDOW, SEND_WINDOW); quinn's defaults
//! otherwise. One thread: tokio's current-thread runtime runs the
//! endpoint's driver and the streams, as quinn's own perf tool can.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn::{Connection, ConnectionError, Endpoint, TransportConfig, VarInt};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CipherSuite, DigitallySignedStruct, SignatureScheme};
use serde_json::{json, Map, Value};
use tokio::sync::watch;
use tokio::task::JoinSet;
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

fn transport() -> Arc<TransportConfig> {
    let mut t = TransportConfig::default();
    t.receive_window(RECEIVE_WINDOW)
        .stream_receive_window(VarInt::from_u32(STREAM_WINDOW))
        .send_window(SEND_WINDOW)
        .max_concurrent_uni_streams(VarInt::from_u32(wlproto::MAX_STREAMS as u32))
        .max_idle_timeout(Some(IDLE_TIMEOUT.try_into().unwrap()));
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
    s.transport_config(transport());
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
    cc.transport_config(transport());
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
    let r = if role.opts.download() {
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
    let r = if role.opts.download() {
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
