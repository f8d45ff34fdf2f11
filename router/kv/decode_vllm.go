package kv

import (
	"bytes"
	"encoding/binary"

	"switchyard/router/envelope"
)

// VLLMBatch is one decoded vLLM KVEventBatch. Reuse one VLLMBatch per
// subscription: its events, their block lists and its token scratch keep
// their capacity from message to message.
type VLLMBatch struct {
	// Topic aliases frame 0 (kv@<ip>:<port>@<model> on llm-d's publishers).
	Topic []byte
	// Seq is the publisher's batch sequence number (frame 1). vLLM
	// numbers batches, not events, so every event's EventID is 0 and the
	// caller tracks Seq per subscription to notice replays and gaps.
	Seq uint64
	// DPRank is data_parallel_rank (nil or absent: 0), copied into each
	// event.
	DPRank uint32
	// BlockSize is the block size of the batch's stores (0 without
	// stores). Their tokens hashes are right only for requests hashed at
	// the same size: the caller compares it with the model's.
	BlockSize uint32
	// Events are the decoded events, in order.
	Events []Event
	// Skipped counts well-formed events left out of Events: stores and
	// removals of a KV cache group other than 0 (hybrid models), and event
	// types this decoder does not know.
	Skipped int

	tokens []uint32
}

// vllmEvent holds the raw msgpack of each field of one event, nil when
// absent, so the fields can be read in the order their meaning needs
// rather than the order they arrive in.
type vllmEvent struct {
	tag                          []byte
	hashes, parent, tokens       []byte
	blockSize, loraID, medium    []byte
	loraName, metadata, groupIdx []byte
}

// DecodeVLLMBatch reads one message of vLLM's own KV event publisher:
// three frames [topic, seq (u64 big-endian), payload], the payload a
// msgpack KVEventBatch, positional (msgspec array_like) or named. Events
// are attributed to workerID, which the caller knows from the subscription.
// A batch is decoded whole or refused whole. See docs/kv-events.md.
func DecodeVLLMBatch(frames [][]byte, workerID uint64, b *VLLMBatch) DecodeResult {
	b.Topic, b.Seq, b.DPRank, b.BlockSize, b.Events, b.Skipped = nil, 0, 0, 0, b.Events[:0], 0
	if len(frames) != 3 || len(frames[1]) != 8 {
		return DecodeMalformed
	}
	if len(frames[2]) > envelope.KVEventLimits.MaxFrameBytes {
		return DecodeTooLarge
	}
	b.Topic = frames[0]
	b.Seq = binary.BigEndian.Uint64(frames[1])
	res := b.decode(frames[2], workerID)
	if res != DecodeOK {
		b.BlockSize, b.Events, b.Skipped = 0, b.Events[:0], 0
	}
	return res
}

func (b *VLLMBatch) decode(payload []byte, workerID uint64) DecodeResult {
	var d dec
	d.reset(payload)
	haveEvents := false
	var dpRank uint32
	field := func(f int) DecodeResult {
		switch f {
		case 1:
			if res := b.events(&d, workerID); res != DecodeOK {
				return res
			}
			haveEvents = true
		case 2:
			v, ok := d.u32OrNil()
			if !ok {
				return DecodeMalformed
			}
			dpRank = v
		default: // ts and later fields
			if !d.skip() {
				return DecodeMalformed
			}
		}
		return DecodeOK
	}
	switch c := d.peek(); {
	case isArrayByte(c):
		n, err := d.r.ArrayLen()
		if err != nil {
			return DecodeMalformed
		}
		for i := range n {
			if res := field(min(i, 3)); res != DecodeOK {
				return res
			}
		}
	case isMapByte(c):
		n, err := d.r.MapLen()
		if err != nil {
			return DecodeMalformed
		}
		for range n {
			k, ok := d.str()
			if !ok {
				return DecodeMalformed
			}
			f := 3
			switch string(k) {
			case "events":
				f = 1
			case "data_parallel_rank", "attn_dp_rank":
				f = 2
			}
			if res := field(f); res != DecodeOK {
				return res
			}
		}
	default:
		return DecodeMalformed
	}
	if !haveEvents {
		return DecodeMalformed
	}
	b.DPRank = dpRank
	for i := range b.Events {
		b.Events[i].DPRank = dpRank
	}
	return DecodeOK
}

// add appends an event, reusing the slices of the one that last held its
// place.
func (b *VLLMBatch) add() *Event {
	n := len(b.Events)
	if n < cap(b.Events) {
		b.Events = b.Events[:n+1]
	} else {
		b.Events = append(b.Events, Event{})
	}
	e := &b.Events[n]
	resetEvent(e)
	return e
}

func (b *VLLMBatch) events(d *dec, workerID uint64) DecodeResult {
	b.Events, b.Skipped = b.Events[:0], 0
	n, err := d.r.ArrayLen()
	if err != nil {
		return DecodeMalformed
	}
	if n > MaxEventsPerBatch {
		return DecodeTooLarge
	}
	for range n {
		var f vllmEvent
		if res := f.read(d); res != DecodeOK {
			return res
		}
		if res := b.event(&f, workerID); res != DecodeOK {
			return res
		}
	}
	return DecodeOK
}

// read captures one event's fields. Positional events are arrays whose
// first element is the tag; named events are maps with the tag under
// "type" (msgspec's tag field).
func (f *vllmEvent) read(d *dec) DecodeResult {
	switch c := d.peek(); {
	case isArrayByte(c):
		n, err := d.r.ArrayLen()
		if err != nil || n == 0 {
			return DecodeMalformed
		}
		var ok bool
		if f.tag, ok = d.str(); !ok {
			return DecodeMalformed
		}
		for i := 1; i < n; i++ {
			v, ok := d.raw()
			if !ok {
				return DecodeMalformed
			}
			f.positional(i, v)
		}
	case isMapByte(c):
		n, err := d.r.MapLen()
		if err != nil {
			return DecodeMalformed
		}
		for range n {
			k, ok := d.str()
			if !ok {
				return DecodeMalformed
			}
			v, ok := d.raw()
			if !ok || !f.named(k, v) {
				return DecodeMalformed
			}
		}
	default:
		return DecodeMalformed
	}
	if f.tag == nil {
		return DecodeMalformed
	}
	return DecodeOK
}

// positional places element i by the field order of the event's type.
// BlockStored: block_hashes, parent_block_hash, token_ids, block_size,
// lora_id, medium, lora_name (vLLM) or metadata (SGLang's salted stores, a
// map), extra_keys, group_idx, then fields this decoder skips.
// BlockRemoved: block_hashes, medium, group_idx.
func (f *vllmEvent) positional(i int, v []byte) {
	switch string(f.tag) {
	case "BlockStored":
		switch i {
		case 1:
			f.hashes = v
		case 2:
			f.parent = v
		case 3:
			f.tokens = v
		case 4:
			f.blockSize = v
		case 5:
			f.loraID = v
		case 6:
			f.medium = v
		case 7:
			if isMapByte(v[0]) {
				f.metadata = v
			} else {
				f.loraName = v
			}
		case 9:
			f.groupIdx = v
		}
	case "BlockRemoved":
		switch i {
		case 1:
			f.hashes = v
		case 2:
			f.medium = v
		case 3:
			f.groupIdx = v
		}
	}
}

// named places a field by its name; it fails only on a tag that is not
// a str.
func (f *vllmEvent) named(k, v []byte) bool {
	switch string(k) {
	case "type":
		s, present, ok := readStr(v)
		if !ok || !present {
			return false
		}
		f.tag = s
	case "block_hashes":
		f.hashes = v
	case "parent_block_hash":
		f.parent = v
	case "token_ids":
		f.tokens = v
	case "block_size":
		f.blockSize = v
	case "lora_id":
		f.loraID = v
	case "medium":
		f.medium = v
	case "lora_name":
		f.loraName = v
	case "metadata":
		f.metadata = v
	case "group_idx":
		f.groupIdx = v
	}
	return true
}

// absent reports a field that is missing or nil.
func absent(v []byte) bool { return len(v) == 0 || isNilByte(v[0]) }

// readStr reads a raw str field (nil or absent: not present).
func readStr(v []byte) (s []byte, present, ok bool) {
	if absent(v) {
		return nil, false, true
	}
	var d dec
	d.reset(v)
	s, ok = d.str()
	return s, ok, ok
}

func (b *VLLMBatch) event(f *vllmEvent, workerID uint64) DecodeResult {
	tag := f.tag
	switch string(tag) {
	case "AllBlocksCleared":
		e := b.add()
		e.WorkerID, e.Kind = workerID, Cleared
		return DecodeOK
	case "BlockStored", "BlockRemoved":
	default:
		b.Skipped++
		return DecodeOK
	}
	stored := string(tag) == "BlockStored"
	// Validate what is skipped too, so a batch is either well formed or
	// refused, whatever it carries.
	if !absent(f.groupIdx) {
		var d dec
		d.reset(f.groupIdx)
		g, ok := d.uint()
		if !ok {
			return DecodeMalformed
		}
		if g != 0 {
			b.Skipped++
			return DecodeOK
		}
	}
	tier := TierDevice
	if m, present, ok := readStr(f.medium); !ok {
		return DecodeMalformed
	} else if present {
		if tier, ok = parseTier(m); !ok {
			return DecodeUnsupported
		}
	}
	if absent(f.hashes) {
		return DecodeMalformed
	}
	var hd dec
	hd.reset(f.hashes)
	n, err := hd.r.ArrayLen()
	if err != nil {
		return DecodeMalformed
	}
	if n > MaxBlocksPerEvent {
		return DecodeTooLarge
	}
	if !stored {
		e := b.add()
		e.WorkerID, e.Tier, e.Kind = workerID, tier, Removed
		e.Removed = growHashes(e.Removed, n)
		for range n {
			h, ok := hd.vllmHash()
			if !ok {
				return DecodeMalformed
			}
			e.Removed = append(e.Removed, h)
		}
		return DecodeOK
	}
	return b.stored(f, &hd, n, tier, workerID)
}

func (b *VLLMBatch) stored(f *vllmEvent, hd *dec, n int, tier Tier, workerID uint64) DecodeResult {
	if f.tokens == nil || f.blockSize == nil {
		return DecodeMalformed
	}
	var d dec
	d.reset(f.blockSize)
	bs, ok := d.uint()
	if !ok {
		return DecodeMalformed
	}
	if bs < MinVLLMBlockSize || bs > MaxVLLMBlockSize {
		return DecodeUnsupported
	}
	if b.BlockSize != 0 && uint64(b.BlockSize) != bs {
		return DecodeUnsupported // one batch, one block size
	}
	b.BlockSize = uint32(bs)
	// The seed: lora_name and, on SGLang's salted stores, the cache salt.
	loraName, hasName, ok := readStr(f.loraName)
	if !ok {
		return DecodeMalformed
	}
	if !absent(f.loraID) {
		d.reset(f.loraID)
		if _, ok := d.uint(); !ok {
			return DecodeMalformed
		}
		if !hasName || len(loraName) == 0 {
			// An adapter's blocks without the adapter's name cannot be
			// hashed as the router hashes that adapter's requests.
			return DecodeUnsupported
		}
	}
	salt, ok := metadataSalt(f.metadata)
	if !ok {
		return DecodeMalformed
	}
	seed := BaseSeed
	if len(loraName) > 0 || len(salt) > 0 {
		seed = Seed(string(loraName), string(salt))
	}
	var parent uint64
	hasParent := false
	if !absent(f.parent) {
		d.reset(f.parent)
		if parent, ok = d.vllmHash(); !ok {
			return DecodeMalformed
		}
		// vLLM writes nil for a sequence's first block; llm-d's
		// consumers read 0 as that too (their empty block hash), and
		// llm-d-inference-sim's positional events write it.
		hasParent = parent != 0
	}
	// The tokens of the stored blocks, one hash per complete block.
	d.reset(f.tokens)
	nt, err := d.r.ArrayLen()
	if err != nil {
		return DecodeMalformed
	}
	if uint64(nt)/bs != uint64(n) {
		return DecodeMalformed
	}
	if cap(b.tokens) < nt {
		b.tokens = make([]uint32, 0, nt)
	}
	toks := b.tokens[:0]
	for range nt {
		t, ok := d.uint()
		if !ok || t > 1<<32-1 {
			return DecodeMalformed
		}
		toks = append(toks, uint32(t))
	}
	b.tokens = toks
	e := b.add()
	e.WorkerID, e.Tier, e.Kind = workerID, tier, Stored
	e.ParentHash, e.HasParent = parent, hasParent
	e.Blocks = growBlocks(e.Blocks, n)
	if n == 0 {
		return DecodeOK
	}
	local := BlockHashes(toks, int(bs), seed)
	for i := range n {
		h, ok := hd.vllmHash()
		if !ok {
			return DecodeMalformed
		}
		e.Blocks = append(e.Blocks, StoredBlock{BlockHash: h, TokensHash: local[i]})
	}
	return DecodeOK
}

// metadataSalt reads cache_salt from SGLang's BlockStored metadata
// ({"cache_salt": str, ...}); absent metadata has none.
func metadataSalt(v []byte) ([]byte, bool) {
	if absent(v) {
		return nil, true
	}
	var d dec
	d.reset(v)
	n, err := d.r.MapLen()
	if err != nil {
		return nil, false
	}
	var salt []byte
	for range n {
		k, ok := d.str()
		if !ok {
			return nil, false
		}
		if string(k) != "cache_salt" {
			if !d.skip() {
				return nil, false
			}
			continue
		}
		if salt, _, ok = d.optStr(); !ok {
			return nil, false
		}
	}
	return salt, true
}

// vllmHash reads a block hash as vLLM sends it: an integer (negative
// values keep their bits), or bytes (1 to MaxHashBytes of them), folded as
// vLLM folds them when it publishes integers: the big-endian value of the
// bytes modulo 2^64, that is their last eight bytes. The same block thus
// has the same hash whichever of the two forms a publisher uses.
func (d *dec) vllmHash() (uint64, bool) {
	if !isBinByte(d.peek()) {
		return d.intHash()
	}
	s, err := d.r.Bytes()
	if err != nil || len(s) == 0 || len(s) > MaxHashBytes {
		return 0, false
	}
	var buf [8]byte
	if len(s) >= 8 {
		copy(buf[:], s[len(s)-8:])
	} else {
		copy(buf[8-len(s):], s)
	}
	return binary.BigEndian.Uint64(buf[:]), true
}

// ParseVLLMTopic splits llm-d's topic kv@<ip>:<port>@<model> into the
// engine's address and model name (aliasing topic).
func ParseVLLMTopic(topic []byte) (addr, model []byte, ok bool) {
	rest, found := bytes.CutPrefix(topic, []byte("kv@"))
	if !found {
		return nil, nil, false
	}
	addr, model, found = bytes.Cut(rest, []byte("@"))
	if !found || len(addr) == 0 || len(model) == 0 {
		return nil, nil, false
	}
	return addr, model, true
}
