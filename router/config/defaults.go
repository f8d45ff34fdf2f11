package config

import "time"

// Default values that are not obvious zero values.
const (
	DefaultBindAddress           = "127.0.0.1:8080"
	DefaultEmbeddedListen        = "127.0.0.1:2379"
	DefaultMaxSessions           = 64
	DefaultMaxStreamsPerSession  = 1024
	DefaultMaxSessionBufferBytes = 64 << 20
)

// Default returns a configuration with every default filled in. Parse
// decodes the file over it, so an absent key keeps its default.
func Default() *Config {
	backoff := Backoff{Initial: Duration(500 * time.Millisecond), Max: Duration(30 * time.Second)}
	return &Config{
		Server: Server{BindAddress: DefaultBindAddress},
		Dynamo: Dynamo{
			Discovery: Discovery{
				Source: SourceEtcd,
				Etcd: EtcdDiscovery{
					Namespace:             DefaultNamespace,
					WatchReconnectBackoff: backoff,
					Embedded:              EmbeddedEtcd{Listen: DefaultEmbeddedListen},
				},
				Kubernetes: KubernetesDiscovery{WatchReconnectBackoff: backoff},
			},
			Load: LoadSignals{
				MaxStaleness: Duration(3 * time.Second),
				Transport:    TransportDirect,
			},
			KV: KV{
				AllowHTTPArtifacts: true,
				OverlapScoreCredit: 1.0,
				PrefillLoadScale:   1.0,
			},
			EventBus: EventBus{
				MaxSessions:           DefaultMaxSessions,
				MaxStreamsPerSession:  DefaultMaxStreamsPerSession,
				MaxSessionBufferBytes: DefaultMaxSessionBufferBytes,
				HeartbeatInterval:     Duration(10 * time.Second),
				IdleTimeout:           Duration(30 * time.Second),
			},
		},
	}
}

// fillElementDefaults sets defaults inside list elements. Elements start
// from zero values when decoded, and an empty string is never a valid
// value for these fields, so filling after decoding loses nothing.
func (c *Config) fillElementDefaults() {
	for i := range c.Backends {
		b := &c.Backends[i]
		if b.Type == "" {
			b.Type = BackendTypeOpenAI
		}
		if b.Role == "" {
			b.Role = RoleUnified
		}
		if b.Enabled == nil {
			on := true
			b.Enabled = &on
		}
	}
	for i := range c.Dynamo.EventBus.Brokers {
		if c.Dynamo.EventBus.Brokers[i].Role == "" {
			c.Dynamo.EventBus.Brokers[i].Role = BusRoleBroker
		}
	}
}
