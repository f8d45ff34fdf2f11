package config

// EPP modes.
const (
	EPPModeDynamo     = "dynamo"
	EPPModeStandalone = "standalone"
)

// EPP request body modes: how the gateway sends request bodies (Envoy's
// ext_proc processing_mode.request_body_mode), used when the gateway does
// not say so in its first message.
const (
	BodyModeFullDuplexStreamed = "full_duplex_streamed"
	BodyModeBuffered           = "buffered"
)

// DefaultEPPListen is the port Gateway API inference pools expect their
// endpoint picker on.
const DefaultEPPListen = ":9002"

// EPP is the Gateway API Inference Extension endpoint picker: an Envoy
// ext_proc server answering which worker each request goes to, on the same
// routing core as the gateway (`switchyard epp`, or beside the gateway in
// `switchyard serve`). The router-wide KV knobs (dynamo.kv) apply; the
// fields here are the endpoint picker's own. Each has a DYN_* variable
// that `switchyard epp` reads (docs/epp.md).
type EPP struct {
	Enabled bool `yaml:"enabled"`
	// Listen is the gRPC listener, host:port.
	Listen string `yaml:"listen"`
	// HealthListen, when set, serves the gRPC health service alone, in
	// plaintext, on its own port: Kubernetes gRPC probes cannot speak TLS
	// to the main listener.
	HealthListen string `yaml:"health_listen"`
	// Plaintext serves without TLS; by default the listener serves TLS
	// with CertFile and KeyFile, or a self-signed certificate made at
	// start when they are empty (gateways do not verify it by default).
	Plaintext bool   `yaml:"plaintext"`
	CertFile  string `yaml:"cert_file"`
	KeyFile   string `yaml:"key_file"`
	// Mode is dynamo (workers from dynamo.discovery) or standalone.
	Mode string `yaml:"mode"`
	// ModelName routes every request to the workers of this model,
	// whatever model the body names (an InferencePool serves one model);
	// empty uses the body's model. DYN_MODEL_NAME.
	ModelName string `yaml:"model_name"`
	// TargetPort is the port of each worker's frontend sidecar, the
	// InferencePool's target port: the destination is the worker's host
	// (from its Endpoint record) and this port.
	TargetPort int `yaml:"target_port"`
	// RequestBodyMode is used when the gateway does not announce its
	// processing mode.
	RequestBodyMode string `yaml:"request_body_mode"`
	// KVCacheBlockSize, when set, is the block size workers must advertise
	// (DYN_KV_CACHE_BLOCK_SIZE): a worker whose card says otherwise would
	// score wrong overlaps, so start-up warns and selection counts it.
	KVCacheBlockSize int `yaml:"kv_cache_block_size"`
	// The active-sequence switches (DYN_ROUTER_TRACK_*), the overlap
	// credit decay, the decode active-request weight and use_kv_events
	// are dynamo.kv settings, shared with the gateway.
	// ReplicaSync shares active-sequence state between replicas
	// (DYN_ROUTER_REPLICA_SYNC); PeerService names the Service, in the
	// endpoint picker's own Kubernetes namespace, whose ready endpoints
	// are the ZMQ peers (DYN_EPP_PEER_SERVICE).
	ReplicaSync bool   `yaml:"replica_sync"`
	PeerService string `yaml:"peer_service"`
	// FallbackEndpoints lists up to this many next-best workers after the
	// pick in the destination, for the gateway to try in order when the
	// first does not answer (standalone mode only: in dynamo mode every
	// endpoint would receive the first pick's worker pins).
	FallbackEndpoints int `yaml:"fallback_endpoints"`
	// ReplicaSyncTransport is zmq (each replica binds a PUB socket and
	// subscribes to its peers') or nats (every replica publishes and
	// subscribes on one subject of ReplicaSyncNATSURL's server).
	ReplicaSyncTransport string `yaml:"replica_sync_transport"`
	// ReplicaSyncNATSURL is the NATS server of transport nats,
	// nats://host:port (a comma-separated list for a cluster).
	ReplicaSyncNATSURL string `yaml:"replica_sync_nats_url"`
	// ReplicaSyncListen is the address of this replica's replica-sync PUB
	// socket (ZMQ), host:port; its port is also the port of the peers
	// found through PeerService.
	ReplicaSyncListen string `yaml:"replica_sync_listen"`
	// ReplicaPeers are the peers' replica-sync PUB addresses, host:port;
	// this replica's own address may be listed (the same list for every
	// replica).
	ReplicaPeers []string `yaml:"replica_peers"`
}

// MaxFallbackEndpoints caps epp.fallback_endpoints.
const MaxFallbackEndpoints = 8

// Replica-sync transports.
const (
	ReplicaSyncZMQ  = "zmq"
	ReplicaSyncNATS = "nats"
)

// DefaultReplicaSyncListen is where a replica publishes its replica-sync
// batches.
const DefaultReplicaSyncListen = ":9010"

func defaultEPP() EPP {
	return EPP{Listen: DefaultEPPListen, Mode: EPPModeDynamo, TargetPort: 8000, RequestBodyMode: BodyModeFullDuplexStreamed,
		ReplicaSyncTransport: ReplicaSyncZMQ, ReplicaSyncListen: DefaultReplicaSyncListen}
}
