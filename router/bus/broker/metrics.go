package broker

import (
	"github.com/prometheus/client_golang/prometheus"

	"switchyard/router/bus/wire"
)

// Metrics are the broker's collectors. Every label set is closed: no
// stream, session, publisher or client id appears in a label.
type Metrics struct {
	Connected       prometheus.Gauge
	SessionAttempts *prometheus.CounterVec
	Streams         prometheus.Gauge
	StreamOpens     *prometheus.CounterVec
	Bytes           *prometheus.CounterVec
}

// StreamResults are the values of switchyard_broker_stream_opens_total's
// result label.
var StreamResults = []string{"opened", wire.CodeTargetNotAdvertised, wire.CodeUnreachable, CodeTooManyStreams,
	wire.CodeShuttingDown, "refused", "failed"}

// NewMetrics builds the broker's collectors (switchyard_broker_*) with
// every label value at zero.
func NewMetrics() *Metrics { return NewMetricsFor("broker") }

// NewMetricsFor builds the collectors of an agent named switchyard_<agent>_*
// (broker, kv_listener).
func NewMetricsFor(agent string) *Metrics {
	pre := "switchyard_" + agent + "_"
	m := &Metrics{
		Connected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: pre + "connected",
			Help: "1 while the agent holds a welcomed event-bus session.",
		}),
		SessionAttempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: pre + "session_attempts_total",
			Help: "Event-bus session attempts by result (welcomed, refused, failed).",
		}, []string{"result"}),
		Streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: pre + "streams",
			Help: "Data streams the agent holds (subscribed, opening or relaying).",
		}),
		StreamOpens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: pre + "stream_opens_total",
			Help: "Subscribe commands by result: opened, or why the stream did not open.",
		}, []string{"result"}),
		Bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: pre + "stream_bytes_total",
			Help: "Relayed bytes by direction (to_router, to_publisher).",
		}, []string{"direction"}),
	}
	for _, r := range []string{"welcomed", "refused", "failed"} {
		m.SessionAttempts.WithLabelValues(r)
	}
	for _, r := range StreamResults {
		m.StreamOpens.WithLabelValues(r)
	}
	for _, d := range []string{"to_router", "to_publisher"} {
		m.Bytes.WithLabelValues(d)
	}
	return m
}

// Collectors lists every collector, for registering.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Connected, m.SessionAttempts, m.Streams, m.StreamOpens, m.Bytes}
}
