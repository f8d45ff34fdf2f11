package wire

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// decodePayload unwraps the four frames back to the RouterEvent as a
// generic map, the way a schema-agnostic consumer would see it.
func decodePayload(t *testing.T, frames [][]byte) map[string]any {
	t.Helper()
	if string(frames[0]) != "kv-events" {
		t.Fatalf("topic %q", frames[0])
	}
	var env map[string]any
	if err := msgpack.Unmarshal(frames[3][5:], &env); err != nil {
		t.Fatal(err)
	}
	var ev map[string]any
	if err := msgpack.Unmarshal(env["payload"].([]byte), &ev); err != nil {
		t.Fatal(err)
	}
	return ev
}

func TestKVEventsShapes(t *testing.T) {
	parent := uint64(5)
	at := time.UnixMilli(1_700_000_000_000)
	cases := []struct {
		name string
		data KvEventData
		want any
	}{
		{"stored", KvEventData{Stored: &KvStoreData{ParentHash: &parent, Blocks: []StoredBlock{{BlockHash: 1 << 63, TokensHash: 9}}}},
			map[string]any{"stored": map[string]any{"parent_hash": uint64(5), "start_position": nil,
				"blocks": []any{map[string]any{"block_hash": uint64(1 << 63), "tokens_hash": int8(9), "mm_extra_info": nil}}}}},
		{"root", KvEventData{Stored: &KvStoreData{Blocks: []StoredBlock{}}},
			map[string]any{"stored": map[string]any{"parent_hash": nil, "start_position": nil, "blocks": []any{}}}},
		{"removed", KvEventData{Removed: &KvRemoveData{BlockHashes: []uint64{3}}},
			map[string]any{"removed": map[string]any{"block_hashes": []any{int8(3)}}}},
		{"cleared", KvEventData{}, "cleared"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ev := RouterEvent{WorkerID: 42, StorageTier: "device", Event: KvCacheEvent{EventID: 7, Data: c.data, DPRank: 1}}
			got := decodePayload(t, KVEventsMessage(1, 2, ev, at))
			want := map[string]any{"worker_id": int8(42), "storage_tier": "device",
				"event": map[string]any{"event_id": int8(7), "data": c.want, "dp_rank": int8(1)}}
			if !reflect.DeepEqual(normalize(got), normalize(want)) {
				t.Fatalf("got  %#v\nwant %#v", got, want)
			}
		})
	}
}

// normalize folds msgpack's compact integer widths into uint64, since the
// decoder's Go type depends on the width the encoder chose.
func normalize(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := map[string]any{}
		for k, e := range x {
			m[k] = normalize(e)
		}
		return m
	case []any:
		s := make([]any, len(x))
		for i, e := range x {
			s[i] = normalize(e)
		}
		return s
	case int8:
		return uint64(x)
	case int16:
		return uint64(x)
	case int32:
		return uint64(x)
	case int64:
		return uint64(x)
	case uint8:
		return uint64(x)
	case uint16:
		return uint64(x)
	case uint32:
		return uint64(x)
	}
	return v
}

// Field order matters to positional decoders: check the raw key sequence.
func TestRouterEventKeyOrder(t *testing.T) {
	b := Marshal(&RouterEvent{WorkerID: 1, StorageTier: "device"}, false)
	dec := msgpack.NewDecoder(bytes.NewReader(b))
	n, err := dec.DecodeMapLen()
	if err != nil || n != 3 {
		t.Fatalf("map len %d %v", n, err)
	}
	var keys []string
	for i := 0; i < n; i++ {
		k, _ := dec.DecodeString()
		keys = append(keys, k)
		if err := dec.Skip(); err != nil {
			t.Fatal(err)
		}
	}
	if !reflect.DeepEqual(keys, []string{"worker_id", "storage_tier", "event"}) {
		t.Fatalf("keys %v", keys)
	}
}
