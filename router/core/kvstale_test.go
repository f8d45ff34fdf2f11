package core

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"switchyard/fakefleet/wire"
	"switchyard/router/discovery"
	"switchyard/router/events"
	"switchyard/router/kv"
	"switchyard/router/picker"
)

// outputs is a port that keeps every output.
type outputs struct{ got []Output }

func (o *outputs) Record(out Output) { o.got = append(o.got, out) }

// lost lists the publishers the port saw cleared.
func (o *outputs) lost() []uint64 {
	var ids []uint64
	for _, out := range o.got {
		if a, ok := out.(KVApplied); ok && a.Result == kv.PublisherLostResult {
			ids = append(ids, a.PublisherID)
		}
	}
	return ids
}

func (o *outputs) ticks() int {
	n := 0
	for _, out := range o.got {
		if _, ok := out.(events.Tick); ok {
			n++
		}
	}
	return n
}

// storeBlock is a kv-events message storing one root block on a rank.
func storeBlock(at time.Time, pub, seq, worker uint64, rank uint32, eventID, hash uint64) *events.KVMessage {
	ev := wire.RouterEvent{WorkerID: worker, StorageTier: "device", Event: wire.KvCacheEvent{EventID: eventID, DPRank: rank,
		Data: wire.KvEventData{Stored: &wire.KvStoreData{Blocks: []wire.StoredBlock{{BlockHash: hash, TokensHash: hash}}}}}}
	return &events.KVMessage{At: at, Namespace: "dynamo", PublisherID: pub, Frames: wire.KVEventsMessage(pub, seq, ev, at)}
}

func blocksOf(tr *kv.Tracker, worker uint64) int {
	n := 0
	for _, r := range tr.Stats().Ranks {
		if r.Rank.WorkerID == worker {
			n += r.Blocks
		}
	}
	return n
}

// The 60 s rule: a subscription without a session for KVStaleAfter loses
// its publisher's ranks at the next tick, once per episode, not a moment
// before; a session ends the episode, and losing the next one starts the
// count again; an unsubscribed publisher loses its ranks at once. Other
// publishers keep theirs, and only ticks that acted are recorded.
func TestKVStaleRule(t *testing.T) {
	const (
		workerA, workerB uint64 = 0xa, 0xb
		pubA, pubB, pubC uint64 = 101, 102, 103
	)
	port := &outputs{}
	c, err := New(Options{Picker: picker.NameKV, Port: port})
	require.NoError(t, err)
	c.kv.SetLive(&discovery.Snapshot{View: discovery.View{Workers: []*discovery.Worker{
		{Namespace: "dynamo", InstanceID: workerA, Runtime: discovery.RuntimeConfig{DPSize: 2}},
		{Namespace: "dynamo", InstanceID: workerB},
	}}})
	t0 := time.Unix(1_700_000_000, 0).UTC()
	for _, pub := range []uint64{pubA, pubB, pubC} {
		c.KVSubscribed(events.KVSubscribed{At: t0, Namespace: "dynamo", PublisherID: pub})
	}
	c.KVConnected(events.KVConnected{At: t0, Namespace: "dynamo", PublisherID: pubA})
	c.KVConnected(events.KVConnected{At: t0, Namespace: "dynamo", PublisherID: pubB})
	for _, m := range []*events.KVMessage{
		storeBlock(t0, pubA, 1, workerA, 0, 1, 11), storeBlock(t0, pubA, 2, workerA, 1, 2, 12), storeBlock(t0, pubB, 1, workerB, 0, 1, 21),
	} {
		require.Equal(t, "applied", c.KVMessage(m))
	}
	c.KVDisconnected(events.KVDisconnected{At: t0, Namespace: "dynamo", PublisherID: pubA})
	tick := func(at time.Time) int { return c.Tick(events.Tick{At: at}) }

	require.Zero(t, tick(t0.Add(KVStaleAfter-time.Millisecond)), "not before 60 s")
	require.Equal(t, 2, blocksOf(c.kv, workerA))
	require.Zero(t, port.ticks(), "a tick that did nothing is not recorded")

	require.Equal(t, 2, tick(t0.Add(KVStaleAfter)), "A and C (never connected)")
	require.Equal(t, []uint64{pubA}, port.lost(), "only a clearing that removed ranks is recorded")
	require.Equal(t, 1, port.ticks())
	require.Zero(t, blocksOf(c.kv, workerA), "both of the publisher's ranks are cleared")
	require.Equal(t, 1, blocksOf(c.kv, workerB), "a connected publisher keeps its blocks")

	require.Zero(t, tick(t0.Add(10*time.Minute)), "once per episode")

	// A reconnects and reports again: a new episode when it loses its
	// session, counted from the session's end.
	t1 := t0.Add(time.Hour)
	c.KVConnected(events.KVConnected{At: t1, Namespace: "dynamo", PublisherID: pubA})
	require.Equal(t, "applied", c.KVMessage(storeBlock(t1, pubA, 3, workerA, 0, 3, 13)))
	require.Zero(t, tick(t1.Add(time.Hour)), "no clearing while connected")
	t2 := t1.Add(2 * time.Hour)
	c.KVDisconnected(events.KVDisconnected{At: t2, Namespace: "dynamo", PublisherID: pubA})
	c.KVDisconnected(events.KVDisconnected{At: t2.Add(time.Second), Namespace: "dynamo", PublisherID: pubA})
	require.Zero(t, tick(t2.Add(KVStaleAfter/2)))
	require.Equal(t, 1, blocksOf(c.kv, workerA))
	require.Equal(t, 1, tick(t2.Add(KVStaleAfter)), "counted from the first disconnect of the episode")
	require.Zero(t, blocksOf(c.kv, workerA))

	// B's publisher left discovery: its ranks go at once.
	require.Equal(t, 1, c.KVUnsubscribed(events.KVUnsubscribed{At: t2, Namespace: "dynamo", PublisherID: pubB}))
	require.Zero(t, blocksOf(c.kv, workerB))
	require.Equal(t, []uint64{pubA, pubA, pubB}, port.lost())
	require.Zero(t, c.KVUnsubscribed(events.KVUnsubscribed{At: t2, Namespace: "dynamo", PublisherID: pubB}), "lost once")
	require.Zero(t, tick(t2.Add(time.Hour)))
}

// A recording of the rule replays exactly: a fresh core fed the recorded
// inputs (the recorded ticks included, nothing else) clears the same
// publishers at the same points.
func TestKVStaleRuleReplays(t *testing.T) {
	port := &outputs{}
	c, err := New(Options{Picker: picker.NameKV, Port: port})
	require.NoError(t, err)
	live := &discovery.Snapshot{View: discovery.View{Workers: []*discovery.Worker{{Namespace: "dynamo", InstanceID: 1}}}}
	c.kv.SetLive(live)
	t0 := time.Unix(1_700_000_000, 0).UTC()
	c.KVSubscribed(events.KVSubscribed{At: t0, Namespace: "dynamo", PublisherID: 7})
	c.KVConnected(events.KVConnected{At: t0, Namespace: "dynamo", PublisherID: 7})
	c.KVMessage(storeBlock(t0, 7, 1, 1, 0, 1, 11))
	c.KVDisconnected(events.KVDisconnected{At: t0.Add(time.Second), Namespace: "dynamo", PublisherID: 7})
	for s := 2; s < 90; s++ {
		c.Tick(events.Tick{At: t0.Add(time.Duration(s) * time.Second)})
	}
	require.Equal(t, []uint64{7}, port.lost())

	again := &outputs{}
	r, err := New(Options{Picker: picker.NameKV, Port: again})
	require.NoError(t, err)
	r.kv.SetLive(live)
	for _, out := range port.got {
		switch v := out.(type) {
		case events.KVSubscribed:
			r.KVSubscribed(v)
		case events.KVConnected:
			r.KVConnected(v)
		case events.KVDisconnected:
			r.KVDisconnected(v)
		case events.Tick:
			r.Tick(v)
		case KVApplied:
			if v.Frames != nil {
				r.KVMessage(&events.KVMessage{At: v.At, Namespace: v.Namespace, PublisherID: v.PublisherID, Frames: v.Frames})
			}
		}
	}
	require.Equal(t, port.got, again.got)
}
