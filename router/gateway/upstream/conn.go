package upstream

import (
	"bufio"
	"net"
	"syscall"
	"time"

	"switchyard/router/h1"
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
	values  h1.Interner // header values its answers repeat
	reused  bool        // taken from the pool rather than dialled for this request
	// deadline is the socket's read and write deadline (zero: none), so
	// an exchange sets it only when it must change.
	deadline time.Time
	// interruptFn is interrupt as a func value, made once per connection
	// rather than once per request.
	interruptFn func()

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
	c.interruptFn = c.interrupt
	c.br = bufio.NewReaderSize(nc, bufferSize)
	c.bw = bufio.NewWriterSize(writeCounter{c}, bufferSize)
	return c
}

// writeCounter counts what the buffered writer hands to the socket.
type writeCounter struct{ c *conn }

func (w writeCounter) Write(p []byte) (int, error) {
	n, err := w.c.nc.Write(p)
	w.c.written += int64(n)
	return n, err
}

func (c *conn) close() { _ = c.nc.Close() }

// aLongTimeAgo is a deadline already past: setting it wakes any blocked
// read or write on the connection with a timeout error.
var aLongTimeAgo = time.Unix(1, 0)

func (c *conn) interrupt() { _ = c.nc.SetDeadline(aLongTimeAgo) }

// setDeadline makes the socket's deadline at, or one up to a leeway later
// that is already set (sockio.Lenient): an exchange must be allowed until
// at, and moving the deadline for every request on a busy connection
// would cost a timer update each.
func (c *conn) setDeadline(at, now time.Time) {
	if at, keep := sockio.Lenient(c.deadline, at, now); !keep {
		_ = c.nc.SetDeadline(at)
		c.deadline = at
	}
}
