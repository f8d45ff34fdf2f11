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
func (s *Scheduler) KVOptions() (o KVOptions, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k, isKV := s.policy.(*kvPolicy)
	if !isKV {
		return KVOptions{}, false
	}
	return k.opts, true
}
