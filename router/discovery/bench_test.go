package discovery

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"switchyard/router/events"
)

// fleetRecords builds n disaggregated workers (endpoint + card each).
func fleetRecords(n int) []events.DiscoveryRecord {
	out := make([]events.DiscoveryRecord, 0, 2*n)
	for i := 0; i < n; i++ {
		comp := "decode"
		if i%2 == 0 {
			comp = "prefill"
		}
		id := 0x100000 + i
		card := map[string]any{"display_name": "Qwen/Qwen3-32B", "worker_type": comp, "kv_cache_block_size": 64,
			"runtime_config": map[string]any{"total_kv_blocks": 12000, "max_num_batched_tokens": 8192,
				"max_num_seqs": 256, "context_length": 32768, "data_parallel_size": 1}}
		out = append(out,
			put("dynamo", fmt.Sprintf("v1/instances/dynamo/%s/generate/%x", comp, id), endpointJSON(comp, "generate", id), t0).DiscoveryRecord,
			put("dynamo", fmt.Sprintf("v1/mdc/dynamo/%s/generate/%x", comp, id), cardJSON(comp, "generate", id, card), t0).DiscoveryRecord)
	}
	return out
}

// BenchmarkReducerApply measures folding distinct records (parse + hold);
// records/s = 1e9 / ns/op.
func BenchmarkReducerApply(b *testing.B) {
	recs := fleetRecords(8192)
	b.ReportAllocs()
	r := NewReducer(nil, nil)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%len(recs) == 0 && i > 0 {
			b.StopTimer()
			r = NewReducer(nil, nil)
			b.StartTimer()
		}
		kv := recs[i%len(recs)]
		r.Apply(events.DiscoveryPut{At: t0, Namespace: "dynamo", DiscoveryRecord: kv})
	}
}

// BenchmarkPublish16k measures one change in a 16,384-worker fleet: the
// reducer re-materializes the view and the registry compares and swaps it.
func BenchmarkPublish16k(b *testing.B) {
	const n = 16384
	recs := fleetRecords(n)
	reg := NewRegistry()
	f := NewFollower(NewReducer(nil, nil), reg)
	f.Apply([]events.Event{events.DiscoveryResync{At: t0, Namespace: "dynamo", Records: recs}})
	if got := len(reg.Snapshot().Workers); got != n {
		b.Fatalf("%d workers", got)
	}
	card := func(i int) events.DiscoveryPut {
		return put("dynamo", recs[1].Key, cardJSON("prefill", "generate", 0x100000, map[string]any{
			"display_name": "Qwen/Qwen3-32B", "worker_type": "prefill", "runtime_config": map[string]any{"total_kv_blocks": i}}), t0.Add(time.Duration(i)))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		f.Apply([]events.Event{card(i)})
	}
	b.StopTimer()
	if reg.Generation() < uint64(b.N) {
		b.Fatalf("generation %d after %d changes", reg.Generation(), b.N)
	}
}

// BenchmarkResyncUnchanged16k measures a full resync that finds the same
// 16,384-worker fleet (the steady state after a watch reconnect).
func BenchmarkResyncUnchanged16k(b *testing.B) {
	recs := fleetRecords(16384)
	reg := NewRegistry()
	f := NewFollower(NewReducer(nil, nil), reg)
	f.Apply([]events.Event{events.DiscoveryResync{At: t0, Namespace: "dynamo", Records: recs}})
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		f.Apply([]events.Event{events.DiscoveryResync{At: t0, Namespace: "dynamo", Records: recs}})
	}
	if reg.Generation() != 1 {
		b.Fatal("an unchanged resync moved the generation")
	}
}

// BenchmarkBaselineJSONDecode is the floor for BenchmarkReducerApply: the
// same records decoded into a generic map by encoding/json, nothing else.
func BenchmarkBaselineJSONDecode(b *testing.B) {
	recs := fleetRecords(8192)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		var v map[string]any
		if err := json.Unmarshal(recs[i%len(recs)].Value, &v); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBaselineFullBuild16k is the baseline for BenchmarkPublish16k:
// building the 16,384-worker view from scratch, as a non-incremental
// reducer would on every change.
func BenchmarkBaselineFullBuild16k(b *testing.B) {
	recs := fleetRecords(16384)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		r := NewReducer(nil, nil)
		r.Apply(events.DiscoveryResync{At: t0, Namespace: "dynamo", Records: recs})
		if len(r.View().Workers) != 16384 {
			b.Fatal("short view")
		}
	}
}
