package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"switchyard/router/config"
	"switchyard/router/discovery"
	"switchyard/router/gateway"
)

// Names of the /ready checks, in the order they are reported.
const (
	checkDiscovery = "discovery"
	checkWorkers   = "workers"
	checkBackends  = "backends"
)

// maxNamedModels bounds how many models one check's detail names.
const maxNamedModels = 8

// readyCheck is one condition /ready reports.
type readyCheck struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// readiness is the /ready body: ready only when every check passes.
type readiness struct {
	Status string       `json:"status"` // "ready" or "not_ready"
	Checks []readyCheck `json:"checks"`
}

func (r readiness) ready() bool { return r.Status == "ready" }

// readinessOf judges whether the process can route a request now. It
// reads only what it is given, so tests can state any fleet.
func readinessOf(cfg *config.Config, connected bool, snap *discovery.Snapshot, backends []gateway.BackendState) readiness {
	checks := []readyCheck{
		discoveryCheck(cfg, connected),
		workersCheck(cfg, snap),
		backendsCheck(backends),
	}
	status := "ready"
	for _, c := range checks {
		if !c.OK {
			status = "not_ready"
		}
	}
	return readiness{Status: status, Checks: checks}
}

func discoveryCheck(cfg *config.Config, connected bool) readyCheck {
	c := readyCheck{Name: checkDiscovery, OK: true, Detail: "dynamo is disabled"}
	if !cfg.Dynamo.Enabled {
		return c
	}
	src := cfg.Dynamo.Discovery.Source
	if connected {
		c.Detail = "watching " + src
		return c
	}
	c.OK, c.Detail = false, "not connected to "+src+" (see the discovery warnings in the log)"
	return c
}

// workersCheck wants, for every served model (ServedModels), a routable
// worker in a namespace whose shim pool serves it; with no served model
// configured, a routable worker in any watched namespace.
func workersCheck(cfg *config.Config, snap *discovery.Snapshot) readyCheck {
	c := readyCheck{Name: checkWorkers, OK: true, Detail: "dynamo is disabled"}
	if !cfg.Dynamo.Enabled {
		return c
	}
	served := ServedModels(cfg)
	if len(served) == 0 {
		n := 0
		for _, w := range snap.Workers {
			if routable(w) {
				n++
			}
		}
		if n == 0 {
			c.OK, c.Detail = false, "no routable (decode or aggregated) worker discovered"
		} else {
			c.Detail = fmt.Sprintf("%d routable workers; no shim backend lists a model", n)
		}
		return c
	}
	var missing []string
	for _, m := range served {
		if !slices.ContainsFunc(snap.Workers, func(w *discovery.Worker) bool {
			return routable(w) && w.Model == m.Model && slices.Contains(m.Namespaces, w.Namespace)
		}) {
			missing = append(missing, m.Model)
		}
	}
	if len(missing) == 0 {
		c.Detail = "every served model has a routable worker"
		if len(served) > 1 {
			c.Detail = fmt.Sprintf("each of the %d served models has a routable worker", len(served))
		}
		return c
	}
	c.OK, c.Detail = false, "no routable worker for "+nameSome(missing)
	return c
}

// routable: a worker a pinned request can be sent to. A prefill worker
// alone serves nothing, and unknown roles are never routed to.
func routable(w *discovery.Worker) bool {
	return w.Role == discovery.RoleDecode || w.Role == discovery.RoleAggregated
}

func backendsCheck(backends []gateway.BackendState) readyCheck {
	c := readyCheck{Name: checkBackends}
	usable := 0
	for _, b := range backends {
		if b.Usable {
			usable++
		}
	}
	switch {
	case len(backends) == 0:
		c.Detail = "no backend is configured"
	case usable == 0:
		c.Detail = fmt.Sprintf("none of %d backends is usable (unhealthy, disabled or breaker open)", len(backends))
	default:
		c.OK, c.Detail = true, fmt.Sprintf("%d of %d backends usable", usable, len(backends))
	}
	return c
}

// nameSome joins up to maxNamedModels names and says how many more there are.
func nameSome(names []string) string {
	if len(names) <= maxNamedModels {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:maxNamedModels], ", "), len(names)-maxNamedModels)
}

// ServedModel is a Dynamo model the configuration routes through shims,
// with the namespaces whose shim pools serve it.
type ServedModel struct {
	// Model is the name workers are matched on: the client id a shim
	// backend lists in models, after dynamo.shim.model_map.
	Model      string
	Namespaces []string
}

// ServedModels lists, in configuration order, the models the enabled
// backends of the dynamo.shim pools list in their models, mapped through
// dynamo.shim.model_map, each with the namespaces of the pools serving it.
// These are the models /ready wants a routable worker for.
func ServedModels(cfg *config.Config) []ServedModel {
	byName := make(map[string]config.Backend, len(cfg.Backends))
	for _, b := range cfg.Backends {
		byName[b.Name] = b
	}
	var out []ServedModel
	index := map[string]int{}
	for _, p := range cfg.ShimPools() {
		for _, name := range p.Backends {
			b, ok := byName[name]
			if !ok || !b.IsEnabled() {
				continue
			}
			for _, client := range b.Models {
				model := client
				if m, ok := cfg.Dynamo.Shim.ModelMap[client]; ok {
					model = m
				}
				i, seen := index[model]
				if !seen {
					i = len(out)
					index[model] = i
					out = append(out, ServedModel{Model: model})
				}
				if !slices.Contains(out[i].Namespaces, p.Namespace) {
					out[i].Namespaces = append(out[i].Namespaces, p.Namespace)
				}
			}
		}
	}
	return out
}

// serveReady answers /ready: 200 when every check passes, 503 otherwise,
// with every check in the body either way.
func (s *Server) serveReady(w http.ResponseWriter, _ *http.Request) {
	r := readinessOf(s.cfg.Load(), s.discovery.Connected(), s.discovery.Snapshot(), s.gateway.Backends())
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if !r.ready() {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(r)
}
