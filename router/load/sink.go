package load

import (
	"time"

	"switchyard/router/events"
)

// Subscriber adapts the store to the kv_metrics subscriptions: each session
// start becomes a LoadConnected event and each message a LoadMessage.
type Subscriber struct{ Store *Store }

// Connected implements eventplane.Sink.
func (s Subscriber) Connected(namespace string, publisherID uint64, at time.Time) {
	s.Store.Connected(events.LoadConnected{At: at, Namespace: namespace, PublisherID: publisherID})
}

// Deliver implements eventplane.Sink; the store counts each message's
// result.
func (s Subscriber) Deliver(namespace string, publisherID uint64, frames [][]byte, at time.Time) {
	ev := events.LoadMessage{At: at, Namespace: namespace, PublisherID: publisherID, Frames: frames}
	s.Store.Apply(&ev)
}
