// SPDX-License-Identifier: GPL-2.0-only
//! qprof-wl's transport interface for a transport written in Rust: the
//! structures of workloads/wl_transport.h, wl.h and wl_udpio.h as C lays
//! them out, and the calls into qprof-wl (the loop, the reports, the one
//! UDP datapath), which the plugin's loader resolves against qprof-wl
//! (wl_plugin.c). A transport in Rust is a cdylib exporting its
//! `wl_STACK: WlTransport`; it calls `abi_check` in its init, which holds
//! each mirror's size to the one qprof-wl was built with.
#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::sync::atomic::AtomicU64;

pub use libc::sockaddr_in;

/// wl.h's exit codes, name for name (tests/test_quic_implementations.py holds them to it).
pub mod exit {
    pub const OK: i32 = 0;
    pub const USAGE: i32 = 2;
    pub const LIB_OPEN: i32 = 3;
    pub const HANDSHAKE: i32 = 4;
    pub const VERIFY: i32 = 5;
    pub const ADDR_IN_USE: i32 = 6;
    pub const CONN_LOST: i32 = 7;
    pub const INTERNAL: i32 = 8;
    pub const TLS_CONFIG: i32 = 9;
}

/// wl_transport.h's hints and flags.
pub const WL_CONN_STATS: c_uint = 16;
pub const WL_CONN_RESUME: c_uint = 4;
pub const WL_SEND_FIN: c_uint = 1;
pub const WL_SEND_OWNED: c_uint = 4;
pub const WL_STREAM_UNI: c_uint = 1;
pub const WL_HDR_MAX: u32 = 16;
pub const WL_CLOSE_ERROR: u64 = 1;

/// struct wl_opts (wl.h), whole: its layout is C's.
#[repr(C)]
pub struct WlOpts {
    pub stack: *const c_char,
    pub role: *const c_char,
    pub pattern: *const c_char,
    pub rr_streams: *const c_char,
    pub tcp_conns: *const c_char,
    pub rr_mode: *const c_char,
    pub fault: *const c_char,
    pub addr: *const c_char,
    pub port: c_int,
    pub cert: *const c_char,
    pub key: *const c_char,
    pub streams: c_int,
    pub conns: c_int,
    pub direction: *const c_char,
    pub pacing: *const c_char,
    pub quic_cc: *const c_char,
    pub ecn: *const c_char,
    pub encrypt: *const c_char,
    pub duration_ms: u64,
    pub bytes: u64,
    pub io_size: u32,
    pub exec_profile: *const c_char,
    pub control: bool,
    pub wait_start: bool,
    pub tls_version: *const c_char,
    pub cipher: *const c_char,
    pub app: *const c_char,
    pub tcp_cc: *const c_char,
    pub sendfile: bool,
    pub send_mode: *const c_char,
    pub batch: u32,
    pub dgram_size: u32,
    pub gro: *const c_char,
    pub size: u64,
    pub count: u64,
    pub resume: bool,
    pub period_us: u64,
    pub payload: u32,
    pub request: u32,
    pub response: u32,
    pub rr_one_stream: bool,
    pub tcp_on_demand: bool,
    pub rr_closed: bool,
    pub proto: *const c_char,
    pub verify: *const c_char,
    pub alpn: *const c_char,
    pub size_only: bool,
}

/// struct wl_end (wl_transport.h).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct WlEnd {
    pub connected: bool,
    pub t_connected: u64,
    pub closed_by_transport: bool,
    pub transport_status: *const c_char,
    pub closed_by_peer: bool,
    pub peer_error: u64,
    pub t_peer_closed: u64,
    pub exit_code: c_int,
}

impl Default for WlEnd {
    fn default() -> Self {
        WlEnd {
            connected: false,
            t_connected: 0,
            closed_by_transport: false,
            transport_status: std::ptr::null(),
            closed_by_peer: false,
            peer_error: 0,
            t_peer_closed: 0,
            exit_code: 0,
        }
    }
}

/// struct wl_dl (wl.h): a download's or a handshake's figures.
#[repr(C)]
pub struct WlDl {
    pub i: u64,
    pub bytes: u64,
    pub t_connect: u64,
    pub t_tcp: u64,
    pub t_handshake: u64,
    pub t_first_byte: u64,
    pub t_complete: u64,
    pub has_resumed: bool,
    pub resumed: bool,
    pub has_early: bool,
    pub early_data: bool,
    pub has_counters: bool,
    pub has_lost: bool,
    pub no_retransmits: bool,
    pub retransmits: u64,
    pub lost_packets: u64,
    pub packets_sent: u64,
    pub packets_received: u64,
}

/// The transport's objects, as the patterns hold them: opaque to C.
pub type WlConn = c_void;
pub type WlStream = c_void;
pub type WlJson = c_void;

#[repr(C)]
pub struct WlStreamHandlers {
    pub writable: Option<unsafe extern "C" fn(*mut WlStream, *mut c_void)>,
    pub data: Option<unsafe extern "C" fn(*mut WlStream, *mut c_void, *const u8, usize)>,
    pub fin: Option<unsafe extern "C" fn(*mut WlStream, *mut c_void)>,
    pub aborted: Option<unsafe extern "C" fn(*mut WlStream, *mut c_void)>,
    pub sent: Option<unsafe extern "C" fn(*mut WlStream, *mut c_void, *mut c_void, bool)>,
    pub closed: Option<unsafe extern "C" fn(*mut WlStream, *mut c_void, bool)>,
}

#[repr(C)]
pub struct WlConnHandlers {
    pub connected: Option<unsafe extern "C" fn(*mut WlConn, *mut c_void)>,
    pub stream: Option<
        unsafe extern "C" fn(*mut WlConn, *mut c_void, *mut WlStream, *mut *mut c_void) -> *const WlStreamHandlers,
    >,
    pub closed: Option<unsafe extern "C" fn(*mut WlConn, *mut c_void, *const WlEnd)>,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct WlAccept {
    pub accept: Option<unsafe extern "C" fn(*mut c_void, *mut WlConn, *mut *mut c_void) -> *const WlConnHandlers>,
    pub arg: *mut c_void,
    pub flags: c_uint,
    pub peer_bidi_streams: u16,
    pub peer_uni_streams: u16,
}

/// struct wl_transport: what a plugin exports as wl_STACK.
#[repr(C)]
pub struct WlTransport {
    pub name: *const c_char,
    pub multistream: bool,
    pub early_data: bool,
    pub init: Option<unsafe extern "C" fn(*const WlOpts, bool) -> c_int>,
    pub setup: Option<unsafe extern "C" fn() -> c_int>,
    pub listen: Option<unsafe extern "C" fn(*const WlAccept) -> c_int>,
    pub listen_stop: Option<unsafe extern "C" fn()>,
    pub connect: Option<unsafe extern "C" fn(*const WlConnHandlers, *mut c_void, c_uint, *mut *mut WlConn) -> c_int>,
    pub open: Option<
        unsafe extern "C" fn(*mut WlConn, *const WlStreamHandlers, *mut c_void, c_uint, *mut *mut WlStream) -> c_int,
    >,
    pub send: Option<unsafe extern "C" fn(*mut WlStream, *const u8, u32, *const u8, u32, c_uint, *mut c_void) -> c_int>,
    pub room: Option<unsafe extern "C" fn(*mut WlStream) -> usize>,
    pub pause: Option<unsafe extern "C" fn(*mut WlStream, bool)>,
    pub abort: Option<unsafe extern "C" fn(*mut WlStream)>,
    pub close: Option<unsafe extern "C" fn(*mut WlConn, u64)>,
    pub stream_id: Option<unsafe extern "C" fn(*mut WlStream) -> i64>,
    pub conn_info: Option<unsafe extern "C" fn(*mut WlConn, *mut WlDl)>,
    pub mark_snapshot: Option<unsafe extern "C" fn()>,
    pub json_connected: Option<unsafe extern "C" fn(*mut WlJson)>,
    pub json_mark: Option<unsafe extern "C" fn(*mut WlJson)>,
    pub json_done: Option<unsafe extern "C" fn(*mut WlJson, *const WlEnd)>,
    pub fini: Option<unsafe extern "C" fn()>,
}

// Its pointers are to statics and functions: shared by every thread.
unsafe impl Sync for WlTransport {}

/// struct wl_udp_io (wl_udpio.h): the UDP datapath's state and counts.
#[repr(C)]
#[derive(Default)]
pub struct WlUdpIo {
    pub gso: bool,
    pub gro: bool,
    pub gro_seen: bool,
    pub probed: bool,
    pub sndbuf: c_int,
    pub rcvbuf: c_int,
    pub seq: AtomicU64,
    pub tx_dgrams: AtomicU64,
    pub tx_bytes: AtomicU64,
    pub tx_ios: AtomicU64,
    pub rx_dgrams: AtomicU64,
    pub rx_bytes: AtomicU64,
    pub rx_ios: AtomicU64,
}

/// struct wl_json (wl.h): a JSON object being written.
#[repr(C)]
pub struct WlJsonBuf {
    pub buf: [u8; 8192],
    pub len: usize,
    pub first: bool,
}

impl WlJsonBuf {
    /// A new object (wl_json_begin).
    pub fn new() -> Box<WlJsonBuf> {
        let mut j = Box::new(WlJsonBuf {
            buf: [0; 8192],
            len: 0,
            first: true,
        });
        unsafe { wl_json_begin(j.as_mut() as *mut WlJsonBuf as *mut WlJson) };
        j
    }
    pub fn ptr(&mut self) -> *mut WlJson {
        self as *mut WlJsonBuf as *mut WlJson
    }
    /// Closed (wl_json_end): its text, alive as long as it is.
    pub fn end(&mut self) -> *const c_char {
        unsafe { wl_json_end(self.ptr()) }
    }
}

pub type LoopFn = unsafe extern "C" fn(c_int, u32, *mut c_void);

extern "C" {
    pub fn wl_abi_size(what: *const c_char) -> usize;
    pub fn wl_now_ns() -> u64;
    pub fn wl_timer_open() -> c_int;
    pub fn wl_timer_arm(fd: c_int, t_ns: u64) -> c_int;
    pub fn wl_loop_add(fd: c_int, events: u32, f: LoopFn, arg: *mut c_void) -> c_int;
    pub fn wl_loop_del(fd: c_int);
    pub fn wl_loop_again(fd: c_int);
    pub fn wl_loop_run(done: unsafe extern "C" fn(*mut c_void) -> bool, arg: *mut c_void) -> c_int;
    pub fn wl_bind(fd: c_int, a: *const sockaddr_in, proto: *const c_char, o: *const WlOpts) -> c_int;
    fn wl_warn(fmt: *const c_char, ...);
    pub fn wl_json_begin(j: *mut WlJson);
    pub fn wl_json_end(j: *mut WlJson) -> *const c_char;
    pub fn wl_json_u64(j: *mut WlJson, key: *const c_char, v: u64);
    pub fn wl_json_str(j: *mut WlJson, key: *const c_char, v: *const c_char);
    pub fn wl_json_bool(j: *mut WlJson, key: *const c_char, v: bool);
    pub fn wl_json_raw(j: *mut WlJson, key: *const c_char, raw: *const c_char);
    pub fn wl_udp_io_socket(io: *mut WlUdpIo) -> c_int;
    pub fn wl_udp_io_listen(
        io: *mut WlUdpIo,
        a: *const sockaddr_in,
        o: *const WlOpts,
        f: LoopFn,
        arg: *mut c_void,
        fd: *mut c_int,
    ) -> c_int;
    pub fn wl_udp_io_connect(io: *mut WlUdpIo, to: *const sockaddr_in, local: *mut sockaddr_in) -> c_int;
    pub fn wl_udp_io_send(
        io: *mut WlUdpIo,
        fd: c_int,
        to: *const sockaddr_in,
        buf: *mut u8,
        len: usize,
        seg: usize,
    ) -> usize;
    pub fn wl_udp_io_recv(
        io: *mut WlUdpIo,
        fd: c_int,
        buf: *mut u8,
        cap: usize,
        from: *mut sockaddr_in,
        seg: *mut usize,
    ) -> isize;
    pub fn wl_udp_io_json(io: *mut WlUdpIo, j: *mut WlJson);
}

/// A sentence on stderr, as qprof-wl's own (its "qprof-wl: " prefix).
pub fn warn(msg: &str) {
    let m = CString::new(msg.replace('\0', " ")).unwrap();
    unsafe { wl_warn(c"%s".as_ptr(), m.as_ptr()) }
}

/// A C string of the options (NULL: None).
pub fn opt_str<'a>(p: *const c_char) -> Option<&'a str> {
    if p.is_null() {
        None
    } else {
        unsafe { CStr::from_ptr(p) }.to_str().ok()
    }
}

/// Each mirror's size against qprof-wl's own; the first that differs, named.
pub fn abi_check() -> Result<(), String> {
    let sizes: [(&CStr, usize); 10] = [
        (c"wl_json", size_of::<WlJsonBuf>()),
        (c"wl_opts", size_of::<WlOpts>()),
        (c"wl_end", size_of::<WlEnd>()),
        (c"wl_dl", size_of::<WlDl>()),
        (c"wl_stream_handlers", size_of::<WlStreamHandlers>()),
        (c"wl_conn_handlers", size_of::<WlConnHandlers>()),
        (c"wl_accept", size_of::<WlAccept>()),
        (c"wl_transport", size_of::<WlTransport>()),
        (c"wl_udp_io", size_of::<WlUdpIo>()),
        (c"sockaddr_in", size_of::<sockaddr_in>()),
    ];
    for (name, ours) in sizes {
        let theirs = unsafe { wl_abi_size(name.as_ptr()) };
        if theirs != ours {
            return Err(format!(
                "this transport's struct {} is {ours} bytes and qprof-wl's {theirs}: run make build",
                name.to_str().unwrap()
            ));
        }
    }
    Ok(())
}

/// JSON into a report: a key, and a value as JSON text.
pub fn json_raw(j: *mut WlJson, key: &CStr, raw: &str) {
    let v = CString::new(raw).unwrap();
    unsafe { wl_json_raw(j, key.as_ptr(), v.as_ptr()) }
}
