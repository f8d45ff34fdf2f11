//go:build linux

package upstream

import (
	"net"
	"syscall"
)

// peerClosed reports whether an idle connection's server has closed it
// (or sent bytes nobody asked for, which makes it unusable too): one
// non-blocking peek at the socket, so a pooled connection the server
// dropped while it idled is never handed a request that would then be
// lost with it.
func peerClosed(nc net.Conn) bool {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	closed := false
	var buf [1]byte
	err = rc.Read(func(fd uintptr) bool {
		n, _, rerr := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case rerr == syscall.EAGAIN || rerr == syscall.EINTR:
			closed = false // idle and open: nothing to read
		case rerr != nil, n == 0, n > 0:
			closed = true // an error, the server's end of stream, or stray bytes
		}
		return true // never wait for readiness
	})
	return closed || err != nil
}
