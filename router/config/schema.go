package config

// Config is one configuration file. Every field has a yaml tag in
// snake_case; Parse rejects keys that match no field.
type Config struct {
	Server               Server               `yaml:"server"`
	Admin                Admin                `yaml:"admin"`
	Backends             []Backend            `yaml:"backends"`
	DisaggregatedServing DisaggregatedServing `yaml:"disaggregated_serving"`
	Dynamo               Dynamo               `yaml:"dynamo"`
}

// Server is the client-facing HTTP listener.
type Server struct {
	// BindAddress is host:port; an empty host listens on every interface.
	BindAddress string `yaml:"bind_address"`
}

// Admin configures the admin API.
type Admin struct {
	// Token is the bearer token the admin API requires. Empty disables
	// the admin API rather than leaving it open.
	Token string `yaml:"token"`
}

// Backend roles.
const (
	RoleUnified = "unified"
	RolePrefill = "prefill"
	RoleDecode  = "decode"
)

// BackendTypeOpenAI is the only backend wire protocol so far.
const BackendTypeOpenAI = "openai"

// Values of Backend.ResponsesAPI besides empty (not offered).
const (
	ResponsesNative    = "native"
	ResponsesConverted = "converted"
)

// Backend is one upstream HTTP server the gateway may send requests to. A
// direct-mode Dynamo frontend (shim) is an ordinary unified backend.
type Backend struct {
	Name   string   `yaml:"name"`
	Type   string   `yaml:"type"`
	URL    string   `yaml:"url"`
	Role   string   `yaml:"role"`
	Models []string `yaml:"models"`
	// Internal backends are reachable only through routing decisions, never
	// picked for a client's model directly.
	Internal bool `yaml:"internal"`
	// Enabled is a pointer so that an absent key can mean true.
	Enabled      *bool  `yaml:"enabled"`
	ResponsesAPI string `yaml:"responses_api"`
}

// IsEnabled reports whether the backend takes traffic; absent means yes.
func (b Backend) IsEnabled() bool { return b.Enabled == nil || *b.Enabled }

// DisaggregatedServing turns on the prefill/decode orchestrator.
type DisaggregatedServing struct {
	Enabled           bool `yaml:"enabled"`
	FallbackToUnified bool `yaml:"fallback_to_unified"`
}
