package replay

import (
	"errors"
	"fmt"
	"sync/atomic"

	"switchyard/router/eventplane"
)

// Reason is why a replay was refused.
type Reason uint8

const (
	// ReasonEndpoint: the replay endpoint is not tcp://host:port.
	ReasonEndpoint Reason = iota
	// ReasonProtocol: the ZMTP client refused the peer (a bad handshake,
	// a frame or message over the ceilings, an ERROR command).
	ReasonProtocol
	// ReasonMalformed: a reply is not ["", seq (8 bytes), payload...].
	ReasonMalformed
	// ReasonOutOfOrder: a reply's sequence is before the start or does
	// not increase.
	ReasonOutOfOrder
	// ReasonTooMany: more replies than Limits.MaxBatches.
	ReasonTooMany
	// ReasonTimeout: the replay did not end within Limits.Timeout.
	ReasonTimeout
	numReasons
)

// Reasons lists every reason, for metric series.
func Reasons() []Reason {
	out := make([]Reason, numReasons)
	for i := range out {
		out[i] = Reason(i)
	}
	return out
}

func (r Reason) String() string {
	if r >= numReasons {
		return "unknown"
	}
	return [...]string{"endpoint", "protocol", "malformed", "out_of_order", "too_many", "timeout"}[r]
}

// RefusedError ends a replay the publisher (or its endpoint) got wrong.
// What was delivered before it stands; the rest is to be treated as lost.
type RefusedError struct {
	Reason Reason
	Detail string
}

func (e *RefusedError) Error() string {
	return "replay refused (" + e.Reason.String() + "): " + e.Detail
}

func refuse(r Reason, format string, args ...any) error {
	return &RefusedError{Reason: r, Detail: fmt.Sprintf(format, args...)}
}

// HostPort checks a replay endpoint under the rule a channel's endpoint
// follows (eventplane.ZmqHostPort) and returns it without its scheme.
func HostPort(endpoint string) (string, error) {
	hp, _, reason := eventplane.ZmqHostPort(endpoint)
	if reason != "" {
		return "", errors.New(reason)
	}
	return hp, nil
}

// Counts are a Fetcher's running totals, safe for concurrent use; a host
// exports them as metrics.
type Counts struct {
	// Replays counts finished replays; Ended those that reached the end
	// marker; Stopped those the caller ended early; Failed those that
	// ended with an error other than a refusal (dial, I/O, cancel).
	Replays, Ended, Stopped, Failed atomic.Uint64
	// Batches counts replies delivered.
	Batches atomic.Uint64
	// Running is how many replays a Replayer has in progress.
	Running atomic.Int64
	refused [numReasons]atomic.Uint64
}

// Refused is how many replays were refused for r.
func (c *Counts) Refused(r Reason) uint64 {
	if r >= numReasons {
		return 0
	}
	return c.refused[r].Load()
}

func (c *Counts) record(res Result, err error) {
	if c == nil {
		return
	}
	c.Replays.Add(1)
	c.Batches.Add(uint64(res.Batches))
	var re *RefusedError
	switch {
	case err == nil && res.Ended:
		c.Ended.Add(1)
	case err == nil:
		c.Stopped.Add(1)
	case errors.As(err, &re):
		c.refused[re.Reason].Add(1)
	default:
		c.Failed.Add(1)
	}
}
