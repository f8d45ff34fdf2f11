package kv

import (
	"sync"

	"switchyard/router/discovery"
	"switchyard/router/events"
)

// Tracker is the host-facing KV state of the core: the radix index behind
// one lock, fed raw kv-events messages, gated by the registry's live
// ranks, and asked for prefix matches by the picker. It is what the live
// subscriptions and the simulator both drive.
type Tracker struct {
	mu    sync.Mutex
	index *Index
	dec   *KVEventsDecoder
	ev    Event
	count func(result string)
	// live is the snapshot SetLive last installed.
	live *discovery.Snapshot
	// vllm is the scratch batch of ApplyVLLM; vllmSeq each rank's last
	// vLLM batch sequence.
	vllm    VLLMBatch
	vllmSeq map[Rank]uint64
	// seen remembers, per publisher, which ranks its events named, so a
	// lost subscription clears exactly those (bounded per publisher).
	seen map[publisherKey]map[Rank]struct{}
	// pred is set while cache state is predicted from picks (predict.go);
	// kv-events are then ignored.
	pred *predictor
}

type publisherKey struct {
	namespace string
	id        uint64
}

// Tracker results beyond the index's and the decoders': a publisher
// naming more ranks than one subscription may track.
const resultCursorsExceeded = "over_capacity"

// PublisherLostResult is the result a recording gives a KVPublisherLost
// input: a kv-events row with no frames (a received message always has
// some). It is not a message result and never a metric label.
const PublisherLostResult = "publisher_lost"

// EventResults lists every result label Apply reports, for pre-registered
// metric series: the decoders' refusals and the index's outcomes.
func EventResults() []string {
	out := []string{PredictingResult}
	for _, r := range Results() {
		out = append(out, r.String())
	}
	for _, r := range DecodeResults() {
		if r != DecodeOK {
			out = append(out, r.String())
		}
	}
	return out
}

// NewTracker returns an empty tracker; count receives every message's
// result label (nil discards).
func NewTracker(count func(result string)) *Tracker {
	if count == nil {
		count = func(string) {}
	}
	return &Tracker{index: NewIndex(), dec: NewKVEventsDecoder(), count: count, seen: map[publisherKey]map[Rank]struct{}{}}
}

// SetLive admits exactly the ranks the snapshot's workers declare; ranks
// of departed workers lose their blocks at once. Installing the snapshot
// already installed does nothing.
func (t *Tracker) SetLive(snap *discovery.Snapshot) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if snap == t.live {
		return
	}
	t.live = snap
	t.index.SetLive(func(yield func(Rank) bool) {
		for _, w := range snap.Workers {
			for r := uint32(0); r < max(w.Runtime.DPSize, 1); r++ {
				if !yield(Rank{Namespace: w.Namespace, WorkerID: w.InstanceID, DPRank: w.Runtime.DPStartRank + r}) {
					return
				}
			}
		}
	})
	for k, ranks := range t.seen {
		for r := range ranks {
			if !t.index.admits(r) {
				delete(ranks, r)
			}
		}
		if len(ranks) == 0 {
			delete(t.seen, k)
		}
	}
}

// Apply decodes one kv-events message and folds it into the index. The
// envelope must carry the publisher id the subscription was made for.
func (t *Tracker) Apply(m *events.KVMessage) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	res := t.apply(m)
	t.count(res)
	return res
}

func (t *Tracker) apply(m *events.KVMessage) string {
	if t.pred != nil {
		return PredictingResult
	}
	if len(m.Frames) == vllmFrames {
		return t.applyVLLMMessage(m)
	}
	pub, _, dr := t.dec.Decode(m.Frames, &t.ev)
	if dr != DecodeOK {
		return dr.String()
	}
	if pub != m.PublisherID {
		return IdentityMismatch.String()
	}
	r := Rank{Namespace: m.Namespace, WorkerID: t.ev.WorkerID, DPRank: t.ev.DPRank}
	if !t.index.admits(r) {
		return IdentityMismatch.String()
	}
	if !t.noteRank(publisherKey{m.Namespace, m.PublisherID}, r) {
		return resultCursorsExceeded
	}
	return t.index.Apply(m.Namespace, &t.ev).String()
}

// vllmFrames is the frame count of a vLLM engine's own message [topic,
// seq, payload]; Dynamo's event-plane messages have four.
const vllmFrames = 3

// applyVLLMMessage folds a vLLM engine's own batch received on a
// subscription to that engine (the endpoint picker's standalone mode): the
// publisher is the worker, so its id names the worker the events belong
// to. The rank is remembered like a Dynamo publisher's, so a lost
// subscription clears it.
func (t *Tracker) applyVLLMMessage(m *events.KVMessage) string {
	res := t.applyVLLM(m.Namespace, m.PublisherID, m.Frames)
	r := Rank{Namespace: m.Namespace, WorkerID: m.PublisherID, DPRank: t.vllm.DPRank}
	if t.index.admits(r) && !t.noteRank(publisherKey{m.Namespace, m.PublisherID}, r) {
		return resultCursorsExceeded
	}
	return res
}

// noteRank remembers that the publisher's events named r; false when the
// publisher already names as many ranks as one subscription may track.
func (t *Tracker) noteRank(k publisherKey, r Rank) bool {
	ranks := t.seen[k]
	if _, ok := ranks[r]; ok {
		return true
	}
	if len(ranks) >= MaxCursorsPerSubscription {
		return false
	}
	if ranks == nil {
		ranks = map[Rank]struct{}{}
		t.seen[k] = ranks
	}
	ranks[r] = struct{}{}
	return true
}

// PublisherLost clears every rank the publisher reported (its
// subscription was disconnected or pending too long, or stopped) and
// reports how many. When it reports 0 nothing changed: the tracker held
// nothing from that publisher.
func (t *Tracker) PublisherLost(ev events.KVPublisherLost) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := publisherKey{ev.Namespace, ev.PublisherID}
	n := 0
	for r := range t.seen[k] {
		if t.index.ClearRank(r) {
			n++
		}
		// A vLLM engine that comes back numbers its batches from 0 again.
		delete(t.vllmSeq, r)
	}
	delete(t.seen, k)
	return n
}

// Match writes each rank's longest cached prefix of the prompt's block
// hashes into out.
func (t *Tracker) Match(hashes []uint64, out *Matches) {
	t.mu.Lock()
	t.index.FindMatches(hashes, out)
	t.mu.Unlock()
}

// Size reports the index's nodes and ownerships without listing ranks
// (see Stats), for gauges read at every scrape.
func (t *Tracker) Size() (nodes, ownerships int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.index.used, t.index.owned
}

// Stats reports the index's size.
func (t *Tracker) Stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.index.Stats()
}

// admits reports whether r is a live rank.
func (x *Index) admits(r Rank) bool {
	_, ok := x.ranks[r]
	return ok
}
