package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"switchyard/router/picker"
)

// Selection counts picker decisions by role and reason. Counters are
// resolved up front so counting a selection allocates nothing.
type Selection struct {
	Total *prometheus.CounterVec
	// ActiveRefused counts requests the core's active-sequence account
	// could not take (its bounds): routed, but not tracked.
	ActiveRefused prometheus.Counter
	byRole        map[string]map[string]prometheus.Counter
}

func newSelection() Selection {
	s := Selection{Total: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_dynamo_selection_total",
		Help: "Dynamo worker selections by role (prefill, decode) and reason.",
	}, []string{"role", "reason"}), byRole: map[string]map[string]prometheus.Counter{},
		ActiveRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "switchyard_dynamo_active_refused_total",
			Help: "Requests routed but not tracked by the router's active-sequence account, which was full.",
		})}
	for _, role := range []string{"prefill", "decode"} {
		s.byRole[role] = map[string]prometheus.Counter{}
		for _, reason := range picker.Reasons {
			s.byRole[role][reason] = s.Total.WithLabelValues(role, reason)
		}
	}
	return s
}

// Count increments one (role, reason); pairs outside the closed set are
// ignored rather than creating a series.
func (s *Selection) Count(role, reason string) {
	if c, ok := s.byRole[role][reason]; ok {
		c.Inc()
	}
}
