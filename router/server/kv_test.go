package server

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"switchyard/fakefleet/wire"
	"switchyard/router/clock"
	"switchyard/router/discovery"
	"switchyard/router/eventplane"
	"switchyard/router/events"
	"switchyard/router/kv"
)

// logCapture keeps every log record, for tests that count warnings.
type logCapture struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (c *logCapture) Enabled(context.Context, slog.Level) bool { return true }
func (c *logCapture) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.recs = append(c.recs, r.Clone())
	return nil
}
func (c *logCapture) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *logCapture) WithGroup(string) slog.Handler      { return c }

// count reports the records at level whose message contains msg.
func (c *logCapture) count(level slog.Level, msg string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, r := range c.recs {
		if r.Level == level && strings.Contains(r.Message, msg) {
			n++
		}
	}
	return n
}

// storeBlock is a kv-events message storing one root block on a rank.
func storeBlock(pub, seq, worker uint64, rank uint32, eventID, hash uint64) *events.KVMessage {
	ev := wire.RouterEvent{WorkerID: worker, StorageTier: "device", Event: wire.KvCacheEvent{EventID: eventID, DPRank: rank,
		Data: wire.KvEventData{Stored: &wire.KvStoreData{Blocks: []wire.StoredBlock{{BlockHash: hash, TokensHash: hash}}}}}}
	return &events.KVMessage{Namespace: "dynamo", PublisherID: pub, Frames: wire.KVEventsMessage(pub, seq, ev, time.Unix(0, 0))}
}

// blocksOf is how many blocks the index holds for the worker, all ranks.
func blocksOf(tr *kv.Tracker, worker uint64) int {
	n := 0
	for _, r := range tr.Stats().Ranks {
		if r.Rank.WorkerID == worker {
			n += r.Blocks
		}
	}
	return n
}

// The 60 s rule on a manual clock: a subscription without a session for
// KVStaleAfter loses its publisher's ranks, once per episode and with one
// warning, not a moment before; a session ends the episode, and losing
// the next one starts the count again; a subscription that is gone loses
// its publisher's ranks at the next check. Other publishers keep theirs.
func TestKVStaleRule(t *testing.T) {
	const (
		workerA, workerB uint64 = 0xa, 0xb
		pubA, pubB, pubC uint64 = 101, 102, 103
	)
	tr := kv.NewTracker(nil)
	tr.SetLive(&discovery.Snapshot{View: discovery.View{Workers: []*discovery.Worker{
		{Namespace: "dynamo", InstanceID: workerA, Runtime: discovery.RuntimeConfig{DPSize: 2}},
		{Namespace: "dynamo", InstanceID: workerB},
	}}})
	for _, m := range []*events.KVMessage{
		storeBlock(pubA, 1, workerA, 0, 1, 11), storeBlock(pubA, 2, workerA, 1, 2, 12), storeBlock(pubB, 1, workerB, 0, 1, 21),
	} {
		require.Equal(t, "applied", tr.Apply(m))
	}
	require.Equal(t, 2, blocksOf(tr, workerA))

	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	t0 := clk.Now()
	subs := []eventplane.SubscriptionInfo{
		{Namespace: "dynamo", PublisherID: pubA, State: eventplane.Backoff, Down: t0},
		{Namespace: "dynamo", PublisherID: pubB, State: eventplane.Connected},
		{Namespace: "dynamo", PublisherID: pubC, State: eventplane.Pending, Down: t0}, // never delivered
	}
	var mu sync.Mutex
	var lost []events.KVPublisherLost
	logs := &logCapture{}
	w := newKVStaleWatch(KVStaleAfter, func() []eventplane.SubscriptionInfo {
		mu.Lock()
		defer mu.Unlock()
		return append([]eventplane.SubscriptionInfo(nil), subs...)
	}, func(ev events.KVPublisherLost) int {
		lost = append(lost, ev)
		return tr.PublisherLost(ev)
	}, slog.New(logs))
	const warning = "without a session for too long"

	clk.Advance(KVStaleAfter - time.Millisecond)
	w.check(clk.Now())
	require.Empty(t, lost, "not before 60 s")
	require.Equal(t, 2, blocksOf(tr, workerA))

	clk.Advance(time.Millisecond)
	w.check(clk.Now())
	require.Equal(t, []events.KVPublisherLost{
		{At: clk.Now(), Namespace: "dynamo", PublisherID: pubA},
		{At: clk.Now(), Namespace: "dynamo", PublisherID: pubC},
	}, lost)
	require.Zero(t, blocksOf(tr, workerA), "both of the publisher's ranks are cleared")
	require.Equal(t, 1, blocksOf(tr, workerB), "a connected publisher keeps its blocks")
	require.Equal(t, 2, logs.count(slog.LevelWarn, warning), "one warning per stale subscription")

	clk.Advance(10 * time.Minute)
	w.check(clk.Now())
	require.Len(t, lost, 2, "once per episode")
	require.Equal(t, 2, logs.count(slog.LevelWarn, warning))

	// A reconnects and reports again: a new episode when it loses its
	// session, counted from the session's end.
	mu.Lock()
	subs[0].State, subs[0].Down = eventplane.Connected, time.Time{}
	mu.Unlock()
	w.check(clk.Now())
	require.Equal(t, "applied", tr.Apply(storeBlock(pubA, 3, workerA, 0, 3, 13)))
	clk.Advance(time.Hour)
	require.Len(t, lost, 2, "no clearing while connected")
	ended := clk.Now()
	mu.Lock()
	subs[0].State, subs[0].Down = eventplane.Backoff, ended
	mu.Unlock()
	clk.Advance(KVStaleAfter / 2)
	w.check(clk.Now())
	require.Len(t, lost, 2)
	require.Equal(t, 1, blocksOf(tr, workerA))
	clk.Advance(KVStaleAfter / 2)
	w.check(clk.Now())
	require.Len(t, lost, 3)
	require.Equal(t, pubA, lost[2].PublisherID)
	require.Zero(t, blocksOf(tr, workerA))
	require.Equal(t, 3, logs.count(slog.LevelWarn, warning))

	// B's subscription stops (its channel left discovery): its ranks go at
	// the next check, without waiting.
	mu.Lock()
	subs = subs[:1]
	mu.Unlock()
	w.check(clk.Now())
	require.Zero(t, blocksOf(tr, workerB))
	require.Equal(t, 1, logs.count(slog.LevelInfo, "subscription stopped"), "logged when it cleared something")
	require.Len(t, lost, 5, "B and C")
	w.check(clk.Now())
	require.Len(t, lost, 5, "a stopped subscription is lost once")
}
