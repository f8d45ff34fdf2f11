package bus

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"slices"
	"time"

	"switchyard/router/bus/wire"
	"switchyard/router/config"
)

// session is one welcomed control channel.
type session struct {
	id         string
	entry      string
	role       string
	tokenHash  string // the entry's hash when token-authenticated
	byCert     bool
	caGen      uint64
	namespaces []string
	sources    []string
	version    int
	maxStreams int

	out  chan wire.Message
	done chan struct{}

	// Guarded by Listener.mu.
	ended    bool
	code     string
	draining bool
	streams  map[string]*stream
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// grantProblem says why a session's declaration does not fit entry e.
func grantProblem(e *config.BusClient, role string, namespaces, sources []string) string {
	if e.Role != role {
		return "role does not match the credential's entry"
	}
	switch role {
	case config.BusRoleBroker:
		if len(e.Namespaces) > 0 {
			for _, ns := range namespaces {
				if !slices.Contains(e.Namespaces, ns) {
					return "namespace outside the entry's allowlist"
				}
			}
		}
	case config.BusRoleKVListener:
		for _, b := range sources {
			if !slices.Contains(e.Backends, b) {
				return "backend outside the entry's grant"
			}
		}
	}
	return ""
}

// notifyLocked wakes Changed waiters.
func (l *Listener) notifyLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// endSessionLocked ends s with code (empty: the client ended it): its
// streams end, openers waiting on it fail with session_closed.
func (l *Listener) endSessionLocked(s *session, code string) {
	if s.ended {
		return
	}
	s.ended, s.code = true, code
	close(s.done)
	if l.sessions[s.entry] == s {
		delete(l.sessions, s.entry)
	}
	for _, st := range s.streams {
		l.removeStreamLocked(st)
		if st.conn != nil {
			st.conn.shut()
		}
	}
	l.met.Sessions.WithLabelValues(s.role).Dec()
	if code != "" && code != wire.CodeShuttingDown {
		l.refused(code)
	}
	l.notifyLocked()
	l.log.Info("event bus session ended", "session", s.id, "client", s.entry, "code", code)
}

// enqueueLocked queues m for the session's writer without blocking.
func (s *session) enqueueLocked(m wire.Message) bool {
	if s.ended {
		return false
	}
	select {
	case s.out <- m:
		return true
	default:
		return false
	}
}

func (l *Listener) serveSession(w http.ResponseWriter, r *http.Request, cs *connState) {
	id, status, code := l.authenticate(r, cs)
	if code != "" {
		l.refuse(w, status, code, "the request's credential is not accepted")
		return
	}
	if _, ok := requestVersion(r); !ok {
		l.refuse(w, http.StatusBadRequest, wire.CodeUnsupportedVersion, wire.VersionHeader+" must be an integer >= 1")
		return
	}
	entry := id.entry.ID

	// Admission: one pre-hello request per credential, max_sessions slots
	// counting requests still waiting for their hello.
	l.mu.Lock()
	st := l.st
	if l.pending[entry] {
		l.mu.Unlock()
		l.refuse(w, http.StatusTooManyRequests, wire.CodeTooManySessions, "another session request of this credential awaits its hello")
		return
	}
	if _, has := l.sessions[entry]; !has && len(l.sessions)+len(l.pending) >= st.MaxSessions {
		l.mu.Unlock()
		l.refuse(w, http.StatusTooManyRequests, wire.CodeTooManySessions, "max_sessions reached")
		return
	}
	l.pending[entry] = true
	l.mu.Unlock()
	admitted := false
	defer func() {
		if !admitted {
			l.mu.Lock()
			delete(l.pending, entry)
			l.mu.Unlock()
		}
	}()

	inbound := make(chan wire.Message)
	readErr := make(chan error, 1)
	quit := make(chan struct{})
	defer close(quit)
	go func() {
		dec := wire.NewDecoder(r.Body)
		for {
			m, err := dec.Decode()
			if err != nil {
				readErr <- err
				return
			}
			select {
			case inbound <- m:
			case <-quit:
				return
			}
		}
	}()

	var hello wire.Message
	helloTimer := time.NewTimer(st.HelloTimeout)
	select {
	case hello = <-inbound:
		helloTimer.Stop()
	case <-readErr:
		helloTimer.Stop()
		l.refuse(w, http.StatusBadRequest, wire.CodeBadMessage, "the control channel ended or held a malformed message before hello")
		return
	case <-helloTimer.C:
		l.refuse(w, http.StatusRequestTimeout, wire.CodeHelloTimeout, "no hello within the timeout")
		return
	case <-r.Context().Done():
		helloTimer.Stop()
		return
	}
	if hello.Type != wire.TypeHello {
		l.refuse(w, http.StatusBadRequest, wire.CodeBadMessage, "the first message must be hello")
		return
	}
	if !slices.Contains(hello.Versions, wire.Version) {
		l.refuse(w, http.StatusBadRequest, wire.CodeUnsupportedVersion, "hello names no protocol version this router speaks")
		return
	}
	if hello.Role != id.entry.Role || hello.ClientID != entry {
		l.refuse(w, http.StatusForbidden, wire.CodeForbidden, "role or client_id does not match the credential's entry")
		return
	}
	var sources []string
	for _, s := range hello.Sources {
		sources = append(sources, s.Backend)
	}
	switch hello.Role {
	case wire.RoleBroker:
		if len(sources) > 0 || len(hello.DynamoNamespaces) == 0 {
			l.refuse(w, http.StatusBadRequest, wire.CodeBadMessage, "a broker declares dynamo_namespaces and no sources")
			return
		}
	case wire.RoleKVListener:
		if len(sources) == 0 || len(hello.DynamoNamespaces) > 0 {
			l.refuse(w, http.StatusForbidden, wire.CodeForbidden, "a kv_listener announces at least one source and no dynamo_namespaces")
			return
		}
	}
	if p := grantProblem(id.entry, hello.Role, hello.DynamoNamespaces, sources); p != "" {
		l.refuse(w, http.StatusForbidden, wire.CodeForbidden, p)
		return
	}

	s := &session{
		id: "sess-" + randomHex(16), entry: entry, role: hello.Role,
		byCert: id.byCert, caGen: cs.caGen,
		namespaces: slices.Clone(hello.DynamoNamespaces), sources: sources,
		version: wire.Version, maxStreams: st.MaxStreamsPerSession,
		out:     make(chan wire.Message, 2*st.MaxStreamsPerSession+16),
		done:    make(chan struct{}),
		streams: map[string]*stream{},
	}
	if !id.byCert {
		s.tokenHash = id.entry.TokenHash
	}
	l.mu.Lock()
	delete(l.pending, entry)
	admitted = true
	cur, ok := l.st.byID[entry]
	if !ok || cur.Role != s.role || (!s.byCert && cur.TokenHash != s.tokenHash) {
		l.mu.Unlock()
		l.refuse(w, http.StatusUnauthorized, wire.CodeCredentialRevoked, "the credential was removed")
		return
	}
	if old := l.sessions[entry]; old != nil {
		l.endSessionLocked(old, wire.CodeSessionSuperseded)
	}
	l.sessions[entry] = s
	l.met.Sessions.WithLabelValues(s.role).Inc()
	l.notifyLocked()
	st = l.st
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.endSessionLocked(s, "")
		l.mu.Unlock()
	}()

	w.Header().Set("Content-Type", wire.ContentType)
	w.WriteHeader(http.StatusOK)
	cs.begin()
	defer cs.end()
	l.log.Info("event bus session welcomed", "session", s.id, "client", entry, "role", s.role)

	rc := http.NewResponseController(w)
	var buf []byte
	write := func(m wire.Message) bool {
		var err error
		buf, err = wire.Append(buf[:0], &m)
		if err != nil {
			return false
		}
		_ = rc.SetWriteDeadline(time.Now().Add(writeTimeout))
		if _, err := w.Write(buf); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !write(wire.Message{Type: wire.TypeWelcome, SessionID: s.id, Version: s.version, Limits: &wire.Limits{
		MaxStreams:            st.MaxStreamsPerSession,
		MaxSessionBufferBytes: st.MaxSessionBufferBytes,
		StreamBufferBytes:     StreamBuffer(st.MaxSessionBufferBytes, st.MaxStreamsPerSession),
		HeartbeatIntervalMS:   st.HeartbeatInterval.Milliseconds(),
		IdleTimeoutMS:         st.IdleTimeout.Milliseconds(),
	}}) {
		return
	}

	heartbeat := time.NewTicker(st.HeartbeatInterval)
	defer heartbeat.Stop()
	idle := time.NewTimer(st.IdleTimeout)
	defer idle.Stop()
	var seq uint64
	for {
		select {
		case m := <-s.out:
			if !write(m) {
				return
			}
		case m := <-inbound:
			idle.Reset(st.IdleTimeout)
			if !l.handleInbound(s, m, write) {
				l.mu.Lock()
				l.endSessionLocked(s, wire.CodeBadMessage)
				l.mu.Unlock()
			}
		case <-readErr:
			return
		case <-heartbeat.C:
			seq++
			if !write(wire.Message{Type: wire.TypeHeartbeat, Seq: seq}) {
				return
			}
		case <-idle.C:
			l.mu.Lock()
			l.endSessionLocked(s, wire.CodeIdleTimeout)
			l.mu.Unlock()
		case <-s.done:
			l.mu.Lock()
			code := s.code
			l.mu.Unlock()
			if code != "" {
				write(wire.Message{Type: wire.TypeError, Code: code})
			}
			return
		case <-r.Context().Done():
			return
		}
	}
}

// handleInbound applies one client message; false is a protocol error.
func (l *Listener) handleInbound(s *session, m wire.Message, write func(wire.Message) bool) bool {
	switch m.Type {
	case wire.TypeHeartbeat:
		write(wire.Message{Type: wire.TypeHeartbeatAck, Seq: m.Seq})
	case wire.TypeHeartbeatAck:
	case wire.TypeStreamClosed:
		l.streamClosed(s, m.StreamID, m.Code)
	case wire.TypeDraining:
		l.mu.Lock()
		if !s.draining {
			s.draining = true
			if s.role == wire.RoleKVListener {
				// Consumers fail over to another session at once.
				for _, st := range s.streams {
					l.removeStreamLocked(st)
					s.enqueueLocked(wire.Message{Type: wire.TypeUnsubscribe, StreamID: st.id})
					if st.conn != nil {
						st.conn.shut()
					}
				}
			}
			l.notifyLocked()
		}
		l.mu.Unlock()
		l.log.Info("event bus session draining", "session", s.id, "client", s.entry)
	default:
		return false
	}
	return true
}
