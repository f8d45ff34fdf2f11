// Package wire encodes event-plane messages the way Dynamo workers do:
// rmp-serde named maps (struct fields in declaration order, compact
// integers, nil for absent options), the 5-byte frame header, and the
// four-frame ZMQ message. The fake fleet publishes with it and tests use it
// to speak to the router; the router's own decoders never use it.
package wire

import (
	"bytes"
	"encoding/binary"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// ActiveLoad mirrors Dynamo's ActiveLoad field order.
type ActiveLoad struct {
	WorkerID            uint64  `msgpack:"worker_id"`
	DPRank              uint32  `msgpack:"dp_rank"`
	ActiveDecodeBlocks  *uint64 `msgpack:"active_decode_blocks"`
	ActivePrefillTokens *uint64 `msgpack:"active_prefill_tokens"`
	SchedulerLoadScope  *string `msgpack:"scheduler_load_scope"`
	KVUsedBlocks        *uint64 `msgpack:"kv_used_blocks"`
}

// Envelope mirrors Dynamo's EventEnvelope field order.
type Envelope struct {
	Topic       string `msgpack:"topic"`
	PublisherID uint64 `msgpack:"publisher_id"`
	Sequence    uint64 `msgpack:"sequence"`
	PublishedAt uint64 `msgpack:"published_at"`
	Payload     []byte `msgpack:"payload"`
}

// U64 returns a pointer, for optional fields.
func U64(v uint64) *uint64 { return &v }

// Marshal encodes v as rmp-serde's to_vec_named would; asArray gives the
// positional to_vec form instead.
func Marshal(v any, asArray bool) []byte {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.UseCompactInts(true)
	enc.UseArrayEncodedStructs(asArray)
	if err := enc.Encode(v); err != nil {
		panic(err) // only the fixed structs above are encoded
	}
	return buf.Bytes()
}

// Frame prefixes a payload with the version-1 frame header.
func Frame(payload []byte) []byte {
	out := make([]byte, 5+len(payload))
	out[0] = 1
	binary.BigEndian.PutUint32(out[1:5], uint32(len(payload)))
	copy(out[5:], payload)
	return out
}

// Message builds the four frames of one event-plane message carrying
// payload (already msgpack) on topic.
func Message(topic string, publisherID, seq uint64, payload []byte, at time.Time) [][]byte {
	env := Marshal(&Envelope{Topic: topic, PublisherID: publisherID, Sequence: seq,
		PublishedAt: uint64(at.UnixMilli()), Payload: payload}, false)
	pid, sq := make([]byte, 8), make([]byte, 8)
	binary.BigEndian.PutUint64(pid, publisherID)
	binary.BigEndian.PutUint64(sq, seq)
	return [][]byte{[]byte(topic), pid, sq, Frame(env)}
}

// LoadMessage is a kv_metrics message carrying one ActiveLoad: the bytes
// Message("kv_metrics", publisherID, seq, Marshal(&a, false), at) builds,
// without reflection, in three allocations.
func LoadMessage(publisherID, seq uint64, a ActiveLoad, at time.Time) [][]byte {
	const topic = "kv_metrics"
	var scratch [160]byte
	payload := AppendActiveLoad(scratch[:0], &a)
	env := AppendEnvelope(make([]byte, 5, 5+envelopeMax+len(payload)), topic, publisherID, seq, payload, at)
	env[0] = 1
	binary.BigEndian.PutUint32(env[1:5], uint32(len(env)-5))
	head := make([]byte, 0, len(topic)+16)
	head = append(head, topic...)
	head = binary.BigEndian.AppendUint64(head, publisherID)
	head = binary.BigEndian.AppendUint64(head, seq)
	return [][]byte{head[:len(topic)], head[len(topic) : len(topic)+8], head[len(topic)+8:], env}
}
