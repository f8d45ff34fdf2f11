package config

// Roles of an event-bus client entry.
const (
	BusRoleBroker     = "broker"
	BusRoleKVListener = "kv_listener"
)

// EventBus is the inbound listener that in-cluster brokers dial out to.
type EventBus struct {
	Enabled               bool        `yaml:"enabled"`
	Listen                string      `yaml:"listen"`
	TLS                   BusTLS      `yaml:"tls"`
	Brokers               []BusClient `yaml:"brokers"`
	MaxSessions           int         `yaml:"max_sessions"`
	MaxStreamsPerSession  int         `yaml:"max_streams_per_session"`
	MaxSessionBufferBytes int64       `yaml:"max_session_buffer_bytes"`
	HeartbeatInterval     Duration    `yaml:"heartbeat_interval"`
	IdleTimeout           Duration    `yaml:"idle_timeout"`
}

// BusTLS is the listener's certificate and the optional client CA.
type BusTLS struct {
	Cert     string `yaml:"cert"`
	Key      string `yaml:"key"`
	ClientCA string `yaml:"client_ca"`
}

// BusClient is one credential allowed to open a session.
type BusClient struct {
	ID   string `yaml:"id"`
	Role string `yaml:"role"`
	// TokenHash is "sha256:<hex>" of the bearer token; never the token.
	TokenHash string `yaml:"token_hash"`
	// Namespaces is a broker's allowlist of Dynamo namespaces.
	Namespaces []string `yaml:"namespaces"`
	// Backends is a kv_listener's grant.
	Backends []string `yaml:"backends"`
}
