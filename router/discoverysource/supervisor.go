// Package discoverysource is the host side of discovery: it runs the
// discovery source the live configuration asks for (etcdsource) and replaces
// it on reload according to the change's reload class: nothing, start, stop,
// replace (reducer and registry reset), replace while keeping the snapshot
// readable (backoff only), or prune removed namespaces.
//
// The registry outlives every watcher, so consumers hold one pointer for the
// life of the process.
package discoverysource

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"switchyard/router/clock"
	"switchyard/router/config"
	"switchyard/router/discovery"
	"switchyard/router/discoverysource/etcdsource"
	"switchyard/router/events"
	"switchyard/router/metrics"
)

// stopGrace bounds the wait for a replaced watcher to return.
const stopGrace = 5 * time.Second

// Runner is a discovery source: it feeds its sink until ctx is done.
type Runner interface {
	Run(ctx context.Context) error
}

// SourceFactory builds the runner for a configuration. It returns nil for a
// source this build cannot run yet.
type SourceFactory func(cfg *config.Config, sink etcdsource.Sink, count func(string)) Runner

// Supervisor owns the live discovery source.
type Supervisor struct {
	clk       clock.Clock
	log       *slog.Logger
	metrics   *metrics.Discovery
	newSource SourceFactory
	registry  *discovery.Registry

	reloadMu sync.Mutex // serializes Apply and Stop
	cfg      atomic.Pointer[config.Config]
	cancel   context.CancelFunc
	done     chan struct{}

	// applyMu guards the follower; epoch tells a replaced watcher's late
	// batches from the current one's.
	applyMu  sync.Mutex
	follower *discovery.Follower
	epoch    atomic.Uint64

	connected atomic.Bool
	restarts  atomic.Uint64

	// rec is set before the first Apply, or never.
	rec *Recording
}

// Recording hooks a recorder into discovery. While a batch is folded, the
// supervisor holds Order, hands every event of the batch to Input in the
// order folded, and, when the registry publishes a new generation, calls
// Published before releasing Order. So a recording that takes the same
// lock for the other inputs of the routing core sees discovery exactly
// where the core applied it.
//
// A replaced reducer is handed over as an events.DiscoveryReset (a reset
// reducer is a fresh one); when the registry is emptied with it, Published
// follows even if the registry was empty already, so a replay materialises
// the reset before the next events. Event times lose their monotonic clock
// reading while recording, so every duration the core computes from them
// is the one a replay computes from the recorded wall-clock times.
type Recording struct {
	Order sync.Locker
	Input func(events.Event)
	// Published receives the registry's snapshot and the time it was
	// published at (the last event's time, or the reset's).
	Published func(snap *discovery.Snapshot, at time.Time)
}

// SetRecording records discovery from now on. Call it before the first
// Apply: a recording must see the fleet from its empty start.
func (s *Supervisor) SetRecording(r *Recording) { s.rec = r }

// New returns an idle supervisor around reg; Apply starts it.
func New(reg *discovery.Registry, clk clock.Clock, log *slog.Logger, m *metrics.Discovery, f SourceFactory) *Supervisor {
	if f == nil {
		f = EtcdSource(clk, log)
	}
	return &Supervisor{clk: clk, log: log, metrics: m, newSource: f, registry: reg}
}

// EtcdSource is the production factory: an etcd watcher for source etcd.
func EtcdSource(clk clock.Clock, log *slog.Logger) SourceFactory {
	return func(cfg *config.Config, sink etcdsource.Sink, count func(string)) Runner {
		d := cfg.Dynamo.Discovery
		if d.Source != config.SourceEtcd {
			return nil
		}
		ec := etcdsource.Config{
			Endpoints:      d.Etcd.EffectiveEndpoints(),
			Namespaces:     d.Namespaces(),
			BackoffInitial: d.Etcd.WatchReconnectBackoff.Initial.Std(),
			BackoffMax:     d.Etcd.WatchReconnectBackoff.Max.Std(),
		}
		if t := d.Etcd.TLS; t != nil {
			ec.TLS = &etcdsource.TLS{CAFile: t.CACert, CertFile: t.ClientCert, KeyFile: t.ClientKey, ServerName: t.ServerName}
		}
		if a := d.Etcd.Auth; a != nil {
			ec.Username, ec.Password = a.Username, a.Password
		}
		return etcdsource.New(ec, sink, clk, log.With("component", "etcd-discovery"), count)
	}
}

// Registry is the process-lifetime registry.
func (s *Supervisor) Registry() *discovery.Registry { return s.registry }

// Apply moves discovery to cfg (the first call starts it).
func (s *Supervisor) Apply(cfg *config.Config) {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	old := s.cfg.Load()
	change := config.DiscoveryChange(old, cfg)
	s.cfg.Store(cfg)
	switch change.Action {
	case config.ReloadNone:
		return
	case config.ReloadStop:
		s.stopWatcher()
		s.replaceFollower(true)
		s.log.Info("dynamo discovery stopped")
		return
	case config.ReloadStart:
		s.replaceFollower(true)
	case config.ReloadReplace:
		s.stopWatcher()
		s.replaceFollower(true)
	case config.ReloadReplaceKeepSnapshot:
		// The new watcher's first resync replaces each namespace atomically;
		// until then the current snapshot stays readable.
		s.stopWatcher()
	case config.ReloadPrune:
		s.stopWatcher()
		s.applyToFollower(events.DiscoveryPrune{At: s.clk.Now(), Keep: cfg.Dynamo.Discovery.Namespaces()})
	}
	if old != nil && old.Dynamo.Enabled && change.Action != config.ReloadStart {
		s.restarts.Add(1)
		s.metrics.CountDiscovery("restart")
		s.log.Info("dynamo discovery watcher replaced", "reason", change.Reason)
	}
	s.startWatcher(cfg)
}

// Stop ends discovery for good (process shutdown).
func (s *Supervisor) Stop() {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	s.stopWatcher()
}

func (s *Supervisor) startWatcher(cfg *config.Config) {
	epoch := s.epoch.Add(1)
	sink := &epochSink{s: s, epoch: epoch}
	r := s.newSource(cfg, sink, s.metrics.CountDiscovery)
	if r == nil {
		s.log.Warn("dynamo discovery source is not active yet in this build", "source", cfg.Dynamo.Discovery.Source)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	s.cancel, s.done = cancel, done
	go func() {
		defer close(done)
		if err := r.Run(ctx); err != nil {
			s.log.Error("dynamo discovery source stopped", "error", err)
		}
	}()
}

// stopWatcher cancels the running watcher and waits up to stopGrace. A
// watcher that overstays is abandoned: the epoch bump already makes its
// batches no-ops.
func (s *Supervisor) stopWatcher() {
	s.epoch.Add(1)
	s.setConnected(false)
	if s.cancel == nil {
		return
	}
	s.cancel()
	t := s.clk.NewTimer(stopGrace)
	defer t.Stop()
	select {
	case <-s.done:
	case <-t.C():
		s.log.Warn("dynamo discovery watcher did not stop within the grace period; abandoning it", "grace", stopGrace)
	}
	s.cancel, s.done = nil, nil
}

// replaceFollower starts a new reducer; with reset it also publishes an
// empty view so the registry forgets the old fleet.
func (s *Supervisor) replaceFollower(reset bool) {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	if s.rec != nil {
		s.rec.Order.Lock()
		defer s.rec.Order.Unlock()
	}
	s.follower = discovery.NewFollower(discovery.NewReducer(s.log.With("component", "discovery"), s.metrics.CountDiscovery), s.registry)
	at := s.clk.Now()
	if s.rec != nil {
		at = at.Round(0)
		s.rec.Input(events.DiscoveryReset{At: at})
	}
	if reset {
		s.registry.Publish(&discovery.View{}, at)
		if s.rec != nil {
			s.rec.Published(s.registry.Snapshot(), at)
		}
		s.metrics.ObserveSnapshot(s.registry.Snapshot())
	}
}

func (s *Supervisor) applyToFollower(ev events.Event) {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	s.fold([]events.Event{ev})
}

// fold applies a batch to the follower, which publishes the resulting
// view; while recording, under the recording's order lock, with every
// event and a moved generation handed to it. The caller holds applyMu.
func (s *Supervisor) fold(batch []events.Event) {
	if s.rec == nil || len(batch) == 0 {
		s.follower.Apply(batch)
		s.metrics.ObserveSnapshot(s.registry.Snapshot())
		return
	}
	batch = wallClock(batch)
	s.rec.Order.Lock()
	before := s.registry.Snapshot()
	for _, ev := range batch {
		s.rec.Input(ev)
	}
	s.follower.Apply(batch)
	if snap := s.registry.Snapshot(); snap != before {
		s.rec.Published(snap, batch[len(batch)-1].Time())
	}
	s.rec.Order.Unlock()
	s.metrics.ObserveSnapshot(s.registry.Snapshot())
}

// wallClock returns the batch with every event time stripped of its
// monotonic clock reading (a copy: the watcher owns its slice).
func wallClock(batch []events.Event) []events.Event {
	out := make([]events.Event, len(batch))
	for i, ev := range batch {
		switch e := ev.(type) {
		case events.DiscoveryPut:
			e.At = e.At.Round(0)
			ev = e
		case events.DiscoveryDelete:
			e.At = e.At.Round(0)
			ev = e
		case events.DiscoveryResync:
			e.At = e.At.Round(0)
			ev = e
		case events.DiscoveryPrune:
			e.At = e.At.Round(0)
			ev = e
		case events.DiscoveryReset:
			e.At = e.At.Round(0)
			ev = e
		}
		out[i] = ev
	}
	return out
}

func (s *Supervisor) setConnected(c bool) {
	s.connected.Store(c)
	if c {
		s.metrics.Connected.Set(1)
	} else {
		s.metrics.Connected.Set(0)
	}
}

// epochSink hands one watcher's batches to the follower while that watcher
// is current.
type epochSink struct {
	s     *Supervisor
	epoch uint64
}

func (e *epochSink) Apply(batch []events.Event) {
	s := e.s
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	if s.epoch.Load() != e.epoch {
		return
	}
	s.fold(batch)
}

func (e *epochSink) SetConnected(c bool) {
	s := e.s
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	if s.epoch.Load() == e.epoch {
		s.setConnected(c)
	}
}

// Status for the admin API.

// Enabled reports whether dynamo discovery is enabled in the live config.
func (s *Supervisor) Enabled() bool {
	c := s.config()
	return c != nil && c.Dynamo.Enabled
}

// Connected reports whether the current watcher's watches are all open.
func (s *Supervisor) Connected() bool { return s.connected.Load() }

// Source names the configured discovery source.
func (s *Supervisor) Source() string {
	if c := s.config(); c != nil {
		return c.Dynamo.Discovery.Source
	}
	return ""
}

// Namespaces lists the configured Dynamo namespaces.
func (s *Supervisor) Namespaces() []string {
	if c := s.config(); c != nil {
		return c.Dynamo.Discovery.Namespaces()
	}
	return nil
}

// Snapshot is the registry's current snapshot.
func (s *Supervisor) Snapshot() *discovery.Snapshot { return s.registry.Snapshot() }

// Restarts counts watcher replacements.
func (s *Supervisor) Restarts() uint64 { return s.restarts.Load() }

func (s *Supervisor) config() *config.Config { return s.cfg.Load() }
