package kvsource

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"switchyard/router/kv"
)

func u64(v uint64) *uint64 { return &v }

// Each event written as frames decodes, with the router's own kv-events
// decoder, to the kv.Event it came from.
func TestFramesDecodeToTheSameEvent(t *testing.T) {
	at := time.UnixMilli(1_700_000_000_000)
	for _, src := range []kv.Event{
		{WorkerID: 1 << 60, DPRank: 3, EventID: 1 << 40, Kind: kv.Stored, HasParent: true, ParentHash: 1<<64 - 1,
			Blocks: []kv.StoredBlock{{BlockHash: 1, TokensHash: 2}, {BlockHash: 300, TokensHash: 1 << 33}}},
		{WorkerID: 7, EventID: 2, Kind: kv.Stored, Blocks: make([]kv.StoredBlock, 40)},
		{WorkerID: 7, EventID: 3, Kind: kv.Removed, Removed: []uint64{5, 1 << 50}},
		{WorkerID: 7, EventID: 4, Kind: kv.Cleared, Tier: kv.TierHostPinned},
	} {
		e := FromKV(&src)
		b, err := json.Marshal(&e)
		if err != nil {
			t.Fatal(err)
		}
		e2, err := ParseEvent(b)
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		var got kv.Event
		pub, seq, res := kv.NewKVEventsDecoder().Decode(Frames(&e2, 99, at), &got)
		if res != kv.DecodeOK || pub != src.WorkerID || seq != 99 {
			t.Fatalf("%s: decode %v pub %d seq %d", b, res, pub, seq)
		}
		if g, w := FromKV(&got), FromKV(&src); !eventsEqual(g, w) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", g, w)
		}
	}
}

func eventsEqual(a, b Event) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

func TestParseEventRefusals(t *testing.T) {
	for name, in := range map[string]string{
		"not json":          `{`,
		"two values":        `{"kind":"cleared"} {}`,
		"unknown kind":      `{"kind":"moved"}`,
		"unknown tier":      `{"kind":"cleared","tier":"tape"}`,
		"empty store":       `{"kind":"stored"}`,
		"store with hashes": `{"kind":"stored","blocks":[{"block_hash":1,"tokens_hash":1}],"block_hashes":[1]}`,
		"empty removal":     `{"kind":"removed"}`,
		"clear with blocks": `{"kind":"cleared","block_hashes":[1]}`,
		"negative id":       `{"kind":"cleared","event_id":-1}`,
		"too many blocks":   `{"kind":"removed","block_hashes":[` + strings.Repeat("1,", kv.MaxBlocksPerEvent) + `1]}`,
	} {
		if _, err := ParseEvent([]byte(in)); !errors.Is(err, ErrBadEvent) {
			t.Errorf("%s: got %v, want ErrBadEvent", name, err)
		}
	}
	if _, err := ParseEvent(make([]byte, MaxEventBytes+1)); !errors.Is(err, ErrEventTooLarge) {
		t.Errorf("oversized: %v", err)
	}
}

// FuzzEvent: whatever ParseEvent accepts encodes to frames the router's
// decoder accepts, for the same worker.
func FuzzEvent(f *testing.F) {
	f.Add([]byte(`{"worker_id":1,"dp_rank":0,"event_id":5,"kind":"stored","parent_hash":3,"blocks":[{"block_hash":1,"tokens_hash":2}]}`))
	f.Add([]byte(`{"worker_id":1,"event_id":6,"kind":"removed","block_hashes":[1]}`))
	f.Add([]byte(`{"worker_id":1,"event_id":7,"kind":"cleared","tier":"disk"}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		e, err := ParseEvent(in)
		if err != nil {
			return
		}
		var got kv.Event
		pub, _, res := kv.NewKVEventsDecoder().Decode(Frames(&e, 1, time.Unix(0, 0)), &got)
		if res != kv.DecodeOK || pub != e.WorkerID || got.WorkerID != e.WorkerID || got.EventID != e.EventID {
			t.Fatalf("accepted %s but frames decode to %v (pub %d, %+v)", in, res, pub, got)
		}
	})
}
