package picker

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
