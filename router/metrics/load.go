package metrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"switchyard/router/envelope"
	"switchyard/router/eventplane"
	"switchyard/router/load"
)

// Load counts kv_metrics messages by result. Counters are resolved once,
// so counting allocates nothing on the hot path.
type Load struct {
	Events   *prometheus.CounterVec
	byResult []prometheus.Counter
}

func newLoad() Load {
	l := Load{Events: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_dynamo_load_events_total",
		Help: "kv_metrics messages by result (applied, or why they were dropped).",
	}, []string{"result"})}
	for _, r := range envelope.Results() {
		l.byResult = append(l.byResult, l.Events.WithLabelValues(r.String()))
	}
	return l
}

// Count increments one result.
func (l *Load) Count(r envelope.Result) {
	if int(r) < len(l.byResult) {
		l.byResult[r].Inc()
	}
}

// LoadCollector exports subscription states and per-rank load at scrape
// time, straight from the supervisor and the store: nothing is updated per
// sample, and a departed worker's series vanish with its sample.
type LoadCollector struct {
	Subscriptions func() []eventplane.SubscriptionInfo
	Store         *load.Store
	Now           func() time.Time
}

var (
	subsDesc = prometheus.NewDesc("switchyard_dynamo_load_subscriptions",
		"kv_metrics subscriptions by state and transport.", []string{"state", "transport"}, nil)
	parkedDesc = prometheus.NewDesc("switchyard_dynamo_load_parked_subscriptions",
		"Connected kv_metrics subscriptions whose idle session is parked with the poller (no reading goroutine).", nil, nil)
	rankLabels  = []string{"namespace", "worker", "dp_rank"}
	decodeDesc  = prometheus.NewDesc("switchyard_dynamo_worker_active_decode_blocks", "Latest active_decode_blocks per worker rank.", rankLabels, nil)
	prefillDesc = prometheus.NewDesc("switchyard_dynamo_worker_active_prefill_tokens", "Latest active_prefill_tokens per worker rank.", rankLabels, nil)
	kvUsedDesc  = prometheus.NewDesc("switchyard_dynamo_worker_kv_used_blocks", "Latest kv_used_blocks per worker rank.", rankLabels, nil)
	ageDesc     = prometheus.NewDesc("switchyard_dynamo_worker_load_age_seconds", "Age of the latest load sample per worker rank.", rankLabels, nil)
)

// Describe implements prometheus.Collector.
func (c *LoadCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{subsDesc, parkedDesc, decodeDesc, prefillDesc, kvUsedDesc, ageDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *LoadCollector) Collect(ch chan<- prometheus.Metric) {
	var subs []eventplane.SubscriptionInfo
	if c.Subscriptions != nil {
		subs = c.Subscriptions()
	}
	collectSubscriptions(ch, subsDesc, parkedDesc, subs)
	if c.Store == nil {
		return
	}
	now := c.Now()
	// Copy first: the store's lock must not wait on a slow scrape.
	type kv struct {
		k load.Key
		s load.Sample
	}
	var all []kv
	c.Store.Each(func(k load.Key, s load.Sample) { all = append(all, kv{k, s}) })
	for _, e := range all {
		k, s := e.k, e.s
		labels := []string{k.Namespace, strconv.FormatUint(k.WorkerID, 16), strconv.FormatUint(uint64(k.DPRank), 10)}
		if s.HasDecodeBlocks {
			ch <- prometheus.MustNewConstMetric(decodeDesc, prometheus.GaugeValue, float64(s.ActiveDecodeBlocks), labels...)
		}
		if s.HasPrefillTokens {
			ch <- prometheus.MustNewConstMetric(prefillDesc, prometheus.GaugeValue, float64(s.ActivePrefillTokens), labels...)
		}
		if s.HasKVUsedBlocks {
			ch <- prometheus.MustNewConstMetric(kvUsedDesc, prometheus.GaugeValue, float64(s.KVUsedBlocks), labels...)
		}
		ch <- prometheus.MustNewConstMetric(ageDesc, prometheus.GaugeValue, now.Sub(s.ReceivedAt).Seconds(), labels...)
	}
}
