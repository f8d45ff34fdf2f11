package kv

// Rank is one data-parallel rank of one worker: what the index tracks
// ownership for, and what a match scores.
type Rank struct {
	Namespace string
	WorkerID  uint64
	DPRank    uint32
}

// EventKind is what a KV cache event did.
type EventKind uint8

// The three kinds of cache change an engine reports.
const (
	Stored EventKind = iota + 1
	Removed
	Cleared
)

func (k EventKind) String() string {
	switch k {
	case Stored:
		return "stored"
	case Removed:
		return "removed"
	case Cleared:
		return "cleared"
	}
	return "unknown"
}

// Tier is where the blocks of an event live. Only the device tier feeds
// the index; other tiers are counted and dropped.
type Tier uint8

// Storage tiers as Dynamo names them (StorageTier).
const (
	TierDevice Tier = iota
	TierHostPinned
	TierDisk
	TierExternal
)

// StoredBlock is one newly cached block: the engine's opaque chained
// block_hash (used to find parents and removals) and tokens_hash, the
// router-side hash of the block's tokens that requests are matched on.
type StoredBlock struct {
	BlockHash  uint64
	TokensHash uint64
}

// Event is one decoded KV cache event for one rank, whichever wire form
// it came in (Dynamo RouterEvent, named or positional; vLLM's own events).
type Event struct {
	WorkerID uint64
	DPRank   uint32
	// EventID is monotonic per publisher; the index keeps a cursor per
	// rank to skip replays and notice gaps. 0 means the source carries no
	// ids (vLLM-native events): no replay or gap detection.
	EventID uint64
	Tier    Tier
	Kind    EventKind
	// Stored: blocks chain below ParentHash (absent for a store from the root).
	ParentHash uint64
	HasParent  bool
	Blocks     []StoredBlock
	// Removed: engine block hashes.
	Removed []uint64
}
