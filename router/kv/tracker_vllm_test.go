package kv_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"switchyard/router/discovery"
	"switchyard/router/events"
	"switchyard/router/kv"
)

func TestTrackerFoldsVLLMBatches(t *testing.T) {
	tr := kv.NewTracker(nil)
	tr.SetLive(&discovery.Snapshot{View: discovery.View{Workers: []*discovery.Worker{
		{Namespace: "ns", InstanceID: vllmWorker, Role: discovery.RoleAggregated, Runtime: discovery.RuntimeConfig{DPSize: 1}},
	}}})
	toks := vllmTokens(64, 3)
	store := []any{0.5, []any{[]any{"BlockStored", []any{11, 12, 13, 14}, nil, toks, 16, nil, "GPU"}}, nil}
	require.Equal(t, "applied", tr.ApplyVLLM("ns", vllmWorker, vllmFrames(1, store)))

	var m kv.Matches
	tr.Match(kv.BlockHashes(toks, 16, kv.BaseSeed), &m)
	require.Equal(t, uint32(4), m.Of(kv.Rank{Namespace: "ns", WorkerID: vllmWorker}), "the router's hashes of the tokens match")

	require.Equal(t, "replay", tr.ApplyVLLM("ns", vllmWorker, vllmFrames(1, store)))
	remove := []any{0.6, []any{[]any{"BlockRemoved", []any{14}, "GPU"}}, nil}
	require.Equal(t, "applied", tr.ApplyVLLM("ns", vllmWorker, vllmFrames(2, remove)))
	tr.Match(kv.BlockHashes(toks, 16, kv.BaseSeed), &m)
	require.Equal(t, uint32(3), m.Of(kv.Rank{Namespace: "ns", WorkerID: vllmWorker}))

	// A skipped batch sequence clears the rank before applying.
	partial := []any{0.7, []any{[]any{"BlockStored", []any{21}, nil, toks[:16], 16, nil, "GPU"}}, nil}
	require.Equal(t, "gap", tr.ApplyVLLM("ns", vllmWorker, vllmFrames(5, partial)))
	tr.Match(kv.BlockHashes(toks, 16, kv.BaseSeed), &m)
	require.Equal(t, uint32(1), m.Of(kv.Rank{Namespace: "ns", WorkerID: vllmWorker}))

	require.Equal(t, "identity_mismatch", tr.ApplyVLLM("ns", 0xbad, vllmFrames(1, store)))
	require.Equal(t, "malformed", tr.ApplyVLLM("ns", vllmWorker, [][]byte{{1}}))
}

// A three-frame message on a subscription is a vLLM engine's own batch,
// attributed to the subscription's publisher (the endpoint picker's
// standalone mode subscribes to each Pod's engine); losing the
// subscription clears what it reported and forgets its batch numbering,
// so an engine that restarts from sequence 0 is heard again.
func TestTrackerApplyRoutesVLLMMessages(t *testing.T) {
	tr := kv.NewTracker(nil)
	tr.SetLive(&discovery.Snapshot{View: discovery.View{Workers: []*discovery.Worker{
		{Namespace: "ns", InstanceID: vllmWorker, Role: discovery.RoleAggregated, Runtime: discovery.RuntimeConfig{DPSize: 1}},
	}}})
	toks := vllmTokens(64, 3)
	store := []any{0.5, []any{[]any{"BlockStored", []any{11, 12, 13, 14}, nil, toks, 16, nil, "GPU"}}, nil}
	msg := &events.KVMessage{Namespace: "ns", PublisherID: vllmWorker, Frames: vllmFrames(3, store)}
	require.Equal(t, "applied", tr.Apply(msg))
	var m kv.Matches
	rank := kv.Rank{Namespace: "ns", WorkerID: vllmWorker}
	tr.Match(kv.BlockHashes(toks, 16, kv.BaseSeed), &m)
	require.Equal(t, uint32(4), m.Of(rank))

	require.Equal(t, 1, tr.PublisherLost(events.KVPublisherLost{Namespace: "ns", PublisherID: vllmWorker}))
	tr.Match(kv.BlockHashes(toks, 16, kv.BaseSeed), &m)
	require.Zero(t, m.Of(rank))

	restarted := &events.KVMessage{Namespace: "ns", PublisherID: vllmWorker, Frames: vllmFrames(0, store)}
	require.Equal(t, "applied", tr.Apply(restarted))
	tr.Match(kv.BlockHashes(toks, 16, kv.BaseSeed), &m)
	require.Equal(t, uint32(4), m.Of(rank))
}
