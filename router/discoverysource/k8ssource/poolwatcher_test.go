package k8ssource

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"switchyard/internal/kubetest"
	"switchyard/router/clock"
	"switchyard/router/discovery"
)

// The InferencePool CRD comes from the Inference Extension's module at the
// version the router's types are from.
const inferenceExtension = "sigs.k8s.io/gateway-api-inference-extension@v1.5.0"

// poolObject is an InferencePool selecting app=<app> with one target port.
func poolObject(ns, name, app string, port int64) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{
			"selector":          map[string]any{"matchLabels": map[string]any{"app": app}},
			"targetPorts":       []any{map[string]any{"number": port}},
			"endpointPickerRef": map[string]any{"name": "switchyard-epp", "port": map[string]any{"number": int64(9002)}},
		},
	}}
}

// poolPodObject is a Pod labelled app=<app> with the given IP, ready.
func (h *harness) poolPod(name, app, ip string, annotations map[string]string) {
	h.t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.ns, Labels: map[string]string{"app": app}, Annotations: annotations},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "vllm", Image: "vllm:latest"}}},
	}
	created, err := h.cs.CoreV1().Pods(h.ns).Create(h.ctx(), p, metav1.CreateOptions{})
	require.NoError(h.t, err)
	setReady(created, true)
	created.Status.PodIP = ip
	_, err = h.cs.CoreV1().Pods(h.ns).UpdateStatus(h.ctx(), created, metav1.UpdateOptions{})
	require.NoError(h.t, err)
}

// The watcher publishes the ready Pods the pool selects at their IP and
// the pool's target port, with a card naming the model and block size and
// a kv-events channel on the annotated (or default) port; an unready Pod
// leaves; a new selector or target port re-selects.
func TestPoolWatcherFollowsPoolAndPods(t *testing.T) {
	kubetest.InstallCRDs(t, kubetest.ModuleFile(t, inferenceExtension, "config/crd/bases/inference.networking.k8s.io_inferencepools.yaml"))
	h := newHarness(t, clock.Real{}, nil)
	rc := kubetest.Config(t)
	dc, err := dynamic.NewForConfig(rc)
	require.NoError(t, err)
	pools := dc.Resource(InferencePools).Namespace(h.ns)
	_, err = pools.Create(h.ctx(), poolObject(h.ns, "llama", "blue", 8000), metav1.CreateOptions{})
	require.NoError(t, err)
	h.poolPod("blue-0", "blue", "10.0.0.10", nil)
	h.poolPod("blue-1", "blue", "10.0.0.11", map[string]string{AnnotationKVEventsPort: "6000"})
	h.poolPod("green-0", "green", "10.0.0.20", nil)

	out := newSink()
	w := NewPoolWatcher(PoolWatcherConfig{
		PoolConfig: PoolConfig{DynamoNamespace: "dynamo", Model: "llama-3", BlockSize: 16},
		Namespace:  h.ns, Pool: "llama", REST: rc,
	}, out, clock.Real{}, discardLog(), out.count)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	view := func() *discovery.View {
		out.mu.Lock()
		defer out.mu.Unlock()
		return out.r.View()
	}
	addresses := func() map[string]string {
		got := map[string]string{}
		v := view()
		for _, wk := range v.Workers {
			got[wk.Host] = wk.Model
			if wk.InstanceID != HashPodName(map[string]string{"10.0.0.10": "blue-0", "10.0.0.11": "blue-1", "10.0.0.20": "green-0"}[wk.Host]) ||
				wk.Port != 8000 && wk.Port != 8001 || wk.BlockSize != 16 {
				got[wk.Host] = "unexpected"
			}
		}
		return got
	}
	waitFor(t, "the blue Pods", func() bool {
		a := addresses()
		return len(a) == 2 && a["10.0.0.10"] == "llama-3" && a["10.0.0.11"] == "llama-3"
	})
	channels := map[uint64]string{}
	for _, p := range view().Publishers {
		channels[p.PublisherID] = p.Address
	}
	require.Equal(t, map[uint64]string{HashPodName("blue-0"): "tcp://10.0.0.10:5557", HashPodName("blue-1"): "tcp://10.0.0.11:6000"}, channels)

	h.setReady("blue-1", false)
	waitFor(t, "the unready Pod to leave", func() bool { a := addresses(); return len(a) == 1 && a["10.0.0.10"] == "llama-3" })

	// Another selector and target port: the green Pod, on the new port.
	u, err := pools.Get(h.ctx(), "llama", metav1.GetOptions{})
	require.NoError(t, err)
	require.NoError(t, unstructured.SetNestedField(u.Object, map[string]any{"app": "green"}, "spec", "selector", "matchLabels"))
	require.NoError(t, unstructured.SetNestedSlice(u.Object, []any{map[string]any{"number": int64(8001)}}, "spec", "targetPorts"))
	_, err = pools.Update(h.ctx(), u, metav1.UpdateOptions{})
	require.NoError(t, err)
	waitFor(t, "the green Pod", func() bool {
		v := view()
		return len(v.Workers) == 1 && v.Workers[0].Host == "10.0.0.20" && v.Workers[0].Port == 8001
	})

	require.NoError(t, pools.Delete(h.ctx(), "llama", metav1.DeleteOptions{}))
	waitFor(t, "no workers without the pool", func() bool { return len(view().Workers) == 0 })
}
