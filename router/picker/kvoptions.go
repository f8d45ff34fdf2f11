package picker

import "switchyard/router/config"

// KVOptionsFrom reads the KV-aware picker's settings from dynamo.kv, as
// the live router applies them at start and on every reload (and replay
// reads them from a recorded configuration).
func KVOptionsFrom(k config.KV) KVOptions {
	return KVOptions{OverlapScoreCredit: k.OverlapScoreCredit, PrefillLoadScale: k.PrefillLoadScale,
		Temperature: k.RouterTemperature, ConditionalDisagg: k.ConditionalDisaggregation.Enabled,
		DecodeBusyThreshold: k.ConditionalDisaggregation.DecodeBusyThreshold}
}

// KVOptions returns the KV settings the picker selects with; ok is false
// for a picker without the KV-aware policy.
func (p *LoadBased) KVOptions() (o KVOptions, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.kv == nil {
		return KVOptions{}, false
	}
	return p.kv.opts, true
}
