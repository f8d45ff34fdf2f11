package config

import "time"

// Default values that are not obvious zero values.
const (
	DefaultBindAddress           = "127.0.0.1:8080"
	DefaultEmbeddedListen        = "127.0.0.1:2379"
	DefaultMaxSessions           = 64
	DefaultMaxStreamsPerSession  = 1024
	DefaultMaxSessionBufferBytes = 64 << 20
	DefaultMaxBodyBytes          = 10 << 20
	DefaultRetries               = 2
	DefaultRequestTimeout        = 600 * time.Second
	DefaultReadTimeout           = 60 * time.Second
	DefaultWriteTimeout          = 60 * time.Second
	DefaultShutdownGrace         = 30 * time.Second
	DefaultMaxInFlight           = 4096
	DefaultMaxBufferedBodyBytes  = 512 << 20
	DefaultBackendTimeout        = 300 * time.Second
	DefaultHealthPath            = "/health"
	DefaultHealthInterval        = 10 * time.Second
	DefaultHealthTimeout         = 2 * time.Second
	DefaultUnhealthyThreshold    = 3
	DefaultHealthyThreshold      = 1
	DefaultFailureThreshold      = 5
	DefaultOpenFor               = 30 * time.Second
)

// Default returns a configuration with every default filled in. Parse
// decodes the file over it, so an absent key keeps its default.
func Default() *Config {
	backoff := Backoff{Initial: Duration(500 * time.Millisecond), Max: Duration(30 * time.Second)}
	return &Config{
		Server: Server{BindAddress: DefaultBindAddress},
		Gateway: Gateway{
			MaxBodyBytes:         DefaultMaxBodyBytes,
			Retries:              DefaultRetries,
			RequestTimeout:       Duration(DefaultRequestTimeout),
			ReadTimeout:          Duration(DefaultReadTimeout),
			WriteTimeout:         Duration(DefaultWriteTimeout),
			ShutdownGrace:        Duration(DefaultShutdownGrace),
			MaxInFlight:          DefaultMaxInFlight,
			MaxBufferedBodyBytes: DefaultMaxBufferedBodyBytes,
			UpstreamClient:       UpstreamClientBuiltin,
			Server:               ServerBuiltin,
		},
		Dynamo: Dynamo{
			Discovery: Discovery{
				Source: SourceEtcd,
				Etcd: EtcdDiscovery{
					Namespace:             DefaultNamespace,
					WatchReconnectBackoff: backoff,
					Embedded:              EmbeddedEtcd{Listen: DefaultEmbeddedListen},
				},
				Kubernetes:    KubernetesDiscovery{WatchReconnectBackoff: backoff},
				InferencePool: InferencePoolDiscovery{Namespace: "default", KVEventsPort: 5557},
			},
			Load: LoadSignals{
				MaxStaleness: Duration(3 * time.Second),
				Transport:    TransportDirect,
			},
			KV: KV{
				AllowHTTPArtifacts: true,
				OverlapScoreCredit: 1.0,
				PrefillLoadScale:   1.0,
				UseKVEvents:        true,
				PredictedBlockTTL:  Duration(120 * time.Second), // kv.DefaultPredictedTTL
				// Dynamo's defaults: the router's own account of what it
				// dispatched costs the picks (docs/picker.md).
				TrackActiveBlocks:  true,
				TrackPrefillTokens: true,
				Replay:             KVReplay{Enabled: true, Timeout: Duration(2 * time.Second), MaxHeldMessages: 4096},
			},
			EventBus: EventBus{
				MaxSessions:           DefaultMaxSessions,
				MaxStreamsPerSession:  DefaultMaxStreamsPerSession,
				MaxSessionBufferBytes: DefaultMaxSessionBufferBytes,
				HeartbeatInterval:     Duration(10 * time.Second),
				IdleTimeout:           Duration(30 * time.Second),
			},
		},
		EPP: defaultEPP(),
	}
}

// DefaultBackend is a backends[] entry with every default filled in and
// no name or URL. Parse decodes each entry over it, so an absent key keeps
// its default while an explicit zero ("timeout: 0s") stays zero and fails
// validation instead of silently meaning the default. Code that builds a
// Config by hand should start its backends from it too.
func DefaultBackend() Backend {
	on := true
	return Backend{
		Type:    BackendTypeOpenAI,
		Role:    RoleUnified,
		Enabled: &on,
		Timeout: Duration(DefaultBackendTimeout),
		HealthCheck: HealthCheck{
			Enabled:            true,
			Path:               DefaultHealthPath,
			Interval:           Duration(DefaultHealthInterval),
			Timeout:            Duration(DefaultHealthTimeout),
			UnhealthyThreshold: DefaultUnhealthyThreshold,
			HealthyThreshold:   DefaultHealthyThreshold,
		},
		CircuitBreaker: CircuitBreaker{FailureThreshold: DefaultFailureThreshold, OpenFor: Duration(DefaultOpenFor)},
	}
}

// setDefaults makes the decoder start each backends[] entry from the defaults.
func (b *Backend) setDefaults() { *b = DefaultBackend() }

// fillElementDefaults sets defaults inside list elements that have no
// element defaulter. Elements start from zero values when decoded, and an
// empty string is never a valid value for these fields, so filling after
// decoding loses nothing.
func (c *Config) fillElementDefaults() {
	for i := range c.Dynamo.EventBus.Brokers {
		if c.Dynamo.EventBus.Brokers[i].Role == "" {
			c.Dynamo.EventBus.Brokers[i].Role = BusRoleBroker
		}
	}
	if ns := c.Dynamo.Discovery.Namespaces(); len(ns) == 1 {
		for i := range c.Dynamo.KV.Sources {
			if c.Dynamo.KV.Sources[i].Namespace == "" {
				c.Dynamo.KV.Sources[i].Namespace = ns[0]
			}
		}
	}
}
