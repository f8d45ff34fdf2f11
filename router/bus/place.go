package bus

import (
	"context"
	"net"
	"slices"
	"strings"
	"time"

	"switchyard/router/bus/wire"
	"switchyard/router/eventplane"
)

// RendezvousKey is wire.RendezvousKey of a target.
func RendezvousKey(t eventplane.BusTarget) []byte {
	return wire.RendezvousKey(t.Namespace, t.Host, t.Port, t.Topic)
}

// Rendezvous is wire.Rendezvous of a target.
func Rendezvous(t eventplane.BusTarget, clientID string) uint64 {
	return wire.Rendezvous(t.Namespace, t.Host, t.Port, t.Topic, clientID)
}

func (l *Listener) coversLocked(s *session, ns string) bool {
	return !s.ended && !s.draining && s.role == wire.RoleBroker && slices.Contains(s.namespaces, ns)
}

// Covers reports whether a live, non-draining broker session declared ns.
func (l *Listener) Covers(namespace string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.sessions {
		if l.coversLocked(s, namespace) {
			return true
		}
	}
	return false
}

// Changed is closed at the next change of the set of sessions (a session
// welcomed, ended, or draining).
func (l *Listener) Changed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.changed
}

// SessionCount is the number of welcomed sessions.
func (l *Listener) SessionCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.sessions)
}

func (l *Listener) openFailed(code, reason string) error {
	l.met.StreamOpens.WithLabelValues(code).Inc()
	return &eventplane.BusError{Code: code, Reason: reason}
}

// OpenStream places t on the highest-weighted covering session below its
// stream cap, commands subscribe, and waits for the client's data stream.
func (l *Listener) OpenStream(ctx context.Context, t eventplane.BusTarget) (net.Conn, error) {
	wt := wire.Target{Namespace: t.Namespace, Host: t.Host, Port: t.Port, Topic: t.Topic}
	if err := wt.Validate(); err != nil {
		return nil, l.openFailed(eventplane.BusErrInvalidTarget, strings.TrimPrefix(err.Error(), wire.ErrBadMessage.Error()+": "))
	}
	l.mu.Lock()
	var cands []*session
	for _, s := range l.sessions {
		if l.coversLocked(s, t.Namespace) {
			cands = append(cands, s)
		}
	}
	if len(cands) == 0 {
		l.mu.Unlock()
		return nil, l.openFailed(eventplane.BusErrNoSession, "no live broker session covers the namespace")
	}
	weights := make(map[*session]uint64, len(cands))
	for _, s := range cands {
		weights[s] = Rendezvous(t, s.entry)
	}
	slices.SortFunc(cands, func(a, b *session) int {
		switch wa, wb := weights[a], weights[b]; {
		case wa > wb:
			return -1
		case wa < wb:
			return 1
		}
		return strings.Compare(a.entry, b.entry)
	})
	var s *session
	for _, c := range cands {
		if len(c.streams) < c.maxStreams {
			s = c
			break
		}
	}
	if s == nil {
		l.mu.Unlock()
		return nil, l.openFailed(eventplane.BusErrTooManyStreams, "every covering session is at its stream cap")
	}
	return l.openOnLocked(ctx, s, wt)
}

// openOnLocked commands subscribe on s and waits for the client's data
// stream. It is called with l.mu held and releases it.
func (l *Listener) openOnLocked(ctx context.Context, s *session, wt wire.Target) (net.Conn, error) {
	st := &stream{
		id: "st-" + randomHex(16), sess: s, target: wt,
		ready: make(chan *streamConn, 1), refused: make(chan string, 1),
	}
	if !s.enqueueLocked(wire.Message{Type: wire.TypeSubscribe, StreamID: st.id, Target: &wt}) {
		l.mu.Unlock()
		return nil, l.openFailed(eventplane.BusErrBusy, "the session's command queue is full")
	}
	l.streams[st.id] = st
	s.streams[st.id] = st
	l.met.Streams.Inc()
	timeout := l.st.OpenTimeout
	l.mu.Unlock()

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case c := <-st.ready:
		l.met.StreamOpens.WithLabelValues("opened").Inc()
		return c, nil
	case code := <-st.refused:
		return nil, l.openFailed(eventplane.BusErrRefused, "the "+clientNoun(s.role)+" refused the stream: "+code)
	case <-s.done:
		return nil, l.openFailed(eventplane.BusErrSessionClosed, "the session ended before the stream opened")
	case <-timer.C:
		l.abandon(st)
		return nil, l.openFailed(eventplane.BusErrOpenTimeout, "the "+clientNoun(s.role)+" did not open the stream in time")
	case <-ctx.Done():
		l.abandon(st)
		return nil, l.openFailed(eventplane.BusErrOpenTimeout, "cancelled: "+ctx.Err().Error())
	}
}

// abandon gives up a stream the opener no longer waits for.
func (l *Listener) abandon(st *stream) {
	l.endStream(st)
}

// clientNoun names a session's client in open errors.
func clientNoun(role string) string {
	if role == wire.RoleKVListener {
		return "kv listener"
	}
	return "broker"
}
