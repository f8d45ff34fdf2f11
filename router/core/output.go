package core

import (
	"time"

	"switchyard/router/envelope"
	"switchyard/router/events"
	"switchyard/router/picker"
)

// Output is one input the core applied or one decision it made. The core
// hands every output to its Port in the order it happened; an output is
// one of the discovery events (events.DiscoveryPut, Delete, Resync, Prune,
// Reset), events.LoadConnected, one of the kv-events session events
// (events.KVSubscribed, KVConnected, KVDisconnected, KVUnsubscribed), an
// events.Tick that acted, or one of the types below.
type Output = events.Event

// Port is the core's one output: whatever records or observes a run (a
// recorder, a test) implements it. Record is called synchronously, so an
// output's slices are valid only during the call; a port that keeps them
// copies them. A nil Port records nothing.
type Port interface {
	Record(out Output)
}

// Published: the registry published Generation (Workers workers) and the
// load store's admission was updated to it.
type Published struct {
	At         time.Time
	Generation uint64
	Workers    int
}

// LoadApplied is one kv_metrics message and the result the load store
// gave it.
type LoadApplied struct {
	Msg    *events.LoadMessage
	Result envelope.Result
}

// KVApplied is one kv-events message and the result the KV tracker gave
// it. A lost publisher that cleared ranks is a KVApplied without frames
// and with result kv.PublisherLostResult.
type KVApplied struct {
	At          time.Time
	Namespace   string
	PublisherID uint64
	Frames      [][]byte
	Result      string
	// Replayed: the publisher replayed this message to fill a gap
	// (Core.KVReplayed).
	Replayed bool
}

// ConfigChanged is a configuration change the core applied (Configure).
type ConfigChanged struct {
	At time.Time
	Settings
}

// Request is a request as the router received it, before its pick.
type Request struct {
	At           time.Time
	RequestID    uint64
	Model        string
	Namespaces   []string
	PromptTokens uint64
	MaxTokens    int
	// Generation is the registry generation the pick used.
	Generation uint64
	// Tokens are the prompt's token ids when known (simulated and trace
	// workloads); nil when not.
	Tokens  []uint32
	Session uint64
	// Route is the ingress route, e.g. "/v1/chat/completions", or "sim".
	Route string
}

// Selection is a picker's answer to one request, with the candidates it
// weighed (empty for a picker that does not explain itself).
type Selection struct {
	At         time.Time
	RequestID  uint64
	OK         bool
	Sel        picker.Selection
	Candidates []picker.Candidate
}

// Ended: a pinned request ended, unserved or (Reason EndedServed) served
// to its end, and the core released what its pick charged (Core.Ended).
type Ended struct {
	At        time.Time
	RequestID uint64
	Reason    string
}

// FirstToken: a pinned request's first output token reached the host
// (Core.FirstToken).
type FirstToken struct {
	At        time.Time
	RequestID uint64
}

// Progress: a request has generated OutputTokens so far (Core.Progress).
type Progress struct {
	At           time.Time
	RequestID    uint64
	OutputTokens uint64
}

// Outcome is how a request ended.
type Outcome struct {
	At        time.Time
	RequestID uint64
	// Status is one of ok, refused, failed, cancelled, rejected.
	Status       string
	Error        string
	PromptTokens int
	CachedTokens int
	OutputTokens int
	TTFT         time.Duration
	E2E          time.Duration
	// ITL is the request's mean inter-token latency; 0 with fewer than
	// two output tokens.
	ITL time.Duration
}

func (o Published) Time() time.Time { return o.At }
func (o LoadApplied) Time() time.Time {
	if o.Msg == nil {
		return time.Time{}
	}
	return o.Msg.At
}
func (o KVApplied) Time() time.Time     { return o.At }
func (o Request) Time() time.Time       { return o.At }
func (o ConfigChanged) Time() time.Time { return o.At }
func (o Selection) Time() time.Time     { return o.At }
func (o Ended) Time() time.Time         { return o.At }
func (o Outcome) Time() time.Time       { return o.At }
func (o FirstToken) Time() time.Time    { return o.At }
func (o Progress) Time() time.Time      { return o.At }

// WithoutTokens wraps a port so requests are recorded without their token
// ids: a Mooncake-length prompt is about 48 KiB of ids.
func WithoutTokens(p Port) Port { return noTokens{p} }

type noTokens struct{ Port }

func (n noTokens) Record(out Output) {
	if r, ok := out.(Request); ok {
		r.Tokens = nil
		out = r
	}
	n.Port.Record(out)
}
