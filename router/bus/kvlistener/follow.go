package kvlistener

import (
	"context"
	"log/slog"

	"switchyard/router/clock"
	"switchyard/router/config"
	"switchyard/router/discovery"
	"switchyard/router/envelope"
	"switchyard/router/eventplane"
)

// Subscriptions are the listener's kv-events subscriptions to its
// backends' workers: the router's own bounded ZMTP client and decoders,
// dialing the publishers its discovery advertises (allow: the CIDRs it may
// dial, nil for any).
func (l *Listener) Subscriptions(clk clock.Clock, log *slog.Logger, allow *eventplane.Dialer) *eventplane.Supervisor {
	if allow == nil {
		allow = &eventplane.Dialer{}
	}
	return eventplane.NewSupervisor(eventplane.Family{
		Topic: discovery.TopicKVEvents, Limits: envelope.KVEventLimits, Sink: l,
	}, eventplane.Policy{Transport: config.TransportDirect, Dialer: allow}, clk, log, func(r envelope.Result) {
		if r != envelope.Applied {
			l.met.Subscriptions.WithLabelValues(r.String()).Inc()
		}
	})
}

// Follow reconciles sup with reg's snapshots, restricted to the
// listener's namespaces, until ctx ends; then it stops sup.
func (l *Listener) Follow(ctx context.Context, reg *discovery.Registry, sup *eventplane.Supervisor) {
	defer sup.Stop()
	for {
		changed := reg.Changed()
		sup.Reconcile(l.ownPublishers(reg.Snapshot()))
		select {
		case <-changed:
		case <-ctx.Done():
			return
		}
	}
}

// ownPublishers is snap with only the kv-events publishers of the
// listener's namespaces.
func (l *Listener) ownPublishers(snap *discovery.Snapshot) *discovery.Snapshot {
	f := *snap
	f.Publishers = nil
	for _, p := range snap.Publishers {
		if p.Topic == discovery.TopicKVEvents && l.byNS[p.Namespace] != nil {
			f.Publishers = append(f.Publishers, p)
		}
	}
	return &f
}
