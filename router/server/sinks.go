package server

import (
	"time"

	"switchyard/router/core"
	"switchyard/router/eventplane"
)

// tickEvery is how often the core's time rules run on the wall clock: a
// kv-events publisher without a session is cleared at most this late
// after core.KVStaleAfter.
const tickEvery = time.Second

// loadSink feeds the kv_metrics subscriptions into the core.
type loadSink struct{ c *core.Shared }

func (s loadSink) Connected(namespace string, publisherID uint64, at time.Time) {
	s.c.LoadConnected(namespace, publisherID, at)
}

func (s loadSink) Deliver(namespace string, publisherID uint64, frames [][]byte, at time.Time) {
	s.c.LoadMessage(namespace, publisherID, frames, at)
}

// kvSink feeds the kv-events subscriptions, and their sessions' life,
// into the core, which runs the staleness rule on them.
type kvSink struct{ c *core.Shared }

func (s kvSink) Subscribed(namespace string, publisherID uint64, at time.Time) {
	s.c.KVSubscribed(namespace, publisherID, at)
}

func (s kvSink) SubscribedReplay(namespace string, publisherID uint64, replay bool, at time.Time) {
	s.c.KVSubscribedReplay(namespace, publisherID, replay, at)
}

func (s kvSink) Connected(namespace string, publisherID uint64, at time.Time) {
	s.c.KVConnected(namespace, publisherID, at)
}

func (s kvSink) Disconnected(namespace string, publisherID uint64, at time.Time) {
	s.c.KVDisconnected(namespace, publisherID, at)
}

func (s kvSink) Unsubscribed(namespace string, publisherID uint64, at time.Time) {
	s.c.KVUnsubscribed(namespace, publisherID, at)
}

func (s kvSink) Deliver(namespace string, publisherID uint64, frames [][]byte, at time.Time) {
	s.c.KVMessage(namespace, publisherID, frames, at)
}

var (
	_ eventplane.Sink              = loadSink{}
	_ eventplane.ReplaySessionSink = kvSink{}
)
