package core

import (
	"sync"
	"time"

	"switchyard/router/active"
	"switchyard/router/clock"
	"switchyard/router/discovery"
	"switchyard/router/envelope"
	"switchyard/router/events"
	"switchyard/router/kv"
	"switchyard/router/load"
	"switchyard/router/picker"
	"switchyard/router/replica"
)

// Shared is a Core for a host whose inputs arrive on many goroutines (the
// live server: discovery watches, one goroutine per event-plane
// subscription, one per HTTP request, a ticker). One lock serialises every
// input, so the core applies them, and its port records them, in one
// order; a replay of that record applies them in the same order.
//
// Times entering the core lose their monotonic clock reading (Round(0)):
// durations the core computes are then the wall-clock durations a replay
// computes from the recorded times.
type Shared struct {
	mu  sync.Mutex
	c   *Core
	clk clock.Clock
}

// NewShared serialises c; clk stamps the inputs that carry no time of
// their own (Ended, Finished).
func NewShared(c *Core, clk clock.Clock) *Shared { return &Shared{c: c, clk: clk} }

// Discovery applies a discovery batch and publishes (discoverysource's
// target).
func (s *Shared) Discovery(batch []events.Event) {
	batch = wallClock(batch)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.c.Discovery(batch)
}

// LoadConnected reports a (re)connected kv_metrics subscription.
func (s *Shared) LoadConnected(namespace string, publisherID uint64, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.c.LoadConnected(events.LoadConnected{At: at.Round(0), Namespace: namespace, PublisherID: publisherID})
}

// LoadMessage applies one kv_metrics message.
func (s *Shared) LoadMessage(namespace string, publisherID uint64, frames [][]byte, at time.Time) envelope.Result {
	ev := events.LoadMessage{At: at.Round(0), Namespace: namespace, PublisherID: publisherID, Frames: frames}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.c.LoadMessage(&ev)
}

// KVSubscribed, KVConnected, KVDisconnected and KVUnsubscribed report a
// kv-events subscription's life (see kvstale.go).
func (s *Shared) KVSubscribed(namespace string, publisherID uint64, at time.Time) {
	s.KVSubscribedReplay(namespace, publisherID, false, at)
}

func (s *Shared) KVConnected(namespace string, publisherID uint64, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.c.KVConnected(events.KVConnected{At: at.Round(0), Namespace: namespace, PublisherID: publisherID})
}

func (s *Shared) KVDisconnected(namespace string, publisherID uint64, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.c.KVDisconnected(events.KVDisconnected{At: at.Round(0), Namespace: namespace, PublisherID: publisherID})
}

func (s *Shared) KVUnsubscribed(namespace string, publisherID uint64, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.c.KVUnsubscribed(events.KVUnsubscribed{At: at.Round(0), Namespace: namespace, PublisherID: publisherID})
}

// KVMessage applies one kv-events message.
func (s *Shared) KVMessage(namespace string, publisherID uint64, frames [][]byte, at time.Time) string {
	ev := events.KVMessage{At: at.Round(0), Namespace: namespace, PublisherID: publisherID, Frames: frames}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.c.KVMessage(&ev)
}

// KVSubscribedReplay is KVSubscribed for a publisher whose replay offer
// discovery knows: with replay, the core recovers the subscription's gaps
// by asking for what they missed (kvreplay.go).
func (s *Shared) KVSubscribedReplay(namespace string, publisherID uint64, replay bool, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.c.KVSubscribed(events.KVSubscribed{At: at.Round(0), Namespace: namespace, PublisherID: publisherID, Replay: replay})
}

// KVReplayed applies one message a publisher replayed at the core's
// request (Hooks.KVReplayWanted), in its live frame form.
func (s *Shared) KVReplayed(namespace string, publisherID uint64, frames [][]byte, at time.Time) string {
	ev := events.KVReplayMessage{At: at.Round(0), Namespace: namespace, PublisherID: publisherID, Frames: frames}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.c.KVReplayed(&ev)
}

// KVReplayEnd reports that a replay is over; errText says why it failed,
// empty when the publisher sent all it held.
func (s *Shared) KVReplayEnd(namespace string, publisherID uint64, errText string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.c.KVReplayEnd(events.KVReplayEnd{At: at.Round(0), Namespace: namespace, PublisherID: publisherID, Err: errText})
}

// KVPublisherLost clears the ranks a publisher reported: a
// kv_cache_index source's reset, or a source that lost its stream for too
// long. Recorded like the staleness rule's clearing, so a replay clears
// the same ranks at the same point. It returns how many were cleared.
func (s *Shared) KVPublisherLost(namespace string, publisherID uint64, at time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.c.KVPublisherLost(events.KVPublisherLost{At: at.Round(0), Namespace: namespace, PublisherID: publisherID})
}

// Tick applies the time-driven rules at now.
func (s *Shared) Tick(now time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.c.Tick(events.Tick{At: now.Round(0)})
}

// Configure applies a configuration change at now.
func (s *Shared) Configure(now time.Time, settings Settings) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.c.Configure(ConfigChanged{At: now.Round(0), Settings: settings})
}

// Pick asks the core for pins. The pick sees the registry as of its place
// in the order of inputs, not as of when its caller arrived.
func (s *Shared) Pick(req picker.Request) (picker.Selection, bool) {
	req.Now = req.Now.Round(0)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.c.Pick(Arrival{Req: req})
}

// PickRanked is Pick that also appends the candidates the picker weighed
// for this pick, with their costs when defined, to dst.
func (s *Shared) PickRanked(req picker.Request, dst []picker.Candidate) (picker.Selection, []picker.Candidate, bool) {
	req.Now = req.Now.Round(0)
	s.mu.Lock()
	defer s.mu.Unlock()
	sel, ok := s.c.Pick(Arrival{Req: req})
	if ok && s.c.explain != nil {
		dst = s.c.explain.Candidates(dst)
	}
	return sel, dst, ok
}

// Ended reports that a pinned request ended unserved.
func (s *Shared) Ended(req picker.Request, sel picker.Selection) {
	at := s.clk.Now().Round(0)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.c.Ended(req, sel, at, "")
}

// Finished reports that a pinned request was served to its end: its ranks
// stop counting it at once, without waiting for their next samples.
func (s *Shared) Finished(req picker.Request, sel picker.Selection) {
	at := s.clk.Now().Round(0)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.c.Ended(req, sel, at, EndedServed)
}

// FirstToken reports a pinned request's first output token.
func (s *Shared) FirstToken(requestID uint64) {
	at := s.clk.Now().Round(0)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.c.FirstToken(FirstToken{At: at, RequestID: requestID})
}

// Progress reports a request's output so far; hosts call it at block
// boundaries, and only while TracksOutput.
func (s *Shared) Progress(requestID, outputTokens uint64) {
	at := s.clk.Now().Round(0)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.c.Progress(Progress{At: at, RequestID: requestID, OutputTokens: outputTokens})
}

// TracksOutput reports whether hosts report Progress.
func (s *Shared) TracksOutput() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.c.TracksOutput()
}

// Outcome records how a request ended.
func (s *Shared) Outcome(o Outcome) {
	o.At = o.At.Round(0)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.c.Outcome(o)
}

// SetPort replaces the output port; once it returns, no input reaches the
// old port.
func (s *Shared) SetPort(p Port) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.c.SetPort(p)
}

// Settings are the settings in force.
func (s *Shared) Settings() Settings {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.c.Settings()
}

// ActiveLoad is what rank k holds in the core's account of the requests
// it dispatched.
func (s *Shared) ActiveLoad(k active.Rank) active.Load {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.c.Active().Load(k)
}

// Snapshot, Registry, Store and Tracker may be read without the lock.
func (s *Shared) Snapshot() *discovery.Snapshot { return s.c.Snapshot() }
func (s *Shared) Registry() *discovery.Registry { return s.c.Registry() }
func (s *Shared) Store() *load.Store            { return s.c.Store() }
func (s *Shared) Tracker() *kv.Tracker          { return s.c.Tracker() }

// wallClock returns the batch with every event time stripped of its
// monotonic clock reading (a copy: the source owns its slice).
func wallClock(batch []events.Event) []events.Event {
	out := make([]events.Event, len(batch))
	for i, ev := range batch {
		switch e := ev.(type) {
		case events.DiscoveryPut:
			e.At = e.At.Round(0)
			ev = e
		case events.DiscoveryDelete:
			e.At = e.At.Round(0)
			ev = e
		case events.DiscoveryResync:
			e.At = e.At.Round(0)
			ev = e
		case events.DiscoveryPrune:
			e.At = e.At.Round(0)
			ev = e
		case events.DiscoveryReset:
			e.At = e.At.Round(0)
			ev = e
		}
		out[i] = ev
	}
	return out
}

// PeerBatch applies one batch of a peer replica's events, received at at.
func (s *Shared) PeerBatch(b replica.Batch, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.c.PeerBatch(PeerBatch{At: at.Round(0), Batch: b})
}

// PeerStats is what replica sync did so far.
func (s *Shared) PeerStats() PeerStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.c.PeerStats()
}
