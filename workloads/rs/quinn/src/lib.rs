// SPDX-License-Identifier: GPL-2.0-only
//! The quinn transport (workloads/wl_transport.h): QUIC in quinn's
//! protocol crate, quinn-proto, on rustls with its default provider
//! (aws-lc-rs), driven by qprof-wl's one event loop (wl_loop.c) as
//! quiche's and ngtcp2's connections are: a client's connection has a
//! connected UDP socket of its own, the server one listening socket whose
//! datagrams quinn-proto's endpoint routes to their connection; each
//! connection has a timerfd for quinn-proto's timeout. Every handler runs
//! on the loop's thread, so every pattern qprof-wl runs (wl_role.h) runs on
//! quinn, written once. quinn's own crate is this same state machine
//! driven by tokio tasks; here qprof-wl's loop drives it, and its UDP I/O
//! is qprof-wl's one datapath (wl_udpio.c), with quinn's batch of 10
//! datagrams a send (quinn's MAX_TRANSMIT_SEGMENTS) and its socket
//! options (IP_PMTUDISC_PROBE, 2 MiB buffers each way as quinn's perf tool).
//!
//! A plugin: qprof-wl loads build/lib/libqprof-wl-quinn.so for --stack
//! quinn (wl_plugin.c), whose calls into qprof-wl resolve against the
//! executable; wlffi mirrors the C structures and checks their sizes.
//!
//! TLS 1.3 with TLS_AES_128_GCM_SHA256 alone, ALPN "qprof" (or "perf", --proto), the run's
//! certificate (server), no chain check (client: the certificate is
//! self-signed, as for the other stacks; the handshake's signature is
//! checked). --resume: rustls's in-memory session cache, and 0-RTT (the
//! server takes early data; the client's request goes in it).
//!
//! quinn-proto takes a message's bytes as `Bytes`: a body in the pattern
//! region without a copy (it lives for the run), a header or a caller's
//! own buffer (WL_SEND_OWNED) copied. A message waits here only until
//! quinn takes it; wl_room() is ROOM_AHEAD less what waits, and 0 once
//! quinn said the stream is blocked, until its Writable event.

use std::collections::{HashMap, VecDeque};
use std::ffi::{c_int, c_uint, c_void, CStr};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use quinn_proto::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn_proto::{
    ClientConfig, Connection, ConnectionError, ConnectionHandle, DatagramEvent, Dir, Endpoint, EndpointConfig,
    EndpointEvent, Event, ReadError, ServerConfig, StreamEvent, StreamId, TransportConfig, VarInt, WriteError,
};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CipherSuite, DigitallySignedStruct, SignatureScheme};
use serde_json::json;
use wlffi::*;

/// --proto's ALPN: "qprof" or "perf" (qprof_wl.c sets wl_opts.alpn).
unsafe fn alpn(o: *const WlOpts) -> Vec<u8> {
    opt_str((*o).alpn).unwrap_or("qprof").as_bytes().to_vec()
}
const SERVER_NAME: &str = "qprof";
/// The connection's window: unlimited (VarInt::MAX).
const RECEIVE_WINDOW: VarInt = VarInt::MAX;
/// Each stream's window and what a sender may have unacknowledged: far
/// above any bandwidth-delay product between two namespaces or a --link.
const STREAM_WINDOW: u32 = 16 << 20;
const SEND_WINDOW: u64 = 64 << 20;
/// Streams of each kind the peer may open at once (wl.h's WL_MAX_STREAMS and more).
const MAX_STREAMS: u32 = 128;
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
const HANDSHAKE_TIMEOUT_NS: u64 = 10_000_000_000; /* as msquic's (wl_quic.c) */
/// Datagrams a send: quinn's MAX_TRANSMIT_SEGMENTS ("benchmarks have shown" it, quinn/src/connection.rs).
const GSO_SEGMENTS: usize = 10;
const RX_BUF: usize = 65536; /* a recvmsg's: what GRO coalesces at most */
const RX_BURST: usize = 64; /* recvmsg calls before the connections are served */
/// What a stream takes beyond what quinn has taken, before it says no room.
const ROOM_AHEAD: u64 = 256 << 10;
const IMMINENT_NS: u64 = 50_000;
const EPOLLIN: u32 = libc::EPOLLIN as u32;

// ------------------------------------------------------------ state

/// A message on a stream, kept until quinn has taken all of it.
struct Msg {
    parts: [Bytes; 2], /* header, body: each advanced as quinn takes it */
    tag: *mut c_void,
}

struct Stream {
    c: *mut Conn,
    id: Option<StreamId>, /* None: ours, not yet opened (the peer's stream limit) */
    uni: bool,
    recv_only: bool,
    hd: *const WlStreamHandlers, /* NULL: refused */
    ctx: *mut c_void,
    queue: VecDeque<Msg>,
    queued: u64,
    fin_req: bool,
    fin_written: bool,
    send_done: bool, /* quinn's Finished: every byte and the FIN acknowledged */
    peer_fin: bool,
    aborted: bool,
    abort_req: bool,
    abort_done: bool,
    starved: bool, /* room() said 0 or quinn said blocked: writable is owed once it may go on */
    blocked: bool,
    owe_writable: bool,
}

struct Conn {
    ch: ConnectionHandle,
    q: Connection,
    hd: *const WlConnHandlers,
    ctx: *mut c_void,
    server: bool,
    fd: c_int,
    timer: c_int,
    remote: SocketAddr,
    streams: Vec<*mut Stream>,
    end: WlEnd,
    t_connect: u64,
    armed: u64,
    busy: i32,
    again: bool,
    dead: bool,
    close_req: bool,
    close_code: u64,
    stats: bool,
    offered_0rtt: bool,
    counts: [u64; 4], /* its part of the sums: sent, lost packets, lost bytes, congestion events */
    lingering: bool,  /* over for the app, in its closing period for quinn (finish) */
}

struct State {
    o: *const WlOpts,
    server: bool,
    addr: SocketAddr,
    endpoint: Option<Endpoint>,
    client: Option<ClientConfig>,
    acc: Option<WlAccept>,
    peer_bidi: Option<u32>,
    listen_fd: c_int,
    listening: bool,
    io: WlUdpIo,
    conns: HashMap<ConnectionHandle, *mut Conn>,
    txbuf: Vec<u8>,
    rx: BytesMut,
    key_exchange: Vec<String>,
}

/// What marks report, kept by the loop's thread: a mark reads it on the control thread.
#[derive(Default)]
struct Stats {
    sum: [u64; 4],
    levels: Option<(u64, u64, u64)>, /* the stats connection's cwnd, RTT (us), MTU */
}

struct Global(std::cell::UnsafeCell<Option<State>>);
// The state is the loop's thread's; a mark reads only io's atomics and STATS.
unsafe impl Sync for Global {}
static G: Global = Global(std::cell::UnsafeCell::new(None));
static STATS: Mutex<Stats> = Mutex::new(Stats {
    sum: [0; 4],
    levels: None,
});

fn st() -> *mut State {
    unsafe { (*G.0.get()).as_mut().expect("quinn: init first") as *mut State }
}

// ------------------------------------------------------------ reports

/// The connection's counts into the sums, and (the stats connection) its levels.
unsafe fn snapshot(c: *mut Conn) {
    let p = (*c).q.stats().path;
    let now = [p.sent_packets, p.lost_packets, p.lost_bytes, p.congestion_events];
    let mut s = STATS.lock().unwrap();
    for i in 0..4 {
        s.sum[i] += now[i] - (*c).counts[i];
    }
    (*c).counts = now;
    if (*c).stats {
        s.levels = Some((p.cwnd, p.rtt.as_micros() as u64, p.current_mtu as u64));
    }
}

unsafe extern "C" fn json_library(j: *mut WlJson) {
    let n = st();
    json_raw(
        j,
        c"quic_library",
        &json!({
            "name": "quinn",
            "version": env!("QPROF_QUINN_PROTO_VERSION"),
            "crypto": format!("rustls {} on aws-lc-rs {}", env!("QPROF_RUSTLS_VERSION"), env!("QPROF_AWS_LC_RS_VERSION")),
            "cipher": "TLS13_AES_128_GCM_SHA256",
            // The provider's key exchange groups, most preferred first (rustls's defaults).
            "key_exchange": (*n).key_exchange,
        })
        .to_string(),
    );
    let mut settings = json!({
        "receive_window": RECEIVE_WINDOW.into_inner(),
        "stream_receive_window": STREAM_WINDOW,
        "send_window": SEND_WINDOW,
        "socket_send_buffer": (*n).io.sndbuf,
        "socket_recv_buffer": (*n).io.rcvbuf,
    });
    if let Some(b) = (*n).peer_bidi {
        settings["max_concurrent_bidi_streams"] = b.into();
    }
    json_raw(j, c"quic_settings", &settings.to_string());
    wl_json_bool(j, c"send_segmentation".as_ptr(), (*n).io.gso);
    // quinn-udp believes GRO once UDP_GRO's setsockopt was taken (the stack's gro_word).
    wl_json_bool(j, c"recv_coalescing".as_ptr(), (*n).io.gro);
}

unsafe extern "C" fn q_json_mark(j: *mut WlJson) {
    let n = st();
    let (sum, levels) = {
        let s = STATS.lock().unwrap();
        (s.sum, s.levels)
    };
    let mut p = WlJsonBuf::new();
    // The datapath's counts (udp_tx_datagrams ... udp_rx_ios) as of one moment, then quinn's.
    wl_udp_io_json(&mut (*n).io, p.ptr());
    for (k, v) in [c"sent_packets", c"lost_packets", c"lost_bytes", c"congestion_events"]
        .iter()
        .zip(sum)
    {
        wl_json_u64(p.ptr(), k.as_ptr(), v);
    }
    if let Some((cwnd, rtt, mtu)) = levels {
        wl_json_u64(p.ptr(), c"cwnd".as_ptr(), cwnd);
        wl_json_u64(p.ptr(), c"rtt_us".as_ptr(), rtt);
        wl_json_u64(p.ptr(), c"current_mtu".as_ptr(), mtu);
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

// ------------------------------------------------------------ addresses

fn to_sockaddr(a: &SocketAddr) -> sockaddr_in {
    let mut s: sockaddr_in = unsafe { std::mem::zeroed() };
    s.sin_family = libc::AF_INET as libc::sa_family_t;
    s.sin_port = a.port().to_be();
    if let IpAddr::V4(ip) = a.ip() {
        s.sin_addr.s_addr = u32::from(ip).to_be();
    }
    s
}

fn from_sockaddr(s: &sockaddr_in) -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(
        Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr)),
        u16::from_be(s.sin_port),
    ))
}

/// quinn-udp's IP_PMTUDISC_PROBE on a socket of the datapath (quinn's path MTU discovery needs DF).
unsafe fn pmtud(fd: c_int) {
    let v: c_int = libc::IP_PMTUDISC_PROBE;
    libc::setsockopt(
        fd,
        libc::IPPROTO_IP,
        libc::IP_MTU_DISCOVER,
        &v as *const c_int as *const c_void,
        size_of::<c_int>() as libc::socklen_t,
    );
}

// ------------------------------------------------------------ ends

unsafe fn set_transport_end(c: *mut Conn, why: &'static CStr) {
    if (*c).end.closed_by_transport || (*c).end.closed_by_peer {
        return;
    }
    (*c).end.closed_by_transport = true;
    (*c).end.transport_status = why.as_ptr();
}

/// TLS alerts are QUIC's CRYPTO_ERROR codes, 0x100-0x1ff.
fn crypto(code: u64) -> bool {
    (0x100..0x200).contains(&code)
}

/// The connection is over: what ended it, into c's end.
unsafe fn conn_lost(c: *mut Conn, why: &ConnectionError) {
    (*c).dead = true;
    if (*c).end.closed_by_transport || (*c).end.closed_by_peer {
        return;
    }
    match why {
        ConnectionError::ApplicationClosed(a) => {
            (*c).end.closed_by_peer = true;
            (*c).end.peer_error = a.error_code.into_inner();
            (*c).end.t_peer_closed = wl_now_ns();
        }
        ConnectionError::ConnectionClosed(cc) => {
            let code = u64::from(cc.error_code);
            if code == 0 {
                (*c).end.closed_by_peer = true;
                (*c).end.t_peer_closed = wl_now_ns();
            } else if crypto(code) {
                set_transport_end(c, c"TLS handshake failed");
            } else {
                set_transport_end(c, c"the peer closed the connection with a transport error");
            }
        }
        ConnectionError::TimedOut => set_transport_end(
            c,
            if (*c).end.connected {
                c"idle timeout"
            } else {
                c"handshake timeout"
            },
        ),
        ConnectionError::Reset => set_transport_end(c, c"the peer reset the connection (stateless reset)"),
        ConnectionError::TransportError(e) => set_transport_end(
            c,
            if crypto(u64::from(e.code)) {
                c"TLS handshake failed"
            } else {
                c"quinn closed the connection"
            },
        ),
        ConnectionError::VersionMismatch => set_transport_end(c, c"the peer speaks no QUIC version of quinn's"),
        ConnectionError::CidsExhausted => set_transport_end(c, c"quinn ran out of connection IDs"),
        ConnectionError::LocallyClosed => {}
    }
}

// ------------------------------------------------------------ streams

unsafe fn stream_new(c: *mut Conn, id: Option<StreamId>) -> *mut Stream {
    let s = Box::into_raw(Box::new(Stream {
        c,
        id,
        uni: false,
        recv_only: false,
        hd: std::ptr::null(),
        ctx: std::ptr::null_mut(),
        queue: VecDeque::new(),
        queued: 0,
        fin_req: false,
        fin_written: false,
        send_done: false,
        peer_fin: false,
        aborted: false,
        abort_req: false,
        abort_done: false,
        starved: false,
        blocked: false,
        owe_writable: false,
    }));
    (*c).streams.push(s);
    s
}

unsafe fn stream_of(c: *mut Conn, id: StreamId) -> *mut Stream {
    for &s in &(*c).streams {
        if (*s).id == Some(id) {
            return s;
        }
    }
    std::ptr::null_mut()
}

unsafe fn stream_free(s: *mut Stream) {
    let c = (*s).c;
    while let Some(m) = (*s).queue.pop_front() {
        if !m.tag.is_null() && !(*s).hd.is_null() {
            if let Some(f) = (*(*s).hd).sent {
                f(s as *mut c_void, (*s).ctx, m.tag, true);
            }
        }
    }
    (*c).streams.retain(|&x| x != s);
    drop(Box::from_raw(s));
}

unsafe extern "C" fn q_room(s: *mut WlStream) -> usize {
    let s = s as *mut Stream;
    if (*(*s).c).dead || (*s).fin_req || (*s).aborted || (*s).recv_only {
        return 0;
    }
    let room = if (*s).blocked {
        0
    } else {
        ROOM_AHEAD.saturating_sub((*s).queued)
    };
    if room == 0 {
        (*s).starved = true;
    }
    room as usize
}

unsafe extern "C" fn q_stream_id(s: *mut WlStream) -> i64 {
    match (*(s as *mut Stream)).id {
        Some(id) => VarInt::from(id).into_inner() as i64,
        None => -1,
    }
}

unsafe fn peer_aborted(s: *mut Stream) {
    if (*s).aborted {
        return;
    }
    (*s).aborted = true;
    if !(*s).hd.is_null() {
        if let Some(f) = (*(*s).hd).aborted {
            f(s as *mut c_void, (*s).ctx);
        }
    }
    (*s).abort_req = true;
    (*(*s).c).again = true;
}

/// What waits on s, to quinn, as far as it takes it; then the FIN.
unsafe fn stream_write(s: *mut Stream) {
    let c = (*s).c;
    let Some(id) = (*s).id else { return };
    while let Some(m) = (*s).queue.front_mut() {
        let before: usize = m.parts.iter().map(|b| b.len()).sum();
        if before > 0 {
            let r = (*c).q.send_stream(id).write_chunks(&mut m.parts);
            match r {
                Ok(w) => {
                    (*s).queued -= w.bytes as u64;
                    if w.bytes < before {
                        (*s).blocked = true;
                        return;
                    }
                }
                Err(WriteError::Blocked) => {
                    (*s).blocked = true;
                    return;
                }
                Err(WriteError::Stopped(_)) => {
                    peer_aborted(s);
                    return;
                }
                Err(WriteError::ClosedStream) => {
                    peer_aborted(s);
                    return;
                }
            }
        }
        let m = (*s).queue.pop_front().unwrap();
        if !m.tag.is_null() && !(*s).hd.is_null() {
            if let Some(f) = (*(*s).hd).sent {
                f(s as *mut c_void, (*s).ctx, m.tag, false);
            }
        }
    }
    if (*s).fin_req && !(*s).fin_written && (*s).queue.is_empty() {
        match (*c).q.send_stream(id).finish() {
            Ok(()) => (*s).fin_written = true,
            Err(_) => peer_aborted(s),
        }
    }
}

/// A stream's readable bytes to its handlers (collected first: a handler may call into the connection).
unsafe fn stream_read(c: *mut Conn, s: *mut Stream) {
    let Some(id) = (*s).id else { return };
    let mut got: Vec<Bytes> = Vec::new();
    let (mut fin, mut reset) = (false, false);
    {
        let mut rs = (*c).q.recv_stream(id);
        if let Ok(mut chunks) = rs.read(true) {
            loop {
                match chunks.next(usize::MAX) {
                    Ok(Some(ch)) => got.push(ch.bytes),
                    Ok(None) => {
                        fin = true;
                        break;
                    }
                    Err(ReadError::Blocked) => break,
                    Err(ReadError::Reset(_)) => {
                        reset = true;
                        break;
                    }
                }
            }
            let _ = chunks.finalize();
        };
    }
    for b in got {
        if !(*s).hd.is_null() && !(*s).aborted {
            if let Some(f) = (*(*s).hd).data {
                f(s as *mut c_void, (*s).ctx, b.as_ptr(), b.len());
            }
        }
    }
    if reset {
        peer_aborted(s);
    } else if fin && !(*s).peer_fin {
        (*s).peer_fin = true;
        if !(*s).hd.is_null() && !(*s).aborted {
            if let Some(f) = (*(*s).hd).fin {
                f(s as *mut c_void, (*s).ctx);
            }
        }
    }
}

/// The peer opened streams of dir: each to the connection's stream handler.
unsafe fn streams_accept(c: *mut Conn, dir: Dir) {
    while let Some(id) = (*c).q.streams().accept(dir) {
        let s = stream_new(c, Some(id));
        (*s).recv_only = dir == Dir::Uni;
        let hd = (*(*c).hd).stream;
        (*s).hd = match hd {
            Some(f) => f(c as *mut c_void, (*c).ctx, s as *mut c_void, &mut (*s).ctx),
            None => std::ptr::null(),
        };
        if (*s).hd.is_null() {
            (*s).abort_req = true; /* refused */
        } else if !(*s).recv_only {
            (*s).owe_writable = true;
        }
        stream_read(c, s);
    }
}

/// Over once both ways are done: ours acknowledged (or aborted), the peer's FIN read.
unsafe fn stream_over(s: *mut Stream) -> bool {
    if (*s).abort_done {
        return true;
    }
    ((*s).uni || (*s).peer_fin) && ((*s).recv_only || (*s).send_done)
}

// ------------------------------------------------------------ events and packets

/// quinn-proto's endpoint events to the endpoint, its answers to the connection.
unsafe fn endpoint_events(c: *mut Conn) {
    let n = st();
    while let Some(ev) = (*c).q.poll_endpoint_events() {
        if let Some(ep) = (*n).endpoint.as_mut() {
            if let Some(ce) = ep.handle_event((*c).ch, ev) {
                (*c).q.handle_event(ce);
            }
        }
    }
}

unsafe fn app_events(c: *mut Conn) {
    while !(*c).dead {
        let Some(ev) = (*c).q.poll() else { break };
        match ev {
            Event::Connected => handshake_done(c),
            Event::ConnectionLost { reason } => conn_lost(c, &reason),
            Event::Stream(StreamEvent::Opened { dir }) => streams_accept(c, dir),
            Event::Stream(StreamEvent::Readable { id }) => {
                let s = stream_of(c, id);
                if s.is_null() {
                    let _ = (*c).q.recv_stream(id).stop(VarInt::from_u32(WL_CLOSE_ERROR as u32));
                } else {
                    stream_read(c, s);
                }
            }
            Event::Stream(StreamEvent::Writable { id }) => {
                let s = stream_of(c, id);
                if !s.is_null() {
                    (*s).blocked = false;
                }
            }
            Event::Stream(StreamEvent::Finished { id }) => {
                let s = stream_of(c, id);
                if !s.is_null() {
                    (*s).send_done = true;
                }
            }
            Event::Stream(StreamEvent::Stopped { id, .. }) => {
                let s = stream_of(c, id);
                if !s.is_null() {
                    peer_aborted(s);
                }
            }
            Event::Stream(StreamEvent::Available { .. }) => (*c).again = true,
            Event::HandshakeDataReady | Event::DatagramReceived | Event::DatagramsUnblocked => {}
        }
    }
}

/// Every packet quinn has, GSO_SEGMENTS datagrams of one size a send at most.
unsafe fn conn_flush(c: *mut Conn) {
    let n = st();
    let max = if (*n).io.gso { GSO_SEGMENTS } else { 1 };
    let to = to_sockaddr(&(*c).remote);
    loop {
        (*n).txbuf.clear();
        let Some(t) = (*c).q.poll_transmit(Instant::now(), max, &mut (*n).txbuf) else {
            break;
        };
        let seg = t.segment_size.unwrap_or(t.size);
        let dest = if (*c).server { to_sockaddr(&t.destination) } else { to };
        wl_udp_io_send(
            &mut (*n).io,
            (*c).fd,
            if (*c).server { &dest } else { std::ptr::null() },
            (*n).txbuf.as_mut_ptr(),
            t.size,
            seg,
        );
    }
}

unsafe fn arm(c: *mut Conn) {
    let Some(t) = (*c).q.poll_timeout() else { return };
    let now = wl_now_ns();
    let e = now + t.saturating_duration_since(Instant::now()).as_nanos() as u64;
    // Set for no later already: it fires then, and is set again (wl_quiche.c's arm says why).
    if e >= (*c).armed {
        return;
    }
    if e <= now + IMMINENT_NS {
        wl_loop_again((*c).timer);
        return;
    }
    (*c).armed = e;
    wl_timer_arm((*c).timer, e);
}

/// The connection is over for the app: its streams' and its own closed
/// handlers now. A connection this side closed stays in its closing
/// period (RFC 9000 10.2.1) with its timer and socket until quinn says it
/// has drained, answering the peer's packets with its CONNECTION_CLOSE: a
/// close sent once and lost (the peer's socket full under a download)
/// left the peer waiting out its idle timeout (30 s), as quinn's own
/// endpoint driver does not.
unsafe fn finish(c: *mut Conn) {
    (*c).busy = 1; /* for good: what its handlers ask now does nothing */
    snapshot(c);
    while let Some(&s) = (*c).streams.first() {
        if !(*s).hd.is_null() {
            if let Some(f) = (*(*s).hd).closed {
                f(s as *mut c_void, (*s).ctx, false);
            }
        }
        stream_free(s);
    }
    if (*c).stats {
        STATS.lock().unwrap().levels = None;
    }
    // Only a close of ours: one the peer sent leaves nothing to answer (draining, 10.2.2).
    if (*c).close_req && (*c).q.is_closed() && !(*c).q.is_drained() {
        (*c).lingering = true;
        (*c).armed = u64::MAX - 1; /* quinn's close timer from now on */
        arm(c);
    }
    if let Some(f) = (*(*c).hd).closed {
        f(c as *mut c_void, (*c).ctx, &(*c).end);
    }
    if !(*c).lingering {
        release(c);
    }
}

/// A lingering connection's turn (a datagram, its timer): its close
/// answered or timed, and released once drained.
unsafe fn linger(c: *mut Conn) {
    endpoint_events(c);
    while (*c).q.poll().is_some() {} /* the app's part is over */
    conn_flush(c);
    endpoint_events(c);
    if (*c).q.is_drained() {
        release(c);
        return;
    }
    arm(c);
}

/// Its timer, its socket (a client's), its place in the endpoint: gone.
unsafe fn release(c: *mut Conn) {
    let n = st();
    wl_loop_del((*c).timer);
    libc::close((*c).timer);
    if !(*c).server && (*c).fd >= 0 {
        wl_loop_del((*c).fd);
        libc::close((*c).fd);
    }
    (*n).conns.remove(&(*c).ch);
    if !(*c).q.is_drained() {
        if let Some(ep) = (*n).endpoint.as_mut() {
            let _ = ep.handle_event((*c).ch, EndpointEvent::drained());
        }
    }
    drop(Box::from_raw(c));
}

unsafe fn handshake_done(c: *mut Conn) {
    (*c).end.connected = true;
    (*c).end.t_connected = wl_now_ns();
    if let Some(f) = (*(*c).hd).connected {
        f(c as *mut c_void, (*c).ctx);
    }
}

unsafe fn service(c: *mut Conn) {
    if (*c).busy > 0 {
        (*c).again = true;
        return;
    }
    (*c).busy += 1;
    let mut rounds = 0;
    loop {
        (*c).again = false;
        endpoint_events(c);
        app_events(c);
        // By index, not over a copy: a handler may open a stream (pushed at
        // the end); only the closed step below takes one out.
        let mut i = 0;
        while i < (*c).streams.len() && !(*c).dead {
            let s = (&(*c).streams)[i];
            i += 1;
            if (*s).id.is_none() {
                (*s).id = (*c).q.streams().open(if (*s).uni { Dir::Uni } else { Dir::Bi });
            }
            if (*s).abort_req && !(*s).abort_done {
                (*s).abort_done = true;
                if let Some(id) = (*s).id {
                    let code = VarInt::from_u32(WL_CLOSE_ERROR as u32);
                    if !(*s).recv_only {
                        let _ = (*c).q.send_stream(id).reset(code);
                    }
                    if !(*s).uni {
                        let _ = (*c).q.recv_stream(id).stop(code);
                    }
                }
            }
        }
        if (*c).close_req && !(*c).dead {
            (*c).q.close(
                Instant::now(),
                VarInt::from_u64((*c).close_code).unwrap_or(VarInt::MAX),
                Bytes::new(),
            );
            conn_flush(c); /* the CONNECTION_CLOSE: the connection is over for us */
            (*c).dead = true;
        }
        let mut i = 0;
        while i < (*c).streams.len() && !(*c).dead {
            let s = (&(*c).streams)[i];
            i += 1;
            if !(*s).abort_done && (!(*s).queue.is_empty() || ((*s).fin_req && !(*s).fin_written)) {
                stream_write(s);
            }
        }
        if !(*c).dead {
            conn_flush(c);
            endpoint_events(c);
        }
        let mut i = 0;
        while i < (*c).streams.len() && !(*c).dead {
            let s = (&(*c).streams)[i];
            if !stream_over(s) {
                i += 1;
                continue;
            }
            if !(*s).hd.is_null() {
                if let Some(f) = (*(*s).hd).closed {
                    f(s as *mut c_void, (*s).ctx, !(*s).aborted && !(*s).abort_done);
                }
            }
            stream_free(s); /* out of the list: the next is at i now */
        }
        let mut i = 0;
        while i < (*c).streams.len() && !(*c).dead {
            let s = (&(*c).streams)[i];
            i += 1;
            if ((*s).owe_writable || (*s).starved)
                && !(*s).hd.is_null()
                && !(*s).fin_req
                && !(*s).aborted
                && !(*s).recv_only
                && (*s).id.is_some()
                && !(*s).blocked
            {
                (*s).owe_writable = false;
                (*s).starved = false; /* q_room says it again if there is none */
                if q_room(s as *mut c_void) > 0 {
                    if let Some(f) = (*(*s).hd).writable {
                        f(s as *mut c_void, (*s).ctx);
                    }
                }
            }
        }
        rounds += 1;
        if !(*c).again || (*c).dead || rounds >= 16 {
            break;
        }
    }
    snapshot(c);
    if (*c).dead {
        finish(c);
        return;
    }
    arm(c);
    if (*c).again {
        wl_loop_again((*c).timer);
    }
    (*c).busy -= 1;
}

unsafe extern "C" fn on_timer(fd: c_int, _events: u32, arg: *mut c_void) {
    let c = arg as *mut Conn;
    let mut v: u64 = 0;
    if libc::read(fd, &mut v as *mut u64 as *mut c_void, 8) == 8 {
        (*c).armed = u64::MAX - 1; /* it fired: disarmed now */
    } else if *libc::__errno_location() != libc::EAGAIN {
        return;
    }
    if (*c).lingering {
        (*c).q.handle_timeout(Instant::now());
        linger(c);
        return;
    }
    // A handshake that never completes: given up, as msquic's and ngtcp2's.
    if !(*c).end.connected && !(*c).dead && wl_now_ns() - (*c).t_connect > HANDSHAKE_TIMEOUT_NS {
        set_transport_end(c, c"handshake timeout");
        (*c).dead = true;
    } else {
        (*c).q.handle_timeout(Instant::now());
    }
    service(c);
}

// ------------------------------------------------------------ reading

/// One datagram to the endpoint: the connection it touched (NULL: none, or answered by the endpoint).
unsafe fn feed(fd: c_int, data: BytesMut, from: SocketAddr) -> *mut Conn {
    let n = st();
    let now = Instant::now();
    let ep = (*n).endpoint.as_mut().unwrap();
    let ev = ep.handle(now, from, None, None, data, &mut (*n).txbuf);
    match ev {
        Some(DatagramEvent::ConnectionEvent(ch, ce)) => match (*n).conns.get(&ch) {
            Some(&c) if !(*c).dead || (*c).lingering => {
                (*c).q.handle_event(ce);
                c
            }
            _ => std::ptr::null_mut(),
        },
        Some(DatagramEvent::NewConnection(incoming)) => {
            if !(*n).listening {
                ep.ignore(incoming);
                return std::ptr::null_mut();
            }
            (*n).txbuf.clear();
            match ep.accept(incoming, now, &mut (*n).txbuf, None) {
                Ok((ch, q)) => server_conn(ch, q, fd, from),
                Err(e) => {
                    if let Some(t) = e.response {
                        let to = to_sockaddr(&t.destination);
                        wl_udp_io_send(&mut (*n).io, fd, &to, (*n).txbuf.as_mut_ptr(), t.size, t.size);
                    }
                    std::ptr::null_mut()
                }
            }
        }
        Some(DatagramEvent::Response(t)) => {
            let to = to_sockaddr(&t.destination);
            let seg = t.segment_size.unwrap_or(t.size);
            wl_udp_io_send(
                &mut (*n).io,
                fd,
                if (*n).server { &to } else { std::ptr::null() },
                (*n).txbuf.as_mut_ptr(),
                t.size,
                seg,
            );
            std::ptr::null_mut()
        }
        None => std::ptr::null_mut(),
    }
}

/// Every datagram waiting on fd (up to RX_BURST receives), then each
/// connection touched served. Each receive lands in the spare room of one
/// buffer (quinn-proto keeps a packet's stream data as slices of it, no
/// copy), its datagrams split off it, as quinn's endpoint driver does.
unsafe extern "C" fn on_fd(fd: c_int, _events: u32, _arg: *mut c_void) {
    let n = st();
    let mut touched: Vec<*mut Conn> = Vec::new();
    for _ in 0..RX_BURST {
        let mut from: sockaddr_in = std::mem::zeroed();
        let mut seg: usize = 0;
        let rx = &mut (*n).rx;
        rx.reserve(RX_BUF);
        let room = rx.spare_capacity_mut();
        let len = wl_udp_io_recv(
            &mut (*n).io,
            fd,
            room.as_mut_ptr() as *mut u8,
            room.len(),
            &mut from,
            &mut seg,
        );
        if len <= 0 {
            break;
        }
        let (len, from) = (len as usize, from_sockaddr(&from));
        rx.set_len(len);
        let mut data = rx.split_to(len);
        let seg = if seg == 0 { len } else { seg };
        while !data.is_empty() {
            let one = data.split_to(seg.min(data.len()));
            let c = feed(fd, one, from);
            if !c.is_null() && !touched.contains(&c) {
                (*c).busy += 1; /* held until served below */
                (*c).remote = from;
                touched.push(c);
            }
        }
    }
    for c in touched {
        (*c).busy -= 1;
        if (*c).lingering {
            linger(c);
        } else {
            service(c);
        }
    }
}

unsafe fn conn_alloc(ch: ConnectionHandle, q: Connection, server: bool, fd: c_int, remote: SocketAddr) -> *mut Conn {
    let timer = wl_timer_open();
    if timer < 0 {
        return std::ptr::null_mut();
    }
    let c = Box::into_raw(Box::new(Conn {
        ch,
        q,
        hd: std::ptr::null(),
        ctx: std::ptr::null_mut(),
        server,
        fd,
        timer,
        remote,
        streams: Vec::new(),
        end: WlEnd::default(),
        t_connect: wl_now_ns(),
        armed: u64::MAX - 1,
        busy: 0,
        again: false,
        dead: false,
        close_req: false,
        close_code: 0,
        stats: false,
        offered_0rtt: false,
        counts: [0; 4],
        lingering: false,
    }));
    if wl_loop_add(timer, EPOLLIN, on_timer, c as *mut c_void) != 0 {
        libc::close(timer);
        drop(Box::from_raw(c));
        return std::ptr::null_mut();
    }
    c
}

unsafe fn conn_drop(c: *mut Conn) {
    let n = st();
    if let Some(ep) = (*n).endpoint.as_mut() {
        let _ = ep.handle_event((*c).ch, EndpointEvent::drained());
    }
    wl_loop_del((*c).timer);
    libc::close((*c).timer);
    drop(Box::from_raw(c));
}

unsafe fn take_stats(c: *mut Conn, flags: c_uint) {
    if flags & WL_CONN_STATS == 0 {
        return;
    }
    let n = st();
    if !(*n).conns.values().any(|&o| o != c && (*o).stats) {
        (*c).stats = true;
    }
}

/// Server: the endpoint accepted a client's Initial; NULL if the pattern refuses it.
unsafe fn server_conn(ch: ConnectionHandle, q: Connection, fd: c_int, from: SocketAddr) -> *mut Conn {
    let n = st();
    let acc = (*n).acc.unwrap();
    let c = conn_alloc(ch, q, true, fd, from);
    if c.is_null() {
        if let Some(ep) = (*n).endpoint.as_mut() {
            let _ = ep.handle_event(ch, EndpointEvent::drained());
        }
        return c;
    }
    (*c).hd = acc.accept.unwrap()(acc.arg, c as *mut c_void, &mut (*c).ctx);
    if (*c).hd.is_null() {
        conn_drop(c);
        return std::ptr::null_mut();
    }
    (*n).conns.insert(ch, c);
    take_stats(c, acc.flags);
    c
}

// ------------------------------------------------------------ configuration

fn provider() -> Arc<CryptoProvider> {
    let mut p = rustls::crypto::aws_lc_rs::default_provider();
    p.cipher_suites
        .retain(|s| s.suite() == CipherSuite::TLS13_AES_128_GCM_SHA256);
    Arc::new(p)
}

/// peer_bidi, peer_uni: the streams the peer may open at once.
fn transport(peer_bidi: Option<u32>, peer_uni: u32) -> Arc<TransportConfig> {
    let mut t = TransportConfig::default();
    t.receive_window(RECEIVE_WINDOW)
        .stream_receive_window(VarInt::from_u32(STREAM_WINDOW))
        .send_window(SEND_WINDOW)
        .max_concurrent_uni_streams(VarInt::from_u32(peer_uni))
        .max_idle_timeout(Some(IDLE_TIMEOUT.try_into().unwrap()));
    if let Some(b) = peer_bidi {
        t.max_concurrent_bidi_streams(VarInt::from_u32(b));
    }
    Arc::new(t)
}

unsafe fn server_config(o: *const WlOpts, peer_bidi: Option<u32>, peer_uni: u32) -> Result<ServerConfig, String> {
    let (Some(cert), Some(key)) = (opt_str((*o).cert), opt_str((*o).key)) else {
        return Err("the server needs --cert and --key".into());
    };
    let certs: Vec<CertificateDer> = CertificateDer::pem_file_iter(cert)
        .and_then(|it| it.collect())
        .map_err(|e| format!("cannot read the certificate {cert}: {e}"))?;
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| format!("cannot read the key {key}: {e}"))?;
    let mut c = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| format!("rustls refuses TLS 1.3: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("rustls refuses the certificate: {e}"))?;
    c.alpn_protocols = vec![alpn(o)];
    // Tickets only when asked (--resume), with 0-RTT as quinn takes it.
    if (*o).resume {
        c.max_early_data_size = u32::MAX;
    } else {
        c.send_tls13_tickets = 0;
    }
    let q = QuicServerConfig::try_from(c).map_err(|e| format!("quinn refuses the TLS configuration: {e}"))?;
    let mut s = ServerConfig::with_crypto(Arc::new(q));
    s.transport_config(transport(peer_bidi, peer_uni));
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

unsafe fn client_config(o: *const WlOpts) -> Result<ClientConfig, String> {
    let p = provider();
    let mut c = rustls::ClientConfig::builder_with_provider(p.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| format!("rustls refuses TLS 1.3: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(NoChain(p)))
        .with_no_client_auth();
    c.alpn_protocols = vec![alpn(o)];
    // --resume: rustls's in-memory session cache (its default), offering
    // 0-RTT on every ticket; else every connection a full handshake.
    if (*o).resume {
        c.enable_early_data = true;
    } else {
        c.resumption = rustls::client::Resumption::disabled();
    }
    let q = QuicClientConfig::try_from(c).map_err(|e| format!("quinn refuses the TLS configuration: {e}"))?;
    let mut cc = ClientConfig::new(Arc::new(q));
    cc.transport_config(transport(None, MAX_STREAMS));
    Ok(cc)
}

// ------------------------------------------------------------ the operations

unsafe extern "C" fn q_init(o: *const WlOpts, server: bool) -> c_int {
    if let Err(why) = abi_check() {
        warn(&why);
        return exit::INTERNAL;
    }
    // aws-lc seeds its jitter entropy source on the first random draw
    // (~40 ms of CPU here), which would land in the first handshake: drawn
    // now, before anything is measured, as msquic's set-up is.
    let p = provider();
    if p.secure_random.fill(&mut [0u8; 16]).is_err() {
        warn("aws-lc's random source failed");
        return exit::LIB_OPEN;
    }
    *G.0.get() = Some(State {
        o,
        server,
        addr: SocketAddr::from(([0, 0, 0, 0], 0)),
        endpoint: None,
        client: None,
        acc: None,
        peer_bidi: None,
        listen_fd: -1,
        listening: false,
        io: WlUdpIo::default(),
        conns: HashMap::new(),
        txbuf: Vec::with_capacity(GSO_SEGMENTS * 1500),
        rx: BytesMut::with_capacity(RX_BUF),
        key_exchange: p.kx_groups.iter().map(|g| format!("{:?}", g.name())).collect(),
    });
    exit::OK
}

unsafe extern "C" fn q_setup() -> c_int {
    let n = st();
    let o = (*n).o;
    let addr = opt_str((*o).addr).unwrap_or("");
    let Ok(ip) = addr.parse::<Ipv4Addr>() else {
        warn(&format!("bad IPv4 address {addr}"));
        return exit::USAGE;
    };
    (*n).addr = SocketAddr::from((ip, (*o).port as u16));
    if !(*n).server {
        match client_config(o) {
            Ok(c) => (*n).client = Some(c),
            Err(why) => {
                warn(&why);
                return exit::TLS_CONFIG;
            }
        }
        (*n).endpoint = Some(Endpoint::new(Arc::new(EndpointConfig::default()), None, true, None));
    }
    exit::OK
}

unsafe extern "C" fn q_listen(a: *const WlAccept) -> c_int {
    let n = st();
    let acc = *a;
    (*n).acc = Some(acc);
    let bidi = (acc.peer_bidi_streams as u32).max(MAX_STREAMS);
    let uni = (acc.peer_uni_streams as u32).max(MAX_STREAMS);
    (*n).peer_bidi = Some(bidi);
    let cfg = match server_config((*n).o, Some(bidi), uni) {
        Ok(c) => c,
        Err(why) => {
            warn(&why);
            return exit::TLS_CONFIG;
        }
    };
    (*n).endpoint = Some(Endpoint::new(
        Arc::new(EndpointConfig::default()),
        Some(Arc::new(cfg)),
        true,
        None,
    ));
    let sa = to_sockaddr(&(*n).addr);
    let code = wl_udp_io_listen(
        &mut (*n).io,
        &sa,
        (*n).o,
        on_fd,
        std::ptr::null_mut(),
        &mut (*n).listen_fd,
    );
    if code != 0 {
        return code;
    }
    pmtud((*n).listen_fd);
    (*n).listening = true;
    exit::OK
}

/// Latecomers' Initials are ignored; the socket stays, for the live connections.
unsafe extern "C" fn q_listen_stop() {
    (*st()).listening = false;
}

/// The pattern asked for something (connect, open, send, abort, close):
/// done by a service, never inside the call (wl_transport.h): inside a
/// handler's, once the service it runs in goes round; else on the loop's
/// next pass, so no handler runs within the caller's call.
unsafe fn asked(c: *mut Conn) {
    (*c).again = true;
    if (*c).busy == 0 {
        wl_loop_again((*c).timer);
    }
}

unsafe extern "C" fn q_connect(
    h: *const WlConnHandlers,
    ctx: *mut c_void,
    flags: c_uint,
    out: *mut *mut WlConn,
) -> c_int {
    let n = st();
    let sa = to_sockaddr(&(*n).addr);
    let mut local: sockaddr_in = std::mem::zeroed();
    let fd = wl_udp_io_connect(&mut (*n).io, &sa, &mut local);
    if fd < 0 {
        warn(&format!(
            "UDP socket to {} failed: {}",
            (*n).addr,
            std::io::Error::last_os_error()
        ));
        return exit::LIB_OPEN;
    }
    pmtud(fd);
    let cfg = (*n).client.clone().unwrap();
    let ep = (*n).endpoint.as_mut().unwrap();
    let (ch, q) = match ep.connect(Instant::now(), cfg, (*n).addr, SERVER_NAME) {
        Ok(x) => x,
        Err(e) => {
            warn(&format!("quinn cannot make a connection: {e}"));
            libc::close(fd);
            return exit::LIB_OPEN;
        }
    };
    let c = conn_alloc(ch, q, false, fd, (*n).addr);
    if c.is_null() {
        warn(&format!(
            "cannot make a connection: {}",
            std::io::Error::last_os_error()
        ));
        libc::close(fd);
        return exit::INTERNAL;
    }
    (*c).hd = h;
    (*c).ctx = ctx;
    (*c).offered_0rtt = (*c).q.has_0rtt();
    // WL_CONN_RESUME needs nothing here: rustls offers its cached session (--resume keeps one).
    if wl_loop_add(fd, EPOLLIN, on_fd, std::ptr::null_mut()) != 0 {
        warn(&format!(
            "cannot watch the UDP socket: {}",
            std::io::Error::last_os_error()
        ));
        libc::close(fd);
        conn_drop(c);
        return exit::INTERNAL;
    }
    (*n).conns.insert(ch, c);
    take_stats(c, flags);
    *out = c as *mut WlConn;
    asked(c); /* the Initial */
    exit::OK
}

unsafe extern "C" fn q_open(
    c: *mut WlConn,
    h: *const WlStreamHandlers,
    ctx: *mut c_void,
    flags: c_uint,
    out: *mut *mut WlStream,
) -> c_int {
    let c = c as *mut Conn;
    if (*c).dead {
        return exit::CONN_LOST;
    }
    let uni = flags & WL_STREAM_UNI != 0;
    // Opened now if the peer's limit allows, else once it does (service).
    let id = (*c).q.streams().open(if uni { Dir::Uni } else { Dir::Bi });
    let s = stream_new(c, id);
    (*s).hd = h;
    (*s).ctx = ctx;
    (*s).uni = uni;
    (*s).owe_writable = true;
    *out = s as *mut WlStream;
    asked(c);
    exit::OK
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
    let s = s as *mut Stream;
    let c = (*s).c;
    if (*c).dead || (*s).fin_req || (*s).aborted || hdr_len > WL_HDR_MAX {
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
        (*s).queue.push_back(Msg { parts: [h, b], tag });
        (*s).queued += (hdr_len + body_len) as u64;
    }
    if flags & WL_SEND_FIN != 0 {
        (*s).fin_req = true;
    }
    asked(c);
    exit::OK
}

unsafe extern "C" fn q_abort(s: *mut WlStream) {
    let s = s as *mut Stream;
    (*s).abort_req = true;
    asked((*s).c);
}

unsafe extern "C" fn q_close(c: *mut WlConn, code: u64) {
    let c = c as *mut Conn;
    if (*c).dead || (*c).close_req {
        return;
    }
    (*c).close_req = true;
    (*c).close_code = code;
    asked(c);
}

unsafe extern "C" fn q_conn_info(c: *mut WlConn, r: *mut WlDl) {
    let c = c as *mut Conn;
    if (*c).t_connect != 0 {
        (*r).t_connect = (*c).t_connect;
    }
    if (*c).end.connected {
        (*r).t_handshake = (*c).end.t_connected;
        // quinn-proto says whether 0-RTT was taken, not whether the session
        // was resumed. Under --resume rustls offers early data on every
        // ticket and qprof's server takes it on every one, so a session
        // resumed is one whose 0-RTT was taken; a client that offered it
        // and saw it refused does not know (absent).
        // (A server's has_0rtt says it took the client's 0-RTT; accepted_0rtt is the client's.)
        let taken = if (*c).server {
            (*c).q.has_0rtt()
        } else {
            (*c).q.accepted_0rtt()
        };
        (*r).has_early = true;
        (*r).early_data = taken;
        if taken || (*c).server || !(*c).offered_0rtt {
            (*r).has_resumed = true;
            (*r).resumed = taken;
        }
    }
    let s = (*c).q.stats();
    (*r).has_counters = true;
    (*r).has_lost = true;
    (*r).no_retransmits = true; /* quinn counts lost packets, not retransmissions */
    (*r).lost_packets = s.path.lost_packets;
    (*r).packets_sent = s.path.sent_packets;
    (*r).packets_received = s.udp_rx.datagrams;
}

/// How long the end waits for its lingering connections to drain (their
/// close timers, three PTOs each, run out well before).
const LINGER_NS: u64 = 1_000_000_000;

/// Connections still in their closing period (finish).
unsafe fn lingering() -> bool {
    (*st()).conns.values().any(|&c| (*c).lingering)
}

unsafe extern "C" fn lingered(deadline: *mut c_void) -> bool {
    !lingering() || wl_now_ns() >= *(deadline as *const u64)
}

unsafe extern "C" fn deadline_passed(fd: c_int, _events: u32, _arg: *mut c_void) {
    let mut v: u64 = 0;
    libc::read(fd, &mut v as *mut u64 as *mut c_void, 8);
}

unsafe extern "C" fn q_fini() {
    let n = st();
    // The connections closed last still answer their peers until drained
    // (finish): the loop runs on for them, bounded (a timer of its own
    // wakes it at the deadline).
    if lingering() {
        let mut deadline = wl_now_ns() + LINGER_NS;
        let t = wl_timer_open();
        if t >= 0 && wl_loop_add(t, EPOLLIN, deadline_passed, std::ptr::null_mut()) == 0 {
            wl_timer_arm(t, deadline);
            wl_loop_run(lingered, &mut deadline as *mut u64 as *mut c_void);
            wl_loop_del(t);
        }
        if t >= 0 {
            libc::close(t);
        }
    }
    if (*n).listen_fd >= 0 {
        wl_loop_del((*n).listen_fd);
        libc::close((*n).listen_fd);
    }
    *G.0.get() = None;
}

#[no_mangle]
pub static wl_quinn: WlTransport = WlTransport {
    name: c"quinn".as_ptr(),
    multistream: true,
    early_data: true,
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
