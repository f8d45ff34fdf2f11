package fleet_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"switchyard/fakefleet/engine/perf"
	"switchyard/fakefleet/engineworker"
	"switchyard/fakefleet/fleet"
	"switchyard/fakefleet/worker"
)

// A fleet on a profile advertises the profile's vLLM numbers on its
// cards (a card value the spec sets wins), serves through the router,
// and its engines refuse a prompt beyond the advertised context length.
func TestAProfileSetsTheCardsAndTheEngine(t *testing.T) {
	p, err := perf.LoadProfile("../../profiles/llama-3.1-8b-h100-tp1.json")
	require.NoError(t, err)
	blocks, err := p.KVBlocks()
	require.NoError(t, err)
	s := start(t, fleet.Spec{Aggregated: 1, MaxNumSeqs: 32, SpeedupRatio: 100, LeaseTTL: 2, Engine: true, Profile: &p}, "3s")

	ws := s.router.Discovery().Snapshot().Workers
	require.Len(t, ws, 1)
	w := ws[0]
	require.EqualValues(t, 16, w.BlockSize)
	rt := w.Runtime
	require.NotNil(t, rt.TotalKVBlocks)
	require.EqualValues(t, blocks, *rt.TotalKVBlocks, "KV capacity from the GPU's memory")
	require.EqualValues(t, 2048, *rt.MaxNumBatchedTokens)
	require.EqualValues(t, 32, *rt.MaxNumSeqs, "the spec's value wins")
	require.EqualValues(t, 8192, *rt.ContextLength, "the profile's max_model_len")

	_, _, err = s.ask(t, "served on the H100 profile")
	require.NoError(t, err)

	gen := s.fleet.Members()[0].Worker
	_, err = gen.Generate(context.Background(), worker.Request{PromptTokens: 8190, MaxTokens: 8}, func(string) error { return nil })
	require.ErrorIs(t, err, engineworker.ErrTooLarge, "prompt + output beyond max_model_len")
	_, err = gen.Generate(context.Background(), worker.Request{PromptTokens: 8000, MaxTokens: 8}, func(string) error { return nil })
	require.NoError(t, err, "within max_model_len")
}

func TestAProfileNeedsEngineWorkers(t *testing.T) {
	p, err := perf.LoadProfile("../../profiles/llama-3.1-8b-h100-tp1.json")
	require.NoError(t, err)
	_, err = fleet.Start(context.Background(), nil, fleet.Spec{Aggregated: 1, Profile: &p}, nil)
	require.ErrorIs(t, err, fleet.ErrProfileNeedsEngine)
}
