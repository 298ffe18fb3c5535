// SPDX-License-Identifier: GPL-2.0-only
//! The s2n-quic transport (workloads/wl_transport.h): AWS's QUIC in Rust,
//! its default TLS on Linux (s2n-tls, on aws-lc through aws-lc-rs, which
//! s2n-quic's packet protection uses too) and its own UDP I/O
//! (s2n-quic-platform: sendmmsg with UDP_SEGMENT, recvmmsg, UDP_GRO).
//! s2n-quic has no sans-IO API: an endpoint is a set of tokio tasks (the
//! endpoint's event loop, a socket's receive and send tasks). So this
//! transport is library-threaded, as msquic's (wl_quic.c) is: one tokio
//! runtime (current-thread, as s2n-quic's own perf tool, s2n-quic-qns
//! perf, runs by default) on a thread of its own, "s2n-quic", runs the
//! endpoint and a task for each connection and each stream, and those
//! tasks call the pattern's handlers.
//!
//! THREADS (wl_transport.h). Every handler of a connection and its
//! streams is called holding the connection's handler lock (Conn::hlock),
//! so none run at once. The calls a pattern makes (send, room, open,
//! close, abort) take only a stream's or connection's small state lock,
//! never the handler lock (a pattern calls them from inside its handlers,
//! and from the loop's thread), and never call a handler: they queue the
//! work and wake the task that does it.
//!
//! SENDING. A body in the pattern region goes to s2n-quic as
//! `Bytes::from_static` (the region lives for the run; s2n-quic keeps the
//! chunk until it is acknowledged, without a copy); a header, or a
//! caller's own buffer (WL_SEND_OWNED), is copied. wl_room() is ROOM_AHEAD
//! less what waits here for s2n-quic to take it (its send buffer,
//! SEND_BUFFER, full); when it was 0 the writable handler follows once
//! s2n-quic took enough. A message's sent handler comes once s2n-quic
//! took all of it.
//!
//! ENDING. A stream is over once the peer's FIN was read (or it could not
//! be) and ours was acknowledged (s2n-quic's flush), or either way was
//! aborted; the connection's closed handler comes after every stream's,
//! once s2n-quic says it is closed.
//!
//! TLS 1.3 only (s2n-tls's "default_tls13" policy, which s2n-quic sets),
//! ALPN "qprof" (or "perf", --proto), the run's certificate (server); the client checks no
//! chain (the run's certificate is self-signed). s2n-quic has no 0-RTT,
//! and session resumption only behind its unstable_resumption feature:
//! every connection is a full handshake (conn_info says so).

use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::ffi::{c_int, c_uint, c_void, CStr};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use s2n_quic::application::Error as AppError;
use s2n_quic::client::Connect;
use s2n_quic::connection::{Error as ConnError, Handle, StreamAcceptor};
use s2n_quic::provider::event::{events, ConnectionInfo, ConnectionMeta, Location, Subscriber};
use s2n_quic::provider::limits::Limits;
use s2n_quic::provider::tls::s2n_tls as tls;
use s2n_quic::stream::{Error as StreamError, PeerStream, ReceiveStream, SendStream};
use s2n_quic::{Client, Server};
use serde_json::json;
use tokio::sync::{watch, Notify};
use wlffi::*;

/// --proto's ALPN: "qprof" or "perf" (qprof_wl.c sets wl_opts.alpn).
unsafe fn alpn(o: *const WlOpts) -> &'static [u8] {
    opt_str((*o).alpn).unwrap_or("qprof").as_bytes()
}
const SERVER_NAME: &str = "qprof";
/// The connection's flow-control window and each stream's: far above any
/// bandwidth-delay product between two namespaces or a --link (quinn's
/// transport takes the same stream window).
const DATA_WINDOW: u64 = 64 << 20;
const STREAM_WINDOW: u64 = 16 << 20;
/// What a stream's send buffer holds (sent and not yet acknowledged, or not yet sent).
const SEND_BUFFER: u32 = 16 << 20;
/// Streams of each kind the peer may open at once (wl.h's WL_MAX_STREAMS and more).
const MAX_STREAMS: u64 = 128;
/// As msquic's (wl_quic.c) and quic-go's transports: a connection whose peer went
/// without a word ends well inside qprof's 30 s wait for the "done" report.
const IDLE_TIMEOUT: Duration = Duration::from_secs(10);
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10); /* as msquic's (wl_quic.c) */
/// What a stream takes beyond what s2n-quic has taken, before it says no room.
const ROOM_AHEAD: u64 = 256 << 10;
/// Chunks a stream's receive takes from s2n-quic at a time.
const RX_CHUNKS: usize = 32;

// ------------------------------------------------------------ state

/// A message on a stream, kept until s2n-quic has taken all of it.
struct Msg {
    parts: [Bytes; 2], /* header, body */
    tag: *mut c_void,
}
unsafe impl Send for Msg {}

/// What a stream's task and the pattern's calls share, under Stream::sh.
#[derive(Default)]
struct StreamShared {
    queue: VecDeque<Msg>,
    queued: u64, /* bytes in queue and in the task's message, not yet taken by s2n-quic */
    fin_req: bool,
    abort_req: bool,
    over: bool,    /* this side sends no more: room 0, sends refused */
    starved: bool, /* room() said 0: writable is owed once there is room */
    polling: bool, /* the task is in its step: it sees `dirty` before it sleeps */
    dirty: bool,
    waker: Option<Waker>,
}

struct Stream {
    c: Arc<Conn>,
    /* Set once: at open (ours), or by the stream handler, before the task runs. */
    hd: UnsafeCell<*const WlStreamHandlers>,
    ctx: UnsafeCell<*mut c_void>,
    id: AtomicI64, /* -1 until s2n-quic opened it */
    sh: Mutex<StreamShared>,
}
unsafe impl Send for Stream {}
unsafe impl Sync for Stream {}

/// Each connection's counts, from s2n-quic's events (the subscriber's connection context).
#[derive(Default)]
struct ConnCounts {
    sent: AtomicU64,
    received: AtomicU64,
    lost: AtomicU64,
    cwnd: AtomicU64,
    rtt_us: AtomicU64,
    in_flight: AtomicU64,
    pacing: AtomicU64,
    mtu: AtomicU64,
}

#[derive(Default)]
struct ConnShared {
    handle: Option<Handle>,
    close_req: Option<u64>,
    dead: bool,
    streams: usize,                    /* live: their closed handler not yet returned */
    all: Vec<std::sync::Weak<Stream>>, /* to wake once the connection is gone */
    end: WlEnd,
}

struct Conn {
    hlock: Mutex<()>,
    hd: UnsafeCell<*const WlConnHandlers>,
    ctx: UnsafeCell<*mut c_void>,
    server: bool,
    t_connect: u64,
    sh: Mutex<ConnShared>,
    ready: watch::Sender<Option<Handle>>, /* the handle, once connected: streams opened before wait for it */
    gone: Notify,                         /* a stream's closed handler returned */
    over: AtomicBool,                     /* s2n-quic said the connection is closed */
    counts: Mutex<Option<Arc<ConnCounts>>>,
}
unsafe impl Send for Conn {}
unsafe impl Sync for Conn {}

struct State {
    o: *const WlOpts,
    server: bool,
    addr: SocketAddr,
    rt: tokio::runtime::Handle,
    stop: Arc<Notify>,
    client: Option<Client>,
    acc: Option<WlAccept>,
    peer_bidi: u64,
    peer_uni: u64,
}

struct Global(UnsafeCell<Option<State>>);
// Written by init, setup and listen on the loop's thread before any task runs; read after.
unsafe impl Sync for Global {}
static G: Global = Global(UnsafeCell::new(None));
static LISTENING: AtomicBool = AtomicBool::new(false);

fn st() -> &'static mut State {
    unsafe { (*G.0.get()).as_mut().expect("s2n-quic: init first") }
}

/// The endpoint's counts (every connection's summed), from its events; a mark reads them.
#[derive(Default)]
struct Totals {
    sent_packets: AtomicU64,
    lost_packets: AtomicU64,
    lost_bytes: AtomicU64,
    lost_mtu_probes: AtomicU64,
    congestion_events: AtomicU64,
    tx_dgrams: AtomicU64,
    tx_ios: AtomicU64,
    tx_blocked: AtomicU64,
    tx_errors: AtomicU64,
    rx_dgrams: AtomicU64,
    rx_ios: AtomicU64,
    gso_segments: AtomicU64,
    gso_failed: AtomicBool, /* a send failed with EIO: s2n-quic sends a datagram a message from then on */
    gro: AtomicBool,
    cipher: AtomicU8, /* 0 none yet, 1 AES-128-GCM, 2 AES-256-GCM, 3 ChaCha20-Poly1305 */
}
static TOTALS: OnceLock<Totals> = OnceLock::new();
fn totals() -> &'static Totals {
    TOTALS.get_or_init(Totals::default)
}
/// The connection the marks show (WL_CONN_STATS: the first such one).
static STATS_CONN: Mutex<Option<Arc<ConnCounts>>> = Mutex::new(None);

// ------------------------------------------------------------ events

/// s2n-quic's event subscriber: its counts into each connection's and the totals.
struct Events;

impl Subscriber for Events {
    type ConnectionContext = Arc<ConnCounts>;

    fn create_connection_context(&mut self, _: &ConnectionMeta, _: &ConnectionInfo) -> Self::ConnectionContext {
        Arc::new(ConnCounts::default())
    }
    fn on_packet_sent(&mut self, c: &mut Self::ConnectionContext, _: &ConnectionMeta, _: &events::PacketSent) {
        c.sent.fetch_add(1, Relaxed);
        totals().sent_packets.fetch_add(1, Relaxed);
    }
    fn on_packet_received(&mut self, c: &mut Self::ConnectionContext, _: &ConnectionMeta, _: &events::PacketReceived) {
        c.received.fetch_add(1, Relaxed);
    }
    fn on_packet_lost(&mut self, c: &mut Self::ConnectionContext, _: &ConnectionMeta, e: &events::PacketLost) {
        let t = totals();
        // A lost path-MTU probe is no lost data: counted apart, as quinn's statistics do.
        if e.is_mtu_probe {
            t.lost_mtu_probes.fetch_add(1, Relaxed);
            return;
        }
        c.lost.fetch_add(1, Relaxed);
        t.lost_packets.fetch_add(1, Relaxed);
        t.lost_bytes.fetch_add(e.bytes_lost as u64, Relaxed);
    }
    fn on_congestion(&mut self, _: &mut Self::ConnectionContext, _: &ConnectionMeta, _: &events::Congestion) {
        totals().congestion_events.fetch_add(1, Relaxed);
    }
    fn on_recovery_metrics(
        &mut self,
        c: &mut Self::ConnectionContext,
        _: &ConnectionMeta,
        e: &events::RecoveryMetrics,
    ) {
        if e.path.is_active {
            c.cwnd.store(e.congestion_window as u64, Relaxed);
            c.rtt_us.store(e.smoothed_rtt.as_micros() as u64, Relaxed);
            c.in_flight.store(e.bytes_in_flight as u64, Relaxed);
            // Below s2n-quic's MINIMUM_PACING_RTT its pacer stops pacing, and
            // says so by no event: the last rate it said is no longer its.
            if e.smoothed_rtt < Duration::from_millis(2) {
                c.pacing.store(0, Relaxed);
            }
        }
    }
    /// Its pacer's rate, as it last computed it (each burst's spacing: a
    /// store beside the computation; qprof's runs have one path).
    fn on_pacing_rate_updated(
        &mut self,
        c: &mut Self::ConnectionContext,
        _: &ConnectionMeta,
        e: &events::PacingRateUpdated,
    ) {
        c.pacing.store(e.bytes_per_second, Relaxed);
    }
    fn on_mtu_updated(&mut self, c: &mut Self::ConnectionContext, _: &ConnectionMeta, e: &events::MtuUpdated) {
        c.mtu.store(e.mtu as u64, Relaxed);
    }
    fn on_key_update(&mut self, _: &mut Self::ConnectionContext, _: &ConnectionMeta, e: &events::KeyUpdate) {
        if matches!(e.key_type, events::KeyType::OneRtt { .. }) {
            let v = match e.cipher_suite {
                events::CipherSuite::TLS_AES_128_GCM_SHA256 { .. } => 1,
                events::CipherSuite::TLS_AES_256_GCM_SHA384 { .. } => 2,
                events::CipherSuite::TLS_CHACHA20_POLY1305_SHA256 { .. } => 3,
                _ => 0,
            };
            totals().cipher.store(v, Relaxed);
        }
    }
    fn on_datagram_sent(&mut self, _: &mut Self::ConnectionContext, _: &ConnectionMeta, _: &events::DatagramSent) {
        totals().tx_dgrams.fetch_add(1, Relaxed);
    }
    fn on_datagram_received(
        &mut self,
        _: &mut Self::ConnectionContext,
        _: &ConnectionMeta,
        _: &events::DatagramReceived,
    ) {
        totals().rx_dgrams.fetch_add(1, Relaxed);
    }
    fn on_endpoint_datagram_sent(&mut self, _: &events::EndpointMeta, _: &events::EndpointDatagramSent) {
        totals().tx_dgrams.fetch_add(1, Relaxed);
    }
    fn on_platform_tx(&mut self, _: &events::EndpointMeta, e: &events::PlatformTx) {
        let t = totals();
        t.tx_ios.fetch_add(e.syscalls as u64, Relaxed);
        t.tx_blocked.fetch_add(e.blocked_syscalls as u64, Relaxed);
        t.tx_errors.fetch_add(e.total_errors as u64, Relaxed);
    }
    fn on_platform_tx_error(&mut self, _: &events::EndpointMeta, e: &events::PlatformTxError) {
        // s2n-quic-platform takes an EIO from a send as "no GSO here" and sends single datagrams after.
        if e.errno == libc::EIO {
            totals().gso_failed.store(true, Relaxed);
        }
    }
    fn on_platform_rx(&mut self, _: &events::EndpointMeta, e: &events::PlatformRx) {
        // The receive calls that returned data (a blocked one returned EAGAIN).
        totals()
            .rx_ios
            .fetch_add(e.syscalls.saturating_sub(e.blocked_syscalls) as u64, Relaxed);
    }
    fn on_platform_feature_configured(&mut self, _: &events::EndpointMeta, e: &events::PlatformFeatureConfigured) {
        match e.configuration {
            events::PlatformFeatureConfiguration::Gso { max_segments, .. } => {
                totals().gso_segments.store(max_segments as u64, Relaxed)
            }
            events::PlatformFeatureConfiguration::Gro { enabled, .. } => totals().gro.store(enabled, Relaxed),
            _ => {}
        }
    }
}

// ------------------------------------------------------------ reports

fn cipher_name() -> &'static str {
    match totals().cipher.load(Relaxed) {
        1 => "TLS_AES_128_GCM_SHA256",
        2 => "TLS_AES_256_GCM_SHA384",
        3 => "TLS_CHACHA20_POLY1305_SHA256",
        // No 1-RTT keys yet: what s2n-tls's default_tls13 policy prefers.
        _ => "TLS_AES_128_GCM_SHA256",
    }
}

unsafe extern "C" fn json_library(j: *mut WlJson) {
    let n = st();
    let t = totals();
    json_raw(
        j,
        c"quic_library",
        &json!({
            "name": "s2n-quic",
            "version": env!("QPROF_S2N_QUIC_VERSION"),
            "crypto": format!("s2n-tls {} on aws-lc-rs {}", env!("QPROF_S2N_TLS_VERSION"), env!("QPROF_AWS_LC_RS_VERSION")),
            "cipher": cipher_name(),
            "tls_policy": "default_tls13",
            "runtime": format!("tokio {} current-thread", env!("QPROF_TOKIO_VERSION")),
        })
        .to_string(),
    );
    let mut settings = json!({
        "data_window": DATA_WINDOW,
        "bidirectional_local_data_window": STREAM_WINDOW,
        "bidirectional_remote_data_window": STREAM_WINDOW,
        "unidirectional_data_window": STREAM_WINDOW,
        "max_send_buffer_size": SEND_BUFFER,
        "max_idle_timeout_ms": IDLE_TIMEOUT.as_millis() as u64,
        "max_handshake_duration_ms": HANDSHAKE_TIMEOUT.as_millis() as u64,
        "gso_max_segments": t.gso_segments.load(Relaxed),
    });
    if n.server {
        settings["max_open_remote_bidirectional_streams"] = n.peer_bidi.into();
        settings["max_open_remote_unidirectional_streams"] = n.peer_uni.into();
    }
    json_raw(j, c"quic_settings", &settings.to_string());
    // s2n-quic-platform sends with UDP_SEGMENT up to its max segments
    // (MAX_BURST_PACKETS, 10) unless a send failed with EIO, after which
    // it sends a datagram a message; it believes GRO once setsockopt(UDP_GRO) was taken.
    let gso = t.gso_segments.load(Relaxed) > 1 && !t.gso_failed.load(Relaxed);
    wl_json_bool(j, c"send_segmentation".as_ptr(), gso);
    wl_json_bool(j, c"recv_coalescing".as_ptr(), t.gro.load(Relaxed));
}

unsafe extern "C" fn q_json_mark(j: *mut WlJson) {
    let t = totals();
    let mut p = WlJsonBuf::new();
    // s2n-quic's platform counts: every send call (sendmmsg, a blocked one
    // too), the receive calls that returned data; the datagrams the
    // connections (and the endpoint) handed to it and took from it.
    for (k, v) in [
        (c"udp_tx_datagrams", &t.tx_dgrams),
        (c"udp_tx_ios", &t.tx_ios),
        (c"udp_rx_datagrams", &t.rx_dgrams),
        (c"udp_rx_ios", &t.rx_ios),
        (c"sent_packets", &t.sent_packets),
        (c"lost_packets", &t.lost_packets),
        (c"lost_bytes", &t.lost_bytes),
        (c"lost_mtu_probes", &t.lost_mtu_probes),
        (c"congestion_events", &t.congestion_events),
    ] {
        wl_json_u64(p.ptr(), k.as_ptr(), v.load(Relaxed));
    }
    if let Some(c) = STATS_CONN.lock().unwrap().as_ref() {
        wl_json_u64(p.ptr(), c"cwnd".as_ptr(), c.cwnd.load(Relaxed));
        wl_json_u64(p.ptr(), c"rtt_us".as_ptr(), c.rtt_us.load(Relaxed));
        wl_json_u64(p.ptr(), c"bytes_in_flight".as_ptr(), c.in_flight.load(Relaxed));
        // Only once its pacer has said a rate (below a 2 ms RTT it never does).
        let pacing = c.pacing.load(Relaxed);
        if pacing > 0 {
            wl_json_u64(p.ptr(), c"pacing_rate".as_ptr(), pacing);
        }
        wl_json_u64(p.ptr(), c"current_mtu".as_ptr(), c.mtu.load(Relaxed));
    }
    wl_json_raw(j, c"quic_stats".as_ptr(), p.end());
}

unsafe extern "C" fn q_json_done(j: *mut WlJson, last: *const WlEnd) {
    if !last.is_null() && (*last).closed_by_transport {
        wl_json_str(j, c"transport_status".as_ptr(), (*last).transport_status);
    }
    if !last.is_null() && (*last).closed_by_peer {
        wl_json_u64(j, c"peer_error_code".as_ptr(), (*last).peer_error);
    }
    json_library(j);
    q_json_mark(j);
}

// ------------------------------------------------------------ ends

fn set_transport_end(e: &mut WlEnd, why: &'static CStr) {
    if e.closed_by_transport || e.closed_by_peer {
        return;
    }
    e.closed_by_transport = true;
    e.transport_status = why.as_ptr();
}

/// TLS alerts are QUIC's CRYPTO_ERROR codes, 0x100-0x1ff.
fn crypto(code: u64) -> bool {
    (0x100..0x200).contains(&code)
}

/// What ended the connection, into its end (once: the first word stands).
fn conn_lost(c: &Conn, why: &ConnError) {
    let mut sh = c.sh.lock().unwrap();
    sh.dead = true;
    let e = &mut sh.end;
    if e.closed_by_transport || e.closed_by_peer {
        return;
    }
    match *why {
        ConnError::Application { error, initiator, .. } => {
            if initiator == Location::Remote {
                e.closed_by_peer = true;
                e.peer_error = u64::from(error);
                e.t_peer_closed = unsafe { wl_now_ns() };
            }
        }
        ConnError::Closed { initiator, .. } => {
            if initiator == Location::Remote {
                e.closed_by_peer = true;
                e.t_peer_closed = unsafe { wl_now_ns() };
            }
        }
        ConnError::Transport { code, initiator, .. } => {
            let code = code.as_u64();
            set_transport_end(
                e,
                if crypto(code) {
                    c"TLS handshake failed"
                } else if initiator == Location::Remote {
                    c"the peer closed the connection with a transport error"
                } else {
                    c"s2n-quic closed the connection"
                },
            )
        }
        ConnError::IdleTimerExpired { .. } => set_transport_end(
            e,
            if e.connected {
                c"idle timeout"
            } else {
                c"handshake timeout"
            },
        ),
        ConnError::MaxHandshakeDurationExceeded { .. } => set_transport_end(e, c"handshake timeout"),
        ConnError::StatelessReset { .. } => set_transport_end(e, c"the peer reset the connection (stateless reset)"),
        ConnError::NoValidPath { .. } => set_transport_end(e, c"no valid path to the peer"),
        ConnError::EndpointClosing { .. } => set_transport_end(e, c"the endpoint closed"),
        _ => set_transport_end(e, c"s2n-quic closed the connection"),
    }
}

// ------------------------------------------------------------ handlers

impl Conn {
    fn new(server: bool) -> Arc<Conn> {
        Arc::new(Conn {
            hlock: Mutex::new(()),
            hd: UnsafeCell::new(std::ptr::null()),
            ctx: UnsafeCell::new(std::ptr::null_mut()),
            server,
            t_connect: unsafe { wl_now_ns() },
            sh: Mutex::new(ConnShared::default()),
            ready: watch::channel(None).0,
            gone: Notify::new(),
            over: AtomicBool::new(false),
            counts: Mutex::new(None),
        })
    }
    fn ptr(self: &Arc<Self>) -> *mut c_void {
        Arc::as_ptr(self) as *mut c_void
    }
    fn hd(&self) -> &WlConnHandlers {
        unsafe { &**self.hd.get() }
    }
    fn ctx(&self) -> *mut c_void {
        unsafe { *self.ctx.get() }
    }
}

impl Stream {
    fn new(c: &Arc<Conn>, send: bool) -> Arc<Stream> {
        let s = Arc::new(Stream {
            c: c.clone(),
            hd: UnsafeCell::new(std::ptr::null()),
            ctx: UnsafeCell::new(std::ptr::null_mut()),
            id: AtomicI64::new(-1),
            sh: Mutex::new(StreamShared {
                over: !send,
                ..Default::default()
            }),
        });
        let mut sh = c.sh.lock().unwrap();
        sh.streams += 1;
        sh.all.retain(|w| w.strong_count() > 0);
        sh.all.push(Arc::downgrade(&s));
        drop(sh);
        s
    }
    fn ptr(self: &Arc<Self>) -> *mut c_void {
        Arc::as_ptr(self) as *mut c_void
    }
    fn hd(&self) -> Option<&WlStreamHandlers> {
        unsafe { (*self.hd.get()).as_ref() }
    }
    fn ctx(&self) -> *mut c_void {
        unsafe { *self.ctx.get() }
    }
}

fn room_of(sh: &mut StreamShared) -> u64 {
    if sh.over || sh.fin_req || sh.abort_req {
        return 0;
    }
    let r = ROOM_AHEAD.saturating_sub(sh.queued);
    if r == 0 {
        sh.starved = true;
    }
    r
}

/// Wake s's task, unless it is in its step (it sees `dirty` before it sleeps).
fn poke(_s: &Stream, mut sh: std::sync::MutexGuard<'_, StreamShared>) {
    sh.dirty = true;
    let w = if sh.polling { None } else { sh.waker.take() };
    drop(sh);
    if let Some(w) = w {
        w.wake();
    }
}

// ------------------------------------------------------------ a stream's task

/// What a stream's task keeps of its own.
struct Local {
    rx: Option<ReceiveStream>,
    tx: Option<SendStream>,
    cur: Option<Msg>, /* the message s2n-quic is taking */
    recv_done: bool,
    send_done: bool,
    fin_written: bool,
    peer_fin: bool,
    aborted: bool, /* either way aborted: not graceful */
    owe_writable: bool,
    chunks: Vec<Bytes>,
}

fn stream_error(e: &StreamError) -> bool {
    /* true: the peer aborted the stream; false: the connection is over */
    !matches!(e, StreamError::ConnectionError { .. })
}

/// One pass over what s can do now; Ready once both ways are over.
fn step(s: &Arc<Stream>, l: &mut Local, cx: &mut Context<'_>) -> Poll<()> {
    let sp = s.ptr();
    loop {
        let mut progress = false;
        let (abort, fin_req) = {
            let mut sh = s.sh.lock().unwrap();
            sh.polling = true;
            sh.dirty = false;
            if !sh.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                sh.waker = Some(cx.waker().clone());
            }
            (sh.abort_req, sh.fin_req)
        };
        if abort && !(l.recv_done && l.send_done) {
            let code = AppError::new(WL_CLOSE_ERROR).unwrap();
            if let Some(t) = l.tx.as_mut() {
                if !l.send_done {
                    let _ = t.reset(code);
                }
            }
            if let Some(r) = l.rx.as_mut() {
                if !l.recv_done {
                    let _ = r.stop_sending(code);
                }
            }
            l.aborted = true;
            l.recv_done = true;
            l.send_done = true;
        }
        // What the peer sent, to the data handler; its FIN or abort.
        if !l.recv_done {
            let r = l.rx.as_mut().unwrap();
            match r.poll_receive_vectored(&mut l.chunks, cx) {
                Poll::Ready(Ok((n, open))) => {
                    if n > 0 || !open {
                        progress = true;
                        let _g = s.c.hlock.lock().unwrap();
                        if let Some(h) = s.hd() {
                            if let Some(f) = h.data {
                                for ch in &l.chunks[..n] {
                                    if !ch.is_empty() && !l.aborted {
                                        unsafe { f(sp, s.ctx(), ch.as_ptr(), ch.len()) };
                                    }
                                }
                            }
                            if !open {
                                l.recv_done = true;
                                l.peer_fin = true;
                                if let Some(f) = h.fin {
                                    if !l.aborted {
                                        unsafe { f(sp, s.ctx()) };
                                    }
                                }
                            }
                        } else if !open {
                            l.recv_done = true;
                        }
                    }
                    for ch in &mut l.chunks[..n] {
                        *ch = Bytes::new();
                    }
                }
                Poll::Ready(Err(e)) => {
                    progress = true;
                    l.recv_done = true;
                    if stream_error(&e) {
                        aborted_by_peer(s, l);
                    } else {
                        l.aborted = true;
                    }
                }
                Poll::Pending => {}
            }
        }
        // What waits, to s2n-quic as far as it takes it; then the FIN, and its acknowledgement.
        if !l.send_done {
            let mut taken: u64 = 0;
            let mut tags: Vec<*mut c_void> = Vec::new();
            let mut failed: Option<StreamError> = None;
            loop {
                if l.cur.is_none() {
                    l.cur = s.sh.lock().unwrap().queue.pop_front();
                }
                let Some(m) = l.cur.as_mut() else { break };
                let first = if m.parts[0].is_empty() { 1 } else { 0 };
                let before: usize = m.parts.iter().map(|b| b.len()).sum();
                if before > 0 {
                    let t = l.tx.as_mut().unwrap();
                    match t.poll_send_vectored(&mut m.parts[first..], cx) {
                        Poll::Ready(Ok(k)) => {
                            for p in &mut m.parts[first..first + k] {
                                *p = Bytes::new();
                            }
                        }
                        Poll::Ready(Err(e)) => {
                            failed = Some(e);
                            break;
                        }
                        Poll::Pending => {}
                    }
                    let after: usize = m.parts.iter().map(|b| b.len()).sum();
                    taken += (before - after) as u64;
                    if after > 0 {
                        break; /* s2n-quic's send buffer is full: it wakes us */
                    }
                }
                let m = l.cur.take().unwrap();
                if !m.tag.is_null() {
                    tags.push(m.tag);
                }
            }
            let (room, starved) = {
                let mut sh = s.sh.lock().unwrap();
                sh.queued -= taken;
                let starved = sh.starved;
                (room_of(&mut sh), starved)
            };
            if taken > 0 || !tags.is_empty() {
                progress = true;
            }
            if let Some(e) = failed {
                progress = true;
                l.send_done = true;
                s.sh.lock().unwrap().over = true;
                if stream_error(&e) {
                    aborted_by_peer(s, l);
                } else {
                    l.aborted = true;
                }
            }
            let owed = !l.send_done && (l.owe_writable || starved) && room > 0 && !fin_req;
            if !tags.is_empty() || owed {
                let _g = s.c.hlock.lock().unwrap();
                if let Some(h) = s.hd() {
                    if let Some(f) = h.sent {
                        for tag in tags {
                            unsafe { f(sp, s.ctx(), tag, false) };
                        }
                    }
                    if owed {
                        l.owe_writable = false;
                        s.sh.lock().unwrap().starved = false;
                        if let Some(f) = h.writable {
                            progress = true;
                            unsafe { f(sp, s.ctx()) };
                        }
                    }
                }
            }
            if !l.send_done && l.cur.is_none() {
                let (empty, fin) = {
                    let sh = s.sh.lock().unwrap();
                    (sh.queue.is_empty(), sh.fin_req)
                };
                // s2n-quic's close: the FIN, and Ready once the peer acknowledged
                // every byte and the FIN (a flush after finish() would not wait for the FIN's).
                if empty && fin {
                    l.fin_written = true;
                    match l.tx.as_mut().unwrap().poll_close(cx) {
                        Poll::Ready(Ok(())) => {
                            progress = true;
                            l.send_done = true;
                        }
                        Poll::Ready(Err(e)) => {
                            progress = true;
                            l.send_done = true;
                            if stream_error(&e) {
                                aborted_by_peer(s, l);
                            } else {
                                l.aborted = true;
                            }
                        }
                        Poll::Pending => {}
                    }
                }
            }
        }
        // The connection is gone: a side with nothing asked of s2n-quic would never hear it.
        if !progress && s.c.over.load(Relaxed) && !(l.recv_done && l.send_done) {
            l.recv_done = true;
            l.send_done = true;
            l.aborted = true;
        }
        if l.recv_done && l.send_done {
            s.sh.lock().unwrap().polling = false;
            return Poll::Ready(());
        }
        if !progress {
            let mut sh = s.sh.lock().unwrap();
            if !sh.dirty {
                sh.polling = false;
                return Poll::Pending;
            }
        }
    }
}

/// The peer aborted s, or its stream failed while the connection lives:
/// the aborted handler (once), then this side aborted too.
fn aborted_by_peer(s: &Arc<Stream>, l: &mut Local) {
    let first = !l.aborted;
    l.aborted = true;
    let code = AppError::new(WL_CLOSE_ERROR).unwrap();
    if !l.send_done {
        if let Some(t) = l.tx.as_mut() {
            let _ = t.reset(code);
        }
        l.send_done = true;
    }
    if !l.recv_done {
        if let Some(r) = l.rx.as_mut() {
            let _ = r.stop_sending(code);
        }
        l.recv_done = true;
    }
    s.sh.lock().unwrap().over = true;
    if first {
        if let Some(h) = s.hd() {
            if let Some(f) = h.aborted {
                let _g = s.c.hlock.lock().unwrap();
                unsafe { f(s.ptr(), s.ctx()) };
            }
        }
    }
}

/// A stream's life on s2n-quic, from opened (or accepted) to its closed handler.
async fn stream_run(s: Arc<Stream>, rx: Option<ReceiveStream>, tx: Option<SendStream>, owe_writable: bool) {
    let mut l = Local {
        recv_done: rx.is_none(),
        send_done: tx.is_none(),
        rx,
        tx,
        cur: None,
        fin_written: false,
        peer_fin: false,
        aborted: false,
        owe_writable,
        chunks: vec![Bytes::new(); RX_CHUNKS],
    };
    std::future::poll_fn(|cx| step(&s, &mut l, cx)).await;
    stream_closed(&s, !l.aborted, &mut l);
}

/// The stream's closed handler (the last call for it), its unsent messages' sent handlers (canceled) first.
fn stream_closed(s: &Arc<Stream>, graceful: bool, l: &mut Local) {
    let mut left: Vec<*mut c_void> = Vec::new();
    {
        let mut sh = s.sh.lock().unwrap();
        sh.over = true;
        if let Some(m) = l.cur.take() {
            left.push(m.tag);
        }
        left.extend(sh.queue.drain(..).map(|m| m.tag));
        sh.queued = 0;
        sh.waker = None;
    }
    let c = &s.c;
    {
        let _g = c.hlock.lock().unwrap();
        if let Some(h) = s.hd() {
            if let Some(f) = h.sent {
                for tag in left.into_iter().filter(|t| !t.is_null()) {
                    unsafe { f(s.ptr(), s.ctx(), tag, true) };
                }
            }
            if let Some(f) = h.closed {
                unsafe { f(s.ptr(), s.ctx(), graceful) };
            }
        }
    }
    c.sh.lock().unwrap().streams -= 1;
    c.gone.notify_one();
}

/// Ours: opened once the connection has its handle and s2n-quic the peer's leave.
async fn stream_open(s: Arc<Stream>, uni: bool) {
    let c = s.c.clone();
    let mut ready = c.ready.subscribe();
    let h = match ready.wait_for(|h| h.is_some()).await {
        Ok(h) => h.clone(),
        Err(_) => None,
    };
    let opened = match h {
        None => None,
        Some(mut h) => {
            if uni {
                h.open_send_stream().await.ok().map(|t| (t.id(), None, Some(t)))
            } else {
                h.open_bidirectional_stream().await.ok().map(|b| {
                    let id = b.id();
                    let (r, t) = b.split();
                    (id, Some(r), Some(t))
                })
            }
        }
    };
    match opened {
        Some((id, rx, tx)) => {
            s.id.store(id as i64, Relaxed);
            stream_run(s, rx, tx, true).await;
        }
        None => {
            let mut l = Local {
                rx: None,
                tx: None,
                cur: None,
                recv_done: true,
                send_done: true,
                fin_written: false,
                peer_fin: false,
                aborted: true,
                owe_writable: false,
                chunks: Vec::new(),
            };
            stream_closed(&s, false, &mut l);
        }
    }
}

// ------------------------------------------------------------ a connection's task

/// The connection's life once connected: the peer's streams to the
/// stream handler, until s2n-quic says it is closed; then, once every
/// stream's closed handler has returned, the connection's.
async fn conn_run(c: Arc<Conn>, mut acc: StreamAcceptor) {
    loop {
        match acc.accept().await {
            Ok(Some(ps)) => {
                let (id, rx, tx) = match ps {
                    PeerStream::Bidirectional(b) => {
                        let id = b.id();
                        let (r, t) = b.split();
                        (id, Some(r), Some(t))
                    }
                    PeerStream::Receive(r) => (r.id(), Some(r), None),
                };
                let s = Stream::new(&c, tx.is_some());
                s.id.store(id as i64, Relaxed);
                let hd = {
                    let _g = c.hlock.lock().unwrap();
                    match c.hd().stream {
                        Some(f) => unsafe { f(c.ptr(), c.ctx(), s.ptr(), s.ctx.get()) },
                        None => std::ptr::null(),
                    }
                };
                unsafe { *s.hd.get() = hd };
                if hd.is_null() {
                    s.sh.lock().unwrap().abort_req = true; /* refused */
                }
                let send = tx.is_some();
                tokio::spawn(stream_run(s, rx, tx, send));
            }
            Ok(None) => break,
            Err(e) => {
                conn_lost(&c, &e);
                break;
            }
        }
    }
    conn_end(c).await;
}

async fn conn_end(c: Arc<Conn>) {
    let all = {
        let mut sh = c.sh.lock().unwrap();
        sh.dead = true;
        sh.handle = None;
        std::mem::take(&mut sh.all)
    };
    c.over.store(true, Relaxed);
    c.ready.send_replace(None);
    for s in all.iter().filter_map(|w| w.upgrade()) {
        let sh = s.sh.lock().unwrap();
        poke(&s, sh);
    }
    loop {
        let n = c.gone.notified();
        if c.sh.lock().unwrap().streams == 0 {
            break;
        }
        n.await;
    }
    let end = c.sh.lock().unwrap().end;
    {
        let _g = c.hlock.lock().unwrap();
        if let Some(f) = c.hd().closed {
            unsafe { f(c.ptr(), c.ctx(), &end) };
        }
    }
    let counts = c.counts.lock().unwrap().clone();
    let mut sc = STATS_CONN.lock().unwrap();
    if let (Some(a), Some(b)) = (sc.as_ref(), counts.as_ref()) {
        if Arc::ptr_eq(a, b) {
            *sc = None;
        }
    }
}

/// Connected: its handle kept (a close asked for before goes now), its counts found, the connected handler.
fn conn_connected(c: &Arc<Conn>, h: Handle, stats: bool) {
    let counts = h.query_event_context(|x: &Arc<ConnCounts>| x.clone()).ok();
    if stats {
        // The first such connection, while it lives (then the next one's), as quinn's transport does.
        let mut sc = STATS_CONN.lock().unwrap();
        if sc.is_none() {
            *sc = counts.clone();
        }
    }
    *c.counts.lock().unwrap() = counts;
    let close = {
        let mut sh = c.sh.lock().unwrap();
        sh.end.connected = true;
        sh.end.t_connected = unsafe { wl_now_ns() };
        sh.handle = Some(h.clone());
        sh.close_req
    };
    if let Some(code) = close {
        h.close(app_code(code));
    }
    c.ready.send_replace(Some(h));
    let _g = c.hlock.lock().unwrap();
    if let Some(f) = c.hd().connected {
        unsafe { f(c.ptr(), c.ctx()) };
    }
}

fn app_code(code: u64) -> AppError {
    AppError::new(code).unwrap_or(AppError::new(WL_CLOSE_ERROR).unwrap())
}

async fn client_conn(c: Arc<Conn>, client: Client, addr: SocketAddr, stats: bool) {
    let connect = Connect::new(addr).with_server_name(SERVER_NAME);
    match client.connect(connect).await {
        Ok(mut conn) => {
            let _ = conn.keep_alive(false);
            let (h, acc) = conn.split();
            conn_connected(&c, h, stats);
            conn_run(c, acc).await;
        }
        Err(e) => {
            conn_lost(&c, &e);
            conn_end(c).await;
        }
    }
}

/// The pattern's accept (its pointers are the pattern's, for the run).
struct Accept(WlAccept);
unsafe impl Send for Accept {}

async fn server_accept(mut server: Server, acc: Accept) {
    while let Some(conn) = server.accept().await {
        let acc = &acc.0;
        if !LISTENING.load(Relaxed) {
            conn.close(app_code(WL_CLOSE_ERROR));
            continue;
        }
        let c = Conn::new(true);
        let hd = unsafe { acc.accept.unwrap()(acc.arg, c.ptr(), c.ctx.get()) };
        if hd.is_null() {
            conn.close(app_code(WL_CLOSE_ERROR));
            continue;
        }
        unsafe { *c.hd.get() = hd };
        let (h, a) = conn.split();
        conn_connected(&c, h, acc.flags & WL_CONN_STATS != 0);
        tokio::spawn(conn_run(c, a));
    }
}

// ------------------------------------------------------------ configuration

fn limits(peer_bidi: u64, peer_uni: u64) -> Result<Limits, String> {
    fn e(e: impl std::fmt::Display) -> String {
        format!("s2n-quic refuses a limit: {e}")
    }
    Limits::new()
        .with_data_window(DATA_WINDOW)
        .map_err(e)?
        .with_bidirectional_local_data_window(STREAM_WINDOW)
        .map_err(e)?
        .with_bidirectional_remote_data_window(STREAM_WINDOW)
        .map_err(e)?
        .with_unidirectional_data_window(STREAM_WINDOW)
        .map_err(e)?
        .with_max_send_buffer_size(SEND_BUFFER)
        .map_err(e)?
        .with_max_open_remote_bidirectional_streams(peer_bidi)
        .map_err(e)?
        .with_max_open_remote_unidirectional_streams(peer_uni)
        .map_err(e)?
        .with_max_idle_timeout(IDLE_TIMEOUT)
        .map_err(e)?
        .with_max_handshake_duration(HANDSHAKE_TIMEOUT)
        .map_err(e)
}

unsafe fn server_tls(o: *const WlOpts) -> Result<tls::Server, String> {
    let (Some(cert), Some(key)) = (opt_str((*o).cert), opt_str((*o).key)) else {
        return Err("the server needs --cert and --key".into());
    };
    let cert = std::fs::read_to_string(cert).map_err(|e| format!("cannot read the certificate {cert}: {e}"))?;
    let key = std::fs::read_to_string(key).map_err(|e| format!("cannot read the key {key}: {e}"))?;
    tls::Server::builder()
        .with_application_protocols([alpn(o)])
        .and_then(|b| b.with_certificate(cert, key))
        .and_then(|b| b.build())
        .map_err(|e| format!("s2n-tls refuses the configuration: {e}"))
}

/// The client checks no chain and no name (the run's certificate is
/// self-signed; qprof-wl's msquic client: NO_CERTIFICATE_VALIDATION);
/// the handshake's signature is checked, as every TLS 1.3 client does.
unsafe fn client_tls(o: *const WlOpts) -> Result<tls::Client, String> {
    let mut b = tls::Client::builder()
        .with_application_protocols([alpn(o)])
        .and_then(|b| b.with_empty_trust_store())
        .map_err(|e| format!("s2n-tls refuses the configuration: {e}"))?;
    b.config_mut()
        .disable_x509_verification()
        .map_err(|e| format!("s2n-tls: {e}"))?;
    b.build().map_err(|e| format!("s2n-tls refuses the configuration: {e}"))
}

// ------------------------------------------------------------ the operations

unsafe extern "C" fn q_init(o: *const WlOpts, server: bool) -> c_int {
    if let Err(why) = abi_check() {
        warn(&why);
        return exit::INTERNAL;
    }
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            warn(&format!("cannot make tokio's runtime: {e}"));
            return exit::INTERNAL;
        }
    };
    let handle = rt.handle().clone();
    let stop = Arc::new(Notify::new());
    let stop2 = stop.clone();
    // The runtime's one thread: s2n-quic's endpoint, its sockets' tasks, and every connection's and stream's.
    if std::thread::Builder::new()
        .name("s2n-quic".into())
        .spawn(move || rt.block_on(stop2.notified()))
        .is_err()
    {
        warn("cannot start s2n-quic's thread");
        return exit::INTERNAL;
    }
    *G.0.get() = Some(State {
        o,
        server,
        addr: SocketAddr::from(([0, 0, 0, 0], 0)),
        rt: handle,
        stop,
        client: None,
        acc: None,
        peer_bidi: MAX_STREAMS,
        peer_uni: MAX_STREAMS,
    });
    exit::OK
}

unsafe extern "C" fn q_setup() -> c_int {
    let n = st();
    let o = n.o;
    let addr = opt_str((*o).addr).unwrap_or("");
    let Ok(ip) = addr.parse::<Ipv4Addr>() else {
        warn(&format!("bad IPv4 address {addr}"));
        return exit::USAGE;
    };
    n.addr = SocketAddr::from((ip, (*o).port as u16));
    if !n.server {
        // s2n-tls's set-up (s2n_init, aws-lc's first random draws) is made now, before anything is measured.
        let tls = match client_tls(o) {
            Ok(t) => t,
            Err(why) => {
                warn(&why);
                return exit::TLS_CONFIG;
            }
        };
        let lim = match limits(MAX_STREAMS, MAX_STREAMS) {
            Ok(l) => l,
            Err(why) => {
                warn(&why);
                return exit::INTERNAL;
            }
        };
        let _g = n.rt.enter();
        let client = (|| -> Result<Client, String> {
            let s = |e: &dyn std::fmt::Display| e.to_string();
            Client::builder()
                .with_tls(tls)
                .map_err(|e| s(&e))?
                .with_io("0.0.0.0:0")
                .map_err(|e| s(&e))?
                .with_limits(lim)
                .map_err(|e| s(&e))?
                .with_event(Events)
                .map_err(|e| s(&e))?
                .start()
                .map_err(|e| s(&e))
        })();
        match client {
            Ok(c) => n.client = Some(c),
            Err(e) => {
                warn(&format!("s2n-quic cannot start its client: {e}"));
                return exit::LIB_OPEN;
            }
        }
    }
    exit::OK
}

unsafe extern "C" fn q_listen(a: *const WlAccept) -> c_int {
    let n = st();
    let acc = *a;
    n.acc = Some(acc);
    n.peer_bidi = (acc.peer_bidi_streams as u64).max(MAX_STREAMS);
    n.peer_uni = (acc.peer_uni_streams as u64).max(MAX_STREAMS);
    let tls = match server_tls(n.o) {
        Ok(t) => t,
        Err(why) => {
            warn(&why);
            return exit::TLS_CONFIG;
        }
    };
    let lim = match limits(n.peer_bidi, n.peer_uni) {
        Ok(l) => l,
        Err(why) => {
            warn(&why);
            return exit::INTERNAL;
        }
    };
    // The socket is qprof-wl's bind (its words for a port in use), then s2n-quic's.
    let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
    if fd < 0 {
        warn(&format!("UDP socket failed: {}", std::io::Error::last_os_error()));
        return exit::INTERNAL;
    }
    let mut sa: sockaddr_in = std::mem::zeroed();
    sa.sin_family = libc::AF_INET as libc::sa_family_t;
    sa.sin_port = n.addr.port().to_be();
    if let std::net::IpAddr::V4(ip) = n.addr.ip() {
        sa.sin_addr.s_addr = u32::from(ip).to_be();
    }
    let code = wl_bind(fd, &sa, c"UDP".as_ptr(), n.o);
    if code != 0 {
        libc::close(fd);
        return code;
    }
    let sock = <std::net::UdpSocket as std::os::fd::FromRawFd>::from_raw_fd(fd);
    let _g = n.rt.enter();
    let io = match s2n_quic::provider::io::tokio::Builder::default()
        .with_rx_socket(sock)
        .and_then(|b| b.build())
    {
        Ok(io) => io,
        Err(e) => {
            warn(&format!("s2n-quic refuses the socket: {e}"));
            return exit::INTERNAL;
        }
    };
    let server = (|| -> Result<Server, String> {
        let s = |e: &dyn std::fmt::Display| e.to_string();
        Server::builder()
            .with_tls(tls)
            .map_err(|e| s(&e))?
            .with_io(io)
            .map_err(|e| s(&e))?
            .with_limits(lim)
            .map_err(|e| s(&e))?
            .with_event(Events)
            .map_err(|e| s(&e))?
            .start()
            .map_err(|e| s(&e))
    })();
    let server = match server {
        Ok(s) => s,
        Err(e) => {
            warn(&format!("s2n-quic cannot start its server: {e}"));
            return exit::LIB_OPEN;
        }
    };
    LISTENING.store(true, Relaxed);
    n.rt.spawn(server_accept(server, Accept(acc)));
    exit::OK
}

/// Latecomers are refused (closed as they come); the live connections go on.
unsafe extern "C" fn q_listen_stop() {
    LISTENING.store(false, Relaxed);
}

unsafe extern "C" fn q_connect(
    h: *const WlConnHandlers,
    ctx: *mut c_void,
    flags: c_uint,
    out: *mut *mut WlConn,
) -> c_int {
    let n = st();
    let Some(client) = n.client.clone() else {
        warn("s2n-quic: no client");
        return exit::INTERNAL;
    };
    let c = Conn::new(false);
    *c.hd.get() = h;
    *c.ctx.get() = ctx;
    *out = c.ptr();
    // WL_CONN_RESUME asks nothing here: s2n-quic resumes no session (see above).
    n.rt.spawn(client_conn(c, client, n.addr, flags & WL_CONN_STATS != 0));
    exit::OK
}

unsafe extern "C" fn q_open(
    c: *mut WlConn,
    h: *const WlStreamHandlers,
    ctx: *mut c_void,
    flags: c_uint,
    out: *mut *mut WlStream,
) -> c_int {
    let c = conn_arc(c);
    if c.sh.lock().unwrap().dead {
        return exit::CONN_LOST;
    }
    let uni = flags & WL_STREAM_UNI != 0;
    let s = Stream::new(&c, true);
    *s.hd.get() = h;
    *s.ctx.get() = ctx;
    *out = s.ptr();
    st().rt.spawn(stream_open(s, uni));
    exit::OK
}

/// The Arc behind a connection's pointer (one more reference to it).
unsafe fn conn_arc(c: *mut WlConn) -> Arc<Conn> {
    let p = c as *const Conn;
    Arc::increment_strong_count(p);
    Arc::from_raw(p)
}

unsafe extern "C" fn q_send(
    s: *mut WlStream,
    hdr: *const u8,
    hdr_len: u32,
    body: *const u8,
    body_len: u32,
    flags: c_uint,
    tag: *mut c_void,
) -> c_int {
    let s = &*(s as *const Stream);
    let mut sh = s.sh.lock().unwrap();
    if sh.over || sh.fin_req || sh.abort_req || hdr_len > WL_HDR_MAX {
        return exit::CONN_LOST;
    }
    if hdr_len > 0 || body_len > 0 || !tag.is_null() {
        let h = if hdr_len > 0 {
            Bytes::copy_from_slice(std::slice::from_raw_parts(hdr, hdr_len as usize))
        } else {
            Bytes::new()
        };
        let b = if body_len == 0 {
            Bytes::new()
        } else if flags & WL_SEND_OWNED != 0 {
            Bytes::copy_from_slice(std::slice::from_raw_parts(body, body_len as usize))
        } else {
            // The read-only pattern region lives for the whole run (wl_transport.h).
            Bytes::from_static(std::slice::from_raw_parts(body, body_len as usize))
        };
        sh.queue.push_back(Msg { parts: [h, b], tag });
        sh.queued += (hdr_len + body_len) as u64;
    }
    if flags & WL_SEND_FIN != 0 {
        sh.fin_req = true;
    }
    poke(s, sh);
    exit::OK
}

unsafe extern "C" fn q_room(s: *mut WlStream) -> usize {
    let s = &*(s as *const Stream);
    room_of(&mut s.sh.lock().unwrap()) as usize
}

unsafe extern "C" fn q_abort(s: *mut WlStream) {
    let s = &*(s as *const Stream);
    let mut sh = s.sh.lock().unwrap();
    sh.abort_req = true;
    poke(s, sh);
}

unsafe extern "C" fn q_close(c: *mut WlConn, code: u64) {
    let c = &*(c as *const Conn);
    let h = {
        let mut sh = c.sh.lock().unwrap();
        if sh.dead || sh.close_req.is_some() {
            return;
        }
        sh.close_req = Some(code);
        sh.handle.clone()
    };
    // s2n-quic closes it on its endpoint's task: no handler runs in this call.
    if let Some(h) = h {
        h.close(app_code(code));
    }
}

unsafe extern "C" fn q_stream_id(s: *mut WlStream) -> i64 {
    (*(s as *const Stream)).id.load(Relaxed)
}

unsafe extern "C" fn q_conn_info(c: *mut WlConn, r: *mut WlDl) {
    let c = &*(c as *const Conn);
    (*r).t_connect = c.t_connect;
    let end = c.sh.lock().unwrap().end;
    if end.connected {
        (*r).t_handshake = end.t_connected;
    }
    // s2n-quic has no 0-RTT, and resumes no session here: every handshake is a full one.
    (*r).has_resumed = true;
    (*r).resumed = false;
    (*r).has_early = true;
    (*r).early_data = false;
    if let Some(k) = c.counts.lock().unwrap().as_ref() {
        (*r).has_counters = true;
        (*r).has_lost = true;
        (*r).no_retransmits = true; /* s2n-quic counts lost packets, not retransmissions */
        (*r).lost_packets = k.lost.load(Relaxed);
        (*r).packets_sent = k.sent.load(Relaxed);
        (*r).packets_received = k.received.load(Relaxed);
    }
    let _ = c.server;
}

/// How long the client's end waits for its connections' closes to go out.
const CLOSE_FLUSH: Duration = Duration::from_secs(3);

unsafe extern "C" fn q_fini() {
    if let Some(n) = (*G.0.get()).as_mut() {
        // A closed connection's CONNECTION_CLOSE goes out on the endpoint's
        // task, later: stopping the runtime at once lost it 1 time in 6 here,
        // and the peer then waited out its idle timeout (10 s). The client
        // waits for its endpoint to be idle first (bounded: a handle kept
        // elsewhere would hold it), its runtime still driven by its thread.
        if let Some(client) = n.client.as_mut() {
            let _ =
                n.rt.block_on(async { tokio::time::timeout(CLOSE_FLUSH, client.wait_idle()).await });
        }
        n.stop.notify_one();
    }
}

#[no_mangle]
pub static wl_s2n_quic: WlTransport = WlTransport {
    name: c"s2n-quic".as_ptr(),
    multistream: true,
    early_data: false,
    init: Some(q_init),
    setup: Some(q_setup),
    listen: Some(q_listen),
    listen_stop: Some(q_listen_stop),
    connect: Some(q_connect),
    open: Some(q_open),
    send: Some(q_send),
    room: Some(q_room),
    pause: None,
    abort: Some(q_abort),
    close: Some(q_close),
    stream_id: Some(q_stream_id),
    conn_info: Some(q_conn_info),
    mark_snapshot: None,
    json_connected: Some(json_library),
    json_mark: Some(q_json_mark),
    json_done: Some(q_json_done),
    fini: Some(q_fini),
};
