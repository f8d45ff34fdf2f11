package bus

import (
	"context"
	"net"
	"slices"
	"strings"

	"switchyard/router/bus/wire"
	"switchyard/router/eventplane"
)

// Announced sources: a kv_listener session announces the backends whose
// KV-cache events it serves as SSE, and the router asks for one with the
// last event id it applied. Unlike a broker's publishers, a backend's
// stream is the same whichever listener serves it, so placement needs no
// agreement between router replicas: the least-loaded session wins.

func (l *Listener) announcesLocked(s *session, backend string) bool {
	return !s.ended && !s.draining && s.role == wire.RoleKVListener && slices.Contains(s.sources, backend)
}

// Announces reports whether a live, non-draining kv_listener session
// announced backend.
func (l *Listener) Announces(backend string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.sessions {
		if l.announcesLocked(s, backend) {
			return true
		}
	}
	return false
}

// OpenAnnouncedStream places backend on the live, non-draining
// kv_listener session that announced it and holds the fewest streams
// (ties: the smaller client id), commands subscribe with lastEventID
// (nil: from the oldest event the listener holds), and returns the stream
// carrying the source's SSE bytes. Its Close unsubscribes; a draining
// listener's streams end at once. Errors are *eventplane.BusError.
func (l *Listener) OpenAnnouncedStream(ctx context.Context, backend string, lastEventID *uint64) (net.Conn, error) {
	wt := wire.Target{Backend: backend}
	if lastEventID != nil {
		id := *lastEventID
		wt.LastEventID = &id
	}
	if backend == "" {
		return nil, l.openFailed(eventplane.BusErrInvalidTarget, "target.backend is required")
	}
	if err := wt.Validate(); err != nil {
		return nil, l.openFailed(eventplane.BusErrInvalidTarget, strings.TrimPrefix(err.Error(), wire.ErrBadMessage.Error()+": "))
	}
	l.mu.Lock()
	var best *session
	announced := false
	for _, s := range l.sessions {
		if !l.announcesLocked(s, backend) {
			continue
		}
		announced = true
		if len(s.streams) >= s.maxStreams {
			continue
		}
		if best == nil || len(s.streams) < len(best.streams) ||
			len(s.streams) == len(best.streams) && s.entry < best.entry {
			best = s
		}
	}
	if best == nil {
		l.mu.Unlock()
		if announced {
			return nil, l.openFailed(eventplane.BusErrTooManyStreams, "every session announcing the backend is at its stream cap")
		}
		return nil, l.openFailed(eventplane.BusErrNoSession, "no live kv_listener session announces the backend")
	}
	return l.openOnLocked(ctx, best, wt)
}

// OpenAnnouncedStream is the running listener's; before it runs:
// no_session.
func (h *Host) OpenAnnouncedStream(ctx context.Context, backend string, lastEventID *uint64) (net.Conn, error) {
	if l := h.Listener(); l != nil {
		return l.OpenAnnouncedStream(ctx, backend, lastEventID)
	}
	h.met.StreamOpens.WithLabelValues(eventplane.BusErrNoSession).Inc()
	return nil, &eventplane.BusError{Code: eventplane.BusErrNoSession, Reason: "the event bus listener is not running"}
}

// Announces is the running listener's; false before it runs.
func (h *Host) Announces(backend string) bool {
	if l := h.Listener(); l != nil {
		return l.Announces(backend)
	}
	return false
}
