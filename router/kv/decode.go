package kv

import (
	"encoding/binary"

	"switchyard/router/envelope/msgpack"
)

// Bounds on one decoded message. Each is checked against the length a
// message declares, before anything is allocated for it.
const (
	// MaxBlocksPerEvent bounds the blocks of one Stored event and the
	// hashes of one Removed event.
	MaxBlocksPerEvent = 8192
	// MaxEventsPerBatch bounds the events of one vLLM KVEventBatch.
	MaxEventsPerBatch = 128
	// MinVLLMBlockSize and MaxVLLMBlockSize bound the block sizes whose
	// vLLM-native stores are hashed; others are refused as unsupported.
	MinVLLMBlockSize = 16
	MaxVLLMBlockSize = 65536
	// MaxHashBytes bounds a block hash sent as bytes (vLLM's sha256 hashes
	// are 32 bytes).
	MaxHashBytes = 64
)

// DecodeResult is why a KV event message was decoded or refused. The set
// is closed; it is the label of switchyard_dynamo_kv_events_total{result}.
type DecodeResult uint8

const (
	// DecodeOK: decoded. Events of a tier other than device decode too;
	// the caller counts them by Event.Tier.
	DecodeOK DecodeResult = iota
	// DecodeMalformed: not the msgpack or framing expected.
	DecodeMalformed
	// DecodeUnknownVersion: an event-plane frame header version other than 1.
	DecodeUnknownVersion
	// DecodeTopicMismatch: frame 0 or the envelope names another topic.
	DecodeTopicMismatch
	// DecodeIdentityMismatch: the frame and envelope publisher ids differ.
	DecodeIdentityMismatch
	// DecodeTooLarge: over a bound (blocks per event, events per batch,
	// payload bytes), refused before allocating.
	DecodeTooLarge
	// DecodeResidencyRefused: a RouterEvent whose residency_domain is
	// present but not "worker".
	DecodeResidencyRefused
	// DecodeUnsupported: well formed, but not something the router can
	// index (a vLLM block size out of range, an unknown medium, a LoRA
	// store without its adapter name).
	DecodeUnsupported
	numDecodeResults
)

var decodeResultNames = [numDecodeResults]string{
	"ok", "malformed", "unknown_version", "topic_mismatch", "identity_mismatch",
	"too_large", "residency_refused", "unsupported",
}

func (r DecodeResult) String() string {
	if r < numDecodeResults {
		return decodeResultNames[r]
	}
	return "malformed"
}

// DecodeResults lists every result, for pre-registering metric series.
func DecodeResults() []DecodeResult {
	out := make([]DecodeResult, numDecodeResults)
	for i := range out {
		out[i] = DecodeResult(i)
	}
	return out
}

// resetEvent zeroes ev but keeps the capacity of its slices, so a reused
// Event decodes without allocating.
func resetEvent(ev *Event) {
	blocks, removed := ev.Blocks[:0], ev.Removed[:0]
	*ev = Event{Blocks: blocks, Removed: removed}
}

// growBlocks returns s emptied with room for n blocks; n is bounded by the
// caller.
func growBlocks(s []StoredBlock, n int) []StoredBlock {
	if cap(s) < n {
		return make([]StoredBlock, 0, n)
	}
	return s[:0]
}

func growHashes(s []uint64, n int) []uint64 {
	if cap(s) < n {
		return make([]uint64, 0, n)
	}
	return s[:0]
}

// First bytes of msgpack values, by family.
func isNilByte(c byte) bool { return c == 0xc0 }
func isStrByte(c byte) bool { return c >= 0xa0 && c <= 0xbf || c >= 0xd9 && c <= 0xdb }
func isBinByte(c byte) bool { return c >= 0xc4 && c <= 0xc6 }
func isMapByte(c byte) bool { return c >= 0x80 && c <= 0x8f || c == 0xde || c == 0xdf }
func isArrayByte(c byte) bool {
	return c >= 0x90 && c <= 0x9f || c == 0xdc || c == 0xdd
}
func isIntByte(c byte) bool {
	return c <= 0x7f || c >= 0xe0 || c >= 0xcc && c <= 0xd3
}

// dec is the msgpack reader plus the buffer it reads, so that the next
// value's type can be peeked and a value's raw bytes captured.
type dec struct {
	r msgpack.Reader
	b []byte
}

func (d *dec) reset(b []byte) {
	d.b = b
	d.r.Reset(b)
}

func (d *dec) off() int { return len(d.b) - d.r.Remaining() }

// peek returns the first byte of the next value, or 0xc1 (never used by
// msgpack) at the end of the input.
func (d *dec) peek() byte {
	if o := d.off(); o < len(d.b) {
		return d.b[o]
	}
	return 0xc1
}

func (d *dec) skip() bool { return d.r.Skip() == nil }

// raw consumes one value and returns its encoding.
func (d *dec) raw() ([]byte, bool) {
	start := d.off()
	if d.r.Skip() != nil {
		return nil, false
	}
	return d.b[start:d.off():d.off()], true
}

// str reads a msgpack str (not bin).
func (d *dec) str() ([]byte, bool) {
	if !isStrByte(d.peek()) {
		return nil, false
	}
	s, err := d.r.Bytes()
	return s, err == nil
}

// optStr reads nil (absent) or a str.
func (d *dec) optStr() (s []byte, present, ok bool) {
	if d.r.IsNil() {
		return nil, false, true
	}
	s, ok = d.str()
	return s, ok, ok
}

func (d *dec) uint() (uint64, bool) {
	v, err := d.r.Uint()
	return v, err == nil
}

// u32 reads an unsigned integer that fits in 32 bits; nil counts as 0,
// as the load decoder does for dp_rank.
func (d *dec) u32OrNil() (uint32, bool) {
	if d.r.IsNil() {
		return 0, true
	}
	v, err := d.r.Uint()
	if err != nil || v > 1<<32-1 {
		return 0, false
	}
	return uint32(v), true
}

// intHash reads a 64-bit hash sent as any msgpack integer. Negative values
// (engines that hash to i64) keep their two's-complement bits, as Dynamo's
// From<i64> for ExternalSequenceBlockHash does.
func (d *dec) intHash() (uint64, bool) {
	c := d.peek()
	switch {
	case c >= 0xe0: // negative fixint
		d.r.Skip()
		return uint64(int64(int8(c))), true
	case c >= 0xd0 && c <= 0xd3:
		start := d.off()
		if d.r.Skip() != nil {
			return 0, false
		}
		p := d.b[start+1 : d.off()]
		switch c {
		case 0xd0:
			return uint64(int64(int8(p[0]))), true
		case 0xd1:
			return uint64(int64(int16(binary.BigEndian.Uint16(p)))), true
		case 0xd2:
			return uint64(int64(int32(binary.BigEndian.Uint32(p)))), true
		}
		return binary.BigEndian.Uint64(p), true
	}
	return d.uint()
}

// parseTier maps Dynamo's StorageTier names and the medium names of
// StorageTier::from_kv_medium to a Tier. Both lists are matched exactly,
// as Dynamo matches them: the serde names are snake_case, the medium names
// upper case.
func parseTier(s []byte) (Tier, bool) {
	switch string(s) {
	case "device", "GPU", "DEVICE":
		return TierDevice, true
	case "host_pinned", "CPU", "CPU_PINNED", "CPU_TIER1":
		return TierHostPinned, true
	case "disk", "CPU_TIER2", "DISK", "NVME", "STORAGE":
		return TierDisk, true
	case "external", "EXTERNAL", "NETWORK", "REMOTE", "SHARED":
		return TierExternal, true
	}
	return 0, false
}
