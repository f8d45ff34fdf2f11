package bus

import (
	"context"
	"log/slog"
	"net"
	"reflect"
	"sync"
	"time"

	"switchyard/router/config"
	"switchyard/router/eventplane"
)

// RetryInterval is the wait between attempts to start the listener.
const RetryInterval = 30 * time.Second

// Host runs the listener inside switchyard serve. Every field of
// dynamo.event_bus applies without a restart and without touching
// discovery: enabling starts the listener, disabling closes it (its
// sessions end), a new listen address is bound before the old socket
// closes (connections and sessions on it carry on), and brokers, tokens,
// certificates and limits apply to the running listener. A start or a
// rebind that fails (port in use, unreadable certificate) is retried every
// RetryInterval. While no listener runs, no session covers anything.
type Host struct {
	log   *slog.Logger
	met   *Metrics
	retry time.Duration

	// opMu serializes reconcile: Reload applies synchronously, the run
	// loop retries.
	opMu sync.Mutex

	mu      sync.Mutex
	cfg     config.EventBus // wanted
	applied config.EventBus // what the running listener's settings came from
	l       *Listener
	ln      net.Listener  // the socket accepting now
	bound   string        // the listen address ln was bound for
	failing bool          // the last reconcile failed: retry
	waiting chan struct{} // closed when a listener starts

	kick   chan struct{} // reconcile now
	rearm  chan struct{} // Reload reconciled: arm or disarm the retry
	serves sync.WaitGroup
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

var _ eventplane.Bus = (*Host)(nil)

// StartHost follows c in the background: the listener starts when c is
// enabled.
func StartHost(c config.EventBus, log *slog.Logger, met *Metrics) *Host {
	return startHost(c, log, met, RetryInterval)
}

func startHost(c config.EventBus, log *slog.Logger, met *Metrics, retry time.Duration) *Host {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if met == nil {
		met = NewMetrics()
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &Host{log: log, met: met, retry: retry, cfg: c, waiting: make(chan struct{}),
		kick: make(chan struct{}, 1), rearm: make(chan struct{}, 1), ctx: ctx, cancel: cancel, done: make(chan struct{})}
	go h.run()
	return h
}

func (h *Host) run() {
	defer close(h.done)
	var timer *time.Timer
	var retry <-chan time.Time
	now := true
	for {
		if now {
			h.opMu.Lock()
			h.reconcile()
			h.opMu.Unlock()
		}
		if timer != nil {
			timer.Stop()
			timer, retry = nil, nil
		}
		h.mu.Lock()
		failing := h.failing
		h.mu.Unlock()
		if failing {
			timer = time.NewTimer(h.retry)
			retry = timer.C
		}
		select {
		case <-h.ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			h.opMu.Lock()
			if l := h.Listener(); l != nil {
				l.Close()
			}
			h.opMu.Unlock()
			h.serves.Wait()
			return
		case <-h.kick:
			now = true
		case <-h.rearm:
			now = false // Reload reconciled; only the retry timer follows
		case <-retry:
			now = true
		}
	}
}

// wake makes the run loop reconcile.
func (h *Host) wake() {
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

func (h *Host) config() config.EventBus {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cfg
}

// sameSettings reports whether a and b give the listener the same
// settings: everything but enabled and listen.
func sameSettings(a, b config.EventBus) bool {
	a.Enabled, a.Listen, b.Enabled, b.Listen = false, "", false, ""
	return reflect.DeepEqual(a, b)
}

// reconcile moves the running listener toward the wanted configuration;
// h.failing says whether a step failed and must be retried. Under opMu.
func (h *Host) reconcile() {
	c := h.config()
	h.mu.Lock()
	l, ln, bound := h.l, h.ln, h.bound
	h.mu.Unlock()
	h.setFailing(false)
	if h.ctx.Err() != nil {
		return
	}
	if !c.Enabled {
		if l != nil {
			h.log.Info("event bus listener stopped: dynamo.event_bus.enabled is off")
			h.mu.Lock()
			h.l, h.ln, h.bound = nil, nil, ""
			h.waiting = make(chan struct{})
			h.mu.Unlock()
			l.Close()
		}
		return
	}
	if l == nil {
		h.start(c)
		return
	}
	if !sameSettings(c, h.applied) {
		s, err := FromConfig(c)
		if err == nil {
			err = l.Reload(s)
		}
		if err != nil {
			h.log.Error("event bus reload refused; the previous settings stay", "error", err)
		} else {
			h.log.Info("event bus settings reloaded")
		}
		h.applied = c // a refused reload is not retried: the next one is
	}
	if c.Listen != bound {
		nln, err := net.Listen("tcp", c.Listen)
		if err != nil {
			h.log.Error("event bus listener failed to rebind; retrying", "listen", c.Listen, "in", h.retry, "error", err)
			h.setFailing(true)
			return
		}
		h.mu.Lock()
		h.ln, h.bound = nln, c.Listen
		h.mu.Unlock()
		h.serve(l, nln)
		if ln != nil {
			ln.Close() // connections already accepted carry on
		}
		h.log.Info("event bus listening", "addr", nln.Addr().String())
	}
}

func (h *Host) setFailing(f bool) {
	h.mu.Lock()
	h.failing = f
	h.mu.Unlock()
}

// start makes and serves the listener of c.
func (h *Host) start(c config.EventBus) {
	fail := func(err error) {
		h.log.Error("event bus listener failed to start; retrying", "listen", c.Listen, "in", h.retry, "error", err)
		h.setFailing(true)
	}
	s, err := FromConfig(c)
	if err != nil {
		fail(err)
		return
	}
	l, err := New(s, h.log, h.met)
	if err != nil {
		fail(err)
		return
	}
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		fail(err)
		return
	}
	h.mu.Lock()
	h.l, h.ln, h.bound, h.applied = l, ln, c.Listen, c
	close(h.waiting)
	h.mu.Unlock()
	h.serve(l, ln)
	h.log.Info("event bus listening", "addr", ln.Addr().String())
}

// serve accepts on ln until it closes; an unexpected end of the socket
// that is current makes the run loop bind it again.
func (h *Host) serve(l *Listener, ln net.Listener) {
	h.serves.Go(func() {
		err := l.Serve(ln)
		h.mu.Lock()
		current := h.ln == ln
		if current && err != nil {
			h.ln, h.bound = nil, ""
		}
		h.mu.Unlock()
		if current && err != nil {
			h.log.Error("event bus listener stopped accepting; binding again", "error", err)
			h.wake()
		}
	})
}

// Reload applies c before it returns: the listener starts, stops, rebinds
// or takes the new settings. A failed start or rebind is retried every
// RetryInterval; a refused setting keeps the previous ones.
func (h *Host) Reload(c config.EventBus) {
	h.opMu.Lock()
	h.mu.Lock()
	h.cfg = c
	h.mu.Unlock()
	h.reconcile()
	h.opMu.Unlock()
	select {
	case h.rearm <- struct{}{}:
	default:
	}
}

// Listener is the running listener, nil while none runs.
func (h *Host) Listener() *Listener {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.l
}

// Addr is the address the listener accepts on, "" while none runs.
func (h *Host) Addr() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ln == nil {
		return ""
	}
	return h.ln.Addr().String()
}

// Close stops the listener and the retries.
func (h *Host) Close() {
	h.cancel()
	<-h.done
}

// Metrics are the listener's collectors.
func (h *Host) Metrics() *Metrics { return h.met }

// OpenStream is the running listener's; before it runs: no_session.
func (h *Host) OpenStream(ctx context.Context, t eventplane.BusTarget) (net.Conn, error) {
	if l := h.Listener(); l != nil {
		return l.OpenStream(ctx, t)
	}
	h.met.StreamOpens.WithLabelValues(eventplane.BusErrNoSession).Inc()
	return nil, &eventplane.BusError{Code: eventplane.BusErrNoSession, Reason: "the event bus listener is not running"}
}

// Covers is the running listener's; false before it runs.
func (h *Host) Covers(namespace string) bool {
	if l := h.Listener(); l != nil {
		return l.Covers(namespace)
	}
	return false
}

// Sessions is the running listener's count of live, non-draining
// sessions covering namespace; 0 while none runs.
func (h *Host) Sessions(namespace string) int {
	if l := h.Listener(); l != nil {
		return l.Sessions(namespace)
	}
	return 0
}

// Changed is the running listener's; while none runs, a channel closed
// when one starts.
func (h *Host) Changed() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.l != nil {
		return h.l.Changed()
	}
	return h.waiting
}
