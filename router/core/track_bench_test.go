package core

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"switchyard/fakefleet/registrar"
	"switchyard/fakefleet/wire"
	"switchyard/router/events"
	"switchyard/router/picker"
)

// benchCore is a core with n aggregated workers, each with a fresh load
// sample (samples stay fresh for an hour), so every pick costs every rank
// with or without tracking.
func benchCore(b *testing.B, name string, kvo picker.KVOptions, n int) *Core {
	b.Helper()
	c, err := New(Options{Picker: name, KV: kvo, MaxStaleness: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	var batch []events.Event
	for i := range n {
		id := uint64(0x100 + i)
		w := registrar.Worker{Namespace: "ns", Component: "backend", WorkerType: "aggregated", Model: "m", BlockSize: 16,
			TotalKVBlocks: 4096, MaxNumBatchedTokens: 8192, MaxNumSeqs: 256, ContextLength: 32768, Transport: "127.0.0.1:9/x",
			Channels: []registrar.Channel{{Topic: "kv_metrics", PublisherID: id, Endpoint: "tcp://127.0.0.1:9"}}}
		recs := registrar.Records(w, id)
		for _, k := range slices.Sorted(maps.Keys(recs)) {
			ks := events.EventChannels
			switch {
			case strings.HasPrefix(k, "v1/instances/"):
				ks = events.Instances
			case strings.HasPrefix(k, "v1/mdc/"):
				ks = events.Models
			}
			batch = append(batch, events.DiscoveryPut{At: t0, Namespace: "ns", DiscoveryRecord: events.DiscoveryRecord{Keyspace: ks, Key: k, Value: recs[k]}})
		}
	}
	c.Discovery(batch)
	for i := range n {
		id := uint64(0x100 + i)
		c.LoadConnected(events.LoadConnected{At: t0, Namespace: "ns", PublisherID: id})
		frames := wire.LoadMessage(id, 1, wire.ActiveLoad{WorkerID: id, KVUsedBlocks: wire.U64(uint64(i)),
			ActiveDecodeBlocks: wire.U64(uint64(i)), ActivePrefillTokens: wire.U64(uint64(16 * i))}, t0)
		c.LoadMessage(&events.LoadMessage{At: t0, Namespace: "ns", PublisherID: id, Frames: frames})
	}
	if len(c.Snapshot().Workers) != n {
		b.Fatalf("%d workers discovered, want %d", len(c.Snapshot().Workers), n)
	}
	return c
}

// BenchmarkPickTracked is one request's life in the core (Pick, then
// FirstToken and Ended of the request 256 picks earlier, so 256 stay in
// flight) with the active-sequence account off and on, for the load and
// KV pickers over 64 workers: the ratio of the two is what tracking adds
// per pick.
func BenchmarkPickTracked(b *testing.B) {
	const inFlight = 256
	on := picker.Tracking{ActiveBlocks: true, PrefillTokens: true}
	for _, name := range []string{picker.NameLoad, picker.NameKV} {
		for _, track := range []picker.Tracking{{}, on} {
			b.Run(fmt.Sprintf("picker=%s/tracking=%v", name, track.Any()), func(b *testing.B) {
				kvo := picker.DefaultKVOptions()
				kvo.Track = track
				c := benchCore(b, name, kvo, 64)
				tokens := make([]uint32, 2048)
				for i := range tokens {
					tokens[i] = uint32(i)
				}
				var reqs [inFlight]picker.Request
				var sels [inFlight]picker.Selection
				now := t0
				b.ReportAllocs()
				b.ResetTimer()
				for i := range b.N {
					slot := i % inFlight
					if i >= inFlight {
						c.FirstToken(FirstToken{At: now, RequestID: reqs[slot].ID})
						c.Ended(reqs[slot], sels[slot], now, EndedServed)
					}
					now = now.Add(100 * time.Nanosecond)
					reqs[slot] = picker.Request{ID: uint64(i + 1), Model: "m", Namespaces: []string{"ns"}, PromptTokens: 2048,
						Tokens: tokens, Now: now}
					sel, ok := c.Pick(Arrival{Req: reqs[slot]})
					if !ok {
						b.Fatal("no pick")
					}
					sels[slot] = sel
				}
			})
		}
	}
}
