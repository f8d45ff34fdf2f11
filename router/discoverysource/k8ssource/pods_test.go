package k8ssource

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"switchyard/router/discovery"
	"switchyard/router/events"
)

func TestPodSelector(t *testing.T) {
	sel, err := podSelector([]string{"graph-b", "graph-a"})
	require.NoError(t, err)
	assert.Equal(t, "nvidia.com/dynamo-discovery-backend=kubernetes,nvidia.com/dynamo-discovery-enabled=true,"+
		"nvidia.com/dynamo-namespace in (graph-a,graph-b)", sel)
	_, err = podSelector([]string{"not a label value"})
	assert.Error(t, err)
}

func TestPodRole(t *testing.T) {
	for _, tc := range []struct {
		typ, sub string
		want     discovery.Role
	}{
		{"prefill", "", discovery.RolePrefill},
		{"decode", "", discovery.RoleDecode},
		{"worker", "prefill", discovery.RolePrefill},
		{"worker", "decode", discovery.RoleDecode},
		{"worker", "", discovery.RoleAggregated},
		{"worker", "other", discovery.RoleAggregated},
		{"frontend", "", discovery.RoleUnknown},
		{"planner", "", discovery.RoleUnknown},
		{"epp", "", discovery.RoleUnknown},
		{"default", "", discovery.RoleUnknown},
		{"", "decode", discovery.RoleUnknown},
	} {
		l := map[string]string{labelComponentType: tc.typ}
		if tc.sub != "" {
			l[labelSubComponentType] = tc.sub
		}
		assert.Equal(t, tc.want, podRole(l), "type %q sub %q", tc.typ, tc.sub)
	}
}

func TestPodReady(t *testing.T) {
	now := metav1.Now()
	ready := func(mut func(*corev1.Pod)) bool {
		p := testPod("w", "g", "worker", "decode", "")
		setReady(p, true)
		if mut != nil {
			mut(p)
		}
		return podReady(p)
	}
	assert.True(t, ready(nil))
	assert.False(t, ready(func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending }))
	assert.False(t, ready(func(p *corev1.Pod) { setReady(p, false) }))
	assert.False(t, ready(func(p *corev1.Pod) { p.Status.Conditions = nil }))
	assert.False(t, ready(func(p *corev1.Pod) { p.DeletionTimestamp = &now }))
}

func newTestFleet(model string, cms ...ComponentModel) (*fleet, map[string]int) {
	counts := map[string]int{}
	cfg := Config{DynamoNamespaces: []string{"g"}, Model: model, Models: cms}
	return &fleet{models: newModels(cfg), hash: HashPodName, maxPods: 3, log: discardLog(),
		count: func(k string) { counts[k]++ }, pods: map[string]*podEntry{}}, counts
}

// A ready worker Pod becomes the Endpoint and card a worker registers in
// etcd, which the reducer turns into a worker with the Pod's id, role and
// model, and no capacity.
func TestWorkerRecordsBuildAWorker(t *testing.T) {
	f, _ := newTestFleet("solar-pro4")
	p := testPod("decode-0", "g", "worker", "decode", "VllmDecodeWorker")
	setReady(p, true)
	batch := f.upsert(p, time.Unix(1, 0))
	require.Len(t, batch, 2)
	r := discovery.NewReducer(nil, nil)
	for _, ev := range batch {
		r.Apply(ev)
	}
	v := r.View()
	require.Len(t, v.Workers, 1)
	w := v.Workers[0]
	assert.Equal(t, HashPodName("decode-0"), w.InstanceID)
	assert.Equal(t, "g", w.Namespace)
	assert.Equal(t, discovery.RoleDecode, w.Role)
	assert.Equal(t, "solar-pro4", w.Model)
	assert.Equal(t, "VllmDecodeWorker", w.Component)
	assert.Nil(t, w.Runtime.TotalKVBlocks, "Pods carry no capacity")
	assert.False(t, w.Runtime.DPDeclared, "no dp rank header for Pods")

	var ep map[string]any
	require.NoError(t, json.Unmarshal(batch[0].(events.DiscoveryPut).Value, &ep))
	assert.Equal(t, "Endpoint", ep["type"])
}

func TestAggregatedPodWithoutComponentLabel(t *testing.T) {
	f, _ := newTestFleet("m")
	p := testPod("agg-0", "g", "worker", "", "")
	setReady(p, true)
	r := discovery.NewReducer(nil, nil)
	for _, ev := range f.upsert(p, time.Unix(1, 0)) {
		r.Apply(ev)
	}
	require.Len(t, r.View().Workers, 1)
	assert.Equal(t, discovery.RoleAggregated, r.View().Workers[0].Role)
	assert.Equal(t, "backend", r.View().Workers[0].Component)
}

func TestFleetTransitions(t *testing.T) {
	f, _ := newTestFleet("m")
	at := time.Unix(1, 0)
	p := testPod("w-0", "g", "decode", "", "")
	assert.Empty(t, f.upsert(p, at), "not ready: nothing published")
	setReady(p, true)
	assert.Len(t, f.upsert(p, at), 2, "ready: endpoint and card")
	assert.Empty(t, f.upsert(p, at), "unchanged: nothing")
	setReady(p, false)
	dels := f.upsert(p, at)
	require.Len(t, dels, 2)
	for _, ev := range dels {
		assert.IsType(t, events.DiscoveryDelete{}, ev)
	}
	setReady(p, true)
	f.upsert(p, at)
	assert.Len(t, f.remove("w-0", at), 2, "delete: both records leave")
	assert.Empty(t, f.remove("w-0", at))
}

func TestContainerModeRefusedOnce(t *testing.T) {
	f, counts := newTestFleet("m")
	p := testPod("w-0", "g", "decode", "", "")
	p.Annotations = map[string]string{annotationMode: "container"}
	setReady(p, true)
	assert.Empty(t, f.upsert(p, time.Unix(1, 0)))
	p.Labels["touched"] = "1"
	assert.Empty(t, f.upsert(p, time.Unix(2, 0)))
	assert.Equal(t, 1, counts[KindRefused])
}

func TestModelsByComponent(t *testing.T) {
	f, counts := newTestFleet("", ComponentModel{Component: "VllmWorker-decodeheavy", Model: "solar-pro4"})
	listed := testPod("a", "g", "worker", "", "VllmWorker-decodeheavy")
	unlisted := testPod("b", "g", "worker", "", "VllmWorker-prefillheavy")
	bare := testPod("c", "g", "worker", "", "")
	for _, p := range []*corev1.Pod{listed, unlisted, bare} {
		setReady(p, true)
	}
	assert.Len(t, f.upsert(listed, time.Unix(1, 0)), 2)
	assert.Empty(t, f.upsert(unlisted, time.Unix(1, 0)), "unlisted component: held, not published")
	assert.Empty(t, f.upsert(bare, time.Unix(1, 0)), "no component label: held, not published")
	assert.Len(t, f.pods, 3)
	assert.Empty(t, counts, "unlisted Pods are neither refused nor malformed")
}

func TestFleetCapacity(t *testing.T) {
	f, counts := newTestFleet("m")
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		p := testPod(name, "g", "decode", "", "")
		setReady(p, true)
		f.upsert(p, time.Unix(1, 0))
	}
	assert.Len(t, f.pods, 3)
	assert.Equal(t, 2, counts[KindOverCapacity])
	f.remove("a", time.Unix(2, 0))
	p := testPod("d", "g", "decode", "", "")
	setReady(p, true)
	assert.Len(t, f.upsert(p, time.Unix(3, 0)), 2, "room again after a delete")
}

// A ready Pod's IP becomes its worker's host (the endpoint picker's
// destination), and a new IP is published as a change; a Pod without an
// address, or with one that is not an IP, names no host.
func TestPodIPIsTheWorkersHost(t *testing.T) {
	f, _ := newTestFleet("m")
	at := time.Unix(1, 0)
	p := testPod("agg-0", "g", "worker", "", "")
	setReady(p, true)
	r := discovery.NewReducer(nil, nil)
	apply := func(batch []events.Event) {
		for _, ev := range batch {
			r.Apply(ev)
		}
	}
	apply(f.upsert(p, at))
	require.Equal(t, "", r.View().Workers[0].Host)

	p.Status.PodIP = "10.1.2.3"
	batch := f.upsert(p, at)
	require.Len(t, batch, 1, "only the endpoint record changes")
	apply(batch)
	require.Equal(t, "10.1.2.3", r.View().Workers[0].Host)

	p.Status.PodIP = "fd00::7"
	apply(f.upsert(p, at))
	require.Equal(t, "fd00::7", r.View().Workers[0].Host)

	p.Status.PodIP = "not-an-ip"
	apply(f.upsert(p, at))
	require.Equal(t, "", r.View().Workers[0].Host)
}
