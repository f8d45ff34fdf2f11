package discovery

import (
	"testing"

	"switchyard/router/events"
)

func TestEncodeSegment(t *testing.T) {
	for in, want := range map[string]string{
		"dynamo":  "dynamo",
		"ns.one":  "ns%2Eone",
		"a-b_c9":  "a-b_c9",
		"a/b c":   "a%2Fb%20c",
		"é":       "%C3%A9",
		"":        "",
		"kv%":     "kv%25",
		"Dyn.A.B": "Dyn%2EA%2EB",
	} {
		if got := EncodeSegment(in); got != want {
			t.Errorf("EncodeSegment(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPrefixesAcceptBothChannelLayouts(t *testing.T) {
	ps := Prefixes("ns.one")
	want := []string{"v1/instances/ns.one/", "v1/mdc/ns.one/", "v1/event_channels/namespace/ns%2Eone/", "v1/event_channels/ns.one/"}
	for i, p := range ps {
		if p.Key != want[i] {
			t.Fatalf("prefix %d = %q, want %q", i, p.Key, want[i])
		}
	}
	if ps[2].Keyspace != events.EventChannels || ps[3].Keyspace != events.EventChannels {
		t.Fatal("channel prefixes must map to the EventChannels keyspace")
	}
	scoped, legacy := ps[2], ps[3]
	if !scoped.Accepts("v1/event_channels/namespace/ns%2Eone/component/decode/endpoint/generate/topic/kv_metrics/1f3a") {
		t.Error("scoped layout rejected")
	}
	if !legacy.Accepts("v1/event_channels/ns.one/backend/kv-events/2a") {
		t.Error("legacy layout rejected")
	}
	if legacy.Accepts("v1/event_channels/ns.one/backend/kv-events/2a/extra") {
		t.Error("legacy layout accepted four segments")
	}
	// A namespace literally named "namespace": the legacy prefix also sees
	// scoped keys of every namespace and must refuse them.
	odd := Prefixes("namespace")[3]
	if odd.Accepts("v1/event_channels/namespace/dynamo/topic/kv_metrics/2a") {
		t.Error("legacy prefix of namespace \"namespace\" accepted a scoped key")
	}
	if Prefixes("ns")[0].Accepts("v1/instances/ns2/decode/generate/1") {
		t.Error("prefix matched a sibling namespace")
	}
}
