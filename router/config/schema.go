package config

// Config is one configuration file. Every field has a yaml tag in
// snake_case; Parse rejects keys that match no field.
type Config struct {
	Server               Server               `yaml:"server"`
	Admin                Admin                `yaml:"admin"`
	Gateway              Gateway              `yaml:"gateway"`
	APIKeys              []APIKey             `yaml:"api_keys"`
	Backends             []Backend            `yaml:"backends"`
	DisaggregatedServing DisaggregatedServing `yaml:"disaggregated_serving"`
	Dynamo               Dynamo               `yaml:"dynamo"`
	EPP                  EPP                  `yaml:"epp"`
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
	// GlobalPrompts are prepended, in order, as system messages to every
	// chat completions body sent to this backend.
	GlobalPrompts []string `yaml:"global_prompts"`
	// RequiresSingleLeadingSystem merges every system message of a chat
	// body sent to this backend (global prompts included) into one, first:
	// for frontends whose chat template accepts no other shape.
	RequiresSingleLeadingSystem bool `yaml:"requires_single_leading_system"`
	// Timeout bounds one upstream exchange: a buffered response in full, or
	// a stream's wait for its head and every gap between its events.
	Timeout        Duration       `yaml:"timeout"`
	HealthCheck    HealthCheck    `yaml:"health_check"`
	CircuitBreaker CircuitBreaker `yaml:"circuit_breaker"`
}

// HealthCheck is the active probe of one backend. A backend takes traffic
// only while its probe says it is healthy; it starts healthy, so a router
// that has just started serves at once, and is probed immediately.
type HealthCheck struct {
	// Enabled false skips probing (for upstreams without a health route);
	// the backend then always counts as healthy.
	Enabled bool `yaml:"enabled"`
	// Path is joined to the backend URL, base path included.
	Path     string   `yaml:"path"`
	Interval Duration `yaml:"interval"`
	Timeout  Duration `yaml:"timeout"`
	// Consecutive probe results needed to change state.
	UnhealthyThreshold int `yaml:"unhealthy_threshold"`
	HealthyThreshold   int `yaml:"healthy_threshold"`
}

// CircuitBreaker stops sending to a backend after consecutive failures
// (connection errors, timeouts, 5xx), then lets one trial request through
// after OpenFor; its success closes the breaker again.
type CircuitBreaker struct {
	FailureThreshold int      `yaml:"failure_threshold"`
	OpenFor          Duration `yaml:"open_for"`
}

// Gateway tunes the client-facing OpenAI-compatible ingress.
type Gateway struct {
	// MaxBodyBytes caps a request body; larger ones get 413.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// Retries is how many further replicas of the same pool (or further
	// unified backends) a request may try after a connection failure.
	Retries int `yaml:"retries"`
	// RequestTimeout bounds a whole client request, streams included.
	RequestTimeout Duration `yaml:"request_timeout"`
	// ReadTimeout bounds reading one request body, so a slow client cannot
	// hold a handler by trickling bytes.
	ReadTimeout Duration `yaml:"read_timeout"`
	// WriteTimeout bounds each write to the client (each event of a
	// stream), so a client that stops reading is dropped.
	WriteTimeout Duration `yaml:"write_timeout"`
	// ShutdownGrace is how long in-flight requests (streams included) may
	// finish after shutdown begins before their connections are closed.
	ShutdownGrace Duration `yaml:"shutdown_grace"`
	// MaxInFlight caps the inference requests being read, parsed or served
	// at once; past it the gateway answers 503 with Retry-After.
	MaxInFlight int `yaml:"max_in_flight"`
	// MaxBufferedBodyBytes caps the request-body bytes held at once by all
	// inference requests together (each is held until its answer ends);
	// past it the gateway answers 503 with Retry-After. It is never less
	// than MaxBodyBytes in effect, so one body of the largest size fits.
	MaxBufferedBodyBytes int64 `yaml:"max_buffered_body_bytes"`
	// UpstreamClient is the HTTP client plain http:// backends are reached
	// with: UpstreamClientBuiltin (the default) or UpstreamClientNetHTTP.
	UpstreamClient string `yaml:"upstream_client"`
	// Server is the HTTP server clients are answered by: ServerBuiltin
	// (the default) or ServerNetHTTP. Read at start.
	Server string `yaml:"server"`
}

// HTTP servers (gateway.server).
const (
	// ServerBuiltin is router/httpd: one goroutine per connection, heads
	// parsed in place, a short answer in one write.
	ServerBuiltin = "builtin"
	// ServerNetHTTP is net/http's server.
	ServerNetHTTP = "net/http"
)

// Upstream clients (gateway.upstream_client).
const (
	// UpstreamClientBuiltin reads and writes each upstream request on its
	// handler's goroutine; https:// backends still use net/http.
	UpstreamClientBuiltin = "builtin"
	// UpstreamClientNetHTTP sends every upstream request through net/http.
	UpstreamClientNetHTTP = "net/http"
)

// APIKey is one client credential of the gateway. When any key is
// configured, every /v1 request needs one as a bearer token.
type APIKey struct {
	// Key is the secret itself; write it as ${ENV} to keep it out of the file.
	Key string `yaml:"key"`
	// AllowedBackends limits the key to these backends (and, through them,
	// to the shim pools they belong to); empty allows every backend.
	AllowedBackends []string `yaml:"allowed_backends"`
}

// IsEnabled reports whether the backend takes traffic; absent means yes.
func (b Backend) IsEnabled() bool { return b.Enabled == nil || *b.Enabled }

// DisaggregatedServing turns on the prefill/decode orchestrator.
type DisaggregatedServing struct {
	Enabled           bool `yaml:"enabled"`
	FallbackToUnified bool `yaml:"fallback_to_unified"`
}
