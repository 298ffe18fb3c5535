// SPDX-License-Identifier: GPL-2.0-only

package main

import (
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// quic-go's receive batch on Linux (sys_conn_helper_linux.go's batchSize):
// the datagrams one recvmmsg may return.
const recvBatch = 8

// The datagrams and calls of every socket of this process, each way, as
// the process's own count for qprof's crosscheck against the probes
// (udp_tx_datagrams ... udp_rx_ios, wl_udpio.c's names). A mark reads
// them whole under the lock, as wl_udpio.c's sequence count does.
type udpCounts struct {
	mu sync.Mutex
	v  [6]uint64 // tx datagrams, tx bytes, tx calls, rx datagrams, rx bytes, rx calls
}

func (u *udpCounts) add(i int, datagrams, bytes uint64) {
	u.mu.Lock()
	u.v[i] += datagrams
	u.v[i+1] += bytes
	u.v[i+2]++
	u.mu.Unlock()
}

func (u *udpCounts) snapshot() [6]uint64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.v
}

// udpConn is quic-go's *net.UDPConn, counted: quic-go sends with
// WriteMsgUDP (one sendmsg, a UDP_SEGMENT cmsg when it batches) and
// receives with ReadBatch (one recvmmsg), which this passes on as they are.
type udpConn struct {
	*net.UDPConn
	batch *ipv4.PacketConn
}

func newUDPConn(c *net.UDPConn) *udpConn {
	return &udpConn{UDPConn: c, batch: ipv4.NewPacketConn(c)}
}

func (c *udpConn) WriteMsgUDP(b, oob []byte, addr *net.UDPAddr) (int, int, error) {
	n, oobn, err := c.UDPConn.WriteMsgUDP(b, oob, addr)
	if err == nil {
		st.udp.add(0, segments(len(b), oob), uint64(len(b)))
	}
	return n, oobn, err
}

func (c *udpConn) ReadBatch(ms []ipv4.Message, flags int) (int, error) {
	n, err := c.batch.ReadBatch(ms, flags)
	if n > 0 {
		var bytes uint64
		for i := range n {
			bytes += uint64(ms[i].N)
		}
		st.udp.add(3, uint64(n), bytes)
	}
	return n, err
}

// The datagrams a send of n bytes with these control messages makes: n
// cut at the UDP_SEGMENT size, else one. Read in place (a cmsghdr, then
// its data, each aligned as CMSG_ALIGN says), allocating nothing.
func segments(n int, oob []byte) uint64 {
	const hdr = unix.SizeofCmsghdr
	for len(oob) >= hdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		l := int(h.Len)
		if l < hdr || l > len(oob) {
			break
		}
		if h.Level == unix.IPPROTO_UDP && h.Type == unix.UDP_SEGMENT && l >= hdr+2 {
			if seg := int(binary.NativeEndian.Uint16(oob[hdr:])); seg > 0 {
				return uint64((n + seg - 1) / seg)
			}
		}
		next := unix.CmsgSpace(l - hdr)
		if next > len(oob) {
			break
		}
		oob = oob[next:]
	}
	return 1
}

func isAddrInUse(err error) bool {
	return errors.Is(err, syscall.EADDRINUSE)
}
