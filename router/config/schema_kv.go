package config

import "time"

// KV configures KV-overlap-aware selection.
type KV struct {
	Enabled            bool `yaml:"enabled"`
	AllowHTTPArtifacts bool `yaml:"allow_http_artifacts"`
	AllowHFArtifacts   bool `yaml:"allow_hf_artifacts"`
	// PinnedArtifacts are the "blake3:<hex>" checksums the router may load;
	// fleet-authored tokenizers and templates are code, so nothing loads
	// until an operator pins it.
	PinnedArtifacts []string `yaml:"pinned_artifacts"`
	// ArtifactCacheDir holds fetched artifacts by checksum; empty means the
	// per-user cache directory (EffectiveArtifactCacheDir).
	ArtifactCacheDir   string  `yaml:"artifact_cache_dir"`
	OverlapScoreCredit float64 `yaml:"overlap_score_credit"`
	PrefillLoadScale   float64 `yaml:"prefill_load_scale"`
	RouterTemperature  float64 `yaml:"router_temperature"`
	SendTokenData      bool    `yaml:"send_token_data"`
	// UseKVEvents follows the workers' kv-events; false scores ranks on
	// the cache state predicted from the router's own picks, each
	// predicted block kept PredictedBlockTTL after its last pick.
	UseKVEvents       bool     `yaml:"use_kv_events"`
	PredictedBlockTTL Duration `yaml:"predicted_block_ttl"`
	// The router-side active-sequence switches (Dynamo's
	// DYN_ROUTER_TRACK_*; picker.Tracking): the router's own account of
	// the requests it dispatched replaces the sampled load in the load and
	// KV pickers' costs. ExpectedOutputTokens predicts the output of a
	// request without max_tokens (0: picker.DefaultExpectedOutputTokens).
	TrackActiveBlocks    bool `yaml:"track_active_blocks"`
	TrackPrefillTokens   bool `yaml:"track_prefill_tokens"`
	TrackOutputBlocks    bool `yaml:"track_output_blocks"`
	ExpectedOutputTokens int  `yaml:"expected_output_tokens"`
	// OverlapScoreCreditDecay shrinks a rank's overlap credit as its
	// tracked prefill load rises above the least loaded candidate's
	// (DYN_ROUTER_KV_OVERLAP_SCORE_CREDIT_DECAY; needs
	// track_prefill_tokens). 0 is off.
	OverlapScoreCreditDecay float64 `yaml:"overlap_score_credit_decay"`
	// DecodeActiveRequestWeight adds block-equivalents to a rank's decode
	// cost per request active on it (DYN_ROUTER_DECODE_ACTIVE_REQUEST_WEIGHT).
	DecodeActiveRequestWeight float64                   `yaml:"decode_active_request_weight"`
	ConditionalDisaggregation ConditionalDisaggregation `yaml:"conditional_disaggregation"`
	// Replay configures gap recovery: when a publisher that offers replay
	// skips messages, the router asks for them before clearing a rank.
	Replay KVReplay `yaml:"replay"`
	// Sources are kv_cache_index sources: backends whose KV-cache events
	// in-cluster kv-listeners push as SSE over the event bus, followed
	// instead of the workers' own kv-events (docs/event-bus.md).
	Sources []KVSource `yaml:"sources"`
}

// KVReplay configures gap recovery by replay (docs/kv.md).
type KVReplay struct {
	Enabled bool `yaml:"enabled"`
	// Timeout is how long a recovery waits for its replay to end before
	// it releases what it held and the gap clears the rank.
	Timeout Duration `yaml:"timeout"`
	// MaxHeldMessages bounds the live messages one recovery holds.
	MaxHeldMessages int `yaml:"max_held_messages"`
}

// Bounds of dynamo.kv.replay.
const (
	MinKVReplayTimeout = 10 * time.Millisecond
	MaxKVReplayTimeout = time.Minute
	MaxKVReplayHeld    = 65536
)

// Transports of a kv_cache_index source.
const KVSourceTransportEventBus = "event_bus"

// MaxKVSources caps dynamo.kv.sources.
const MaxKVSources = 256

// KVSource is one kv_cache_index source.
type KVSource struct {
	// Backend is the name kv-listeners announce and a kv_listener entry
	// of dynamo.event_bus.brokers grants.
	Backend string `yaml:"backend"`
	// Transport is event_bus, the only one.
	Transport string `yaml:"transport"`
	// Namespace is the Dynamo namespace the backend's workers register
	// in (default: the discovery's namespace when it watches one).
	Namespace string `yaml:"namespace"`
}

// ConditionalDisaggregation lets a decode worker prefill locally.
type ConditionalDisaggregation struct {
	Enabled bool `yaml:"enabled"`
	// DecodeBusyThreshold is a fraction of total_kv_blocks; nil means no
	// busy check.
	DecodeBusyThreshold *float64 `yaml:"decode_busy_threshold,omitempty"`
}
