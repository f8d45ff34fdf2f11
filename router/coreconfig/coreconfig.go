// Package coreconfig maps the router's configuration onto the routing
// core's settings. It sits apart from router/picker so the picker (and
// the core built on it) never links router/config, which imports net.
package coreconfig

import (
	"time"

	"switchyard/router/config"
	"switchyard/router/core"
	"switchyard/router/picker"
)

// KVOptions reads the KV-aware picker's settings from dynamo.kv, as the
// live router applies them at start and on every reload (and replay reads
// them from a recorded configuration).
func KVOptions(k config.KV) picker.KVOptions {
	o := picker.KVOptions{OverlapScoreCredit: k.OverlapScoreCredit, PrefillLoadScale: k.PrefillLoadScale,
		Temperature: k.RouterTemperature, ConditionalDisagg: k.ConditionalDisaggregation.Enabled,
		DecodeBusyThreshold: k.ConditionalDisaggregation.DecodeBusyThreshold, DecodeActiveRequestWeight: k.DecodeActiveRequestWeight,
		OverlapScoreCreditDecay: k.OverlapScoreCreditDecay,
		Track: picker.Tracking{ActiveBlocks: k.TrackActiveBlocks, PrefillTokens: k.TrackPrefillTokens,
			OutputBlocks: k.TrackOutputBlocks, ExpectedOutputTokens: k.ExpectedOutputTokens}}
	// The TTL only matters when predicting; left out otherwise, so the
	// recorded settings of a run that follows kv-events do not change.
	if !k.UseKVEvents {
		o.PredictCache, o.PredictedTTL = true, time.Duration(k.PredictedBlockTTL)
	}
	return o
}

// KVReplay is the core's gap-recovery settings of dynamo.kv.replay.
func KVReplay(r config.KVReplay) core.KVReplaySettings {
	return core.KVReplaySettings{Enabled: r.Enabled, Timeout: r.Timeout.Std(), MaxHeldMessages: r.MaxHeldMessages}
}
