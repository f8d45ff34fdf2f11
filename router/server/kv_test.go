package server

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"switchyard/fakefleet/wire"
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
