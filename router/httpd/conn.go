package httpd

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"switchyard/router/h1"
	"switchyard/router/sockio"
)

// Connection states, for Shutdown: only an idle connection (new ones
// included) is closed under a client's feet.
const (
	stateIdle int32 = iota
	stateActive
	stateClosed
)

// maxDrain is how much of a request body its handler left unread is read
// and dropped to keep the connection; more than that closes it.
const maxDrain = 256 << 10

// aLongTimeAgo is a deadline in the past, which interrupts a blocked read.
var aLongTimeAgo = time.Unix(1, 0)

// conn is one client connection, served by one goroutine.
type conn struct {
	srv    *Server
	nc     net.Conn
	remote string
	cr     connReader
	br     *bufio.Reader
	state  atomic.Int32
	values h1.Interner // header values its requests repeat
	// readAt and writeAt are the socket's deadlines as last set (zero:
	// none), so that one already late enough is kept (sockio.Lenient). A
	// write deadline an answer's handler set may linger into the next
	// answer (see dropStaleWriteDeadline). readAt is the watch's too: the
	// connection's goroutine uses it only while no watch runs, and c.mu
	// orders the two.
	readAt, writeAt time.Time

	// The watch: after WatchAfter a second goroutine blocks in a one-byte
	// read, so a client that leaves cancels its request's context.
	mu       sync.Mutex
	handling bool // a handler runs
	// socketFree: what the socket brings now is not the request body's
	// (the body was empty, is read, or sits whole in the read buffer).
	socketFree atomic.Bool
	watching   bool
	ctx        *requestContext
	watchDone  chan struct{}
	timer      *time.Timer
}

func newConn(s *Server, nc net.Conn) *conn {
	nc = sockio.Wrap(nc)
	c := &conn{srv: s, nc: nc, remote: nc.RemoteAddr().String()}
	c.cr.nc = nc
	c.br = bufio.NewReaderSize(&c.cr, 4<<10)
	return c
}

// serve reads and answers requests until the client or the server ends
// the connection.
func (c *conn) serve() {
	defer c.close()
	for {
		if !c.awaitRequest() {
			return
		}
		keep := c.serveOne()
		if !keep || c.srv.closing.Load() {
			return
		}
	}
}

// awaitRequest waits, idle, for the first byte of a request.
func (c *conn) awaitRequest() bool {
	if c.br.Buffered() == 0 {
		switch d := c.srv.IdleTimeout; {
		case d > 0:
			now := time.Now()
			c.moveReadDeadline(now.Add(d), now)
		case c.srv.ReadTimeout > 0: // the last request's deadline must not cut the wait
			c.setReadDeadline(time.Time{})
		}
		if _, err := c.br.Peek(1); err != nil {
			return false
		}
	}
	return c.state.CompareAndSwap(stateIdle, stateActive)
}

// serveOne reads one request, runs its handler and finishes its answer.
// It reports whether the connection can carry another request.
func (c *conn) serveOne() bool {
	start := time.Now()
	// A head already whole in the read buffer is parsed without touching
	// the socket: its deadline would be a deadline change for nothing.
	if !c.headBuffered() {
		if d := c.srv.ReadHeaderTimeout; d > 0 {
			c.setReadDeadline(start.Add(d))
		} else if c.srv.IdleTimeout > 0 {
			c.setReadDeadline(time.Time{})
		}
	}
	// The response is made first: the request and its URL are parsed
	// into it, one allocation for the three.
	w := &response{c: c}
	hd, herr := c.readRequest(&w.request, &w.url)
	if herr != nil {
		c.refuse(herr)
		return false
	}
	switch d := c.srv.ReadTimeout; {
	case d > 0:
		c.setReadDeadline(start.Add(d))
	case (c.srv.ReadHeaderTimeout > 0 || c.srv.IdleTimeout > 0) && !c.bodyBuffered(hd):
		// The head's or the wait's deadline must not cut the body. One
		// already whole in the buffer is read without the socket, and
		// the watch clears the deadline before it reads: kept then, it
		// cuts nothing, and the next wait may keep it again.
		c.setReadDeadline(time.Time{})
	}
	w.start(hd)
	c.run(w, w.req)
	w.ctx.cancel()
	keep := w.finish()
	w.release()
	if !keep || !w.body.drain(maxDrain) {
		return false
	}
	c.state.Store(stateIdle)
	return true
}

// bodyBuffered reports whether hd's body (none included) is whole in the
// read buffer.
func (c *conn) bodyBuffered(hd head) bool {
	return hd.length == 0 || !hd.chunked && !hd.expectContinue && int64(c.br.Buffered()) >= hd.length
}

// setReadDeadline sets the socket's read deadline to exactly t.
func (c *conn) setReadDeadline(t time.Time) {
	if !t.Equal(c.readAt) {
		_ = c.nc.SetReadDeadline(t)
		c.readAt = t
	}
}

// moveReadDeadline sets a read deadline no earlier than want, keeping the
// one set when it is late enough (sockio.Lenient).
func (c *conn) moveReadDeadline(want, now time.Time) {
	if at, keep := sockio.Lenient(c.readAt, want, now); !keep {
		_ = c.nc.SetReadDeadline(at)
		c.readAt = at
	}
}

// moveWriteDeadline is moveReadDeadline's twin for writes; a zero want
// clears the deadline.
func (c *conn) moveWriteDeadline(want time.Time) error {
	var now time.Time
	if !want.IsZero() {
		now = time.Now()
	}
	at, keep := sockio.Lenient(c.writeAt, want, now)
	if keep {
		return nil
	}
	c.writeAt = at
	return c.nc.SetWriteDeadline(at)
}

// headBuffered reports whether the read buffer holds a whole request head
// (an empty line ends it).
func (c *conn) headBuffered() bool {
	buf, _ := c.br.Peek(c.br.Buffered())
	return bytes.Contains(buf, crlfcrlf)
}

var crlfcrlf = []byte("\r\n\r\n")

// run calls the handler, with the watch armed around it.
func (c *conn) run(w *response, req *http.Request) {
	c.mu.Lock()
	c.handling, c.ctx = true, &w.ctx
	if c.timer == nil {
		c.timer = time.AfterFunc(c.srv.watchAfter(), c.startWatch)
	} else {
		c.timer.Reset(c.srv.watchAfter())
	}
	c.mu.Unlock()
	defer c.endWatch()
	defer func() {
		if p := recover(); p != nil {
			w.broken = true
			if p != http.ErrAbortHandler {
				buf := make([]byte, 16<<10)
				buf = buf[:runtime.Stack(buf, false)]
				c.srv.log("handler panicked", "remote", c.remote, "path", req.URL.Path, "panic", p, "stack", string(buf))
			}
		}
	}()
	c.srv.Handler.ServeHTTP(w, req)
}

// startWatch runs on the timer's goroutine once a request has taken
// WatchAfter: it starts the one-byte read, unless the handler is done or
// the socket still brings the body (then it looks again later). A byte it
// reads comes after whatever is buffered, so pipelined requests keep
// their order.
func (c *conn) startWatch() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.handling || c.watching {
		return
	}
	if !c.socketFree.Load() {
		c.timer.Reset(c.srv.watchAfter())
		return
	}
	c.setReadDeadline(time.Time{})
	c.watching = true
	c.watchDone = make(chan struct{})
	go c.watch(c.ctx, c.watchDone)
}

// watch blocks in a one-byte read. A byte is the start of the next
// request (kept for it); an error other than the deadline that endWatch
// sets means the client is gone.
func (c *conn) watch(ctx *requestContext, done chan struct{}) {
	defer close(done)
	var one [1]byte
	n, err := c.nc.Read(one[:])
	if n == 1 {
		c.cr.stash(one[0])
	}
	if err != nil && !isTimeout(err) {
		ctx.cancel()
	}
}

// endWatch disarms the timer and stops a running watch.
func (c *conn) endWatch() {
	c.mu.Lock()
	c.handling = false
	c.timer.Stop()
	watching, done := c.watching, c.watchDone
	c.watching, c.ctx = false, nil
	c.mu.Unlock()
	if watching {
		_ = c.nc.SetReadDeadline(aLongTimeAgo)
		<-done
		_ = c.nc.SetReadDeadline(time.Time{})
		c.readAt = time.Time{}
	}
}

// refuse answers a request that never reached a handler and closes.
func (c *conn) refuse(herr *headError) {
	if herr.status == 0 { // the client went away or timed out mid-head
		return
	}
	c.srv.refused(herr.reason)
	w := bufio.NewWriterSize(c.nc, 512)
	msg := http.StatusText(herr.status) + ": " + herr.msg
	_, _ = w.WriteString(statusLine(herr.status))
	_, _ = w.WriteString("Content-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: ")
	_, _ = w.WriteString(itoa(int64(len(msg))))
	_, _ = w.WriteString("\r\n\r\n")
	_, _ = w.WriteString(msg)
	_ = c.nc.SetWriteDeadline(time.Now().Add(time.Second))
	if w.Flush() == nil {
		c.lingerClose()
	}
}

// lingerClose half-closes and reads what the client still sends for a
// moment, so its unread bytes do not turn the close into a reset that
// destroys the answer before the client reads it.
func (c *conn) lingerClose() {
	if tc, ok := c.nc.(interface{ CloseWrite() error }); ok {
		_ = tc.CloseWrite()
		_ = c.nc.SetReadDeadline(time.Now().Add(250 * time.Millisecond))
		_, _ = io.CopyN(io.Discard, c.nc, 256<<10)
	}
}

func (c *conn) close() {
	c.state.Store(stateClosed)
	_ = c.nc.Close()
	c.srv.remove(c)
}

// connReader reads the connection, first returning a byte the watch read.
// The watch has ended before the connection's goroutine reads again.
type connReader struct {
	nc      net.Conn
	stashed atomic.Bool
	b       byte
}

func (r *connReader) stash(b byte) {
	r.b = b
	r.stashed.Store(true)
}

func (r *connReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if r.stashed.Load() {
		r.stashed.Store(false)
		p[0] = r.b
		return 1, nil
	}
	return r.nc.Read(p)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
