package server

import (
	"log/slog"
	"sync"
	"time"

	"switchyard/router/config"
	"switchyard/router/envelope"
	"switchyard/router/eventplane"
	"switchyard/router/events"
	"switchyard/router/kv"
	"switchyard/router/picker"
)

// KVStaleAfter is how long a kv-events subscription may stay without a
// session (disconnected, or pending) before the blocks its publisher
// reported are cleared from the KV index: they may have been evicted
// since, and the router would credit cache hits that are not there.
const KVStaleAfter = 60 * time.Second

// kvStaleCheckEvery is how often the subscriptions are checked against
// KVStaleAfter; a stale publisher is cleared at most this late.
const kvStaleCheckEvery = time.Second

// kvActive reports whether cfg asks for KV-aware selection.
func kvActive(cfg *config.Config) bool { return cfg.Dynamo.Enabled && cfg.Dynamo.KV.Enabled }

// PickerName is the picker a router running cfg selects with: "kv" when
// dynamo.kv.enabled (and dynamo.enabled), else "load". A recording of the
// process names it.
func PickerName(cfg *config.Config) string {
	if kvActive(cfg) {
		return picker.NameKV
	}
	return picker.NameLoad
}

// kvSink feeds kv-events subscriptions to the tracker (recordingKVSink
// does while recording). A (re)connect changes nothing: the index keeps
// each rank's event-id cursor, so events missed while disconnected show
// as a gap, which clears the rank.
type kvSink struct{ t *kv.Tracker }

// Connected implements eventplane.Sink.
func (kvSink) Connected(string, uint64, time.Time) {}

// Deliver implements eventplane.Sink.
func (k kvSink) Deliver(namespace string, publisherID uint64, frames [][]byte, at time.Time) envelope.Result {
	ev := events.KVMessage{At: at, Namespace: namespace, PublisherID: publisherID, Frames: frames}
	return kvResult(k.t.Apply(&ev))
}

// kvResult maps a tracker result to the closest envelope.Result. The
// supervisor does not read it; the tracker's own label is what is counted
// and recorded.
func kvResult(res string) envelope.Result {
	if r, ok := kvResults[res]; ok {
		return r
	}
	// gap, other_tier, parent_not_found, unknown_block: the index took
	// the event and did what it could with it.
	return envelope.Applied
}

var kvResults = func() map[string]envelope.Result {
	m := map[string]envelope.Result{"replay": envelope.Duplicate, "too_large": envelope.Oversized,
		"residency_refused": envelope.Unsupported}
	for _, r := range envelope.Results() {
		m[r.String()] = r
	}
	return m
}()

// kvStaleWatch applies the KVStaleAfter rule. Each check compares the
// kv-events subscriptions with what the previous check saw:
//
//   - a subscription without a session since Down (eventplane) for
//     KVStaleAfter loses its publisher's ranks (a KVPublisherLost input),
//     once per episode, with one warning; an episode ends when a session
//     starts (a later session that ends again begins a new one, and so
//     does a subscription restarted under a new dial policy);
//   - a subscription that is gone (its channel left discovery, kv-events
//     following was disabled, or the shared cap left no room for it)
//     loses its publisher's ranks at once.
//
// The server checks on a Clock-driven ticker and after every reconcile.
type kvStaleWatch struct {
	after time.Duration
	subs  func() []eventplane.SubscriptionInfo
	// lost applies a KVPublisherLost to the core (recorded when the
	// process records) and returns how many ranks it cleared.
	lost func(events.KVPublisherLost) int
	log  *slog.Logger

	mu    sync.Mutex
	known map[kvSubKey]*kvEpisode
}

type kvSubKey struct {
	namespace string
	id        uint64
}

// kvEpisode is what the watch remembers of one subscription: the start of
// its current time without a session (zero while it has one), and whether
// that episode already cleared the publisher.
type kvEpisode struct {
	down    time.Time
	cleared bool
}

func newKVStaleWatch(after time.Duration, subs func() []eventplane.SubscriptionInfo,
	lost func(events.KVPublisherLost) int, log *slog.Logger) *kvStaleWatch {
	return &kvStaleWatch{after: after, subs: subs, lost: lost, log: log, known: map[kvSubKey]*kvEpisode{}}
}

// check applies the rule at now.
func (w *kvStaleWatch) check(now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	subs := w.subs()
	seen := make(map[kvSubKey]bool, len(subs))
	for _, s := range subs {
		k := kvSubKey{s.Namespace, s.PublisherID}
		seen[k] = true
		ep := w.known[k]
		if ep == nil {
			ep = &kvEpisode{}
			w.known[k] = ep
		}
		if !s.Down.Equal(ep.down) {
			*ep = kvEpisode{down: s.Down}
		}
		if ep.down.IsZero() || ep.cleared || now.Sub(ep.down) < w.after {
			continue
		}
		ep.cleared = true
		n := w.lost(events.KVPublisherLost{At: now, Namespace: s.Namespace, PublisherID: s.PublisherID})
		w.log.Warn("kv-events subscription without a session for too long; the blocks its publisher reported are no longer trusted",
			"namespace", s.Namespace, "publisher_id", s.PublisherID, "state", s.State.String(),
			"down_for", now.Sub(ep.down).Round(time.Millisecond).String(), "ranks_cleared", n)
	}
	for k := range w.known {
		if seen[k] {
			continue
		}
		delete(w.known, k)
		if n := w.lost(events.KVPublisherLost{At: now, Namespace: k.namespace, PublisherID: k.id}); n > 0 {
			w.log.Info("kv-events subscription stopped; its publisher's blocks were cleared",
				"namespace", k.namespace, "publisher_id", k.id, "ranks_cleared", n)
		}
	}
}

// kvOptionsEqual compares two KV settings, the busy threshold by value.
func kvOptionsEqual(a, b picker.KVOptions) bool {
	ta, tb := a.DecodeBusyThreshold, b.DecodeBusyThreshold
	a.DecodeBusyThreshold, b.DecodeBusyThreshold = nil, nil
	return a == b && (ta == nil) == (tb == nil) && (ta == nil || *ta == *tb)
}
