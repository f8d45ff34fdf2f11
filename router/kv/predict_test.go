package kv_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"switchyard/router/discovery"
	"switchyard/router/kv"
)

// Predicted cache state against a reference model: after any sequence of
// predictions (prompts sharing prefixes, on three ranks, at increasing
// times) and expiries, each rank's match of each prompt is the longest
// prefix whose every block was last predicted on that rank less than the
// TTL ago.
func TestPredictionsMatchAReferenceModel(t *testing.T) {
	const ttl = 10 * time.Second
	ranks := []kv.Rank{{Namespace: "ns", WorkerID: 1}, {Namespace: "ns", WorkerID: 2}, {Namespace: "ns", WorkerID: 3}}
	var workers []*discovery.Worker
	for _, r := range ranks {
		workers = append(workers, &discovery.Worker{Namespace: r.Namespace, InstanceID: r.WorkerID,
			Role: discovery.RoleAggregated, Runtime: discovery.RuntimeConfig{DPSize: 1}})
	}
	// Prompts of 1..8 blocks drawn from a few shared stems.
	var prompts [][]uint64
	for stem := range 3 {
		for n := 1; n <= 8; n++ {
			toks := make([]uint32, 16*n)
			for i := range toks {
				toks[i] = uint32(stem*1000 + i)
			}
			prompts = append(prompts, kv.BlockHashes(toks, 16, kv.BaseSeed))
		}
	}
	for seed := range 20 {
		tr := kv.NewTracker(nil)
		tr.SetLive(&discovery.Snapshot{View: discovery.View{Workers: workers}})
		tr.SetPredicting(true, ttl)
		// last[rank][i][j] is when prompt i's block j was last predicted on rank.
		last := map[kv.Rank]map[uint64]time.Time{}
		now := time.Unix(1000, 0)
		rng := rand.New(rand.NewPCG(uint64(seed), 3))
		for step := range 300 {
			now = now.Add(time.Duration(rng.IntN(3000)) * time.Millisecond)
			if rng.IntN(4) == 0 {
				tr.ExpirePredicted(now)
			} else {
				r, p := ranks[rng.IntN(len(ranks))], prompts[rng.IntN(len(prompts))]
				tr.ExpirePredicted(now)
				require.Equal(t, kv.Applied, tr.Predict(r, p, now))
				if last[r] == nil {
					last[r] = map[uint64]time.Time{}
				}
				for j := range p {
					last[r][prefixKey(p[:j+1])] = now
				}
			}
			var m kv.Matches
			for _, p := range prompts {
				tr.Match(p, &m)
				for _, r := range ranks {
					want := uint32(0)
					for j := range p {
						at, ok := last[r][prefixKey(p[:j+1])]
						if !ok || !now.Before(at.Add(ttl)) {
							break
						}
						want++
					}
					require.Equal(t, want, m.Of(r), "seed %d step %d rank %d prompt of %d blocks", seed, step, r.WorkerID, len(p))
				}
			}
		}
	}
}

// prefixKey names a prefix of blocks by its last block's sequence hash.
func prefixKey(prefix []uint64) uint64 {
	s := kv.SequenceHashes(prefix)
	return s[len(s)-1]
}

// A mode switch clears the index; events are ignored while predicting and
// applied again after.
func TestPredictingIgnoresEventsAndSwitchingClears(t *testing.T) {
	tr := kv.NewTracker(nil)
	tr.SetLive(&discovery.Snapshot{View: discovery.View{Workers: []*discovery.Worker{
		{Namespace: "ns", InstanceID: vllmWorker, Role: discovery.RoleAggregated, Runtime: discovery.RuntimeConfig{DPSize: 1}},
	}}})
	toks := vllmTokens(64, 3)
	store := []any{0.5, []any{[]any{"BlockStored", []any{11, 12, 13, 14}, nil, toks, 16, nil, "GPU"}}, nil}
	require.Equal(t, "applied", tr.ApplyVLLM("ns", vllmWorker, vllmFrames(1, store)))
	rank := kv.Rank{Namespace: "ns", WorkerID: vllmWorker}
	hashes := kv.BlockHashes(toks, 16, kv.BaseSeed)
	var m kv.Matches
	tr.Match(hashes, &m)
	require.Equal(t, uint32(4), m.Of(rank))

	tr.SetPredicting(true, 0)
	tr.Match(hashes, &m)
	require.Equal(t, uint32(0), m.Of(rank), "observed blocks are dropped when prediction starts")
	require.Equal(t, kv.PredictingResult, tr.ApplyVLLM("ns", vllmWorker, vllmFrames(2, store)))
	now := time.Unix(0, 0)
	require.Equal(t, kv.Applied, tr.Predict(rank, hashes[:2], now))
	tr.Match(hashes, &m)
	require.Equal(t, uint32(2), m.Of(rank))
	require.Zero(t, tr.ExpirePredicted(now.Add(kv.DefaultPredictedTTL-time.Nanosecond)))
	require.Equal(t, 2, tr.ExpirePredicted(now.Add(kv.DefaultPredictedTTL)))

	tr.Predict(rank, hashes[:2], now)
	tr.SetPredicting(false, 0)
	tr.Match(hashes, &m)
	require.Equal(t, uint32(0), m.Of(rank), "predicted blocks are dropped when events are followed again")
	require.Zero(t, tr.PredictedBlocks())
	require.Equal(t, "applied", tr.ApplyVLLM("ns", vllmWorker, vllmFrames(3, store)))
}
