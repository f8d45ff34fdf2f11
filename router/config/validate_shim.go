package config

import (
	"slices"
	"strconv"
	"strings"
)

const (
	maxShimBackends = 64
	maxModelMap     = 1024
)

func (k *checker) shim(c *Config) {
	const p = "dynamo.shim"
	s := c.Dynamo.Shim
	byName := make(map[string]Backend, len(c.Backends))
	for _, b := range c.Backends {
		byName[b.Name] = b
	}
	namespaces := c.Dynamo.Discovery.Namespaces()
	listed := len(s.Backends) > 0 || len(s.Pools) > 0

	if len(s.Backends) > 0 && len(s.Pools) > 0 {
		k.err(p, "set either backends or pools, not both")
	}
	if len(s.Backends) > 0 && len(namespaces) > 1 {
		k.err(p+".backends", "%d Dynamo namespaces are configured: use shim.pools, one pool per namespace, instead of shim.backends", len(namespaces))
	}
	k.replicaList(p+".backends", s.Backends, byName)

	owner := map[string]string{}
	poolOf := map[string]int{}
	for i, pool := range s.Pools {
		q := index(p+".pools", i)
		switch {
		case pool.Namespace == "":
			k.err(q+".namespace", "must not be empty")
		case !slices.Contains(namespaces, pool.Namespace):
			k.err(q+".namespace", "%q is not a configured Dynamo namespace (%s)", pool.Namespace, strings.Join(namespaces, ", "))
		default:
			if j, dup := poolOf[pool.Namespace]; dup {
				k.err(q+".namespace", "namespace %q already has a pool at %s", pool.Namespace, index(p+".pools", j))
			} else {
				poolOf[pool.Namespace] = i
			}
		}
		if len(pool.Backends) == 0 {
			k.err(q+".backends", "must list at least one backend")
		}
		if !k.replicaList(q+".backends", pool.Backends, byName) {
			continue
		}
		// A replica resolves pinned instance ids in one graph only.
		for j, name := range pool.Backends {
			if prev, taken := owner[name]; taken {
				k.err(index(q+".backends", j), "backend %q already belongs to %s", name, prev)
			} else {
				owner[name] = q
			}
		}
	}
	if len(s.Pools) > 0 || (listed && len(namespaces) > 1) {
		for _, ns := range namespaces {
			if _, ok := poolOf[ns]; !ok {
				k.err(p+".pools", "namespace %q has no pool; every configured namespace needs exactly one", ns)
			}
		}
	}

	if len(s.ModelMap) > maxModelMap {
		k.err(p+".model_map", "at most %d entries, got %d", maxModelMap, len(s.ModelMap))
	}
	keys := make([]string, 0, len(s.ModelMap))
	for key := range s.ModelMap {
		keys = append(keys, key)
	}
	slices.Sort(keys)
	for _, key := range keys {
		q := p + ".model_map[" + strconv.Quote(key) + "]"
		if strings.TrimSpace(key) == "" {
			k.err(q, "client model id (the key) must not be empty")
		}
		if strings.TrimSpace(s.ModelMap[key]) == "" {
			k.err(q, "Dynamo model name (the value) must not be empty")
		}
	}

	if listed && (!c.Dynamo.Enabled || !c.DisaggregatedServing.Enabled) {
		off := "dynamo.enabled is"
		if c.Dynamo.Enabled {
			off = "disaggregated_serving.enabled is"
		} else if !c.DisaggregatedServing.Enabled {
			off = "dynamo.enabled and disaggregated_serving.enabled are"
		}
		k.warn(p, "shim replicas are listed but %s false: no request will be pinned through them", off)
	}
	k.shimServes(c, byName)
}

// shimServes warns when Dynamo is on but what it discovers cannot be
// served. Discovered workers are reached only by pinning through their
// namespace's shim pool, so statically a namespace's models are servable
// when its pool has an enabled backend (disaggregated_serving.enabled is
// checked above, next to the replicas it concerns).
func (k *checker) shimServes(c *Config, byName map[string]Backend) {
	const p = "dynamo.shim"
	s := c.Dynamo.Shim
	if !c.Dynamo.Enabled {
		return
	}
	if len(s.Backends) == 0 && len(s.Pools) == 0 {
		if c.EPP.Enabled {
			return // the endpoint picker serves the discovered models through a gateway
		}
		k.warn(p, "dynamo.enabled is true but no shim backend is listed: models of discovered workers cannot be served; "+
			"add a backend for the direct-mode frontend, list it in dynamo.shim.backends and set disaggregated_serving.enabled")
		return
	}
	anyEnabled := func(names []string) bool {
		return slices.ContainsFunc(names, func(n string) bool { b, ok := byName[n]; return ok && b.IsEnabled() })
	}
	if len(s.Pools) == 0 {
		if !anyEnabled(s.Backends) {
			k.warn(p+".backends", "no listed backend is enabled: models of discovered workers cannot be served")
		}
		return
	}
	for i, pool := range s.Pools {
		if len(pool.Backends) > 0 && !anyEnabled(pool.Backends) {
			k.warn(index(p+".pools", i)+".backends", "no listed backend is enabled: models discovered in namespace %q cannot be served", pool.Namespace)
		}
	}
}

// replicaList checks a list of shim replicas, which must be configured
// backends; it reports whether every entry resolved.
func (k *checker) replicaList(path string, names []string, byName map[string]Backend) bool {
	ok := k.uniqueList(path, names, maxShimBackends, func(s string) string {
		if s == "" {
			return "must not be empty"
		}
		if _, found := byName[s]; !found {
			return "names no configured backend (backends[].name)"
		}
		return ""
	})
	for i, name := range names {
		b, found := byName[name]
		if !found {
			continue
		}
		if b.Internal {
			k.warn(index(path, i), "backend %q is internal: true; it is not offered to clients, so check this is intended", name)
		}
		if !b.IsEnabled() {
			k.warn(index(path, i), "backend %q is enabled: false; requests cannot be pinned through it", name)
		}
	}
	return ok
}
