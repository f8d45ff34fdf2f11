// Package replica is the wire format of replica sync: router replicas
// tell each other about the requests they dispatched (added with the
// ranks it holds, first token, output progress, ended), so each replica's
// active-sequence account also holds its peers' requests. Prefix-cache
// state is not part of it: every replica follows the workers' kv-events.
//
// A batch is one message: a fixed header (magic "SYRS", version, the
// sender's replica id, the batch's sequence number) and at most MaxEvents
// events, each a kind byte and varint fields. Peers are untrusted: Decode
// checks every count and length against a ceiling before it allocates,
// refuses with a *DecodeError naming a reason for counting, and never
// panics. The package is pure: no clock, no goroutines.
package replica

import (
	"encoding/binary"
	"fmt"
	"math"

	"switchyard/router/active"
)

// Version is the batch format this build writes and reads.
const Version = 1

// Ceilings of a batch.
const (
	// MaxEvents bounds the events of one batch; publishers flush at it.
	MaxEvents = 256
	// MaxHolds bounds the ranks one request holds (a decode rank and at
	// most one prefill rank).
	MaxHolds = 2
	// MaxNamespace bounds a rank's namespace, in bytes.
	MaxNamespace = 256
	// MaxBatchBytes bounds an encoded batch.
	MaxBatchBytes = 256 << 10
)

// headerSize: magic (4), version (1), replica id (8), sequence (8).
const headerSize = 21

var magic = [4]byte{'S', 'Y', 'R', 'S'}

// Kind is what happened to a peer's request.
type Kind uint8

// Event kinds.
const (
	// Added: the peer dispatched the request; Holds are what it charges.
	Added Kind = 1
	// FirstToken: the request's first token reached the peer.
	FirstToken Kind = 2
	// Progress: the request has generated OutputTokens so far.
	Progress Kind = 3
	// Ended: the request ended; its ranks let it go.
	Ended Kind = 4
)

func (k Kind) String() string {
	switch k {
	case Added:
		return "added"
	case FirstToken:
		return "first_token"
	case Progress:
		return "progress"
	case Ended:
		return "ended"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Event is one change to one of the sender's requests. RequestID is the
// sender's own id; receivers key it by the sender's replica id too.
type Event struct {
	Kind         Kind
	RequestID    uint64
	Holds        []active.Hold // Added only
	OutputTokens uint64        // Progress only
}

// Batch is one message from one replica. An empty batch is a heartbeat.
type Batch struct {
	Replica uint64
	Seq     uint64
	Events  []Event
}

// DecodeError is a refused batch; Reason is a short label for counting.
type DecodeError struct {
	Reason string
	Detail string
}

func (e *DecodeError) Error() string { return "replica: " + e.Reason + ": " + e.Detail }

func refuse(reason, format string, args ...any) error {
	return &DecodeError{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// Append appends b's encoding to dst. It refuses a batch Decode would
// refuse (too many events or holds, a long namespace), so a publisher
// never sends what its peers drop.
func Append(dst []byte, b *Batch) ([]byte, error) {
	if len(b.Events) > MaxEvents {
		return dst, fmt.Errorf("replica: %d events in a batch (at most %d)", len(b.Events), MaxEvents)
	}
	start := len(dst)
	dst = append(dst, magic[:]...)
	dst = append(dst, Version)
	dst = binary.BigEndian.AppendUint64(dst, b.Replica)
	dst = binary.BigEndian.AppendUint64(dst, b.Seq)
	dst = binary.AppendUvarint(dst, uint64(len(b.Events)))
	for i := range b.Events {
		ev := &b.Events[i]
		dst = append(dst, byte(ev.Kind))
		dst = binary.AppendUvarint(dst, ev.RequestID)
		switch ev.Kind {
		case Added:
			if len(ev.Holds) == 0 || len(ev.Holds) > MaxHolds {
				return dst[:start], fmt.Errorf("replica: request %d holds %d ranks (1 to %d)", ev.RequestID, len(ev.Holds), MaxHolds)
			}
			dst = append(dst, byte(len(ev.Holds)))
			for _, h := range ev.Holds {
				if len(h.Rank.Namespace) > MaxNamespace {
					return dst[:start], fmt.Errorf("replica: namespace of %d bytes (at most %d)", len(h.Rank.Namespace), MaxNamespace)
				}
				dst = binary.AppendUvarint(dst, uint64(len(h.Rank.Namespace)))
				dst = append(dst, h.Rank.Namespace...)
				dst = binary.AppendUvarint(dst, h.Rank.WorkerID)
				dst = binary.AppendUvarint(dst, uint64(h.Rank.DPRank))
				dst = binary.AppendUvarint(dst, h.PrefillTokens)
				dst = binary.AppendUvarint(dst, h.Blocks)
				var flags byte
				if h.UntilFirstToken {
					flags |= 1
				}
				dst = append(dst, flags)
				dst = binary.AppendUvarint(dst, h.OutputTokens)
				dst = binary.AppendUvarint(dst, h.BlockSize)
			}
		case Progress:
			dst = binary.AppendUvarint(dst, ev.OutputTokens)
		case FirstToken, Ended:
		default:
			return dst[:start], fmt.Errorf("replica: unknown event kind %d", ev.Kind)
		}
	}
	if len(dst)-start > MaxBatchBytes {
		return dst[:start], fmt.Errorf("replica: batch of %d bytes (at most %d)", len(dst)-start, MaxBatchBytes)
	}
	return dst, nil
}

// Header reads a batch's sender and sequence without decoding its events
// (a receiver skips its own batches by it).
func Header(p []byte) (replica, seq uint64, err error) {
	if len(p) < headerSize {
		return 0, 0, refuse("short", "%d bytes, the header alone is %d", len(p), headerSize)
	}
	if [4]byte(p[:4]) != magic {
		return 0, 0, refuse("magic", "not a replica-sync batch")
	}
	if p[4] != Version {
		return 0, 0, refuse("version", "version %d (this build reads %d)", p[4], Version)
	}
	return binary.BigEndian.Uint64(p[5:]), binary.BigEndian.Uint64(p[13:]), nil
}

// Decode decodes one batch into b, reusing b's slices. Holds and events
// are bounded by MaxHolds and MaxEvents before anything is allocated;
// namespaces are copied, so b does not alias p.
func Decode(p []byte, b *Batch) error {
	if len(p) > MaxBatchBytes {
		return refuse("too_large", "%d bytes (at most %d)", len(p), MaxBatchBytes)
	}
	rep, seq, err := Header(p)
	if err != nil {
		return err
	}
	d := decoder{p: p[headerSize:]}
	n := d.uvarint()
	if d.err != nil {
		return d.err
	}
	if n > MaxEvents {
		return refuse("too_many_events", "%d events (at most %d)", n, MaxEvents)
	}
	// Every event takes at least two bytes: a count beyond what is left is
	// a lie, refused before the slice is sized by it.
	if n > uint64(len(d.p))/2 {
		return refuse("truncated", "%d events declared in %d bytes", n, len(d.p))
	}
	b.Replica, b.Seq = rep, seq
	if cap(b.Events) < int(n) {
		b.Events = make([]Event, 0, n)
	}
	b.Events = b.Events[:0]
	for i := uint64(0); i < n && d.err == nil; i++ {
		ev := Event{Kind: Kind(d.byte()), RequestID: d.uvarint()}
		switch ev.Kind {
		case Added:
			nh := int(d.byte())
			if d.err == nil && (nh == 0 || nh > MaxHolds) {
				return refuse("bad_holds", "request %d holds %d ranks (1 to %d)", ev.RequestID, nh, MaxHolds)
			}
			ev.Holds = make([]active.Hold, 0, nh)
			for j := 0; j < nh && d.err == nil; j++ {
				var h active.Hold
				h.Rank.Namespace = d.str()
				h.Rank.WorkerID = d.uvarint()
				h.Rank.DPRank = d.uint32()
				h.PrefillTokens = d.uvarint()
				h.Blocks = d.uvarint()
				flags := d.byte()
				if d.err == nil && flags&^1 != 0 {
					return refuse("bad_flags", "hold flags 0x%02x", flags)
				}
				h.UntilFirstToken = flags&1 != 0
				h.OutputTokens = d.uvarint()
				h.BlockSize = d.uvarint()
				ev.Holds = append(ev.Holds, h)
			}
		case Progress:
			ev.OutputTokens = d.uvarint()
		case FirstToken, Ended:
		default:
			if d.err == nil {
				return refuse("bad_kind", "event kind %d", ev.Kind)
			}
		}
		b.Events = append(b.Events, ev)
	}
	if d.err != nil {
		return d.err
	}
	if len(d.p) != 0 {
		return refuse("trailing", "%d bytes after the last event", len(d.p))
	}
	return nil
}

type decoder struct {
	p   []byte
	err error
}

func (d *decoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if len(d.p) == 0 {
		d.err = refuse("truncated", "batch ends inside an event")
		return 0
	}
	c := d.p[0]
	d.p = d.p[1:]
	return c
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.p)
	if n <= 0 {
		if n == 0 {
			d.err = refuse("truncated", "batch ends inside a number")
		} else {
			d.err = refuse("overflow", "a number overflows 64 bits")
		}
		return 0
	}
	d.p = d.p[n:]
	return v
}

func (d *decoder) uint32() uint32 {
	v := d.uvarint()
	if d.err == nil && v > math.MaxUint32 {
		d.err = refuse("overflow", "dp rank %d", v)
	}
	return uint32(v)
}

func (d *decoder) str() string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > MaxNamespace {
		d.err = refuse("long_namespace", "namespace of %d bytes (at most %d)", n, MaxNamespace)
		return ""
	}
	if n > uint64(len(d.p)) {
		d.err = refuse("truncated", "namespace of %d bytes in %d", n, len(d.p))
		return ""
	}
	s := string(d.p[:n])
	d.p = d.p[n:]
	return s
}
