package picker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"switchyard/fakefleet/wire"
	"switchyard/router/discovery"
	"switchyard/router/events"
	"switchyard/router/kv"
)

// Without kv-events, a repeated prompt follows the rank that prefilled it
// until the predicted blocks expire; a kv-events message changes nothing.
func TestPredictedCacheStateFollowsPicks(t *testing.T) {
	a, b := aggregated(1), aggregated(2)
	o := DefaultKVOptions()
	o.PredictCache, o.PredictedTTL = true, 10*time.Second
	f := newKVFixture(t, o, a, b)
	// Equal load before every pick: the workers' samples answer for what
	// was dispatched, so only the cached prefix tells the ranks apart.
	settle := func() {
		for _, w := range []*discovery.Worker{a, b} {
			f.sample(w, 0, wire.ActiveLoad{KVUsedBlocks: u64(50)})
		}
	}
	settle()
	prompt := tokens(0, 160)
	first := f.pickTokens(prompt).Decode.WorkerID
	require.Equal(t, 1, f.kvCounts[KVNoOverlap])
	require.Equal(t, 10, f.tracker.PredictedBlocks())

	// The same prompt again, and again 9 s later: the rank that holds it.
	f.clk.Advance(time.Second)
	settle()
	require.Equal(t, first, f.pickTokens(prompt).Decode.WorkerID)
	f.clk.Advance(9 * time.Second)
	settle()
	require.Equal(t, first, f.pickTokens(prompt).Decode.WorkerID, "predicted again at 1 s, so held until 11 s")
	require.Equal(t, 2, f.kvCounts[KVOverlap])

	// Observed kv-events are ignored while predicting: the other rank's
	// report of the same prompt does not draw the next pick.
	other := map[uint64]*discovery.Worker{1: b, 2: a}[first]
	local := kv.BlockHashes(prompt, 16, kv.Seed("", ""))
	blocks := make([]wire.StoredBlock, len(local))
	for i, h := range local {
		blocks[i] = wire.StoredBlock{BlockHash: h, TokensHash: h}
	}
	ev := wire.RouterEvent{WorkerID: other.InstanceID, StorageTier: "device", Event: wire.KvCacheEvent{
		EventID: 1, Data: wire.KvEventData{Stored: &wire.KvStoreData{Blocks: blocks}}}}
	res := f.tracker.Apply(&events.KVMessage{At: f.clk.Now(), Namespace: "ns", PublisherID: 99,
		Frames: wire.KVEventsMessage(99, 1, ev, f.clk.Now())})
	require.Equal(t, kv.PredictingResult, res)

	// Past the TTL of the last prediction, nothing is held: both ranks
	// compete on load alone again.
	f.clk.Advance(11 * time.Second)
	settle()
	require.Equal(t, 1, f.kvCounts[KVNoOverlap])
	f.pickTokens(prompt)
	require.Equal(t, 2, f.kvCounts[KVNoOverlap], "the prediction expired at 21 s")
	require.Equal(t, 10, f.tracker.PredictedBlocks(), "only the new pick's blocks are held")
}

// Switching back to kv-events clears what was predicted: no removal would
// ever come for it.
func TestLeavingPredictionClearsPredictedBlocks(t *testing.T) {
	a := aggregated(1)
	o := DefaultKVOptions()
	o.PredictCache = true
	f := newKVFixture(t, o, a)
	prompt := tokens(0, 64)
	f.pickTokens(prompt)
	var m kv.Matches
	f.tracker.Match(kv.BlockHashes(prompt, 16, kv.Seed("", "")), &m)
	require.Equal(t, []uint32{4}, m.Blocks)

	f.picker.SetKVOptions(DefaultKVOptions())
	f.tracker.Match(kv.BlockHashes(prompt, 16, kv.Seed("", "")), &m)
	require.Empty(t, m.Blocks)
	require.False(t, f.tracker.Predicting())
}
