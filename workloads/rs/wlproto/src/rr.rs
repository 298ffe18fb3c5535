// SPDX-License-Identifier: GPL-2.0-only
//! --pattern rr, the part every Rust workload shares (qprof-wl's wl_rr.c;
//! wl.h says the pattern): the message and its check, the client's open-loop
//! schedule, the account of each answer (packed "rr" records), and the
//! counters marks and reports give. The workloads move the bytes.
//!
//! Request k falls due at t0 + k * --period-us and goes out then, whatever
//! the replies do; late, it keeps its due time, so its latency counts the
//! wait. A message of N bytes is the sequence number (8 bytes, little
//! endian; a response repeats its request's), then byte q (8 <= q < N) is
//! the pattern byte at offset N + q. Closed loop (--rr-mode closed), an
//! answer sends the next request at once and a request is due when sent.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use serde_json::{Map, Value};

use crate::{emit_packed, Opts, Pattern};

/// wl.h: WL_RR_HDR, WL_RR_DRAIN_MIN_NS, WL_RR_DRAIN_PERIODS.
pub const HDR: usize = 8;
const DRAIN_MIN_NS: u64 = 2_000_000_000;
const DRAIN_PERIODS: u64 = 10;

/// One role's rr figures (wl.h, struct wl_rr).
pub struct Rr {
    pub request: u32,
    pub response: u32,
    /// Bytes of each message this role receives, and sends.
    pub rx_size: u32,
    pub tx_size: u32,
    pub closed: bool,
    /// 0: closed loop.
    pub period_ns: u64,
    /// Per-request streams (false: every request on one stream).
    pub per_request: bool,
    pub t0_ns: AtomicU64,
    pub due: AtomicU64,
    pub sent: AtomicU64,
    pub responses: AtomicU64,
    pub late: AtomicU64,
    pub served: AtomicU64,
    pub connections: AtomicU64,
    pub t_last_answer: AtomicU64,
}

impl Rr {
    pub fn new(o: &Opts) -> Rr {
        let request = if o.request != 0 { o.request } else { o.payload };
        let response = if o.response != 0 { o.response } else { o.payload };
        let closed = o.rr_mode == "closed";
        let (rx_size, tx_size) = if o.server() {
            (request, response)
        } else {
            (response, request)
        };
        Rr {
            request,
            response,
            rx_size,
            tx_size,
            closed,
            period_ns: if closed { 0 } else { o.period_us * 1000 },
            per_request: o.rr_streams != "one",
            t0_ns: AtomicU64::new(0),
            due: AtomicU64::new(0),
            sent: AtomicU64::new(0),
            responses: AtomicU64::new(0),
            late: AtomicU64::new(0),
            served: AtomicU64::new(0),
            connections: AtomicU64::new(0),
            t_last_answer: AtomicU64::new(0),
        }
    }

    pub fn due_ns(&self, seq: u64) -> u64 {
        self.t0_ns.load(Relaxed) + seq * self.period_ns
    }

    /// The wait for replies after the last request.
    pub fn drain_ns(&self) -> u64 {
        (DRAIN_PERIODS * self.period_ns).max(DRAIN_MIN_NS)
    }

    /// The message this role sends with sequence number seq: its header,
    /// then its body, straight out of the pattern region.
    pub fn message(&self, pattern: &Pattern, seq: u64) -> ([u8; HDR], &'static [u8]) {
        let n = self.tx_size as usize;
        (seq.to_le_bytes(), pattern.at((n + HDR) as u64, n - HDR))
    }

    /// The client's account of an answer: `req` the (seq, sent_ns) of the
    /// oldest request waiting on its connection or stream (None: none was),
    /// `rx` the whole response, `t_ns` when its last byte came. Emits the
    /// "rr" record; Err(why) is a verification failure.
    pub fn answer(&self, req: Option<(u64, u64)>, rx: &RxMsg, t_ns: u64, conn: u64) -> Result<(), String> {
        let seq = rx.seq();
        let Some((want, sent_ns)) = req else {
            return Err(format!(
                "a response (sequence number {seq}) came with no request waiting for it"
            ));
        };
        if seq != want {
            return Err(format!(
                "the response to request {want} carries sequence number {seq}: answers are matched to the wrong requests"
            ));
        }
        if rx.bad {
            return Err(format!(
                "the response to request {want} failed the content check (are --request and --response the same on both roles?)"
            ));
        }
        let due = if self.closed { sent_ns } else { self.due_ns(want) };
        emit_packed(
            "rr",
            "seq,due_ns,sent_ns,answered_ns,conn",
            &[want, due, sent_ns, t_ns, conn],
        );
        if !self.closed && t_ns > due + self.period_ns {
            self.late.fetch_add(1, Relaxed);
        }
        self.t_last_answer.store(t_ns, Relaxed);
        self.responses.fetch_add(1, Relaxed);
        Ok(())
    }

    /// The server's check of a request it answers: why the run fails, if
    /// the request failed its check or came short (its stream ended first).
    pub fn request_failed(&self, rx: &RxMsg) -> Option<String> {
        let what = if rx.bad {
            "failed the content check"
        } else if !rx.whole(self) {
            "is shorter than --request"
        } else {
            return None;
        };
        Some(format!(
            "request {} {what} (is --request the same on both roles?); answered at once, for the client to see, and the stream ended",
            rx.seq()
        ))
    }

    /// A mark's rr part.
    pub fn mark(&self, server: bool, m: &mut Map<String, Value>) {
        if server {
            m.insert("requests".into(), self.served.load(Relaxed).into());
            return;
        }
        m.insert("requests".into(), self.sent.load(Relaxed).into());
        m.insert("responses".into(), self.responses.load(Relaxed).into());
    }

    /// The done report's rr part.
    pub fn done(&self, server: bool, m: &mut Map<String, Value>) {
        let (sent, responses) = (self.sent.load(Relaxed), self.responses.load(Relaxed));
        m.insert("pattern".into(), "rr".into());
        m.insert("request".into(), self.request.into());
        m.insert("response".into(), self.response.into());
        if self.request == self.response {
            m.insert("payload".into(), self.request.into());
        }
        if server {
            m.insert("requests_served".into(), self.served.load(Relaxed).into());
            m.insert("connections_accepted".into(), self.connections.load(Relaxed).into());
            m.insert("streams_completed".into(), self.served.load(Relaxed).into());
            return;
        }
        m.insert("rr_mode".into(), (if self.closed { "closed" } else { "open" }).into());
        if !self.closed {
            m.insert("period_us".into(), (self.period_ns / 1000).into());
        }
        m.insert("requests_due".into(), self.due.load(Relaxed).into());
        m.insert("requests_sent".into(), sent.into());
        m.insert("responses".into(), responses.into());
        m.insert("late".into(), self.late.load(Relaxed).into());
        m.insert("outstanding".into(), (sent - responses).into());
        m.insert("connections_opened".into(), self.connections.load(Relaxed).into());
        m.insert("streams_completed".into(), responses.into());
    }
}

/// One message as it arrives, checked piece by piece (wl.h, struct wl_rr_rx).
#[derive(Default, Clone)]
pub struct RxMsg {
    hdr: [u8; HDR],
    pub got: u32,
    pub bad: bool,
}

impl RxMsg {
    /// Takes what of `p` belongs to this message (at most what it lacks)
    /// and checks it: the bytes taken. A byte stream's next message starts
    /// after them.
    pub fn feed(&mut self, rr: &Rr, pattern: &Pattern, p: &[u8]) -> usize {
        let size = rr.rx_size as usize;
        let got = self.got as usize;
        let n = (size - got).min(p.len());
        let mut h = 0;
        if got < HDR {
            h = (HDR - got).min(n);
            self.hdr[got..got + h].copy_from_slice(&p[..h]);
        }
        if n > h && !pattern.check((size + got + h) as u64, &p[h..n]) {
            self.bad = true;
        }
        self.got += n as u32;
        n
    }

    /// All of it came.
    pub fn whole(&self, rr: &Rr) -> bool {
        self.got == rr.rx_size
    }

    /// Whole, or failed already: either way it is answered now.
    pub fn ready(&self, rr: &Rr) -> bool {
        self.whole(rr) || self.bad
    }

    pub fn seq(&self) -> u64 {
        u64::from_le_bytes(self.hdr)
    }
}

/// The client's open-loop schedule (wl.h, struct wl_rr_sched), run by the
/// workload's own loop: it asks what is due and when to wake.
#[derive(Default)]
pub struct Schedule {
    next: u64,
    t_end: u64,
    sending: bool,
    drain_end: u64,
}

impl Schedule {
    /// The first connection is up: request 0 falls due now; the schedule
    /// ends duration_ms from now (0: on stop).
    pub fn start(&mut self, rr: &Rr, duration_ms: u64) {
        let now = crate::now_ns();
        rr.t0_ns.store(now, Relaxed);
        if duration_ms != 0 {
            self.t_end = now + duration_ms * 1_000_000;
        }
        self.sending = true;
    }

    pub fn started(&self) -> bool {
        self.sending || self.drain_end != 0
    }

    pub fn draining(&self) -> bool {
        self.drain_end != 0
    }

    /// The requests due by now (open loop), to send at once, each keeping
    /// its due time; the schedule drains once the last before its end is
    /// out. Closed loop: none, and it drains at its end.
    pub fn due(&mut self, rr: &Rr, now: u64) -> Range<u64> {
        if !self.sending {
            return 0..0;
        }
        let first = self.next;
        if !rr.closed {
            while rr.due_ns(self.next) <= now && !(self.t_end != 0 && rr.due_ns(self.next) >= self.t_end) {
                self.next += 1;
            }
            rr.due.fetch_add(self.next - first, Relaxed);
        }
        let ended = if rr.closed {
            now >= self.t_end
        } else {
            rr.due_ns(self.next) >= self.t_end
        };
        if self.t_end != 0 && ended {
            self.drain(rr, self.t_end);
        }
        first..self.next
    }

    /// "stop": what fell due before it goes out first, then the drain.
    pub fn stop(&mut self, rr: &Rr, now: u64) -> Range<u64> {
        if self.draining() {
            return 0..0;
        }
        let due = self.due(rr, now);
        if !self.draining() {
            self.drain(rr, now);
        }
        due
    }

    fn drain(&mut self, rr: &Rr, from: u64) {
        self.sending = false;
        self.drain_end = from + rr.drain_ns();
    }

    /// The drain is over: stop waiting for answers.
    pub fn over(&self, now: u64) -> bool {
        self.draining() && now >= self.drain_end
    }

    /// When the loop must wake next: the next request's due time, the
    /// schedule's end, or the drain's.
    pub fn wake_at(&self, rr: &Rr) -> Option<u64> {
        if self.draining() {
            return Some(self.drain_end);
        }
        if !self.sending {
            return None;
        }
        let end = (self.t_end != 0).then_some(self.t_end);
        if rr.closed {
            return end;
        }
        Some(end.map_or(rr.due_ns(self.next), |e| e.min(rr.due_ns(self.next))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn rr(args: &[&str]) -> Rr {
        let mut v = vec!["wl", "--stack", "x", "--pattern", "rr"];
        v.extend_from_slice(args);
        Rr::new(&Opts::parse_from(v))
    }

    #[test]
    fn a_message_checks_on_its_own_and_a_shift_fails() {
        let p = Pattern::new(64 << 10);
        let client = rr(&["--role", "client", "--payload", "100", "--period-us", "1000"]);
        let server = rr(&["--role", "server", "--payload", "100"]);
        let (hdr, body) = client.message(&p, 7);
        let mut m = RxMsg::default();
        let wire: Vec<u8> = hdr.iter().chain(body).copied().chain([1, 2, 3]).collect();
        // A byte stream: the message takes its own bytes and leaves the next one's.
        assert_eq!(m.feed(&server, &p, &wire[..5]), 5);
        assert_eq!(m.feed(&server, &p, &wire[5..]), 95);
        assert!(m.whole(&server) && !m.bad && m.seq() == 7);
        let mut bad = RxMsg::default();
        bad.feed(&server, &p, &wire[1..]);
        assert!(bad.bad, "a message one byte off fails its check");
    }

    #[test]
    fn the_schedule_sends_what_is_due_and_drains_at_its_end() {
        let r = rr(&["--role", "client", "--payload", "64", "--period-us", "1000"]);
        let mut s = Schedule::default();
        s.start(&r, 10);
        let t0 = r.t0_ns.load(Relaxed);
        assert_eq!(s.due(&r, t0), 0..1);
        assert_eq!(s.wake_at(&r), Some(t0 + 1_000_000));
        assert_eq!(s.due(&r, t0 + 3_500_000), 1..4, "late requests go at once");
        assert_eq!(s.due(&r, t0 + 20_000_000), 4..10, "none due at or after the end");
        assert!(s.draining() && !s.over(t0 + 20_000_000) && s.over(t0 + 10_000_000 + r.drain_ns()));
        assert_eq!(r.due.load(Relaxed), 10);
    }

    #[test]
    fn stop_sends_what_fell_due_before_it() {
        let r = rr(&["--role", "client", "--payload", "64", "--period-us", "1000"]);
        let mut s = Schedule::default();
        s.start(&r, 0);
        let t0 = r.t0_ns.load(Relaxed);
        assert_eq!(s.stop(&r, t0 + 2_500_000), 0..3);
        assert!(s.draining());
        assert_eq!(s.stop(&r, t0 + 9_000_000), 0..0);
    }
}
