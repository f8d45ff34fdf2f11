package eventplane

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net"
	"time"

	"switchyard/router/clock"
	"switchyard/router/envelope"
	"switchyard/router/eventplane/zmtp"
)

// ParkAfter is how long after a message began a direct session's goroutine
// waits for the next before the session parks: the goroutine ends, the read
// buffer goes back to a shared pool, and the poller starts a new goroutine
// once the connection is readable again (a message, a PING, a close). A
// busy stream never parks; an idle one holds neither a goroutine nor
// buffers. Relayed (broker) streams have no descriptor to poll and never
// park.
const ParkAfter = time.Second

// runner is one subscription's life: connect (under the broker transport,
// once a session covers the namespace), handshake, read until the session
// ends, back off, again, until cancelled; then it closes done. While a
// direct session is idle it parks and no goroutine runs it; the poller's
// lock orders each hand-over to the goroutine that resumes it, so at most
// one goroutine runs a runner at any time and the sink's calls for the
// publisher never overlap and stay in order.
type runner struct {
	s         *Supervisor
	ctx       context.Context
	sub       *subscription
	p         Policy
	rng       *rand.Rand
	log       *slog.Logger
	connector Connector
	broker    bool

	// Reconnect state across sessions.
	delay   time.Duration
	lastErr string
	changed <-chan struct{} // the bus's change signal when the session began

	// The session in progress.
	stream   net.Conn
	z        *zmtp.Sub
	slot     *parkSlot // nil: the session reads with its goroutine throughout
	noPark   bool      // the poller refused this session: stay on the goroutine
	res      sessionResult
	began    time.Time
	endErr   error  // why the last session ended
	resumeFn func() // r.resume, bound once so parking allocates nothing
}

func newRunner(s *Supervisor, ctx context.Context, sub *subscription, p Policy, rng *rand.Rand) *runner {
	t := sub.target
	r := &runner{s: s, ctx: ctx, sub: sub, p: p, rng: rng, connector: p.connector(s.clk),
		log: s.log.With("topic", t.Topic, "namespace", t.Namespace, "publisher_id", t.PublisherID)}
	r.broker = r.connector != nil && r.connector.Transport() == TransportBroker
	r.resumeFn = r.resume
	return r
}

func (r *runner) start() { go r.run() }

func (r *runner) run() {
	if r.connector == nil {
		r.s.setState(r.sub, Pending) // broker without an event bus: never dials directly
		<-r.ctx.Done()
		close(r.sub.done)
		return
	}
	r.delay = BackoffInitial
	r.loop()
}

// loop runs sessions until the subscription is cancelled (it then closes
// done) or a session parks (it returns at once, leaving the rest to the
// goroutine that resumes it).
func (r *runner) loop() {
	t := r.sub.target
	for r.ctx.Err() == nil {
		if r.broker {
			waited, ok := waitCovered(r.ctx, r.p.Bus, t.Namespace, func() {
				r.s.setState(r.sub, Pending)
				r.log.Info("no event-bus session covers the namespace; subscription pending")
			})
			if !ok {
				break
			}
			if waited {
				// A broker that connects is not met by every subscription
				// of its namespace at once.
				jitter := time.Duration(r.rng.Int64N(int64(PendingWakeJitter) + 1))
				if !clock.Sleep(r.s.clk, jitter, r.ctx.Done()) {
					break
				}
				r.delay, r.lastErr = BackoffInitial, ""
			}
		}
		r.s.setState(r.sub, Connecting)
		r.changed = nil
		if r.broker {
			r.changed = r.p.Bus.Changed()
		}
		err := r.open()
		if err == nil {
			if r.read() {
				return // parked
			}
			err = r.endErr
		}
		if !r.ended(err) {
			break
		}
	}
	close(r.sub.done)
}

// resume continues a parked session on a new goroutine.
func (r *runner) resume() {
	r.sub.parked.Store(false)
	if r.read() {
		return // parked again
	}
	if r.ended(r.endErr) {
		r.loop()
		return
	}
	close(r.sub.done)
}

// open opens a stream and handshakes; r.res says how far it got.
func (r *runner) open() error {
	t := r.sub.target
	r.res = sessionResult{}
	conn, err := r.connector.Connect(r.ctx, t, r.s.fam.prefix())
	if err != nil {
		return err
	}
	r.res.opened = true
	if !r.sub.setConn(conn) {
		return context.Canceled
	}
	r.stream = conn
	if cc, ok := conn.(Carried); ok {
		if id := cc.Carrier(); id != "" {
			r.sub.carrier.Store(&id)
		}
	}
	lim := r.s.fam.Limits
	if r.broker {
		lim.HandshakeTimeout = min(lim.HandshakeTimeout, BusConnectBudget)
	}
	z, err := zmtp.Handshake(conn, [][]byte{r.s.fam.prefix()}, lim)
	if err != nil {
		r.closeStream()
		return err
	}
	r.z = z
	r.slot, r.noPark = nil, false
	if !r.broker {
		r.slot = newParkSlot(conn)
	}
	r.sub.setSlot(r.slot)
	r.began = r.s.clk.Now()
	r.s.fam.Sink.Connected(t.Namespace, t.PublisherID, r.began)
	r.sub.down.Store(0)
	r.s.setState(r.sub, Connected)
	return nil
}

// read delivers messages until the session ends (false; r.endErr says
// why) or parks (true: the calling goroutine must return at once, since
// the one that resumes the session may already run).
func (r *runner) read() bool {
	t := r.sub.target
	for {
		var frames [][]byte
		var err error
		if r.slot != nil {
			frames, err = r.z.ReadMessageOrIdle(ParkAfter)
			if err == zmtp.ErrIdle {
				if r.park() {
					return true
				}
				continue
			}
		} else {
			frames, err = r.z.ReadMessage()
		}
		if err != nil {
			r.endSession(err)
			return false
		}
		r.s.fam.Sink.Deliver(t.Namespace, t.PublisherID, frames, r.s.clk.Now())
	}
}

// park hands the idle session to the poller. It reports false when the
// session must go on reading here: its connection just closed (the next
// read says so), or the poller refused it (then it never tries again).
func (r *runner) park() bool {
	if r.noPark {
		return false
	}
	r.z.ReleaseBuffers()
	r.sub.parked.Store(true)
	err := r.slot.park(r.resumeFn)
	if err == nil {
		return true
	}
	r.sub.parked.Store(false)
	if err != errConnClosed {
		r.noPark = true
		r.log.Warn("an idle subscription could not park; it keeps a reading goroutine", "error", err.Error())
	}
	return false
}

// endSession closes the stream of a session that ended with err.
func (r *runner) endSession(err error) {
	t := r.sub.target
	end := r.s.clk.Now()
	r.sub.down.Store(end.UnixNano())
	if ss, ok := r.s.fam.Sink.(SessionSink); ok && !r.sub.stopped() {
		// A stopped subscription reports Unsubscribed, or its
		// replacement Subscribed, instead.
		ss.Disconnected(t.Namespace, t.PublisherID, end)
	}
	r.res.connected = end.Sub(r.began)
	r.endErr = err
	r.closeStream()
}

func (r *runner) closeStream() {
	r.stream.Close()
	r.sub.carrier.Store(nil)
	r.sub.setSlot(nil)
	if r.slot != nil {
		r.slot.release()
	}
	r.stream, r.z, r.slot = nil, nil, nil
}

// ended follows a session's end with err: it counts and logs it and waits
// the reconnect delay. It reports whether to connect again (false once
// cancelled).
func (r *runner) ended(err error) bool {
	if r.ctx.Err() != nil {
		return false
	}
	t := r.sub.target
	if r.broker && !r.res.opened && isNoSession(err) && !r.p.Bus.Covers(t.Namespace) {
		return true // the covering session left before the stream opened: pending again
	}
	if zmtp.IsProtocolError(err) {
		r.s.count(envelope.TransportRefused)
	}
	msg := errText(err)
	if r.broker {
		msg = relayedErrText(err)
	}
	lost, graced := false, time.Duration(0)
	if r.broker && r.res.opened {
		lost, graced = carrierLost(r.ctx, r.s.clk, r.changed, err)
		if r.ctx.Err() != nil {
			return false
		}
	}
	if lost {
		// Single-reconnect failover: the reconnect delay stays at its
		// floor and OpenStream places the subscription on another
		// covering session (or it waits pending for one).
		r.log.Info("the event-bus session carrying the subscription ended; re-placing it",
			"session", r.res.connected, "reconnect_in", BackoffInitial)
		r.lastErr = msg
		r.delay = BackoffInitial
	} else if msg != r.lastErr {
		r.lastErr = msg
		logSessionEnd(r.log, err, msg, r.res.connected)
	}
	if r.res.connected >= StableSession {
		r.delay = BackoffInitial
	}
	r.s.setState(r.sub, Backoff)
	// Full jitter above the floor, so a fleet-wide blip does not make
	// every subscription reconnect in step.
	wait := BackoffInitial + time.Duration(r.rng.Int64N(int64(r.delay-BackoffInitial)+1))
	if lost {
		wait = BackoffInitial
	} else {
		r.delay = min(2*r.delay, BackoffMax)
	}
	wait = max(wait-graced, 0)
	return clock.Sleep(r.s.clk, wait, r.ctx.Done())
}

func isNoSession(err error) bool {
	var be *BusError
	return errors.As(err, &be) && be.Code == BusErrNoSession
}

// sessionResult is how far a session got: whether its stream opened and
// how long it was connected.
type sessionResult struct {
	opened    bool
	connected time.Duration
}
