// Package replay asks a KV-event publisher to resend what a subscription
// missed. vLLM's publisher keeps its last batches and serves them on a
// ROUTER socket: a DEALER sends ["", start_seq (8 bytes BE)], the
// publisher answers one ["", seq, payload] per buffered batch with
// seq >= start_seq, then the end marker ["", -1 (8 signed bytes BE), ""].
// Switchyard's fake fleet serves Dynamo's four-frame event-plane messages
// the same way, with the original frames after the sequence.
//
// Everything a publisher replies is fleet-authored: replies are read by
// the bounded ZMTP client (the kv-events frame ceilings), a replay has a
// deadline and a batch cap, and a reply out of order or out of shape ends
// the replay with a *RefusedError, counted by reason.
package replay

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"time"

	"switchyard/router/envelope"
	"switchyard/router/eventplane/zmtp"
)

// Replay bounds.
const (
	// DefaultMaxBatches is vLLM's default buffer (buffer_steps): a replay
	// that sends more is not a buffer being replayed.
	DefaultMaxBatches = 10_000
	// DefaultTimeout bounds a whole replay: dialing, the handshake, and
	// every reply up to the end marker.
	DefaultTimeout = 30 * time.Second
)

// endSeq is the end marker's sequence: -1 as 8 signed big-endian bytes.
var endSeq = [8]byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}

// Limits bound one replay.
type Limits struct {
	// Frames are the ceilings replies are read under; the kv-events
	// subscription ceilings (envelope.KVEventLimits) by default.
	Frames zmtp.Limits
	// MaxBatches caps the batches accepted; DefaultMaxBatches when 0.
	MaxBatches int
	// Timeout bounds the whole replay; DefaultTimeout when 0.
	Timeout time.Duration
}

// DefaultLimits are the limits of a kv-events replay.
var DefaultLimits = Limits{Frames: envelope.KVEventLimits, MaxBatches: DefaultMaxBatches, Timeout: DefaultTimeout}

func (l Limits) withDefaults() Limits {
	if l.Frames == (zmtp.Limits{}) {
		l.Frames = envelope.KVEventLimits
	}
	if l.MaxBatches <= 0 {
		l.MaxBatches = DefaultMaxBatches
	}
	if l.Timeout <= 0 {
		l.Timeout = DefaultTimeout
	}
	return l
}

// Result is what one replay delivered.
type Result struct {
	// First and Last are the first and last sequence replied (both 0
	// when Batches is 0). First > the requested start means the publisher
	// no longer holds what lies between: it is lost.
	First, Last uint64
	// Batches is how many replies were delivered.
	Batches int
	// Ended reports that the end marker came: the publisher replied with
	// everything it holds from the start.
	Ended bool
}

// Dialer connects to a publisher's host:port under the dial policy of the
// subscriptions (eventplane.Dialer).
type Dialer interface {
	Dial(ctx context.Context, hostPort string) (net.Conn, error)
}

// Stop, returned by deliver, ends a replay early without an error: the
// caller has what it needed (a replay up to where live messages resume).
var Stop = errors.New("replay: stop")

// Fetcher runs replays under one dial policy and set of limits, and
// counts them.
type Fetcher struct {
	Dialer Dialer
	Limits Limits
	Counts *Counts // may be nil
}

// Fetch dials endpoint (tcp://host:port), asks for every batch from
// sequence from, and hands each reply to deliver in order: its sequence
// and the frames after the sequence (vLLM: the payload; the fake fleet's
// Dynamo replay: the original four frames). The frames alias the
// connection's buffers and are valid only during the call. Fetch returns
// when the end marker arrives, deliver returns Stop or an error (which
// Fetch returns, wrapped), the replay breaks a rule (*RefusedError), the
// timeout expires or ctx ends.
func (f *Fetcher) Fetch(ctx context.Context, endpoint string, from uint64, deliver func(seq uint64, payload [][]byte) error) (Result, error) {
	res, err := f.fetch(ctx, endpoint, from, deliver)
	f.Counts.record(res, err)
	return res, err
}

func (f *Fetcher) fetch(ctx context.Context, endpoint string, from uint64, deliver func(uint64, [][]byte) error) (Result, error) {
	lim := f.Limits.withDefaults()
	hostPort, err := HostPort(endpoint)
	if err != nil {
		return Result{}, refuse(ReasonEndpoint, "%v", err)
	}
	if f.Dialer == nil {
		return Result{}, errors.New("replay: no dialer (the subscriptions' dial policy)")
	}
	ctx, cancel := context.WithTimeout(ctx, lim.Timeout)
	defer cancel()
	conn, err := f.Dialer.Dial(ctx, hostPort)
	if err != nil {
		return Result{}, dialErr(ctx, lim, err)
	}
	defer conn.Close()
	// The whole conversation shares one deadline; closing the connection
	// is what stops a read blocked on a silent publisher.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	res, err := converse(conn, from, lim, deliver)
	if err != nil && ctx.Err() != nil && !errors.Is(err, Stop) {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return res, refuse(ReasonTimeout, "replay not completed within %v (%d batches so far)", lim.Timeout, res.Batches)
		}
		return res, ctx.Err()
	}
	return res, err
}

func dialErr(ctx context.Context, lim Limits, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return refuse(ReasonTimeout, "publisher not reached within %v", lim.Timeout)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("replay: dial: %w", err)
}

// converse runs the handshake, the request and the replies on conn.
func converse(conn net.Conn, from uint64, lim Limits, deliver func(uint64, [][]byte) error) (Result, error) {
	var res Result
	d, err := zmtp.HandshakeDealer(conn, lim.Frames)
	if err != nil {
		return res, transportErr(err)
	}
	if err := d.Send([]byte{}, binary.BigEndian.AppendUint64(nil, from)); err != nil {
		return res, transportErr(err)
	}
	for {
		msg, err := d.ReadMessage()
		if err != nil {
			return res, transportErr(err)
		}
		seq, payload, end, err := parseReply(msg)
		if err != nil {
			return res, err
		}
		if end {
			res.Ended = true
			return res, nil
		}
		switch {
		case seq < from:
			return res, refuse(ReasonOutOfOrder, "reply sequence %d is before the requested %d", seq, from)
		case res.Batches > 0 && seq <= res.Last:
			return res, refuse(ReasonOutOfOrder, "reply sequence %d does not follow %d", seq, res.Last)
		case res.Batches == lim.MaxBatches:
			return res, refuse(ReasonTooMany, "more than %d batches in one replay", lim.MaxBatches)
		}
		if res.Batches == 0 {
			res.First = seq
		}
		res.Last = seq
		res.Batches++
		if err := deliver(seq, payload); err != nil {
			if errors.Is(err, Stop) {
				return res, nil
			}
			return res, fmt.Errorf("replay: deliver: %w", err)
		}
	}
}

// parseReply splits ["", seq, payload...] and recognises the end marker
// ["", -1, ""].
func parseReply(msg [][]byte) (seq uint64, payload [][]byte, end bool, err error) {
	if len(msg) < 3 {
		return 0, nil, false, refuse(ReasonMalformed, "reply of %d frames (need an empty delimiter, a sequence and a payload)", len(msg))
	}
	if len(msg[0]) != 0 {
		return 0, nil, false, refuse(ReasonMalformed, "reply's first frame is %d bytes, not the empty delimiter", len(msg[0]))
	}
	if len(msg[1]) != 8 {
		return 0, nil, false, refuse(ReasonMalformed, "reply sequence frame is %d bytes, not 8", len(msg[1]))
	}
	if bytes.Equal(msg[1], endSeq[:]) {
		if len(msg) != 3 || len(msg[2]) != 0 {
			return 0, nil, false, refuse(ReasonMalformed, "end marker with a payload")
		}
		return 0, nil, true, nil
	}
	return binary.BigEndian.Uint64(msg[1]), msg[2:], false, nil
}

// transportErr keeps I/O errors and classifies the ZMTP client's
// refusals (a ceiling, a bad handshake) as protocol refusals.
func transportErr(err error) error {
	if zmtp.IsProtocolError(err) {
		return &RefusedError{Reason: ReasonProtocol, Detail: err.Error()}
	}
	return fmt.Errorf("replay: %w", err)
}
