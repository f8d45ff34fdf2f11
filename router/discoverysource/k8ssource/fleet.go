package k8ssource

import (
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"

	"switchyard/router/discovery"
	"switchyard/router/events"
)

// Count kinds reported through New's count callback (the closed set of
// switchyard_dynamo_discovery_events_total).
const (
	KindResync        = "resync"
	KindRefused       = "refused"
	KindOverCapacity  = "over_capacity"
	KindSeedTruncated = "seed_truncated"
	KindCompacted     = "compacted"
	KindWatchEnded    = "watch_ended"
	KindConnectFailed = "connect_failed"
)

// fleet holds the selected Pods by name and decides what each contributes
// to the core. It is used by one goroutine at a time (the watcher's).
type fleet struct {
	models  models
	hash    func(string) uint64
	maxPods int
	log     *slog.Logger
	count   func(string)

	pods map[string]*podEntry
	// overLogged: the capacity warning was logged and not yet cleared.
	overLogged bool
}

// publish decides what e contributes, logging and counting (once per Pod)
// the Pods that are refused or left unpublished.
func (f *fleet) publish(e *podEntry) published {
	if !e.ready || e.role == discovery.RoleUnknown {
		return published{}
	}
	if e.containerMode {
		if !e.refusedNoted {
			e.refusedNoted = true
			f.count(KindRefused)
			f.log.Warn("refusing a Pod in container discovery mode; only pod mode is supported",
				"pod", e.name, "annotation", annotationMode)
		}
		return published{}
	}
	model := f.models.of(e)
	if model == "" {
		if !e.unlistedNoted {
			e.unlistedNoted = true
			f.log.Debug("holding a ready worker Pod whose component has no model in kubernetes.models",
				"pod", e.name, "dynamo_namespace", e.dynamoNamespace, "component", e.component)
		}
		return published{}
	}
	return published{namespace: e.dynamoNamespace, records: workerRecords(e, f.hash(e.name), model)}
}

// describe reads a Pod, keeping the once-only flags of the entry it
// replaces.
func (f *fleet) describe(p *corev1.Pod, prev *podEntry) *podEntry {
	e := describePod(p)
	if prev != nil {
		e.refusedNoted, e.unlistedNoted = prev.refusedNoted, prev.unlistedNoted
	}
	e.out = f.publish(e)
	return e
}

// relist replaces the held Pods with a fresh list and returns one
// DiscoveryResync per Dynamo namespace, so Pods gone between passes leave
// the core and a list that finds the same fleet changes nothing.
func (f *fleet) relist(list []*podEntry, namespaces []string, at time.Time, revision int64) []events.Event {
	next := make(map[string]*podEntry, len(list))
	byNS := map[string][]events.DiscoveryRecord{}
	for _, e := range list {
		next[e.name] = e
		if e.out.namespace != "" {
			byNS[e.out.namespace] = append(byNS[e.out.namespace], e.out.records...)
		}
	}
	f.pods = next
	f.overLogged = false
	batch := make([]events.Event, 0, len(namespaces))
	for _, ns := range namespaces {
		batch = append(batch, events.DiscoveryResync{At: at, Namespace: ns, Records: byNS[ns], Revision: revision})
	}
	return batch
}

// upsert folds an added or modified Pod and returns the events that carry
// its change to the core. A Pod beyond the ceiling is refused and counted.
func (f *fleet) upsert(p *corev1.Pod, at time.Time) []events.Event {
	prev := f.pods[p.Name]
	if prev == nil && len(f.pods) >= f.maxPods {
		f.count(KindOverCapacity)
		if !f.overLogged {
			f.overLogged = true
			f.log.Warn("kubernetes pod discovery at capacity; refusing new Pods", "limit", f.maxPods, "pod", p.Name)
		}
		return nil
	}
	e := f.describe(p, prev)
	f.pods[p.Name] = e
	var old published
	if prev != nil {
		old = prev.out
	}
	return diff(at, old, e.out)
}

// remove forgets a deleted Pod (or one that no longer matches the
// selector) and returns the deletes of what it contributed.
func (f *fleet) remove(name string, at time.Time) []events.Event {
	prev := f.pods[name]
	if prev == nil {
		return nil
	}
	delete(f.pods, name)
	if len(f.pods) < f.maxPods {
		f.overLogged = false
	}
	return diff(at, prev.out, published{})
}
