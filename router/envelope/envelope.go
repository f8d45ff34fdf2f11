// Package envelope is the pure codec of Dynamo's event plane: the four-frame
// ZMQ multipart message, the msgpack EventEnvelope inside it, the results
// that count why a message was applied or dropped, and the wire ceilings
// (Limits) every subscription enforces. It imports no sockets, so the core
// and the simulator decode with it while router/eventplane keeps the
// subscriptions and their transport (router/eventplane/zmtp); the families
// that follow a topic (router/load for kv_metrics, router/kv for kv-events)
// decode the envelope payload.
package envelope

import (
	"bytes"
	"encoding/binary"

	"switchyard/router/envelope/msgpack"
)

// Frame-header constants of Dynamo's event plane.
const (
	FrameVersion    = 1
	FrameHeaderSize = 5
)

// Result is why a message was applied or dropped. The set is closed; it is
// the label of switchyard_dynamo_*_events_total{result}.
type Result uint8

const (
	Applied Result = iota
	Malformed
	UnknownVersion
	TopicMismatch
	Oversized
	IdentityMismatch
	OverCapacity
	Duplicate
	TransportRefused
	Unsupported
	numResults
)

var resultNames = [numResults]string{
	"applied", "malformed", "unknown_version", "topic_mismatch", "oversized",
	"identity_mismatch", "over_capacity", "duplicate", "transport_refused", "unsupported",
}

func (r Result) String() string {
	if r < numResults {
		return resultNames[r]
	}
	return "malformed"
}

// Results lists every result, for pre-registering metric series.
func Results() []Result {
	out := make([]Result, numResults)
	for i := range out {
		out[i] = Result(i)
	}
	return out
}

// Envelope is a decoded EventEnvelope. Topic and Payload alias the frame.
type Envelope struct {
	Topic       []byte
	PublisherID uint64
	Sequence    uint64
	PublishedAt uint64 // Unix ms
	Payload     []byte
}

// Message is a decoded event-plane message.
type Message struct {
	// PublisherID and Sequence are the binary frames 2 and 3.
	PublisherID uint64
	Sequence    uint64
	Envelope    Envelope
}

// Decoder decodes messages of one topic with a payload ceiling. It keeps a
// small scratch buffer for the rare array-of-ints payload encoding, so a
// Decoder belongs to one goroutine.
type Decoder struct {
	Topic      []byte
	MaxPayload int
	scratch    []byte
}

// NewDecoder decodes topic with payloads of at most maxPayload bytes.
func NewDecoder(topic string, maxPayload int) *Decoder {
	return &Decoder{Topic: []byte(topic), MaxPayload: maxPayload}
}

// Decode checks the frames and the envelope. The payload is left to the
// topic's own decoder. Nothing is allocated.
func (d *Decoder) Decode(frames [][]byte, m *Message) Result {
	if len(frames) != 4 || len(frames[1]) != 8 || len(frames[2]) != 8 {
		return Malformed
	}
	if !bytes.Equal(frames[0], d.Topic) {
		return TopicMismatch
	}
	m.PublisherID = binary.BigEndian.Uint64(frames[1])
	m.Sequence = binary.BigEndian.Uint64(frames[2])
	f := frames[3]
	if len(f) < FrameHeaderSize {
		return Malformed
	}
	if f[0] != FrameVersion {
		return UnknownVersion
	}
	n := binary.BigEndian.Uint32(f[1:5])
	if int64(n) > int64(d.MaxPayload) {
		return Oversized // refused before parsing
	}
	if int64(n) > int64(len(f)-FrameHeaderSize) {
		return Malformed
	}
	if r := d.envelope(f[FrameHeaderSize:FrameHeaderSize+int(n)], &m.Envelope); r != Applied {
		return r
	}
	if !bytes.Equal(m.Envelope.Topic, d.Topic) {
		return TopicMismatch
	}
	if m.Envelope.PublisherID != m.PublisherID {
		return IdentityMismatch
	}
	if m.Envelope.Sequence != m.Sequence {
		return Malformed
	}
	return Applied
}

// envelope reads the EventEnvelope as a named map (rmp-serde to_vec_named)
// or a positional array (to_vec). Unknown keys, such as published_at_ns,
// are skipped.
func (d *Decoder) envelope(b []byte, e *Envelope) Result {
	*e = Envelope{}
	r := msgpack.NewReader(b)
	var have uint8
	const haveTopic, havePID, haveSeq, havePayload = 1, 2, 4, 8
	// Fields by position, which is also the named form's declaration order.
	const fTopic, fPID, fSeq, fPublishedAt, fPayload, fUnknown = 0, 1, 2, 3, 4, 5
	field := func(f int) Result {
		var err error
		switch f {
		case fTopic:
			e.Topic, err = r.Bytes()
			have |= haveTopic
		case fPID:
			e.PublisherID, err = r.Uint()
			have |= havePID
		case fSeq:
			e.Sequence, err = r.Uint()
			have |= haveSeq
		case fPublishedAt:
			e.PublishedAt, err = r.Uint()
		case fPayload:
			e.Payload, err = d.payload(&r)
			have |= havePayload
		default:
			err = r.Skip()
		}
		if err != nil {
			return Malformed
		}
		return Applied
	}
	switch {
	case r.IsMap():
		n, err := r.MapLen()
		if err != nil {
			return Malformed
		}
		for i := 0; i < n; i++ {
			k, err := r.Bytes()
			if err != nil {
				return Malformed
			}
			f := fUnknown
			switch string(k) { // a conversion in a switch does not allocate
			case "topic":
				f = fTopic
			case "publisher_id":
				f = fPID
			case "sequence":
				f = fSeq
			case "published_at":
				f = fPublishedAt
			case "payload":
				f = fPayload
			}
			if res := field(f); res != Applied {
				return res
			}
		}
	case r.IsArray():
		n, err := r.ArrayLen()
		if err != nil {
			return Malformed
		}
		for i := 0; i < n; i++ {
			if res := field(min(i, fUnknown)); res != Applied {
				return res
			}
		}
	default:
		return Malformed
	}
	if have != haveTopic|havePID|haveSeq|havePayload {
		return Malformed
	}
	return Applied
}

// payload accepts bin (what rmp-serde writes for Bytes), str, or an array
// of small integers.
func (d *Decoder) payload(r *msgpack.Reader) ([]byte, error) {
	if !r.IsArray() {
		return r.Bytes()
	}
	if cap(d.scratch) < d.MaxPayload {
		d.scratch = make([]byte, 0, d.MaxPayload)
	}
	return r.ByteArray(d.scratch[:0])
}
