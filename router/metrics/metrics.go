// Package metrics holds Switchyard's Prometheus collectors. Every label set
// is closed: label values come from fixed lists, never from fleet or client
// input, so a hostile fleet cannot grow the series count.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"switchyard/router/discovery"
	"switchyard/router/eventplane/replay"
)

// Discovery are the discovery collectors.
type Discovery struct {
	Events     *prometheus.CounterVec
	Connected  prometheus.Gauge
	Generation prometheus.Gauge
	Workers    *prometheus.GaugeVec
}

// Set is every collector of one process, on its own registry (tests build
// as many as they like).
type Set struct {
	Registry  *prometheus.Registry
	Discovery Discovery
	Load      Load
	Gateway   *Gateway
	Selection Selection
	KV        KV
	EPP       EPP
	// KVReplay are the totals of the process's KV-event replays: the
	// host's replay.Fetcher counts into them.
	KVReplay *replay.Counts
}

// New builds and registers every collector, with each closed label value
// pre-initialized so dashboards see zeros rather than gaps.
func New() *Set {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	d := NewDiscovery()
	reg.MustRegister(d.Collectors()...)
	l := newLoad()
	reg.MustRegister(l.Events)
	g := newGateway()
	reg.MustRegister(g.collectors()...)
	sel := newSelection()
	reg.MustRegister(sel.Total, sel.ActiveRefused)
	k := newKV()
	reg.MustRegister(k.Events, k.Selection, k.Replay)
	e := newEPP()
	reg.MustRegister(e.collectors()...)
	rc := &replay.Counts{}
	reg.MustRegister(&KVReplayCollector{Counts: rc})
	return &Set{Registry: reg, Discovery: d, Load: l, Gateway: g, Selection: sel, KV: k, EPP: e, KVReplay: rc}
}

// NewDiscovery builds the discovery collectors, unregistered, with every
// closed label value pre-initialized (switchyard broker registers them on
// a registry of its own).
func NewDiscovery() Discovery {
	d := Discovery{
		Events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_dynamo_discovery_events_total",
			Help: "Dynamo discovery events by kind (put, delete, resync, malformed, duplicate, restart, ...).",
		}, []string{"kind"}),
		Connected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "switchyard_dynamo_discovery_connected",
			Help: "1 while every watch of the discovery source is open.",
		}),
		Generation: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "switchyard_dynamo_registry_generation",
			Help: "Generation of the published Dynamo fleet view; moves only when the view changes.",
		}),
		Workers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "switchyard_dynamo_workers",
			Help: "Discovered Dynamo workers by role.",
		}, []string{"role"}),
	}
	for _, k := range discovery.EventKinds {
		d.Events.WithLabelValues(k)
	}
	for _, r := range []discovery.Role{discovery.RolePrefill, discovery.RoleDecode, discovery.RoleAggregated, discovery.RoleUnknown} {
		d.Workers.WithLabelValues(r.String())
	}
	return d
}

// Collectors lists d's collectors, for registering.
func (d *Discovery) Collectors() []prometheus.Collector {
	return []prometheus.Collector{d.Events, d.Connected, d.Generation, d.Workers}
}

// CountDiscovery increments one discovery event kind. Kinds outside the
// closed set are a programming error and are folded into "malformed" rather
// than creating a series.
func (d *Discovery) CountDiscovery(kind string) {
	for _, k := range discovery.EventKinds {
		if k == kind {
			d.Events.WithLabelValues(kind).Inc()
			return
		}
	}
	d.Events.WithLabelValues("malformed").Inc()
}

// ObserveSnapshot exports a published snapshot's generation and role counts.
func (d *Discovery) ObserveSnapshot(s *discovery.Snapshot) {
	d.Generation.Set(float64(s.Generation))
	counts := map[discovery.Role]int{}
	for _, w := range s.Workers {
		counts[w.Role]++
	}
	for _, r := range []discovery.Role{discovery.RolePrefill, discovery.RoleDecode, discovery.RoleAggregated, discovery.RoleUnknown} {
		d.Workers.WithLabelValues(r.String()).Set(float64(counts[r]))
	}
}
