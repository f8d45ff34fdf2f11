package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"switchyard/router/eventplane/replay"
)

// KVReplayCollector exports a replay Fetcher's running totals
// (replay.Counts): replays by how they ended, refusals by reason, batches
// recovered and replays in progress. Both label sets are closed.
type KVReplayCollector struct {
	Counts *replay.Counts
}

var (
	kvReplaysDesc = prometheus.NewDesc("switchyard_dynamo_kv_replay_fetches_total",
		"KV-event replays by how they ended: ended (end marker), stopped (had what it needed), refused, failed (dial, I/O, cancel).",
		[]string{"result"}, nil)
	kvReplayRefusedDesc = prometheus.NewDesc("switchyard_dynamo_kv_replay_fetch_refused_total",
		"KV-event replays refused, by reason (endpoint, protocol, malformed, out_of_order, too_many, timeout).",
		[]string{"reason"}, nil)
	kvReplayBatchesDesc = prometheus.NewDesc("switchyard_dynamo_kv_replay_fetched_batches_total",
		"Batches publishers replayed to the router.", nil, nil)
	kvReplayRunningDesc = prometheus.NewDesc("switchyard_dynamo_kv_replay_fetches_running",
		"KV-event replays in progress.", nil, nil)
)

// Describe implements prometheus.Collector.
func (c *KVReplayCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- kvReplaysDesc
	ch <- kvReplayRefusedDesc
	ch <- kvReplayBatchesDesc
	ch <- kvReplayRunningDesc
}

// Collect implements prometheus.Collector.
func (c *KVReplayCollector) Collect(ch chan<- prometheus.Metric) {
	k := c.Counts
	var refused uint64
	for _, r := range replay.Reasons() {
		n := k.Refused(r)
		refused += n
		ch <- prometheus.MustNewConstMetric(kvReplayRefusedDesc, prometheus.CounterValue, float64(n), r.String())
	}
	for _, r := range []struct {
		name string
		n    uint64
	}{{"ended", k.Ended.Load()}, {"stopped", k.Stopped.Load()}, {"refused", refused}, {"failed", k.Failed.Load()}} {
		ch <- prometheus.MustNewConstMetric(kvReplaysDesc, prometheus.CounterValue, float64(r.n), r.name)
	}
	ch <- prometheus.MustNewConstMetric(kvReplayBatchesDesc, prometheus.CounterValue, float64(k.Batches.Load()))
	ch <- prometheus.MustNewConstMetric(kvReplayRunningDesc, prometheus.GaugeValue, float64(k.Running.Load()))
}
