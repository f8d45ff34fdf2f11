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

// channelRecords are worker i's two event channels (kv_metrics and
// kv-events), each with its own publisher id, as a dynamo.vllm worker
// registers them.
func channelRecords(i int) []events.DiscoveryRecord {
	id := 0x100000 + i
	out := make([]events.DiscoveryRecord, 0, 2)
	for j, topic := range []string{"kv_metrics", "kv-events"} {
		pub := 0x800000 + 2*i + j
		key := fmt.Sprintf("v1/event_channels/namespace/dynamo/component/decode/endpoint/generate/topic/%s/%x", topic, pub)
		out = append(out, put("dynamo", key, channelJSON(topic, pub, fmt.Sprintf("tcp://10.0.%d.%d:41000", id>>8&0xff, id&0xff)), t0).DiscoveryRecord)
	}
	return out
}

// channelWorkers is how many workers' channels fit the event-channel
// keyspace's ceiling (MaxRecordsPerKeyspace) at two channels each.
const channelWorkers = MaxRecordsPerKeyspace / 2

// channelFleet is fleetRecords(n) with the two event channels of its first
// channelWorkers workers: a full event-channel keyspace.
func channelFleet(n int) []events.DiscoveryRecord {
	out := fleetRecords(n)
	for i := 0; i < channelWorkers; i++ {
		out = append(out, channelRecords(i)...)
	}
	return out
}

// BenchmarkChannelChange16k measures one worker's event channels leaving
// or coming back, as a readiness flip reported by the Kubernetes metadata
// source does, at 16,384 workers: two of the 16,384 publishers the
// event-channel keyspace holds at its ceiling change, the reducer updates
// its view and the registry compares and swaps it.
func BenchmarkChannelChange16k(b *testing.B) {
	const n = 16384
	reg := NewRegistry()
	f := NewFollower(NewReducer(nil, nil), reg)
	f.Apply([]events.Event{events.DiscoveryResync{At: t0, Namespace: "dynamo", Records: channelFleet(n)}})
	if got := len(reg.Snapshot().Publishers); got != 2*channelWorkers {
		b.Fatalf("%d publishers", got)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		at := t0.Add(time.Duration(i))
		chans := channelRecords((i / 2 * 7919) % channelWorkers) // a spread of workers, each out and back
		batch := make([]events.Event, 0, len(chans))
		for _, c := range chans {
			if i%2 == 0 {
				batch = append(batch, events.DiscoveryDelete{At: at, Namespace: "dynamo", Keyspace: c.Keyspace, Key: c.Key})
			} else {
				batch = append(batch, events.DiscoveryPut{At: at, Namespace: "dynamo", DiscoveryRecord: c})
			}
		}
		f.Apply(batch)
	}
	b.StopTimer()
	if want := 2*channelWorkers - 2*(b.N%2); len(reg.Snapshot().Publishers) != want {
		b.Fatalf("%d publishers, want %d", len(reg.Snapshot().Publishers), want)
	}
	if reg.Generation() < uint64(b.N) {
		b.Fatalf("generation %d after %d changes", reg.Generation(), b.N)
	}
}
