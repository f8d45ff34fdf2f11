package eventplane

import (
	"context"
	"net"
)

// The event-bus seam: with dynamo.load.transport broker, subscriptions run
// the same bounded ZMTP client over streams an in-cluster broker relays,
// instead of dialing publishers. The router's event-bus listener
// implements Bus; the subscription supervisor only consumes it.

// BusTarget names the publisher a broker is asked to connect to: the
// publisher's Dynamo namespace, its advertised host and port, and the
// subscription's topic (empty: every topic).
type BusTarget struct {
	Namespace string
	Host      string
	Port      uint16
	Topic     string
}

// Bus opens relayed streams through broker sessions.
type Bus interface {
	// OpenStream places the target on a live, non-draining broker
	// session covering its namespace and returns the stream carrying the
	// publisher's raw bytes. The stream's Close unsubscribes. Errors are
	// *BusError.
	OpenStream(ctx context.Context, t BusTarget) (net.Conn, error)
	// Covers reports whether a live, non-draining session covers the
	// namespace.
	Covers(namespace string) bool
	// Changed returns a channel that is closed at the next change of the
	// set of sessions, so pending subscriptions wait without polling.
	Changed() <-chan struct{}
}

// Carried is implemented by a relayed stream that knows the broker
// session carrying it: Carrier is that broker's configured id (a
// brokers[].id, so a closed set).
type Carried interface {
	Carrier() string
}

// BusError is why a stream could not be opened.
type BusError struct {
	// Code is one of the BusErr* codes: a closed set, safe as a metric
	// label.
	Code string
	// Reason is a redacted explanation (no credentials, no session ids).
	Reason string
}

func (e *BusError) Error() string { return "event bus: " + e.Code + ": " + e.Reason }

// Codes of BusError.
const (
	BusErrNoSession      = "no_session"
	BusErrTooManyStreams = "too_many_streams"
	BusErrRefused        = "refused"
	BusErrOpenTimeout    = "open_timeout"
	BusErrSessionClosed  = "session_closed"
	BusErrBusy           = "busy"
	BusErrInvalidTarget  = "invalid_target"
)
