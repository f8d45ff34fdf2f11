package k8ssource

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"switchyard/internal/kubetest"
	"switchyard/router/clock"
)

// These tests run the metadata watcher against a real kube-apiserver
// (envtest) with the shipped DynamoWorkerMetadata CRD installed.

const crdDir = "../../../deploy/kubernetes/crds"

type metaHarness struct {
	t   *testing.T
	cs  *kubernetes.Clientset
	dyn dynamic.ResourceInterface
	ns  string
	w   *MetaWatcher
	out *sink
}

func newMetaHarness(t *testing.T, rc *rest.Config, tune func(*MetaWatcher)) *metaHarness {
	kubetest.InstallCRDs(t, crdDir)
	ns := kubetest.Namespace(t)
	if rc == nil {
		rc = kubetest.Config(t)
	}
	out := newSink()
	cfg := Config{
		Namespace: ns, DynamoNamespaces: []string{"graph"},
		BackoffInitial: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond,
		REST: rc,
	}
	w := NewMeta(cfg, out, clock.Real{}, nil, out.count)
	if tune != nil {
		tune(w)
	}
	dyn, err := dynamic.NewForConfig(kubetest.Config(t))
	require.NoError(t, err)
	return &metaHarness{t: t, cs: kubetest.Client(t), dyn: dyn.Resource(metaGVR).Namespace(ns), ns: ns, w: w, out: out}
}

func (h *metaHarness) run() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.w.Run(ctx) }()
	h.t.Cleanup(func() {
		cancel()
		require.NoError(h.t, <-done)
	})
}

func (h *metaHarness) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	h.t.Cleanup(cancel)
	return ctx
}

// workerData is the spec.data a Dynamo worker Pod named pod publishes:
// its generate endpoint, its card and its kv_metrics publisher.
func workerData(dynamoNS, pod, workerType, model string) map[string]any {
	id := HashPodName(pod)
	key := fmt.Sprintf("%s/backend/generate/%x", dynamoNS, id)
	base := map[string]any{"namespace": dynamoNS, "component": "backend", "endpoint": "generate", "instance_id": int64(id)}
	endpoint := with(base, map[string]any{"type": "Endpoint", "transport": map[string]any{"tcp": "10.0.0.4:31000/x/generate"}})
	card := with(base, map[string]any{"type": "Model", "card_json": map[string]any{
		"display_name": model, "worker_type": workerType, "kv_cache_block_size": int64(64),
		"runtime_config": map[string]any{"total_kv_blocks": int64(1000)},
	}})
	channel := map[string]any{"type": "EventChannel", "namespace": dynamoNS, "component": "backend", "topic": "kv_metrics",
		"instance_id": int64(id), "transport": map[string]any{"kind": "Zmq", "config": map[string]any{"endpoint": "tcp://10.0.0.4:5557"}}}
	return map[string]any{
		"endpoints":      map[string]any{key: endpoint},
		"model_cards":    map[string]any{key: card},
		"event_channels": map[string]any{fmt.Sprintf("%s/backend/kv_metrics/%x", dynamoNS, id): channel},
	}
}

func with(a, b map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

func (h *metaHarness) putMeta(name string, data any, owner string) {
	h.t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": metaGroup + "/" + metaVersion, "kind": "DynamoWorkerMetadata",
		"metadata": map[string]any{"name": name, "namespace": h.ns},
		"spec":     map[string]any{"data": data},
	}}
	if owner != "" {
		u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: owner, UID: "00000000-0000-0000-0000-000000000001"}})
	}
	cur, err := h.dyn.Get(h.ctx(), name, metav1.GetOptions{})
	if err == nil {
		cur.Object["spec"] = u.Object["spec"]
		_, err = h.dyn.Update(h.ctx(), cur, metav1.UpdateOptions{})
	} else {
		_, err = h.dyn.Create(h.ctx(), u, metav1.CreateOptions{})
	}
	require.NoError(h.t, err)
}

func (h *metaHarness) deleteMeta(name string) {
	h.t.Helper()
	require.NoError(h.t, h.dyn.Delete(h.ctx(), name, metav1.DeleteOptions{}))
}

// putSlice writes an EndpointSlice listing pods with their readiness, as
// the EndpointSlice controller would for a worker Service.
func (h *metaHarness) putSlice(name string, selected bool, ready map[string]bool) {
	h.t.Helper()
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.ns}, AddressType: discoveryv1.AddressTypeIPv4}
	if selected {
		s.Labels = map[string]string{labelBackend: "kubernetes", labelEnabled: "true"}
	}
	i := 0
	for pod, r := range ready {
		i++
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{fmt.Sprintf("10.0.1.%d", i)},
			Conditions: discoveryv1.EndpointConditions{Ready: &r},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Name: pod, Namespace: h.ns},
		})
	}
	slices := h.cs.DiscoveryV1().EndpointSlices(h.ns)
	cur, err := slices.Get(h.ctx(), name, metav1.GetOptions{})
	if err == nil {
		s.ResourceVersion = cur.ResourceVersion
		_, err = slices.Update(h.ctx(), s, metav1.UpdateOptions{})
	} else {
		_, err = slices.Create(h.ctx(), s, metav1.CreateOptions{})
	}
	require.NoError(h.t, err)
}

func (h *metaHarness) waitWorkers(what string, want map[uint64]string) {
	h.t.Helper()
	waitFor(h.t, what, func() bool { return assert.ObjectsAreEqual(want, h.out.workers()) })
}

// publishers maps the held kv_metrics publishers to their addresses.
func (s *sink) publishers() map[uint64]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[uint64]string{}
	for _, p := range s.r.View().Publishers {
		out[p.PublisherID] = p.Address
	}
	return out
}

func TestMetaWatcherFollowsResourcesAndReadiness(t *testing.T) {
	h := newMetaHarness(t, nil, nil)
	h.putMeta("decode-0", workerData("graph", "decode-0", "Decode", "solar-pro4"), "decode-0")
	h.putMeta("prefill-0", workerData("graph", "prefill-0", "Prefill", "solar-pro4"), "")
	h.putMeta("other-0", workerData("other", "other-0", "Decode", "solar-pro4"), "")
	h.putMeta("starting-0", workerData("graph", "starting-0", "Aggregated", "solar-pro4"), "")
	h.putSlice("workers-a", true, map[string]bool{"decode-0": true, "prefill-0": true, "other-0": true, "starting-0": false})
	// A slice without the discovery labels says nothing about readiness.
	h.putSlice("unrelated", false, map[string]bool{"starting-0": true})
	h.run()

	want := map[uint64]string{id("decode-0"): "decode/solar-pro4", id("prefill-0"): "prefill/solar-pro4"}
	h.waitWorkers("the listed workers", want)
	waitFor(t, "connected", h.out.isConnected)
	assert.Equal(t, "tcp://10.0.0.4:5557", h.out.publishers()[id("decode-0")], "the card's event channel is fed too")

	// Created while watching: the resource first, readiness second.
	h.putMeta("decode-1", workerData("graph", "decode-1", "Decode", "solar-pro4"), "")
	h.putSlice("workers-b", true, map[string]bool{"decode-1": true})
	want[id("decode-1")] = "decode/solar-pro4"
	h.waitWorkers("a created worker", want)

	// Not ready to ready, and ready to not ready, through slice conditions.
	h.putSlice("workers-a", true, map[string]bool{"decode-0": false, "prefill-0": true, "other-0": true, "starting-0": true})
	want[id("starting-0")] = "aggregated/solar-pro4"
	delete(want, id("decode-0"))
	h.waitWorkers("readiness toggled", want)

	// An updated card.
	h.putMeta("prefill-0", workerData("graph", "prefill-0", "Prefill", "solar-pro5"), "")
	want[id("prefill-0")] = "prefill/solar-pro5"
	h.waitWorkers("an updated card", want)

	// Deleting the resource, and deleting the slice.
	h.deleteMeta("starting-0")
	delete(want, id("starting-0"))
	h.waitWorkers("a deleted resource", want)
	require.NoError(t, h.cs.DiscoveryV1().EndpointSlices(h.ns).Delete(h.ctx(), "workers-b", metav1.DeleteOptions{}))
	delete(want, id("decode-1"))
	h.waitWorkers("a deleted slice", want)
	assert.Equal(t, 1, h.out.resyncCount(), "changes arrive as diffs, not relists")
}

func TestMetaWatcherRefusesMismatchAndContainerMode(t *testing.T) {
	h := newMetaHarness(t, nil, nil)
	// A resource carrying another Pod's records.
	h.putMeta("worker-0", workerData("graph", "worker-1", "Decode", "m"), "")
	// Upstream's container mode: the resource is named <pod>-<container>.
	h.putMeta("worker-2-main", workerData("graph", "worker-2-main", "Decode", "m"), "worker-2")
	h.putMeta("worker-3", workerData("graph", "worker-3", "Decode", "m"), "worker-3")
	h.putSlice("workers", true, map[string]bool{"worker-0": true, "worker-2-main": true, "worker-2": true, "worker-3": true})
	h.run()

	h.waitWorkers("the one valid worker", map[uint64]string{id("worker-3"): "decode/m"})
	waitFor(t, "counts", func() bool { return h.out.kind(KindMismatch) == 1 && h.out.kind(KindRefused) == 1 })
	// Touching the refused resources does not count them again.
	h.putMeta("worker-0", workerData("graph", "worker-1", "Prefill", "m"), "")
	h.putMeta("worker-3", workerData("graph", "worker-3", "Decode", "m2"), "worker-3")
	h.waitWorkers("a later update", map[uint64]string{id("worker-3"): "decode/m2"})
	assert.Equal(t, 1, h.out.kind(KindMismatch))
	assert.Equal(t, 1, h.out.kind(KindRefused))
}

func TestMetaWatcherMalformedSpecKeepsLastValidRecords(t *testing.T) {
	h := newMetaHarness(t, nil, nil)
	h.putMeta("worker-0", workerData("graph", "worker-0", "Decode", "m"), "")
	h.putSlice("workers", true, map[string]bool{"worker-0": true})
	h.run()
	want := map[uint64]string{id("worker-0"): "decode/m"}
	h.waitWorkers("the worker", want)

	h.putMeta("worker-0", "not an object", "")
	waitFor(t, "malformed counted", func() bool { return h.out.kind(KindMalformed) == 1 })
	assert.Equal(t, want, h.out.workers(), "the last valid records stay")

	h.putMeta("worker-0", workerData("graph", "worker-0", "Decode", "m2"), "")
	h.waitWorkers("a valid spec again", map[uint64]string{id("worker-0"): "decode/m2"})

	// A new object under the same name has no valid records to keep.
	h.deleteMeta("worker-0")
	h.waitWorkers("deleted", map[uint64]string{})
	h.putMeta("worker-0", "not an object", "")
	waitFor(t, "the new uid counted", func() bool { return h.out.kind(KindMalformed) == 2 })
	assert.Empty(t, h.out.workers())
}

func TestMetaWatcherRefCountsSharedEventChannels(t *testing.T) {
	h := newMetaHarness(t, nil, nil)
	shared := func(pod, addr string) map[string]any {
		d := workerData("graph", pod, "Decode", "m")
		d["event_channels"] = map[string]any{"graph/backend/kv-events/1": map[string]any{
			"type": "EventChannel", "namespace": "graph", "component": "backend", "topic": "kv-events", "instance_id": int64(1),
			"transport": map[string]any{"kind": "Zmq", "config": map[string]any{"endpoint": addr}},
		}}
		return d
	}
	h.putMeta("worker-0", shared("worker-0", "tcp://a:1"), "")
	h.putMeta("worker-1", shared("worker-1", "tcp://b:1"), "")
	h.putSlice("workers", true, map[string]bool{"worker-0": true, "worker-1": true})
	h.run()
	waitFor(t, "the shared publisher", func() bool { return len(h.out.publishers()) == 1 && len(h.out.workers()) == 2 })

	h.deleteMeta("worker-1")
	waitFor(t, "the survivor's value", func() bool {
		return assert.ObjectsAreEqual(map[uint64]string{1: "tcp://a:1"}, h.out.publishers()) && len(h.out.workers()) == 1
	})
	h.deleteMeta("worker-0")
	waitFor(t, "the last contributor gone", func() bool { return len(h.out.publishers()) == 0 && len(h.out.workers()) == 0 })
}

func TestMetaWatcherListsInPages(t *testing.T) {
	var pagedObjects, pagedSlices atomic.Int64
	rc := kubetest.Config(t)
	rc.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.URL.Query().Get("limit") == "2" && r.URL.Query().Get("watch") == "" {
				switch {
				case strings.HasSuffix(r.URL.Path, "/"+metaResource):
					pagedObjects.Add(1)
				case strings.HasSuffix(r.URL.Path, "/endpointslices"):
					pagedSlices.Add(1)
				}
			}
			return rt.RoundTrip(r)
		})
	}
	h := newMetaHarness(t, rc, func(w *MetaWatcher) { w.lim.objectPage, w.lim.slicePage = 2, 2 })
	want := map[uint64]string{}
	for i := range 5 {
		name := fmt.Sprintf("worker-%d", i)
		h.putMeta(name, workerData("graph", name, "Decode", "m"), "")
		h.putSlice("slice-"+name, true, map[string]bool{name: true})
		want[id(name)] = "decode/m"
	}
	h.run()
	h.waitWorkers("every page", want)
	assert.Equal(t, int64(3), pagedObjects.Load(), "5 resources in pages of 2")
	assert.Equal(t, int64(3), pagedSlices.Load(), "5 slices in pages of 2")
}

func TestMetaWatcherRelistsAfterAClosedWatch(t *testing.T) {
	h := newMetaHarness(t, nil, func(w *MetaWatcher) { w.lim.watchTimeout = time.Second })
	h.putMeta("worker-0", workerData("graph", "worker-0", "Decode", "m"), "")
	h.putSlice("workers", true, map[string]bool{"worker-0": true})
	h.run()
	h.waitWorkers("the worker", map[uint64]string{id("worker-0"): "decode/m"})
	waitFor(t, "relists after the server closes a watch", func() bool { return h.w.Passes() >= 3 && h.out.resyncCount() >= 3 })
	assert.Positive(t, h.out.kind(KindWatchEnded))

	// Still following after the relists.
	h.putMeta("worker-1", workerData("graph", "worker-1", "Prefill", "m"), "")
	h.putSlice("workers", true, map[string]bool{"worker-0": true, "worker-1": true})
	h.waitWorkers("a change after the relists", map[uint64]string{id("worker-0"): "decode/m", id("worker-1"): "prefill/m"})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Each watch has its own idle deadline: a busy metadata watch does not
// keep a silent EndpointSlice watch alive.
func TestMetaWatcherIdleDeadlinesAreIndependent(t *testing.T) {
	clk := clock.NewManual(time.Unix(1_000_000, 0))
	h := newMetaHarness(t, nil, func(w *MetaWatcher) { w.clk = clk })
	h.putMeta("worker-0", workerData("graph", "worker-0", "Decode", "m"), "")
	h.putSlice("workers", true, map[string]bool{"worker-0": true})
	h.run()
	waitFor(t, "connected", h.out.isConnected)
	require.True(t, clk.WaitForTimers(2, nil), "both idle deadlines are armed")

	clk.Advance(idleTimeout / 2)
	// Metadata traffic re-arms only the metadata watch's deadline.
	h.putMeta("worker-0", workerData("graph", "worker-0", "Decode", "m2"), "")
	h.waitWorkers("the update", map[uint64]string{id("worker-0"): "decode/m2"})
	clk.Advance(idleTimeout/2 - time.Second)
	assert.Equal(t, 0, h.out.kind(KindWatchEnded), "neither deadline has passed")
	clk.Advance(time.Second)
	waitFor(t, "the silent slice watch abandoned", func() bool { return h.out.kind(KindWatchEnded) == 1 && clk.Pending() >= 1 })
	clk.Advance(time.Second) // past the backoff
	waitFor(t, "both relisted", func() bool { return h.w.Passes() == 2 && h.out.kind(KindResync) == 2 })
	assert.Len(t, h.out.workers(), 1)
}
