package server

import (
	"fmt"
	"net/netip"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"switchyard/router/clock"
	"switchyard/router/config"
	"switchyard/router/discovery"
	"switchyard/router/envelope"
	"switchyard/router/eventplane"
)

// startKVListener binds the standalone pool's kv_events_listen address,
// when set, for KV event publishers that dial the picker. It is bound once
// per process: a new address applies at the next start.
func (s *Server) startKVListener(cfg *config.Config) error {
	addr := cfg.Dynamo.Discovery.InferencePool.KVEventsListen
	if cfg.Dynamo.Discovery.Source != config.SourceInferencePool || addr == "" {
		return nil
	}
	results := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_dynamo_kv_listener_total",
		Help: "Connections and messages of the KV event listener publishers dial (standalone mode), by result.",
	}, []string{"result"})
	for _, r := range eventplane.ListenResults {
		results.WithLabelValues(r)
	}
	pods := &podAddrs{snapshot: s.core.Snapshot}
	l, err := eventplane.Listen(eventplane.ListenerConfig{Addr: addr, Limits: envelope.KVEventLimits, Resolve: pods.resolve,
		Sink: kvSink{s.core}, Clock: clock.Real{}, Log: s.log.With("component", "kv-listener"),
		Count: func(r string) { results.WithLabelValues(r).Inc() }})
	if err != nil {
		return fmt.Errorf("listen on dynamo.discovery.inference_pool.kv_events_listen %s: %w", addr, err)
	}
	conns := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "switchyard_dynamo_kv_listener_connections",
		Help: "Open connections of KV event publishers to the listener (standalone mode).",
	}, func() float64 { return float64(l.Conns()) })
	s.metrics.Registry.MustRegister(results, conns)
	s.kvListener = l
	s.log.Info("kv-events listener bound; publishers dial it", "addr", l.Addr().String())
	return nil
}

// KVListenerAddr is the bound address of the KV event listener, "" when
// there is none.
func (s *Server) KVListenerAddr() string {
	if s.kvListener == nil {
		return ""
	}
	return s.kvListener.Addr().String()
}

// podAddrs maps a Pod address to its worker, from an index of the
// registry's workers by host rebuilt when the generation moves.
type podAddrs struct {
	snapshot func() *discovery.Snapshot

	mu     sync.Mutex
	gen    uint64
	byAddr map[netip.Addr]eventplane.Publisher
}

func (p *podAddrs) resolve(a netip.Addr) (eventplane.Publisher, bool) {
	snap := p.snapshot()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byAddr == nil || snap.Generation != p.gen {
		p.byAddr, p.gen = workersByAddr(snap), snap.Generation
	}
	w, ok := p.byAddr[a]
	return w, ok
}

// workersByAddr indexes the workers whose host is an IP address. Two
// workers on one address (which a Pod list never gives) name neither.
func workersByAddr(snap *discovery.Snapshot) map[netip.Addr]eventplane.Publisher {
	out := make(map[netip.Addr]eventplane.Publisher, len(snap.Workers))
	shared := map[netip.Addr]bool{}
	for _, w := range snap.Workers {
		a, err := netip.ParseAddr(w.Host)
		if err != nil {
			continue
		}
		a = a.Unmap()
		if _, dup := out[a]; dup {
			shared[a] = true
		}
		out[a] = eventplane.Publisher{Namespace: w.Namespace, ID: w.InstanceID}
	}
	for a := range shared {
		delete(out, a)
	}
	return out
}
