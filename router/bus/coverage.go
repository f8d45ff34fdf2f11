package bus

// Sessions counts the live, non-draining broker sessions that declared
// namespace: the coverage reporter's switchyard_dynamo_broker_namespace_sessions.
func (l *Listener) Sessions(namespace string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.sessions {
		if l.coversLocked(s, namespace) {
			n++
		}
	}
	return n
}
