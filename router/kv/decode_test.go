package kv_test

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"switchyard/fakefleet/wire"
	"switchyard/router/kv"
)

// decNorm folds empty slices into nil, so that events decoded into a
// reused Event compare equal to literals.
func decNorm(e kv.Event) kv.Event {
	if len(e.Blocks) == 0 {
		e.Blocks = nil
	}
	if len(e.Removed) == 0 {
		e.Removed = nil
	}
	return e
}

func decStoredEvent() wire.RouterEvent {
	parent := uint64(77)
	return wire.RouterEvent{WorkerID: 42, StorageTier: "device", Event: wire.KvCacheEvent{EventID: 9, DPRank: 3,
		Data: wire.KvEventData{Stored: &wire.KvStoreData{ParentHash: &parent, Blocks: []wire.StoredBlock{
			{BlockHash: 1<<63 + 5, TokensHash: 11}, {BlockHash: 2, TokensHash: 1<<64 - 1}}}}}}
}

var decStoredWant = kv.Event{WorkerID: 42, DPRank: 3, EventID: 9, Kind: kv.Stored, ParentHash: 77, HasParent: true,
	Blocks: []kv.StoredBlock{{BlockHash: 1<<63 + 5, TokensHash: 11}, {BlockHash: 2, TokensHash: 1<<64 - 1}}}

// The fake fleet's encoder (rmp-serde's to_vec_named and to_vec shapes).
func TestDecodeRouterEventFromFakeFleet(t *testing.T) {
	root := decStoredEvent()
	root.Event.Data.Stored.ParentHash = nil
	rootWant := decStoredWant
	rootWant.HasParent, rootWant.ParentHash = false, 0
	cases := []struct {
		name string
		ev   wire.RouterEvent
		want kv.Event
	}{
		{"stored", decStoredEvent(), decStoredWant},
		{"stored from the root", root, rootWant},
		{"removed", wire.RouterEvent{WorkerID: 1, StorageTier: "device", Event: wire.KvCacheEvent{EventID: 10,
			Data: wire.KvEventData{Removed: &wire.KvRemoveData{BlockHashes: []uint64{2, 1<<63 + 5}}}}},
			kv.Event{WorkerID: 1, EventID: 10, Kind: kv.Removed, Removed: []uint64{2, 1<<63 + 5}}},
		{"cleared", wire.RouterEvent{WorkerID: 1, StorageTier: "device", Event: wire.KvCacheEvent{EventID: 11, DPRank: 1}},
			kv.Event{WorkerID: 1, DPRank: 1, EventID: 11, Kind: kv.Cleared}},
		{"host tier", wire.RouterEvent{WorkerID: 1, StorageTier: "host_pinned", Event: wire.KvCacheEvent{EventID: 12}},
			kv.Event{WorkerID: 1, EventID: 12, Tier: kv.TierHostPinned, Kind: kv.Cleared}},
	}
	var ev kv.Event // reused across cases, as a subscription does
	for _, c := range cases {
		for _, positional := range []bool{false, true} {
			name := c.name
			if positional {
				name += " positional"
			}
			t.Run(name, func(t *testing.T) {
				res := kv.DecodeRouterEvent(wire.Marshal(&c.ev, positional), &ev)
				require.Equal(t, kv.DecodeOK, res)
				require.Equal(t, decNorm(c.want), decNorm(ev))
			})
		}
	}
}

// Whole messages: frames, envelope, RouterEvent.
func TestDecodeKVEventsMessages(t *testing.T) {
	d := kv.NewKVEventsDecoder()
	var ev kv.Event
	at := time.UnixMilli(1_700_000_000_000)

	pid, seq, res := d.Decode(wire.KVEventsMessage(5, 6, decStoredEvent(), at), &ev)
	require.Equal(t, kv.DecodeOK, res)
	require.Equal(t, uint64(5), pid)
	require.Equal(t, uint64(6), seq)
	require.Equal(t, decStoredWant, decNorm(ev))

	// The envelope decodes but the RouterEvent is refused: ids still come back.
	bad := wire.Message(kv.KVEventsTopic, 5, 7, []byte{0x81, 0xa1, 'x'}, at)
	pid, seq, res = d.Decode(bad, &ev)
	require.Equal(t, kv.DecodeMalformed, res)
	require.Equal(t, [2]uint64{5, 7}, [2]uint64{pid, seq})

	other := wire.Message("kv_metrics", 5, 8, decPack(decMap{}), at)
	_, _, res = d.Decode(other, &ev)
	require.Equal(t, kv.DecodeTopicMismatch, res)

	msg := wire.KVEventsMessage(5, 9, decStoredEvent(), at)
	msg[3][0] = 2
	_, _, res = d.Decode(msg, &ev)
	require.Equal(t, kv.DecodeUnknownVersion, res)

	msg = wire.KVEventsMessage(5, 9, decStoredEvent(), at)
	msg[1][7] = 6 // frame publisher id no longer matches the envelope's
	_, _, res = d.Decode(msg, &ev)
	require.Equal(t, kv.DecodeIdentityMismatch, res)

	huge := wire.Frame(nil)
	huge[1], huge[2] = 0x00, 0x20 // declares 2 MiB
	_, _, res = d.Decode([][]byte{[]byte(kv.KVEventsTopic), make([]byte, 8), make([]byte, 8), huge}, &ev)
	require.Equal(t, kv.DecodeTooLarge, res)

	_, _, res = d.Decode(msg[:3], &ev)
	require.Equal(t, kv.DecodeMalformed, res)
}

// decStored builds {"stored": {...}}.
func decStored(parent any, blocks ...any) decMap {
	return decMap{{"stored", decMap{{"parent_hash", parent}, {"start_position", nil}, {"blocks", append([]any{}, blocks...)}}}}
}

func decBlock(bh, th any) decMap {
	return decMap{{"block_hash", bh}, {"tokens_hash", th}, {"mm_extra_info", nil}}
}

func decRouterEvent(extra ...decField) decMap {
	m := decMap{{"worker_id", 7}, {"storage_tier", "device"}}
	m = append(m, extra...)
	return m
}

func decKVEvent(id uint64, data any) decMap {
	return decMap{{"event_id", id}, {"data", data}, {"dp_rank", 0}}
}

// decUnknownKeys is a stored event with keys no version writes, an
// mm_extra_info, and the newest state_source.
func decUnknownKeys() decMap {
	mm := decMap{{"mm_objects", []any{decMap{{"mm_hash", 5}, {"offsets", []any{[]any{0, 4}}}}}}}
	block := decMap{{"block_hash", 1}, {"mm_extra_info", mm}, {"tokens_hash", 2}, {"z", "?"}}
	store := decMap{{"blocks", []any{block}}, {"parent_hash", nil}, {"w", 1.5}}
	event := decMap{{"x", decMap{{"y", nil}}}, {"event_id", 3}, {"data", decMap{{"stored", store}}}}
	return decMap{{"future", []any{1, 2}}, {"worker_id", 7}, {"event", event}, {"state_source", decMap{{"owner", 3}}}}
}

// Hand-built payloads: what rmp-serde writes, and what other versions and
// encoders may.
func TestDecodeRouterEventForms(t *testing.T) {
	neg := func(v int64) uint64 { return uint64(v) }
	one := func(bh, th uint64) []kv.StoredBlock { return []kv.StoredBlock{{BlockHash: bh, TokensHash: th}} }
	cases := []struct {
		name    string
		payload any
		want    kv.Event
	}{
		{"negative fixint hashes",
			decRouterEvent(decField{"event", decKVEvent(1, decStored(int64(-1), decBlock(int64(-2), int64(-3))))}),
			kv.Event{WorkerID: 7, EventID: 1, Kind: kv.Stored, ParentHash: neg(-1), HasParent: true, Blocks: one(neg(-2), neg(-3))}},
		{"int8 int16 int32 int64 hashes",
			decRouterEvent(decField{"event", decKVEvent(1, decStored(decInt(0xd0, -100),
				decBlock(decInt(0xd1, -30000), decInt(0xd2, -2_000_000_000)), decBlock(decInt(0xd3, -1<<62), decInt(0xd3, 5))))}),
			kv.Event{WorkerID: 7, EventID: 1, Kind: kv.Stored, ParentHash: neg(-100), HasParent: true,
				Blocks: []kv.StoredBlock{{BlockHash: neg(-30000), TokensHash: neg(-2_000_000_000)}, {BlockHash: neg(-1 << 62), TokensHash: 5}}}},
		{"negative removed hashes",
			decRouterEvent(decField{"event", decKVEvent(2, decMap{{"removed", decMap{{"block_hashes", []any{int64(-9), decUint(1 << 63)}}}}})}),
			kv.Event{WorkerID: 7, EventID: 2, Kind: kv.Removed, Removed: []uint64{neg(-9), 1 << 63}}},
		{"unknown keys everywhere, mm_extra_info of any shape, state_source", decUnknownKeys(),
			kv.Event{WorkerID: 7, EventID: 3, Kind: kv.Stored, Blocks: one(1, 2)}},
		{"storage_tier absent means device; dp_rank absent means 0; nil dp_rank",
			decMap{{"worker_id", 7}, {"event", decMap{{"event_id", 4}, {"data", "cleared"}, {"dp_rank", nil}}}},
			kv.Event{WorkerID: 7, EventID: 4, Kind: kv.Cleared}},
		{"cleared as a one-entry map",
			decRouterEvent(decField{"event", decKVEvent(5, decMap{{"cleared", nil}})}),
			kv.Event{WorkerID: 7, EventID: 5, Kind: kv.Cleared}},
		{"a numeric string is not a variant index",
			decRouterEvent(decField{"event", decKVEvent(6, decMap{{"0", nil}})}),
			kv.Event{}}, // zero want: refused as malformed
		{"positional, legacy: [worker_id, storage_tier, [event_id, data, dp_rank]]",
			[]any{7, "disk", []any{8, decMap{{"removed", []any{[]any{3}}}}, 2}},
			kv.Event{WorkerID: 7, DPRank: 2, EventID: 8, Tier: kv.TierDisk, Kind: kv.Removed, Removed: []uint64{3}}},
		{"positional with residency_domain and state_source",
			[]any{7, "device", "worker", []any{9, "cleared", 1}, 12345},
			kv.Event{WorkerID: 7, DPRank: 1, EventID: 9, Kind: kv.Cleared}},
		{"positional without storage_tier",
			[]any{7, []any{10, "cleared"}},
			kv.Event{WorkerID: 7, EventID: 10, Kind: kv.Cleared}},
		{"positional store without start_position, blocks as arrays",
			[]any{7, "device", []any{11, decMap{{"stored", []any{int64(-5), []any{[]any{1, 2, nil}, []any{3, 4}}}}}}},
			kv.Event{WorkerID: 7, EventID: 11, Kind: kv.Stored, ParentHash: neg(-5), HasParent: true,
				Blocks: []kv.StoredBlock{{BlockHash: 1, TokensHash: 2}, {BlockHash: 3, TokensHash: 4}}}},
		{"positional store with start_position",
			[]any{7, "device", []any{12, decMap{{"stored", []any{nil, 16, []any{[]any{1, 2}}}}}}},
			kv.Event{WorkerID: 7, EventID: 12, Kind: kv.Stored, Blocks: one(1, 2)}},
		{"data as [tag, value] with an index tag",
			[]any{7, "device", []any{13, []any{1, []any{[]any{6}}}}},
			kv.Event{WorkerID: 7, EventID: 13, Kind: kv.Removed, Removed: []uint64{6}}},
		{"cleared by index",
			[]any{7, "device", []any{14, 2}},
			kv.Event{WorkerID: 7, EventID: 14, Kind: kv.Cleared}},
		{"a stored event with no blocks",
			decRouterEvent(decField{"event", decKVEvent(15, decStored(nil))}),
			kv.Event{WorkerID: 7, EventID: 15, Kind: kv.Stored}},
	}
	var ev kv.Event
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := kv.DecodeRouterEvent(decPack(c.payload), &ev)
			if c.want.WorkerID == 0 {
				require.Equal(t, kv.DecodeMalformed, res)
				return
			}
			require.Equal(t, kv.DecodeOK, res)
			require.Equal(t, decNorm(c.want), decNorm(ev))
		})
	}
}

func TestDecodeRouterEventRefusals(t *testing.T) {
	block := decBlock(1, 2)
	cases := []struct {
		name    string
		payload any
		want    kv.DecodeResult
	}{
		{"not a map or array", "cleared", kv.DecodeMalformed},
		{"no worker_id", decMap{{"event", decKVEvent(1, "cleared")}}, kv.DecodeMalformed},
		{"no event", decMap{{"worker_id", 1}}, kv.DecodeMalformed},
		{"negative worker_id", decMap{{"worker_id", -1}, {"event", decKVEvent(1, "cleared")}}, kv.DecodeMalformed},
		{"no event_id", decRouterEvent(decField{"event", decMap{{"data", "cleared"}}}), kv.DecodeMalformed},
		{"no data", decRouterEvent(decField{"event", decMap{{"event_id", 1}}}), kv.DecodeMalformed},
		{"dp_rank over u32", decRouterEvent(decField{"event", decMap{{"event_id", 1}, {"data", "cleared"}, {"dp_rank", uint64(1 << 32)}}}), kv.DecodeMalformed},
		{"unknown tier", decMap{{"worker_id", 1}, {"storage_tier", "gpu"}, {"event", decKVEvent(1, "cleared")}}, kv.DecodeMalformed},
		{"nil tier", decMap{{"worker_id", 1}, {"storage_tier", nil}, {"event", decKVEvent(1, "cleared")}}, kv.DecodeMalformed},
		{"unknown variant", decRouterEvent(decField{"event", decKVEvent(1, "reset")}), kv.DecodeMalformed},
		{"bare stored", decRouterEvent(decField{"event", decKVEvent(1, "stored")}), kv.DecodeMalformed},
		{"two-entry data", decRouterEvent(decField{"event", decKVEvent(1, decMap{{"stored", nil}, {"removed", nil}})}), kv.DecodeMalformed},
		{"variant index 3", decRouterEvent(decField{"event", decKVEvent(1, 3)}), kv.DecodeMalformed},
		{"cleared with a payload", decRouterEvent(decField{"event", decKVEvent(1, decMap{{"cleared", 5}})}), kv.DecodeMalformed},
		{"store without blocks", decRouterEvent(decField{"event", decKVEvent(1, decMap{{"stored", decMap{{"parent_hash", nil}}}})}), kv.DecodeMalformed},
		{"block without tokens_hash", decRouterEvent(decField{"event", decKVEvent(1, decStored(nil, decMap{{"block_hash", 1}}))}), kv.DecodeMalformed},
		{"string hash", decRouterEvent(decField{"event", decKVEvent(1, decStored(nil, decBlock("1", 2)))}), kv.DecodeMalformed},
		{"start_position over u32", decRouterEvent(decField{"event", decKVEvent(1, decMap{{"stored", decMap{{"start_position", uint64(1 << 33)}, {"blocks", []any{}}}}})}), kv.DecodeMalformed},
		{"nil blocks", decRouterEvent(decField{"event", decKVEvent(1, decMap{{"stored", decMap{{"blocks", nil}}}})}), kv.DecodeMalformed},
		{"removed without hashes", decRouterEvent(decField{"event", decKVEvent(1, decMap{{"removed", decMap{}}})}), kv.DecodeMalformed},
		{"positional nil tier", []any{1, nil, []any{1, "cleared"}}, kv.DecodeMalformed},
		{"positional junk before the event", []any{1, "device", "worker", 5, []any{1, "cleared"}}, kv.DecodeMalformed},
		{"too many blocks", decRouterEvent(decField{"event", decKVEvent(1, decStored(nil, slices.Repeat([]any{block}, kv.MaxBlocksPerEvent+1)...))}), kv.DecodeTooLarge},
		{"too many removed", decRouterEvent(decField{"event", decKVEvent(1, decMap{{"removed", decMap{{"block_hashes", make([]uint64, kv.MaxBlocksPerEvent+1)}}}})}), kv.DecodeTooLarge},
		{"residency cache_owner", decRouterEvent(decField{"residency_domain", "cache_owner"}, decField{"event", decKVEvent(1, "cleared")}), kv.DecodeResidencyRefused},
		{"residency as a map", decRouterEvent(decField{"residency_domain", decMap{{"worker", 1}}}, decField{"event", decKVEvent(1, "cleared")}), kv.DecodeResidencyRefused},
		{"residency worker then another", decRouterEvent(decField{"residency_domain", "worker"}, decField{"residency_domain", "x"}, decField{"event", decKVEvent(1, "cleared")}), kv.DecodeResidencyRefused},
		{"positional nil residency", []any{1, "device", nil, []any{1, "cleared"}}, kv.DecodeResidencyRefused},
		{"malformed wins over residency", decRouterEvent(decField{"residency_domain", nil}, decField{"event", decMap{{"event_id", 1}}}), kv.DecodeMalformed},
	}
	ev := kv.Event{Blocks: make([]kv.StoredBlock, 0, 4)}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := kv.DecodeRouterEvent(decPack(c.payload), &ev)
			require.Equal(t, c.want, res)
			require.Empty(t, ev.Blocks, "a refused event carries nothing")
			require.Empty(t, ev.Removed)
			require.Zero(t, ev.Kind)
		})
	}
	// Exactly at the bound is fine.
	full := decRouterEvent(decField{"event", decKVEvent(1, decStored(nil, slices.Repeat([]any{block}, kv.MaxBlocksPerEvent)...))})
	require.Equal(t, kv.DecodeOK, kv.DecodeRouterEvent(decPack(full), &ev))
	require.Len(t, ev.Blocks, kv.MaxBlocksPerEvent)
}

// dynamo-wire.md §4.1: of events with residency_domain "worker",
// "future_owner", null, "worker", only the two "worker" ones apply; legacy
// events (no residency_domain) apply too.
func TestDecodeRouterEventMixedResidency(t *testing.T) {
	domains := []any{"worker", "future_owner", nil, "worker", msgpack.RawMessage(nil)}
	var applied []uint64
	var ev kv.Event
	for i, dom := range domains {
		id := uint64(4 + i)
		m := decMap{{"worker_id", 7}, {"storage_tier", "device"}}
		if raw, ok := dom.(msgpack.RawMessage); !ok || raw != nil {
			m = append(m, decField{"residency_domain", dom})
		}
		m = append(m, decField{"event", decKVEvent(id, decStored(nil, decBlock(id, id)))})
		switch res := kv.DecodeRouterEvent(decPack(m), &ev); res {
		case kv.DecodeOK:
			require.Equal(t, id, ev.EventID)
			applied = append(applied, id)
		case kv.DecodeResidencyRefused:
		default:
			t.Fatalf("event %d: %v", id, res)
		}
	}
	require.Equal(t, []uint64{4, 7, 8}, applied)
}

func TestDecodeRouterEventTiers(t *testing.T) {
	tiers := map[string]kv.Tier{
		"device": kv.TierDevice, "GPU": kv.TierDevice, "DEVICE": kv.TierDevice,
		"host_pinned": kv.TierHostPinned, "CPU": kv.TierHostPinned, "CPU_PINNED": kv.TierHostPinned, "CPU_TIER1": kv.TierHostPinned,
		"disk": kv.TierDisk, "CPU_TIER2": kv.TierDisk, "DISK": kv.TierDisk, "NVME": kv.TierDisk, "STORAGE": kv.TierDisk,
		"external": kv.TierExternal, "EXTERNAL": kv.TierExternal, "NETWORK": kv.TierExternal, "REMOTE": kv.TierExternal, "SHARED": kv.TierExternal,
	}
	var ev kv.Event
	for name, want := range tiers {
		m := decMap{{"worker_id", 1}, {"storage_tier", name}, {"event", decKVEvent(1, "cleared")}}
		require.Equal(t, kv.DecodeOK, kv.DecodeRouterEvent(decPack(m), &ev), name)
		require.Equal(t, want, ev.Tier, name)
	}
	for _, name := range []string{"Device", "gpu", "Disk", "host-pinned", ""} {
		m := decMap{{"worker_id", 1}, {"storage_tier", name}, {"event", decKVEvent(1, "cleared")}}
		require.Equal(t, kv.DecodeMalformed, kv.DecodeRouterEvent(decPack(m), &ev), "names match exactly: %q", name)
	}
}

// Every proper prefix of a valid payload is malformed, and nothing panics.
func TestDecodeRouterEventTruncated(t *testing.T) {
	payloads := [][]byte{
		wire.Marshal(decPtr(decStoredEvent()), false),
		wire.Marshal(decPtr(decStoredEvent()), true),
		decPack([]any{7, "device", "worker", []any{9, decMap{{"removed", []any{[]any{int64(-3), 4}}}}, 1}, 5}),
		decPack(decRouterEvent(decField{"residency_domain", "worker"}, decField{"event", decKVEvent(1, decStored(decInt(0xd3, -7), decBlock(decInt(0xd2, -1), 2)))})),
	}
	var ev kv.Event
	for _, p := range payloads {
		require.Equal(t, kv.DecodeOK, kv.DecodeRouterEvent(p, &ev))
		for i := range len(p) {
			require.Equal(t, kv.DecodeMalformed, kv.DecodeRouterEvent(p[:i:i], &ev), "prefix of %d bytes", i)
		}
	}
}

func decPtr[T any](v T) *T { return &v }

func TestDecodeRouterEventAllocations(t *testing.T) {
	payload := wire.Marshal(decPtr(decStoredEvent()), false)
	var ev kv.Event
	require.Equal(t, kv.DecodeOK, kv.DecodeRouterEvent(payload, &ev))
	allocs := testing.AllocsPerRun(100, func() {
		if kv.DecodeRouterEvent(payload, &ev) != kv.DecodeOK {
			t.Fatal("decode failed")
		}
	})
	require.Zero(t, allocs, "a reused Event decodes without allocating")

	d := kv.NewKVEventsDecoder()
	msg := wire.KVEventsMessage(1, 2, decStoredEvent(), time.UnixMilli(0))
	allocs = testing.AllocsPerRun(100, func() {
		if _, _, res := d.Decode(msg, &ev); res != kv.DecodeOK {
			t.Fatal(res)
		}
	})
	require.Zero(t, allocs)
}

func TestDecodeResultNames(t *testing.T) {
	var names []string
	for _, r := range kv.DecodeResults() {
		names = append(names, r.String())
	}
	require.Equal(t, []string{"ok", "malformed", "unknown_version", "topic_mismatch", "identity_mismatch",
		"too_large", "residency_refused", "unsupported"}, names)
	require.Equal(t, "malformed", kv.DecodeResult(200).String())
}
