//go:build linux

package upstream

import (
	"syscall"
	"time"
	"unsafe"
)

// peerClosed reports whether an idle connection's server has closed it
// (or sent bytes nobody asked for, which makes it unusable too): one
// non-blocking peek at the socket, so a pooled connection the server
// dropped while it idled is never handed a request that would then be
// lost with it. The peek function is bound once per connection, so the
// check allocates nothing.
func (c *conn) peerClosed() bool {
	if c.raw == nil {
		sc, ok := c.nc.(syscall.Conn)
		if !ok {
			return false
		}
		rc, err := sc.SyscallConn()
		if err != nil {
			return true
		}
		c.raw, c.peekFn = rc, c.peek
	}
	c.setDeadline(time.Time{}, time.Time{}) // the last exchange's may have passed while c idled
	if err := c.raw.Read(c.peekFn); err != nil {
		return true
	}
	return c.peekClosed
}

// peek is the RawConn.Read callback of peerClosed: recv(2) of one byte
// with MSG_PEEK|MSG_DONTWAIT, without a source address (a connected
// socket has none to give).
func (c *conn) peek(fd uintptr) bool {
	_, _, errno := syscall.Syscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&c.peekBuf[0])), 1,
		syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	// EAGAIN: open and nothing to read. Anything else is an error, the
	// server's end of stream (0) or stray bytes (1).
	c.peekClosed = !(errno == syscall.EAGAIN || errno == syscall.EINTR)
	return true // never wait for readiness
}
