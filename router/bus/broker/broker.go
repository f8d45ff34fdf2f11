// Package broker is the in-cluster agent of the event bus (switchyard
// broker): it dials out to a router's event-bus listener, keeps one
// control session, and for each subscribe command connects to a ZMQ
// publisher it sees advertised in its own discovery and relays the raw
// bytes both ways over a data stream. The router runs the ZMTP client; the
// broker never parses what it relays.
package broker

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"

	"switchyard/router/bus/wire"
)

// Timings and bounds.
const (
	// DialTimeout bounds the TCP connection to a publisher.
	DialTimeout = 10 * time.Second
	// StreamOpenTimeout bounds the data stream's request until the
	// router's response headers.
	StreamOpenTimeout = 10 * time.Second
	// WelcomeTimeout bounds the session request until the welcome.
	WelcomeTimeout = 15 * time.Second
	// BackoffInitial and BackoffMax bound the full-jitter reconnect delay.
	BackoffInitial = 500 * time.Millisecond
	BackoffMax     = 30 * time.Second
	// StableSession is how long a welcomed session must last for the next
	// reconnect to start again at BackoffInitial.
	StableSession = 10 * time.Second
	// SendQueue caps control messages waiting for the wire; a session
	// that cannot take one more is ended and reconnected.
	SendQueue = 1024
	// DefaultMaxStreams caps open streams when neither the welcome nor the
	// configuration says less.
	DefaultMaxStreams = 1024
	// MinStreamBuffer and MaxStreamBuffer clamp the per-stream copy buffer
	// (the welcome's stream_buffer_bytes).
	MinStreamBuffer = 16 << 10
	MaxStreamBuffer = 1 << 20
	// CloseGrace bounds how long a stream whose publisher ended waits for
	// the router to end the response.
	CloseGrace = 5 * time.Second
	// DrainTimeout bounds a drain's goodbye: flushing draining and
	// waiting for the router to end the control channel.
	DrainTimeout = 2 * time.Second
	// errorBodyCap bounds the refusal body read from the router.
	errorBodyCap = 4096
)

// CodeTooManyStreams is the stream_closed code of a subscribe over the
// broker's stream cap.
const CodeTooManyStreams = "too_many_streams"

// Directory says whether a publisher is advertised in the broker's own
// discovery: namespace, and host:port as the channel record names it.
type Directory interface {
	Advertised(namespace, hostPort string) bool
}

// Config is one broker.
type Config struct {
	// BusURL is the router's listener, https://host:port.
	BusURL string
	// ClientID is the broker's brokers[].id at the router.
	ClientID string
	// Namespaces are the Dynamo namespaces the broker serves.
	Namespaces []string
	// Token returns the bearer token, read at every session attempt (a
	// rotated Secret is picked up at the next reconnect); nil or "" sends
	// none (certificate authentication).
	Token func() (string, error)
	// TLS verifies the router and may carry a client certificate. Its
	// minimum version is raised to TLS 1.3 and ALPN set to h2.
	TLS *tls.Config
	// Directory decides which targets may be dialed.
	Directory Directory
	// MaxStreams caps open streams (0: DefaultMaxStreams); the welcome's
	// max_streams lowers it.
	MaxStreams int
	// Dial connects to a publisher (nil: TCP with DialTimeout).
	Dial func(ctx context.Context, hostPort string) (net.Conn, error)
	// Log and Metrics may be nil.
	Log     *slog.Logger
	Metrics *Metrics

	// Sources, when set, make the agent a kv_listener: its hello
	// announces these backends instead of namespaces (Namespaces and
	// Directory stay empty), and Serve answers each subscribe naming one
	// of them with a connection whose reads are the source's bytes.
	Sources []string
	Serve   func(ctx context.Context, t wire.Target) (net.Conn, error)
}

// Agent runs one broker.
type Agent struct {
	cfg  Config
	base string
	hc   *http.Client
	tr   *http2.Transport
	log  *slog.Logger
	met  *Metrics
	ns   map[string]bool
	rng  *rand.Rand
}

// New checks c and builds the agent.
func New(c Config) (*Agent, error) {
	u, err := url.Parse(c.BusURL)
	if err != nil || u.Scheme != "https" || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return nil, fmt.Errorf("bus url must be https://host:port, not %q", c.BusURL)
	}
	if !validName(c.ClientID, wire.MaxIDBytes) {
		return nil, errors.New("client id must be 1-128 bytes without spaces or control characters")
	}
	ns := map[string]bool{}
	if len(c.Sources) > 0 {
		if err := checkSources(c); err != nil {
			return nil, err
		}
		for _, b := range c.Sources {
			ns[b] = true
		}
	} else {
		if len(c.Namespaces) == 0 || len(c.Namespaces) > wire.MaxNamespaces {
			return nil, fmt.Errorf("serve 1 to %d Dynamo namespaces", wire.MaxNamespaces)
		}
		for _, n := range c.Namespaces {
			if !validName(n, wire.MaxNameBytes) {
				return nil, fmt.Errorf("namespace %q is not a valid name", n)
			}
			ns[n] = true
		}
		if c.Directory == nil {
			return nil, errors.New("a directory of advertised publishers is required")
		}
	}
	if c.MaxStreams <= 0 {
		c.MaxStreams = DefaultMaxStreams
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Metrics == nil {
		c.Metrics = NewMetrics()
	}
	if c.Dial == nil {
		d := &net.Dialer{Timeout: DialTimeout}
		c.Dial = func(ctx context.Context, hp string) (net.Conn, error) { return d.DialContext(ctx, "tcp", hp) }
	}
	tc := &tls.Config{}
	if c.TLS != nil {
		tc = c.TLS.Clone()
	}
	tc.MinVersion = tls.VersionTLS13
	tc.NextProtos = []string{"h2"}
	tr := &http2.Transport{
		TLSClientConfig: tc,
		// Keepalive: a PING after 30 s without a frame, the connection
		// dropped when it is not answered within 15 s.
		ReadIdleTimeout: 30 * time.Second,
		PingTimeout:     15 * time.Second,
	}
	return &Agent{
		cfg: c, base: "https://" + u.Host, tr: tr, hc: &http.Client{Transport: tr},
		log: c.Log, met: c.Metrics, ns: ns,
		rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x62726f6b6572)),
	}, nil
}

func validName(s string, max int) bool {
	if s == "" || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x21 || c == 0x7f {
			return false
		}
	}
	return true
}

// Run keeps a session until ctx ends, reconnecting with full-jitter
// backoff. When ctx ends the live session drains: draining is sent, every
// stream closed, and the control channel ended cleanly.
func (a *Agent) Run(ctx context.Context) error {
	defer a.tr.CloseIdleConnections()
	b := backoff{rng: a.rng}
	for {
		start := time.Now()
		welcomed, err := a.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		wait := b.next(welcomed, time.Since(start))
		a.log.Warn("event bus session ended; reconnecting", "error", err, "in", wait.Round(time.Millisecond))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// backoff is the full-jitter reconnect delay: uniform in (0, ceiling], the
// ceiling doubling from BackoffInitial up to BackoffMax and starting over
// once a welcomed session lasted StableSession.
type backoff struct {
	ceiling time.Duration
	rng     *rand.Rand
}

// next is the wait before the next attempt, after one that was welcomed or
// not and lasted that long.
func (b *backoff) next(welcomed bool, lasted time.Duration) time.Duration {
	if b.ceiling == 0 || welcomed && lasted >= StableSession {
		b.ceiling = BackoffInitial
	}
	wait := time.Duration(b.rng.Int64N(int64(b.ceiling))) + 1
	b.ceiling = min(b.ceiling*2, BackoffMax)
	return wait
}

// RefusedError is a session the router refused with an HTTP status, or
// ended with an error message (Status 0).
type RefusedError struct {
	Status int
	Code   string
}

func (e *RefusedError) Error() string {
	if e.Status == 0 {
		return "the router ended the session: " + e.Code
	}
	return fmt.Sprintf("the router refused the session: %d %s", e.Status, e.Code)
}

// refusalCode reads an error body's code, bounded; "" when there is none.
func refusalCode(body io.Reader) string {
	b, _ := io.ReadAll(io.LimitReader(body, errorBodyCap))
	var e wire.ErrorBody
	if json.Unmarshal(b, &e) != nil || !validName(e.Error.Code, 64) {
		return ""
	}
	return e.Error.Code
}

func (a *Agent) newRequest(ctx context.Context, path string, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.base+path, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set(wire.VersionHeader, strconv.Itoa(wire.Version))
	if a.cfg.Token != nil {
		tok, err := a.cfg.Token()
		if err != nil {
			return nil, fmt.Errorf("read the bearer token: %w", err)
		}
		if tok = strings.TrimSpace(tok); tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
	}
	return req, nil
}

// session is one control session: hello, welcome, then commands until
// the session ends or ctx does (drain). It reports whether the router
// welcomed it.
func (a *Agent) session(ctx context.Context) (bool, error) {
	// The request outlives ctx so a drain can still say goodbye.
	rctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	s := &session{a: a, out: make(chan wire.Message, SendQueue), streams: map[string]*relay{},
		ended: make(chan struct{}), closedStreams: make(chan string, a.cfg.MaxStreams),
		pw: pw, writerDone: make(chan struct{}), readerDone: make(chan struct{})}
	hello := a.hello()
	s.out <- hello
	go func() { defer close(s.writerDone); s.write(pw) }()
	defer func() { s.end(); pw.Close(); <-s.writerDone }()

	req, err := a.newRequest(rctx, wire.SessionPath, pr)
	if err != nil {
		a.met.SessionAttempts.WithLabelValues("failed").Inc()
		return false, err
	}
	req.Header.Set("Content-Type", wire.ContentType)
	// Until the welcome, ctx's end abandons the attempt: there is nothing
	// to drain yet.
	welcomeTimer := time.AfterFunc(WelcomeTimeout, cancel)
	defer welcomeTimer.Stop()
	stopEarly := context.AfterFunc(ctx, cancel)
	defer stopEarly()
	resp, err := a.hc.Do(req)
	if err != nil {
		welcomeTimer.Stop()
		a.met.SessionAttempts.WithLabelValues("failed").Inc()
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		welcomeTimer.Stop()
		a.met.SessionAttempts.WithLabelValues("refused").Inc()
		return false, &RefusedError{Status: resp.StatusCode, Code: refusalCode(resp.Body)}
	}
	dec := wire.NewDecoder(resp.Body)
	w, err := dec.Decode()
	welcomeTimer.Stop()
	if !stopEarly() {
		a.met.SessionAttempts.WithLabelValues("failed").Inc()
		return false, ctx.Err()
	}
	if err != nil || w.Type != wire.TypeWelcome {
		a.met.SessionAttempts.WithLabelValues("failed").Inc()
		if err == nil {
			err = fmt.Errorf("first message is %q, not welcome", w.Type)
		}
		return false, err
	}
	a.met.SessionAttempts.WithLabelValues("welcomed").Inc()
	a.met.Connected.Set(1)
	defer a.met.Connected.Set(0)
	s.limits(w)
	a.log.Info("event bus session welcomed", "session", w.SessionID, "namespaces", a.cfg.Namespaces, "sources", a.cfg.Sources,
		"max_streams", s.maxStreams, "stream_buffer_bytes", s.bufSize)

	msgs := make(chan wire.Message, 64)
	readErr := make(chan error, 1)
	go func() {
		defer close(s.readerDone)
		defer close(msgs)
		for {
			m, err := dec.Decode()
			if err != nil {
				readErr <- err
				return
			}
			select {
			case msgs <- m:
			case <-s.ended:
				return
			}
		}
	}()
	return true, s.loop(ctx, msgs, readErr)
}

// session is the state of one welcomed control session. Its maps are
// owned by loop's goroutine.
type session struct {
	a          *Agent
	out        chan wire.Message
	endOnce    sync.Once
	ended      chan struct{}
	maxStreams int
	bufSize    int
	heartbeat  time.Duration
	silence    time.Duration

	streams       map[string]*relay
	closedStreams chan string // relays that ended, for loop to forget
	wg            sync.WaitGroup
	draining      bool

	pw         *io.PipeWriter // the control channel's request body
	writerDone chan struct{}
	readerDone chan struct{}
}

func (s *session) limits(w wire.Message) {
	s.maxStreams = s.a.cfg.MaxStreams
	s.bufSize = MinStreamBuffer
	s.heartbeat = 10 * time.Second
	idle := 30 * time.Second
	if l := w.Limits; l != nil {
		if l.MaxStreams > 0 {
			s.maxStreams = min(s.maxStreams, l.MaxStreams)
		}
		s.bufSize = min(max(l.StreamBufferBytes, MinStreamBuffer), MaxStreamBuffer)
		if l.HeartbeatIntervalMS > 0 {
			s.heartbeat = max(time.Duration(l.HeartbeatIntervalMS)*time.Millisecond, 100*time.Millisecond)
		}
		if l.IdleTimeoutMS > 0 {
			idle = max(time.Duration(l.IdleTimeoutMS)*time.Millisecond, time.Second)
		}
	}
	// The router sends a heartbeat every interval: three missed ones, or
	// its idle timeout, whichever is longer, mean it is gone.
	s.silence = max(3*s.heartbeat, idle)
}

// send queues m; false when the queue is full (the session is then ended)
// or the session already has.
func (s *session) send(m wire.Message) bool {
	select {
	case <-s.ended:
		return false
	default:
	}
	select {
	case s.out <- m:
		return true
	default:
		s.end()
		return false
	}
}

func (s *session) end() { s.endOnce.Do(func() { close(s.ended) }) }

// write copies queued messages to the request body until the session
// ends, then flushes what is still queued (a drain's last lines).
func (s *session) write(w io.Writer) {
	var buf []byte
	put := func(m wire.Message) bool {
		buf, _ = wire.Append(buf[:0], &m)
		_, err := w.Write(buf)
		return err == nil
	}
	for {
		select {
		case m := <-s.out:
			if !put(m) {
				s.end()
				return
			}
		case <-s.ended:
			for {
				select {
				case m := <-s.out:
					if !put(m) {
						return
					}
				default:
					return
				}
			}
		}
	}
}

// loop handles the router's messages, sends heartbeats and watches for
// silence until the session ends or ctx does.
func (s *session) loop(ctx context.Context, msgs <-chan wire.Message, readErr <-chan error) error {
	defer s.closeAll()
	hb := time.NewTicker(s.heartbeat)
	defer hb.Stop()
	silence := time.NewTimer(s.silence)
	defer silence.Stop()
	var seq uint64
	for {
		select {
		case m, ok := <-msgs:
			if !ok {
				select {
				case err := <-readErr:
					if errors.Is(err, io.EOF) {
						return errors.New("the router ended the session")
					}
					return err
				default:
					return errors.New("the router ended the session")
				}
			}
			silence.Reset(s.silence)
			if err := s.handle(ctx, m); err != nil {
				return err
			}
		case id := <-s.closedStreams:
			s.forget(id)
		case <-hb.C:
			seq++
			if !s.send(wire.Message{Type: wire.TypeHeartbeat, Seq: seq}) {
				return errors.New("control channel stalled")
			}
		case <-silence.C:
			return fmt.Errorf("no message from the router for %v", s.silence)
		case <-s.ended:
			return errors.New("control channel stalled")
		case <-ctx.Done():
			s.drain()
			return ctx.Err()
		}
	}
}

// drain tells the router to place nothing here, closes every stream and
// ends the control channel cleanly.
func (s *session) drain() {
	s.draining = true
	s.send(wire.Message{Type: wire.TypeDraining})
	s.a.log.Info("event bus session draining", "streams", len(s.streams))
	s.closeAll()
	// The writer flushes draining, then the request body ends: the router
	// sees the session end cleanly and closes its side.
	s.end()
	t := time.NewTimer(DrainTimeout)
	defer t.Stop()
	select {
	case <-s.writerDone:
	case <-t.C:
	}
	s.pw.Close()
	select {
	case <-s.readerDone:
	case <-t.C:
	}
}

// closeAll ends every stream and waits for their relays, taking the ids
// they report meanwhile so none blocks on a full closedStreams.
func (s *session) closeAll() {
	for id, r := range s.streams {
		r.stop(false)
		delete(s.streams, id)
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	for {
		select {
		case <-s.closedStreams:
		case <-done:
			s.a.met.Streams.Set(0)
			return
		}
	}
}

// forget drops a stream whose relay ended.
func (s *session) forget(id string) {
	delete(s.streams, id)
	s.a.met.Streams.Set(float64(len(s.streams)))
}

// forgetClosed drops every stream whose relay has ended so far.
func (s *session) forgetClosed() {
	for {
		select {
		case id := <-s.closedStreams:
			s.forget(id)
		default:
			return
		}
	}
}

func (s *session) handle(ctx context.Context, m wire.Message) error {
	switch m.Type {
	case wire.TypeHeartbeat:
		if !s.send(wire.Message{Type: wire.TypeHeartbeatAck, Seq: m.Seq}) {
			return errors.New("control channel stalled")
		}
	case wire.TypeHeartbeatAck:
	case wire.TypeSubscribe:
		// Relays that ended before this command free their slots first.
		s.forgetClosed()
		s.subscribe(ctx, m.StreamID, *m.Target)
	case wire.TypeUnsubscribe:
		if r := s.streams[m.StreamID]; r != nil {
			r.stop(false)
			delete(s.streams, m.StreamID)
			s.a.met.Streams.Set(float64(len(s.streams)))
		}
	case wire.TypeError:
		return &RefusedError{Code: m.Code}
	default:
		// welcome again, or a client message sent back: not the router's.
		s.a.log.Warn("unexpected control message from the router", "type", m.Type)
	}
	return nil
}

// refuse answers a subscribe it will not serve.
func (s *session) refuse(id, code string) {
	s.a.met.StreamOpens.WithLabelValues(code).Inc()
	s.send(wire.Message{Type: wire.TypeStreamClosed, StreamID: id, Code: code})
}

func (s *session) subscribe(ctx context.Context, id string, t wire.Target) {
	if _, dup := s.streams[id]; dup {
		s.a.log.Warn("subscribe repeats an open stream id; ignored", "stream", id)
		return
	}
	hostPort := net.JoinHostPort(t.Host, strconv.Itoa(int(t.Port)))
	switch {
	case s.draining:
		s.refuse(id, wire.CodeShuttingDown)
		return
	case s.a.announcing() && !s.a.ns[t.Backend]:
		s.a.log.Warn("subscribe refused: the backend is not announced", "stream", id, "backend", t.Backend)
		s.refuse(id, wire.CodeTargetNotAdvertised)
		return
	case !s.a.announcing() && (t.Backend != "" || !s.a.ns[t.Namespace] || !s.a.cfg.Directory.Advertised(t.Namespace, hostPort)):
		s.a.log.Warn("subscribe refused: the target is not advertised in discovery",
			"stream", id, "namespace", t.Namespace, "target", hostPort)
		s.refuse(id, wire.CodeTargetNotAdvertised)
		return
	case len(s.streams) >= s.maxStreams:
		s.refuse(id, CodeTooManyStreams)
		return
	}
	rctx, cancel := context.WithCancel(context.Background())
	r := &relay{s: s, id: id, target: hostPort, wt: t, cancel: cancel}
	if s.a.announcing() {
		r.target = t.Backend
	}
	s.streams[id] = r
	s.a.met.Streams.Set(float64(len(s.streams)))
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		r.run(rctx)
	}()
}
