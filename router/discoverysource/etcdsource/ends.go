package etcdsource

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/status"
)

// Count kinds reported through New's count callback.
const (
	// KindResync: a pass completed its snapshot (range gets).
	KindResync = "resync"
	// KindCompacted: a pass ended because a revision it needed was compacted.
	KindCompacted = "compacted"
	// KindWatchEnded: a pass whose watches had all opened ended otherwise.
	KindWatchEnded = "watch_ended"
	// KindConnectFailed: a pass ended before all its watches opened.
	KindConnectFailed = "connect_failed"
	// KindSeedTruncated: a prefix held more records than a snapshot reads.
	KindSeedTruncated = "seed_truncated"
	// KindSeedOversized: one value was over the response ceiling and skipped.
	KindSeedOversized = "oversized"
)

// passEnd says why a pass ended.
type passEnd struct {
	// kind is the count kind; empty when the host cancelled Run.
	kind string
	// stage is what the pass was doing, in words fit for Status.
	stage string
	// err is the cause as returned by clientv3; it may name addresses, so
	// it goes to the log only, never to Status.
	err error
	// openFor is how long every watch of the pass stayed open; 0 if they
	// never all opened.
	openFor time.Duration
}

// failed classifies an error: compaction wherever it hit, otherwise a
// failure before or after the watches were all open.
func failed(stage string, err error, allOpen bool) passEnd {
	kind := KindConnectFailed
	switch {
	case errors.Is(err, rpctypes.ErrCompacted):
		kind = KindCompacted
	case allOpen:
		kind = KindWatchEnded
	}
	return passEnd{kind: kind, stage: stage, err: err}
}

// summary is the address-free text kept in Status.LastError. clientv3 and
// gRPC errors embed endpoints ("dial tcp 10.0.0.4:2379: ..."), and the admin
// API may be readable by people who should not learn the etcd topology, so
// only fixed texts pass through: etcd's own error strings, gRPC code names,
// context errors and this package's sentinels.
func (e passEnd) summary() string {
	if e.err == nil {
		return e.stage
	}
	return e.stage + ": " + safeText(e.err)
}

func safeText(err error) string {
	var ee rpctypes.EtcdError
	var se safeError
	switch {
	case errors.As(err, &se):
		return se.Error()
	case errors.As(err, &ee):
		return ee.Error()
	case errors.Is(err, context.DeadlineExceeded):
		return "timed out"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	if s, ok := status.FromError(err); ok {
		return "grpc " + s.Code().String()
	}
	return "see log"
}

// safeError is an error this package wrote itself without addresses.
type safeError struct{ msg string }

func (e safeError) Error() string { return e.msg }

func safef(format string, args ...any) error {
	return safeError{fmt.Sprintf(format, args...)}
}
