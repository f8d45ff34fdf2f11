package artifacts

import "github.com/prometheus/client_golang/prometheus"

// Metrics counts artifact results. The label set is closed (Results) and
// pre-registered, so a hostile fleet cannot add series.
type Metrics struct {
	Total    *prometheus.CounterVec
	byResult map[Result]prometheus.Counter
}

// NewMetrics builds switchyard_dynamo_kv_artifacts_total and registers it
// on reg when reg is not nil.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_dynamo_kv_artifacts_total",
			Help: "Tokenizer and chat-template artifacts by result (fetched, cached, unpinned, corrupt, too_large, refused, failed, unsupported).",
		}, []string{"result"}),
		byResult: make(map[Result]prometheus.Counter, len(Results)),
	}
	for _, r := range Results {
		m.byResult[r] = m.Total.WithLabelValues(string(r))
	}
	if reg != nil {
		reg.MustRegister(m.Total)
	}
	return m
}

// Count increments one result; nil Metrics count nothing, and a result
// outside the closed set counts as failed rather than adding a series.
func (m *Metrics) Count(r Result) {
	if m == nil {
		return
	}
	c, ok := m.byResult[r]
	if !ok {
		c = m.byResult[ResultFailed]
	}
	c.Inc()
}
