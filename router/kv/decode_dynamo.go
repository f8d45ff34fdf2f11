package kv

import (
	"switchyard/router/envelope"
)

// KVEventsTopic is the event-plane topic of Dynamo's KV cache events.
const KVEventsTopic = "kv-events"

// residency is what a RouterEvent said about residency_domain.
type residency uint8

const (
	residencyLegacy  residency = iota // absent: a legacy publisher
	residencyWorker                   // "worker"
	residencyRefused                  // null, another string, any other value
)

// routerEventDecoder carries the state of one DecodeRouterEvent call.
type routerEventDecoder struct {
	dec
	ev        *Event
	res       DecodeResult // the first refusal (malformed, too_large) met
	residency residency
}

// fail records r (the first one wins) and returns false, to unwind.
func (d *routerEventDecoder) fail(r DecodeResult) bool {
	if d.res == DecodeOK {
		d.res = r
	}
	return false
}

func (d *routerEventDecoder) malformed() bool { return d.fail(DecodeMalformed) }

// DecodeRouterEvent reads the payload of a kv-events message: one Dynamo
// RouterEvent, as a named map (rmp-serde to_vec_named, what publishers
// write) or a positional array (to_vec). ev is overwritten; its Blocks and
// Removed keep their capacity, so a reused Event decodes without
// allocating. ev is meaningful only when the result is DecodeOK. See
// docs/kv-events.md for every rule.
func DecodeRouterEvent(payload []byte, ev *Event) DecodeResult {
	resetEvent(ev)
	d := routerEventDecoder{ev: ev}
	d.reset(payload)
	if !d.routerEvent() {
		if d.res == DecodeOK {
			d.res = DecodeMalformed
		}
		resetEvent(ev)
		return d.res
	}
	if d.residency == residencyRefused {
		resetEvent(ev)
		return DecodeResidencyRefused
	}
	return DecodeOK
}

// RouterEvent field order: worker_id, storage_tier, residency_domain
// (newest publishers only, omitted when missing), event, state_source
// (newest only, last).
func (d *routerEventDecoder) routerEvent() bool {
	haveWorker, haveEvent := false, false
	switch c := d.peek(); {
	case isMapByte(c):
		n, err := d.r.MapLen()
		if err != nil {
			return d.malformed()
		}
		for range n {
			k, ok := d.str()
			if !ok {
				return d.malformed()
			}
			switch string(k) {
			case "worker_id":
				if d.ev.WorkerID, ok = d.uint(); !ok {
					return d.malformed()
				}
				haveWorker = true
			case "storage_tier":
				if !d.tier() {
					return false
				}
			case "residency_domain":
				if !d.residencyDomain() {
					return false
				}
			case "event":
				if !d.kvCacheEvent() {
					return false
				}
				haveEvent = true
			default: // state_source and keys of later versions
				if !d.skip() {
					return d.malformed()
				}
			}
		}
	case isArrayByte(c):
		n, err := d.r.ArrayLen()
		if err != nil || n == 0 {
			return d.malformed()
		}
		var ok bool
		if d.ev.WorkerID, ok = d.uint(); !ok {
			return d.malformed()
		}
		haveWorker = true
		// residency_domain is left out when missing, so positions shift:
		// the event is the first container after worker_id; a string
		// before it is storage_tier (position 1) or residency_domain
		// (position 2).
		for i := 1; i < n; i++ {
			c := d.peek()
			switch {
			case haveEvent: // state_source and later fields
				if !d.skip() {
					return d.malformed()
				}
			case isMapByte(c) || isArrayByte(c):
				if !d.kvCacheEvent() {
					return false
				}
				haveEvent = true
			case i == 1:
				if !d.tier() {
					return false
				}
			case i == 2:
				if !d.residencyDomain() {
					return false
				}
			default:
				return d.malformed()
			}
		}
	default:
		return d.malformed()
	}
	if !haveWorker || !haveEvent {
		return d.malformed()
	}
	return true
}

// tier reads storage_tier: a StorageTier name (absent means device). An
// unknown name fails Dynamo's own deserialization, so it is malformed.
func (d *routerEventDecoder) tier() bool {
	s, ok := d.str()
	if !ok {
		return d.malformed()
	}
	if d.ev.Tier, ok = parseTier(s); !ok {
		return d.malformed()
	}
	return true
}

// residencyDomain reads residency_domain: "worker" is applied; null, any
// other string, or any other value is decoded but refused.
func (d *routerEventDecoder) residencyDomain() bool {
	if isStrByte(d.peek()) {
		s, ok := d.str()
		if !ok {
			return d.malformed()
		}
		if string(s) == "worker" {
			if d.residency != residencyRefused {
				d.residency = residencyWorker
			}
			return true
		}
	} else if !d.skip() {
		return d.malformed()
	}
	d.residency = residencyRefused
	return true
}

// kvCacheEvent reads KvCacheEvent {event_id, data, dp_rank (default 0)}.
func (d *routerEventDecoder) kvCacheEvent() bool {
	haveID, haveData := false, false
	field := func(f int) bool {
		var ok bool
		switch f {
		case 0:
			d.ev.EventID, ok = d.uint()
			haveID = ok
		case 1:
			if !d.eventData() {
				return false
			}
			haveData, ok = true, true
		case 2:
			d.ev.DPRank, ok = d.u32OrNil()
		default:
			ok = d.skip()
		}
		if !ok {
			return d.malformed()
		}
		return true
	}
	switch c := d.peek(); {
	case isMapByte(c):
		n, err := d.r.MapLen()
		if err != nil {
			return d.malformed()
		}
		for range n {
			k, ok := d.str()
			if !ok {
				return d.malformed()
			}
			f := 3
			switch string(k) {
			case "event_id":
				f = 0
			case "data":
				f = 1
			case "dp_rank":
				f = 2
			}
			if !field(f) {
				return false
			}
		}
	case isArrayByte(c):
		n, err := d.r.ArrayLen()
		if err != nil {
			return d.malformed()
		}
		for i := range n {
			if !field(min(i, 3)) {
				return false
			}
		}
	default:
		return d.malformed()
	}
	if !haveID || !haveData {
		return d.malformed()
	}
	return true
}

// Variant indexes of KvCacheEventData, for encoders that tag by index.
const (
	variantStored = iota
	variantRemoved
	variantCleared
)

// eventData reads the externally tagged KvCacheEventData: a one-entry map
// {"stored": {...}} or {"removed": {...}}, or the bare string "cleared".
// Also accepted: the variant's index instead of its name, a [tag, value]
// pair, and {"cleared": nil}.
func (d *routerEventDecoder) eventData() bool {
	d.ev.Blocks, d.ev.Removed = d.ev.Blocks[:0], d.ev.Removed[:0]
	d.ev.HasParent, d.ev.ParentHash = false, 0
	c := d.peek()
	switch {
	case isStrByte(c) || isIntByte(c):
		v, ok := d.variant()
		if !ok || v != variantCleared {
			return d.malformed()
		}
		d.ev.Kind = Cleared
		return true
	case isMapByte(c):
		n, err := d.r.MapLen()
		if err != nil || n != 1 {
			return d.malformed()
		}
	case isArrayByte(c):
		n, err := d.r.ArrayLen()
		if err != nil || n != 2 {
			return d.malformed()
		}
	default:
		return d.malformed()
	}
	v, ok := d.variant()
	if !ok {
		return d.malformed()
	}
	switch v {
	case variantStored:
		d.ev.Kind = Stored
		return d.storeData()
	case variantRemoved:
		d.ev.Kind = Removed
		return d.removeData()
	}
	d.ev.Kind = Cleared
	// A unit variant carries nothing: nil or an empty container.
	switch c := d.peek(); {
	case isNilByte(c):
		d.r.IsNil()
		return true
	case c == 0x90 || c == 0x80:
		return d.skip()
	}
	return d.malformed()
}

// variant reads a variant tag: its snake_case name or its index.
func (d *routerEventDecoder) variant() (int, bool) {
	if isIntByte(d.peek()) {
		v, ok := d.uint()
		if !ok || v > variantCleared {
			return 0, false
		}
		return int(v), true
	}
	s, ok := d.str()
	if !ok {
		return 0, false
	}
	switch string(s) {
	case "stored":
		return variantStored, true
	case "removed":
		return variantRemoved, true
	case "cleared":
		return variantCleared, true
	}
	return 0, false
}

// storeData reads KvCacheStoreData {parent_hash, start_position (newer),
// blocks}. In the positional form start_position may be missing (older
// publishers): blocks is then the second element, told apart by type.
func (d *routerEventDecoder) storeData() bool {
	haveBlocks := false
	switch c := d.peek(); {
	case isMapByte(c):
		n, err := d.r.MapLen()
		if err != nil {
			return d.malformed()
		}
		for range n {
			k, ok := d.str()
			if !ok {
				return d.malformed()
			}
			switch string(k) {
			case "parent_hash":
				if !d.parentHash() {
					return false
				}
			case "start_position":
				if !d.startPosition() {
					return false
				}
			case "blocks":
				if !d.blocks() {
					return false
				}
				haveBlocks = true
			default:
				if !d.skip() {
					return d.malformed()
				}
			}
		}
	case isArrayByte(c):
		n, err := d.r.ArrayLen()
		if err != nil || n < 2 {
			return d.malformed()
		}
		if !d.parentHash() {
			return false
		}
		for i := 1; i < n; i++ {
			switch {
			case haveBlocks:
				if !d.skip() {
					return d.malformed()
				}
			case isArrayByte(d.peek()):
				if !d.blocks() {
					return false
				}
				haveBlocks = true
			case i == 1:
				if !d.startPosition() {
					return false
				}
			default:
				return d.malformed()
			}
		}
	default:
		return d.malformed()
	}
	if !haveBlocks {
		return d.malformed()
	}
	return true
}

func (d *routerEventDecoder) parentHash() bool {
	if d.r.IsNil() {
		d.ev.HasParent, d.ev.ParentHash = false, 0
		return true
	}
	h, ok := d.intHash()
	if !ok {
		return d.malformed()
	}
	d.ev.HasParent, d.ev.ParentHash = true, h
	return true
}

// startPosition checks start_position (nil or a u32); the index does not
// use it.
func (d *routerEventDecoder) startPosition() bool {
	if _, ok := d.u32OrNil(); !ok {
		return d.malformed()
	}
	return true
}

// blocks reads Vec<KvCacheStoredBlockData>, refusing more than
// MaxBlocksPerEvent before allocating.
func (d *routerEventDecoder) blocks() bool {
	n, err := d.r.ArrayLen()
	if err != nil {
		return d.malformed()
	}
	if n > MaxBlocksPerEvent {
		return d.fail(DecodeTooLarge)
	}
	d.ev.Blocks = growBlocks(d.ev.Blocks, n)
	for range n {
		var b StoredBlock
		if !d.storedBlock(&b) {
			return false
		}
		d.ev.Blocks = append(d.ev.Blocks, b)
	}
	return true
}

// storedBlock reads KvCacheStoredBlockData {block_hash, tokens_hash,
// mm_extra_info (skipped, any shape)}.
func (d *routerEventDecoder) storedBlock(b *StoredBlock) bool {
	haveBlock, haveTokens := false, false
	field := func(f int) bool {
		var ok bool
		switch f {
		case 0:
			b.BlockHash, ok = d.intHash()
			haveBlock = ok
		case 1:
			b.TokensHash, ok = d.intHash()
			haveTokens = ok
		default:
			ok = d.skip()
		}
		if !ok {
			return d.malformed()
		}
		return true
	}
	switch c := d.peek(); {
	case isMapByte(c):
		n, err := d.r.MapLen()
		if err != nil {
			return d.malformed()
		}
		for range n {
			k, ok := d.str()
			if !ok {
				return d.malformed()
			}
			f := 2
			switch string(k) {
			case "block_hash":
				f = 0
			case "tokens_hash":
				f = 1
			}
			if !field(f) {
				return false
			}
		}
	case isArrayByte(c):
		n, err := d.r.ArrayLen()
		if err != nil {
			return d.malformed()
		}
		for i := range n {
			if !field(min(i, 2)) {
				return false
			}
		}
	default:
		return d.malformed()
	}
	if !haveBlock || !haveTokens {
		return d.malformed()
	}
	return true
}

// removeData reads KvCacheRemoveData {block_hashes}.
func (d *routerEventDecoder) removeData() bool {
	have := false
	switch c := d.peek(); {
	case isMapByte(c):
		n, err := d.r.MapLen()
		if err != nil {
			return d.malformed()
		}
		for range n {
			k, ok := d.str()
			if !ok {
				return d.malformed()
			}
			if string(k) != "block_hashes" {
				if !d.skip() {
					return d.malformed()
				}
				continue
			}
			if !d.hashList() {
				return false
			}
			have = true
		}
	case isArrayByte(c):
		n, err := d.r.ArrayLen()
		if err != nil || n == 0 {
			return d.malformed()
		}
		if !d.hashList() {
			return false
		}
		have = true
		for i := 1; i < n; i++ {
			if !d.skip() {
				return d.malformed()
			}
		}
	default:
		return d.malformed()
	}
	if !have {
		return d.malformed()
	}
	return true
}

func (d *routerEventDecoder) hashList() bool {
	n, err := d.r.ArrayLen()
	if err != nil {
		return d.malformed()
	}
	if n > MaxBlocksPerEvent {
		return d.fail(DecodeTooLarge)
	}
	d.ev.Removed = growHashes(d.ev.Removed, n)
	for range n {
		h, ok := d.intHash()
		if !ok {
			return d.malformed()
		}
		d.ev.Removed = append(d.ev.Removed, h)
	}
	return true
}

// KVEventsDecoder decodes whole kv-events messages: the four frames and
// the EventEnvelope (router/envelope, payloads up to the transport's
// 1 MiB frame cap), then the RouterEvent inside. It keeps scratch space,
// so it belongs to one goroutine.
type KVEventsDecoder struct {
	frames *envelope.Decoder
	msg    envelope.Message
}

// NewKVEventsDecoder decodes messages on topic kv-events.
func NewKVEventsDecoder() *KVEventsDecoder {
	return &KVEventsDecoder{frames: envelope.NewDecoder(KVEventsTopic, envelope.KVEventLimits.MaxFrameBytes)}
}

// Decode reads one message into ev and returns the frame-level publisher
// id and sequence with the result (valid once the envelope decoded, even
// if the RouterEvent is then refused, so the caller can still track the
// stream's order). In steady state it allocates nothing.
func (d *KVEventsDecoder) Decode(frames [][]byte, ev *Event) (publisherID, sequence uint64, res DecodeResult) {
	switch d.frames.Decode(frames, &d.msg) {
	case envelope.Applied:
	case envelope.UnknownVersion:
		return 0, 0, DecodeUnknownVersion
	case envelope.TopicMismatch:
		return 0, 0, DecodeTopicMismatch
	case envelope.Oversized:
		return 0, 0, DecodeTooLarge
	case envelope.IdentityMismatch:
		return 0, 0, DecodeIdentityMismatch
	default:
		return 0, 0, DecodeMalformed
	}
	return d.msg.PublisherID, d.msg.Sequence, DecodeRouterEvent(d.msg.Envelope.Payload, ev)
}
