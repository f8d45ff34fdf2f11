package coreconfig

import (
	"testing"
	"time"

	"switchyard/router/config"
	"switchyard/router/picker"
)

// Every dynamo.kv selection field reaches the picker's options, from the
// configuration's defaults and from a reload.
func TestKVOptionsFromConfig(t *testing.T) {
	def := config.Default().Dynamo.KV
	// Dynamo's defaults, with its router-side tracking of active blocks
	// and prefill tokens on (the picker's own defaults leave them to the
	// host).
	want := picker.DefaultKVOptions()
	want.Track.ActiveBlocks, want.Track.PrefillTokens = true, true
	if got := KVOptions(def); got != want {
		t.Fatalf("defaults: %+v, want Dynamo's %+v", got, want)
	}
	busy := 0.7
	c := config.KV{OverlapScoreCredit: 0.25, PrefillLoadScale: 2, RouterTemperature: 0.5, UseKVEvents: true,
		ConditionalDisaggregation: config.ConditionalDisaggregation{Enabled: true, DecodeBusyThreshold: &busy}}
	want = picker.KVOptions{OverlapScoreCredit: 0.25, PrefillLoadScale: 2, Temperature: 0.5, ConditionalDisagg: true, DecodeBusyThreshold: &busy}
	if got := KVOptions(c); got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	c.UseKVEvents, c.PredictedBlockTTL = false, config.Duration(30*time.Second)
	want.PredictCache, want.PredictedTTL = true, 30*time.Second
	if got := KVOptions(c); got != want {
		t.Fatalf("without kv-events: got %+v, want %+v", got, want)
	}
}
