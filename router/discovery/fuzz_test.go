package discovery

import (
	"testing"

	"switchyard/router/events"
)

// FuzzReducer feeds arbitrary values under every keyspace: the reducer must
// never panic, and the fleet it publishes can never exceed what it holds.
func FuzzReducer(f *testing.F) {
	for _, name := range []string{"disagg_scoped", "legacy_layout"} {
		for _, kv := range loadFixture(f, name) {
			f.Add(uint8(kv.Keyspace), kv.Value, []byte(`{}`))
		}
	}
	f.Add(uint8(1), []byte(`{"type":"Endpoint","endpoint":"generate","instance_id":"ffffffffffffffff"}`), []byte(`{"type":"Model","instance_id":18446744073709551615,"card_json":{"runtime_config":{"data_parallel_size":0}}}`))
	f.Add(uint8(3), []byte(`{"type":"EventChannel","topic":"kv_metrics","instance_id":1,"scope":{"kind":"endpoint","endpoint":null}}`), []byte(`null`))
	f.Add(uint8(3), []byte(`{"type":"EventChannel","topic":"kv-events","instance_id":2,"transport":{"kind":"Zmq","config":{"endpoint":"tcp://10.0.0.1:5557"}},"replay":{"kind":"Zmq","config":{"endpoint":"tcp://10.0.0.1:5558"}}}`), []byte(`{"type":"EventChannel","topic":"kv-events","instance_id":2,"replay":[1,2]}`))
	f.Fuzz(func(t *testing.T, ks uint8, a, b []byte) {
		r := NewReducer(nil, nil)
		space := events.Keyspace(ks%3 + 1)
		for i, v := range [][]byte{a, b, a} {
			r.Apply(events.DiscoveryPut{At: t0, Namespace: "ns", DiscoveryRecord: events.DiscoveryRecord{Keyspace: space, Key: string(rune('a' + i%2)), Value: v}})
			r.Apply(events.DiscoveryPut{At: t0, Namespace: "ns", DiscoveryRecord: events.DiscoveryRecord{Keyspace: events.Keyspace(i%3 + 1), Key: "k", Value: v}})
		}
		v := r.View()
		held := r.Len(events.Instances)
		if len(v.Workers) > held {
			t.Fatalf("%d workers from %d instance records", len(v.Workers), held)
		}
		if len(v.Publishers) > r.Len(events.EventChannels) {
			t.Fatal("more publishers than channel records")
		}
		for _, w := range v.Workers {
			if len(w.Card) > MaxRetainedCardBytes {
				t.Fatal("retained card over the ceiling")
			}
			if w.Runtime.DPSize == 0 {
				t.Fatal("dp_size 0 would give a worker no rank")
			}
		}
	})
}
