package broker

import (
	"context"
	"errors"
	"fmt"
	"net"

	"switchyard/router/bus/wire"
)

// The kv_listener role: the same session, streams and drain as a broker,
// with announced backends in the hello and a Serve function in place of
// dialing publishers.

// announcing reports whether the agent is a kv_listener.
func (a *Agent) announcing() bool { return len(a.cfg.Sources) > 0 }

func checkSources(c Config) error {
	if len(c.Namespaces) > 0 || c.Directory != nil {
		return errors.New("a kv_listener announces sources, not namespaces")
	}
	if c.Serve == nil {
		return errors.New("a kv_listener needs a function serving its sources")
	}
	if len(c.Sources) > wire.MaxSources {
		return fmt.Errorf("announce at most %d sources", wire.MaxSources)
	}
	seen := map[string]bool{}
	for _, b := range c.Sources {
		if !validName(b, wire.MaxNameBytes) {
			return fmt.Errorf("backend %q is not a valid name", b)
		}
		if seen[b] {
			return fmt.Errorf("backend %q announced twice", b)
		}
		seen[b] = true
	}
	return nil
}

// hello is the session's first message.
func (a *Agent) hello() wire.Message {
	m := wire.Message{Type: wire.TypeHello, Role: wire.RoleBroker, ClientID: a.cfg.ClientID, Versions: []int{wire.Version}}
	if a.announcing() {
		m.Role = wire.RoleKVListener
		for _, b := range a.cfg.Sources {
			m.Sources = append(m.Sources, wire.Source{Backend: b})
		}
		return m
	}
	m.DynamoNamespaces = a.cfg.Namespaces
	return m
}

// dial connects a relay to what it carries: a publisher, or an announced
// source.
func (a *Agent) dial(ctx context.Context, r *relay) (net.Conn, error) {
	if a.announcing() {
		return a.cfg.Serve(ctx, r.wt)
	}
	return a.cfg.Dial(ctx, r.target)
}
