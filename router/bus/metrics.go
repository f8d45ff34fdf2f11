package bus

import (
	"github.com/prometheus/client_golang/prometheus"

	"switchyard/router/bus/wire"
	"switchyard/router/config"
	"switchyard/router/eventplane"
)

// refusalCodes is the closed label set of switchyard_event_bus_refusals_total.
var refusalCodes = []string{
	wire.CodeTLSRequired, wire.CodeHandshakeTimeout, wire.CodeHandshakeFailed, wire.CodeConnectionLimit,
	wire.CodeAuthTimeout, wire.CodeUnauthenticated, wire.CodeCredentialRevoked, wire.CodeForbidden,
	wire.CodeUnsupportedVersion, wire.CodeHelloTimeout, wire.CodeBadMessage, wire.CodeTooManySessions,
	wire.CodeSessionSuperseded, wire.CodeIdleTimeout, wire.CodeUnknownStream, wire.CodeDuplicateStream,
	wire.CodeNotFound, wire.CodeSendQueueFull,
}

// openResults is the closed label set of switchyard_event_bus_stream_opens_total.
var openResults = []string{
	"opened", eventplane.BusErrNoSession, eventplane.BusErrTooManyStreams, eventplane.BusErrRefused,
	eventplane.BusErrOpenTimeout, eventplane.BusErrSessionClosed, eventplane.BusErrBusy, eventplane.BusErrInvalidTarget,
}

// Metrics are the listener's collectors. No label carries a stream,
// session, broker or client id.
type Metrics struct {
	Connections prometheus.Gauge
	Sessions    *prometheus.GaugeVec // role
	Streams     prometheus.Gauge
	Refusals    *prometheus.CounterVec // code
	StreamOpens *prometheus.CounterVec // result
	Bytes       *prometheus.CounterVec // direction: received, sent
}

// NewMetrics makes the collectors, every label value present from the start.
func NewMetrics() *Metrics {
	m := &Metrics{
		Connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "switchyard_event_bus_connections",
			Help: "Open TCP connections to the event bus listener.",
		}),
		Sessions: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "switchyard_event_bus_sessions",
			Help: "Welcomed event bus sessions by role (broker, kv_listener).",
		}, []string{"role"}),
		Streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "switchyard_event_bus_streams",
			Help: "Data streams commanded and not yet ended, over every session.",
		}),
		Refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_event_bus_refusals_total",
			Help: "Connections, requests and sessions the event bus listener refused or ended, by code.",
		}, []string{"code"}),
		StreamOpens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_event_bus_stream_opens_total",
			Help: "Relayed stream opens by result (opened, or the error code).",
		}, []string{"result"}),
		Bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_event_bus_stream_bytes_total",
			Help: "Bytes carried by data streams: received from clients, sent to them.",
		}, []string{"direction"}),
	}
	for _, c := range refusalCodes {
		m.Refusals.WithLabelValues(c)
	}
	for _, r := range openResults {
		m.StreamOpens.WithLabelValues(r)
	}
	m.Sessions.WithLabelValues(config.BusRoleBroker)
	m.Sessions.WithLabelValues(config.BusRoleKVListener)
	m.Bytes.WithLabelValues("received")
	m.Bytes.WithLabelValues("sent")
	return m
}

// Collectors are the collectors to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Connections, m.Sessions, m.Streams, m.Refusals, m.StreamOpens, m.Bytes}
}
