package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"switchyard/router/eventplane"
)

// BrokerSubscriptionsCollector exports how many subscriptions each broker
// carries, by family. The broker label takes only the configured
// brokers[].id values of role broker, so its set is closed by the
// configuration; a stream carried by an entry a reload just removed is
// not exported (its session is ending).
type BrokerSubscriptionsCollector struct {
	// Brokers are the configured broker ids.
	Brokers func() []string
	// Families are the subscription families; every one has a series per
	// broker.
	Families []func() []eventplane.SubscriptionInfo
	// Names are the families' topics, in the order of Families.
	Names []string
}

var brokerSubsDesc = prometheus.NewDesc("switchyard_dynamo_broker_subscriptions",
	"Subscriptions whose stream a broker's event-bus session carries, by family and configured broker id.",
	[]string{"family", "broker"}, nil)

// Describe implements prometheus.Collector.
func (c *BrokerSubscriptionsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- brokerSubsDesc }

// Collect implements prometheus.Collector.
func (c *BrokerSubscriptionsCollector) Collect(ch chan<- prometheus.Metric) {
	if c.Brokers == nil {
		return
	}
	ids := c.Brokers()
	if len(ids) == 0 {
		return
	}
	counts := make(map[string]int, len(ids))
	for i, subs := range c.Families {
		clear(counts)
		for _, id := range ids {
			counts[id] = 0
		}
		for _, s := range subs() {
			if _, ok := counts[s.Broker]; ok {
				counts[s.Broker]++
			}
		}
		for id, n := range counts { // one series per id, duplicates or not
			ch <- prometheus.MustNewConstMetric(brokerSubsDesc, prometheus.GaugeValue, float64(n), c.Names[i], id)
		}
	}
}
