package bus

import (
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"switchyard/router/bus/wire"
)

// stream is one commanded data stream.
type stream struct {
	id     string
	sess   *session
	target wire.Target

	// Guarded by Listener.mu.
	consumed bool
	conn     *streamConn

	ready   chan *streamConn // cap 1: the client's data stream arrived
	refused chan string      // cap 1: stream_closed before it arrived
}

// removeStreamLocked forgets st; its id is unknown from then on.
func (l *Listener) removeStreamLocked(st *stream) {
	if l.streams[st.id] != st {
		return
	}
	delete(l.streams, st.id)
	delete(st.sess.streams, st.id)
	l.met.Streams.Dec()
}

// endStream is the router closing st: unsubscribe, forget it.
func (l *Listener) endStream(st *stream) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.streams[st.id] != st {
		return
	}
	l.removeStreamLocked(st)
	if !st.sess.enqueueLocked(wire.Message{Type: wire.TypeUnsubscribe, StreamID: st.id}) && !st.sess.ended {
		// An unsubscribe must not be lost: a session that cannot take it
		// is stuck.
		l.endSessionLocked(st.sess, wire.CodeSendQueueFull)
	}
	if st.conn != nil {
		st.conn.shut()
	}
}

// streamClosed is the client's stream_closed.
func (l *Listener) streamClosed(s *session, id, code string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := s.streams[id]
	if st == nil {
		return
	}
	l.removeStreamLocked(st)
	if st.conn != nil {
		st.conn.shut()
		return
	}
	if code == "" {
		code = "closed"
	}
	select {
	case st.refused <- code:
	default:
	}
}

func (l *Listener) serveStream(w http.ResponseWriter, r *http.Request, cs *connState, id string) {
	ident, status, code := l.authenticate(r, cs)
	if code != "" {
		l.refuse(w, status, code, "the request's credential is not accepted")
		return
	}
	v, ok := requestVersion(r)
	if !ok {
		l.refuse(w, http.StatusBadRequest, wire.CodeUnsupportedVersion, wire.VersionHeader+" must be an integer >= 1")
		return
	}
	if !wire.ValidStreamID(id) {
		l.refuse(w, http.StatusNotFound, wire.CodeUnknownStream, "no such stream")
		return
	}
	l.mu.Lock()
	st := l.streams[id]
	switch {
	case st == nil:
		l.mu.Unlock()
		l.refuse(w, http.StatusNotFound, wire.CodeUnknownStream, "no such stream")
		return
	case st.sess.entry != ident.entry.ID:
		l.mu.Unlock()
		l.refuse(w, http.StatusForbidden, wire.CodeForbidden, "the stream belongs to another client")
		return
	case st.consumed:
		l.mu.Unlock()
		l.refuse(w, http.StatusConflict, wire.CodeDuplicateStream, "the stream is already open")
		return
	case v < st.sess.version:
		l.mu.Unlock()
		l.refuse(w, http.StatusBadRequest, wire.CodeUnsupportedVersion, "the stream's protocol version is below the session's")
		return
	}
	st.consumed = true
	c := &streamConn{
		l: l, st: st, body: r.Body, w: w, rc: http.NewResponseController(w),
		done:     make(chan struct{}),
		maxWrite: StreamBuffer(l.st.MaxSessionBufferBytes, l.st.MaxStreamsPerSession),
		local:    cs.conn.LocalAddr(), remote: cs.conn.RemoteAddr(),
	}
	st.conn = c
	l.mu.Unlock()

	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	_ = c.rc.Flush()
	cs.begin()
	defer cs.end()
	st.ready <- c // cap 1, sent once: consumed is set once

	select {
	case <-c.done:
	case <-r.Context().Done():
		c.Close()
	}
	// Abort a write blocked on flow control, then let no write start.
	if !c.fmu.TryLock() {
		_ = c.rc.SetWriteDeadline(time.Now().Add(-time.Second))
		c.fmu.Lock()
	}
	c.finished = true
	c.fmu.Unlock()
	c.stopReadTimer()
}

// streamConn is a relayed stream as a net.Conn: reads carry the
// publisher's bytes, writes go to the publisher. Close unsubscribes.
type streamConn struct {
	l    *Listener
	st   *stream
	body io.ReadCloser
	w    http.ResponseWriter
	rc   *http.ResponseController

	wmu      sync.Mutex   // one Write at a time
	fmu      sync.RWMutex // read-held while w or rc is used
	finished bool         // under fmu: the handler returned, w must not be used

	// The read deadline is kept here: the ZMTP client moves it at every
	// message, and each move handed to the HTTP/2 server is a round trip
	// through its serve loop. A timer hands it over only once it passed,
	// which fails the body's reads for good, as the server's own deadline
	// would.
	rdMu    sync.Mutex
	rdAt    time.Time // wanted; zero: none
	rdTimer *time.Timer
	rdFired bool

	done     chan struct{}
	once     sync.Once
	maxWrite int
	local    net.Addr
	remote   net.Addr
}

// shut ends the stream without an unsubscribe (the session or the client
// ended it).
func (c *streamConn) shut() { c.once.Do(func() { close(c.done) }) }

func (c *streamConn) Read(b []byte) (int, error) {
	select {
	case <-c.done:
		return 0, net.ErrClosed
	default:
	}
	n, err := c.body.Read(b)
	if n > 0 {
		c.l.met.Bytes.WithLabelValues("received").Add(float64(n))
	}
	if err != nil {
		select {
		case <-c.done:
			return n, net.ErrClosed
		default:
		}
	}
	return n, err
}

func (c *streamConn) Write(b []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.fmu.RLock()
	defer c.fmu.RUnlock()
	written := 0
	for written < len(b) {
		select {
		case <-c.done:
			return written, net.ErrClosed
		default:
		}
		if c.finished {
			return written, net.ErrClosed
		}
		chunk := b[written:min(len(b), written+c.maxWrite)]
		n, err := c.w.Write(chunk)
		written += n
		if n > 0 {
			c.l.met.Bytes.WithLabelValues("sent").Add(float64(n))
		}
		if err == nil {
			err = c.rc.Flush()
		}
		if err != nil {
			return written, err
		}
	}
	return written, nil
}

// Carrier is the id of the broker whose session carries the stream.
func (c *streamConn) Carrier() string { return c.st.sess.entry }

// Close unsubscribes and ends the stream.
func (c *streamConn) Close() error {
	first := false
	c.once.Do(func() { close(c.done); first = true })
	if first {
		c.l.endStream(c.st)
	}
	return nil
}

func (c *streamConn) LocalAddr() net.Addr  { return c.local }
func (c *streamConn) RemoteAddr() net.Addr { return c.remote }

func (c *streamConn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

func (c *streamConn) SetReadDeadline(t time.Time) error {
	c.fmu.RLock()
	defer c.fmu.RUnlock()
	if c.finished {
		return net.ErrClosed
	}
	c.rdMu.Lock()
	defer c.rdMu.Unlock()
	c.rdAt = t
	if c.rdFired {
		return nil // the body already failed with the deadline
	}
	if t.IsZero() {
		if c.rdTimer != nil {
			c.rdTimer.Stop()
		}
		return nil
	}
	d := time.Until(t)
	if d <= 0 {
		c.rdFired = true
		return c.rc.SetReadDeadline(t)
	}
	if c.rdTimer == nil {
		c.rdTimer = time.AfterFunc(d, c.readDeadlinePassed)
	} else {
		c.rdTimer.Reset(d)
	}
	return nil
}

// readDeadlinePassed hands a passed read deadline to the HTTP/2 server,
// which ends the blocked read with os.ErrDeadlineExceeded. A deadline
// moved or cleared since the timer was set is left alone.
func (c *streamConn) readDeadlinePassed() {
	c.fmu.RLock()
	defer c.fmu.RUnlock()
	if c.finished {
		return
	}
	c.rdMu.Lock()
	defer c.rdMu.Unlock()
	if c.rdFired || c.rdAt.IsZero() || time.Now().Before(c.rdAt) {
		return
	}
	c.rdFired = true
	_ = c.rc.SetReadDeadline(c.rdAt)
}

// stopReadTimer is called as the handler returns.
func (c *streamConn) stopReadTimer() {
	c.rdMu.Lock()
	defer c.rdMu.Unlock()
	if c.rdTimer != nil {
		c.rdTimer.Stop()
	}
}

func (c *streamConn) SetWriteDeadline(t time.Time) error {
	c.fmu.RLock()
	defer c.fmu.RUnlock()
	if c.finished {
		return net.ErrClosed
	}
	return c.rc.SetWriteDeadline(t)
}
