package k8ssource

import (
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"switchyard/router/events"
)

// The translations below are the sources' whole judgement of what the
// objects they read mean to the core, with no client, goroutine or clock:
// objects and a time go in, discovery events come out, in an order that
// depends only on the input. The watchers feed them what the API server
// sends; the simulator feeds them the objects its workers would write, so
// a simulated Kubernetes fleet is discovered by the same code as a live one.

// MetaFleet translates DynamoWorkerMetadata resources and their readiness
// EndpointSlices (dynamo.discovery.source: kubernetes) into the records the
// etcd reducer reads. Not safe for concurrent use.
type MetaFleet struct {
	*metaFleet
}

// NewMetaFleet makes an empty translation for the given Dynamo namespaces.
// log and count may be nil.
func NewMetaFleet(dynamoNamespaces []string, log *slog.Logger, count func(string)) *MetaFleet {
	log, count = orDiscard(log, count)
	return &MetaFleet{newMetaFleet(dynamoNamespaces, log, count)}
}

// Relist replaces everything held with a fresh list of both resources and
// returns one DiscoveryResync per Dynamo namespace. Resources beyond
// MaxMetadataObjects are left out, as a truncated list is.
func (m *MetaFleet) Relist(objects []*unstructured.Unstructured, slices []*discoveryv1.EndpointSlice, at time.Time, revision int64) []events.Event {
	objs := make([]metaObject, 0, min(len(objects), m.maxObjects))
	for _, u := range objects[:min(len(objects), m.maxObjects)] {
		objs = append(objs, readObject(u))
	}
	ready := make([]readySlice, 0, min(len(slices), m.maxObjects))
	for _, s := range slices[:min(len(slices), m.maxObjects)] {
		ready = append(ready, readSlice(s))
	}
	return m.relist(objs, ready, at, revision)
}

// UpsertObject folds an added or modified DynamoWorkerMetadata.
func (m *MetaFleet) UpsertObject(u *unstructured.Unstructured, at time.Time) []events.Event {
	return m.upsertObject(readObject(u), at)
}

// RemoveObject folds a deleted DynamoWorkerMetadata.
func (m *MetaFleet) RemoveObject(name string, at time.Time) []events.Event {
	return m.removeObject(name, at)
}

// UpsertSlice folds an added or modified readiness EndpointSlice.
func (m *MetaFleet) UpsertSlice(s *discoveryv1.EndpointSlice, at time.Time) []events.Event {
	return m.upsertSlice(readSlice(s), at)
}

// RemoveSlice folds a deleted readiness EndpointSlice.
func (m *MetaFleet) RemoveSlice(name string, at time.Time) []events.Event {
	return m.removeSlice(name, at)
}

// PodFleet translates the operator-labelled worker Pods
// (dynamo.discovery.source: kubernetes_pods) into an Endpoint and a minimal
// model card per ready worker Pod. Not safe for concurrent use.
type PodFleet struct {
	fleet
	namespaces []string
}

// NewPodFleet makes an empty translation for cfg's Dynamo namespaces and
// models (the rest of cfg is not read). log and count may be nil.
func NewPodFleet(cfg Config, log *slog.Logger, count func(string)) *PodFleet {
	log, count = orDiscard(log, count)
	return &PodFleet{
		fleet:      fleet{models: newModels(cfg), hash: HashPodName, maxPods: MaxPods, log: log, count: count, pods: map[string]*podEntry{}},
		namespaces: cfg.DynamoNamespaces,
	}
}

// Relist replaces the held Pods with a fresh list and returns one
// DiscoveryResync per Dynamo namespace. Pods beyond the ceiling are left
// out and counted, as a truncated list is.
func (p *PodFleet) Relist(pods []*corev1.Pod, at time.Time, revision int64) []events.Event {
	list := make([]*podEntry, 0, min(len(pods), p.maxPods))
	for _, pod := range pods {
		if len(list) == p.maxPods {
			p.count(KindSeedTruncated)
			break
		}
		list = append(list, p.describe(pod, p.pods[pod.Name]))
	}
	return p.relist(list, p.namespaces, at, revision)
}

// Upsert folds an added or modified Pod.
func (p *PodFleet) Upsert(pod *corev1.Pod, at time.Time) []events.Event { return p.upsert(pod, at) }

// Remove folds a deleted Pod, or one that left the selector.
func (p *PodFleet) Remove(name string, at time.Time) []events.Event { return p.remove(name, at) }

func orDiscard(log *slog.Logger, count func(string)) (*slog.Logger, func(string)) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if count == nil {
		count = func(string) {}
	}
	return log, count
}
