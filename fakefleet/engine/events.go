package engine

// Kind says what a KVEvent reports.
type Kind int

// Event kinds, matching Dynamo's KvCacheEventData variants.
const (
	Stored Kind = iota + 1
	Removed
	Cleared
)

func (k Kind) String() string {
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

// StoredBlock is one newly cached block: its engine (chained) hash and the
// router-side LocalBlockHash of its tokens.
type StoredBlock struct {
	BlockHash, TokensHash uint64
}

// KVEvent is one cache change, numbered by a per-engine monotonic EventID
// starting at 1. Stored blocks form a chain below ParentHash (nil when the
// first block is a prompt's root block).
type KVEvent struct {
	EventID    uint64
	Kind       Kind
	ParentHash *uint64
	Blocks     []StoredBlock
	Removed    []uint64
}
