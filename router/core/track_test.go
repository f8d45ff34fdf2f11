package core

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"switchyard/fakefleet/registrar"
	"switchyard/router/active"
	"switchyard/router/events"
	"switchyard/router/picker"
)

// twoWorkerCore is a core with two aggregated workers (0x21, 0x22) that
// publish no load samples: only the core's own account tells them apart.
func twoWorkerCore(t *testing.T, name string, kvo picker.KVOptions) *Core {
	t.Helper()
	return twoWorkerCoreWith(t, Options{Picker: name, KV: kvo})
}

func twoWorkerCoreWith(t *testing.T, o Options) *Core {
	t.Helper()
	c, err := New(o)
	require.NoError(t, err)
	var batch []events.Event
	for _, id := range []uint64{0x21, 0x22} {
		w := registrar.Worker{Namespace: "ns", Component: "backend", WorkerType: "aggregated", Model: "m", BlockSize: 16,
			TotalKVBlocks: 1000, MaxNumBatchedTokens: 4096, MaxNumSeqs: 64, ContextLength: 8192, Transport: "127.0.0.1:9/x"}
		recs := registrar.Records(w, id)
		for _, k := range slices.Sorted(maps.Keys(recs)) {
			ks := events.EventChannels
			switch {
			case strings.HasPrefix(k, "v1/instances/"):
				ks = events.Instances
			case strings.HasPrefix(k, "v1/mdc/"):
				ks = events.Models
			}
			batch = append(batch, events.DiscoveryPut{At: t0, Namespace: "ns", DiscoveryRecord: events.DiscoveryRecord{Keyspace: ks, Key: k, Value: recs[k]}})
		}
	}
	c.Discovery(batch)
	require.Len(t, c.Snapshot().Workers, 2)
	return c
}

// Two requests of the same size sit on the two workers; only one has had
// its first token. The next request goes to the worker whose prompt is
// done, whichever that is: the tracked prefill tokens, cleared by
// FirstToken, decide the pick.
func TestTrackedPrefillTokensMoveThePick(t *testing.T) {
	for _, tc := range []struct {
		name string
		kvo  picker.KVOptions
	}{
		{picker.NameLoadTracked, picker.KVOptions{}},
		{picker.NameKV, picker.KVOptions{OverlapScoreCredit: 1, PrefillLoadScale: 1,
			Track: picker.Tracking{PrefillTokens: true, ActiveBlocks: true}}},
	} {
		for _, done := range []int{0, 1} {
			c := twoWorkerCore(t, tc.name, tc.kvo)
			var firsts []picker.Selection
			for i := range 2 {
				req := picker.Request{ID: uint64(i + 1), Model: "m", Namespaces: []string{"ns"}, PromptTokens: 1600, Now: t0}
				sel, ok := c.Pick(Arrival{Req: req})
				require.True(t, ok)
				firsts = append(firsts, sel)
			}
			require.NotEqual(t, firsts[0].Decode.WorkerID, firsts[1].Decode.WorkerID,
				"%s: the second request avoids the first one's prefill", tc.name)
			c.FirstToken(FirstToken{At: t0, RequestID: uint64(done + 1)})
			l := c.Active().Load(active.Rank{Namespace: "ns", WorkerID: firsts[done].Decode.WorkerID})
			require.Equal(t, active.Load{Blocks: 100, Requests: 1}, l, "%s: the first token clears the prefill tokens", tc.name)

			sel, ok := c.Pick(Arrival{Req: picker.Request{ID: 3, Model: "m", Namespaces: []string{"ns"}, PromptTokens: 160, Now: t0}})
			require.True(t, ok)
			require.Equal(t, firsts[done].Decode.WorkerID, sel.Decode.WorkerID,
				"%s: request %d had its first token, so its worker has no prompt left to prefill", tc.name, done+1)
		}
	}
}

// Without tracking the core keeps no account, and Ended frees what it
// does keep.
func TestTrackingOffKeepsNoAccountAndEndedFrees(t *testing.T) {
	c := twoWorkerCore(t, picker.NameLoad, picker.DefaultKVOptions())
	req := picker.Request{ID: 1, Model: "m", Namespaces: []string{"ns"}, PromptTokens: 1600, Now: t0}
	sel, _ := c.Pick(Arrival{Req: req})
	require.Zero(t, c.Active().Len())

	c = twoWorkerCore(t, picker.NameLoadTracked, picker.DefaultKVOptions())
	sel, _ = c.Pick(Arrival{Req: req})
	require.Equal(t, 1, c.Active().Len())
	c.Ended(req, sel, t0, EndedServed)
	require.Zero(t, c.Active().Len())

	// Switching tracking off by a configuration change drops the account.
	c = twoWorkerCore(t, picker.NameLoad, picker.KVOptions{Track: picker.Tracking{PrefillTokens: true}})
	c.Pick(Arrival{Req: req})
	require.Equal(t, 1, c.Active().Len())
	require.NoError(t, c.Configure(ConfigChanged{At: t0, Settings: Settings{Picker: picker.NameLoad}}))
	require.Zero(t, c.Active().Len())
}

// A request beyond the account's bounds is routed, not tracked, and the
// host hears of it.
func TestActiveAccountRefusalIsCounted(t *testing.T) {
	refused := 0
	c := twoWorkerCoreWith(t, Options{Picker: picker.NameLoadTracked, Hooks: Hooks{ActiveRefused: func() { refused++ }}})
	for id := uint64(1); id <= 2*active.MaxPerRank+1; id++ {
		_, ok := c.Pick(Arrival{Req: picker.Request{ID: id, Model: "m", Namespaces: []string{"ns"}, PromptTokens: 16, Now: t0}})
		require.True(t, ok, "a request the account refuses is still routed")
	}
	require.Equal(t, 1, refused)
	require.Equal(t, 2*active.MaxPerRank, c.Active().Len())
}
