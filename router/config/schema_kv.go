package config

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
	UseKVEvents               bool                      `yaml:"use_kv_events"`
	PredictedBlockTTL         Duration                  `yaml:"predicted_block_ttl"`
	ConditionalDisaggregation ConditionalDisaggregation `yaml:"conditional_disaggregation"`
}

// ConditionalDisaggregation lets a decode worker prefill locally.
type ConditionalDisaggregation struct {
	Enabled bool `yaml:"enabled"`
	// DecodeBusyThreshold is a fraction of total_kv_blocks; nil means no
	// busy check.
	DecodeBusyThreshold *float64 `yaml:"decode_busy_threshold,omitempty"`
}
