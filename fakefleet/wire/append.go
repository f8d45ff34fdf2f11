package wire

import (
	"encoding/binary"
	"time"
)

// The simulator publishes millions of blocks per run; these append-style
// encoders write exactly the bytes Marshal does for the fixed structs of
// this package (named maps, compact integers; tested against Marshal),
// without reflection.

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

func appendStr(b []byte, s string) []byte {
	switch n := len(s); {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n <= 0xff:
		b = append(b, 0xd9, byte(n))
	case n <= 0xffff:
		b = binary.BigEndian.AppendUint16(append(b, 0xda), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, 0xdb), uint32(n))
	}
	return append(b, s...)
}

func appendBin(b []byte, p []byte) []byte {
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

func appendMapHeader(b []byte, n int) []byte { return append(b, 0x80|byte(n)) } // n < 16 here

const msgpackNil = 0xc0

// AppendRouterEvent appends ev as Marshal(&ev, false) would.
func AppendRouterEvent(b []byte, ev *RouterEvent) []byte {
	b = appendMapHeader(b, 3)
	b = appendUint(appendStr(b, "worker_id"), ev.WorkerID)
	b = appendStr(appendStr(b, "storage_tier"), ev.StorageTier)
	b = appendMapHeader(appendStr(b, "event"), 3)
	b = appendUint(appendStr(b, "event_id"), ev.Event.EventID)
	b = appendStr(b, "data")
	switch d := ev.Event.Data; {
	case d.Stored != nil:
		b = appendMapHeader(b, 1)
		b = appendMapHeader(appendStr(b, "stored"), 3)
		b = appendStr(b, "parent_hash")
		if d.Stored.ParentHash != nil {
			b = appendUint(b, *d.Stored.ParentHash)
		} else {
			b = append(b, msgpackNil)
		}
		b = appendStr(b, "start_position")
		if d.Stored.StartPosition != nil {
			b = appendUint(b, uint64(*d.Stored.StartPosition))
		} else {
			b = append(b, msgpackNil)
		}
		b = appendStr(b, "blocks")
		if d.Stored.Blocks == nil {
			b = append(b, msgpackNil)
		} else {
			b = appendArrayHeader(b, len(d.Stored.Blocks))
		}
		for _, blk := range d.Stored.Blocks {
			b = appendMapHeader(b, 3)
			b = appendUint(appendStr(b, "block_hash"), blk.BlockHash)
			b = appendUint(appendStr(b, "tokens_hash"), blk.TokensHash)
			b = append(appendStr(b, "mm_extra_info"), msgpackNil)
		}
	case d.Removed != nil:
		b = appendMapHeader(b, 1)
		b = appendMapHeader(appendStr(b, "removed"), 1)
		b = appendStr(b, "block_hashes")
		if d.Removed.BlockHashes == nil {
			b = append(b, msgpackNil)
		} else {
			b = appendArrayHeader(b, len(d.Removed.BlockHashes))
		}
		for _, h := range d.Removed.BlockHashes {
			b = appendUint(b, h)
		}
	default:
		b = appendStr(b, "cleared")
	}
	return appendUint(appendStr(b, "dp_rank"), uint64(ev.Event.DPRank))
}

// AppendActiveLoad appends a as Marshal(a, false) would.
func AppendActiveLoad(b []byte, a *ActiveLoad) []byte {
	opt := func(b []byte, v *uint64) []byte {
		if v == nil {
			return append(b, msgpackNil)
		}
		return appendUint(b, *v)
	}
	b = appendMapHeader(b, 6)
	b = appendUint(appendStr(b, "worker_id"), a.WorkerID)
	b = appendUint(appendStr(b, "dp_rank"), uint64(a.DPRank))
	b = opt(appendStr(b, "active_decode_blocks"), a.ActiveDecodeBlocks)
	b = opt(appendStr(b, "active_prefill_tokens"), a.ActivePrefillTokens)
	b = appendStr(b, "scheduler_load_scope")
	if a.SchedulerLoadScope == nil {
		b = append(b, msgpackNil)
	} else {
		b = appendStr(b, *a.SchedulerLoadScope)
	}
	return opt(appendStr(b, "kv_used_blocks"), a.KVUsedBlocks)
}

// envelopeMax bounds AppendEnvelope's bytes besides the payload, for the
// topics this package uses (at most 10 bytes).
const envelopeMax = 104

// AppendEnvelope appends the envelope Message builds around payload.
func AppendEnvelope(b []byte, topic string, publisherID, seq uint64, payload []byte, at time.Time) []byte {
	b = appendMapHeader(b, 5)
	b = appendStr(appendStr(b, "topic"), topic)
	b = appendUint(appendStr(b, "publisher_id"), publisherID)
	b = appendUint(appendStr(b, "sequence"), seq)
	b = appendUint(appendStr(b, "published_at"), uint64(at.UnixMilli()))
	return appendBin(appendStr(b, "payload"), payload)
}

// KVEventsMessageFast is KVEventsMessage without reflection: the same
// four frames, built in two allocations.
func KVEventsMessageFast(publisherID, seq uint64, ev *RouterEvent, at time.Time) [][]byte {
	// Sized for the worst case (the event besides its blocks is at most 140 bytes and its tier, a stored block 57, the
	// envelope's keys and integers at most 92) so neither buffer regrows.
	payload := AppendRouterEvent(make([]byte, 0, 160+len(ev.StorageTier)+57*blockCount(ev)), ev)
	env := AppendEnvelope(make([]byte, 5, 5+envelopeMax+len(payload)), "kv-events", publisherID, seq, payload, at)
	env[0] = 1
	binary.BigEndian.PutUint32(env[1:5], uint32(len(env)-5))
	head := make([]byte, 0, len("kv-events")+16)
	head = append(head, "kv-events"...)
	head = binary.BigEndian.AppendUint64(head, publisherID)
	head = binary.BigEndian.AppendUint64(head, seq)
	return [][]byte{head[:9], head[9:17], head[17:25], env}
}

func blockCount(ev *RouterEvent) int {
	switch d := ev.Event.Data; {
	case d.Stored != nil:
		return len(d.Stored.Blocks)
	case d.Removed != nil:
		return len(d.Removed.BlockHashes)
	}
	return 0
}
