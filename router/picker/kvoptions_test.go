package picker

import (
	"testing"

	"switchyard/router/config"
	"switchyard/router/kv"
	"switchyard/router/load"
)

// Every dynamo.kv selection field reaches the picker's options, from the
// configuration's defaults and from a reload.
func TestKVOptionsFromConfig(t *testing.T) {
	def := config.Default().Dynamo.KV
	if got := KVOptionsFrom(def); got != DefaultKVOptions() {
		t.Fatalf("defaults: %+v, want Dynamo's %+v", got, DefaultKVOptions())
	}
	busy := 0.7
	c := config.KV{OverlapScoreCredit: 0.25, PrefillLoadScale: 2, RouterTemperature: 0.5,
		ConditionalDisaggregation: config.ConditionalDisaggregation{Enabled: true, DecodeBusyThreshold: &busy}}
	want := KVOptions{OverlapScoreCredit: 0.25, PrefillLoadScale: 2, Temperature: 0.5, ConditionalDisagg: true, DecodeBusyThreshold: &busy}
	if got := KVOptionsFrom(c); got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}

	p := NewKVAware(load.NewStore(nil), kv.NewTracker(nil), DefaultKVOptions(), 1, nil, nil)
	p.SetKVOptions(want)
	if got, ok := p.KVOptions(); !ok || got != want {
		t.Fatalf("after SetKVOptions: %+v %v", got, ok)
	}
	if _, ok := NewLoad(load.NewStore(nil), nil).KVOptions(); ok {
		t.Fatal("the load-based picker has no KV options")
	}
}
