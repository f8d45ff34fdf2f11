package k8ssource

import (
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	gaiev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"

	"switchyard/router/discovery"
	"switchyard/router/events"
)

// AnnotationKVEventsPort names, on a worker Pod of an InferencePool, the
// port its vLLM engine publishes KV events on (vLLM binds tcp://*:5557 by
// default). The endpoint picker's standalone mode subscribes to
// <pod IP>:<this port>.
const AnnotationKVEventsPort = "switchyard.dev/kv-events-port"

// AnnotationKVReplayPort names, on a worker Pod of an InferencePool, the
// port its engine serves KV-event replay on (vLLM's replay_endpoint),
// when it is not the pool's kv_replay_port.
const AnnotationKVReplayPort = "switchyard.dev/kv-replay-port"

// DefaultKVEventsPort is vLLM's default KV event publisher port.
const DefaultKVEventsPort = 5557

// PoolSelection is what an InferencePool says about its workers: which
// Pods (spec.selector) and on which port their servers listen (the first
// of spec.targetPorts).
type PoolSelection struct {
	Selector labels.Selector
	Port     int
}

// ReadPool reads the selection of an InferencePool. A pool without a
// selector or a target port selects nothing routable and is an error.
func ReadPool(p *gaiev1.InferencePool) (PoolSelection, error) {
	if len(p.Spec.Selector.MatchLabels) == 0 {
		return PoolSelection{}, fmt.Errorf("inference pool %s: spec.selector.matchLabels is empty", p.Name)
	}
	if len(p.Spec.TargetPorts) == 0 {
		return PoolSelection{}, fmt.Errorf("inference pool %s: spec.targetPorts is empty", p.Name)
	}
	port := int(p.Spec.TargetPorts[0].Number)
	if port < 1 || port > 65535 {
		return PoolSelection{}, fmt.Errorf("inference pool %s: target port %d is not 1-65535", p.Name, port)
	}
	set := make(labels.Set, len(p.Spec.Selector.MatchLabels))
	for k, v := range p.Spec.Selector.MatchLabels {
		set[string(k)] = string(v)
	}
	sel, err := labels.ValidatedSelectorFromSet(set)
	if err != nil {
		return PoolSelection{}, fmt.Errorf("inference pool %s: spec.selector: %w", p.Name, err)
	}
	return PoolSelection{Selector: sel, Port: port}, nil
}

// Same reports whether two selections select the same Pods on the same
// port.
func (s PoolSelection) Same(o PoolSelection) bool {
	return s.Port == o.Port && s.Selector != nil && o.Selector != nil && s.Selector.String() == o.Selector.String()
}

// PoolConfig is what the translation of an InferencePool's Pods needs.
type PoolConfig struct {
	// DynamoNamespace is the namespace the workers are registered in (the
	// core groups workers by it; the endpoint picker routes within it).
	DynamoNamespace string
	// Model is the model every Pod of the pool serves (DYN_MODEL_NAME).
	Model string
	// BlockSize is the engines' KV block size (DYN_KV_CACHE_BLOCK_SIZE):
	// with no model card to read it from, the records carry it.
	BlockSize int
	// KVEventsPort is the publisher port of a Pod without the
	// AnnotationKVEventsPort annotation (0: DefaultKVEventsPort).
	KVEventsPort int
	// KVReplayPort is the replay port of a Pod without the
	// AnnotationKVReplayPort annotation; 0: no replay.
	KVReplayPort int
	// KVEventsListen says the publishers dial the picker's listener
	// instead: the records then carry no kv-events channel to dial.
	KVEventsListen bool
	// Tokenizer and ChatTemplate are the files the engines tokenize and
	// render with, written into every Pod's model card as a Dynamo worker
	// names its own, so the prompt service loads them; zero: none.
	Tokenizer, ChatTemplate PoolFile
}

// PoolFile is a file a card slot names: its path or URL, its blake3
// checksum ("blake3:<hex>") and, for a chat template, the slot's variant
// (hf_tokenizer_config_json, hf_chat_template or hf_chat_template_json).
type PoolFile struct {
	Path, Checksum, Kind string
}

// Card slot variants of the files a pool names.
const (
	kindTokenizerJSON    = "hf_tokenizer_json"
	kindTokenizerConfig  = "hf_tokenizer_config_json"
	kindChatTemplate     = "hf_chat_template"
	kindChatTemplateJSON = "hf_chat_template_json"
)

// poolCardJSON is the model card of a pool's Pod: what a Dynamo worker
// would register, with the artifact slots the operator named.
type poolCardJSON struct {
	cardJSON
	Tokenizer        map[string]checkedFileJSON  `json:"tokenizer,omitempty"`
	PromptFormatter  map[string]checkedFileJSON  `json:"prompt_formatter,omitempty"`
	ChatTemplateFile map[string]templateFileJSON `json:"chat_template_file,omitempty"`
}

type checkedFileJSON struct {
	Path     string `json:"path"`
	Checksum string `json:"checksum"`
}

type templateFileJSON struct {
	// IsCustom: the template is the operator's choice, not read from the
	// model's own files.
	IsCustom bool            `json:"is_custom"`
	File     checkedFileJSON `json:"file"`
}

// card is the model card every ready Pod of the pool registers.
func (c PoolConfig) card() poolCardJSON {
	out := poolCardJSON{cardJSON: cardJSON{DisplayName: c.Model, WorkerType: workerType(discovery.RoleAggregated), KVCacheBlockSize: c.BlockSize}}
	if c.Tokenizer.Path != "" {
		out.Tokenizer = map[string]checkedFileJSON{kindTokenizerJSON: {c.Tokenizer.Path, c.Tokenizer.Checksum}}
	}
	t := c.ChatTemplate
	switch {
	case t.Path == "":
	case t.Kind == kindChatTemplate || t.Kind == kindChatTemplateJSON:
		out.ChatTemplateFile = map[string]templateFileJSON{t.Kind: {IsCustom: true, File: checkedFileJSON{t.Path, t.Checksum}}}
	default:
		out.PromptFormatter = map[string]checkedFileJSON{kindTokenizerConfig: {t.Path, t.Checksum}}
	}
	return out
}

// PoolFleet translates the Pods an InferencePool selects into the records
// a Dynamo worker would register: per ready Pod with an IP, an Endpoint
// at <pod IP>:<target port> whose instance id is HashPodName(pod name), a
// model card naming the model and block size, and a kv-events channel at
// <pod IP>:<kv-events port>. Not safe for concurrent use.
type PoolFleet struct {
	cfg   PoolConfig
	card  poolCardJSON
	port  int
	log   *slog.Logger
	count func(string)
	max   int
	pods  map[string]*poolPod
}

// poolPod is what the translation holds per Pod.
type poolPod struct {
	name, ip string
	ready    bool
	kvPort   int
	// replayPort is the Pod's replay socket port, 0 for none.
	replayPort int
	out        published
}

// NewPoolFleet makes an empty translation. log and count may be nil.
func NewPoolFleet(cfg PoolConfig, log *slog.Logger, count func(string)) *PoolFleet {
	log, count = orDiscard(log, count)
	if cfg.KVEventsPort == 0 {
		cfg.KVEventsPort = DefaultKVEventsPort
	}
	return &PoolFleet{cfg: cfg, card: cfg.card(), log: log, count: count, max: MaxPods, pods: map[string]*poolPod{}}
}

// Relist replaces the held Pods with a fresh list of the Pods the pool
// selects, serving on port, and returns the namespace's DiscoveryResync.
func (f *PoolFleet) Relist(pods []*corev1.Pod, port int, at time.Time, revision int64) []events.Event {
	f.port = port
	next := make(map[string]*poolPod, min(len(pods), f.max))
	var records []events.DiscoveryRecord
	for _, p := range pods {
		if len(next) == f.max {
			f.count(KindSeedTruncated)
			break
		}
		e := f.describe(p)
		next[e.name] = e
		records = append(records, e.out.records...)
	}
	f.pods = next
	return []events.Event{events.DiscoveryResync{At: at, Namespace: f.cfg.DynamoNamespace, Records: records, Revision: revision}}
}

// Upsert folds an added or modified selected Pod.
func (f *PoolFleet) Upsert(p *corev1.Pod, at time.Time) []events.Event {
	prev := f.pods[p.Name]
	if prev == nil && len(f.pods) >= f.max {
		f.count(KindOverCapacity)
		return nil
	}
	e := f.describe(p)
	f.pods[p.Name] = e
	var old published
	if prev != nil {
		old = prev.out
	}
	return diff(at, old, e.out)
}

// Remove folds a deleted Pod, or one that left the selector.
func (f *PoolFleet) Remove(name string, at time.Time) []events.Event {
	prev := f.pods[name]
	if prev == nil {
		return nil
	}
	delete(f.pods, name)
	return diff(at, prev.out, published{})
}

func (f *PoolFleet) describe(p *corev1.Pod) *poolPod {
	e := &poolPod{name: p.Name, ip: podIP(p.Status.PodIP), ready: podReady(p), kvPort: f.annotatedPort(p, AnnotationKVEventsPort, f.cfg.KVEventsPort),
		replayPort: f.annotatedPort(p, AnnotationKVReplayPort, f.cfg.KVReplayPort)}
	if e.ready && e.ip != "" && f.port > 0 {
		e.out = published{namespace: f.cfg.DynamoNamespace, records: f.records(e)}
	}
	return e
}

// annotatedPort reads a port from the Pod's annotation, falling back to
// the pool's setting (and counting the Pod refused) when it is not a port.
func (f *PoolFleet) annotatedPort(p *corev1.Pod, annotation string, fallback int) int {
	v, ok := p.Annotations[annotation]
	if !ok {
		return fallback
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 65535 {
		f.count(KindRefused)
		f.log.Warn("ignoring a port annotation that is not a port", "pod", p.Name, "annotation", annotation, "value", v)
		return fallback
	}
	return n
}

// poolComponent is the component the pool's workers are registered
// under, as Dynamo's aggregated workers are.
const poolComponent = "backend"

// records are the Endpoint, model card and kv-events channel of a ready
// Pod. Keys end in the Pod name, as the Pod source's do.
func (f *PoolFleet) records(e *poolPod) []events.DiscoveryRecord {
	id := HashPodName(e.name)
	path := f.cfg.DynamoNamespace + "/" + poolComponent + "/generate/" + e.name
	endpoint := recordJSON{Type: "Endpoint", Namespace: f.cfg.DynamoNamespace, Component: poolComponent, Endpoint: "generate", InstanceID: id,
		Transport: &transportJSON{TCP: net.JoinHostPort(e.ip, strconv.Itoa(f.port))}}
	card := mustJSON(poolRecordJSON{recordJSON: recordJSON{Type: "Model", Namespace: f.cfg.DynamoNamespace, Component: poolComponent,
		Endpoint: "generate", InstanceID: id}, Card: f.card})
	channel := channelJSON{Type: "EventChannel", Namespace: f.cfg.DynamoNamespace, Component: poolComponent, Topic: discovery.TopicKVEvents,
		InstanceID: id, Transport: channelTransportJSON{Kind: "Zmq"}}
	channel.Transport.Config.Endpoint = "tcp://" + net.JoinHostPort(e.ip, strconv.Itoa(e.kvPort))
	if e.replayPort > 0 {
		channel.Replay = &channelTransportJSON{Kind: "Zmq"}
		channel.Replay.Config.Endpoint = "tcp://" + net.JoinHostPort(e.ip, strconv.Itoa(e.replayPort))
	}
	out := []events.DiscoveryRecord{
		{Keyspace: events.Instances, Key: "v1/instances/" + path, Value: mustJSON(endpoint)},
		{Keyspace: events.Models, Key: "v1/mdc/" + path, Value: card},
	}
	if f.cfg.KVEventsListen {
		return out
	}
	return append(out, events.DiscoveryRecord{Keyspace: events.EventChannels,
		Key: "v1/event_channels/" + f.cfg.DynamoNamespace + "/" + poolComponent + "/kv-events/" + e.name, Value: mustJSON(channel)})
}

// poolRecordJSON is a Model record whose card carries artifact slots.
type poolRecordJSON struct {
	recordJSON
	Card poolCardJSON `json:"card_json"`
}

type channelJSON struct {
	Type       string               `json:"type"`
	Namespace  string               `json:"namespace"`
	Component  string               `json:"component"`
	Topic      string               `json:"topic"`
	InstanceID uint64               `json:"instance_id"`
	Transport  channelTransportJSON `json:"transport"`
	// Replay is Switchyard's extension field: the replay socket, in the
	// transport's shape.
	Replay *channelTransportJSON `json:"replay,omitempty"`
}

type channelTransportJSON struct {
	Kind   string `json:"kind"`
	Config struct {
		Endpoint string `json:"endpoint"`
	} `json:"config"`
}

// PodNames lists the held Pods, sorted (tests and logs).
func (f *PoolFleet) PodNames() []string {
	out := make([]string, 0, len(f.pods))
	for n := range f.pods {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}
