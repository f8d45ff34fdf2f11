package config

import "strings"

// Dynamo groups everything about an NVIDIA Dynamo fleet.
type Dynamo struct {
	Enabled   bool        `yaml:"enabled"`
	Discovery Discovery   `yaml:"discovery"`
	Load      LoadSignals `yaml:"load"`
	Shim      Shim        `yaml:"shim"`
	KV        KV          `yaml:"kv"`
	EventBus  EventBus    `yaml:"event_bus"`
}

// Discovery sources.
const (
	SourceEtcd           = "etcd"
	SourceKubernetes     = "kubernetes"
	SourceKubernetesPods = "kubernetes_pods"
	// SourceInferencePool is the endpoint picker's standalone mode: the
	// Pods an InferencePool selects, with no Dynamo runtime.
	SourceInferencePool = "inference_pool"
)

// Discovery selects where workers are discovered.
type Discovery struct {
	Source     string              `yaml:"source"`
	Etcd       EtcdDiscovery       `yaml:"etcd"`
	Kubernetes KubernetesDiscovery `yaml:"kubernetes"`
	// InferencePool is source inference_pool's pool.
	InferencePool InferencePoolDiscovery `yaml:"inference_pool"`
}

// InferencePoolDiscovery names the InferencePool (inference.networking.k8s.io/v1)
// whose selected Pods are the workers under source inference_pool, and how
// their vLLM engines' KV events are reached. The Pods are watched with
// dynamo.discovery.kubernetes.watch_reconnect_backoff; the model and block
// size are epp.model_name and epp.kv_cache_block_size (there are no cards).
type InferencePoolDiscovery struct {
	// Name is the pool's name (DYN_EPP_POOL_NAME).
	Name string `yaml:"name"`
	// Namespace is the Kubernetes namespace of the pool and its Pods
	// (DYN_EPP_POOL_NAMESPACE, else POD_NAMESPACE).
	Namespace string `yaml:"namespace"`
	// KVEventsPort is the port each Pod's engine publishes KV events on,
	// unless the Pod's switchyard.dev/kv-events-port annotation names
	// another (vLLM binds tcp://*:5557 by default).
	KVEventsPort int `yaml:"kv_events_port"`
	// KVReplayPort is the port of each Pod's KV-event replay socket
	// (vLLM's replay_endpoint), unless the Pod's
	// switchyard.dev/kv-replay-port annotation names another; 0: the
	// engines serve no replay.
	KVReplayPort int `yaml:"kv_replay_port"`
	// KVEventsListen, when set, is the address (host:port) of a listener
	// the Pods' publishers dial instead (llm-d-inference-sim's
	// --zmq-endpoint, vLLM's connect mode): the picker binds it, accepts
	// their sessions and maps each message to its Pod by the IP its
	// topic names (kv@<pod IP>@<model>). Pods are then not dialled.
	KVEventsListen string `yaml:"kv_events_listen"`
	// Tokenizer is the tokenizer.json every Pod's engine tokenizes with;
	// with it the picker renders and hashes prompts as the engines do
	// (no card names one in this mode). Empty: prompts are not tokenized
	// and the picker routes by load.
	Tokenizer PoolArtifact `yaml:"tokenizer"`
	// ChatTemplate is the chat template the engines render chat requests
	// with: a tokenizer_config.json (kind hf_tokenizer_config_json, the
	// default) or a Jinja file (kind hf_chat_template, the default for a
	// path ending in .jinja). Without it only completions are tokenized.
	ChatTemplate PoolArtifact `yaml:"chat_template"`
}

// PoolArtifact names one file the standalone pool's engines use, as a
// model card's CheckedFile does: where it is (an absolute path, or an
// http(s):// or hf:// URL under the dynamo.kv allow flags) and the blake3
// checksum it must hash to. Naming the checksum here pins it: it is the
// operator's own review, as an entry of dynamo.kv.pinned_artifacts is.
type PoolArtifact struct {
	Path     string `yaml:"path"`
	Checksum string `yaml:"checksum"`
	// Kind is the chat template's form (see ChatTemplate); a tokenizer's
	// is hf_tokenizer_json, the only one read.
	Kind string `yaml:"kind,omitempty"`
}

// Chat template kinds a standalone pool may name (the model card's
// prompt-formatter variants).
const (
	KindTokenizerJSON    = "hf_tokenizer_json"
	KindTokenizerConfig  = "hf_tokenizer_config_json"
	KindChatTemplate     = "hf_chat_template"
	KindChatTemplateJSON = "hf_chat_template_json"
)

// Set reports whether the artifact names a file.
func (a PoolArtifact) Set() bool { return a.Path != "" || a.Checksum != "" }

// TemplateKind is the chat template's kind: the one given, else
// hf_chat_template for a .jinja file and hf_tokenizer_config_json
// otherwise.
func (a PoolArtifact) TemplateKind() string {
	switch {
	case a.Kind != "":
		return a.Kind
	case strings.HasSuffix(strings.ToLower(a.Path), ".jinja"):
		return KindChatTemplate
	}
	return KindTokenizerConfig
}

// DefaultNamespace is Dynamo's own default DYN_NAMESPACE.
const DefaultNamespace = "dynamo"

// EtcdDiscovery reads the workers' registrations from etcd.
type EtcdDiscovery struct {
	Endpoints []string `yaml:"endpoints"`
	// Namespace must match the workers' DYN_NAMESPACE.
	Namespace string `yaml:"namespace"`
	// Namespaces watches several graphs; exclusive with a non-default Namespace.
	Namespaces            []string     `yaml:"namespaces"`
	TLS                   *EtcdTLS     `yaml:"tls,omitempty"`
	Auth                  *EtcdAuth    `yaml:"auth,omitempty"`
	WatchReconnectBackoff Backoff      `yaml:"watch_reconnect_backoff"`
	Embedded              EmbeddedEtcd `yaml:"embedded"`
}

// EtcdTLS is the client TLS setup. Its presence (even empty) means TLS.
type EtcdTLS struct {
	CACert     string `yaml:"ca_cert"`
	ClientCert string `yaml:"client_cert"`
	ClientKey  string `yaml:"client_key"`
	ServerName string `yaml:"server_name"`
}

// EtcdAuth is etcd username/password authentication.
type EtcdAuth struct {
	Username string `yaml:"username"`
	Password string `yaml:"password"`
}

// EmbeddedEtcd runs an etcd server inside the router process, for demos and
// tests. It is Switchyard's own addition; when enabled it is the endpoint.
type EmbeddedEtcd struct {
	Enabled bool   `yaml:"enabled"`
	Listen  string `yaml:"listen"`
	// DataDir empty means a fresh temporary directory per start.
	DataDir string `yaml:"data_dir"`
}

// Backoff bounds the delay between watch reconnects.
type Backoff struct {
	Initial Duration `yaml:"initial"`
	Max     Duration `yaml:"max"`
}

// KubernetesDiscovery is shared by the kubernetes (DynamoWorkerMetadata)
// and kubernetes_pods (labelled Pods) sources.
type KubernetesDiscovery struct {
	// Namespace is the Kubernetes namespace of the fleet.
	Namespace        string   `yaml:"namespace"`
	DynamoNamespace  string   `yaml:"dynamo_namespace"`
	DynamoNamespaces []string `yaml:"dynamo_namespaces"`
	// Model and Models name what a Pod serves; kubernetes_pods only.
	Model                 string           `yaml:"model"`
	Models                []ComponentModel `yaml:"models"`
	WatchReconnectBackoff Backoff          `yaml:"watch_reconnect_backoff"`
}

// ComponentModel maps a nvidia.com/dynamo-component label value to the
// model its Pods serve.
type ComponentModel struct {
	Component       string `yaml:"component"`
	Model           string `yaml:"model"`
	DynamoNamespace string `yaml:"dynamo_namespace"`
}

// Load-signal transports.
const (
	TransportDirect = "direct"
	TransportBroker = "broker"
)

// LoadSignals configures the kv_metrics (and kv-events) subscriptions.
type LoadSignals struct {
	// MaxStaleness is how old a load sample may be and still count.
	MaxStaleness Duration `yaml:"max_staleness"`
	// DirectAllowCIDRs limits which resolved publisher addresses direct
	// mode may dial; empty allows any.
	DirectAllowCIDRs []string `yaml:"direct_allow_cidrs"`
	Transport        string   `yaml:"transport"`
}

// Shim names the direct-mode frontends requests are pinned through.
type Shim struct {
	Backends []string   `yaml:"backends"`
	Pools    []ShimPool `yaml:"pools"`
	// ModelMap maps a client model id to a Dynamo display_name.
	ModelMap map[string]string `yaml:"model_map"`
}

// ShimPool is the frontend replicas of one Dynamo namespace.
type ShimPool struct {
	Namespace string   `yaml:"namespace"`
	Backends  []string `yaml:"backends"`
}
