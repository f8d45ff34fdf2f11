package eventplane

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"switchyard/router/clock"
	"switchyard/router/eventplane/zmtp"
)

// Broker transport bounds and timings.
const (
	// BusOpenTimeout bounds one OpenStream: placing the target on a
	// broker session and the broker's connection to the publisher.
	BusOpenTimeout = 30 * time.Second
	// BusConnectBudget bounds the ZMTP handshake over an opened stream,
	// the relayed counterpart of a direct dial's ConnectTimeout.
	BusConnectBudget = 10 * time.Second
	// BusCloseTimeout bounds closing a relayed stream (its Close tells the
	// broker to unsubscribe); a Close that takes longer is abandoned.
	BusCloseTimeout = time.Second
	// PendingWakeJitter is the most a pending subscription waits, uniform
	// and seeded, after a covering session appears, so a broker that
	// connects is not met by every subscription of its namespace at once.
	PendingWakeJitter = 500 * time.Millisecond
	// SessionLossGrace is how long after a relayed stream ends the
	// subscription watches the bus for the end of the session that
	// carried it; a lost carrier reconnects at the BackoffInitial floor.
	SessionLossGrace = 500 * time.Millisecond
)

// Connector opens the byte stream a subscription's ZMTP client runs
// over: a TCP connection to the publisher (DirectConnector) or a stream
// an event-bus broker relays (BrokerConnector). Everything above the
// stream (the handshake, the ceilings, decoding, the publisher-id check,
// deduplication and the gap rule) is the same for both and runs in the
// router.
type Connector interface {
	// Transport is TransportDirect or TransportBroker.
	Transport() string
	// Connect opens a stream to the target's publisher.
	Connect(ctx context.Context, t Target, topic []byte) (net.Conn, error)
}

// DirectConnector dials publishers under the direct dial policy.
type DirectConnector struct{ Dialer *Dialer }

func (DirectConnector) Transport() string { return TransportDirect }

func (d DirectConnector) Connect(ctx context.Context, t Target, _ []byte) (net.Conn, error) {
	return d.Dialer.Dial(ctx, t.HostPort)
}

// BrokerConnector opens relayed streams through the event bus. Its
// errors are *BusError with redacted reasons.
type BrokerConnector struct {
	Bus   Bus
	Clock clock.Clock
}

func (BrokerConnector) Transport() string { return TransportBroker }

func (b BrokerConnector) Connect(ctx context.Context, t Target, topic []byte) (net.Conn, error) {
	bt, err := busTarget(t, topic)
	if err != nil {
		return nil, err
	}
	octx, cancel := context.WithTimeout(ctx, BusOpenTimeout)
	defer cancel()
	conn, err := b.Bus.OpenStream(octx, bt)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if octx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
			return nil, &BusError{Code: BusErrOpenTimeout, Reason: "stream not opened within " + BusOpenTimeout.String()}
		}
		return nil, redactBusError(err)
	}
	clk := b.Clock
	if clk == nil {
		clk = clock.Real{}
	}
	return &boundedClose{Conn: conn, clk: clk}, nil
}

// busTarget is the broker's view of a target: its namespace, host, port
// and the topic the subscription filters on.
func busTarget(t Target, topic []byte) (BusTarget, error) {
	host, port, err := net.SplitHostPort(t.HostPort)
	if err != nil || host == "" {
		return BusTarget{}, &BusError{Code: BusErrInvalidTarget, Reason: "endpoint is not host:port"}
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return BusTarget{}, &BusError{Code: BusErrInvalidTarget, Reason: "endpoint port is not 1-65535"}
	}
	return BusTarget{Namespace: t.Namespace, Host: host, Port: uint16(n), Topic: string(topic)}, nil
}

// redactBusError keeps a *BusError (whose reason the bus redacts) and
// replaces anything else, whose text the router cannot vouch for, with a
// refusal naming no detail.
func redactBusError(err error) error {
	var be *BusError
	if errors.As(err, &be) {
		return be
	}
	if errors.Is(err, context.Canceled) {
		return err
	}
	return &BusError{Code: BusErrRefused, Reason: "the event bus did not open the stream"}
}

// relayedErrText renders how a relayed session ended without passing on
// text the bus's stream might carry: protocol violations (the router's
// own), a clean end of stream, a bus error, or a generic end.
func relayedErrText(err error) string {
	var be *BusError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &be):
		return be.Error()
	case zmtp.IsProtocolError(err), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return err.Error()
	case errors.Is(err, net.ErrClosed), errors.Is(err, io.ErrClosedPipe):
		return "event bus stream closed"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "event bus stream timed out"
	}
	return "event bus stream ended"
}

// sessionClosed reports a stream that ended because its broker session did.
func sessionClosed(err error) bool {
	var be *BusError
	return errors.As(err, &be) && be.Code == BusErrSessionClosed
}

// boundedClose closes a relayed stream within BusCloseTimeout: a Close
// that blocks (a broker that does not acknowledge the unsubscribe) is
// left to finish on its own.
type boundedClose struct {
	net.Conn
	clk  clock.Clock
	once sync.Once
	err  error
}

// Carrier is the relayed stream's broker id, "" when the bus does not say.
func (c *boundedClose) Carrier() string {
	if cc, ok := c.Conn.(Carried); ok {
		return cc.Carrier()
	}
	return ""
}

func (c *boundedClose) Close() error {
	c.once.Do(func() {
		done := make(chan error, 1)
		go func() { done <- c.Conn.Close() }()
		timer := c.clk.NewTimer(BusCloseTimeout)
		defer timer.Stop()
		select {
		case err := <-done:
			c.err = err
		case <-timer.C():
			c.err = &BusError{Code: BusErrBusy, Reason: "stream close not acknowledged within " + BusCloseTimeout.String()}
		}
	})
	return c.err
}

// waitCovered returns once a session covers ns (true), or when ctx ends
// (false). It waits on bus.Changed, never polls; pending is called once,
// before the first wait, if no session covers ns yet.
func waitCovered(ctx context.Context, bus Bus, ns string, pending func()) (waited, ok bool) {
	for {
		ch := bus.Changed()
		if bus.Covers(ns) {
			return waited, true
		}
		if !waited {
			waited = true
			pending()
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return waited, false
		}
	}
}

// carrierLost reports whether the session set changed while the stream
// was open (changed already closed) or changes within SessionLossGrace of
// its end: the broker session carrying it is then taken to be gone. It
// returns how long it waited.
func carrierLost(ctx context.Context, clk clock.Clock, changed <-chan struct{}, err error) (bool, time.Duration) {
	if sessionClosed(err) {
		return true, 0
	}
	select {
	case <-changed:
		return true, 0
	default:
	}
	start := clk.Now()
	timer := clk.NewTimer(SessionLossGrace)
	defer timer.Stop()
	select {
	case <-changed:
		return true, clk.Now().Sub(start)
	case <-timer.C():
	case <-ctx.Done():
	}
	return false, clk.Now().Sub(start)
}
