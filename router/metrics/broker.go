package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"switchyard/router/eventplane"
)

// BrokerCollector exports the broker transport's coverage, as the
// debounced coverage reporter last computed it: per configured namespace,
// the event-bus sessions covering it and the pending subscriptions of each
// family. Without the broker transport Coverage returns nothing.
type BrokerCollector struct {
	Coverage func() []eventplane.NamespaceCoverage
}

var (
	brokerSessionsDesc = prometheus.NewDesc("switchyard_dynamo_broker_namespace_sessions",
		"Event-bus sessions covering each configured Dynamo namespace (broker transport).", []string{"namespace"}, nil)
	brokerPendingDesc = prometheus.NewDesc("switchyard_dynamo_broker_pending_subscriptions",
		"Subscriptions waiting for an event-bus session, by family and namespace (broker transport).", []string{"family", "namespace"}, nil)
)

// Describe implements prometheus.Collector.
func (c *BrokerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- brokerSessionsDesc
	ch <- brokerPendingDesc
}

// Collect implements prometheus.Collector.
func (c *BrokerCollector) Collect(ch chan<- prometheus.Metric) {
	if c.Coverage == nil {
		return
	}
	for _, ns := range c.Coverage() {
		ch <- prometheus.MustNewConstMetric(brokerSessionsDesc, prometheus.GaugeValue, float64(ns.Sessions), ns.Namespace)
		for fam, n := range ns.Pending {
			ch <- prometheus.MustNewConstMetric(brokerPendingDesc, prometheus.GaugeValue, float64(n), fam, ns.Namespace)
		}
	}
}
