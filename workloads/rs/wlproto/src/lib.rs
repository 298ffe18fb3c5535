// SPDX-License-Identifier: GPL-2.0-only
//! What every qprof workload shares with qprof-wl (workloads/wl.h), for the
//! Rust ones: the exit codes, the content pattern and its check, the
//! command line qprof gives, the control channel on stdin (mark, start,
//! stop, exit) and the JSON events on stdout (ready, connected, mark,
//! done, download, served; rr_batch, rr.rs). A workload for one QUIC implementation holds
//! the transport; this crate holds everything the Python side reads, so
//! qprof measures every implementation through one protocol.

use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Condvar, Mutex, OnceLock};

use serde_json::{json, Map, Value};

pub mod rr;

/// Exit codes, as qprof-wl's (wl.h, enum wl_exit; collectors/workload.py).
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

/// wl.h: WL_MAX_STREAMS, WL_DL_REQUEST_LEN.
pub const MAX_STREAMS: usize = 64;
pub const DL_REQUEST_LEN: usize = 8;

// ---------------------------------------------------------------- pattern

/// wl.h's payload pattern: the 8-byte little-endian word at stream offset
/// o (o a multiple of 8) is (o mod P) ^ SEED, P the period, a power of two
/// of at least PERIOD_MIN and the send size. The sender sends straight out
/// of one read-only region of P bytes; the receiver checks every byte
/// against its offset.
pub const PAT_PERIOD_MIN: usize = 64 << 10;
pub const PAT_SEED: u64 = 0x9e37_79b9_7f4a_7c15;

pub struct Pattern {
    region: &'static [u8],
    mask: u64,
}

impl Pattern {
    pub fn new(io_size: usize) -> Pattern {
        let period = io_size.max(PAT_PERIOD_MIN).next_power_of_two();
        let mask = period as u64 - 1;
        let mut v = Vec::with_capacity(period);
        for i in (0..period as u64).step_by(8) {
            v.extend_from_slice(&((i & mask) ^ PAT_SEED).to_le_bytes());
        }
        // The whole run reads it: one allocation, never freed.
        Pattern {
            region: Box::leak(v.into_boxed_slice()),
            mask,
        }
    }

    pub fn period(&self) -> usize {
        self.region.len()
    }

    pub fn region(&self) -> &'static [u8] {
        self.region
    }

    /// The region's bytes from stream offset `off`, at most `len` of them
    /// and never past the region's end (a send of the pattern at `off`).
    pub fn at(&self, off: u64, len: usize) -> &'static [u8] {
        let start = (off & self.mask) as usize;
        &self.region[start..start + len.min(self.region.len() - start)]
    }

    fn byte(&self, off: u64) -> u8 {
        (((off & !7 & self.mask) ^ PAT_SEED) >> (8 * (off & 7))) as u8
    }

    /// Do `p`'s bytes hold the pattern from stream offset `off`?
    pub fn check(&self, mut off: u64, mut p: &[u8]) -> bool {
        while !p.is_empty() && off & 7 != 0 {
            if p[0] != self.byte(off) {
                return false;
            }
            p = &p[1..];
            off += 1;
        }
        // One OR-reduction over the whole buffer, so the loop vectorises.
        let words = p.len() / 8;
        let mut bad = 0u64;
        for (i, w) in p[..words * 8].chunks_exact(8).enumerate() {
            let o = off + 8 * i as u64;
            bad |= u64::from_le_bytes(w.try_into().unwrap()) ^ ((o & self.mask) ^ PAT_SEED);
        }
        if bad != 0 {
            return false;
        }
        off += 8 * words as u64;
        p[words * 8..]
            .iter()
            .enumerate()
            .all(|(i, &b)| b == self.byte(off + i as u64))
    }

    /// The offset of the first byte of `p` (at stream offset `off`) that is
    /// not the pattern's.
    pub fn first_bad(&self, off: u64, p: &[u8]) -> u64 {
        (off..)
            .zip(p)
            .find(|&(o, &b)| b != self.byte(o))
            .map_or(off + p.len() as u64, |(o, _)| o)
    }
}

// ---------------------------------------------------------------- time

/// CLOCK_MONOTONIC in ns: the clock of every t_ns qprof reads.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid timespec; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A one-shot CLOCK_MONOTONIC timerfd, non-blocking, for a workload's own
/// loop to wait on (mio, tokio's AsyncFd): the rr schedule wakes at its
/// requests' due times to the microsecond, as qprof-wl's loop does, where
/// mio's poll timeout and tokio's timer round up to the millisecond.
pub struct Timerfd {
    fd: std::os::fd::OwnedFd,
    armed: Option<u64>,
}

impl Timerfd {
    pub fn new() -> std::io::Result<Timerfd> {
        use std::os::fd::FromRawFd;
        // SAFETY: no pointers; the fd returned is ours alone.
        let fd = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Timerfd {
            // SAFETY: fd is a new descriptor no one else owns.
            fd: unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) },
            armed: None,
        })
    }

    /// Fire once at t_ns (CLOCK_MONOTONIC; a time past fires at once), or
    /// never (None). A time already armed is left alone: no syscall.
    pub fn arm(&mut self, t_ns: Option<u64>) -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        // 0 disarms a timerfd: a time at 0 is a time past, 1 ns.
        let t_ns = t_ns.map(|t| t.max(1));
        if t_ns == self.armed {
            return Ok(());
        }
        let t = t_ns.unwrap_or(0);
        let spec = libc::itimerspec {
            it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
            it_value: libc::timespec {
                tv_sec: (t / 1_000_000_000) as libc::time_t,
                tv_nsec: (t % 1_000_000_000) as libc::c_long,
            },
        };
        // SAFETY: spec is a valid itimerspec; no old value is asked for.
        if unsafe {
            libc::timerfd_settime(
                self.fd.as_raw_fd(),
                libc::TFD_TIMER_ABSTIME,
                &spec,
                std::ptr::null_mut(),
            )
        } != 0
        {
            return Err(std::io::Error::last_os_error());
        }
        self.armed = t_ns;
        Ok(())
    }

    /// It fired: disarmed (a one-shot). Its count need not be read: an
    /// edge-triggered wait wakes once per expiry, and arming resets it.
    pub fn fired(&mut self) {
        self.armed = None;
    }
}

impl std::os::fd::AsRawFd for Timerfd {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.fd.as_raw_fd()
    }
}

// ---------------------------------------------------------------- options

/// qprof-wl's command line, as far as the Rust workloads take it; qprof
/// refuses what they do not take before it starts them (describe/plan.py).
#[derive(clap::Parser, Debug, Clone)]
#[command(about = "qprof's workload on one QUIC implementation (qprof-wl's protocol)")]
pub struct Opts {
    #[arg(long)]
    pub stack: String,
    #[arg(long, value_parser = ["client", "server"])]
    pub role: String,
    #[arg(long, default_value = "127.0.0.1")]
    pub addr: String,
    #[arg(long, default_value_t = 4433)]
    pub port: u16,
    #[arg(long)]
    pub cert: Option<String>,
    #[arg(long)]
    pub key: Option<String>,
    /// Commands on stdin (mark NAME, start, stop, exit).
    #[arg(long)]
    pub control: bool,
    /// Client: connect only on "start".
    #[arg(long)]
    pub wait_start: bool,
    #[arg(long, default_value = "bulk", value_parser = ["bulk", "download", "rr"])]
    pub pattern: String,
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=MAX_STREAMS as i64))]
    pub streams: u32,
    /// Connections: one (qprof refuses more for these workloads).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1))]
    pub conns: u32,
    #[arg(long, default_value = "up", value_parser = ["up"])]
    pub direction: String,
    /// Bulk: the sender stops this long after the handshake (0: on "stop" or --bytes).
    #[arg(long, default_value_t = 0)]
    pub duration_ms: u64,
    /// Bulk: bytes per stream (0: until --duration-ms or "stop").
    #[arg(long, default_value_t = 0)]
    pub bytes: u64,
    #[arg(long, default_value_t = 64 << 10)]
    pub io_size: u32,
    /// Download: bytes the server sends per connection.
    #[arg(long, default_value_t = 0)]
    pub size: u64,
    /// Download: connections, one after another.
    #[arg(long, default_value_t = 1)]
    pub count: u64,
    /// rr client: between two requests' due times (open loop).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=1_000_000_000))]
    pub period_us: u64,
    /// rr: bytes of each request and of each response.
    #[arg(long, default_value_t = 0, value_parser = rr_size)]
    pub payload: u32,
    /// rr: bytes of each request (0: --payload).
    #[arg(long, default_value_t = 0, value_parser = rr_size)]
    pub request: u32,
    /// rr: bytes of each response (0: --payload).
    #[arg(long, default_value_t = 0, value_parser = rr_size)]
    pub response: u32,
    /// rr: a stream per request, or every request on one stream.
    #[arg(long, default_value = "per-request", value_parser = ["per-request", "one"])]
    pub rr_streams: String,
    /// rr: open (the schedule) or closed (an answer sends the next request).
    #[arg(long, default_value = "open", value_parser = ["open", "closed"])]
    pub rr_mode: String,
}

/// An rr message's size: 16 B to 1 MiB (wl.h, WL_RR_PAYLOAD_MIN/MAX), or 0 (unset).
fn rr_size(s: &str) -> Result<u32, String> {
    let n: u32 = s.parse().map_err(|e| format!("{e}"))?;
    if n == 0 || (16..=1 << 20).contains(&n) {
        Ok(n)
    } else {
        Err("16 to 1048576 bytes".into())
    }
}

impl Opts {
    pub fn server(&self) -> bool {
        self.role == "server"
    }
    pub fn download(&self) -> bool {
        self.pattern == "download"
    }
    pub fn rr(&self) -> bool {
        self.pattern == "rr"
    }
}

/// The command line, or exit USAGE with clap's reason (or qprof-wl's).
pub fn parse_opts() -> Opts {
    use clap::Parser;
    let o = match Opts::try_parse() {
        Ok(o) => o,
        Err(e) => {
            let _ = e.print();
            std::process::exit(if e.use_stderr() { exit::USAGE } else { exit::OK });
        }
    };
    if o.rr() && o.payload == 0 && (o.request == 0 || o.response == 0) {
        warn("--pattern rr needs --payload N, the bytes of each request and each response, or --request and --response, on both roles");
        std::process::exit(exit::USAGE);
    }
    if o.rr() && !o.server() && o.rr_mode == "open" && o.period_us < 100 {
        warn("--pattern rr's open loop needs --period-us, 100 or more");
        std::process::exit(exit::USAGE);
    }
    o
}

// ---------------------------------------------------------------- output

/// wl_emit_packed's records waiting (wl.h: WL_DEFER_BYTES, WL_DEFER_NS).
struct Deferred {
    buf: Vec<u8>,
    event: &'static str,
    fields: &'static str,
    t_first: u64,
}

const DEFER_BYTES: usize = 32 << 10;
const DEFER_NS: u64 = 20_000_000;

static OUT: Mutex<Deferred> = Mutex::new(Deferred {
    buf: Vec::new(),
    event: "",
    fields: "",
    t_first: 0,
});

impl Deferred {
    fn flush(&mut self, out: &mut impl Write) {
        use base64::Engine;
        if self.buf.is_empty() {
            return;
        }
        let b64 = base64::engine::general_purpose::STANDARD.encode(&self.buf);
        let _ = writeln!(
            out,
            "{{\"event\":\"{}_batch\",\"fields\":\"{}\",\"b64\":\"{b64}\"}}",
            self.event, self.fields
        );
        let _ = out.flush();
        self.buf.clear();
    }
}

/// One event: a JSON line on stdout, flushed at once, whole, after the
/// packed records waiting, so output stays in order.
pub fn emit(v: &Value) {
    let line = v.to_string();
    let mut d = OUT.lock().unwrap();
    let mut out = std::io::stdout().lock();
    d.flush(&mut out);
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// A record that may wait (qprof-wl's wl_emit_packed): values named by
/// fields, gathered into one {"event":"<event>_batch"} line of
/// little-endian u64s in base64, written once 32 KiB wait, the oldest is
/// 20 ms old (here or at emit_tick), another event's record comes, or
/// before any other line.
pub fn emit_packed(event: &'static str, fields: &'static str, v: &[u64]) {
    let now = now_ns();
    let mut d = OUT.lock().unwrap();
    let mut out = std::io::stdout().lock();
    if !d.buf.is_empty() && (d.event != event || d.buf.len() + 8 * v.len() > DEFER_BYTES) {
        d.flush(&mut out);
    }
    if d.buf.is_empty() {
        d.t_first = now;
        d.event = event;
        d.fields = fields;
    }
    v.iter().for_each(|x| d.buf.extend_from_slice(&x.to_le_bytes()));
    if d.buf.len() + 8 * v.len() > DEFER_BYTES || now - d.t_first >= DEFER_NS {
        d.flush(&mut out);
    }
}

/// Writes the packed records once the oldest is 20 ms old: the loop calls it.
pub fn emit_tick() {
    let mut d = OUT.lock().unwrap();
    if !d.buf.is_empty() && now_ns() - d.t_first >= DEFER_NS {
        d.flush(&mut std::io::stdout().lock());
    }
}

/// A human message on stderr, as qprof-wl's wl_warn.
pub fn warn(msg: &str) {
    eprintln!("qprof-wl: {msg}");
}

// ---------------------------------------------------------------- the role

/// A stack's own figures for marks and reports (its counters now), and
/// its own part of the "connected" and "done" events.
pub trait Stack: Send + Sync {
    /// Counters for a mark or the report (a JSON object's members).
    fn counters(&self, out: &mut Map<String, Value>);
    /// What the library says of itself: name, version, crypto.
    fn describe(&self, out: &mut Map<String, Value>);
}

/// One role's shared state: what its marks and its report say. The
/// transport's tasks update it; the control thread reads it.
pub struct Role {
    pub opts: Opts,
    pub pattern: Pattern,
    /// --pattern rr's figures (None: another pattern).
    pub rr: Option<rr::Rr>,
    /// Sender: bytes handed to the transport; a download client: bytes checked.
    pub app_bytes: AtomicU64,
    /// Bulk receiver: each stream's checked bytes, as it saw them start.
    pub stream_bytes: [AtomicU64; MAX_STREAMS],
    pub streams_seen: AtomicUsize,
    pub streams_done: AtomicU64,
    pub downloads: AtomicU64,
    pub t_connected_ns: AtomicU64,
    pub t_transfer_done_ns: AtomicU64,
    stopping: AtomicBool,
    started: Mutex<bool>,
    start_cv: Condvar,
    may_exit: Mutex<bool>,
    exit_cv: Condvar,
    stop_hooks: Mutex<Vec<Box<dyn Fn() + Send>>>,
    stack: OnceLock<Box<dyn Stack>>,
    failure: Mutex<Option<(i32, String)>>,
    failure_code: AtomicI32,
    verify_fail: Mutex<Option<(u64, u64, &'static str)>>,
    connected_sent: AtomicBool,
}

impl Role {
    pub fn new(opts: Opts) -> &'static Role {
        // rr: a pattern period of at least twice the largest message, so
        // each message's pattern bytes come out of the region in one piece.
        let largest = opts.payload.max(opts.request).max(opts.response) as usize;
        let pattern = Pattern::new((opts.io_size as usize).max(2 * largest));
        let rr = opts.rr().then(|| rr::Rr::new(&opts));
        Box::leak(Box::new(Role {
            opts,
            pattern,
            rr,
            app_bytes: AtomicU64::new(0),
            stream_bytes: std::array::from_fn(|_| AtomicU64::new(0)),
            streams_seen: AtomicUsize::new(0),
            streams_done: AtomicU64::new(0),
            downloads: AtomicU64::new(0),
            t_connected_ns: AtomicU64::new(0),
            t_transfer_done_ns: AtomicU64::new(0),
            stopping: AtomicBool::new(false),
            started: Mutex::new(false),
            start_cv: Condvar::new(),
            may_exit: Mutex::new(false),
            exit_cv: Condvar::new(),
            stop_hooks: Mutex::new(Vec::new()),
            stack: OnceLock::new(),
            failure: Mutex::new(None),
            failure_code: AtomicI32::new(0),
            verify_fail: Mutex::new(None),
            connected_sent: AtomicBool::new(false),
        }))
    }

    pub fn server(&self) -> bool {
        self.opts.server()
    }

    /// Every workload's start: the command line (for this --stack only), the
    /// role with the stack's figures, the control channel, and a client's
    /// wait for "start" (stopped first: its report, and exit).
    pub fn begin(stack: &str, figures: Box<dyn Stack>) -> &'static Role {
        let opts = parse_opts();
        if opts.stack != stack {
            warn(&format!(
                "this is the {stack} workload; --stack {} is another's",
                opts.stack
            ));
            std::process::exit(exit::USAGE);
        }
        let role = Role::new(opts);
        role.set_stack(figures);
        role.control();
        if !role.server() && !role.wait_start() {
            std::process::exit(role.done(exit::OK));
        }
        role
    }

    /// The stack's counters and self-description, once it has them.
    pub fn set_stack(&self, s: Box<dyn Stack>) {
        let _ = self.stack.set(s);
    }

    /// The bulk receiver counts per stream (the server, --direction up).
    fn per_stream(&self) -> bool {
        !self.opts.download() && !self.opts.rr() && self.server()
    }

    /// Does this role check what it receives? (rr: both.)
    fn receiver(&self) -> bool {
        self.opts.rr() || self.opts.download() != self.server()
    }

    /// The receiver's bytes are its streams': one load gives both (wl.h says why).
    fn app_bytes_now(&self) -> (u64, Vec<u64>) {
        if !self.per_stream() {
            return (self.app_bytes.load(Relaxed), Vec::new());
        }
        let n = self.streams_seen.load(SeqCst).min(MAX_STREAMS);
        let v: Vec<u64> = self.stream_bytes[..n].iter().map(|b| b.load(Relaxed)).collect();
        (v.iter().sum(), v)
    }

    pub fn stopping(&self) -> bool {
        self.stopping.load(SeqCst)
    }

    /// Calls f when the role is told to stop (at once if it is already).
    pub fn on_stop(&self, f: Box<dyn Fn() + Send>) {
        let mut hooks = self.stop_hooks.lock().unwrap();
        if self.stopping() {
            f();
        }
        hooks.push(f);
    }

    pub fn stop(&self) {
        let hooks = self.stop_hooks.lock().unwrap();
        if !self.stopping.swap(true, SeqCst) {
            hooks.iter().for_each(|f| f());
        }
    }

    /// The run's first failure: its exit code and why, said on stderr once;
    /// the role stops. Later failures are its consequences.
    pub fn fail(&self, code: i32, msg: String) {
        let mut f = self.failure.lock().unwrap();
        if f.is_none() {
            warn(&msg);
            *f = Some((code, msg));
            self.failure_code.store(code, SeqCst);
        }
        drop(f);
        self.stop();
    }

    /// The run's failure, said on stderr now but taking effect when the
    /// role is done: the peer first sees what caused it (qprof-wl's
    /// wl_role_fail_later; an rr server's answer to a bad request).
    pub fn fail_later(&self, code: i32, msg: String) {
        let mut f = self.failure.lock().unwrap();
        if f.is_none() {
            warn(&msg);
            *f = Some((code, msg));
            self.failure_code.store(code, SeqCst);
        }
    }

    pub fn failed(&self) -> i32 {
        self.failure_code.load(SeqCst)
    }

    /// The receiver's first bad byte: its stream offset and its stream's
    /// (or download's) number, under key.
    pub fn verify_failed(&self, off: u64, idx: u64, key: &'static str) {
        let mut v = self.verify_fail.lock().unwrap();
        if v.is_none() {
            *v = Some((off, idx, key));
        }
        drop(v);
        self.fail(
            exit::VERIFY,
            format!("received data failed the content check at {key} {idx}, offset {off}"),
        );
    }

    /// The "ready" event: the server listens.
    pub fn ready(&self) {
        emit(&json!({"event": "ready", "port": self.opts.port, "pid": std::process::id()}));
    }

    /// The first connection is up: the "connected" event, once.
    pub fn connected(&self, t_ns: u64) {
        if self.connected_sent.swap(true, SeqCst) {
            return;
        }
        self.t_connected_ns.store(t_ns, SeqCst);
        let mut m = Map::new();
        m.insert("event".into(), "connected".into());
        m.insert("t_ns".into(), t_ns.into());
        if let Some(s) = self.stack.get() {
            s.describe(&mut m);
        }
        emit(&Value::Object(m));
    }

    /// A client with --wait-start waits here for "start"; false: stopped first.
    pub fn wait_start(&self) -> bool {
        if self.opts.wait_start {
            let mut s = self.started.lock().unwrap();
            while !*s {
                s = self.start_cv.wait(s).unwrap();
            }
        }
        !self.stopping()
    }

    fn allow_start(&self) {
        *self.started.lock().unwrap() = true;
        self.start_cv.notify_all();
    }

    fn counters(&self, m: &mut Map<String, Value>) {
        if let Some(s) = self.stack.get() {
            s.counters(m);
        }
    }

    fn on_mark(&self, name: &str) {
        let t_ns = now_ns();
        let (bytes, per) = self.app_bytes_now();
        let mut m = Map::new();
        m.insert("event".into(), "mark".into());
        m.insert("name".into(), name.into());
        m.insert("t_ns".into(), t_ns.into());
        m.insert("app_bytes".into(), bytes.into());
        if self.opts.download() {
            m.insert("downloads".into(), self.downloads.load(SeqCst).into());
        }
        if self.per_stream() {
            m.insert("stream_bytes".into(), json!(per));
        }
        if let Some(rr) = &self.rr {
            rr.mark(self.server(), &mut m);
        }
        self.counters(&mut m);
        // How long after t_ns the counters were all read: the mark's
        // figures are of that interval (a stack's stats may wait on its lock).
        m.insert("read_ns".into(), now_ns().saturating_sub(t_ns).into());
        emit(&Value::Object(m));
    }

    /// Starts the control thread (--control): stdin, one command a line.
    pub fn control(&'static self) {
        if !self.opts.control {
            return;
        }
        std::thread::Builder::new()
            .name("wl-control".into())
            .spawn(move || {
                for line in std::io::stdin().lock().lines() {
                    let Ok(line) = line else { break };
                    match line.split_once(' ') {
                        Some(("mark", name)) if !name.is_empty() => self.on_mark(name.trim()),
                        _ if line == "start" => self.allow_start(),
                        _ if line == "stop" => self.stop(),
                        _ if line == "exit" => break,
                        _ => warn(&format!("ignoring control line: {line}")),
                    }
                }
                // "exit" or EOF: a download or rr role ends as on stop; a client
                // still waiting for "start" never starts (wl_role.c, on_exit_cmd).
                if self.opts.download() || self.opts.rr() || (self.opts.wait_start && !*self.started.lock().unwrap()) {
                    self.stop();
                }
                self.allow_start();
                *self.may_exit.lock().unwrap() = true;
                self.exit_cv.notify_all();
            })
            .expect("the control thread");
    }

    /// The "done" report, then (--control) the wait for "exit": the caller
    /// reads this process's CPU before it lets it go.
    pub fn done(&self, code: i32) -> i32 {
        // The run's first failure is its code, whatever came after it.
        let code = match self.failed() {
            exit::OK => code,
            first => first,
        };
        let (bytes, per) = self.app_bytes_now();
        let mut m = Map::new();
        m.insert("event".into(), "done".into());
        m.insert("role".into(), self.opts.role.clone().into());
        m.insert("exit_code".into(), code.into());
        m.insert("t_ns".into(), now_ns().into());
        m.insert("t_connected_ns".into(), self.t_connected_ns.load(SeqCst).into());
        m.insert("t_transfer_done_ns".into(), self.t_transfer_done_ns.load(SeqCst).into());
        m.insert("app_bytes".into(), bytes.into());
        if let Some(rr) = &self.rr {
            rr.done(self.server(), &mut m);
        } else if self.opts.download() {
            let n = self.downloads.load(SeqCst);
            m.insert("pattern".into(), "download".into());
            m.insert("downloads".into(), n.into());
            m.insert("streams_completed".into(), n.into());
        } else {
            m.insert("streams_completed".into(), self.streams_done.load(SeqCst).into());
            if self.per_stream() {
                m.insert("stream_bytes".into(), json!(per));
                // One connection carries every stream.
                m.insert("stream_conn".into(), json!(vec![0; per.len()]));
            }
        }
        if self.receiver() {
            let fail = *self.verify_fail.lock().unwrap();
            m.insert("verified".into(), (code == exit::OK && fail.is_none()).into());
            if let Some((off, idx, key)) = fail {
                m.insert("verify_fail_offset".into(), off.into());
                m.insert(key.into(), idx.into());
            }
        }
        if let Some((_, why)) = self.failure.lock().unwrap().as_ref() {
            m.insert("failure".into(), why.clone().into());
        }
        self.counters(&mut m);
        if let Some(s) = self.stack.get() {
            s.describe(&mut m);
        }
        emit(&Value::Object(m));
        if self.opts.control {
            let mut e = self.may_exit.lock().unwrap();
            while !*e {
                e = self.exit_cv.wait(e).unwrap();
            }
        }
        code
    }
}

/// One download's connection, as the "download" (client) or "served"
/// (server) event reports it (wl.h, struct wl_dl): times as durations from
/// t_connect; a figure the stack does not give is left out, never 0.
#[derive(Default)]
pub struct Download {
    pub i: u64,
    pub bytes: u64,
    pub t_connect: u64,
    pub t_handshake: u64,
    pub t_first_byte: u64,
    pub t_complete: u64,
    /// retransmits, lost_packets, packets_sent, packets_received (None: not given).
    pub counters: Option<(Option<u64>, u64, u64, u64)>,
}

impl Download {
    pub fn emit(&self, event: &str) {
        let mut m = Map::new();
        m.insert("event".into(), event.into());
        m.insert("i".into(), self.i.into());
        m.insert("bytes".into(), self.bytes.into());
        let since = |t: u64| (self.t_connect != 0 && t != 0).then(|| t - self.t_connect);
        if self.t_connect != 0 {
            m.insert("t_connect_ns".into(), self.t_connect.into());
        }
        for (k, t) in [
            ("handshake_ns", self.t_handshake),
            ("first_byte_ns", self.t_first_byte),
            ("complete_ns", self.t_complete),
        ] {
            if let Some(d) = since(t) {
                m.insert(k.into(), d.into());
            }
        }
        if let Some((retransmits, lost, sent, received)) = self.counters {
            if let Some(r) = retransmits {
                m.insert("retransmits".into(), r.into());
            }
            m.insert("lost_packets".into(), lost.into());
            m.insert("packets_sent".into(), sent.into());
            m.insert("packets_received".into(), received.into());
        }
        emit(&Value::Object(m));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_words_are_offsets_scrambled() {
        let p = Pattern::new(1 << 10);
        assert_eq!(p.period(), PAT_PERIOD_MIN);
        assert_eq!(&p.region()[8..16], &(8u64 ^ PAT_SEED).to_le_bytes());
        // The period wraps: offset P reads as offset 0.
        assert!(p.check(p.period() as u64, &p.region()[..100]));
    }

    #[test]
    fn check_catches_a_byte_and_a_shift() {
        let p = Pattern::new(64 << 10);
        let mut buf = p.region()[3..5003].to_vec();
        assert!(p.check(3, &buf));
        assert!(!p.check(4, &buf), "a shift by one byte");
        buf[4000] ^= 1;
        assert!(!p.check(3, &buf));
        assert_eq!(p.first_bad(3, &buf), 4003);
    }

    #[test]
    fn at_never_runs_past_the_region() {
        let p = Pattern::new(64 << 10);
        let period = p.period() as u64;
        assert_eq!(p.at(period - 10, 100).len(), 10);
        assert_eq!(p.at(3 * period, 100).as_ptr(), p.region().as_ptr());
    }
}
