package discovery

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"switchyard/router/events"
)

// Compiled-in ceilings on fleet-authored discovery records.
const (
	// MaxRecordBytes refuses a raw value before parsing.
	MaxRecordBytes = 16 << 20
	// MaxRetainedCardBytes caps the opaque card kept beside the typed subset.
	MaxRetainedCardBytes = 1 << 20
	// MaxRecordsPerKeyspace caps distinct keys held per keyspace.
	MaxRecordsPerKeyspace = 16384
)

// Role is what a worker does in a disaggregated pair.
type Role uint8

const (
	// RoleUnknown workers are shown to operators but never routed to.
	RoleUnknown Role = iota
	RolePrefill
	RoleDecode
	RoleAggregated
)

func (r Role) String() string {
	switch r {
	case RolePrefill:
		return "prefill"
	case RoleDecode:
		return "decode"
	case RoleAggregated:
		return "aggregated"
	}
	return "unknown"
}

// parseWorkerType reads a card's worker_type: case-insensitive, with
// "prefill|decode" meaning aggregated. Anything else is no claim.
func parseWorkerType(raw json.RawMessage) Role {
	var s string
	if len(raw) == 0 || json.Unmarshal(raw, &s) != nil {
		return RoleUnknown
	}
	s = strings.ToLower(strings.TrimSpace(s))
	parts := strings.Split(s, "|")
	var prefill, decode bool
	for _, p := range parts {
		switch strings.TrimSpace(p) {
		case "prefill":
			prefill = true
		case "decode":
			decode = true
		case "aggregated":
			prefill, decode = true, true
		default:
			return RoleUnknown
		}
	}
	switch {
	case prefill && decode:
		return RoleAggregated
	case prefill:
		return RolePrefill
	case decode:
		return RoleDecode
	}
	return RoleUnknown
}

// componentRole is the role a component name claims, if any.
func componentRole(component string) Role {
	switch component {
	case "prefill":
		return RolePrefill
	case "decode":
		return RoleDecode
	}
	return RoleUnknown
}

// instanceID accepts a JSON number (an etcd lease id) or a hexadecimal
// string, optionally 0x-prefixed; both name the same worker.
type instanceID struct {
	value uint64
	set   bool
}

func (id *instanceID) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if bytes.Equal(b, []byte("null")) {
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		s = strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X")
		v, err := strconv.ParseUint(s, 16, 64)
		if err != nil {
			return fmt.Errorf("instance_id %q is not hexadecimal", s)
		}
		id.value, id.set = v, true
		return nil
	}
	v, err := strconv.ParseUint(string(b), 10, 64)
	if err != nil {
		return fmt.Errorf("instance_id %s is not an unsigned integer", b)
	}
	id.value, id.set = v, true
	return nil
}

// recordKind is the "type" tag of a DiscoveryInstance value.
type recordKind string

const (
	kindEndpoint     recordKind = "Endpoint"
	kindModel        recordKind = "Model"
	kindEventChannel recordKind = "EventChannel"
)

// envelope is the union of every field this reducer reads from any record
// type. Unknown fields are ignored (N-2 tolerance).
type envelope struct {
	Type        recordKind      `json:"type"`
	Component   string          `json:"component"`
	Endpoint    string          `json:"endpoint"`
	InstanceID  instanceID      `json:"instance_id"`
	CardJSON    json.RawMessage `json:"card_json"`
	ModelSuffix *string         `json:"model_suffix"`
	Topic       string          `json:"topic"`
	Scope       json.RawMessage `json:"scope"`
	Transport   json.RawMessage `json:"transport"`
	// Replay is Switchyard's extension beside an EventChannel's transport:
	// where the publisher resends buffered messages, in the transport's
	// shape. Dynamo ignores the unknown field.
	Replay json.RawMessage `json:"replay"`
}

var keyspaceTypes = map[events.Keyspace]recordKind{
	events.Instances:     kindEndpoint,
	events.Models:        kindModel,
	events.EventChannels: kindEventChannel,
}

// endpointRecord is an Endpoint value.
type endpointRecord struct {
	component, endpoint string
	instanceID          uint64
	// host is the request-plane host the transport names ("" when none).
	host string
	port uint16
}

// cardRecord is a Model value: the typed subset plus the opaque card.
type cardRecord struct {
	component, endpoint string
	instanceID          uint64
	lora                bool // non-empty model_suffix: never joins a worker
	card                *Card
	raw                 json.RawMessage // nil when over MaxRetainedCardBytes
}

// Card is the typed subset of a model card the router uses.
type Card struct {
	Model      string
	WorkerType Role
	BlockSize  uint32
	Runtime    RuntimeConfig
	// Release is the first release string the card carries, for logs.
	Release string
}

// RuntimeConfig is the capacity part of a card.
type RuntimeConfig struct {
	TotalKVBlocks       *uint64
	MaxNumBatchedTokens *uint64
	MaxNumSeqs          *uint64
	ContextLength       *uint32
	DPStartRank         uint32
	DPSize              uint32
	// DPDeclared reports that data_parallel_size was present, so rank
	// headers are sent even for rank 0.
	DPDeclared bool
	// DisaggregatedEndpoint is a string, or "bootstrap" when the card carries
	// a bootstrap address object (whose host is never exported).
	DisaggregatedEndpoint string
}

type cardWire struct {
	DisplayName      string          `json:"display_name"`
	Name             string          `json:"name,omitempty"`
	WorkerType       json.RawMessage `json:"worker_type,omitempty"`
	KVCacheBlockSize uint32          `json:"kv_cache_block_size,omitempty"`
	RuntimeConfig    struct {
		TotalKVBlocks         *uint64         `json:"total_kv_blocks,omitempty"`
		MaxNumBatchedTokens   *uint64         `json:"max_num_batched_tokens,omitempty"`
		MaxNumSeqs            *uint64         `json:"max_num_seqs,omitempty"`
		ContextLength         *uint32         `json:"context_length,omitempty"`
		DataParallelStartRank uint32          `json:"data_parallel_start_rank,omitempty"`
		DataParallelSize      *uint32         `json:"data_parallel_size,omitempty"`
		DisaggregatedEndpoint json.RawMessage `json:"disaggregated_endpoint,omitempty"`
	} `json:"runtime_config"`
	DynamoVersion  string `json:"dynamo_version,omitempty"`
	RuntimeVersion string `json:"runtime_version,omitempty"`
	Version        string `json:"version,omitempty"`
	Release        string `json:"release,omitempty"`
}

// parseCard decodes the typed subset; nil when it does not fit the schema.
func parseCard(raw json.RawMessage) *Card {
	var w cardWire
	if len(raw) == 0 || json.Unmarshal(raw, &w) != nil {
		return nil
	}
	c := &Card{
		Model:      w.DisplayName,
		WorkerType: parseWorkerType(w.WorkerType),
		BlockSize:  w.KVCacheBlockSize,
		Runtime: RuntimeConfig{
			TotalKVBlocks:       w.RuntimeConfig.TotalKVBlocks,
			MaxNumBatchedTokens: w.RuntimeConfig.MaxNumBatchedTokens,
			MaxNumSeqs:          w.RuntimeConfig.MaxNumSeqs,
			ContextLength:       w.RuntimeConfig.ContextLength,
			DPStartRank:         w.RuntimeConfig.DataParallelStartRank,
			DPSize:              1,
		},
	}
	if c.Model == "" {
		c.Model = w.Name
	}
	if p := w.RuntimeConfig.DataParallelSize; p != nil {
		c.Runtime.DPDeclared = true
		c.Runtime.DPSize = max(*p, 1)
	}
	if de := bytes.TrimSpace(w.RuntimeConfig.DisaggregatedEndpoint); len(de) > 0 && !bytes.Equal(de, []byte("null")) {
		var s string
		if json.Unmarshal(de, &s) == nil {
			c.Runtime.DisaggregatedEndpoint = s
		} else if de[0] == '{' {
			c.Runtime.DisaggregatedEndpoint = "bootstrap"
		}
	}
	for _, r := range []string{w.DynamoVersion, w.RuntimeVersion, w.Version, w.Release} {
		if r != "" {
			c.Release = r
			break
		}
	}
	return c
}

// Event-plane topics the router follows; other topics are skipped silently.
const (
	TopicLoad     = "kv_metrics"
	TopicKVEvents = "kv-events"
)

// Publisher is an event-plane channel a worker advertises: where its load
// (kv_metrics) or KV-cache (kv-events) stream can be subscribed.
type Publisher struct {
	Namespace   string
	PublisherID uint64
	Topic       string
	// ScopeKind is namespace, component or endpoint (legacy records: component).
	ScopeKind string
	Component string
	Endpoint  string
	// TransportKind is the adjacently-tagged kind: Zmq, ZmqBroker, Nats, ...
	TransportKind string
	// Address is the Zmq endpoint (tcp://host:port). Internal: never exported
	// by the admin API or metrics.
	Address string
	// ReplayKind and ReplayAddress are the replay socket the record
	// advertises (the "replay" extension field): where missed kv-events
	// messages can be asked for again. Both "" without one; internal like
	// Address.
	ReplayKind    string
	ReplayAddress string
}

type scopeWire struct {
	Kind      string `json:"kind"`
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	Component string `json:"component"`
	Endpoint  *struct {
		Namespace string `json:"namespace"`
		Component string `json:"component"`
		Name      string `json:"name"`
	} `json:"endpoint"`
}

type transportWire struct {
	Kind   string `json:"kind"`
	Config struct {
		Endpoint string `json:"endpoint"`
	} `json:"config"`
}

// parsed is one decoded record; exactly one pointer is set, or none for a
// record that is valid but not routable (a non-generate endpoint, an
// unfollowed topic).
type parsed struct {
	endpoint *endpointRecord
	card     *cardRecord
	channel  *Publisher
}

var (
	errOversized = errors.New("record exceeds MAX_RECORD_BYTES")
	errNoID      = errors.New("record has no instance_id")
)

// parseRecord decodes one value found in namespace ns. It never panics and
// never trusts a namespace written inside the value.
func parseRecord(ns string, ks events.Keyspace, value []byte) (parsed, error) {
	if len(value) > MaxRecordBytes {
		return parsed{}, errOversized
	}
	var e envelope
	if err := json.Unmarshal(value, &e); err != nil {
		return parsed{}, err
	}
	// Each bucket holds one record type; anything else is out of place.
	if want, ok := keyspaceTypes[ks]; ok && e.Type != want && (e.Type == kindEndpoint || e.Type == kindModel || e.Type == kindEventChannel) {
		return parsed{}, fmt.Errorf("%s record under the %s keyspace", e.Type, ks)
	}
	switch e.Type {
	case kindEndpoint:
		if !e.InstanceID.set {
			return parsed{}, errNoID
		}
		if e.Endpoint != "generate" {
			return parsed{}, nil
		}
		host, port := transportAddress(e.Transport)
		return parsed{endpoint: &endpointRecord{component: e.Component, endpoint: e.Endpoint, instanceID: e.InstanceID.value,
			host: host, port: port}}, nil
	case kindModel:
		if !e.InstanceID.set {
			return parsed{}, errNoID
		}
		c := &cardRecord{
			component:  e.Component,
			endpoint:   e.Endpoint,
			instanceID: e.InstanceID.value,
			lora:       e.ModelSuffix != nil && *e.ModelSuffix != "",
			card:       parseCard(e.CardJSON),
		}
		if len(e.CardJSON) <= MaxRetainedCardBytes {
			c.raw = e.CardJSON
		}
		return parsed{card: c}, nil
	case kindEventChannel:
		return parseChannel(ns, &e)
	case "":
		return parsed{}, errors.New(`record has no "type"`)
	}
	// A record type from a newer release: valid, not ours to follow.
	return parsed{}, nil
}

func parseChannel(ns string, e *envelope) (parsed, error) {
	if e.Topic != TopicLoad && e.Topic != TopicKVEvents {
		return parsed{}, nil
	}
	if !e.InstanceID.set {
		return parsed{}, errNoID
	}
	p := &Publisher{Namespace: ns, PublisherID: e.InstanceID.value, Topic: e.Topic}
	if len(e.Scope) > 0 {
		var s scopeWire
		if err := json.Unmarshal(e.Scope, &s); err != nil {
			return parsed{}, fmt.Errorf("scope: %w", err)
		}
		p.ScopeKind = s.Kind
		switch s.Kind {
		case "component":
			p.Component = s.Component
		case "endpoint":
			if s.Endpoint != nil {
				p.Component, p.Endpoint = s.Endpoint.Component, s.Endpoint.Name
			}
		}
	} else {
		p.ScopeKind, p.Component = "component", e.Component
		if e.Component == "" {
			p.ScopeKind = "namespace"
		}
	}
	if len(e.Transport) > 0 {
		var t transportWire
		if json.Unmarshal(e.Transport, &t) == nil {
			p.TransportKind = t.Kind
			p.Address = t.Config.Endpoint
		}
	}
	// A replay field the router cannot read only means no replay: the
	// channel itself stays usable.
	if len(e.Replay) > 0 {
		var t transportWire
		if json.Unmarshal(e.Replay, &t) == nil {
			p.ReplayKind = t.Kind
			p.ReplayAddress = t.Config.Endpoint
		}
	}
	return parsed{channel: p}, nil
}

// maxHostBytes bounds a transport host: a DNS name is at most 253 bytes.
const maxHostBytes = 253

// transportHost reads the host of an Endpoint record's TCP request-plane
// transport, {"tcp": "host:port/..."}: the worker's address, which hosts
// that address workers directly (the endpoint picker) combine with their
// own port. "" for another transport or anything that is not a plain
// host (an IP address or a DNS name).
func transportHost(raw json.RawMessage) string {
	host, _ := transportAddress(raw)
	return host
}

// transportAddress is transportHost with the port the record names (0
// when it names none that fits 1-65535). Only hosts that know the port is
// the one to address (the endpoint picker's standalone mode, whose Pod
// records carry the InferencePool's target port) use it.
func transportAddress(raw json.RawMessage) (string, uint16) {
	var t struct {
		TCP string `json:"tcp"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &t) != nil || t.TCP == "" {
		return "", 0
	}
	hostPort, _, _ := strings.Cut(t.TCP, "/")
	host, ok := splitHost(hostPort)
	if !ok || host == "" || len(host) > maxHostBytes {
		return "", 0
	}
	if host = checkedHost(host); host == "" {
		return "", 0
	}
	return host, portOf(hostPort)
}

// portOf reads the port after the last colon of a host:port splitHost
// accepted (digits only), 0 when it is out of range.
func portOf(hostPort string) uint16 {
	n, err := strconv.ParseUint(hostPort[strings.LastIndexByte(hostPort, ':')+1:], 10, 16)
	if err != nil {
		return 0
	}
	return uint16(n)
}

// checkedHost keeps an IP address or a DNS name, "" otherwise.
func checkedHost(host string) string {
	if _, err := netip.ParseAddr(host); err == nil {
		return host
	}
	for _, label := range strings.Split(host, ".") {
		if label == "" || len(label) > 63 || strings.IndexFunc(label, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-')
		}) >= 0 {
			return ""
		}
	}
	return host
}

// splitHost takes the host of "host:port" or "[v6]:port" (the core links
// no socket package, so not net.SplitHostPort); the port must be digits.
func splitHost(hostPort string) (string, bool) {
	i := strings.LastIndexByte(hostPort, ':')
	if i < 0 {
		return "", false
	}
	host, port := hostPort[:i], hostPort[i+1:]
	if port == "" || strings.IndexFunc(port, func(r rune) bool { return r < '0' || r > '9' }) >= 0 {
		return "", false
	}
	if strings.HasPrefix(host, "[") {
		if !strings.HasSuffix(host, "]") {
			return "", false
		}
		return host[1 : len(host)-1], true
	}
	if strings.Contains(host, ":") {
		return "", false // an IPv6 address must be bracketed
	}
	return host, true
}
