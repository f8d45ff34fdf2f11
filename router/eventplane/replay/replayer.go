package replay

import (
	"context"
	"errors"
	"sync"
)

// DefaultMaxReplays bounds the replays one router runs at once: a fleet
// that loses messages everywhere at once must not make the router open a
// connection per publisher.
const DefaultMaxReplays = 8

// Family says how a subscription's live messages look, so a replayed
// batch can be rebuilt into one.
type Family uint8

const (
	// Dynamo: the four-frame event-plane message (Switchyard's replay
	// extension).
	Dynamo Family = iota
	// VLLM: vLLM's own publisher, [topic, seq, payload].
	VLLM
)

// Request asks for what one subscription missed.
type Request struct {
	Namespace   string
	PublisherID uint64
	// Endpoint is the publisher's replay socket (tcp://host:port), as its
	// subscription target carries it.
	Endpoint string
	Family   Family
	// Topic is the first frame of the subscription's live messages; the
	// vLLM family rebuilds messages with it.
	Topic []byte
	// From is the first sequence wanted; To the last (inclusive), or 0 to
	// take everything up to the end marker. A reply past To is not
	// delivered: the caller has it from the live stream.
	From, To uint64
}

// Replayer runs replays for a host: at most one per subscription and at
// most Max overall, each a goroutine of its own. For one request, Deliver
// is called for each recovered message in order and then End exactly
// once; calls for different requests may run concurrently, so the host
// hands them to its serialized input path.
type Replayer struct {
	Fetcher *Fetcher
	// Max bounds concurrent replays; DefaultMaxReplays when 0.
	Max int
	// Deliver receives one recovered message in its live form; it owns
	// the frames.
	Deliver func(req Request, frames [][]byte)
	// End reports how the request finished: the Result (of what reached
	// Deliver), and nil, a
	// *RefusedError, context.Canceled (Cancel, Close) or another error.
	// What was delivered stands either way; anything between From and To
	// that was not delivered is lost.
	End func(req Request, res Result, err error)

	mu      sync.Mutex
	running map[key]context.CancelFunc
	closed  bool
	wg      sync.WaitGroup
}

type key struct {
	namespace string
	id        uint64
}

// Errors of Start; End is not called for a request Start refused.
var (
	// ErrBusy: a replay for the same subscription is running.
	ErrBusy = errors.New("replay: a replay of this subscription is running")
	// ErrSaturated: Max replays are running.
	ErrSaturated = errors.New("replay: too many replays at once")
	// ErrClosed: the Replayer was closed.
	ErrClosed = errors.New("replay: closed")
)

// Start begins req in the background, or says why it cannot.
func (r *Replayer) Start(req Request) error {
	max := r.Max
	if max <= 0 {
		max = DefaultMaxReplays
	}
	k := key{req.Namespace, req.PublisherID}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.closed:
		return ErrClosed
	case r.running[k] != nil:
		return ErrBusy
	case len(r.running) >= max:
		return ErrSaturated
	}
	if r.running == nil {
		r.running = map[key]context.CancelFunc{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.running[k] = cancel
	if c := r.Fetcher.Counts; c != nil {
		c.Running.Add(1)
	}
	r.wg.Add(1)
	go r.run(ctx, k, req)
	return nil
}

func (r *Replayer) run(ctx context.Context, k key, req Request) {
	defer r.wg.Done()
	// got is what reached Deliver: a reply past To is read, not delivered.
	var got Result
	res, err := r.Fetcher.Fetch(ctx, req.Endpoint, req.From, func(seq uint64, payload [][]byte) error {
		if req.To != 0 && seq > req.To {
			return Stop
		}
		msg, err := rebuild(req, seq, payload)
		if err != nil {
			return err
		}
		r.Deliver(req, msg)
		if got.Batches == 0 {
			got.First = seq
		}
		got.Last = seq
		got.Batches++
		if req.To != 0 && seq == req.To {
			return Stop
		}
		return nil
	})
	got.Ended = res.Ended
	r.mu.Lock()
	delete(r.running, k)
	r.mu.Unlock()
	if c := r.Fetcher.Counts; c != nil {
		c.Running.Add(-1)
	}
	r.End(req, got, err)
}

// rebuild turns a reply into the subscription's live form; a reply that
// does not fit the family is the publisher's fault.
func rebuild(req Request, seq uint64, payload [][]byte) ([][]byte, error) {
	var msg [][]byte
	var err error
	if req.Family == VLLM {
		msg, err = VLLMMessage(req.Topic, seq, payload)
	} else {
		msg, err = DynamoMessage(seq, payload)
	}
	if err != nil {
		return nil, &RefusedError{Reason: ReasonMalformed, Detail: err.Error()}
	}
	return msg, nil
}

// Cancel stops the running replay of a subscription (whose publisher
// left or restarted), if any; its End reports context.Canceled.
func (r *Replayer) Cancel(namespace string, publisherID uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cancel := r.running[key{namespace, publisherID}]; cancel != nil {
		cancel()
	}
}

// Running is how many replays are in progress.
func (r *Replayer) Running() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.running)
}

// Close cancels every replay, waits for their End calls and refuses new
// ones.
func (r *Replayer) Close() {
	r.mu.Lock()
	r.closed = true
	for _, cancel := range r.running {
		cancel()
	}
	r.mu.Unlock()
	r.wg.Wait()
}
