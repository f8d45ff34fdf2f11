package wire

import (
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// RouterEvent mirrors Dynamo's RouterEvent as the legacy (pre
// residency_domain) publishers write it, which every router version reads.
type RouterEvent struct {
	WorkerID    uint64       `msgpack:"worker_id"`
	StorageTier string       `msgpack:"storage_tier"` // "device" for GPU blocks
	Event       KvCacheEvent `msgpack:"event"`
}

// KvCacheEvent mirrors Dynamo's KvCacheEvent.
type KvCacheEvent struct {
	EventID uint64      `msgpack:"event_id"`
	Data    KvEventData `msgpack:"data"`
	DPRank  uint32      `msgpack:"dp_rank"`
}

// KvEventData is Dynamo's externally tagged KvCacheEventData: set Stored,
// set Removed, or neither for the unit variant "cleared".
type KvEventData struct {
	Stored  *KvStoreData
	Removed *KvRemoveData
}

// KvStoreData mirrors KvCacheStoreData; start_position is always nil here.
type KvStoreData struct {
	ParentHash    *uint64       `msgpack:"parent_hash"`
	StartPosition *uint32       `msgpack:"start_position"`
	Blocks        []StoredBlock `msgpack:"blocks"`
}

// StoredBlock mirrors KvCacheStoredBlockData without multimodal info.
type StoredBlock struct {
	BlockHash   uint64 `msgpack:"block_hash"`
	TokensHash  uint64 `msgpack:"tokens_hash"`
	MMExtraInfo any    `msgpack:"mm_extra_info"`
}

// KvRemoveData mirrors KvCacheRemoveData.
type KvRemoveData struct {
	BlockHashes []uint64 `msgpack:"block_hashes"`
}

var _ msgpack.CustomEncoder = KvEventData{}

// EncodeMsgpack writes serde's external tagging: a one-entry map for the
// newtype variants and a bare string for the unit variant.
func (d KvEventData) EncodeMsgpack(enc *msgpack.Encoder) error {
	switch {
	case d.Stored != nil:
		return enc.Encode(map[string]*KvStoreData{"stored": d.Stored})
	case d.Removed != nil:
		return enc.Encode(map[string]*KvRemoveData{"removed": d.Removed})
	}
	return enc.EncodeString("cleared")
}

// KVEventsMessage is a kv-events message carrying one RouterEvent.
func KVEventsMessage(publisherID, seq uint64, ev RouterEvent, at time.Time) [][]byte {
	return Message("kv-events", publisherID, seq, Marshal(&ev, false), at)
}
