package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// EPP decision results (the closed label set of switchyard_epp_decisions_total).
const (
	EPPRouted      = "routed"         // a destination was chosen
	EPPUnavailable = "unavailable"    // no eligible worker: 503
	EPPBadRequest  = "bad_request"    // the body could not be read: 400
	EPPTooLarge    = "too_large"      // the body passed the cap: 413
	EPPNoHost      = "no_host"        // the chosen worker advertises no address: 503
	EPPOutOfSubset = "out_of_subset"  // nothing eligible inside the gateway's subset hint: 503
	EPPAborted     = "aborted"        // the stream ended before a decision
	EPPShed        = "shed"           // too many requests in flight: 429
	EPPProtocol    = "protocol_error" // a second request on one stream: the stream is refused
)

var eppResults = []string{EPPRouted, EPPUnavailable, EPPBadRequest, EPPTooLarge, EPPNoHost, EPPOutOfSubset, EPPAborted, EPPShed, EPPProtocol}

// EPP are the endpoint picker's collectors.
type EPP struct {
	Decisions *prometheus.CounterVec
	// DecisionSeconds is from the request headers to the answer carrying
	// the destination (the body's arrival included).
	DecisionSeconds prometheus.Histogram
	Streams         prometheus.Gauge
	// ServedElsewhere counts requests the gateway reports served by an
	// endpoint it chose itself, neither the pick nor one of its
	// fallbacks; FallbackServed those served by one of the fallbacks.
	ServedElsewhere prometheus.Counter
	FallbackServed  prometheus.Counter
	// BlockSizeMismatch counts picks of workers whose card's block size
	// is not epp.kv_cache_block_size.
	BlockSizeMismatch prometheus.Counter
}

func newEPP() EPP {
	e := EPP{
		Decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_epp_decisions_total",
			Help: "Endpoint-picker decisions by result (routed, unavailable, bad_request, too_large, no_host, out_of_subset, aborted, shed, protocol_error).",
		}, []string{"result"}),
		DecisionSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "switchyard_epp_decision_seconds",
			Help:    "Time from a request's headers to the endpoint picker's answer, its body's arrival included.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		Streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "switchyard_epp_streams",
			Help: "Open ext_proc streams (one per request in flight through the gateway).",
		}),
		ServedElsewhere: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "switchyard_epp_served_elsewhere_total",
			Help: "Requests the gateway reports served by an endpoint that is neither the one picked nor one of its fallbacks.",
		}),
		FallbackServed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "switchyard_epp_fallback_served_total",
			Help: "Requests the gateway reports served by one of the fallback endpoints after the pick.",
		}),
		BlockSizeMismatch: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "switchyard_epp_block_size_mismatch_total",
			Help: "Picks of a worker whose card's KV block size is not epp.kv_cache_block_size (DYN_KV_CACHE_BLOCK_SIZE).",
		}),
	}
	for _, r := range eppResults {
		e.Decisions.WithLabelValues(r)
	}
	return e
}

func (e EPP) collectors() []prometheus.Collector {
	return []prometheus.Collector{e.Decisions, e.DecisionSeconds, e.Streams, e.ServedElsewhere, e.FallbackServed, e.BlockSizeMismatch}
}

// Decided counts one decision and how long it took.
func (e EPP) Decided(result string, took time.Duration) {
	e.Decisions.WithLabelValues(result).Inc()
	if result == EPPRouted {
		e.DecisionSeconds.Observe(took.Seconds())
	}
}
