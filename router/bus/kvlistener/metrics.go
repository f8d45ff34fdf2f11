package kvlistener

import (
	"github.com/prometheus/client_golang/prometheus"

	"switchyard/router/kv"
)

// Results of switchyard_kv_listener_events_total beyond the decoder's
// refusals.
const (
	ResultForwarded = "forwarded" // framed into the backends' rings
	ResultTooLarge  = "too_large" // larger than an SSE event may be
)

// Metrics are the listener's source-side collectors; the session's are
// the agent's (broker.NewMetricsFor("kv_listener")). No label carries a
// backend, worker or stream.
type Metrics struct {
	Events     *prometheus.CounterVec // result
	RingEvents prometheus.Gauge
	RingBytes  prometheus.Gauge
	Evicted    prometheus.Counter
	Resets     prometheus.Counter
	Streams    prometheus.Gauge
	// Subscriptions counts the kv-events subscriptions' refusals by the
	// envelope's result.
	Subscriptions *prometheus.CounterVec
}

// NewMetrics builds the collectors with every label value at zero.
func NewMetrics() *Metrics {
	m := &Metrics{
		Events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_kv_listener_events_total",
			Help: "kv-events messages received from workers, by result: forwarded, or why they were dropped.",
		}, []string{"result"}),
		RingEvents: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "switchyard_kv_listener_ring_events",
			Help: "Events held for replay, over every backend.",
		}),
		RingBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "switchyard_kv_listener_ring_bytes",
			Help: "Bytes of SSE held for replay, over every backend.",
		}),
		Evicted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "switchyard_kv_listener_ring_evicted_total",
			Help: "Events dropped from a replay ring to keep it within its bounds.",
		}),
		Resets: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "switchyard_kv_listener_resets_total",
			Help: "Reset events sent: a router resumed from an id whose following events were no longer held.",
		}),
		Streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "switchyard_kv_listener_sse_streams",
			Help: "SSE streams being served.",
		}),
	}
	m.Subscriptions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_kv_listener_subscription_refusals_total",
		Help: "kv-events frames or sessions the listener's subscriptions refused, by result.",
	}, []string{"result"})
	for _, r := range kv.DecodeResults() {
		if r != kv.DecodeOK {
			m.Events.WithLabelValues(r.String())
		}
	}
	m.Events.WithLabelValues(ResultForwarded)
	m.Events.WithLabelValues(ResultTooLarge)
	return m
}

// Collectors lists every collector, for registering.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Events, m.RingEvents, m.RingBytes, m.Evicted, m.Resets, m.Streams, m.Subscriptions}
}
