package kuberegistrar

import (
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"switchyard/fakefleet/registrar"
)

// Labels and the resource the Dynamo operator uses for Kubernetes
// discovery, as the router's k8ssource reads them.
const (
	LabelBackend          = "nvidia.com/dynamo-discovery-backend"
	LabelEnabled          = "nvidia.com/dynamo-discovery-enabled"
	LabelDynamoNamespace  = "nvidia.com/dynamo-namespace"
	LabelComponentType    = "nvidia.com/dynamo-component-type"
	LabelSubComponentType = "nvidia.com/dynamo-sub-component-type"
	LabelComponent        = "nvidia.com/dynamo-component"
)

// MetadataGVR is Dynamo's DynamoWorkerMetadata resource.
var MetadataGVR = schema.GroupVersionResource{Group: "nvidia.com", Version: "v1alpha1", Resource: "dynamoworkermetadatas"}

// FakeNodeName is the node the fleet's Pods claim to run on. No kubelet
// serves it, so on a cluster with a scheduler and kubelets the Pods stay
// as the fleet writes them instead of being started for real.
const FakeNodeName = "switchyard-fake-node"

// metadataMaps maps each etcd bucket to the spec.data map carrying its
// records (keys relative to the bucket), as Dynamo's workers publish them.
var metadataMaps = []struct{ root, field string }{
	{"v1/instances/", "endpoints"},
	{"v1/mdc/", "model_cards"},
	{"v1/event_channels/", "event_channels"},
}

// MetadataData is the spec.data of a DynamoWorkerMetadata carrying the
// given etcd records (registrar.Records): the same JSON values, keyed by
// their key inside their bucket. Records outside the three buckets are
// an error.
func MetadataData(records map[string][]byte) (map[string]any, error) {
	data := map[string]any{}
	for _, m := range metadataMaps {
		data[m.field] = map[string]any{}
	}
	for key, value := range records {
		placed := false
		for _, m := range metadataMaps {
			rel, ok := strings.CutPrefix(key, m.root)
			if !ok {
				continue
			}
			var v any
			if err := json.Unmarshal(value, &v); err != nil {
				return nil, fmt.Errorf("record %s: %w", key, err)
			}
			data[m.field].(map[string]any)[rel] = v
			placed = true
			break
		}
		if !placed {
			return nil, fmt.Errorf("record %s is in no metadata bucket", key)
		}
	}
	return data, nil
}

// Metadata is the DynamoWorkerMetadata of the worker in pod (owned by the
// Pod with podUID, when known, as the operator's garbage collection
// expects) carrying records.
func Metadata(namespace, pod string, podUID types.UID, records map[string][]byte) (*unstructured.Unstructured, error) {
	data, err := MetadataData(records)
	if err != nil {
		return nil, err
	}
	meta := map[string]any{"name": pod, "namespace": namespace}
	if podUID != "" {
		meta["ownerReferences"] = []any{map[string]any{"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": string(podUID)}}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoWorkerMetadata",
		"metadata": meta,
		"spec":     map[string]any{"data": data},
	}}, nil
}

// Pod is the worker Pod as the operator labels it, without status.
func Pod(namespace, pod string, w registrar.Worker) *corev1.Pod {
	l := map[string]string{
		LabelBackend:         "kubernetes",
		LabelEnabled:         "true",
		LabelDynamoNamespace: w.Namespace,
		LabelComponent:       w.Component,
	}
	switch w.WorkerType {
	case "prefill", "decode":
		l[LabelComponentType] = w.WorkerType
	default:
		l[LabelComponentType] = "worker"
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: namespace, Labels: l},
		Spec: corev1.PodSpec{
			NodeName:   FakeNodeName,
			Containers: []corev1.Container{{Name: "worker", Image: "switchyard-fake-worker"}},
		},
	}
}

// SetReady gives a Pod the status a kubelet reports for a running
// container that passes (or fails) its readiness probe.
func SetReady(p *corev1.Pod, ready bool) {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
}

// podAddress is the address the fleet's EndpointSlices give every Pod.
// The API server refuses loopback there, and the router never dials it
// (it reads readiness from the slice, addresses from the metadata), so a
// documentation address (TEST-NET-1) stands in.
const podAddress = "192.0.2.1"

// EndpointSlice is a readiness slice naming one worker Pod, labelled as
// the metadata source selects them.
func EndpointSlice(namespace, pod string, ready bool) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: namespace,
			Labels: map[string]string{LabelBackend: "kubernetes", LabelEnabled: "true"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{podAddress},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: namespace, Name: pod},
		}},
	}
}
