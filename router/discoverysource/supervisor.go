// Package discoverysource is the host side of discovery: it runs the
// discovery source the live configuration asks for (etcdsource, or
// k8ssource for kubernetes and kubernetes_pods) and replaces it on reload
// according to the change's reload class: nothing, start, stop, replace
// (reducer and registry reset), replace while keeping the snapshot readable
// (backoff only), or prune removed namespaces.
//
// Batches go to a Target, the routing core that folds them into its
// reducer and registry; the target outlives every watcher.
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
	"switchyard/router/discoverysource/k8ssource"
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

// Target is where discovery goes: the routing core (core.Shared), which
// folds each batch in order and publishes the result.
type Target interface {
	Discovery(batch []events.Event)
	Snapshot() *discovery.Snapshot
}

// Supervisor owns the live discovery source.
type Supervisor struct {
	clk       clock.Clock
	log       *slog.Logger
	metrics   *metrics.Discovery
	newSource SourceFactory
	target    Target

	reloadMu sync.Mutex // serializes Apply and Stop
	cfg      atomic.Pointer[config.Config]
	cancel   context.CancelFunc
	done     chan struct{}

	// applyMu serialises batches; epoch tells a replaced watcher's late
	// batches from the current one's.
	applyMu sync.Mutex
	epoch   atomic.Uint64

	connected atomic.Bool
	restarts  atomic.Uint64
}

// New returns an idle supervisor feeding target; Apply starts it.
func New(target Target, clk clock.Clock, log *slog.Logger, m *metrics.Discovery, f SourceFactory) *Supervisor {
	if f == nil {
		f = Sources(clk, log)
	}
	return &Supervisor{clk: clk, log: log, metrics: m, newSource: f, target: target}
}

// Sources is the production factory: the runner for whichever source the
// configuration selects, nil for one this build cannot run yet.
func Sources(clk clock.Clock, log *slog.Logger) SourceFactory {
	etcd, pods, meta, pool := EtcdSource(clk, log), PodSource(clk, log), MetadataSource(clk, log), PoolSource(clk, log)
	return func(cfg *config.Config, sink etcdsource.Sink, count func(string)) Runner {
		switch cfg.Dynamo.Discovery.Source {
		case config.SourceEtcd:
			return etcd(cfg, sink, count)
		case config.SourceKubernetesPods:
			return pods(cfg, sink, count)
		case config.SourceKubernetes:
			return meta(cfg, sink, count)
		case config.SourceInferencePool:
			return pool(cfg, sink, count)
		}
		return nil
	}
}

// PoolSource is the factory for source inference_pool (the endpoint
// picker's standalone mode): a watcher over an InferencePool and the Pods
// it selects.
func PoolSource(clk clock.Clock, log *slog.Logger) SourceFactory {
	return func(cfg *config.Config, sink etcdsource.Sink, count func(string)) Runner {
		d := cfg.Dynamo.Discovery
		if d.Source != config.SourceInferencePool {
			return nil
		}
		ip := d.InferencePool
		pc := k8ssource.PoolWatcherConfig{
			PoolConfig: k8ssource.PoolConfig{DynamoNamespace: config.DefaultNamespace, Model: cfg.EPP.ModelName,
				BlockSize: cfg.EPP.KVCacheBlockSize, KVEventsPort: ip.KVEventsPort, KVReplayPort: ip.KVReplayPort, KVEventsListen: ip.KVEventsListen != "",
				Tokenizer:    k8ssource.PoolFile{Path: ip.Tokenizer.Path, Checksum: ip.Tokenizer.Checksum},
				ChatTemplate: k8ssource.PoolFile{Path: ip.ChatTemplate.Path, Checksum: ip.ChatTemplate.Checksum, Kind: ip.ChatTemplate.TemplateKind()}},
			Namespace:      ip.Namespace,
			Pool:           ip.Name,
			BackoffInitial: d.Kubernetes.WatchReconnectBackoff.Initial.Std(),
			BackoffMax:     d.Kubernetes.WatchReconnectBackoff.Max.Std(),
		}
		return k8ssource.NewPoolWatcher(pc, sink, clk, log.With("component", "inference-pool-discovery"), count)
	}
}

// PodSource is the factory for source kubernetes_pods: a watcher over the
// operator-labelled Pods.
func PodSource(clk clock.Clock, log *slog.Logger) SourceFactory {
	return func(cfg *config.Config, sink etcdsource.Sink, count func(string)) Runner {
		d := cfg.Dynamo.Discovery
		if d.Source != config.SourceKubernetesPods {
			return nil
		}
		kd := d.Kubernetes
		pc := k8ssource.Config{
			Namespace:        kd.Namespace,
			DynamoNamespaces: d.Namespaces(),
			Model:            kd.Model,
			BackoffInitial:   kd.WatchReconnectBackoff.Initial.Std(),
			BackoffMax:       kd.WatchReconnectBackoff.Max.Std(),
		}
		for _, m := range kd.Models {
			pc.Models = append(pc.Models, k8ssource.ComponentModel{DynamoNamespace: m.DynamoNamespace, Component: m.Component, Model: m.Model})
		}
		return k8ssource.New(pc, sink, clk, log.With("component", "kubernetes-pod-discovery"), count)
	}
}

// MetadataSource is the factory for source kubernetes: a watcher over the
// DynamoWorkerMetadata resources joined with EndpointSlice readiness.
func MetadataSource(clk clock.Clock, log *slog.Logger) SourceFactory {
	return func(cfg *config.Config, sink etcdsource.Sink, count func(string)) Runner {
		d := cfg.Dynamo.Discovery
		if d.Source != config.SourceKubernetes {
			return nil
		}
		kd := d.Kubernetes
		mc := k8ssource.Config{
			Namespace:        kd.Namespace,
			DynamoNamespaces: d.Namespaces(),
			BackoffInitial:   kd.WatchReconnectBackoff.Initial.Std(),
			BackoffMax:       kd.WatchReconnectBackoff.Max.Std(),
		}
		return k8ssource.NewMeta(mc, sink, clk, log.With("component", "kubernetes-metadata-discovery"), count)
	}
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
		s.reset()
		s.log.Info("dynamo discovery stopped")
		return
	case config.ReloadStart:
		s.reset()
	case config.ReloadReplace:
		s.stopWatcher()
		s.reset()
	case config.ReloadReplaceKeepSnapshot:
		// The new watcher's first resync replaces each namespace atomically;
		// until then the current snapshot stays readable.
		s.stopWatcher()
	case config.ReloadPrune:
		s.stopWatcher()
		s.apply([]events.Event{events.DiscoveryPrune{At: s.clk.Now(), Keep: cfg.Dynamo.Discovery.Namespaces()}})
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

// reset empties the target's reducer, as a fresh one, and publishes the
// empty view, so the registry forgets the old fleet.
func (s *Supervisor) reset() {
	s.apply([]events.Event{events.DiscoveryReset{At: s.clk.Now()}})
}

// apply hands a batch to the target, one batch at a time.
func (s *Supervisor) apply(batch []events.Event) {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	s.fold(batch)
}

// fold hands a batch to the target; the caller holds applyMu.
func (s *Supervisor) fold(batch []events.Event) {
	if len(batch) == 0 {
		return
	}
	s.target.Discovery(batch)
	s.metrics.ObserveSnapshot(s.target.Snapshot())
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

// Snapshot is the target's current snapshot.
func (s *Supervisor) Snapshot() *discovery.Snapshot { return s.target.Snapshot() }

// Restarts counts watcher replacements.
func (s *Supervisor) Restarts() uint64 { return s.restarts.Load() }

func (s *Supervisor) config() *config.Config { return s.cfg.Load() }
