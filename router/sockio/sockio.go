//go:build linux

// Package sockio reads and writes TCP sockets without the runtime's
// blocking-system-call bookkeeping, and tells when a socket's deadline
// must move (Lenient).
//
// A read or write on a nonblocking socket never blocks: it copies what it can
// and returns EAGAIN otherwise, and the runtime's poller does the waiting. Go
// still treats each such call as one that may block, and on a busy machine
// its monitor thread hands the caller's processor to another thread whenever
// the call spans one of its 20 µs ticks (a loopback write that delivers the
// bytes to the peer often does). That costs a thread wake-up and keeps the
// monitor polling at its fastest rate. Conn issues the same calls as raw
// system calls through the socket's syscall.RawConn, so waiting, deadlines
// and Close behave exactly as for the wrapped connection. (Under the race
// detector they go through the syscall package instead; see race.go.)
package sockio

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
)

// Conn is a TCP connection whose Read and Write issue raw system calls. Every
// other method is the wrapped connection's.
type Conn struct {
	*net.TCPConn
	raw syscall.RawConn

	rmu  sync.Mutex // one Read at a time owns the fields below
	rbuf []byte
	rn   int
	rerr syscall.Errno
	read func(uintptr) bool

	wmu   sync.Mutex // one Write at a time owns the fields below
	wbuf  []byte
	wn    int
	werr  syscall.Errno
	write func(uintptr) bool
}

// Wrap returns c as a *Conn when it is a TCP connection the runtime polls,
// and c itself otherwise.
func Wrap(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	sc := &Conn{TCPConn: tc, raw: raw}
	sc.read = sc.readOnce
	sc.write = sc.writeSome
	return sc
}

// Read reads up to len(p) bytes, waiting in the poller while none are ready.
func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.rbuf, c.rn, c.rerr = p, 0, 0
	err := c.raw.Read(c.read)
	n, errno := c.rn, c.rerr
	c.rbuf = nil
	switch {
	case err != nil:
		return 0, c.opError("read", unwrapRaw(err))
	case errno != 0:
		return 0, c.opError("read", os.NewSyscallError("read", errno))
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// readOnce makes one read; false asks the poller to wait for readability.
func (c *Conn) readOnce(fd uintptr) bool {
	for {
		n, e := sysRead(fd, c.rbuf)
		switch e {
		case 0:
			c.rn = n
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		c.rerr = e
		return true
	}
}

// Write writes all of p, waiting in the poller while the socket's send
// buffer is full.
func (c *Conn) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wbuf, c.wn, c.werr = p, 0, 0
	err := c.raw.Write(c.write)
	n, errno := c.wn, c.werr
	c.wbuf = nil
	switch {
	case err != nil:
		return n, c.opError("write", unwrapRaw(err))
	case errno != 0:
		return n, c.opError("write", os.NewSyscallError("write", errno))
	}
	return n, nil
}

// writeSome writes what the send buffer takes; false asks the poller to wait
// for writability before the rest.
func (c *Conn) writeSome(fd uintptr) bool {
	for c.wn < len(c.wbuf) {
		rest := c.wbuf[c.wn:]
		n, e := sysWrite(fd, rest)
		switch e {
		case 0:
			c.wn += n
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			c.werr = e
			return true
		}
	}
	return true
}

func (c *Conn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

// unwrapRaw strips the "raw-read"/"raw-write" OpError the RawConn adds, so
// callers see the same errors (net.ErrClosed, os.ErrDeadlineExceeded) a plain
// connection returns.
func unwrapRaw(err error) error {
	if oe, ok := err.(*net.OpError); ok {
		return oe.Err
	}
	return err
}
