package upstream

import (
	"bufio"
	"net"
	"syscall"
	"time"

	"switchyard/router/sockio"
)

// bufferSize is each connection's read and write buffer, as the gateway's
// net/http transport had.
const bufferSize = 32 << 10

// conn is one keep-alive TCP connection with its buffers. It is used by
// one request at a time: the pool hands it out and takes it back.
type conn struct {
	nc  net.Conn
	br  *bufio.Reader
	bw  *bufio.Writer
	key string // the pool's host key
	// written counts the bytes that reached the socket for the current
	// request, so a failed reuse can tell whether anything went out.
	written int64
	idleAt  time.Time
	reused  bool // taken from the pool rather than dialled for this request
	// deadline is the socket's read and write deadline (zero: none), so
	// an exchange sets it only when it changes.
	deadline time.Time
	// interruptFn is interrupt as a func value, made once per connection
	// rather than once per request.
	interruptFn func()

	// awaiter is nc when it can wait for an answer after a write;
	// awaitAnswer is set while send flushes a request's last bytes.
	awaiter     writeAwaiter
	awaitAnswer bool

	// The idle-socket check's state (alive_linux.go), set on first use.
	raw        syscall.RawConn
	peekFn     func(fd uintptr) bool
	peekBuf    [1]byte
	peekClosed bool
}

// peekAfterIdle is how long a pooled connection idles before its reuse
// checks that the server has not closed it. A server that closes a
// keep-alive connection unannounced within this of its last answer loses
// the next request sent on it, as it would to any client racing the
// close; servers close idle connections after timeouts of seconds.
const peekAfterIdle = 50 * time.Millisecond

// idledFor is how long c has been in the pool.
func (c *conn) idledFor(now time.Time) time.Duration { return now.Sub(c.idleAt) }

func newConn(nc net.Conn, key string) *conn {
	nc = sockio.Wrap(nc)
	c := &conn{nc: nc, key: key}
	c.awaiter, _ = nc.(writeAwaiter)
	c.interruptFn = c.interrupt
	c.br = bufio.NewReaderSize(nc, bufferSize)
	c.bw = bufio.NewWriterSize(writeCounter{c}, bufferSize)
	return c
}

// writeAwaiter is a socket that can write a request and wait for its
// answer without first reading the empty socket (sockio.Conn.WriteAwait).
type writeAwaiter interface {
	WriteAwait(p []byte) (int, error)
}

// send flushes the rest of a request written to c.bw and, when the socket
// can, waits there for the answer to arrive: the read that follows then
// finds it instead of trying the socket once before waiting. Only a
// request that leaves in this one write waits so: once part of one is out
// the server may already have answered (an early 401 or 413 to a long
// body), and an answer that arrived before the wait began would not end
// it.
func (c *conn) send() error {
	c.awaitAnswer = c.awaiter != nil && c.written == 0
	err := c.bw.Flush()
	c.awaitAnswer = false
	return err
}

// writeCounter counts what the buffered writer hands to the socket; the
// last write of a request (see send) also waits for the answer.
type writeCounter struct{ c *conn }

func (w writeCounter) Write(p []byte) (int, error) {
	var n int
	var err error
	if w.c.awaitAnswer {
		n, err = w.c.awaiter.WriteAwait(p)
	} else {
		n, err = w.c.nc.Write(p)
	}
	w.c.written += int64(n)
	return n, err
}

func (c *conn) close() { _ = c.nc.Close() }

// aLongTimeAgo is a deadline already past: setting it wakes any blocked
// read or write on the connection with a timeout error.
var aLongTimeAgo = time.Unix(1, 0)

func (c *conn) interrupt() { _ = c.nc.SetDeadline(aLongTimeAgo) }

// setDeadline makes at the socket's deadline.
func (c *conn) setDeadline(at time.Time) {
	if !at.Equal(c.deadline) {
		_ = c.nc.SetDeadline(at)
		c.deadline = at
	}
}
