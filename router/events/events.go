// Package events is the vocabulary that flows into and out of the routing
// core. Live adapters (etcd and Kubernetes watches, ZMQ subscribers, HTTP)
// and the simulator produce the same events; the recorder persists them as
// they crossed the boundary, so a replay feeds the same inputs through the
// same code.
//
// Every input carries At, its receipt time read from the host's Clock. Core
// state that records time (a worker's first_seen, a sample's age) takes it
// from At, so replaying recorded events reproduces the same state.
package events

import "time"

// Keyspace names one of the discovery prefixes Dynamo workers write.
type Keyspace uint8

const (
	// Instances holds Endpoint records (v1/instances/...).
	Instances Keyspace = iota + 1
	// Models holds model-card records (v1/mdc/...).
	Models
	// EventChannels holds event-plane publisher records (v1/event_channels/...).
	EventChannels
)

// String is the keyspace's short name, used in logs and metrics.
func (k Keyspace) String() string {
	switch k {
	case Instances:
		return "instances"
	case Models:
		return "models"
	case EventChannels:
		return "event_channels"
	}
	return "unknown"
}

// Event is any input or output of the core.
type Event interface {
	// Time is the instant the event crossed into (or out of) the core.
	Time() time.Time
}

// DiscoveryRecord is one discovery record (a key under a watched prefix and
// its value) as read from the store.
type DiscoveryRecord struct {
	Keyspace Keyspace
	Key      string
	Value    []byte
}

// DiscoveryPut reports that a key under a watched prefix now holds Value.
// Namespace is the Dynamo namespace of the watched prefix the key came from;
// it is never read from the value.
type DiscoveryPut struct {
	At        time.Time
	Namespace string
	DiscoveryRecord
	Revision int64
}

// DiscoveryDelete reports that a key under a watched prefix was removed
// (deleted, or its lease lapsed).
type DiscoveryDelete struct {
	At        time.Time
	Namespace string
	Keyspace  Keyspace
	Key       string
	Revision  int64
}

// DiscoveryResync carries the complete contents of one namespace's watched
// prefixes, read by range gets. It replaces everything held for Namespace at
// once, so a resync that finds the same fleet changes nothing.
type DiscoveryResync struct {
	At        time.Time
	Namespace string
	Records   []DiscoveryRecord
	Revision  int64
}

// DiscoveryPrune keeps only the listed namespaces and drops every record of
// the others (a namespace removed from the configuration).
type DiscoveryPrune struct {
	At   time.Time
	Keep []string
}

// DiscoveryReset drops every held record (the watcher was replaced).
type DiscoveryReset struct {
	At time.Time
}

func (e DiscoveryPut) Time() time.Time    { return e.At }
func (e DiscoveryDelete) Time() time.Time { return e.At }
func (e DiscoveryResync) Time() time.Time { return e.At }
func (e DiscoveryPrune) Time() time.Time  { return e.At }
func (e DiscoveryReset) Time() time.Time  { return e.At }

// LoadConnected reports that a kv_metrics subscription to one publisher
// (re)connected. Samples held from that publisher are dropped, since a
// change may have been missed while disconnected.
type LoadConnected struct {
	At          time.Time
	Namespace   string
	PublisherID uint64
}

// LoadMessage is one multipart message received on a kv_metrics
// subscription, as it crossed the wire. Frames may alias the transport's
// buffers: the core decodes them at once and keeps none of them.
type LoadMessage struct {
	At        time.Time
	Namespace string
	// PublisherID is the id the discovery record announced for this
	// subscription; the message must carry the same.
	PublisherID uint64
	Frames      [][]byte
}

func (e LoadConnected) Time() time.Time { return e.At }
func (e LoadMessage) Time() time.Time   { return e.At }

// KVConnected reports that a kv-events subscription to one publisher
// (re)connected.
type KVConnected struct {
	At          time.Time
	Namespace   string
	PublisherID uint64
}

// KVMessage is one multipart message received on a kv-events
// subscription, as it crossed the wire. Frames may alias the transport's
// buffers: the core decodes them at once and keeps none of them.
type KVMessage struct {
	At          time.Time
	Namespace   string
	PublisherID uint64
	Frames      [][]byte
}

// KVPublisherLost reports that a kv-events subscription has been
// disconnected or pending for too long: the blocks its publisher reported
// can no longer be trusted.
type KVPublisherLost struct {
	At          time.Time
	Namespace   string
	PublisherID uint64
}

// KVSubscribed reports that the router started (or restarted) a
// kv-events subscription to one publisher; it has no session yet.
// Replay says the publisher offers replay of its recent messages (the
// host knows it from discovery): the core then asks for what a gap missed
// before it clears anything. Without it a gap clears the rank at once.
type KVSubscribed struct {
	At          time.Time
	Namespace   string
	PublisherID uint64
	Replay      bool
}

// KVDisconnected reports that a kv-events subscription lost its session.
type KVDisconnected struct {
	At          time.Time
	Namespace   string
	PublisherID uint64
}

// KVUnsubscribed reports that the router stopped following a kv-events
// publisher (it left discovery, kv-events following was switched off, or
// the subscription cap left no room for it).
type KVUnsubscribed struct {
	At          time.Time
	Namespace   string
	PublisherID uint64
}

// KVReplayWanted asks the host to have a publisher replay the messages
// of its stream numbered From to To (both included): the core saw a gap
// and holds the publisher's later messages until KVReplayEnd, or its
// deadline. It is an output of the core; the host answers it with
// KVReplayMessage inputs and one KVReplayEnd.
type KVReplayWanted struct {
	At          time.Time
	Namespace   string
	PublisherID uint64
	From, To    uint64
}

// KVReplayMessage is one message a publisher replayed, in exactly the
// form of a live message of its stream (Dynamo's four frames, or a vLLM
// engine's three). Frames may alias the transport's buffers.
type KVReplayMessage struct {
	At          time.Time
	Namespace   string
	PublisherID uint64
	Frames      [][]byte
}

// KVReplayEnd reports that the replay the core asked of a publisher is
// over: every message the publisher still held was delivered (Err empty),
// or the replay failed (Err says why).
type KVReplayEnd struct {
	At          time.Time
	Namespace   string
	PublisherID uint64
	Err         string
}

// Tick is the passage of time on the host's clock: rules that act on
// elapsed time (the kv-events staleness rule) act at ticks.
type Tick struct {
	At time.Time
}

func (e KVSubscribed) Time() time.Time    { return e.At }
func (e KVDisconnected) Time() time.Time  { return e.At }
func (e KVUnsubscribed) Time() time.Time  { return e.At }
func (e Tick) Time() time.Time            { return e.At }
func (e KVConnected) Time() time.Time     { return e.At }
func (e KVMessage) Time() time.Time       { return e.At }
func (e KVPublisherLost) Time() time.Time { return e.At }
func (e KVReplayWanted) Time() time.Time  { return e.At }
func (e KVReplayMessage) Time() time.Time { return e.At }
func (e KVReplayEnd) Time() time.Time     { return e.At }
