package discoverysource

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"switchyard/internal/kubetest"
	"switchyard/router/config"
	"switchyard/router/discoverysource/k8ssource"
)

// readyWorkerMetadata writes the DynamoWorkerMetadata of an aggregated
// worker Pod and an EndpointSlice marking that Pod ready.
func readyWorkerMetadata(t *testing.T, ns, pod, model string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id := k8ssource.HashPodName(pod)
	key := fmt.Sprintf("graph/backend/generate/%x", id)
	rec := func(kind string, extra map[string]any) map[string]any {
		m := map[string]any{"type": kind, "namespace": "graph", "component": "backend", "endpoint": "generate", "instance_id": int64(id)}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	dyn, err := dynamic.NewForConfig(kubetest.Config(t))
	require.NoError(t, err)
	gvr := schema.GroupVersionResource{Group: "nvidia.com", Version: "v1alpha1", Resource: "dynamoworkermetadatas"}
	_, err = dyn.Resource(gvr).Namespace(ns).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoWorkerMetadata",
		"metadata": map[string]any{"name": pod},
		"spec": map[string]any{"data": map[string]any{
			"endpoints":   map[string]any{key: rec("Endpoint", nil)},
			"model_cards": map[string]any{key: rec("Model", map[string]any{"card_json": map[string]any{"display_name": model}})},
		}},
	}}, metav1.CreateOptions{})
	require.NoError(t, err)
	ready := true
	_, err = kubetest.Client(t).DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: pod, Labels: map[string]string{
			"nvidia.com/dynamo-discovery-backend": "kubernetes", "nvidia.com/dynamo-discovery-enabled": "true"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: pod}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
}

// The production factory runs the metadata source for source kubernetes;
// the model comes from the card.
func TestSupervisorRunsTheMetadataSource(t *testing.T) {
	kubetest.InstallCRDs(t, "../../deploy/kubernetes/crds")
	t.Setenv("KUBECONFIG", kubetest.Kubeconfig(t))
	ns := kubetest.Namespace(t)
	readyWorkerMetadata(t, ns, "worker-0", "solar-pro4")

	s, reg := newSupervisor(t)
	cfg := podsConfig(ns)
	cfg.Dynamo.Discovery.Source = config.SourceKubernetes
	s.Apply(cfg)
	waitUntil(t, "the worker", func() bool { return len(reg.Snapshot().Workers) == 1 && s.Connected() })
	require.Equal(t, map[uint64]string{k8ssource.HashPodName("worker-0"): "solar-pro4"}, modelsOf(reg.Snapshot()))
	require.Equal(t, config.SourceKubernetes, s.Source())
}
