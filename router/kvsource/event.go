package kvsource

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"switchyard/router/kv"
)

// SSE event types of a kv_cache_index stream.
const (
	// TypeKV carries one Event as its data.
	TypeKV = "kv"
	// TypeReset says that events before it are lost: the consumer clears
	// the backend's ranks and carries on from the reset's id.
	TypeReset = "reset"
)

// Kinds of an Event.
const (
	KindStored  = "stored"
	KindRemoved = "removed"
	KindCleared = "cleared"
)

// MaxEventBytes caps one event's data: a store of kv.MaxBlocksPerEvent
// blocks with two 20-digit hashes each fits with room to spare.
const MaxEventBytes = 1 << 20

// Event is the data of a kv event: one KV-cache change of one worker's
// rank, as the worker reported it on its kv-events channel.
type Event struct {
	// WorkerID is the Dynamo instance id of the worker.
	WorkerID uint64 `json:"worker_id"`
	DPRank   uint32 `json:"dp_rank"`
	// EventID is the worker's own kv event id: the router's index skips
	// what it already applied and clears the rank at a gap.
	EventID uint64 `json:"event_id"`
	Kind    string `json:"kind"`
	// Tier is device (absent), host_pinned, disk or external.
	Tier string `json:"tier,omitempty"`
	// Stored: the blocks and the block they chain below (absent: a store
	// from the root).
	ParentHash *uint64       `json:"parent_hash,omitempty"`
	Blocks     []StoredBlock `json:"blocks,omitempty"`
	// Removed: engine block hashes.
	BlockHashes []uint64 `json:"block_hashes,omitempty"`
}

// StoredBlock is one stored block.
type StoredBlock struct {
	BlockHash  uint64 `json:"block_hash"`
	TokensHash uint64 `json:"tokens_hash"`
}

var tierNames = [...]string{kv.TierDevice: "device", kv.TierHostPinned: "host_pinned", kv.TierDisk: "disk", kv.TierExternal: "external"}

// FromKV is the Event of a decoded kv-events event.
func FromKV(ev *kv.Event) Event {
	e := Event{WorkerID: ev.WorkerID, DPRank: ev.DPRank, EventID: ev.EventID}
	if ev.Tier != kv.TierDevice && int(ev.Tier) < len(tierNames) {
		e.Tier = tierNames[ev.Tier]
	}
	switch ev.Kind {
	case kv.Stored:
		e.Kind = KindStored
		if ev.HasParent {
			p := ev.ParentHash
			e.ParentHash = &p
		}
		e.Blocks = make([]StoredBlock, len(ev.Blocks))
		for i, b := range ev.Blocks {
			e.Blocks[i] = StoredBlock{BlockHash: b.BlockHash, TokensHash: b.TokensHash}
		}
	case kv.Removed:
		e.Kind = KindRemoved
		e.BlockHashes = append([]uint64(nil), ev.Removed...)
	default:
		e.Kind = KindCleared
	}
	return e
}

// Errors of ParseEvent.
var (
	ErrEventTooLarge = errors.New("kv event larger than the cap")
	ErrBadEvent      = errors.New("malformed kv event")
)

// ParseEvent decodes and checks one event's data. Unknown fields are
// ignored; every bound is checked.
func ParseEvent(data []byte) (Event, error) {
	if len(data) > MaxEventBytes {
		return Event{}, ErrEventTooLarge
	}
	var e Event
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&e); err != nil {
		return Event{}, fmt.Errorf("%w: %v", ErrBadEvent, err)
	}
	if dec.More() {
		return Event{}, fmt.Errorf("%w: data holds more than one value", ErrBadEvent)
	}
	if err := e.Validate(); err != nil {
		return Event{}, err
	}
	return e, nil
}

// Validate checks the fields the event's kind requires and the bounds.
func (e *Event) Validate() error {
	if _, ok := e.tier(); !ok {
		return fmt.Errorf("%w: unknown tier %q", ErrBadEvent, e.Tier)
	}
	switch e.Kind {
	case KindStored:
		if len(e.Blocks) == 0 || len(e.Blocks) > kv.MaxBlocksPerEvent {
			return fmt.Errorf("%w: a store holds 1 to %d blocks", ErrBadEvent, kv.MaxBlocksPerEvent)
		}
		if len(e.BlockHashes) > 0 {
			return fmt.Errorf("%w: a store carries no block_hashes", ErrBadEvent)
		}
	case KindRemoved:
		if len(e.BlockHashes) == 0 || len(e.BlockHashes) > kv.MaxBlocksPerEvent {
			return fmt.Errorf("%w: a removal names 1 to %d block hashes", ErrBadEvent, kv.MaxBlocksPerEvent)
		}
		if len(e.Blocks) > 0 || e.ParentHash != nil {
			return fmt.Errorf("%w: a removal carries no blocks", ErrBadEvent)
		}
	case KindCleared:
		if len(e.Blocks) > 0 || len(e.BlockHashes) > 0 || e.ParentHash != nil {
			return fmt.Errorf("%w: a clear carries no blocks", ErrBadEvent)
		}
	default:
		return fmt.Errorf("%w: kind must be stored, removed or cleared", ErrBadEvent)
	}
	return nil
}

func (e *Event) tier() (kv.Tier, bool) {
	if e.Tier == "" {
		return kv.TierDevice, true
	}
	for t, n := range tierNames {
		if n == e.Tier {
			return kv.Tier(t), true
		}
	}
	return 0, false
}
