// SPDX-License-Identifier: GPL-2.0-only
//! qprof-wl-quiche: qprof's workload on quiche, speaking qprof-wl's
//! protocol (wlproto) as qprof-wl-quinn does. Bulk (the client sends on
//! --streams unidirectional streams of one connection, the server checks
//! every byte) and download (--count connections one after another, each
//! a request on one bidirectional stream answered with --size bytes of the
//! pattern) and rr (wlproto::rr on one connection: requests on a stream
//! each or all on one, open loop on qprof-wl's schedule or closed).
//!
//! The configuration, recorded in the "connected" event: TLS 1.3 with
//! AES-128-GCM only, on the BoringSSL that boring-sys builds for quiche;
//! flow-control windows that never limit a transfer on one host
//! (CONN_WINDOW, STREAM_WINDOW); quiche's defaults otherwise (CUBIC), with
//! its own apps' datagram size (MAX_DATAGRAM). quiche does no I/O: this
//! program does it as quiche's apps do, on one thread: a non-blocking UDP
//! socket under mio, quiche's timers as the poll's timeout, GSO on send
//! (a run of full-size packets from conn.send() in one sendmsg) and GRO
//! on receive, each as the kernel grants it (qprof's interposer turns
//! either off, as for msquic and quinn).

use std::collections::{HashMap, VecDeque};
use std::io;
use std::mem::{size_of, zeroed};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{
    fence, AtomicBool, AtomicU64, Ordering::Acquire, Ordering::Relaxed, Ordering::Release, Ordering::SeqCst,
};
use std::sync::{Arc, OnceLock};

use parking_lot::FairMutex;
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};
use serde_json::{json, Map, Value};
use wlproto::rr::{Rr, RxMsg, Schedule, HDR};
use wlproto::{exit, now_ns, Download, Role, Timerfd};

const ALPN: &[u8] = b"qprof";
const SERVER_NAME: &str = "qprof";
/// The connection's window (initial_max_data, and the cap quiche's
/// autotuning may grow it to) and each stream's: far above any
/// bandwidth-delay product between two namespaces or a --link, as quinn's.
const CONN_WINDOW: u64 = 64 << 20;
const STREAM_WINDOW: u64 = 16 << 20;
const MAX_STREAMS: u64 = wlproto::MAX_STREAMS as u64;
/// rr: the client's bidirectional streams open at once that the server
/// allows (qprof-wl's RR_PEER_STREAMS, msquic's server limit): an open
/// loop may have many requests outstanding.
const RR_PEER_STREAMS: u64 = 1024;
/// qprof-wl's close codes (wl_transport.h, WL_CLOSE_ERROR and _VERIFY).
const CLOSE_ERROR: u64 = 1;
const CLOSE_VERIFY: u64 = 2;
const IDLE_TIMEOUT_MS: u64 = 30_000;
/// The largest UDP payload each side sends and takes: quiche's own apps'
/// (apps/src/bin/quiche-server.rs, MAX_DATAGRAM_SIZE); quiche's library
/// default would be 1200, its minimum.
const MAX_DATAGRAM: usize = 1350;
/// The socket buffers asked for, each way: as the quinn workload asks.
const SOCKET_BUFFER: usize = 2 << 20;
/// One GSO send: at most 64 segments (the kernel's UDP_MAX_SEGMENTS) and
/// an IPv4 UDP payload's largest size in all.
const GSO_MAX_SEGMENTS: usize = 64;
const GSO_MAX_BYTES: usize = 65507;
/// One receive: a GRO super-packet's largest size.
const RECV_BUF: usize = 65535;
/// What one stream_recv() copies out at most.
const APP_BUF: usize = 128 << 10;
/// Our connection IDs' length: a short header's destination ID is ours.
const CID_LEN: usize = 16;
/// TLS 1.3's TLS_AES_128_GCM_SHA256, the only suite either side offers.
const CIPHER: u16 = 0x1301;

const SOCK: Token = Token(0);
const WAKE: Token = Token(1);
const TIMER: Token = Token(2);

type Fail = (i32, String);

fn main() {
    let lib = Quiche::default();
    let role = Role::begin("quiche", Box::new(lib.clone()));
    let code = match run(role, lib) {
        Ok(()) => exit::OK,
        Err((code, why)) => {
            role.fail(code, why);
            code
        }
    };
    std::process::exit(role.done(code));
}

fn run(role: &'static Role, lib: Quiche) -> Result<(), Fail> {
    let ip: IpAddr = role
        .opts
        .addr
        .parse()
        .map_err(|_| (exit::USAGE, format!("--addr {} is not an IP address", role.opts.addr)))?;
    let addr = SocketAddr::new(ip, role.opts.port);
    let _ = lib.streams_bidi.set(streams_bidi(role));
    let cfg = config(role)?;
    let mut ep = if role.server() {
        Endpoint::new(role, lib, addr, cfg).map_err(|e| {
            if e.kind() == io::ErrorKind::AddrInUse {
                (exit::ADDR_IN_USE, format!("UDP port {addr} is already in use"))
            } else {
                (exit::INTERNAL, format!("cannot listen on UDP {addr}: {e}"))
            }
        })?
    } else {
        let any = if addr.is_ipv6() {
            IpAddr::V6(Ipv6Addr::UNSPECIFIED)
        } else {
            IpAddr::V4(Ipv4Addr::UNSPECIFIED)
        };
        Endpoint::new(role, lib, SocketAddr::new(any, 0), cfg)
            .map_err(|e| (exit::INTERNAL, format!("cannot open a UDP socket: {e}")))?
    };
    let waker = ep.waker.clone();
    role.on_stop(Box::new(move || {
        let _ = waker.wake();
    }));
    let r = match (role.server(), role.opts.download(), role.opts.rr()) {
        (true, _, true) => {
            role.ready();
            rr_server(&mut ep)
        }
        (false, _, true) => rr_client(&mut ep, addr),
        (true, false, _) => {
            role.ready();
            bulk_server(&mut ep)
        }
        (true, true, _) => {
            role.ready();
            download_server(&mut ep)
        }
        (false, false, _) => bulk_client(&mut ep, addr),
        (false, true, _) => download_client(&mut ep, addr),
    };
    // Every connection closes (code 0, as quinn's endpoint closes them)
    // and drains before the process reports.
    ep.drain();
    r
}

// ------------------------------------------------------------ configuration

/// The peer's bidirectional streams open at once this side allows: an rr
/// server RR_PEER_STREAMS (each request a stream), otherwise MAX_STREAMS.
fn streams_bidi(role: &Role) -> u64 {
    if role.opts.rr() && role.server() {
        RR_PEER_STREAMS
    } else {
        MAX_STREAMS
    }
}

/// quiche's configuration on a BoringSSL context of our own, so that TLS
/// 1.3 offers one suite: BoringSSL's cipher lists leave TLS 1.3 alone, its
/// SSL_CTX_set1_tls13_ciphers does not (quiche does not reach it).
fn config(role: &Role) -> Result<quiche::Config, Fail> {
    use boring::ssl::{SslContextBuilder, SslFiletype, SslMethod};
    let tls = |what: &str, e: &dyn std::fmt::Display| (exit::TLS_CONFIG, format!("{what}: {e}"));
    let mut ctx = SslContextBuilder::new(SslMethod::tls()).map_err(|e| tls("BoringSSL cannot make a context", &e))?;
    // SAFETY: ctx is a live SSL_CTX; one suite ID, no flags.
    if unsafe { boring_sys::SSL_CTX_set1_tls13_ciphers(ctx.as_ptr(), &CIPHER, std::ptr::null(), 1) } != 1 {
        return Err((
            exit::TLS_CONFIG,
            "BoringSSL refuses TLS_AES_128_GCM_SHA256 alone".into(),
        ));
    }
    if role.server() {
        let (Some(cert), Some(key)) = (&role.opts.cert, &role.opts.key) else {
            return Err((exit::USAGE, "the server needs --cert and --key".into()));
        };
        ctx.set_certificate_chain_file(cert)
            .map_err(|e| tls(&format!("cannot read the certificate {cert}"), &e))?;
        ctx.set_private_key_file(key, SslFiletype::PEM)
            .map_err(|e| tls(&format!("cannot read the key {key}"), &e))?;
        ctx.check_private_key()
            .map_err(|e| tls("the key does not match the certificate", &e))?;
    }
    let q = |e: quiche::Error| (exit::TLS_CONFIG, format!("quiche refuses its configuration: {e}"));
    let mut c = quiche::Config::with_boring_ssl_ctx_builder(quiche::PROTOCOL_VERSION, ctx).map_err(q)?;
    // The client checks the server's signature over the handshake (every
    // TLS 1.3 handshake does) but not its certificate's chain: the run's
    // certificate is self-signed, as for msquic and quinn.
    c.verify_peer(false);
    c.set_application_protos(&[ALPN]).map_err(q)?;
    c.set_max_idle_timeout(IDLE_TIMEOUT_MS);
    c.set_max_recv_udp_payload_size(MAX_DATAGRAM);
    c.set_max_send_udp_payload_size(MAX_DATAGRAM);
    c.set_initial_max_data(CONN_WINDOW);
    c.set_max_connection_window(CONN_WINDOW);
    c.set_initial_max_stream_data_bidi_local(STREAM_WINDOW);
    c.set_initial_max_stream_data_bidi_remote(STREAM_WINDOW);
    c.set_initial_max_stream_data_uni(STREAM_WINDOW);
    c.set_max_stream_window(STREAM_WINDOW);
    c.set_initial_max_streams_bidi(streams_bidi(role));
    c.set_initial_max_streams_uni(MAX_STREAMS);
    // One path (quiche's apps' default): every packet of a GSO run goes
    // to the one peer address.
    c.set_disable_active_migration(true);
    Ok(c)
}

/// The connection runs the one suite offered (BoringSSL would have failed
/// the handshake otherwise; this proves it), and the record gets its
/// key exchange.
fn check_tls(io: &Io, conn: &mut quiche::Connection) -> Result<(), Fail> {
    let ssl: &mut boring::ssl::SslRef = conn.as_mut();
    if let Some(group) = ssl.curve_name() {
        let _ = io.group.set(group.to_string());
    }
    match ssl.current_cipher() {
        Some(c) if c.protocol_id() == CIPHER => Ok(()),
        c => Err((
            exit::TLS_CONFIG,
            format!(
                "the connection runs {} rather than TLS_AES_128_GCM_SHA256",
                c.map_or("no cipher", |c| c.name())
            ),
        )),
    }
}

// ------------------------------------------------------------ what it says of itself

/// The socket's own counts and what it found (GSO, GRO, buffers).
#[derive(Default)]
struct Io {
    /// Odd while the loop's thread (the counts' one writer) updates them:
    /// a seqlock, so that a mark reads every count as of one moment, a
    /// call's datagrams with the call (`count`, `counts`).
    seq: AtomicU64,
    tx_datagrams: AtomicU64,
    tx_bytes: AtomicU64,
    tx_ios: AtomicU64,
    rx_datagrams: AtomicU64,
    rx_bytes: AtomicU64,
    rx_ios: AtomicU64,
    /// UDP_SEGMENT took, and no GSO send has failed since.
    gso: AtomicBool,
    /// UDP_GRO took; and a receive came coalesced (its UDP_GRO cmsg).
    gro_set: AtomicBool,
    gro_seen: AtomicBool,
    /// What the kernel granted (send, receive).
    buffers: OnceLock<(usize, usize)>,
    /// The key exchange the first connection negotiated.
    group: OnceLock<String>,
}

/// One connection of the endpoint, found by its connection IDs: ours, and
/// (server) the one the client's first Initial named.
struct Slot {
    key: u64,
    conn: quiche::Connection,
    scid: Vec<u8>,
    odcid: Option<Vec<u8>>,
    /// Marks and reports give this connection's levels, as quinn's
    /// workload gives its open one's: the role's connection from its
    /// handshake until (download) its transfer is over.
    tracked: bool,
}

/// quiche's counters that add up over connections (a download's many).
const COUNTERS: [&str; 3] = ["sent_packets", "lost_packets", "lost_bytes"];

fn counts(c: &quiche::Connection) -> [u64; 3] {
    let s = c.stats();
    [s.sent as u64, s.lost as u64, s.lost_bytes]
}

/// A connection's levels: cwnd, RTT (us) and path MTU, on its active path.
fn levels(c: &quiche::Connection) -> Option<[u64; 3]> {
    let p = c.path_stats().find(|p| p.active)?;
    Some([p.cwnd as u64, p.rtt.as_micros() as u64, p.pmtu as u64])
}

/// The endpoint's connections, and the counts of those gone.
#[derive(Default)]
struct Conns {
    slots: Vec<Slot>,
    gone: [u64; 3],
    /// The tracked connection's last levels once it has gone (bulk: the report's).
    last: Option<[u64; 3]>,
}

impl Conns {
    fn find(&mut self, key: u64) -> Option<&mut Slot> {
        self.slots.iter_mut().find(|s| s.key == key)
    }

    /// Closed connections go; their counts join those gone.
    fn collect(&mut self) {
        let Conns { slots, gone, last } = self;
        slots.retain(|s| {
            if !s.conn.is_closed() {
                return true;
            }
            for (t, n) in gone.iter_mut().zip(counts(&s.conn)) {
                *t += n;
            }
            if s.tracked {
                *last = levels(&s.conn);
            }
            false
        });
    }
}

/// quiche's figures for marks and reports: the socket's counts, the
/// role's connections' statistics summed (those gone, and those open) and
/// the tracked one's levels (cwnd, RTT, MTU). The event loop holds
/// the connections' lock while it works on them, never while it waits.
/// The lock is fair: a loop that never waits (a sender with GSO off)
/// relocked std's Mutex at once, and a mark waited past qprof's 5 s.
#[derive(Default, Clone)]
struct Quiche {
    conns: Arc<FairMutex<Conns>>,
    io: Arc<Io>,
    /// initial_max_streams_bidi, as configured.
    streams_bidi: Arc<OnceLock<u64>>,
}

impl Io {
    /// One update of the counts, by the loop's thread.
    fn count(&self, update: impl FnOnce(&Io)) {
        self.seq.fetch_add(1, Relaxed);
        fence(Release);
        update(self);
        self.seq.fetch_add(1, Release);
    }

    /// The counts as of one moment, by any thread.
    fn counts(&self) -> [(&'static str, u64); 6] {
        loop {
            let before = self.seq.load(Acquire);
            if before & 1 == 0 {
                let v = [
                    ("udp_tx_datagrams", self.tx_datagrams.load(Relaxed)),
                    ("udp_tx_bytes", self.tx_bytes.load(Relaxed)),
                    ("udp_tx_ios", self.tx_ios.load(Relaxed)),
                    ("udp_rx_datagrams", self.rx_datagrams.load(Relaxed)),
                    ("udp_rx_bytes", self.rx_bytes.load(Relaxed)),
                    ("udp_rx_ios", self.rx_ios.load(Relaxed)),
                ];
                fence(Acquire);
                if self.seq.load(Relaxed) == before {
                    return v;
                }
            }
            std::hint::spin_loop();
        }
    }
}

impl wlproto::Stack for Quiche {
    fn counters(&self, out: &mut Map<String, Value>) {
        let io = &self.io;
        let mut m = Map::new();
        for (k, v) in io.counts() {
            m.insert(k.into(), v.into());
        }
        let g = self.conns.lock();
        let mut sum = g.gone;
        for s in &g.slots {
            for (t, n) in sum.iter_mut().zip(counts(&s.conn)) {
                *t += n;
            }
        }
        for (k, v) in COUNTERS.iter().zip(sum) {
            m.insert((*k).into(), v.into());
        }
        let open = g.slots.iter().find(|s| s.tracked);
        if let Some(l) = open.map_or(g.last, |s| levels(&s.conn)) {
            for (k, v) in ["cwnd", "rtt_us", "current_mtu"].into_iter().zip(l) {
                m.insert(k.into(), v.into());
            }
        }
        out.insert("quic_stats".into(), Value::Object(m));
    }

    fn describe(&self, out: &mut Map<String, Value>) {
        let io = &self.io;
        out.insert("send_segmentation".into(), io.gso.load(SeqCst).into());
        out.insert(
            "recv_coalescing".into(),
            (io.gro_set.load(SeqCst) && io.gro_seen.load(SeqCst)).into(),
        );
        let mut lib = json!({
            "name": "quiche",
            "version": env!("QPROF_QUICHE_VERSION"),
            "crypto": format!(
                "BoringSSL as boring-sys {} vendors and builds it (BORINGSSL_API_VERSION {})",
                env!("QPROF_BORING_SYS_VERSION"),
                boring_sys::BORINGSSL_API_VERSION
            ),
            "cipher": "TLS13_AES_128_GCM_SHA256",
        });
        // Once a handshake has said it.
        if let Some(g) = io.group.get() {
            lib["key_exchange"] = g.as_str().into();
        }
        out.insert("quic_library".into(), lib);
        out.insert(
            "quic_settings".into(),
            json!({
                "initial_max_data": CONN_WINDOW,
                "max_connection_window": CONN_WINDOW,
                "initial_max_stream_data_uni": STREAM_WINDOW,
                "initial_max_stream_data_bidi": STREAM_WINDOW,
                "max_stream_window": STREAM_WINDOW,
                "initial_max_streams_uni": MAX_STREAMS,
                "initial_max_streams_bidi": self.streams_bidi.get().copied().unwrap_or(MAX_STREAMS),
                "max_send_udp_payload_size": MAX_DATAGRAM,
                "max_idle_timeout_ms": IDLE_TIMEOUT_MS,
                "congestion_control": "cubic",
                // quiche computes each packet's release time (SendInfo.at);
                // this workload, as quiche's apps without SO_TXTIME, sends at once.
                "pacing": false,
                "encryption": true,
                "socket_send_buffer": io.buffers.get().map(|b| b.0),
                "socket_recv_buffer": io.buffers.get().map(|b| b.1),
            }),
        );
    }
}

// ------------------------------------------------------------ the socket

fn setsockopt(fd: RawFd, level: libc::c_int, name: libc::c_int, v: libc::c_int) -> io::Result<()> {
    // SAFETY: v outlives the call; its size is given.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&v as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn getsockopt(fd: RawFd, level: libc::c_int, name: libc::c_int) -> io::Result<libc::c_int> {
    let mut v: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: v and len are valid for the kernel to write.
    let r = unsafe { libc::getsockopt(fd, level, name, (&mut v as *mut libc::c_int).cast(), &mut len) };
    if r == 0 {
        Ok(v)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The endpoint's socket: bound, non-blocking, SOCKET_BUFFER asked of the
/// kernel each way (it caps it at net.core.[rw]mem_max; the record gives
/// what it granted), and GSO and GRO probed as qprof's interposer steers
/// them: UDP_SEGMENT refused means one datagram per send; UDP_GRO may
/// take without effect, so only a coalesced receive says GRO is on.
fn open_socket(bind: SocketAddr, io: &Io) -> io::Result<std::net::UdpSocket> {
    let sock = std::net::UdpSocket::bind(bind)?;
    sock.set_nonblocking(true)?;
    let fd = sock.as_raw_fd();
    setsockopt(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, SOCKET_BUFFER as libc::c_int)?;
    setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, SOCKET_BUFFER as libc::c_int)?;
    let granted = (
        getsockopt(fd, libc::SOL_SOCKET, libc::SO_SNDBUF)? as usize,
        getsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUF)? as usize,
    );
    let _ = io.buffers.set(granted);
    // As quiche's apps probe it (sendto.rs, detect_gso); each send then
    // gives its own segment size, so the socket's default goes back to none.
    if setsockopt(fd, libc::SOL_UDP, libc::UDP_SEGMENT, MAX_DATAGRAM as libc::c_int).is_ok() {
        io.gso.store(true, SeqCst);
        let _ = setsockopt(fd, libc::SOL_UDP, libc::UDP_SEGMENT, 0);
    }
    if setsockopt(fd, libc::SOL_UDP, libc::UDP_GRO, 1).is_ok() {
        io.gro_set.store(true, SeqCst);
    }
    Ok(sock)
}

fn sockaddr(a: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { zeroed() };
    let len = match a {
        SocketAddr::V4(a) => {
            // SAFETY: sockaddr_storage is larger than, and aligned for, sockaddr_in.
            let sin = unsafe { &mut *(&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = a.port().to_be();
            sin.sin_addr = libc::in_addr {
                s_addr: u32::from_ne_bytes(a.ip().octets()),
            };
            size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            // SAFETY: as above, for sockaddr_in6.
            let sin6 = unsafe { &mut *(&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_flowinfo = a.flowinfo();
            sin6.sin6_addr.s6_addr = a.ip().octets();
            sin6.sin6_scope_id = a.scope_id();
            size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

fn from_sockaddr(ss: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match ss.ss_family as libc::c_int {
        libc::AF_INET => {
            // SAFETY: the kernel wrote a sockaddr_in.
            let sin = unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes()),
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the kernel wrote a sockaddr_in6.
            let sin6 = unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// One sendmsg: `buf` to `to`, cut by the kernel into `segment`-byte
/// datagrams (the last may be shorter) when `segment` is given.
fn send_msg(fd: RawFd, buf: &[u8], to: &SocketAddr, segment: Option<u16>) -> io::Result<usize> {
    let (mut addr, addr_len) = sockaddr(to);
    let mut iov = libc::iovec {
        iov_base: buf.as_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    let mut control = [0u64; 4];
    // SAFETY: all-zero is a valid msghdr; every pointer set below outlives the call.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_name = (&mut addr as *mut libc::sockaddr_storage).cast();
    msg.msg_namelen = addr_len;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if let Some(seg) = segment {
        msg.msg_control = control.as_mut_ptr().cast();
        // SAFETY: CMSG_* only compute sizes and offsets within `control`,
        // which has room for one u16 cmsg.
        unsafe {
            msg.msg_controllen = libc::CMSG_SPACE(size_of::<u16>() as u32) as usize;
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_UDP;
            (*c).cmsg_type = libc::UDP_SEGMENT;
            (*c).cmsg_len = libc::CMSG_LEN(size_of::<u16>() as u32) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), seg);
        }
    }
    loop {
        // SAFETY: msg describes valid memory.
        let n = unsafe { libc::sendmsg(fd, &msg, 0) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// One recvmsg: the bytes, their sender and (GRO) the size of the
/// datagrams they were coalesced from.
fn recv_msg(fd: RawFd, buf: &mut [u8]) -> io::Result<(usize, SocketAddr, Option<usize>)> {
    // SAFETY: all-zero is a valid sockaddr_storage and msghdr.
    let mut ss: libc::sockaddr_storage = unsafe { zeroed() };
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut control = [0u64; 8];
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_name = (&mut ss as *mut libc::sockaddr_storage).cast();
    msg.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = size_of::<[u64; 8]>();
    let n = loop {
        // SAFETY: msg describes valid memory.
        let n = unsafe { libc::recvmsg(fd, &mut msg, 0) };
        if n >= 0 {
            break n as usize;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    };
    let mut segment = None;
    // SAFETY: the kernel wrote msg_controllen bytes of cmsgs into `control`.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_UDP && (*c).cmsg_type == libc::UDP_GRO {
                segment = Some(std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>()) as usize);
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    let from = from_sockaddr(&ss).ok_or_else(|| io::Error::other("a datagram from an unknown address family"))?;
    Ok((n, from, segment))
}

fn new_cid() -> Vec<u8> {
    let mut id = vec![0u8; CID_LEN];
    boring::rand::rand_bytes(&mut id).expect("BoringSSL's random bytes");
    id
}

// ------------------------------------------------------------ the endpoint

/// What the role's step asks of the loop next.
enum Flow {
    /// Go on: wait for the socket, quiche's timers or this deadline.
    Continue(Option<Instant>),
    /// Go on, as Continue, with the deadline a CLOCK_MONOTONIC time in ns
    /// kept by a timerfd (rr's schedule): the poll's own timeout rounds
    /// up to whole milliseconds, which a request's latency would count.
    At(Option<u64>),
    Finished,
}

/// The socket, the poll and every connection on it, as quiche's apps run
/// them: read every datagram there is and hand each to its connection,
/// let the role act, then send what quiche has to send.
struct Endpoint {
    role: &'static Role,
    lib: Quiche,
    poll: Poll,
    events: Events,
    waker: Arc<Waker>,
    /// The socket (fd is its descriptor).
    _sock: std::net::UdpSocket,
    fd: RawFd,
    local: SocketAddr,
    config: quiche::Config,
    gso: bool,
    out: Box<[u8]>,
    /// A batch the socket refused for now: out[start..len], segment, to.
    pending: Option<(usize, usize, usize, SocketAddr)>,
    /// The socket was full: nothing is sent until the poll says it is writable.
    blocked: bool,
    /// The poll watches for writability (only while blocked, or just after).
    watch_writable: bool,
    buf: Box<[u8]>,
    /// The role's buffer for stream_recv().
    app: Box<[u8]>,
    next_key: u64,
    /// Server: how many more connections a client's Initial to an unknown
    /// connection ID may start; those started wait here for the role, as
    /// quinn's endpoint queues them (the next download's Initial may come
    /// before the last one's close has been seen).
    accepting: u64,
    accepted: VecDeque<u64>,
    warned_send: bool,
    /// Flow::At's timerfd, made on first use.
    timer: Option<Timerfd>,
}

impl Endpoint {
    fn new(role: &'static Role, lib: Quiche, bind: SocketAddr, config: quiche::Config) -> io::Result<Endpoint> {
        let sock = open_socket(bind, &lib.io)?;
        let fd = sock.as_raw_fd();
        let local = sock.local_addr()?;
        let poll = Poll::new()?;
        poll.registry().register(&mut SourceFd(&fd), SOCK, Interest::READABLE)?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKE)?);
        let gso = lib.io.gso.load(SeqCst);
        Ok(Endpoint {
            role,
            lib,
            poll,
            events: Events::with_capacity(64),
            waker,
            _sock: sock,
            fd,
            local,
            config,
            gso,
            out: vec![0u8; GSO_MAX_BYTES].into_boxed_slice(),
            pending: None,
            blocked: false,
            watch_writable: false,
            buf: vec![0u8; RECV_BUF].into_boxed_slice(),
            app: vec![0u8; APP_BUF].into_boxed_slice(),
            next_key: 0,
            accepting: 0,
            accepted: VecDeque::new(),
            warned_send: false,
            timer: None,
        })
    }

    fn add(&mut self, c: &mut Conns, conn: quiche::Connection, scid: Vec<u8>, odcid: Option<Vec<u8>>) -> u64 {
        let key = self.next_key;
        self.next_key += 1;
        c.slots.push(Slot {
            key,
            conn,
            scid,
            odcid,
            tracked: false,
        });
        key
    }

    /// Client: a new connection to `peer` on this socket.
    fn connect(&mut self, c: &mut Conns, peer: SocketAddr) -> Result<u64, Fail> {
        let scid = new_cid();
        let conn = quiche::connect(
            Some(SERVER_NAME),
            &quiche::ConnectionId::from_ref(&scid),
            self.local,
            peer,
            &mut self.config,
        )
        .map_err(|e| (exit::HANDSHAKE, format!("QUIC handshake with {peer} failed: {e}")))?;
        Ok(self.add(c, conn, scid, None))
    }

    /// The role's loop: its step (with the connections), then the sends,
    /// then the wait, until the step says it is finished.
    fn drive(&mut self, mut step: impl FnMut(&mut Endpoint, &mut Conns) -> Result<Flow, Fail>) -> Result<(), Fail> {
        let conns = self.lib.conns.clone();
        loop {
            let flow = {
                let mut c = conns.lock();
                let flow = step(self, &mut c)?;
                // Closed connections go once the step has seen them.
                c.collect();
                flow
            };
            self.flush()?;
            match flow {
                Flow::Finished => return Ok(()),
                Flow::Continue(deadline) => self.wait(deadline)?,
                Flow::At(t_ns) => {
                    self.arm(t_ns)?;
                    self.wait(None)?;
                }
            }
        }
    }

    /// Closes every connection still open (code 0) and waits until all
    /// have drained, as quinn's endpoint's close and wait_idle.
    fn drain(&mut self) {
        self.accepting = 0;
        let conns = self.lib.conns.clone();
        loop {
            {
                let mut c = conns.lock();
                for s in c.slots.iter_mut() {
                    let _ = s.conn.close(true, 0, b"");
                }
                c.collect();
                if c.slots.is_empty() {
                    return;
                }
            }
            if self.flush().is_err() || self.wait(None).is_err() {
                return;
            }
        }
    }

    /// Waits for the socket, the stop waker, the connections' timers or
    /// `deadline`; then runs the timers due and reads every datagram.
    fn wait(&mut self, deadline: Option<Instant>) -> Result<(), Fail> {
        let conns = self.lib.conns.clone();
        let mut next = deadline;
        {
            let c = conns.lock();
            for s in &c.slots {
                let t = if s.conn.is_closed() {
                    // For the step to see (and collect) at once.
                    Some(Instant::now())
                } else {
                    s.conn.timeout_instant()
                };
                if let Some(t) = t {
                    next = Some(next.map_or(t, |n| n.min(t)));
                }
            }
        }
        let timeout = next.map(|t| t.saturating_duration_since(Instant::now()));
        if let Err(e) = self.poll.poll(&mut self.events, timeout) {
            if e.kind() == io::ErrorKind::Interrupted {
                return Ok(());
            }
            return Err((exit::INTERNAL, format!("cannot wait for the socket: {e}")));
        }
        let (mut readable, mut writable, mut fired) = (false, false, false);
        for ev in self.events.iter() {
            if ev.token() == SOCK {
                readable |= ev.is_readable() || ev.is_error();
                writable |= ev.is_writable() || ev.is_error();
            }
            fired |= ev.token() == TIMER;
        }
        if fired {
            self.fired();
        }
        if writable {
            self.blocked = false;
        }
        let mut c = conns.lock();
        let now = Instant::now();
        for s in c.slots.iter_mut() {
            if s.conn.timeout_instant().is_some_and(|t| t <= now) {
                s.conn.on_timeout();
            }
        }
        if readable {
            self.receive(&mut c)?;
        }
        Ok(())
    }

    /// Flow::At: the timer fires at t_ns (None: never); a time past fires
    /// at once. Re-armed only when the time changes.
    fn arm(&mut self, t_ns: Option<u64>) -> Result<(), Fail> {
        let fail = |what: &str, e: io::Error| (exit::INTERNAL, format!("cannot {what} the request timer: {e}"));
        if self.timer.is_none() {
            let t = Timerfd::new().map_err(|e| fail("make", e))?;
            self.poll
                .registry()
                .register(&mut SourceFd(&t.as_raw_fd()), TIMER, Interest::READABLE)
                .map_err(|e| fail("wait for", e))?;
            self.timer = Some(t);
        }
        self.timer.as_mut().unwrap().arm(t_ns).map_err(|e| fail("arm", e))
    }

    /// The timer fired: it is disarmed (a one-shot); mio's poll is
    /// edge-triggered, so its count is never read.
    fn fired(&mut self) {
        if let Some(t) = self.timer.as_mut() {
            t.fired();
        }
    }

    /// Every datagram the socket holds, each to its connection (a GRO
    /// receive cut back into its datagrams).
    fn receive(&mut self, c: &mut Conns) -> Result<(), Fail> {
        let io = self.lib.io.clone();
        loop {
            let (n, from, segment) = match recv_msg(self.fd, &mut self.buf) {
                Ok(r) => r,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                // An ICMP error for an earlier send: the loss is quiche's to handle.
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::ConnectionRefused
                            | io::ErrorKind::HostUnreachable
                            | io::ErrorKind::NetworkUnreachable
                    ) =>
                {
                    continue
                }
                Err(e) => return Err((exit::INTERNAL, format!("cannot receive from the UDP socket: {e}"))),
            };
            let seg = segment.unwrap_or(n).max(1);
            io.count(|io| {
                io.rx_ios.fetch_add(1, Relaxed);
                io.rx_bytes.fetch_add(n as u64, Relaxed);
                io.rx_datagrams.fetch_add(n.div_ceil(seg) as u64, Relaxed);
            });
            if segment.is_some() && !io.gro_seen.load(Relaxed) {
                io.gro_seen.store(true, SeqCst);
            }
            let mut off = 0;
            while off < n {
                let end = (off + seg).min(n);
                self.dispatch(c, off, end, from)?;
                off = end;
            }
        }
    }

    fn dispatch(&mut self, c: &mut Conns, start: usize, end: usize, from: SocketAddr) -> Result<(), Fail> {
        let pkt = &mut self.buf[start..end];
        let (dcid, dcid_len, initial, version) = match quiche::Header::from_slice(pkt, CID_LEN) {
            Ok(h) => {
                let mut id = [0u8; quiche::MAX_CONN_ID_LEN];
                let len = h.dcid.len().min(id.len());
                id[..len].copy_from_slice(&h.dcid[..len]);
                (id, len, h.ty == quiche::Type::Initial, h.version)
            }
            Err(_) => return Ok(()),
        };
        let dcid = &dcid[..dcid_len];
        let at = c
            .slots
            .iter()
            .position(|s| s.scid == dcid || s.odcid.as_deref() == Some(dcid));
        let at = match at {
            Some(i) => i,
            None if initial && self.accepting > 0 && quiche::version_is_supported(version) => {
                let scid = new_cid();
                let conn = quiche::accept(
                    &quiche::ConnectionId::from_ref(&scid),
                    None,
                    self.local,
                    from,
                    &mut self.config,
                )
                .map_err(|e| (exit::HANDSHAKE, format!("QUIC handshake with a client failed: {e}")))?;
                let key = self.add(c, conn, scid, Some(dcid.to_vec()));
                self.accepting -= 1;
                self.accepted.push_back(key);
                c.slots.len() - 1
            }
            None => return Ok(()),
        };
        let info = quiche::RecvInfo { from, to: self.local };
        // A packet quiche refuses is dropped; one that breaks the
        // connection closes it, which the role's step sees.
        let _ = c.slots[at].conn.recv(&mut self.buf[start..end], info);
        Ok(())
    }

    /// Sends what every connection has to send, until quiche has no more
    /// or the socket is full (then it goes on when the socket is writable).
    fn flush(&mut self) -> Result<(), Fail> {
        if self.blocked {
            return Ok(());
        }
        if !self.send_pending()? {
            return self.block();
        }
        let conns = self.lib.conns.clone();
        let mut c = conns.lock();
        for s in c.slots.iter_mut() {
            while let Some((len, seg, to)) = self.pack(&mut s.conn) {
                self.pending = Some((0, len, seg, to));
                if !self.send_pending()? {
                    drop(c);
                    return self.block();
                }
            }
        }
        drop(c);
        // Writable again: the poll stops watching for it (each send's
        // completion would wake it).
        self.watch(false)
    }

    /// The connection's next packets in `out`: one, or (GSO) a run of
    /// full-size ones to one address, the last of which may be shorter.
    fn pack(&mut self, conn: &mut quiche::Connection) -> Option<(usize, usize, SocketAddr)> {
        let mds = conn.max_send_udp_payload_size();
        let most = if self.gso {
            GSO_MAX_SEGMENTS.min(self.out.len() / mds).max(1)
        } else {
            1
        };
        let (mut total, mut n) = (0, 0);
        let mut path: Option<(SocketAddr, SocketAddr)> = None;
        while n < most && self.out.len() - total >= mds {
            let r = match path {
                None => conn.send(&mut self.out[total..]),
                // The rest of a run: this path's packets only.
                Some((from, to)) => conn.send_on_path(&mut self.out[total..], Some(from), Some(to)),
            };
            match r {
                Ok((w, info)) => {
                    path.get_or_insert((info.from, info.to));
                    total += w;
                    n += 1;
                    if w < mds {
                        break;
                    }
                }
                // Done; or an error, on which quiche closes the connection.
                Err(_) => break,
            }
        }
        path.map(|(_, to)| (total, if n == 1 { total } else { mds }, to))
    }

    /// Sends the pending batch: false if the socket is full for now.
    fn send_pending(&mut self) -> Result<bool, Fail> {
        let Some((mut start, len, seg, to)) = self.pending else {
            return Ok(true);
        };
        let io = self.lib.io.clone();
        if self.gso && len - start > seg {
            let sent = send_msg(self.fd, &self.out[start..len], &to, Some(seg as u16));
            io.count(|io| {
                io.tx_ios.fetch_add(1, Relaxed);
                if sent.is_ok() {
                    io.tx_datagrams.fetch_add((len - start).div_ceil(seg) as u64, Relaxed);
                    io.tx_bytes.fetch_add((len - start) as u64, Relaxed);
                }
            });
            match sent {
                Ok(_) => {
                    self.pending = None;
                    return Ok(true);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                // No GSO on this path after all (EIO: a device without
                // it): one datagram per send from now on, as quinn-udp.
                Err(e) if e.raw_os_error() == Some(libc::EIO) => {
                    wlproto::warn(&format!("a GSO send failed ({e}); sending one datagram per call"));
                    self.gso = false;
                    io.gso.store(false, SeqCst);
                }
                Err(e) => {
                    self.send_failed(&e);
                    self.pending = None;
                    return Ok(true);
                }
            }
        }
        while start < len {
            let end = (start + seg).min(len);
            let sent = send_msg(self.fd, &self.out[start..end], &to, None);
            io.count(|io| {
                io.tx_ios.fetch_add(1, Relaxed);
                if sent.is_ok() {
                    io.tx_datagrams.fetch_add(1, Relaxed);
                    io.tx_bytes.fetch_add((end - start) as u64, Relaxed);
                }
            });
            match sent {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.pending = Some((start, len, seg, to));
                    return Ok(false);
                }
                // Lost, as on the wire: quiche sends it again.
                Err(e) => self.send_failed(&e),
            }
            start = end;
        }
        self.pending = None;
        Ok(true)
    }

    fn send_failed(&mut self, e: &io::Error) {
        if !self.warned_send {
            self.warned_send = true;
            wlproto::warn(&format!("a UDP send failed: {e}; its packets count as lost"));
        }
    }

    /// The socket is full: the poll wakes when it is writable again.
    fn block(&mut self) -> Result<(), Fail> {
        self.blocked = true;
        self.watch(true)
    }

    fn watch(&mut self, writable: bool) -> Result<(), Fail> {
        if self.watch_writable == writable {
            return Ok(());
        }
        self.watch_writable = writable;
        let interest = if writable {
            Interest::READABLE | Interest::WRITABLE
        } else {
            Interest::READABLE
        };
        self.poll
            .registry()
            .reregister(&mut SourceFd(&self.fd), SOCK, interest)
            .map_err(|e| (exit::INTERNAL, format!("cannot wait for the socket: {e}")))
    }
}

// ------------------------------------------------------------ helpers

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

/// Has the connection ended (closed, or closing or draining)?
fn ended(conn: &quiche::Connection) -> bool {
    conn.is_closed() || conn.is_draining()
}

/// Why the connection ended, as far as quiche says.
fn end_reason(conn: &quiche::Connection) -> String {
    let said = |who: &str, e: &quiche::ConnectionError| {
        format!(
            "{who} closed it with {} error {:#x}{}",
            if e.is_app { "application" } else { "transport" },
            e.error_code,
            if e.reason.is_empty() {
                String::new()
            } else {
                format!(" ({})", String::from_utf8_lossy(&e.reason))
            }
        )
    };
    if conn.is_timed_out() {
        "the idle timeout passed".into()
    } else if let Some(e) = conn.peer_error() {
        said("the peer", e)
    } else if let Some(e) = conn.local_error() {
        said("this side", e)
    } else {
        "closed".into()
    }
}

/// Did the peer close the connection, with code 0 if `zero`?
fn peer_closed(conn: &quiche::Connection, zero: bool) -> bool {
    conn.peer_error()
        .is_some_and(|e| e.is_app && (!zero || e.error_code == 0))
}

/// An instant on CLOCK_MONOTONIC in ns (now_ns()'s), as an Instant.
fn instant_at(t_ns: u64) -> Instant {
    Instant::now() + Duration::from_nanos(t_ns.saturating_sub(now_ns()))
}

/// Writes the pattern on stream `id` from `*off` as far as quiche takes
/// it, io_size a call, up to `limit` (0: no limit) with its FIN. True
/// once the FIN is written. `count`: add the bytes to app_bytes.
fn send_pattern(
    role: &Role,
    conn: &mut quiche::Connection,
    id: u64,
    off: &mut u64,
    limit: u64,
    count: bool,
) -> Result<bool, quiche::Error> {
    let step = u64::from(role.opts.io_size.max(1));
    loop {
        let want = if limit == 0 { step } else { step.min(limit - *off) };
        let chunk = role.pattern.at(*off, want as usize);
        let last = limit != 0 && *off + chunk.len() as u64 == limit;
        match conn.stream_send(id, chunk, last) {
            Ok(w) => {
                *off += w as u64;
                if count {
                    role.app_bytes.fetch_add(w as u64, Relaxed);
                }
                if last && w == chunk.len() {
                    return Ok(true);
                }
                if w < chunk.len() {
                    return Ok(false);
                }
            }
            Err(quiche::Error::Done) => return Ok(false),
            Err(e) => return Err(e),
        }
    }
}

/// Ends stream `id` where it is (its FIN); true once written.
fn finish(conn: &mut quiche::Connection, id: u64) -> Result<bool, quiche::Error> {
    match conn.stream_send(id, b"", true) {
        Ok(_) => Ok(true),
        Err(quiche::Error::Done) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Has the peer acknowledged every byte of our finished stream `id`?
/// quiche then forgets the stream (collects it).
fn acked(conn: &mut quiche::Connection, id: u64) -> bool {
    conn.stream_closed(id) && matches!(conn.stream_capacity(id), Err(quiche::Error::InvalidStreamState(_)))
}

// ------------------------------------------------------------ server

/// The client's unidirectional stream `idx` (its id is 4 idx + 2).
struct Rx {
    off: u64,
    seen: bool,
    fin: bool,
}

fn bulk_server(ep: &mut Endpoint) -> Result<(), Fail> {
    let role = ep.role;
    let streams = role.opts.streams as usize;
    let mut rx: Vec<Rx> = (0..streams)
        .map(|_| Rx {
            off: 0,
            seen: false,
            fin: false,
        })
        .collect();
    let mut conn_key: Option<u64> = None;
    let mut established = false;
    let mut ids: Vec<u64> = Vec::new();
    // One connection, once.
    ep.accepting = 1;
    ep.drive(|ep, c| {
        if conn_key.is_none() {
            conn_key = ep.accepted.pop_front();
        }
        let Some(key) = conn_key else {
            return Ok(if role.stopping() {
                Flow::Finished
            } else {
                Flow::Continue(None)
            });
        };
        let s = c.find(key).ok_or_else(|| lost(role, "at once", "gone"))?;
        let conn = &mut s.conn;
        if !established {
            if conn.is_established() {
                established = true;
                let t = now_ns();
                check_tls(&ep.lib.io, conn)?;
                s.tracked = true;
                role.connected(t);
            } else if ended(conn) {
                return Err((
                    exit::HANDSHAKE,
                    format!("QUIC handshake with a client failed: {}", end_reason(conn)),
                ));
            } else if role.stopping() {
                // Told to stop before a client came: as quinn's accept.
                return Ok(Flow::Finished);
            } else {
                return Ok(Flow::Continue(None));
            }
        }
        ids.clear();
        ids.extend(conn.readable());
        for &id in &ids {
            let idx = (id >> 2) as usize;
            if id & 3 != 2 || idx >= streams {
                // No stream of ours: it is not read (quinn accepts only --streams).
                let _ = conn.stream_shutdown(id, quiche::Shutdown::Read, 0);
                continue;
            }
            let r = &mut rx[idx];
            if !r.seen {
                r.seen = true;
                role.streams_seen.fetch_max(idx + 1, SeqCst);
            }
            let counted = &role.stream_bytes[idx];
            while !r.fin {
                match conn.stream_recv(id, &mut ep.app) {
                    Ok((n, fin)) => {
                        let data = &ep.app[..n];
                        if !role.pattern.check(r.off, data) {
                            role.verify_failed(role.pattern.first_bad(r.off, data), idx as u64, "verify_fail_stream");
                            return Err((exit::VERIFY, "stream failed the content check".into()));
                        }
                        r.off += n as u64;
                        counted.fetch_add(n as u64, Relaxed);
                        if fin {
                            r.fin = true;
                            if role.streams_done.fetch_add(1, SeqCst) + 1 == streams as u64 {
                                role.t_transfer_done_ns.store(now_ns(), SeqCst);
                            }
                        }
                    }
                    Err(quiche::Error::Done) => break,
                    Err(e) => return Err(lost(role, &format!("on stream {idx}"), e)),
                }
            }
        }
        if !ended(conn) {
            return Ok(Flow::Continue(None));
        }
        // The client closes once every stream is acknowledged, with code 0.
        if role.streams_done.load(SeqCst) < streams as u64 {
            Err(lost(role, "before its streams ended", end_reason(conn)))
        } else if peer_closed(conn, true) {
            Ok(Flow::Finished)
        } else {
            Err(lost(role, "at the end", end_reason(conn)))
        }
    })
}

/// The download being served: its request, then its answer.
struct Serving {
    key: u64,
    established: bool,
    stream: Option<u64>,
    req: [u8; wlproto::DL_REQUEST_LEN],
    req_len: usize,
    size: Option<u64>,
    off: u64,
    fin: bool,
}

fn download_server(ep: &mut Endpoint) -> Result<(), Fail> {
    let role = ep.role;
    let mut i = 0u64;
    let mut cur: Option<Serving> = None;
    let mut ids: Vec<u64> = Vec::new();
    ep.drive(|ep, c| {
        // Strictly one after another, as the client downloads: the next
        // as soon as one is served.
        loop {
            if cur.is_none() && i < role.opts.count && !role.stopping() {
                cur = ep.accepted.pop_front().map(|key| Serving {
                    key,
                    established: false,
                    stream: None,
                    req: [0; wlproto::DL_REQUEST_LEN],
                    req_len: 0,
                    size: None,
                    off: 0,
                    fin: false,
                });
            }
            let Some(sv) = cur.as_mut() else { break };
            let s = c.find(sv.key).ok_or_else(|| {
                (
                    exit::HANDSHAKE,
                    "QUIC handshake with a client failed: its connection closed before its turn".to_string(),
                )
            })?;
            let conn = &mut s.conn;
            if !sv.established {
                if conn.is_established() {
                    sv.established = true;
                    let t = now_ns();
                    check_tls(&ep.lib.io, conn)?;
                    s.tracked = true;
                    role.connected(t);
                } else if ended(conn) {
                    return Err((
                        exit::HANDSHAKE,
                        format!("QUIC handshake with a client failed: {}", end_reason(conn)),
                    ));
                } else if role.stopping() {
                    return Ok(Flow::Finished);
                } else {
                    break;
                }
            }
            // The request: 8 bytes on the client's bidirectional stream.
            if sv.size.is_none() {
                ids.clear();
                ids.extend(conn.readable());
                for &id in &ids {
                    if id & 3 != 0 || sv.stream.is_some_and(|s| s != id) {
                        let _ = conn.stream_shutdown(id, quiche::Shutdown::Read, 0);
                        continue;
                    }
                    sv.stream = Some(id);
                    loop {
                        match conn.stream_recv(id, &mut ep.app) {
                            Ok((n, fin)) => {
                                let take = n.min(sv.req.len() - sv.req_len);
                                sv.req[sv.req_len..sv.req_len + take].copy_from_slice(&ep.app[..take]);
                                sv.req_len += take;
                                if fin && sv.req_len < sv.req.len() {
                                    return Err(lost(role, "in its request", "the stream ended early"));
                                }
                                if fin {
                                    break;
                                }
                            }
                            Err(quiche::Error::Done) => break,
                            Err(e) => return Err(lost(role, "in its request", e)),
                        }
                    }
                    if sv.req_len == sv.req.len() {
                        sv.size = Some(u64::from_le_bytes(sv.req));
                    }
                }
            }
            // The answer: the pattern from offset 0, then FIN.
            if let (Some(size), Some(id), false) = (sv.size, sv.stream, sv.fin) {
                let r = if size == 0 {
                    finish(conn, id)
                } else {
                    send_pattern(role, conn, id, &mut sv.off, size, false)
                };
                sv.fin = r.map_err(|e| lost(role, "while sending", e))?;
            }
            // The client closes once it has every byte.
            if !ended(conn) {
                break;
            }
            if !(sv.fin && peer_closed(conn, false)) {
                return Err(lost(role, &format!("in download {i}"), end_reason(conn)));
            }
            let size = sv.size.unwrap_or(0);
            role.downloads.fetch_add(1, SeqCst);
            role.app_bytes.fetch_add(size, Relaxed);
            let st = conn.stats();
            Download {
                i,
                bytes: size,
                counters: Some((Some(st.retrans as u64), st.lost as u64, st.sent as u64, st.recv as u64)),
                ..Default::default()
            }
            .emit("served");
            // Retired, as quinn's workload retires it.
            s.tracked = false;
            cur = None;
            i += 1;
        }
        let more = i < role.opts.count && !role.stopping();
        let ahead = u64::from(cur.is_some()) + ep.accepted.len() as u64;
        ep.accepting = if more {
            role.opts.count - i - ahead.min(role.opts.count - i)
        } else {
            0
        };
        Ok(if cur.is_none() && !more {
            Flow::Finished
        } else {
            Flow::Continue(None)
        })
    })
}

// ------------------------------------------------------------ client

/// One of the bulk client's streams: its id, bytes written, FIN written,
/// every byte acknowledged.
struct Tx {
    id: u64,
    off: u64,
    fin: bool,
    acked: bool,
}

fn bulk_client(ep: &mut Endpoint, addr: SocketAddr) -> Result<(), Fail> {
    let role = ep.role;
    let limit = role.opts.bytes;
    let key = {
        let conns = ep.lib.conns.clone();
        let mut c = conns.lock();
        ep.connect(&mut c, addr)?
    };
    let mut t_end = 0u64;
    let mut streams: Vec<Tx> = Vec::new();
    let mut established = false;
    let mut turn = 0usize;
    ep.drive(|ep, c| {
        let s = c.find(key).ok_or_else(|| lost(role, "at once", "gone"))?;
        let conn = &mut s.conn;
        if !established {
            if conn.is_established() {
                established = true;
                let t0 = now_ns();
                check_tls(&ep.lib.io, conn)?;
                s.tracked = true;
                role.connected(t0);
                if role.opts.duration_ms > 0 {
                    t_end = t0 + role.opts.duration_ms * 1_000_000;
                }
                streams = (0..role.opts.streams as u64)
                    .map(|i| Tx {
                        id: 4 * i + 2,
                        off: 0,
                        fin: false,
                        acked: false,
                    })
                    .collect();
            } else if ended(conn) {
                return Err((
                    exit::HANDSHAKE,
                    format!("QUIC handshake with {addr} failed: {}", end_reason(conn)),
                ));
            } else {
                return Ok(Flow::Continue(None));
            }
        }
        if ended(conn) {
            return Err(lost(role, "while sending", end_reason(conn)));
        }
        let stop = role.stopping() || (t_end != 0 && now_ns() >= t_end);
        // Each stream as far as quiche takes it, a different one first
        // each time (quiche's scheduler takes turns among them too).
        let n = streams.len();
        for k in 0..n {
            let t = &mut streams[(turn + k) % n];
            if t.fin {
                continue;
            }
            let r = if stop {
                finish(conn, t.id)
            } else {
                send_pattern(role, conn, t.id, &mut t.off, limit, true)
            };
            t.fin = r.map_err(|e| lost(role, &format!("on stream {}", t.id >> 2), e))?;
        }
        turn = turn.wrapping_add(1);
        // Every byte acknowledged: the server has read and checked it.
        for t in streams.iter_mut().filter(|t| t.fin && !t.acked) {
            if acked(conn, t.id) {
                t.acked = true;
                role.streams_done.fetch_add(1, SeqCst);
            }
        }
        if streams.iter().all(|t| t.acked) {
            role.t_transfer_done_ns.store(now_ns(), SeqCst);
            let _ = conn.close(true, 0, b"done");
            return Ok(Flow::Finished);
        }
        let deadline = (t_end != 0 && !stop).then(|| instant_at(t_end));
        Ok(Flow::Continue(deadline))
    })
}

/// The download under way.
struct Fetch {
    key: u64,
    d: Download,
    req_sent: bool,
}

fn download_client(ep: &mut Endpoint, addr: SocketAddr) -> Result<(), Fail> {
    let role = ep.role;
    let size = role.opts.size;
    let mut i = 0u64;
    let mut cur: Option<Fetch> = None;
    ep.drive(|ep, c| loop {
        if cur.is_none() {
            if i >= role.opts.count || role.stopping() {
                role.t_transfer_done_ns.store(now_ns(), SeqCst);
                return Ok(Flow::Finished);
            }
            let t_connect = now_ns();
            let key = ep.connect(c, addr)?;
            cur = Some(Fetch {
                key,
                d: Download {
                    i,
                    t_connect,
                    ..Default::default()
                },
                req_sent: false,
            });
        }
        let f = cur.as_mut().unwrap();
        let s = c.find(f.key).ok_or_else(|| lost(role, "at once", "gone"))?;
        let conn = &mut s.conn;
        if f.d.t_handshake == 0 {
            if conn.is_established() {
                f.d.t_handshake = now_ns();
                check_tls(&ep.lib.io, conn)?;
                s.tracked = true;
                role.connected(f.d.t_handshake);
            } else if ended(conn) {
                return Err((
                    exit::HANDSHAKE,
                    format!("QUIC handshake with {addr} failed: {}", end_reason(conn)),
                ));
            } else {
                return Ok(Flow::Continue(None));
            }
        }
        // The request: --size, 8 bytes little-endian, on stream 0, FIN.
        if !f.req_sent {
            match conn.stream_send(0, &size.to_le_bytes(), true) {
                Ok(n) if n == wlproto::DL_REQUEST_LEN => f.req_sent = true,
                Ok(_) | Err(quiche::Error::Done) => {}
                Err(e) => return Err(lost(role, "sending its request", e)),
            }
        }
        let mut complete = false;
        loop {
            match conn.stream_recv(0, &mut ep.app) {
                Ok((n, fin)) => {
                    let data = &ep.app[..n];
                    let off = f.d.bytes;
                    if n > 0 && f.d.t_first_byte == 0 {
                        f.d.t_first_byte = now_ns();
                    }
                    if !role.pattern.check(off, data) || off + n as u64 > size {
                        role.verify_failed(role.pattern.first_bad(off, data), i, "verify_fail_download");
                        return Err((exit::VERIFY, "a download failed the content check".into()));
                    }
                    f.d.bytes += n as u64;
                    role.app_bytes.fetch_add(n as u64, Relaxed);
                    if fin {
                        complete = true;
                        break;
                    }
                }
                Err(quiche::Error::Done) => break,
                Err(e) => return Err(lost(role, &format!("in download {i}"), e)),
            }
        }
        if !complete {
            if ended(conn) {
                return Err(lost(role, &format!("in download {i}"), end_reason(conn)));
            }
            return Ok(Flow::Continue(None));
        }
        if f.d.bytes != size {
            role.verify_failed(f.d.bytes, i, "verify_fail_download");
            return Err((
                exit::VERIFY,
                format!("download {i} ended after {} of {size} bytes", f.d.bytes),
            ));
        }
        f.d.t_complete = now_ns();
        let _ = conn.close(true, 0, b"done");
        let st = conn.stats();
        f.d.counters = Some((Some(st.retrans as u64), st.lost as u64, st.sent as u64, st.recv as u64));
        s.tracked = false;
        role.downloads.fetch_add(1, SeqCst);
        f.d.emit("download");
        // The next connection at once, while this one closes.
        cur = None;
        i += 1;
    })
}

// ------------------------------------------------------------ rr

/// A message (or a lone FIN) not yet wholly handed to quiche: its stream,
/// its sequence number, its length (0: a FIN alone), the bytes quiche has
/// taken, and whether it ends its stream. quiche takes what its send
/// capacity (congestion window, flow control) allows; the rest waits here,
/// in order, and goes as capacity comes back (each wake tries the oldest).
struct Out {
    id: u64,
    seq: u64,
    len: usize,
    off: usize,
    fin: bool,
}

/// This role's messages, all alike but their header: `msg` holds one
/// (header and body, out of the pattern); each write puts its header in.
fn message(role: &Role, rr: &Rr) -> Vec<u8> {
    let (hdr, body) = rr.message(&role.pattern, 0);
    [&hdr[..], body].concat()
}

/// Hands quiche what it takes of `o`: true once all of it, its FIN with
/// its last byte (quiche sets FIN only on a write it takes whole).
fn write_out(conn: &mut quiche::Connection, msg: &mut [u8], o: &mut Out) -> Result<bool, quiche::Error> {
    if o.len > 0 {
        msg[..HDR].copy_from_slice(&o.seq.to_le_bytes());
    }
    match conn.stream_send(o.id, &msg[o.off..o.len], o.fin) {
        Ok(w) => {
            o.off += w;
            Ok(o.off == o.len)
        }
        // No capacity now; or (a new stream) the server's stream limit.
        Err(quiche::Error::Done | quiche::Error::StreamLimit) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The client's request on a stream of its own, from its first byte handed
/// to quiche until its answer.
struct Req {
    seq: u64,
    sent_ns: u64,
    rx: RxMsg,
    /// When the response's last byte came (it is answered at the FIN).
    t_answer: u64,
}

/// The client's per-request streams by index (stream id / 4), oldest first:
/// they open in order, so a sliding window of them.
#[derive(Default)]
struct Reqs {
    base: u64,
    v: VecDeque<Option<Req>>,
}

impl Reqs {
    fn push(&mut self, k: u64, r: Req) {
        if self.v.is_empty() {
            self.base = k;
        }
        while self.base + (self.v.len() as u64) < k {
            self.v.push_back(None);
        }
        self.v.push_back(Some(r));
    }

    fn get(&mut self, k: u64) -> Option<&mut Req> {
        let i = usize::try_from(k.checked_sub(self.base)?).ok()?;
        self.v.get_mut(i)?.as_mut()
    }

    fn take(&mut self, k: u64) -> Option<Req> {
        let i = usize::try_from(k.checked_sub(self.base)?).ok()?;
        let r = self.v.get_mut(i)?.take();
        while matches!(self.v.front(), Some(None)) {
            self.v.pop_front();
            self.base += 1;
        }
        r
    }
}

/// The rr client on one connection (wl_rr_pattern.c's rr_client for one
/// QUIC connection): the schedule (or the closed loop) hands requests to
/// quiche; answers are checked and reported as they come.
struct RrClient {
    role: &'static Role,
    rr: &'static Rr,
    schedule: Schedule,
    /// Closed loop: the next request's sequence number.
    next_seq: u64,
    /// Per-request streams: the next one's id (0, 4, 8, ...).
    next_id: u64,
    out: VecDeque<Out>,
    msg: Vec<u8>,
    /// Per-request streams: the requests handed to quiche, by stream.
    reqs: Reqs,
    /// --rr-streams one: the requests handed to quiche (seq, sent_ns),
    /// oldest first, and the response coming in.
    q: VecDeque<(u64, u64)>,
    rx: RxMsg,
}

impl RrClient {
    /// Request seq waits to go: on a new stream, or on stream 0.
    fn send(&mut self, seq: u64) {
        let id = if self.rr.per_request {
            self.next_id += 4;
            self.next_id - 4
        } else {
            0
        };
        self.out.push_back(Out {
            id,
            seq,
            len: self.rr.tx_size as usize,
            off: 0,
            fin: self.rr.per_request,
        });
    }

    /// Closed loop: the next request.
    fn issue(&mut self) {
        self.rr.due.fetch_add(1, Relaxed);
        self.next_seq += 1;
        self.send(self.next_seq - 1);
    }

    /// A whole response (or one failed already): checked against the
    /// request it answers and reported; closed loop, the next goes.
    fn answered(&mut self, req: Option<(u64, u64)>, rx: &RxMsg, t_ns: u64) -> Result<(), Fail> {
        self.rr.answer(req, rx, t_ns, 0).map_err(|why| (exit::VERIFY, why))?;
        self.role.app_bytes.fetch_add(u64::from(self.rr.rx_size), Relaxed);
        if self.rr.closed && !self.schedule.draining() {
            self.issue();
        }
        Ok(())
    }

    /// Hands quiche the waiting requests, oldest first, while it takes
    /// them. A request counts as sent, and its sent_ns is taken, when
    /// quiche takes its first bytes.
    fn write(&mut self, conn: &mut quiche::Connection) -> Result<(), Fail> {
        while let Some(o) = self.out.front_mut() {
            let first = o.off == 0;
            let whole = write_out(conn, &mut self.msg, o)
                .map_err(|e| lost(self.role, &format!("sending request {}", o.seq), e))?;
            if first && o.off > 0 {
                let sent_ns = now_ns();
                self.rr.sent.fetch_add(1, Relaxed);
                if self.rr.per_request {
                    self.reqs.push(
                        o.id >> 2,
                        Req {
                            seq: o.seq,
                            sent_ns,
                            rx: RxMsg::default(),
                            t_answer: 0,
                        },
                    );
                } else {
                    self.q.push_back((o.seq, sent_ns));
                }
            }
            if !whole {
                break;
            }
            self.out.pop_front();
        }
        Ok(())
    }

    /// Reads every response that came: each stream's own (wl_rr_pattern.c's
    /// req_data, req_fin, req_aborted), or those on the one stream (one_data).
    fn read(&mut self, conn: &mut quiche::Connection, app: &mut [u8]) -> Result<(), Fail> {
        let (role, rr) = (self.role, self.rr);
        while let Some(id) = conn.stream_readable_next() {
            let k = id >> 2;
            let ours = id & 3 == 0
                && if rr.per_request {
                    self.reqs.get(k).is_some()
                } else {
                    id == 0
                };
            if !ours {
                let _ = conn.stream_shutdown(id, quiche::Shutdown::Read, 0);
                continue;
            }
            loop {
                let (n, fin) = match conn.stream_recv(id, app) {
                    Ok(r) => r,
                    Err(quiche::Error::Done) => break,
                    Err(quiche::Error::StreamReset(_)) if rr.per_request => {
                        let seq = self.reqs.get(k).map_or(k, |r| r.seq);
                        return Err((exit::CONN_LOST, format!("the server reset request {seq}'s stream")));
                    }
                    Err(quiche::Error::StreamReset(_)) => {
                        return Err((exit::CONN_LOST, "the server ended the one stream mid-run".into()))
                    }
                    Err(e) => return Err(lost(role, "reading a response", e)),
                };
                let t = now_ns();
                if !rr.per_request {
                    let mut p = &app[..n];
                    while !p.is_empty() {
                        let took = self.rx.feed(rr, &role.pattern, p);
                        p = &p[took..];
                        if !self.rx.ready(rr) {
                            break;
                        }
                        let rx = std::mem::take(&mut self.rx);
                        let req = self.q.pop_front();
                        self.answered(req, &rx, t)?;
                    }
                    if fin {
                        return Err((exit::CONN_LOST, "the server ended the one stream mid-run".into()));
                    }
                    continue;
                }
                let r = self.reqs.get(k).expect("a request on its stream");
                let took = r.rx.feed(rr, &role.pattern, &app[..n]);
                if r.rx.bad {
                    // Fails now, not at the FIN.
                    let (req, rx) = (Some((r.seq, r.sent_ns)), r.rx.clone());
                    return self.answered(req, &rx, t);
                }
                if took < n {
                    return Err((
                        exit::VERIFY,
                        format!(
                            "the response to request {} is longer than --response's {} bytes (is --response the same on both roles?)",
                            r.seq, rr.rx_size
                        ),
                    ));
                }
                if r.rx.whole(rr) && r.t_answer == 0 {
                    r.t_answer = t;
                }
                if fin {
                    if !r.rx.whole(rr) {
                        return Err((
                            exit::VERIFY,
                            format!(
                                "the response to request {} is shorter than --response's {} bytes (is --response the same on both roles?)",
                                r.seq, rr.rx_size
                            ),
                        ));
                    }
                    let r = self.reqs.take(k).expect("a request on its stream");
                    self.answered(Some((r.seq, r.sent_ns)), &r.rx, r.t_answer)?;
                    break;
                }
            }
        }
        Ok(())
    }

    /// One wake of the loop, the connection up: what fell due goes, the
    /// answers are read; draining, it ends once every request is answered
    /// or the drain is over.
    fn step(&mut self, conn: &mut quiche::Connection, app: &mut [u8]) -> Result<Flow, Fail> {
        let (role, rr) = (self.role, self.rr);
        if ended(conn) {
            return Err((
                exit::CONN_LOST,
                format!(
                    "the connection ended after {} responses: {}",
                    rr.responses.load(Relaxed),
                    end_reason(conn)
                ),
            ));
        }
        let now = now_ns();
        let due = if role.stopping() {
            self.schedule.stop(rr, now)
        } else {
            self.schedule.due(rr, now)
        };
        for seq in due {
            self.send(seq);
        }
        self.read(conn, app)?;
        self.write(conn)?;
        if self.schedule.draining() {
            let idle = self.out.is_empty() && rr.sent.load(Relaxed) == rr.responses.load(Relaxed);
            if idle || self.schedule.over(now_ns()) {
                role.t_transfer_done_ns.store(rr.t_last_answer.load(Relaxed), SeqCst);
                let _ = conn.close(true, 0, b"done");
                return Ok(Flow::Finished);
            }
        }
        Ok(Flow::At(self.schedule.wake_at(rr)))
    }
}

fn rr_client(ep: &mut Endpoint, addr: SocketAddr) -> Result<(), Fail> {
    let role = ep.role;
    let rr = role.rr.as_ref().expect("--pattern rr");
    let key = {
        let conns = ep.lib.conns.clone();
        let mut c = conns.lock();
        ep.connect(&mut c, addr)?
    };
    rr.connections.fetch_add(1, Relaxed);
    let mut cl = RrClient {
        role,
        rr,
        schedule: Schedule::default(),
        next_seq: 0,
        next_id: 0,
        out: VecDeque::new(),
        msg: message(role, rr),
        reqs: Reqs::default(),
        q: VecDeque::new(),
        rx: RxMsg::default(),
    };
    let mut established = false;
    ep.drive(|ep, c| {
        wlproto::emit_tick();
        let s = c.find(key).ok_or_else(|| lost(role, "at once", "gone"))?;
        let conn = &mut s.conn;
        if !established {
            if conn.is_established() {
                established = true;
                let t0 = now_ns();
                check_tls(&ep.lib.io, conn)?;
                s.tracked = true;
                role.connected(t0);
                cl.schedule.start(rr, role.opts.duration_ms);
                if rr.closed {
                    for _ in 0..role.opts.streams {
                        cl.issue();
                    }
                }
            } else if ended(conn) {
                return Err((
                    exit::HANDSHAKE,
                    format!("QUIC handshake with {addr} failed: {}", end_reason(conn)),
                ));
            } else if role.stopping() {
                return Ok(Flow::Finished);
            } else {
                return Ok(Flow::Continue(None));
            }
        }
        cl.step(conn, &mut ep.app).inspect_err(|(code, _)| {
            let _ = conn.close(
                true,
                if *code == exit::VERIFY {
                    CLOSE_VERIFY
                } else {
                    CLOSE_ERROR
                },
                b"",
            );
        })
    })
}

/// One of the client's streams as the server reads it: the request coming
/// in; `spent`: a bad one was answered and the stream ended, the rest is
/// dropped; the client's FIN seen, ours queued, ours handed to quiche.
#[derive(Default)]
struct Served {
    rx: RxMsg,
    spent: bool,
    fin_seen: bool,
    fin_queued: bool,
    fin_sent: bool,
}

/// The rr server on one connection (wl_rr_pattern.c's server side): each
/// request, whole, is answered on its stream (the stream ends when the
/// client's does); a bad one is answered at once and ends its stream, and
/// the run fails once the client has gone.
struct RrServer {
    role: &'static Role,
    rr: &'static Rr,
    streams: HashMap<u64, Served>,
    out: VecDeque<Out>,
    msg: Vec<u8>,
}

impl RrServer {
    /// Answers the request in st.rx (`fin`: its stream's last); one short
    /// or failed is answered at once and ends the stream.
    fn respond(&mut self, id: u64, fin: bool) {
        let (role, rr) = (self.role, self.rr);
        let st = self.streams.get_mut(&id).expect("a stream read");
        let seq = st.rx.seq();
        let why = rr.request_failed(&st.rx);
        let bad = why.is_some();
        if let Some(why) = why {
            st.spent = true;
            role.fail_later(exit::VERIFY, why);
        }
        let fin = fin || bad;
        st.fin_queued |= fin;
        role.app_bytes.fetch_add(u64::from(st.rx.got), Relaxed);
        st.rx = RxMsg::default();
        self.out.push_back(Out {
            id,
            seq,
            len: rr.tx_size as usize,
            off: 0,
            fin,
        });
    }

    /// The client's FIN on stream id: a request cut short is answered as
    /// bad; otherwise our side ends too.
    fn client_fin(&mut self, id: u64) {
        let st = self.streams.get_mut(&id).expect("a stream read");
        st.fin_seen = true;
        if st.fin_sent {
            self.streams.remove(&id);
        } else if !st.fin_queued {
            if st.rx.got > 0 {
                self.respond(id, true);
            } else {
                st.fin_queued = true;
                self.out.push_back(Out {
                    id,
                    seq: 0,
                    len: 0,
                    off: 0,
                    fin: true,
                });
            }
        }
    }

    fn read(&mut self, conn: &mut quiche::Connection, app: &mut [u8]) {
        let (role, rr) = (self.role, self.rr);
        while let Some(id) = conn.stream_readable_next() {
            if id & 3 != 0 {
                // Not a bidirectional stream of the client's.
                let _ = conn.stream_shutdown(id, quiche::Shutdown::Read, 0);
                continue;
            }
            self.streams.entry(id).or_default();
            loop {
                let (n, fin) = match conn.stream_recv(id, app) {
                    Ok(r) => r,
                    Err(quiche::Error::Done) => break,
                    Err(_) => {
                        // The client reset it (or it is gone): reset ours,
                        // and its answers go no more.
                        let _ = conn.stream_shutdown(id, quiche::Shutdown::Write, 0);
                        self.streams.remove(&id);
                        self.out.retain(|o| o.id != id);
                        break;
                    }
                };
                let mut p = &app[..n];
                while !p.is_empty() {
                    let st = self.streams.get_mut(&id).expect("a stream read");
                    if st.spent {
                        break;
                    }
                    let took = st.rx.feed(rr, &role.pattern, p);
                    p = &p[took..];
                    if !st.rx.ready(rr) {
                        break;
                    }
                    // With the client's FIN right after it: FIN with the answer.
                    let last = fin && p.is_empty() && !st.rx.bad;
                    if last {
                        st.fin_seen = true;
                    }
                    self.respond(id, last);
                }
                if fin {
                    if !self.streams.get(&id).is_some_and(|st| st.fin_seen && st.fin_queued) {
                        self.client_fin(id);
                    }
                    break;
                }
            }
        }
    }

    /// Hands quiche the waiting answers, oldest first, while it takes them;
    /// an answer counts as served once quiche has all of it.
    fn write(&mut self, conn: &mut quiche::Connection) -> Result<(), Fail> {
        while let Some(o) = self.out.front_mut() {
            match write_out(conn, &mut self.msg, o) {
                Ok(false) => break,
                Ok(true) => {
                    if o.len > 0 {
                        self.rr.served.fetch_add(1, Relaxed);
                    }
                    if o.fin {
                        if let Some(st) = self.streams.get_mut(&o.id) {
                            st.fin_sent = true;
                            if st.fin_seen {
                                self.streams.remove(&o.id);
                            }
                        }
                    }
                }
                // The client stopped or reset the stream: its answers go no more.
                Err(
                    quiche::Error::StreamStopped(_) | quiche::Error::InvalidStreamState(_) | quiche::Error::FinalSize,
                ) => {
                    let id = o.id;
                    self.streams.remove(&id);
                    let _ = conn.stream_shutdown(id, quiche::Shutdown::Write, 0);
                    self.out.retain(|o| o.id != id);
                    continue;
                }
                Err(e) => return Err(lost(self.role, "answering a request", e)),
            }
            self.out.pop_front();
        }
        Ok(())
    }

    /// The run's end: the connection's (a bad request's failure is the role's already).
    fn end(&mut self, conn: Option<&quiche::Connection>) -> Result<Flow, Fail> {
        self.role.t_transfer_done_ns.store(now_ns(), SeqCst);
        let Some(conn) = conn else { return Ok(Flow::Finished) };
        if peer_closed(conn, true) {
            return Ok(Flow::Finished);
        }
        match conn.peer_error() {
            Some(e) if e.is_app => Err((
                exit::CONN_LOST,
                format!(
                    "the client closed its connection with error {}{}",
                    e.error_code,
                    if e.error_code == CLOSE_VERIFY {
                        " (its content check failed)"
                    } else {
                        ""
                    }
                ),
            )),
            _ => Err(lost(self.role, "mid-run", end_reason(conn))),
        }
    }
}

fn rr_server(ep: &mut Endpoint) -> Result<(), Fail> {
    let role = ep.role;
    let rr = role.rr.as_ref().expect("--pattern rr");
    let mut sv = RrServer {
        role,
        rr,
        streams: HashMap::new(),
        out: VecDeque::new(),
        msg: message(role, rr),
    };
    let mut conn_key: Option<u64> = None;
    let mut established = false;
    // One connection, once (qprof gives the Rust workloads one).
    ep.accepting = 1;
    ep.drive(|ep, c| {
        if conn_key.is_none() {
            conn_key = ep.accepted.pop_front();
            if conn_key.is_some() {
                rr.connections.fetch_add(1, Relaxed);
            }
        }
        let Some(key) = conn_key else {
            return Ok(if role.stopping() {
                Flow::Finished
            } else {
                Flow::Continue(None)
            });
        };
        let s = c.find(key).ok_or_else(|| lost(role, "at once", "gone"))?;
        let conn = &mut s.conn;
        if !established {
            if conn.is_established() {
                established = true;
                let t = now_ns();
                check_tls(&ep.lib.io, conn)?;
                s.tracked = true;
                role.connected(t);
            } else if ended(conn) {
                return Err((
                    exit::HANDSHAKE,
                    format!("QUIC handshake with a client failed: {}", end_reason(conn)),
                ));
            } else if role.stopping() {
                return Ok(Flow::Finished);
            } else {
                return Ok(Flow::Continue(None));
            }
        }
        // "stop", "exit" or EOF: the connection closes (code 0) as the endpoint drains.
        if role.stopping() {
            return sv.end(None);
        }
        sv.read(conn, &mut ep.app);
        sv.write(conn)?;
        if ended(conn) {
            return sv.end(Some(conn));
        }
        Ok(Flow::Continue(None))
    })
}
