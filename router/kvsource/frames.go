package kvsource

import (
	"encoding/binary"
	"time"

	"switchyard/router/envelope"
	"switchyard/router/kv"
)

// Frames writes e as the kv-events message its worker would have
// published (Dynamo's event-plane frames around a named RouterEvent), so
// the core applies, records and replays it with the very decoder and
// index rules of a direct subscription. The worker is the publisher; seq
// is the stream's event id. e must be valid.
func Frames(e *Event, seq uint64, at time.Time) [][]byte {
	tier, _ := e.tier()
	p := make([]byte, 0, 96+len(e.Blocks)*40+len(e.BlockHashes)*10)
	p = appendMapHeader(p, 3)
	p = appendUint(appendStr(p, "worker_id"), e.WorkerID)
	p = appendStr(appendStr(p, "storage_tier"), tierNames[tier])
	p = appendMapHeader(appendStr(p, "event"), 3)
	p = appendUint(appendStr(p, "event_id"), e.EventID)
	p = appendStr(p, "data")
	switch e.Kind {
	case KindStored:
		p = appendMapHeader(p, 1)
		p = appendMapHeader(appendStr(p, "stored"), 2)
		p = appendStr(p, "parent_hash")
		if e.ParentHash != nil {
			p = appendUint(p, *e.ParentHash)
		} else {
			p = append(p, 0xc0)
		}
		p = appendArrayHeader(appendStr(p, "blocks"), len(e.Blocks))
		for _, b := range e.Blocks {
			p = appendMapHeader(p, 2)
			p = appendUint(appendStr(p, "block_hash"), b.BlockHash)
			p = appendUint(appendStr(p, "tokens_hash"), b.TokensHash)
		}
	case KindRemoved:
		p = appendMapHeader(p, 1)
		p = appendMapHeader(appendStr(p, "removed"), 1)
		p = appendArrayHeader(appendStr(p, "block_hashes"), len(e.BlockHashes))
		for _, h := range e.BlockHashes {
			p = appendUint(p, h)
		}
	default:
		p = appendStr(p, "cleared")
	}
	p = appendUint(appendStr(p, "dp_rank"), uint64(e.DPRank))

	env := make([]byte, envelope.FrameHeaderSize, envelope.FrameHeaderSize+64+len(p))
	env[0] = envelope.FrameVersion
	env = appendMapHeader(env, 5)
	env = appendStr(appendStr(env, "topic"), kv.KVEventsTopic)
	env = appendUint(appendStr(env, "publisher_id"), e.WorkerID)
	env = appendUint(appendStr(env, "sequence"), seq)
	env = appendUint(appendStr(env, "published_at"), uint64(max(at.UnixMilli(), 0)))
	env = appendBin(appendStr(env, "payload"), p)
	binary.BigEndian.PutUint32(env[1:envelope.FrameHeaderSize], uint32(len(env)-envelope.FrameHeaderSize))

	pid := binary.BigEndian.AppendUint64(nil, e.WorkerID)
	sq := binary.BigEndian.AppendUint64(nil, seq)
	return [][]byte{[]byte(kv.KVEventsTopic), pid, sq, env}
}

// msgpack append helpers for the fixed shapes above.

func appendUint(b []byte, v uint64) []byte {
	switch {
	case v <= 0x7f:
		return append(b, byte(v))
	case v <= 0xff:
		return append(b, 0xcc, byte(v))
	case v <= 0xffff:
		return binary.BigEndian.AppendUint16(append(b, 0xcd), uint16(v))
	case v <= 0xffffffff:
		return binary.BigEndian.AppendUint32(append(b, 0xce), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xcf), v)
}

// appendStr writes a str of at most 255 bytes (keys and tier names).
func appendStr(b []byte, s string) []byte {
	if len(s) < 32 {
		b = append(b, 0xa0|byte(len(s)))
	} else {
		b = append(b, 0xd9, byte(len(s)))
	}
	return append(b, s...)
}

func appendBin(b, p []byte) []byte {
	switch n := len(p); {
	case n <= 0xff:
		b = append(b, 0xc4, byte(n))
	case n <= 0xffff:
		b = binary.BigEndian.AppendUint16(append(b, 0xc5), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, 0xc6), uint32(n))
	}
	return append(b, p...)
}

func appendArrayHeader(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x90|byte(n))
	case n <= 0xffff:
		return binary.BigEndian.AppendUint16(append(b, 0xdc), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, 0xdd), uint32(n))
}

// appendMapHeader writes a fixmap header (n < 16 here).
func appendMapHeader(b []byte, n int) []byte { return append(b, 0x80|byte(n)) }
