package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"switchyard/router/core"
	"switchyard/router/envelope"
	"switchyard/router/eventplane"
	"switchyard/router/kv"
	"switchyard/router/picker"
)

// KV counts kv-events messages and KV-aware selections by result. Both
// label sets are closed and pre-registered; counters are resolved once,
// so counting allocates nothing.
type KV struct {
	Events    *prometheus.CounterVec
	Selection *prometheus.CounterVec
	// Replay counts gap recovery by replay by result
	// (core.KVReplayResults).
	Replay    *prometheus.CounterVec
	events    map[string]prometheus.Counter
	selection map[string]prometheus.Counter
	replay    map[string]prometheus.Counter
}

// kvEventResults is the result label set of kv-events messages: what the
// tracker reports (decoder refusals and index outcomes) and what the
// subscription supervisor counts itself (skipped channels, ZMTP
// violations).
func kvEventResults() []string {
	out := kv.EventResults()
	for _, r := range []envelope.Result{envelope.Unsupported, envelope.Malformed, envelope.TransportRefused} {
		out = append(out, r.String())
	}
	return out
}

func newKV() KV {
	k := KV{
		Events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_dynamo_kv_events_total",
			Help: "kv-events messages by result (applied, or why they changed nothing).",
		}, []string{"result"}),
		Selection: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_dynamo_kv_selection_total",
			Help: "KV-aware selections by result (overlap, no_overlap, tokenizer_unavailable, bypass, ...).",
		}, []string{"result"}),
		Replay: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_dynamo_kv_replay_total",
			Help: "kv-events gap recovery by replay: replays requested, messages recovered and lost, recoveries ended by timeout, overflow or failure, replayed messages dropped.",
		}, []string{"result"}),
		events:    map[string]prometheus.Counter{},
		selection: map[string]prometheus.Counter{},
		replay:    map[string]prometheus.Counter{},
	}
	for _, r := range core.KVReplayResults() {
		k.replay[r] = k.Replay.WithLabelValues(r)
	}
	for _, r := range kvEventResults() {
		k.events[r] = k.Events.WithLabelValues(r)
	}
	for _, r := range picker.KVResults {
		k.selection[r] = k.Selection.WithLabelValues(r)
	}
	return k
}

// CountEvent increments one kv-events result; a result outside the closed
// set (a programming error) counts as malformed rather than creating a
// series.
func (k *KV) CountEvent(result string) {
	c, ok := k.events[result]
	if !ok {
		c = k.events[envelope.Malformed.String()]
	}
	c.Inc()
}

// CountSubscription increments what the kv-events subscription supervisor
// counts itself: skipped channels and ZMTP violations.
func (k *KV) CountSubscription(r envelope.Result) { k.CountEvent(r.String()) }

// CountReplay adds n to one gap-recovery result; results outside the
// closed set are ignored.
func (k *KV) CountReplay(result string, n uint64) {
	if c, ok := k.replay[result]; ok {
		c.Add(float64(n))
	}
}

// CountSelection increments one KV-aware selection result; results
// outside the closed set are ignored.
func (k *KV) CountSelection(result string) {
	if c, ok := k.selection[result]; ok {
		c.Inc()
	}
}

// KVCollector exports the kv-events subscriptions' states and the KV
// index's size at scrape time.
type KVCollector struct {
	Subscriptions func() []eventplane.SubscriptionInfo
	// Size returns the index's nodes and ownerships.
	Size func() (nodes, ownerships int)
}

var (
	kvSubsDesc = prometheus.NewDesc("switchyard_dynamo_kv_subscriptions",
		"kv-events subscriptions by state and transport.", []string{"state", "transport"}, nil)
	kvParkedDesc = prometheus.NewDesc("switchyard_dynamo_kv_parked_subscriptions",
		"Connected kv-events subscriptions whose idle session is parked with the poller (no reading goroutine).", nil, nil)
	kvNodesDesc = prometheus.NewDesc("switchyard_dynamo_kv_index_nodes",
		"Distinct block prefixes the KV index holds (device tier).", nil, nil)
	kvOwnershipsDesc = prometheus.NewDesc("switchyard_dynamo_kv_index_ownerships",
		"(worker rank, block) pairs the KV index holds.", nil, nil)
)

// Describe implements prometheus.Collector.
func (c *KVCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- kvSubsDesc
	ch <- kvParkedDesc
	ch <- kvNodesDesc
	ch <- kvOwnershipsDesc
}

// Collect implements prometheus.Collector.
func (c *KVCollector) Collect(ch chan<- prometheus.Metric) {
	var subs []eventplane.SubscriptionInfo
	if c.Subscriptions != nil {
		subs = c.Subscriptions()
	}
	collectSubscriptions(ch, kvSubsDesc, kvParkedDesc, subs)
	if c.Size != nil {
		nodes, owned := c.Size()
		ch <- prometheus.MustNewConstMetric(kvNodesDesc, prometheus.GaugeValue, float64(nodes))
		ch <- prometheus.MustNewConstMetric(kvOwnershipsDesc, prometheus.GaugeValue, float64(owned))
	}
}

// collectSubscriptions exports one gauge per (state, transport), zeros
// included, and the parked count.
func collectSubscriptions(ch chan<- prometheus.Metric, desc, parkedDesc *prometheus.Desc, subs []eventplane.SubscriptionInfo) {
	counts := map[[2]string]int{}
	parked := 0
	for _, s := range subs {
		counts[[2]string{s.State.String(), s.Transport}]++
		if s.Parked {
			parked++
		}
	}
	ch <- prometheus.MustNewConstMetric(parkedDesc, prometheus.GaugeValue, float64(parked))
	for _, st := range eventplane.States {
		for _, tr := range []string{eventplane.TransportDirect, eventplane.TransportBroker} {
			ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, float64(counts[[2]string{st.String(), tr}]), st.String(), tr)
		}
	}
}
