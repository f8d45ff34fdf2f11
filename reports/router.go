package reports

import "time"

// RunRouter is what the routing core ran one run with: the picker it built and the dynamo.kv
// block it was configured with (tracking switches as the picker applied them), so a reader can
// tell two runs of the same picker apart and paste the block into a router configuration.
type RunRouter struct {
	// Picker is the core's picker; a run's name may differ (kv_tuned runs the kv picker).
	Picker string
	// KVScored says whether the picker scores prefix overlap: only then do the overlap and
	// prefill-scale knobs matter.
	KVScored     bool
	MaxStaleness time.Duration // 0 = the load store's default
	KV           KVBlock
	// Replicas router replicas shared the traffic (1: one router); with ReplicaSync they shared
	// their active-sequence changes, each batch SyncDelay late and lost with probability SyncLoss.
	Replicas    int
	ReplicaSync bool
	SyncDelay   time.Duration
	SyncLoss    float64
}

// KVBlock is a dynamo.kv block's selection settings, named as the router's configuration names
// them.
type KVBlock struct {
	OverlapScoreCredit, PrefillLoadScale, RouterTemperature  float64
	DecodeActiveRequestWeight, OverlapScoreCreditDecay       float64
	TrackActiveBlocks, TrackPrefillTokens, TrackOutputBlocks bool
	ExpectedOutputTokens                                     int
	// UseKVEvents false predicts each rank's cache from the router's own picks, each block kept
	// PredictedBlockTTL.
	UseKVEvents               bool
	PredictedBlockTTL         time.Duration
	ConditionalDisaggregation bool
	DecodeBusyThreshold       *float64 // nil = no busy check
}

type runRouterJSON struct {
	Picker         string      `json:"picker"`
	KVScored       bool        `json:"kv_scored"`
	MaxStalenessMs float64     `json:"max_staleness_ms"`
	KV             kvBlockJSON `json:"kv"`
	Replicas       int         `json:"replicas"`
	ReplicaSync    bool        `json:"replica_sync"`
	SyncDelayMs    float64     `json:"sync_delay_ms"`
	SyncLoss       float64     `json:"sync_loss"`
}

type kvBlockJSON struct {
	OverlapScoreCredit        float64  `json:"overlap_score_credit"`
	PrefillLoadScale          float64  `json:"prefill_load_scale"`
	RouterTemperature         float64  `json:"router_temperature"`
	DecodeActiveRequestWeight float64  `json:"decode_active_request_weight"`
	OverlapScoreCreditDecay   float64  `json:"overlap_score_credit_decay"`
	TrackActiveBlocks         bool     `json:"track_active_blocks"`
	TrackPrefillTokens        bool     `json:"track_prefill_tokens"`
	TrackOutputBlocks         bool     `json:"track_output_blocks"`
	ExpectedOutputTokens      int      `json:"expected_output_tokens"`
	UseKVEvents               bool     `json:"use_kv_events"`
	PredictedBlockTTLMs       float64  `json:"predicted_block_ttl_ms"` // 0 when use_kv_events is true
	ConditionalDisaggregation condJSON `json:"conditional_disaggregation"`
}

type condJSON struct {
	Enabled bool `json:"enabled"`
	// DecodeBusyThreshold is null when there is no busy check.
	DecodeBusyThreshold *float64 `json:"decode_busy_threshold"`
}

// routersOf is summary.json's "router": every run's settings by name; a run without them is
// left out.
func routersOf(runs []Run) map[string]runRouterJSON {
	out := make(map[string]runRouterJSON, len(runs))
	for _, r := range runs {
		if r.Router == nil {
			continue
		}
		k := r.Router.KV
		j := runRouterJSON{Picker: r.Router.Picker, KVScored: r.Router.KVScored, MaxStalenessMs: msOf(r.Router.MaxStaleness),
			KV: kvBlockJSON{OverlapScoreCredit: round6(k.OverlapScoreCredit), PrefillLoadScale: round6(k.PrefillLoadScale),
				RouterTemperature: round6(k.RouterTemperature), DecodeActiveRequestWeight: round6(k.DecodeActiveRequestWeight),
				OverlapScoreCreditDecay: round6(k.OverlapScoreCreditDecay), TrackActiveBlocks: k.TrackActiveBlocks,
				TrackPrefillTokens: k.TrackPrefillTokens, TrackOutputBlocks: k.TrackOutputBlocks,
				ExpectedOutputTokens: k.ExpectedOutputTokens, UseKVEvents: k.UseKVEvents,
				ConditionalDisaggregation: condJSON{Enabled: k.ConditionalDisaggregation}},
			Replicas: max(r.Router.Replicas, 1), ReplicaSync: r.Router.ReplicaSync, SyncDelayMs: msOf(r.Router.SyncDelay),
			SyncLoss: round6(r.Router.SyncLoss)}
		if !k.UseKVEvents {
			j.KV.PredictedBlockTTLMs = msOf(k.PredictedBlockTTL)
		}
		if k.DecodeBusyThreshold != nil {
			v := round6(*k.DecodeBusyThreshold)
			j.KV.ConditionalDisaggregation.DecodeBusyThreshold = &v
		}
		out[r.Name] = j
	}
	return out
}
