package gateway

// BackendState is one configured backend as the gateway sees it now.
type BackendState struct {
	Name string
	// Shim: listed in a dynamo.shim pool.
	Shim bool
	// Usable: enabled, healthy, and its circuit breaker lets an attempt
	// through; the same test requests are routed by (before API keys).
	Usable bool
}

// Backends reports every configured backend's state, in configuration
// order, for readiness reports. It reads and changes nothing else.
func (g *Gateway) Backends() []BackendState {
	st := g.st.Load()
	now := g.clock.Now()
	out := make([]BackendState, len(st.backends))
	for i, b := range st.backends {
		out[i] = BackendState{Name: b.name, Shim: b.shim, Usable: b.usable(nil, now)}
	}
	return out
}
