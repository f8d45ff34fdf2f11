package config

import "slices"

// ShimPools lists the shim pools with both spellings normalized:
// shim.backends is the one pool of the single watched namespace.
func (c *Config) ShimPools() []ShimPool {
	s := c.Dynamo.Shim
	if len(s.Pools) > 0 {
		return s.Pools
	}
	ns := c.Dynamo.Discovery.Namespaces()
	if len(s.Backends) == 0 || len(ns) == 0 {
		return nil
	}
	return []ShimPool{{Namespace: ns[0], Backends: s.Backends}}
}

// ServesNamespace reports whether, by the file alone, models discovered
// in namespace ns could be served: requests are pinned only with Dynamo
// and disaggregated serving on, through ns's pool, and only to enabled
// backends.
func (c *Config) ServesNamespace(ns string) bool {
	if !c.Dynamo.Enabled || !c.DisaggregatedServing.Enabled {
		return false
	}
	enabled := make(map[string]bool, len(c.Backends))
	for _, b := range c.Backends {
		enabled[b.Name] = b.IsEnabled()
	}
	for _, p := range c.ShimPools() {
		if p.Namespace == ns && slices.ContainsFunc(p.Backends, func(n string) bool { return enabled[n] }) {
			return true
		}
	}
	return false
}
