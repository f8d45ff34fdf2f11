package picker

import (
	"testing"

	"switchyard/router/kv"
	"switchyard/router/load"
)

// SetKVOptions reaches the KV-aware picker; the load-based picker has none.
func TestKVOptionsOfPicker(t *testing.T) {
	busy := 0.7
	want := KVOptions{OverlapScoreCredit: 0.25, PrefillLoadScale: 2, Temperature: 0.5, ConditionalDisagg: true, DecodeBusyThreshold: &busy}
	p := NewKVAware(load.NewStore(nil), kv.NewTracker(nil), DefaultKVOptions(), 1, nil, nil)
	p.SetKVOptions(want)
	if got, ok := p.KVOptions(); !ok || got != want {
		t.Fatalf("after SetKVOptions: %+v %v", got, ok)
	}
	if _, ok := NewLoad(load.NewStore(nil), nil).KVOptions(); ok {
		t.Fatal("the load-based picker has no KV options")
	}
}
