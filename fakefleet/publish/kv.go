package publish

import (
	"errors"
	"slices"
	"time"

	"github.com/go-zeromq/zmq4"

	"switchyard/fakefleet/engine"
	"switchyard/fakefleet/wire"
)

// KVEventsTopic is the event-plane topic Dynamo workers publish KV cache
// events on.
const KVEventsTopic = "kv-events"

// ErrNotKVEvents is returned by NewKVReporter for a publisher bound to
// another topic: wire.KVEventsMessage always names kv-events, so such a
// publisher would send frames its subscribers never asked for.
var ErrNotKVEvents = errors.New("publish: KV reporter needs a kv-events publisher")

// KVReporter publishes an engine's KV cache events, one RouterEvent per
// kv-events message, as Dynamo's vLLM publisher does. Event ids are the
// engine's own (monotonic per rank), so a subscriber can see a rank's
// history is complete independently of the transport sequence.
type KVReporter struct {
	pub      *Publisher
	workerID uint64
}

// NewKVReporter publishes events of workerID on pub, which must have been
// made with New(KVEventsTopic).
func NewKVReporter(pub *Publisher, workerID uint64) (*KVReporter, error) {
	if pub.Topic != KVEventsTopic {
		return nil, ErrNotKVEvents
	}
	return &KVReporter{pub: pub, workerID: workerID}, nil
}

// Report publishes evs, drained from rank's engine after one step, in
// order. The host must call it from one goroutine per rank (the rank's
// driver does) so a rank's events keep their order on the wire. It stops
// at the first send error.
func (r *KVReporter) Report(rank uint32, evs []engine.KVEvent) error {
	for _, ev := range evs {
		if err := r.pub.sendKVEvent(RouterEvent(r.workerID, rank, ev)); err != nil {
			return err
		}
	}
	return nil
}

// RouterEvent converts one engine event to Dynamo's wire form. Blocks
// live on the GPU, so the storage tier is always "device".
func RouterEvent(workerID uint64, rank uint32, ev engine.KVEvent) wire.RouterEvent {
	var data wire.KvEventData
	switch ev.Kind {
	case engine.Stored:
		blocks := make([]wire.StoredBlock, len(ev.Blocks))
		for i, b := range ev.Blocks {
			blocks[i] = wire.StoredBlock{BlockHash: b.BlockHash, TokensHash: b.TokensHash}
		}
		data.Stored = &wire.KvStoreData{ParentHash: ev.ParentHash, Blocks: blocks}
	case engine.Removed:
		data.Removed = &wire.KvRemoveData{BlockHashes: ev.Removed}
	}
	// engine.Cleared (and anything unknown) leaves both unset: the unit
	// variant "cleared", the safe answer since it makes the router forget.
	return wire.RouterEvent{WorkerID: workerID, StorageTier: "device",
		Event: wire.KvCacheEvent{EventID: ev.EventID, Data: data, DPRank: rank}}
}

// sendKVEvent publishes ev as the next sequence. It shares Send's lock and
// counter so load-style and KV sends on one socket could never reorder.
func (p *Publisher) sendKVEvent(ev wire.RouterEvent) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.seq++
	return p.sendLocked(wire.KVEventsMessage(p.id, p.seq, ev, time.Now()))
}

// HasSubscriber reports whether a subscription to p's topic has reached
// the socket. ZMQ PUB drops messages nobody subscribed to yet, so tests
// wait for it before publishing what they mean to read.
func (p *Publisher) HasSubscriber() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.sock.(zmq4.Topics)
	return ok && slices.Contains(t.Topics(), p.Topic)
}
