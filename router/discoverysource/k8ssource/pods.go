package k8ssource

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	"switchyard/router/discovery"
	"switchyard/router/events"
)

// Labels and the annotation the Dynamo operator puts on the Pods it
// registers for Kubernetes discovery.
const (
	labelBackend          = "nvidia.com/dynamo-discovery-backend"
	labelEnabled          = "nvidia.com/dynamo-discovery-enabled"
	labelDynamoNamespace  = "nvidia.com/dynamo-namespace"
	labelComponentType    = "nvidia.com/dynamo-component-type"
	labelSubComponentType = "nvidia.com/dynamo-sub-component-type"
	labelComponent        = "nvidia.com/dynamo-component"
	annotationMode        = "nvidia.com/dynamo-kube-discovery-mode"
)

// podSelector selects the operator-labelled Pods of the given Dynamo
// namespaces.
func podSelector(dynamoNamespaces []string) (string, error) {
	sel := labels.NewSelector()
	for _, r := range []struct {
		key    string
		op     selection.Operator
		values []string
	}{
		{labelBackend, selection.Equals, []string{"kubernetes"}},
		{labelEnabled, selection.Equals, []string{"true"}},
		{labelDynamoNamespace, selection.In, dynamoNamespaces},
	} {
		req, err := labels.NewRequirement(r.key, r.op, r.values)
		if err != nil {
			return "", fmt.Errorf("kubernetes pod discovery: label selector: %w", err)
		}
		sel = sel.Add(*req)
	}
	return sel.String(), nil
}

// podRole reads the role from the operator's labels: the component type
// (prefill, decode), or for type worker the sub-component type, with no
// sub type meaning aggregated. Anything else (frontend, planner, epp,
// default, unlabelled) is not a worker and yields RoleUnknown.
func podRole(l map[string]string) discovery.Role {
	switch l[labelComponentType] {
	case "prefill":
		return discovery.RolePrefill
	case "decode":
		return discovery.RoleDecode
	case "worker":
		switch l[labelSubComponentType] {
		case "prefill":
			return discovery.RolePrefill
		case "decode":
			return discovery.RoleDecode
		}
		return discovery.RoleAggregated
	}
	return discovery.RoleUnknown
}

// podReady is the seed's readiness: phase Running, condition Ready True,
// and not being deleted.
func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podEntry is what the watcher holds per Pod: the few facts it reads, never
// the Pod object, so 16,384 held Pods stay small.
type podEntry struct {
	name            string
	dynamoNamespace string
	component       string
	role            discovery.Role
	ready           bool
	containerMode   bool
	// ip is the Pod's IP address (status.podIP), "" before it has one or
	// when it is not an address.
	ip string
	// out is what this Pod currently contributes to the core.
	out published
	// Once-per-Pod log and count flags, kept across updates and passes.
	refusedNoted, unlistedNoted bool
}

func describePod(p *corev1.Pod) *podEntry {
	l := p.Labels
	return &podEntry{
		name:            p.Name,
		dynamoNamespace: l[labelDynamoNamespace],
		component:       l[labelComponent],
		role:            podRole(l),
		ready:           podReady(p),
		containerMode:   p.Annotations[annotationMode] == "container",
		ip:              podIP(p.Status.PodIP),
	}
}

// models says which model a worker Pod serves.
type models struct {
	single string
	// byComponent maps (Dynamo namespace, component) to a model.
	byComponent map[[2]string]string
}

func newModels(c Config) models {
	m := models{single: c.Model, byComponent: map[[2]string]string{}}
	for _, cm := range c.Models {
		ns := cm.DynamoNamespace
		if ns == "" && len(c.DynamoNamespaces) == 1 {
			ns = c.DynamoNamespaces[0]
		}
		m.byComponent[[2]string{ns, cm.Component}] = cm.Model
	}
	return m
}

// of returns the model of a Pod, "" when its component is not listed.
func (m models) of(e *podEntry) string {
	if m.single != "" {
		return m.single
	}
	return m.byComponent[[2]string{e.dynamoNamespace, e.component}]
}

// workerRecords describes a ready worker Pod to the core as the Endpoint
// and model card a worker registers in etcd. Keys end in the Pod name, so
// two Pods whose names hash to one instance id hold two keys claiming one
// identity, which the reducer refuses as a duplicate.
func workerRecords(e *podEntry, id uint64, model string) []events.DiscoveryRecord {
	component := e.component
	if component == "" {
		component = roleComponent(e.role)
	}
	path := e.dynamoNamespace + "/" + component + "/generate/" + e.name
	endpoint := recordJSON{Type: "Endpoint", Namespace: e.dynamoNamespace, Component: component, Endpoint: "generate", InstanceID: id}
	card := endpoint
	if e.ip != "" {
		endpoint.Transport = &transportJSON{TCP: net.JoinHostPort(e.ip, "0")}
	}
	card.Type = "Model"
	card.Card = &cardJSON{DisplayName: model, WorkerType: workerType(e.role)}
	return []events.DiscoveryRecord{
		{Keyspace: events.Instances, Key: "v1/instances/" + path, Value: mustJSON(endpoint)},
		{Keyspace: events.Models, Key: "v1/mdc/" + path, Value: mustJSON(card)},
	}
}

type recordJSON struct {
	Type       string         `json:"type"`
	Namespace  string         `json:"namespace"`
	Component  string         `json:"component"`
	Endpoint   string         `json:"endpoint"`
	InstanceID uint64         `json:"instance_id"`
	Transport  *transportJSON `json:"transport,omitempty"`
	Card       *cardJSON      `json:"card_json,omitempty"`
}

// transportJSON names the worker's address. A Pod says its IP but not the
// port its worker serves on, hence port 0: hosts that address workers
// directly (the endpoint picker) read only the host and use their own
// port (epp.target_port).
type transportJSON struct {
	TCP string `json:"tcp"`
}

// podIP keeps a Pod's IP when it is an IP address.
func podIP(s string) string {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.String()
	}
	return ""
}

type cardJSON struct {
	DisplayName      string `json:"display_name"`
	WorkerType       string `json:"worker_type"`
	KVCacheBlockSize int    `json:"kv_cache_block_size,omitempty"`
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // plain structs of strings and integers always marshal
	}
	return b
}

// roleComponent names the component of a Pod without a
// nvidia.com/dynamo-component label after its role (Dynamo's aggregated
// workers register as "backend").
func roleComponent(r discovery.Role) string {
	if r == discovery.RoleAggregated {
		return "backend"
	}
	return r.String()
}

func workerType(r discovery.Role) string {
	switch r {
	case discovery.RolePrefill:
		return "Prefill"
	case discovery.RoleDecode:
		return "Decode"
	}
	return "Aggregated"
}

// published is what one Pod contributes to the core.
type published struct {
	namespace string
	records   []events.DiscoveryRecord
}

// diff is the batch that moves the core from a Pod's old records to its
// new ones: deletes for keys it no longer has, puts for new or changed
// values.
func diff(at time.Time, old, new published) []events.Event {
	var out []events.Event
	for _, o := range old.records {
		if !slices.ContainsFunc(new.records, func(n events.DiscoveryRecord) bool { return n.Key == o.Key }) {
			out = append(out, events.DiscoveryDelete{At: at, Namespace: old.namespace, Keyspace: o.Keyspace, Key: o.Key})
		}
	}
	for _, n := range new.records {
		i := slices.IndexFunc(old.records, func(o events.DiscoveryRecord) bool { return o.Key == n.Key })
		if i >= 0 && string(old.records[i].Value) == string(n.Value) {
			continue
		}
		out = append(out, events.DiscoveryPut{At: at, Namespace: new.namespace, DiscoveryRecord: n})
	}
	return out
}
