// SPDX-License-Identifier: GPL-2.0-only

// The quic-go transport (workloads/wl_transport.h): QUIC in quic-go on
// Go's crypto/tls, in a C shared library with its Go runtime inside, which
// qprof-wl loads for --stack quic-go (wl_plugin.c). quic-go is
// library-threaded, as msquic is: its connections run on goroutines, and
// so do the handlers here, one connection's never two at once (conn.mu,
// held around every handler call and never by a call the pattern makes,
// which may come from inside a handler). Each stream has a goroutine that
// reads (Read, then the data handler) and one that writes (the messages
// the pattern queued, each with Write, which returns once quic-go has
// packed its bytes), as quic-go's own perf tool and its HTTP/3 use it.
//
// Its UDP I/O is quic-go's own, as its users get it: sendmsg with a
// UDP_SEGMENT cmsg of up to quic-go's large packet buffer (GSO), recvmmsg
// of 8 datagrams a call (golang.org/x/net's ReadBatch), no GRO. The
// socket is a *net.UDPConn wrapped only to count the calls and datagrams
// each way (udpConn), which quic-go still takes for an OOB-capable,
// batch-reading one.
//
// TLS 1.3 (Go picks the suite: AES-128-GCM first where the CPU has AES),
// ALPN "qprof" (or "perf", --proto), the run's certificate (server), no chain check (client:
// the certificate is self-signed, as for every stack; the handshake's
// signature is checked). --resume: a client session cache and 0-RTT
// (the server allows it; the client dials early).
package main

/*
#cgo CFLAGS: -I${SRCDIR}/../.. -O2 -g -Wall -Werror
#cgo LDFLAGS: -Wl,--unresolved-symbols=ignore-all
#include "wl_quic_go.h"
*/
import "C"

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"runtime/cgo"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/quic-go/quic-go"
)

const (
	serverName = "qprof"
	// Flow control far above any bandwidth-delay product between two
	// namespaces or a --link (quic-go's own maxima: 15 MiB a connection,
	// 6 MiB a stream, are below what one fast stream needs here).
	streamWindow = 16 << 20
	connWindow   = 64 << 20
	idleTimeout  = 10 * time.Second
	// Streams of each kind the peer may open at once (wl.h's WL_MAX_STREAMS and more).
	maxStreams = 1024
	// The C buffer a stream reads into (quic-go hands over what a Read asks).
	readSize = 64 << 10
)

// The run's state: one set of options a process.
var st struct {
	o        *C.struct_wl_opts
	server   bool
	addr     *net.UDPAddr
	ioSize   int
	tlsConf  *tls.Config
	quicConf *quic.Config
	acc      *C.struct_wl_accept
	accFlags uint
	listener *quic.EarlyListener
	stopped  atomic.Bool
	stats    atomic.Pointer[conn] // the first WL_CONN_STATS connection: marks and "done" read it
	gso      atomic.Int32         // -1 unknown, 0 off, 1 on (quic-go's ConnectionState().GSO)
	udp      udpCounts
	closings sync.WaitGroup // clients' transports, until each is closed (after its closing period)
}

// How long the end waits for the clients' closing periods (as rs/quinn's LINGER_NS).
const closingsWait = time.Second

type conn struct {
	mu    sync.Mutex // held around every handler of this connection and its streams
	cs    *C.struct_wl_conn
	hd    *C.struct_wl_conn_handlers
	ctx   C.uintptr_t
	ready chan struct{} // closed once qc is set (client: the dial returned)
	qc    *quic.Conn
	// Its live streams; once none is left at its end, none may start
	// (a stream accepted or opened as the connection went).
	smu   sync.Mutex
	sdone *sync.Cond
	live  int
	over  bool
	// What conn_info and the closed handler report.
	tConnect  uint64
	end       C.struct_wl_end
	endReason *C.char
	closing   atomic.Bool
	lastWord  atomic.Bool // a FIN went that nothing will answer: a graceful close waits (quiet)
}

type msg struct {
	hdr  []byte // a copy
	body []byte // the pattern region's, or the caller's own until its sent handler
	fin  bool
	tag  C.uintptr_t
}

type stream struct {
	c   *conn
	cs  *C.struct_wl_stream
	hd  *C.struct_wl_stream_handlers
	ctx C.uintptr_t
	id  atomic.Int64
	// One of these, by kind: bidi, send-only, receive-only.
	bidi   *quic.Stream
	snd    *quic.SendStream
	rcv    *quic.ReceiveStream
	opened chan struct{}

	qmu     sync.Mutex
	queue   []msg
	queued  int  // bytes queued, not yet taken by quic-go
	starved bool // room() said 0: writable follows when it frees
	finQ    bool
	wake    chan struct{}

	// Set by the goroutine that ends a direction, read by the one that ends the stream.
	over      sync.WaitGroup
	sendFin   atomic.Bool
	peerFin   atomic.Bool
	aborted   atomic.Bool
	abortOnce sync.Once
}

func warn(format string, a ...any) {
	s := C.CString(fmt.Sprintf(format, a...))
	C.wlg_warn(s)
	C.free(unsafe.Pointer(s))
}

func now() uint64 { return uint64(C.wl_now_ns()) }

func connOf(cs *C.struct_wl_conn) *conn       { return cgo.Handle(cs.h).Value().(*conn) }
func streamOf(ss *C.struct_wl_stream) *stream { return cgo.Handle(ss.h).Value().(*stream) }

func newConn(hd *C.struct_wl_conn_handlers, ctx C.uintptr_t, flags uint) *conn {
	c := &conn{hd: hd, ctx: ctx, ready: make(chan struct{})}
	c.sdone = sync.NewCond(&c.smu)
	c.cs = (*C.struct_wl_conn)(C.calloc(1, C.size_t(unsafe.Sizeof(C.struct_wl_conn{}))))
	c.cs.h = C.uintptr_t(cgo.NewHandle(c))
	if flags&C.WL_CONN_STATS != 0 {
		st.stats.CompareAndSwap(nil, c)
	}
	return c
}

//export goInit
func goInit(o *C.struct_wl_opts, server C.bool) C.int {
	st.o = o
	st.server = bool(server)
	st.ioSize = int(o.io_size)
	st.gso.Store(-1)
	// qprof's --gso off, which its interposer gives a C library as a
	// refused UDP_SEGMENT probe: Go makes its system calls itself, past any
	// interposer, so quic-go is told in its own words.
	if os.Getenv("QPROF_GSO") == "off" {
		os.Setenv("QUIC_GO_DISABLE_GSO", "true")
	}
	// quic-go warns on stderr when the kernel caps its 7 MiB socket buffers; qprof's records say what they got.
	os.Setenv("QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING", "true")
	return C.WL_EXIT_OK
}

//export goSetup
func goSetup() C.int {
	ip := net.ParseIP(C.GoString(st.o.addr)).To4()
	if ip == nil {
		warn("bad IPv4 address %s", C.GoString(st.o.addr))
		return C.WL_EXIT_USAGE
	}
	st.addr = &net.UDPAddr{IP: ip, Port: int(st.o.port)}
	st.quicConf = &quic.Config{
		HandshakeIdleTimeout:           idleTimeout,
		MaxIdleTimeout:                 idleTimeout,
		InitialStreamReceiveWindow:     streamWindow,
		MaxStreamReceiveWindow:         streamWindow,
		InitialConnectionReceiveWindow: connWindow,
		MaxConnectionReceiveWindow:     connWindow,
		MaxIncomingStreams:             maxStreams,
		MaxIncomingUniStreams:          maxStreams,
		Allow0RTT:                      bool(st.o.resume),
	}
	if st.server {
		cert, err := tls.LoadX509KeyPair(C.GoString(st.o.cert), C.GoString(st.o.key))
		if err != nil {
			warn("cannot load the certificate: %v", err)
			return C.WL_EXIT_TLS_CONFIG
		}
		st.tlsConf = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{C.GoString(st.o.alpn)}, MinVersion: tls.VersionTLS13}
	} else {
		st.tlsConf = &tls.Config{
			ServerName: serverName, NextProtos: []string{C.GoString(st.o.alpn)}, MinVersion: tls.VersionTLS13,
			// Self-signed: the handshake's signature is checked, not a chain.
			InsecureSkipVerify: true,
		}
		if st.o.resume {
			st.tlsConf.ClientSessionCache = tls.NewLRUClientSessionCache(4)
		}
	}
	return C.WL_EXIT_OK
}

// A UDP socket bound where qprof-wl's other transports bind (wl_bind's
// words for a port in use), as a *net.UDPConn.
func udpSocket(addr *net.UDPAddr) (*net.UDPConn, C.int) {
	lc, err := net.ListenUDP("udp4", addr)
	if err != nil {
		if isAddrInUse(err) {
			warn("UDP port %s:%d is already in use", C.GoString(st.o.addr), int(st.o.port))
			return nil, C.WL_EXIT_ADDR_IN_USE
		}
		warn("bind %v failed: %v", addr, err)
		return nil, C.WL_EXIT_INTERNAL
	}
	return lc, C.WL_EXIT_OK
}

//export goListen
func goListen(a *C.struct_wl_accept) C.int {
	st.acc = a
	st.accFlags = uint(a.flags)
	uc, code := udpSocket(st.addr)
	if code != C.WL_EXIT_OK {
		return code
	}
	tr := &quic.Transport{Conn: newUDPConn(uc)}
	cfg := st.quicConf.Clone()
	cfg.MaxIncomingStreams = int64(max(int(a.peer_bidi_streams), maxStreams))
	cfg.MaxIncomingUniStreams = int64(max(int(a.peer_uni_streams), maxStreams))
	ln, err := tr.ListenEarly(st.tlsConf, cfg)
	if err != nil {
		warn("quic-go cannot listen: %v", err)
		return C.WL_EXIT_LIB_OPEN
	}
	st.listener = ln
	go acceptLoop(ln)
	return C.WL_EXIT_OK
}

func acceptLoop(ln *quic.EarlyListener) {
	for {
		qc, err := ln.Accept(context.Background())
		if err != nil {
			return
		}
		if st.stopped.Load() {
			qc.CloseWithError(quic.ApplicationErrorCode(C.WL_CLOSE_ERROR), "")
			continue
		}
		c := newConn(nil, 0, st.accFlags)
		c.qc = qc
		close(c.ready)
		var ctx C.uintptr_t
		c.mu.Lock()
		hd := C.wlg_accept(st.acc, c.cs, &ctx)
		c.mu.Unlock()
		if hd == nil {
			qc.CloseWithError(quic.ApplicationErrorCode(C.WL_CLOSE_ERROR), "")
			freeConn(c)
			continue
		}
		c.hd, c.ctx = hd, ctx
		go c.run()
	}
}

//export goListenStop
func goListenStop() {
	st.stopped.Store(true)
}

//export goConnect
func goConnect(hd *C.struct_wl_conn_handlers, ctx C.uintptr_t, flags C.uint, out **C.struct_wl_conn) C.int {
	c := newConn(hd, ctx, uint(flags))
	*out = c.cs
	// A socket of its own, as quic-go's DialAddr makes one.
	uc, code := udpSocket(&net.UDPAddr{IP: net.IPv4zero})
	if code != C.WL_EXIT_OK {
		return code
	}
	tr := &quic.Transport{Conn: newUDPConn(uc)}
	c.tConnect = now()
	st.closings.Add(1)
	go func() {
		defer st.closings.Done()
		// DialEarly: with a cached session the pattern's first request
		// goes as 0-RTT, as soon as quic-go has the keys.
		qc, err := tr.DialEarly(context.Background(), st.addr, st.tlsConf, st.quicConf)
		if err != nil {
			c.endWith(err)
			close(c.ready)
			c.finish()
			tr.Close()
			return
		}
		c.qc = qc
		close(c.ready)
		c.run()
		// quic-go answers the peer of a connection this side closed with
		// its CONNECTION_CLOSE for three PTOs (closed_conn.go), for as long
		// as its Transport runs: the Transport is kept until then.
		time.Sleep(c.closingPeriod())
		tr.Close()
	}()
	return C.WL_EXIT_OK
}

// The connection's life: its handshake, the peer's streams, its end.
func (c *conn) run() {
	qc := c.qc
	select {
	case <-qc.HandshakeComplete():
		c.end.connected = true
		c.end.t_connected = C.uint64_t(now())
		if st.gso.Load() < 0 {
			if qc.ConnectionState().GSO {
				st.gso.Store(1)
			} else {
				st.gso.Store(0)
			}
		}
		c.mu.Lock()
		C.wlg_connected(c.hd, c.cs, c.ctx)
		c.mu.Unlock()
		go c.acceptStreams(false)
		go c.acceptStreams(true)
	case <-qc.Context().Done():
	}
	<-qc.Context().Done()
	c.endWith(context.Cause(qc.Context()))
	c.finish()
}

// Three PTOs, as quic-go keeps a connection this side closed
// (connection.go's ReplaceWithClosed); 0: the peer closed it, or it was
// never made.
func (c *conn) closingPeriod() time.Duration {
	if c.qc == nil || !c.closing.Load() || bool(c.end.closed_by_peer) {
		return 0
	}
	s := c.qc.ConnectionStats()
	if s.SmoothedRTT == 0 {
		return 3 * 2 * 100 * time.Millisecond // quic-go's PTO before any sample
	}
	return 3 * (s.SmoothedRTT + max(4*s.MeanDeviation, time.Millisecond))
}

// A stream starts, unless the connection is over; false: it is.
func (c *conn) streamBegin() bool {
	c.smu.Lock()
	defer c.smu.Unlock()
	if c.over {
		return false
	}
	c.live++
	return true
}

func (c *conn) streamEnd() {
	c.smu.Lock()
	c.live--
	c.sdone.Broadcast()
	c.smu.Unlock()
}

// After every stream's closed handler, the connection's.
func (c *conn) finish() {
	c.smu.Lock()
	for c.live > 0 {
		c.sdone.Wait()
	}
	c.over = true
	c.smu.Unlock()
	c.mu.Lock()
	C.wlg_conn_closed(c.hd, c.cs, c.ctx, &c.end)
	c.mu.Unlock()
	if st.stats.Load() != c {
		freeConn(c)
	}
}

func freeConn(c *conn) {
	cgo.Handle(c.cs.h).Delete()
	C.free(unsafe.Pointer(c.cs))
}

// How the connection ended, in wl_end's terms.
func (c *conn) endWith(err error) {
	var app *quic.ApplicationError
	switch {
	case errors.As(err, &app) && app.Remote:
		c.end.closed_by_peer = true
		c.end.peer_error = C.uint64_t(app.ErrorCode)
		c.end.t_peer_closed = C.uint64_t(now())
	case errors.As(err, &app):
		// This end closed it (the pattern's close).
	case err != nil:
		c.end.closed_by_transport = true
		c.endReason = C.CString(err.Error())
		c.end.transport_status = c.endReason
		if !c.end.connected {
			c.end.exit_code = C.WL_EXIT_HANDSHAKE
		}
	}
}

// The peer's streams, each offered to the pattern's stream handler.
func (c *conn) acceptStreams(uni bool) {
	for {
		s := &stream{c: c, opened: make(chan struct{})}
		if uni {
			r, err := c.qc.AcceptUniStream(context.Background())
			if err != nil {
				return
			}
			s.rcv = r
			s.id.Store(int64(r.StreamID()))
		} else {
			b, err := c.qc.AcceptStream(context.Background())
			if err != nil {
				return
			}
			s.bidi = b
			s.id.Store(int64(b.StreamID()))
		}
		close(s.opened)
		if !c.streamBegin() {
			s.cancel()
			return
		}
		s.alloc()
		c.mu.Lock()
		var sctx C.uintptr_t
		hd := C.wlg_stream(c.hd, c.cs, c.ctx, s.cs, &sctx)
		c.mu.Unlock()
		if hd == nil {
			s.cancel()
			s.free()
			c.streamEnd()
			continue
		}
		s.hd, s.ctx = hd, sctx
		// Writable first, then the goroutines: once they run, the stream
		// may be over and freed before a call after them.
		if s.bidi != nil {
			c.handler(func() { C.wlg_writable(s.hd, s.cs, s.ctx) })
		}
		s.start(true, s.bidi != nil)
	}
}

func (c *conn) handler(f func()) {
	c.mu.Lock()
	f()
	c.mu.Unlock()
}

// A peer's stream refused: both ways reset.
func (s *stream) cancel() {
	code := quic.StreamErrorCode(C.WL_CLOSE_ERROR)
	if s.bidi != nil {
		s.bidi.CancelRead(code)
		s.bidi.CancelWrite(code)
	} else if s.rcv != nil {
		s.rcv.CancelRead(code)
	}
}

func (s *stream) alloc() {
	s.wake = make(chan struct{}, 1)
	s.cs = (*C.struct_wl_stream)(C.calloc(1, C.size_t(unsafe.Sizeof(C.struct_wl_stream{}))))
	s.cs.h = C.uintptr_t(cgo.NewHandle(s))
}

func (s *stream) free() {
	cgo.Handle(s.cs.h).Delete()
	C.free(unsafe.Pointer(s.cs))
}

// The stream's two directions, each on a goroutine (a direction it does
// not have is over at once: a send-only stream's receiving, a peer's
// send-only one's sending); the closed handler after both.
func (s *stream) start(reads, writes bool) {
	s.over.Add(2)
	if reads {
		go s.reader()
	} else {
		s.peerFin.Store(true)
		s.over.Done()
	}
	if writes {
		go s.writer()
	} else {
		s.sendFin.Store(true)
		s.over.Done()
	}
	go func() {
		s.over.Wait()
		graceful := !s.aborted.Load() && s.sendFin.Load() && s.peerFin.Load()
		s.c.handler(func() { C.wlg_stream_closed(s.hd, s.cs, s.ctx, C.bool(graceful)) })
		s.free()
		s.c.streamEnd()
	}()
}

func (s *stream) readStream() interface {
	Read([]byte) (int, error)
} {
	if s.bidi != nil {
		return s.bidi
	}
	return s.rcv
}

func (s *stream) reader() {
	defer s.over.Done()
	buf := (*[readSize]byte)(C.malloc(readSize))
	defer C.free(unsafe.Pointer(buf))
	r := s.readStream()
	for {
		n, err := r.Read(buf[:])
		if n > 0 {
			s.c.mu.Lock()
			C.wlg_data(s.hd, s.cs, s.ctx, (*C.uint8_t)(unsafe.Pointer(&buf[0])), C.size_t(n))
			s.c.mu.Unlock()
		}
		if err == nil {
			continue
		}
		if err == io.EOF {
			s.peerFin.Store(true)
			s.c.handler(func() { C.wlg_fin(s.hd, s.cs, s.ctx) })
		} else {
			s.peerAborted(err)
		}
		return
	}
}

// The peer reset the stream or stopped reading it: the aborted handler, once.
func (s *stream) peerAborted(err error) {
	var se *quic.StreamError
	if errors.As(err, &se) && se.Remote {
		s.abortOnce.Do(func() {
			s.aborted.Store(true)
			s.c.handler(func() { C.wlg_aborted(s.hd, s.cs, s.ctx) })
		})
	} else {
		s.aborted.Store(true)
	}
}

func (s *stream) sendStream() interface {
	Write([]byte) (int, error)
	Close() error
} {
	if s.bidi != nil {
		return s.bidi
	}
	return s.snd
}

func (s *stream) writer() {
	defer s.over.Done()
	<-s.opened
	if s.bidi == nil && s.snd == nil { // the open failed
		return
	}
	w := s.sendStream()
	for {
		s.qmu.Lock()
		for len(s.queue) == 0 {
			s.qmu.Unlock()
			select {
			case <-s.wake:
			case <-s.c.qc.Context().Done():
				s.cancelQueued()
				return
			}
			s.qmu.Lock()
		}
		m := s.queue[0]
		s.queue[0] = msg{}
		s.queue = s.queue[1:]
		s.qmu.Unlock()

		var err error
		if len(m.hdr) > 0 {
			_, err = w.Write(m.hdr)
		}
		if err == nil && len(m.body) > 0 {
			_, err = w.Write(m.body)
		}
		if err == nil && m.fin {
			err = w.Close()
			if err == nil {
				s.sendFin.Store(true)
				// A FIN nothing will answer: a send-only stream's, or
				// one after the peer's own (see (*conn).quiet).
				if s.snd != nil || s.peerFin.Load() {
					s.c.lastWord.Store(true)
				}
			}
		}
		s.qmu.Lock()
		s.queued -= len(m.hdr) + len(m.body)
		freed := s.starved && s.roomLocked() > 0
		if freed {
			s.starved = false
		}
		s.qmu.Unlock()
		if m.tag != 0 {
			s.c.handler(func() { C.wlg_sent(s.hd, s.cs, s.ctx, m.tag, C.bool(err != nil)) })
		}
		if err != nil {
			s.peerAborted(err)
			s.cancelQueued()
			return
		}
		if m.fin {
			return
		}
		if freed {
			s.c.handler(func() { C.wlg_writable(s.hd, s.cs, s.ctx) })
		}
	}
}

// Messages that will not go: their sent handlers say canceled.
func (s *stream) cancelQueued() {
	s.qmu.Lock()
	q := s.queue
	s.queue = nil
	s.qmu.Unlock()
	for _, m := range q {
		if m.tag != 0 {
			s.c.handler(func() { C.wlg_sent(s.hd, s.cs, s.ctx, m.tag, true) })
		}
	}
}

// quic-go says nothing when the peer has acknowledged a stream's bytes,
// and a connection closed at once drops what is unacknowledged. Where this
// end's last word was a FIN nothing will answer (a send-only stream's; one
// sent after the peer's own FIN), a graceful close waits until the
// connection has sent nothing for a probe timeout and a half (RFC 9002's
// PTO: smoothed RTT, four deviations, the peer's 25 ms ack delay): while
// anything it sent is unacknowledged, quic-go's PTO fires within that and
// it sends again. Elsewhere the peer's answer came after all this end
// sent, and the close goes at once (a download's, a request's).
func (c *conn) quiet() {
	qc := c.qc
	last := qc.ConnectionStats().PacketsSent
	since := time.Now()
	deadline := since.Add(idleTimeout)
	for t := since; t.Before(deadline); t = time.Now() {
		stats := qc.ConnectionStats()
		if stats.PacketsSent != last {
			last, since = stats.PacketsSent, t
		}
		pto := stats.SmoothedRTT + max(4*stats.MeanDeviation, time.Millisecond) + 25*time.Millisecond
		if t.Sub(since) > pto+pto/2 {
			return
		}
		select {
		case <-qc.Context().Done():
			return
		case <-time.After(time.Millisecond):
		}
	}
}

func (s *stream) roomLocked() int {
	ahead := max(4*st.ioSize, 256<<10)
	if s.finQ || s.queued >= ahead {
		return 0
	}
	return ahead - s.queued
}

//export goOpen
func goOpen(cs *C.struct_wl_conn, hd *C.struct_wl_stream_handlers, ctx C.uintptr_t, flags C.uint, out **C.struct_wl_stream) C.int {
	c := connOf(cs)
	s := &stream{c: c, hd: hd, ctx: ctx, opened: make(chan struct{})}
	s.id.Store(-1)
	uni := flags&C.WL_STREAM_UNI != 0
	if !c.streamBegin() {
		warn("quic-go transport: a stream opened on a connection that is over")
		return C.WL_EXIT_INTERNAL
	}
	s.alloc()
	*out = s.cs
	// Neither the open nor the writable handler inside the call: a
	// goroutine waits for the connection (0-RTT: the dial) and for
	// quic-go's stream limit, then the stream starts.
	go func() {
		<-c.ready
		var err error
		if c.qc != nil {
			if uni {
				s.snd, err = c.qc.OpenUniStreamSync(context.Background())
				if err == nil {
					s.id.Store(int64(s.snd.StreamID()))
				}
			} else {
				s.bidi, err = c.qc.OpenStreamSync(context.Background())
				if err == nil {
					s.id.Store(int64(s.bidi.StreamID()))
				}
			}
		}
		close(s.opened)
		if c.qc == nil || err != nil {
			s.aborted.Store(true)
		}
		// Writable first, then the goroutines (see acceptStreams).
		if err == nil && c.qc != nil {
			c.handler(func() { C.wlg_writable(s.hd, s.cs, s.ctx) })
		}
		s.start(!uni && s.bidi != nil, true)
	}()
	return C.WL_EXIT_OK
}

//export goSend
func goSend(ss *C.struct_wl_stream, hdr *C.uint8_t, hdrLen C.uint32_t, body *C.uint8_t, bodyLen C.uint32_t, flags C.uint, tag C.uintptr_t) C.int {
	s := streamOf(ss)
	m := msg{fin: flags&C.WL_SEND_FIN != 0, tag: tag}
	if hdrLen > 0 {
		m.hdr = C.GoBytes(unsafe.Pointer(hdr), C.int(hdrLen))
	}
	if bodyLen > 0 {
		m.body = unsafe.Slice((*byte)(unsafe.Pointer(body)), int(bodyLen))
	}
	s.qmu.Lock()
	if s.finQ {
		s.qmu.Unlock()
		warn("quic-go transport: a send after the stream's FIN")
		return C.WL_EXIT_INTERNAL
	}
	s.queue = append(s.queue, m)
	s.queued += len(m.hdr) + len(m.body)
	s.finQ = m.fin
	s.qmu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return C.WL_EXIT_OK
}

//export goRoom
func goRoom(ss *C.struct_wl_stream) C.size_t {
	s := streamOf(ss)
	s.qmu.Lock()
	defer s.qmu.Unlock()
	r := s.roomLocked()
	if r == 0 {
		s.starved = true
	}
	return C.size_t(r)
}

//export goAbort
func goAbort(ss *C.struct_wl_stream) {
	s := streamOf(ss)
	s.aborted.Store(true)
	code := quic.StreamErrorCode(C.WL_CLOSE_ERROR)
	go func() {
		<-s.opened
		if s.bidi != nil {
			s.bidi.CancelWrite(code)
			s.bidi.CancelRead(code)
		} else if s.snd != nil {
			s.snd.CancelWrite(code)
		} else if s.rcv != nil {
			s.rcv.CancelRead(code)
		}
	}()
}

//export goClose
func goClose(cs *C.struct_wl_conn, code C.uint64_t) {
	c := connOf(cs)
	if c.closing.Swap(true) {
		return
	}
	go func() {
		<-c.ready
		if c.qc != nil {
			if code == C.WL_CLOSE_OK && c.lastWord.Load() {
				c.quiet()
			}
			c.qc.CloseWithError(quic.ApplicationErrorCode(code), "")
		}
	}()
}

//export goStreamID
func goStreamID(ss *C.struct_wl_stream) C.int64_t {
	return C.int64_t(streamOf(ss).id.Load())
}

//export goConnInfo
func goConnInfo(cs *C.struct_wl_conn, r *C.struct_wl_dl) {
	c := connOf(cs)
	if c.tConnect != 0 {
		r.t_connect = C.uint64_t(c.tConnect)
	}
	if c.qc == nil {
		return
	}
	if c.end.connected {
		r.t_handshake = c.end.t_connected
		cst := c.qc.ConnectionState()
		r.has_resumed = true
		r.resumed = C.bool(cst.TLS.DidResume)
		r.has_early = true
		r.early_data = C.bool(cst.Used0RTT)
	}
	s := c.qc.ConnectionStats()
	r.has_counters = true
	r.has_lost = true
	r.no_retransmits = true // quic-go counts lost packets, not retransmissions
	r.lost_packets = C.uint64_t(s.PacketsLost)
	r.packets_sent = C.uint64_t(s.PacketsSent)
	r.packets_received = C.uint64_t(s.PacketsReceived)
}

func jsonRaw(j *C.struct_wl_json, key, raw string) {
	k, v := C.CString(key), C.CString(raw)
	C.wl_json_raw(j, k, v)
	C.free(unsafe.Pointer(k))
	C.free(unsafe.Pointer(v))
}

func quicGoVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, d := range info.Deps {
			if d.Path == "github.com/quic-go/quic-go" {
				return d.Version
			}
		}
	}
	return "unknown"
}

//export goJsonConnected
func goJsonConnected(j *C.struct_wl_json) {
	cipher := "TLS_AES_128_GCM_SHA256"
	if c := st.stats.Load(); c != nil && c.qc != nil {
		cipher = tls.CipherSuiteName(c.qc.ConnectionState().TLS.CipherSuite)
	}
	jsonRaw(j, "quic_library", fmt.Sprintf(
		`{"name":"quic-go","version":%q,"crypto":%q,"cipher":%q}`,
		quicGoVersion(), "crypto/tls of "+runtime.Version(), cipher))
	jsonRaw(j, "quic_settings", fmt.Sprintf(
		`{"stream_receive_window":%d,"connection_receive_window":%d,"max_incoming_streams":%d,"idle_timeout_ms":%d,"recv_batch":%d}`,
		streamWindow, connWindow, maxStreams, idleTimeout.Milliseconds(), recvBatch))
	if g := st.gso.Load(); g >= 0 {
		k := C.CString("send_segmentation")
		C.wl_json_bool(j, k, g == 1)
		C.free(unsafe.Pointer(k))
	}
	// quic-go does not ask for UDP_GRO: each datagram is its own receive.
	k := C.CString("recv_coalescing")
	C.wl_json_bool(j, k, false)
	C.free(unsafe.Pointer(k))
}

//export goJsonMark
func goJsonMark(j *C.struct_wl_json) {
	u := st.udp.snapshot()
	out := fmt.Sprintf(`{"udp_tx_datagrams":%d,"udp_tx_bytes":%d,"udp_tx_ios":%d,"udp_rx_datagrams":%d,"udp_rx_bytes":%d,"udp_rx_ios":%d`,
		u[0], u[1], u[2], u[3], u[4], u[5])
	if c := st.stats.Load(); c != nil && c.qc != nil {
		s := c.qc.ConnectionStats()
		// quic-go's own names: PacketsLost and BytesLost fall when a packet
		// declared lost arrives after all, so they are not the lost_packets
		// of the other libraries (a count that only grows).
		out += fmt.Sprintf(`,"sent_packets":%d,"packets_lost":%d,"bytes_lost":%d,"cwnd":%d,"rtt_us":%d`,
			s.PacketsSent, s.PacketsLost, s.BytesLost, s.CongestionWindow, s.SmoothedRTT.Microseconds())
	}
	jsonRaw(j, "quic_stats", out+"}")
}

//export goFini
func goFini() {
	if st.listener != nil {
		st.listener.Close()
	}
	done := make(chan struct{})
	go func() {
		st.closings.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(closingsWait):
	}
}

func main() {}
