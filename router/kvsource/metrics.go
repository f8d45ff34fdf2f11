package kvsource

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"switchyard/router/eventplane"
	"switchyard/router/kv"
)

// Results of switchyard_dynamo_kv_source_events_total beyond the core's
// kv-events results: an event refused before it reached the core.
const (
	ResultBadEvent    = "bad_event"    // data that is not a valid Event
	ResultOutOfOrder  = "out_of_order" // an id not above the last one applied
	ResultUnknownType = "unknown_type" // an SSE event type other than kv and reset
)

// Causes of switchyard_dynamo_kv_source_resets_total: why a backend's
// ranks were cleared.
const (
	CauseReset   = "reset"   // the listener no longer held the events after the last id
	CauseStale   = "stale"   // no stream for StaleAfter
	CauseRemoved = "removed" // the source left the configuration
)

// StreamResultBroken is a stream that ended on a framing error.
const StreamResultBroken = "broken"

// Metrics are the consumer's collectors. No label carries a backend,
// worker or session.
type Metrics struct {
	Sources   prometheus.Gauge
	Connected prometheus.Gauge
	Events    *prometheus.CounterVec // result
	Resets    *prometheus.CounterVec // cause
	Streams   *prometheus.CounterVec // result
}

// NewMetrics builds the collectors with every label value at zero.
func NewMetrics() *Metrics {
	m := &Metrics{
		Sources: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "switchyard_dynamo_kv_source_sources",
			Help: "Configured kv_cache_index sources followed through the event bus.",
		}),
		Connected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "switchyard_dynamo_kv_source_connected",
			Help: "kv_cache_index sources with an open stream.",
		}),
		Events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_dynamo_kv_source_events_total",
			Help: "kv events received from kv_cache_index sources, by the core's result or why they were refused first.",
		}, []string{"result"}),
		Resets: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_dynamo_kv_source_resets_total",
			Help: "Times a source's ranks were cleared, by cause (reset, stale, removed).",
		}, []string{"cause"}),
		Streams: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_dynamo_kv_source_stream_opens_total",
			Help: "Stream opens of kv_cache_index sources: opened, or the event bus's reason.",
		}, []string{"result"}),
	}
	for _, r := range slices.Concat(kv.EventResults(), []string{ResultBadEvent, ResultOutOfOrder, ResultUnknownType}) {
		m.Events.WithLabelValues(r)
	}
	for _, c := range []string{CauseReset, CauseStale, CauseRemoved} {
		m.Resets.WithLabelValues(c)
	}
	for _, r := range StreamResults {
		m.Streams.WithLabelValues(r)
	}
	return m
}

// StreamResults are the values of the stream_opens result label.
var StreamResults = []string{"opened", StreamResultBroken, eventplane.BusErrNoSession, eventplane.BusErrTooManyStreams,
	eventplane.BusErrRefused, eventplane.BusErrOpenTimeout, eventplane.BusErrSessionClosed, eventplane.BusErrBusy,
	eventplane.BusErrInvalidTarget}

// Collectors lists every collector, for registering.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Sources, m.Connected, m.Events, m.Resets, m.Streams}
}
