package bus

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"

	"switchyard/router/bus/wire"
	"switchyard/router/eventplane"
)

// Listener is the event bus listener and the command API over its
// sessions. It is an eventplane.Bus.
type Listener struct {
	log *slog.Logger
	met *Metrics

	mu       sync.Mutex
	st       *state
	revoked  revoked
	sessions map[string]*session // by entry id
	pending  map[string]bool     // entry ids with a session request before hello
	streams  map[string]*stream  // by stream id
	changed  chan struct{}

	conns   atomic.Int64
	wg      sync.WaitGroup
	closing chan struct{}
	once    sync.Once
	lnMu    sync.Mutex
	lns     []net.Listener
	live    map[net.Conn]struct{}
}

var _ eventplane.Bus = (*Listener)(nil)

// New makes a listener with settings s; Serve runs it on a port.
func New(s Settings, log *slog.Logger, met *Metrics) (*Listener, error) {
	st, err := newState(s, nil)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if met == nil {
		met = NewMetrics()
	}
	return &Listener{
		log: log, met: met, st: st,
		sessions: map[string]*session{},
		pending:  map[string]bool{},
		streams:  map[string]*stream{},
		changed:  make(chan struct{}),
		closing:  make(chan struct{}),
		live:     map[net.Conn]struct{}{},
	}, nil
}

// Metrics are the listener's collectors.
func (l *Listener) Metrics() *Metrics { return l.met }

// connState is what a TLS connection's requests share.
type connState struct {
	conn     net.Conn
	caGen    uint64
	linger   time.Duration
	accepted atomic.Bool

	mu     sync.Mutex
	active int         // accepted requests running
	timer  *time.Timer // closes the connection lingerGrace after linger
}

// lingerGrace is how long past Linger an idle connection may stay before
// it is closed outright. The HTTP/2 server's idle timeout sends GOAWAY at
// Linger; but any request (a refused one too) restarts that timer, while
// the linger counts from the last accepted request only, so a client
// that keeps sending refused requests is closed here.
const lingerGrace = 2 * time.Second

// begin notes an accepted (2xx) request; end its end.
func (cs *connState) begin() {
	cs.accepted.Store(true)
	cs.mu.Lock()
	cs.active++
	if cs.timer != nil {
		cs.timer.Stop()
		cs.timer = nil
	}
	cs.mu.Unlock()
}

func (cs *connState) end() {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.active--
	if cs.active > 0 {
		return
	}
	var t *time.Timer
	t = time.AfterFunc(cs.linger+lingerGrace, func() {
		cs.mu.Lock()
		idle := cs.active == 0 && cs.timer == t
		cs.mu.Unlock()
		if idle {
			cs.conn.Close()
		}
	})
	cs.timer = t
}

func (cs *connState) stop() {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.timer != nil {
		cs.timer.Stop()
	}
}

type connKey struct{}

func (l *Listener) refused(code string) { l.met.Refusals.WithLabelValues(code).Inc() }

// Serve accepts connections on ln until Close. It returns nil after Close.
func (l *Listener) Serve(ln net.Listener) error {
	l.lnMu.Lock()
	select {
	case <-l.closing:
		l.lnMu.Unlock()
		ln.Close()
		return nil
	default:
	}
	l.lns = append(l.lns, ln)
	l.lnMu.Unlock()
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			select {
			case <-l.closing:
				return nil
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				t := time.NewTimer(delay)
				select {
				case <-t.C:
				case <-l.closing:
					t.Stop()
					return nil
				}
				continue
			}
			return err
		}
		delay = 0
		l.mu.Lock()
		limit := ConnectionLimit(l.st.MaxSessions)
		l.mu.Unlock()
		if l.conns.Load() >= int64(limit) {
			l.refused(wire.CodeConnectionLimit)
			c.Close()
			continue
		}
		l.conns.Add(1)
		l.met.Connections.Inc()
		l.track(c, true)
		l.wg.Go(func() {
			defer func() {
				l.track(c, false)
				c.Close()
				l.conns.Add(-1)
				l.met.Connections.Dec()
			}()
			l.serveConn(c)
		})
	}
}

func (l *Listener) track(c net.Conn, add bool) {
	l.lnMu.Lock()
	defer l.lnMu.Unlock()
	if add {
		l.live[c] = struct{}{}
	} else {
		delete(l.live, c)
	}
}

// Close stops accepting, ends every session and connection and waits for
// their goroutines.
func (l *Listener) Close() error {
	l.once.Do(func() {
		close(l.closing)
		l.lnMu.Lock()
		for _, ln := range l.lns {
			ln.Close()
		}
		for c := range l.live {
			c.Close()
		}
		l.lnMu.Unlock()
		l.mu.Lock()
		for _, s := range l.sessions {
			l.endSessionLocked(s, wire.CodeShuttingDown)
		}
		// Waiters on Changed look again (a host hands them its next
		// listener's).
		l.notifyLocked()
		l.mu.Unlock()
	})
	l.wg.Wait()
	return nil
}

// peekConn is a connection whose first bytes went through a reader.
type peekConn struct {
	net.Conn
	r *bufio.Reader
}

func (p *peekConn) Read(b []byte) (int, error) { return p.r.Read(b) }

func isASCIILetter(b byte) bool { return b >= 'A' && b <= 'Z' || b >= 'a' && b <= 'z' }

func (l *Listener) serveConn(c net.Conn) {
	l.mu.Lock()
	st := l.st
	l.mu.Unlock()

	// First byte: a TLS handshake record or nothing.
	_ = c.SetReadDeadline(time.Now().Add(st.HandshakeTimeout))
	br := bufio.NewReaderSize(c, 1024)
	first, err := br.Peek(1)
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			l.refused(wire.CodeHandshakeTimeout)
		} else {
			l.refused(wire.CodeHandshakeFailed)
		}
		return
	}
	if first[0] != 0x16 {
		l.refused(wire.CodeTLSRequired)
		if isASCIILetter(first[0]) {
			body := wire.NewErrorBody(wire.CodeTLSRequired, "the event bus listener speaks TLS 1.3 and HTTP/2 only")
			_ = c.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = c.Write([]byte("HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: " +
				strconv.Itoa(len(body)) + "\r\n\r\n" + string(body)))
		}
		return
	}

	tc := tls.Server(&peekConn{Conn: c, r: br}, st.tls)
	hctx, cancel := context.WithTimeout(context.Background(), st.HandshakeTimeout)
	err = tc.HandshakeContext(hctx)
	cancel()
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
			l.refused(wire.CodeHandshakeTimeout)
		} else {
			l.refused(wire.CodeHandshakeFailed)
		}
		l.log.Debug("event bus handshake failed", "remote", c.RemoteAddr().String(), "err", err)
		return
	}
	if tc.ConnectionState().NegotiatedProtocol != "h2" {
		l.refused(wire.CodeHandshakeFailed)
		return
	}
	_ = c.SetDeadline(time.Time{})

	cs := &connState{conn: tc, caGen: st.caGen, linger: st.Linger}
	defer cs.stop()
	auth := time.AfterFunc(st.AuthTimeout, func() {
		if !cs.accepted.Load() {
			l.refused(wire.CodeAuthTimeout)
			tc.Close()
		}
	})
	defer auth.Stop()

	buf := StreamBuffer(st.MaxSessionBufferBytes, st.MaxStreamsPerSession)
	h2 := &http2.Server{
		// Two spare streams: the session itself and a superseding one.
		MaxConcurrentStreams:         uint32(st.MaxStreamsPerSession + 2),
		MaxReadFrameSize:             uint32(max(buf, MinStreamBuffer)),
		MaxUploadBufferPerStream:     int32(buf),
		MaxUploadBufferPerConnection: int32(min(st.MaxSessionBufferBytes, 1<<31-1)),
		IdleTimeout:                  st.Linger,
		ReadIdleTimeout:              st.PingInterval,
		PingTimeout:                  st.PingTimeout,
	}
	ctx, stop := context.WithCancel(context.WithValue(context.Background(), connKey{}, cs))
	defer stop()
	go func() {
		select {
		case <-l.closing:
			tc.Close()
		case <-ctx.Done():
		}
	}()
	h2.ServeConn(tc, &http2.ServeConnOpts{Context: ctx, Handler: http.HandlerFunc(l.serveHTTP)})
}

// refuse answers a request with a JSON error body and counts it.
func (l *Listener) refuse(w http.ResponseWriter, status int, code, msg string) {
	l.refused(code)
	body := wire.NewErrorBody(code, msg)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func (l *Listener) serveHTTP(w http.ResponseWriter, r *http.Request) {
	cs, _ := r.Context().Value(connKey{}).(*connState)
	if cs == nil {
		l.refuse(w, http.StatusInternalServerError, wire.CodeNotFound, "no connection state")
		return
	}
	switch {
	case r.URL.Path == wire.SessionPath && r.Method == http.MethodPost:
		l.serveSession(w, r, cs)
	case strings.HasPrefix(r.URL.Path, wire.StreamPathPrefix) && r.Method == http.MethodPost:
		l.serveStream(w, r, cs, strings.TrimPrefix(r.URL.Path, wire.StreamPathPrefix))
	default:
		l.refuse(w, http.StatusNotFound, wire.CodeNotFound, "no such event bus endpoint")
	}
}

// requestVersion reads the version header: at least 1.
func requestVersion(r *http.Request) (int, bool) {
	v, err := strconv.Atoi(r.Header.Get(wire.VersionHeader))
	if err != nil || v < 1 {
		return 0, false
	}
	return v, true
}

// Reload applies new settings to the running listener: new connections
// take the new certificate and limits; removed or replaced credentials are
// remembered (credential_revoked) and their sessions closed; narrowed
// grants close sessions that no longer fit (forbidden).
func (l *Listener) Reload(s Settings) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	st, err := newState(s, l.st)
	if err != nil {
		return err
	}
	old := l.st
	for i := range old.Brokers {
		e := &old.Brokers[i]
		n, kept := st.byID[e.ID]
		if !kept {
			l.revoked.add("id:" + e.ID)
		}
		if e.TokenHash != "" && (!kept || n.TokenHash != e.TokenHash) {
			l.revoked.add(e.TokenHash)
		}
	}
	l.st = st
	for _, sess := range l.sessions {
		n, kept := st.byID[sess.entry]
		switch {
		case !kept:
			l.endSessionLocked(sess, wire.CodeCredentialRevoked)
		case !sess.byCert && n.TokenHash != sess.tokenHash:
			l.endSessionLocked(sess, wire.CodeCredentialRevoked)
		case sess.byCert && sess.caGen != st.caGen:
			l.endSessionLocked(sess, wire.CodeCredentialRevoked)
		case grantProblem(n, sess.role, sess.namespaces, sess.sources) != "":
			l.endSessionLocked(sess, wire.CodeForbidden)
		}
	}
	return nil
}
