package bus

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"time"

	"switchyard/router/config"
	"switchyard/router/eventplane"
)

// RetryInterval is the wait between attempts to start the listener.
const RetryInterval = 30 * time.Second

// Host runs the listener inside switchyard serve: it (re)tries the start
// every RetryInterval until the port and the certificate are usable, and
// applies reloads of brokers, tokens, certificates and limits without a
// restart. Until the listener runs, no session covers anything.
type Host struct {
	log   *slog.Logger
	met   *Metrics
	retry time.Duration

	mu      sync.Mutex
	cfg     config.EventBus
	l       *Listener
	waiting chan struct{} // closed when l is set

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

var _ eventplane.Bus = (*Host)(nil)

// StartHost starts the listener of c in the background.
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
	h := &Host{log: log, met: met, retry: retry, cfg: c, waiting: make(chan struct{}), ctx: ctx, cancel: cancel, done: make(chan struct{})}
	go h.run()
	return h
}

func (h *Host) run() {
	defer close(h.done)
	for {
		err := h.start()
		if err == nil {
			return
		}
		h.log.Error("event bus listener failed to start; retrying", "listen", h.config().Listen, "in", h.retry, "error", err)
		t := time.NewTimer(h.retry)
		select {
		case <-h.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func (h *Host) config() config.EventBus {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cfg
}

// start makes the listener and serves it until the host closes; an error
// is a failed start.
func (h *Host) start() error {
	c := h.config()
	s, err := FromConfig(c)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return err
	}
	l, err := New(s, h.log, h.met)
	if err != nil {
		ln.Close()
		return err
	}
	h.mu.Lock()
	if h.ctx.Err() != nil {
		h.mu.Unlock()
		ln.Close()
		return nil
	}
	h.l = l
	close(h.waiting)
	h.mu.Unlock()
	h.log.Info("event bus listening", "addr", ln.Addr().String())
	serveErr := make(chan error, 1)
	go func() { serveErr <- l.Serve(ln) }()
	select {
	case <-h.ctx.Done():
		l.Close()
		<-serveErr
	case err := <-serveErr:
		if err != nil {
			h.log.Error("event bus listener stopped", "error", err)
		}
	}
	return nil
}

// Reload applies c: brokers, tokens, certificate, client CA and limits
// take effect at once; a changed listen address after a restart.
func (h *Host) Reload(c config.EventBus) {
	h.mu.Lock()
	if c.Listen != h.cfg.Listen && h.l != nil {
		h.log.Warn("dynamo.event_bus.listen changes take effect after a restart")
		c.Listen = h.cfg.Listen
	}
	h.cfg = c
	l := h.l
	h.mu.Unlock()
	if l == nil {
		return // the next start attempt reads the new configuration
	}
	s, err := FromConfig(c)
	if err == nil {
		err = l.Reload(s)
	}
	if err != nil {
		h.log.Error("event bus reload refused; the previous settings stay", "error", err)
	}
}

// Listener is the running listener, nil before it started.
func (h *Host) Listener() *Listener {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.l
}

// Close stops the listener and the retries.
func (h *Host) Close() {
	h.mu.Lock()
	h.cancel()
	h.mu.Unlock()
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

// Changed is the running listener's; before it runs, a channel closed
// when it starts.
func (h *Host) Changed() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.l != nil {
		return h.l.Changed()
	}
	return h.waiting
}
