// Package coreconfig maps the router's configuration onto the routing
// core's settings. It sits apart from router/picker so the picker (and
// the core built on it) never links router/config, which imports net.
package coreconfig

import (
	"switchyard/router/config"
	"switchyard/router/picker"
)

// KVOptions reads the KV-aware picker's settings from dynamo.kv, as the
// live router applies them at start and on every reload (and replay reads
// them from a recorded configuration).
func KVOptions(k config.KV) picker.KVOptions {
	return picker.KVOptions{OverlapScoreCredit: k.OverlapScoreCredit, PrefillLoadScale: k.PrefillLoadScale,
		Temperature: k.RouterTemperature, ConditionalDisagg: k.ConditionalDisaggregation.Enabled,
		DecodeBusyThreshold: k.ConditionalDisaggregation.DecodeBusyThreshold, DecodeActiveRequestWeight: k.DecodeActiveRequestWeight,
		Track: picker.Tracking{ActiveBlocks: k.TrackActiveBlocks, PrefillTokens: k.TrackPrefillTokens,
			OutputBlocks: k.TrackOutputBlocks, ExpectedOutputTokens: k.ExpectedOutputTokens}}
}
