package k8ssource

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"switchyard/router/events"
)

// metaUnstructured is a DynamoWorkerMetadata carrying keys records: an
// endpoint, a model card and keys-2 event channels.
func metaUnstructured(t *testing.T, name string, channels int) *unstructured.Unstructured {
	id := HashPodName(name)
	ep := fmt.Sprintf("dynamo/backend/generate/%x", id)
	rec := map[string]any{"type": "Endpoint", "namespace": "dynamo", "component": "backend", "endpoint": "generate", "instance_id": float64(id)}
	card := map[string]any{"type": "Model", "namespace": "dynamo", "component": "backend", "endpoint": "generate", "instance_id": float64(id),
		"card_json": map[string]any{"display_name": "m"}}
	chans := map[string]any{}
	for i := range channels {
		chans[fmt.Sprintf("dynamo/backend/topic-%d/%x", i, i+1)] = map[string]any{"type": "EventChannel", "instance_id": float64(i + 1)}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoWorkerMetadata",
		"metadata": map[string]any{"name": name, "uid": name + "-uid"},
		"spec": map[string]any{"data": map[string]any{
			"endpoints": map[string]any{ep: rec}, "model_cards": map[string]any{ep: card}, "event_channels": chans,
		}},
	}}
}

func readinessSlice(pod string, ready bool) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: pod}, Endpoints: []discoveryv1.Endpoint{{
		Conditions: discoveryv1.EndpointConditions{Ready: &ready},
		TargetRef:  &corev1.ObjectReference{Kind: "Pod", Name: pod},
	}}}
}

func eventKeys(batch []events.Event) []string {
	var keys []string
	for _, ev := range batch {
		switch e := ev.(type) {
		case events.DiscoveryPut:
			keys = append(keys, "put "+e.Key)
		case events.DiscoveryDelete:
			keys = append(keys, "delete "+e.Key)
		}
	}
	return keys
}

// A resource turning ready or not ready moves many keys at once; their
// events come in key order every time, never in map order, so a simulated
// Kubernetes fleet records the same bytes run after run.
func TestMetaFleetEmitsKeysInKeyOrder(t *testing.T) {
	var first, firstGone []string
	for range 30 {
		m := NewMetaFleet([]string{"dynamo"}, nil, nil)
		require.Empty(t, m.UpsertObject(metaUnstructured(t, "w-0", 12), testTime), "not ready yet")
		came := eventKeys(m.UpsertSlice(readinessSlice("w-0", true), testTime))
		gone := eventKeys(m.UpsertSlice(readinessSlice("w-0", false), testTime))
		require.Len(t, came, 14)
		require.Len(t, gone, 14)
		assert.IsNonDecreasing(t, came)
		assert.IsNonDecreasing(t, gone)
		if first == nil {
			first, firstGone = came, gone
		}
		require.Equal(t, first, came)
		require.Equal(t, firstGone, gone)
	}
}

// The exported translations are the ones the watchers run: a relist, a
// readiness change and a delete of the metadata source, and a Pod's
// ready→not ready of the Pod source.
func TestTranslationsFollowReadiness(t *testing.T) {
	m := NewMetaFleet([]string{"dynamo"}, nil, nil)
	batch := m.Relist([]*unstructured.Unstructured{metaUnstructured(t, "w-0", 1), metaUnstructured(t, "w-1", 1)},
		[]*discoveryv1.EndpointSlice{readinessSlice("w-0", true)}, testTime, 7)
	require.Len(t, batch, 1)
	rs := batch[0].(events.DiscoveryResync)
	assert.Equal(t, int64(7), rs.Revision)
	assert.Len(t, rs.Records, 3, "only w-0 is ready: endpoint, card, channel")
	assert.Len(t, m.UpsertSlice(readinessSlice("w-1", true), testTime), 2, "w-1's endpoint and card; the channel key is shared")
	assert.Len(t, m.RemoveObject("w-0", testTime), 2, "w-0's endpoint and card; w-1 still carries the channel")

	p := NewPodFleet(Config{DynamoNamespaces: []string{"g"}, Model: "m"}, nil, nil)
	pod := testPod("decode-0", "g", "decode", "", "decode")
	setReady(pod, true)
	batch = p.Relist([]*corev1.Pod{pod}, testTime, 3)
	require.Len(t, batch, 1)
	assert.Len(t, batch[0].(events.DiscoveryResync).Records, 2)
	setReady(pod, false)
	assert.Equal(t, []string{"delete v1/instances/g/decode/generate/decode-0", "delete v1/mdc/g/decode/generate/decode-0"},
		eventKeys(p.Upsert(pod, testTime)))
	assert.Empty(t, p.Remove("decode-0", testTime), "a not-ready Pod contributed nothing")
}
