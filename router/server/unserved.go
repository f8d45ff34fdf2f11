package server

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"switchyard/router/config"
	"switchyard/router/discovery"
)

// maxUnservedWarnings bounds the (namespace, model) pairs remembered for
// logging once: fleet-authored cards could name endlessly many.
const maxUnservedWarnings = 1024

// unservedModels logs, once per namespace and model, a discovered model
// that the configuration gives no way to serve (no enabled shim backend
// in its namespace's pool, or Dynamo pinning off): the operator sees
// workers in the admin API while clients get 404s.
type unservedModels struct {
	mu     sync.Mutex
	warned map[[2]string]bool
	count  prometheus.Counter
}

func newUnservedModels(reg prometheus.Registerer) *unservedModels {
	c := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "switchyard_dynamo_unserved_models_total",
		Help: "Discovered (namespace, model) pairs no shim backend could serve, each counted (and logged) once.",
	})
	reg.MustRegister(c)
	return &unservedModels{warned: map[[2]string]bool{}, count: c}
}

// check looks at every worker of snap under cfg.
func (u *unservedModels) check(cfg *config.Config, snap *discovery.Snapshot, log func(namespace, model string)) {
	u.mu.Lock()
	defer u.mu.Unlock()
	served := map[string]bool{}
	for _, w := range snap.Workers {
		if w.Model == "" || len(u.warned) >= maxUnservedWarnings {
			continue
		}
		ok, seen := served[w.Namespace]
		if !seen {
			ok = cfg.ServesNamespace(w.Namespace)
			served[w.Namespace] = ok
		}
		k := [2]string{w.Namespace, w.Model}
		if ok || u.warned[k] {
			continue
		}
		u.warned[k] = true
		u.count.Inc()
		log(w.Namespace, w.Model)
	}
}

// warnUnserved checks a new snapshot against the live configuration.
func (s *Server) warnUnserved(snap *discovery.Snapshot) {
	s.unserved.check(s.cfg.Load(), snap, func(namespace, model string) {
		s.log.Warn("a discovered model has no shim backend to serve it; clients asking for it get 404 "+
			"(list a direct-mode frontend in dynamo.shim and set disaggregated_serving.enabled)",
			"namespace", namespace, "model", model)
	})
}
