package recorder

import (
	"database/sql"
	"fmt"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"switchyard/fakefleet/wire"
	"switchyard/router/active"
	"switchyard/router/core"
	"switchyard/router/discovery"
	"switchyard/router/envelope"
	"switchyard/router/events"
	"switchyard/router/picker"
	"switchyard/router/replica"
)

var base = time.Date(2025, 3, 4, 5, 6, 7, 8, time.UTC)

func at(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }

func tempPath(t testing.TB) string { return filepath.Join(t.TempDir(), "rec.db") }

func simRun(start time.Time) Run {
	return Run{Kind: "sim", Config: "dynamo:\n  namespaces: [dynamo]\n", Scenario: "fleet: {}\n", Seed: 1<<63 + 11,
		Version: "v0.0.0-test", Picker: "load", Start: start}
}

func mustCreate(t testing.TB, path string, run Run, opts Options) *Writer {
	t.Helper()
	w, err := Create(path, run, opts)
	require.NoError(t, err)
	return w
}

func resultNamed(name string) envelope.Result {
	for _, r := range envelope.Results() {
		if r.String() == name {
			return r
		}
	}
	panic("no result " + name)
}

// feed hands v to the Writer method that records its kind.
func feed(w *Writer, v any) {
	switch v := v.(type) {
	case events.DiscoveryPut, events.DiscoveryDelete, events.DiscoveryResync, events.DiscoveryPrune, events.DiscoveryReset:
		w.Discovery(v.(events.Event))
	case Published:
		w.Published(v)
	case events.LoadConnected:
		w.LoadConnected(v)
	case LoadMessage:
		w.LoadMessage(&v.LoadMessage, resultNamed(v.Result))
	case events.KVConnected:
		w.KVConnected(v.Namespace, v.PublisherID, v.At)
	case KVMessage:
		if v.Replayed {
			w.Record(core.KVApplied{At: v.At, Namespace: v.Namespace, PublisherID: v.PublisherID, Frames: v.Frames, Result: v.Result, Replayed: true})
			break
		}
		w.KVMessage(v.Namespace, v.PublisherID, v.Frames, v.At, v.Result)
	case events.KVSubscribed, events.KVDisconnected, events.KVUnsubscribed, events.Tick, ConfigChanged:
		w.Record(v.(events.Event))
	case Request:
		w.Request(v)
	case Selection:
		w.Selection(v)
	case Ended:
		w.Ended(v)
	case Outcome:
		w.Outcome(v)
	case FirstToken, Progress, PeerBatch, KVReplayWanted, KVReplayFinished:
		w.Record(v.(events.Event))
	default:
		panic(fmt.Sprintf("feed: %T", v))
	}
}

// sample is one record of every kind and the edge cases of each: ids of
// 2^63 and above, nil apart from empty, a large resync, a zero time.
func sample() []any {
	const bigPID = 1<<64 - 3
	resync := make([]events.DiscoveryRecord, 300)
	for i := range resync {
		resync[i] = events.DiscoveryRecord{Keyspace: events.Keyspace(i%3 + 1), Key: fmt.Sprintf("v1/instances/dynamo/backend/generate/%x", i),
			Value: []byte(fmt.Sprintf(`{"instance_id":%d}`, i))}
	}
	resync[7].Value = nil
	resync[8].Value = []byte{}
	load := wire.LoadMessage(bigPID, 41, wire.ActiveLoad{WorkerID: 1<<63 + 5, DPRank: 2,
		ActiveDecodeBlocks: wire.U64(17), KVUsedBlocks: wire.U64(120)}, at(30))
	kv := wire.KVEventsMessage(9, 3, wire.RouterEvent{WorkerID: 9, StorageTier: "device",
		Event: wire.KvCacheEvent{EventID: 3, Data: wire.KvEventData{Removed: &wire.KvRemoveData{BlockHashes: []uint64{1, 2}}}}}, at(40))
	cands := make([]picker.Candidate, 16)
	for i := range cands {
		cands[i] = picker.Candidate{Phase: "decode", WorkerID: 1<<63 + uint64(i), DPRank: uint32(i % 4), Cost: float64(i) / 3, Defined: i%5 != 0}
	}
	cands[0].Phase, cands[1].Phase = "prefill", "prefill"
	cands[2].Cost = math.Inf(1)
	cands[3].Cost = math.Inf(-1)
	cands[4].Cost = 1e300
	busy := 0.75
	return []any{
		events.DiscoveryReset{At: at(0)},
		events.DiscoveryResync{At: at(1), Namespace: "dynamo", Records: resync, Revision: 88},
		events.DiscoveryResync{At: at(2), Namespace: "other", Records: []events.DiscoveryRecord{}, Revision: 89},
		events.DiscoveryResync{At: at(2), Namespace: "third", Revision: 90},
		events.DiscoveryPut{At: at(3), Namespace: "dynamo", DiscoveryRecord: events.DiscoveryRecord{Keyspace: events.Models, Key: "v1/mdc/dynamo/m/1", Value: []byte(`{"display_name":"m"}`)}, Revision: 91},
		events.DiscoveryPut{At: at(3), Namespace: "dynamo", DiscoveryRecord: events.DiscoveryRecord{Keyspace: events.EventChannels, Key: "k/nil"}, Revision: 92},
		events.DiscoveryPut{At: at(3), Namespace: "dynamo", DiscoveryRecord: events.DiscoveryRecord{Keyspace: events.Instances, Key: "k/empty", Value: []byte{}}, Revision: 93},
		events.DiscoveryDelete{At: at(4), Namespace: "dynamo", Keyspace: events.Instances, Key: "v1/instances/x", Revision: 94},
		events.DiscoveryPrune{At: at(5), Keep: []string{"dynamo", "b\"q<>&"}},
		events.DiscoveryPrune{At: at(5), Keep: []string{}},
		events.DiscoveryPrune{At: at(5)},
		Published{At: at(6), Generation: 1<<63 + 1, Workers: 4},
		events.LoadConnected{At: at(7), Namespace: "dynamo", PublisherID: bigPID},
		LoadMessage{LoadMessage: events.LoadMessage{At: at(8), Namespace: "dynamo", PublisherID: bigPID, Frames: load}, Result: "applied"},
		LoadMessage{LoadMessage: events.LoadMessage{At: at(9), Namespace: "dynamo", PublisherID: 5, Frames: [][]byte{{1, 2}, {}, []byte("x")}}, Result: "malformed"},
		LoadMessage{LoadMessage: events.LoadMessage{At: at(9), Namespace: "dynamo", PublisherID: 5, Frames: [][]byte{}}, Result: "malformed"},
		LoadMessage{LoadMessage: events.LoadMessage{At: at(9), Namespace: "dynamo", PublisherID: 5}, Result: "malformed"},
		events.KVConnected{At: at(10), Namespace: "dynamo", PublisherID: bigPID - 1},
		KVMessage{KVMessage: events.KVMessage{At: at(11), Namespace: "dynamo", PublisherID: 9, Frames: kv}, Result: "applied"},
		events.KVSubscribed{At: at(10), Namespace: "dynamo", PublisherID: bigPID},
		events.KVDisconnected{At: at(11), Namespace: "dynamo", PublisherID: bigPID - 1},
		events.Tick{At: at(11)},
		KVMessage{KVMessage: events.KVMessage{At: at(11), Namespace: "dynamo", PublisherID: bigPID - 1}, Result: "publisher_lost"},
		events.KVUnsubscribed{At: at(11), Namespace: "dynamo", PublisherID: bigPID},
		ConfigChanged{At: at(11), Settings: core.Settings{Picker: "kv", MaxStaleness: 5 * time.Second, KVStaleAfter: time.Minute,
			KV: picker.KVOptions{OverlapScoreCredit: 0.5, PrefillLoadScale: 8, Temperature: 0.25, ConditionalDisagg: true, DecodeBusyThreshold: &busy,
				DecodeActiveRequestWeight: 2, Track: picker.Tracking{PrefillTokens: true, OutputBlocks: true, ExpectedOutputTokens: 64}}}},
		ConfigChanged{At: at(11), Settings: core.Settings{Picker: "load", PeerSilentAfter: 3 * time.Second, PeerRequestTTL: time.Hour}},
		Request{At: at(12), RequestID: 1<<63 + 100, Model: "m", Namespaces: []string{"dynamo", "other"}, PromptTokens: 4000,
			MaxTokens: 256, Generation: 1<<63 + 1, Tokens: []uint32{0, 1, 1<<32 - 1, 42}, Session: 1<<64 - 1, Route: "sim"},
		Request{At: at(13), RequestID: 2, Model: "m", Namespaces: []string{}, Tokens: []uint32{}, Route: "/v1/chat/completions"},
		Request{At: at(14), RequestID: 3, Model: "m", Route: "/v1/completions"},
		Selection{At: at(15), RequestID: 1<<63 + 100, OK: true, Sel: picker.Selection{Namespace: "dynamo",
			Decode:  picker.Pin{WorkerID: 1<<63 + 5, DPRank: 2, DPDeclared: true, Role: discovery.RoleDecode},
			Prefill: picker.Pin{WorkerID: 1<<64 - 1, DPRank: 0, Role: discovery.RolePrefill}, HasPrefill: true,
			DecodeReason: picker.ReasonLoad, PrefillReason: picker.ReasonRoundRobinStale}, Candidates: cands},
		Selection{At: at(16), RequestID: 2, OK: true, Sel: picker.Selection{Namespace: "dynamo",
			Decode: picker.Pin{WorkerID: 7, Role: discovery.RoleAggregated}, DecodeReason: picker.ReasonRoundRobin}, Candidates: []picker.Candidate{}},
		Selection{At: at(17), RequestID: 3},
		FirstToken{At: at(17), RequestID: 1<<63 + 100},
		Progress{At: at(17), RequestID: 1<<63 + 100, OutputTokens: 1<<63 + 16},
		Progress{At: time.Time{}, RequestID: 2},
		PeerBatch{At: at(17), Batch: replica.Batch{Replica: 1<<64 - 1, Seq: 1<<63 + 9, Events: []replica.Event{
			{Kind: replica.Added, RequestID: 1<<62 + 1, Holds: []active.Hold{
				{Rank: active.Rank{Namespace: "dynamo", WorkerID: 1<<63 + 5, DPRank: 2}, PrefillTokens: 4000, Blocks: 250, OutputTokens: 256, BlockSize: 16},
				{Rank: active.Rank{Namespace: "dynamo", WorkerID: 1<<64 - 1}, PrefillTokens: 4000, Blocks: 250, UntilFirstToken: true}}},
			{Kind: replica.FirstToken, RequestID: 1<<62 + 1},
			{Kind: replica.Progress, RequestID: 1<<62 + 1, OutputTokens: 32},
			{Kind: replica.Ended, RequestID: 1<<62 + 1}}}},
		PeerBatch{At: at(17), Batch: replica.Batch{Replica: 2, Seq: 1}}, // a heartbeat
		events.KVSubscribed{At: at(17), Namespace: "dynamo", PublisherID: 9, Replay: true},
		KVReplayWanted{At: at(17), Namespace: "dynamo", PublisherID: 9, From: 1, To: 1<<64 - 2},
		KVMessage{KVMessage: events.KVMessage{At: at(17), Namespace: "dynamo", PublisherID: 9, Frames: kv}, Result: "gap", Replayed: true},
		KVReplayFinished{At: at(17), Namespace: "dynamo", PublisherID: 9, From: 1, To: 1<<64 - 2, Reason: "failed", Err: "refused",
			Recovered: 1, Lost: 1<<64 - 3, Duplicates: 2, Held: 4096},
		KVReplayFinished{At: at(17), Namespace: "dynamo", PublisherID: 9, From: 3, To: 3, Reason: "end"},
		Ended{At: at(18), RequestID: 2, Reason: "refused"},
		Outcome{At: at(19), RequestID: 1<<63 + 100, Status: StatusOK, PromptTokens: 4000, CachedTokens: 512, OutputTokens: 256,
			TTFT: 120 * time.Millisecond, E2E: 3 * time.Second, ITL: 11 * time.Millisecond},
		Outcome{At: at(20), RequestID: 2, Status: StatusRefused, Error: "worker 7 refused: 503"},
		Outcome{RequestID: 3, Status: StatusCancelled, Error: "client went away"},
	}
}

func entryAt(v any) time.Time {
	switch v := v.(type) {
	case events.Event:
		return v.Time()
	case Published:
		return v.At
	case events.KVConnected:
		return v.At
	case KVMessage:
		return v.At
	case Request:
		return v.At
	case Selection:
		return v.At
	case Ended:
		return v.At
	case Outcome:
		return v.At
	}
	panic(fmt.Sprintf("entryAt: %T", v))
}

func readEntries(t testing.TB, path string, run int64) []Entry {
	t.Helper()
	r, err := Open(path)
	require.NoError(t, err)
	defer r.Close()
	var out []Entry
	require.NoError(t, r.Entries(run, func(e Entry) error {
		out = append(out, e)
		return nil
	}))
	return out
}

// rawDB opens a recording read-write outside the package API, to inspect
// or damage it.
func rawDB(t testing.TB, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", dsn(path, "_pragma=busy_timeout(10000)"))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}
