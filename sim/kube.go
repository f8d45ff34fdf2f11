package sim

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"switchyard/fakefleet/kuberegistrar"
	"switchyard/router/discoverysource/k8ssource"
	"switchyard/router/events"
)

// kubeFleet is the fleet as the Kubernetes objects its workers write, read
// by the router's own translation (k8ssource) rather than a model of it:
// the objects go in, the discovery events the live source would hand the
// core come out. One of meta and pods is set, after the scenario's source.
type kubeFleet struct {
	namespace string
	meta      *k8ssource.MetaFleet
	pods      *k8ssource.PodFleet
}

func newKubeFleet(sc *Scenario) *kubeFleet {
	k := &kubeFleet{namespace: sc.Namespace}
	if sc.Discovery.Source == SourceKubernetesPods {
		k.pods = k8ssource.NewPodFleet(k8ssource.Config{Namespace: sc.Namespace, DynamoNamespaces: []string{sc.Namespace}, Model: sc.Model}, nil, nil)
	} else {
		k.meta = k8ssource.NewMetaFleet([]string{sc.Namespace}, nil, nil)
	}
	return k
}

// podName names a worker's Pod after its component and fleet index, so
// names (and the instance ids hashed from them) are the same run after run.
func podName(component string, index int) string { return fmt.Sprintf("%s-%d", component, index) }

// channels reports whether the router learns of the workers' event
// channels: Pods alone carry none.
func (k *kubeFleet) channels() bool { return k.pods == nil }

// seed is the router's first list of the fleet, every worker ready, in
// name order as the API server lists.
func (k *kubeFleet) seed(workers []*worker, at time.Time) []events.Event {
	byName := slices.Clone(workers)
	slices.SortFunc(byName, func(a, b *worker) int { return compareKeys(a.pod, b.pod) })
	if k.pods != nil {
		pods := make([]*corev1.Pod, 0, len(byName))
		for _, w := range byName {
			pods = append(pods, k.pod(w, true))
		}
		return k.pods.Relist(pods, at, 1)
	}
	objects := make([]*unstructured.Unstructured, 0, len(byName))
	ready := make([]*discoveryv1.EndpointSlice, 0, len(byName))
	for _, w := range byName {
		objects = append(objects, k.metadata(w))
		ready = append(ready, kuberegistrar.EndpointSlice(k.namespace, w.pod, true))
	}
	return k.meta.Relist(objects, ready, at, 1)
}

// notReady is a dead worker's Pod failing readiness: its EndpointSlice
// endpoint (metadata) or its Pod's Ready condition (Pods) turns false.
func (k *kubeFleet) notReady(w *worker, at time.Time) []events.Event {
	if k.pods != nil {
		return k.pods.Upsert(k.pod(w, false), at)
	}
	return k.meta.UpsertSlice(kuberegistrar.EndpointSlice(k.namespace, w.pod, false), at)
}

// rewritten is the worker's DynamoWorkerMetadata as it stands now (after a
// publisher restart), nil under the Pod source, where nothing is written.
func (k *kubeFleet) rewritten(w *worker) *unstructured.Unstructured {
	if k.pods != nil {
		return nil
	}
	return k.metadata(w)
}

// malformed is an update of the worker's DynamoWorkerMetadata whose
// spec.data is not an object; the source keeps its last valid records.
func (k *kubeFleet) malformed(w *worker) *unstructured.Unstructured {
	u := k.metadata(w)
	u.Object["spec"] = map[string]any{"data": "{not json"}
	return u
}

// apply folds an object the worker wrote, nil for none.
func (k *kubeFleet) apply(u *unstructured.Unstructured, at time.Time) []events.Event {
	if u == nil || k.meta == nil {
		return nil
	}
	return k.meta.UpsertObject(u, at)
}

func (k *kubeFleet) pod(w *worker, ready bool) *corev1.Pod {
	p := kuberegistrar.Pod(k.namespace, w.pod, w.registrarWorker())
	kuberegistrar.SetReady(p, ready)
	return p
}

func (k *kubeFleet) metadata(w *worker) *unstructured.Unstructured {
	u, err := kuberegistrar.Metadata(k.namespace, w.pod, "", w.records)
	if err != nil {
		// registrar.Records writes only the three metadata buckets.
		panic(fmt.Sprintf("sim: worker %s: %v", w.label, err))
	}
	return u
}
