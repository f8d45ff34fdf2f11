package core

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"switchyard/fakefleet/registrar"
	"switchyard/fakefleet/wire"
	"switchyard/router/events"
	"switchyard/router/load"
	"switchyard/router/picker"
)

// fleetCore is a core with one aggregated worker (instance 0x21) and its
// kv_metrics publisher, recording to port.
func fleetCore(t *testing.T, port Port, name string) *Core {
	t.Helper()
	c, err := New(Options{Picker: name, Port: port})
	require.NoError(t, err)
	w := registrar.Worker{Namespace: "ns", Component: "backend", WorkerType: "aggregated", Model: "m", BlockSize: 16,
		TotalKVBlocks: 1000, MaxNumBatchedTokens: 4096, MaxNumSeqs: 64, ContextLength: 8192, Transport: "127.0.0.1:9/x",
		Channels: []registrar.Channel{{Topic: "kv_metrics", PublisherID: 5, Endpoint: "tcp://127.0.0.1:9"}}}
	recs := registrar.Records(w, 0x21)
	keys := slices.Sorted(maps.Keys(recs))
	var batch []events.Event
	for _, k := range keys {
		ks := events.EventChannels
		switch {
		case strings.HasPrefix(k, "v1/instances/"):
			ks = events.Instances
		case strings.HasPrefix(k, "v1/mdc/"):
			ks = events.Models
		}
		batch = append(batch, events.DiscoveryPut{At: t0, Namespace: "ns", DiscoveryRecord: events.DiscoveryRecord{Keyspace: ks, Key: k, Value: recs[k]}})
	}
	c.Discovery(batch)
	require.Len(t, c.Snapshot().Workers, 1)
	return c
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// A pick charges the pinned rank with the request until a sample answers
// for it (left unanswered long enough, the rank is stalled), and an ended
// request no longer counts toward the stall: the core, not the picker,
// keeps this account.
func TestPickChargesAndEndedReleases(t *testing.T) {
	c := fleetCore(t, nil, picker.NameLoad)
	key := load.Key{Namespace: "ns", WorkerID: 0x21}
	req := picker.Request{ID: 1, Model: "m", Namespaces: []string{"ns"}, PromptTokens: 1600, Now: t0}
	sel, ok := c.Pick(Arrival{Req: req})
	require.True(t, ok)
	require.Equal(t, uint64(100), sel.PromptBlocks)
	tokens, blocks := c.Store().Unanswered(key, t0)
	require.Equal(t, [2]uint64{1600, 100}, [2]uint64{tokens, blocks})
	later := t0.Add(load.StallAfter)
	require.True(t, c.Store().Stalled(key, later))
	c.Ended(req, sel, t0, "failed")
	require.False(t, c.Store().Stalled(key, later), "an ended request does not stall its rank")
}

// A request served to its end (Ended with EndedServed) leaves its rank's
// backlog at once: a change-driven publisher whose load is back where it
// was sends no sample to answer for it, and the rank must not look busy
// to the next pick. Any other reason keeps counting it.
func TestEndedServedLeavesTheBacklog(t *testing.T) {
	port := &collect{}
	c := fleetCore(t, port, picker.NameLoad)
	key := load.Key{Namespace: "ns", WorkerID: 0x21}
	req := picker.Request{ID: 1, Model: "m", Namespaces: []string{"ns"}, PromptTokens: 1600, Now: t0}
	sel, ok := c.Pick(Arrival{Req: req})
	require.True(t, ok)
	c.Ended(req, sel, t0, "cancelled")
	tokens, blocks := c.Store().Unanswered(key, t0)
	require.Equal(t, [2]uint64{1600, 100}, [2]uint64{tokens, blocks}, "a cancelled request may still run")
	c.Ended(req, sel, t0, EndedServed)
	tokens, blocks = c.Store().Unanswered(key, t0)
	require.Zero(t, tokens+blocks)
	ended := port.outs[len(port.outs)-1].(Ended)
	require.Equal(t, EndedServed, ended.Reason, "the reason is recorded for replay")
}

// A configuration change with the same picker hands it the new KV
// settings (its state, the sampler's included, carries on); another
// picker replaces it; the sample age limit follows; each change is an
// output, so a recording carries it.
func TestConfigureSwapsOrRetunesThePicker(t *testing.T) {
	port := &collect{}
	c := fleetCore(t, port, picker.NameKV)
	first := c.picker
	tuned := picker.DefaultKVOptions()
	tuned.PrefillLoadScale = 8
	require.NoError(t, c.Configure(ConfigChanged{At: t0, Settings: Settings{Picker: picker.NameKV, KV: tuned, MaxStaleness: 7 * time.Second}}))
	require.Same(t, first, c.picker, "same picker, new settings")
	got, ok := c.picker.(*picker.Scheduler).KVOptions()
	require.True(t, ok)
	require.Equal(t, tuned, got)
	require.Equal(t, 7*time.Second, c.Store().MaxStaleness())

	require.NoError(t, c.Configure(ConfigChanged{At: t0, Settings: Settings{Picker: picker.NameLoad}}))
	require.NotSame(t, first, c.picker)
	require.Equal(t, load.DefaultMaxStaleness, c.Store().MaxStaleness(), "unset is the default")
	sel, ok := c.Pick(Arrival{Req: picker.Request{ID: 2, Model: "m", Namespaces: []string{"ns"}, Now: t0}})
	require.True(t, ok)
	require.NotEqual(t, picker.ReasonKVAware, sel.DecodeReason)

	require.Error(t, c.Configure(ConfigChanged{At: t0, Settings: Settings{Picker: "fastest"}}))
	require.Equal(t, picker.NameLoad, c.Settings().Picker, "a refused change changes nothing")

	var changes int
	for _, out := range port.outs {
		if _, ok := out.(ConfigChanged); ok {
			changes++
		}
	}
	require.Equal(t, 2, changes)
}

// A kv_metrics message from the fleet's publisher reaches the store.
func TestLoadMessageReachesTheStore(t *testing.T) {
	c := fleetCore(t, nil, picker.NameLoad)
	res := c.LoadMessage(&events.LoadMessage{At: t0, Namespace: "ns", PublisherID: 5,
		Frames: wire.LoadMessage(5, 1, wire.ActiveLoad{WorkerID: 0x21, KVUsedBlocks: wire.U64(3)}, t0)})
	require.Equal(t, "applied", res.String())
}
