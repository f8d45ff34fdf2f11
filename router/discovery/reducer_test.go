package discovery

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"switchyard/router/events"
)

func TestFixtureFleetMaterializesBothLayouts(t *testing.T) {
	r := NewReducer(nil, nil)
	v := fold(r,
		events.DiscoveryResync{At: t0, Namespace: "dynamo", Records: loadFixture(t, "disagg_scoped")})
	require.Len(t, v.Workers, 2)
	decode, prefill := v.Workers[0], v.Workers[1] // sorted by instance id
	require.Equal(t, uint64(0x1a7f2b), decode.InstanceID, "hex instance_id string joins the numeric card id")
	require.Equal(t, RoleDecode, decode.Role)
	require.Equal(t, "Qwen/Qwen3-32B", decode.Model)
	require.Equal(t, uint32(64), decode.BlockSize)
	require.Equal(t, uint32(2), decode.Runtime.DPStartRank)
	require.Equal(t, uint32(4), decode.Runtime.DPSize)
	require.True(t, decode.Runtime.DPDeclared)
	require.Equal(t, uint64(12000), *decode.Runtime.TotalKVBlocks)
	require.Equal(t, "dynamo/prefill/generate", decode.Runtime.DisaggregatedEndpoint)
	require.Equal(t, uint64(7465265302745285), prefill.InstanceID)
	require.Equal(t, RolePrefill, prefill.Role, "worker_type is case-insensitive")
	require.Equal(t, t0, prefill.FirstSeen)
	require.Contains(t, string(prefill.Card), `"slug"`, "the opaque card is retained")

	require.Len(t, v.Publishers, 2, "active_sequences_events is skipped silently")
	require.Equal(t, TopicKVEvents, v.Publishers[0].Topic)
	require.Equal(t, "component", v.Publishers[0].ScopeKind)
	require.Equal(t, TopicLoad, v.Publishers[1].Topic)
	require.Equal(t, uint64(2046539), v.Publishers[1].PublisherID)
	require.Equal(t, "endpoint", v.Publishers[1].ScopeKind)
	require.Equal(t, "generate", v.Publishers[1].Endpoint)
	require.Equal(t, "tcp://10.0.0.7:41000", v.Publishers[1].Address)

	r2 := NewReducer(nil, nil)
	v2 := fold(r2, events.DiscoveryResync{At: t0, Namespace: "dynamo", Records: loadFixture(t, "legacy_layout")})
	require.Len(t, v2.Workers, 1, "only the generate endpoint becomes a worker")
	w := v2.Workers[0]
	require.Equal(t, uint64(42), w.InstanceID)
	require.Equal(t, RoleAggregated, w.Role, "backend component lets the legacy card decide: prefill|decode = aggregated")
	require.Equal(t, "Qwen/Qwen3-0.6B", w.Model, "the LoRA card never joins")
	require.False(t, w.Runtime.DPDeclared)
	require.Equal(t, uint32(1), w.Runtime.DPSize)
	require.Len(t, v2.Publishers, 2)
	require.Equal(t, "Nats", v2.Publishers[0].TransportKind)
	require.Equal(t, "namespace", v2.Publishers[1].ScopeKind, "legacy channel without component is namespace-scoped")
}

func TestRoleRules(t *testing.T) {
	cases := []struct {
		component  string
		workerType any // nil = no card
		want       Role
		excluded   bool
	}{
		{"prefill", nil, RolePrefill, false},
		{"decode", nil, RoleDecode, false},
		{"backend", nil, RoleUnknown, false},
		{"prefill", "prefill", RolePrefill, false},
		{"prefill", "decode", 0, true},
		{"decode", "aggregated", 0, true},
		{"decode", "Prefill|Decode", 0, true},
		{"decode", "encode", RoleDecode, false},
		{"decode", "something-new", RoleDecode, false},
		{"backend", "aggregated", RoleAggregated, false},
		{"backend", "DECODE", RoleDecode, false},
		{"backend", "something-new", RoleUnknown, false},
		{"backend", "", RoleUnknown, false},
		{"VllmWorker", "prefill", RolePrefill, false},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s/%v", c.component, c.workerType), func(t *testing.T) {
			cnt := counter{}
			r := NewReducer(nil, cnt.inc)
			evs := []events.Event{put("dynamo", "v1/instances/dynamo/"+c.component+"/generate/a", endpointJSON(c.component, "generate", 10), t0)}
			if c.workerType != nil {
				evs = append(evs, put("dynamo", "v1/mdc/dynamo/"+c.component+"/generate/a",
					cardJSON(c.component, "generate", 10, map[string]any{"display_name": "m", "worker_type": c.workerType}), t0))
			}
			v := fold(r, evs...)
			if c.excluded {
				require.Empty(t, v.Workers)
				require.Equal(t, 1, cnt["excluded"])
				// Logged and counted once while the disagreement lasts.
				r.Apply(put("dynamo", "v1/instances/dynamo/other/generate/b", endpointJSON("other", "generate", 11), t0))
				r.View()
				require.Equal(t, 1, cnt["excluded"])
				return
			}
			require.Len(t, v.Workers, 1)
			require.Equal(t, c.want, v.Workers[0].Role)
		})
	}
}

func TestCardJoinRules(t *testing.T) {
	ep := put("dynamo", "v1/instances/dynamo/decode/generate/a", endpointJSON("decode", "generate", 10), t0)
	legacy := put("dynamo", "v1/mdc/dynamo/decode/generate/a", cardJSON("", "", "a", map[string]any{"display_name": "legacy"}), t0)
	scoped := put("dynamo", "v1/mdc/dynamo/decode/generate/a2", cardJSON("decode", "generate", 10, map[string]any{"display_name": "scoped"}), t0)
	otherEndpoint := put("dynamo", "v1/mdc/dynamo/decode/load_metrics/a", cardJSON("decode", "load_metrics", 10, map[string]any{"display_name": "wrong"}), t0)
	lora := put("dynamo", "v1/mdc/dynamo/decode/generate/a/lora", map[string]any{"type": "Model", "component": "decode", "endpoint": "generate",
		"instance_id": 10, "model_suffix": "x", "card_json": map[string]any{"display_name": "lora"}}, t0)

	model := func(evs ...events.Event) string {
		v := fold(NewReducer(nil, nil), evs...)
		require.Len(t, v.Workers, 1)
		return v.Workers[0].Model
	}
	require.Equal(t, "legacy", model(ep, legacy))
	require.Equal(t, "scoped", model(ep, legacy, scoped), "scoped card takes precedence over legacy")
	require.Equal(t, "scoped", model(ep, scoped, legacy))
	require.Equal(t, "", model(ep, otherEndpoint), "a card joins only its own endpoint")
	require.Equal(t, "", model(ep, lora), "LoRA cards never join")
	require.Equal(t, "legacy", model(ep, lora, legacy))
}

func TestParseFailureSkipsOneRecord(t *testing.T) {
	cnt := counter{}
	r := NewReducer(nil, cnt.inc)
	good := put("dynamo", "v1/instances/dynamo/decode/generate/a", endpointJSON("decode", "generate", 10), t0)
	v := fold(r, good,
		put("dynamo", "v1/instances/dynamo/decode/generate/b", "{not json", t0),
		put("dynamo", "v1/instances/dynamo/decode/generate/c", map[string]any{"type": "Endpoint", "component": "decode", "endpoint": "generate"}, t0),
		put("dynamo", "v1/instances/dynamo/decode/generate/d", endpointJSON("decode", "generate", -5), t0),
		put("dynamo", "v1/instances/dynamo/decode/generate/e", endpointJSON("decode", "generate", "zz"), t0),
		put("dynamo", "v1/instances/dynamo/decode/generate/f", `{"component":"decode"}`, t0),
		put("dynamo", "v1/event_channels/namespace/dynamo/topic/kv_metrics/1", `{"type":"EventChannel","topic":"kv_metrics"}`, t0),
		put("dynamo", "v1/event_channels/namespace/dynamo/topic/kv_metrics/2", `{"type":"EventChannel","topic":"kv_metrics","instance_id":2,"scope":"bad"}`, t0),
	)
	require.Len(t, v.Workers, 1)
	require.Equal(t, 7, cnt["malformed"])
	require.Empty(t, v.Publishers)

	// A key whose value turns malformed no longer holds its old record.
	v = fold(r, put("dynamo", "v1/instances/dynamo/decode/generate/a", "[]", t0))
	require.Empty(t, v.Workers)
}

func TestNMinus2Tolerance(t *testing.T) {
	r := NewReducer(nil, nil)
	v := fold(r,
		put("dynamo", "v1/instances/dynamo/decode/generate/a",
			`{"type":"Endpoint","component":"decode","endpoint":"generate","instance_id":10,"brand_new":{"x":1},"transport":{"quic":"future"}}`, t0),
		// kv_cache_block_size is the wrong type: the typed subset fails, the raw card is kept.
		put("dynamo", "v1/mdc/dynamo/decode/generate/a",
			`{"type":"Model","component":"decode","endpoint":"generate","instance_id":10,"card_json":{"display_name":"m","worker_type":"prefill","kv_cache_block_size":"big"}}`, t0),
		put("dynamo", "v1/instances/dynamo/decode/generate/b", `{"type":"SomethingNew","instance_id":3}`, t0),
		put("dynamo", "v1/instances/dynamo/x/generate/c", `{"type":"Endpoint","endpoint":"generate","instance_id":"c"}`, t0),
	)
	require.Len(t, v.Workers, 2)
	w := v.Workers[0]
	require.Equal(t, uint64(10), w.InstanceID)
	require.True(t, w.HasCard)
	require.Equal(t, RoleDecode, w.Role, "no typed subset: the component decides, nothing excluded")
	require.Equal(t, "", w.Model)
	require.Contains(t, string(w.Card), `"big"`)
	require.Equal(t, RoleUnknown, v.Workers[1].Role, "an endpoint with every optional field absent still materializes")
}

func TestDuplicateIdentitiesAreRefusedTogether(t *testing.T) {
	cnt := counter{}
	r := NewReducer(nil, cnt.inc)
	a := put("dynamo", "v1/instances/dynamo/decode/generate/a", endpointJSON("decode", "generate", 10), t0)
	forged := put("dynamo", "v1/instances/dynamo/prefill/generate/a", endpointJSON("prefill", "generate", "a"), t0)
	v := fold(r, a, forged)
	require.Empty(t, v.Workers, "both generate records claiming instance 10 are refused")
	require.Equal(t, 1, cnt["duplicate"])
	// The conflict is logged once while it lasts, not on every pass.
	v = fold(r, put("dynamo", "v1/instances/dynamo/decode/generate/z", endpointJSON("decode", "generate", 99), t0))
	require.Len(t, v.Workers, 1)
	require.Equal(t, 1, cnt["duplicate"])
	// Deleting the extra record restores the survivor.
	v = fold(r, del("dynamo", forged.Key, t0))
	require.Len(t, v.Workers, 2)
	require.Equal(t, RoleDecode, v.Workers[0].Role)
	// The same conflict coming back is logged again.
	fold(r, forged)
	require.Equal(t, 2, cnt["duplicate"])

	// Duplicate base cards: the worker stays, without a card.
	r = NewReducer(nil, cnt.inc)
	v = fold(r, a,
		put("dynamo", "v1/mdc/dynamo/decode/generate/a", cardJSON("decode", "generate", 10, map[string]any{"display_name": "one", "worker_type": "decode"}), t0),
		put("dynamo", "v1/mdc/dynamo/decode/generate/b", cardJSON("decode", "generate", "a", map[string]any{"display_name": "two", "worker_type": "prefill"}), t0))
	require.Len(t, v.Workers, 1)
	require.False(t, v.Workers[0].HasCard)
	require.Equal(t, RoleDecode, v.Workers[0].Role, "refused cards never exclude the worker")

	// Duplicate publisher ids: neither channel is followed.
	r = NewReducer(nil, cnt.inc)
	v = fold(r,
		put("dynamo", "v1/event_channels/namespace/dynamo/topic/kv_metrics/1", channelJSON("kv_metrics", 7, "tcp://127.0.0.1:1"), t0),
		put("dynamo", "v1/event_channels/namespace/dynamo/topic/kv-events/1", channelJSON("kv-events", 7, "tcp://127.0.0.1:2"), t0),
		put("dynamo", "v1/event_channels/namespace/dynamo/topic/kv-events/2", channelJSON("kv-events", 8, "tcp://127.0.0.1:3"), t0))
	require.Len(t, v.Publishers, 1)
	require.Equal(t, uint64(8), v.Publishers[0].PublisherID)
}

func TestNamespaceComesFromThePrefixNeverThePayload(t *testing.T) {
	r := NewReducer(nil, nil)
	rec := endpointJSON("decode", "generate", 10)
	rec["namespace"] = "victim"
	v := fold(r,
		put("attacker", "v1/instances/attacker/decode/generate/a", rec, t0),
		put("victim", "v1/instances/victim/decode/generate/a", endpointJSON("decode", "generate", 10), t0))
	require.Len(t, v.Workers, 2, "same instance id in two namespaces is two workers")
	require.Equal(t, "attacker", v.Workers[0].Namespace)
	require.Equal(t, "victim", v.Workers[1].Namespace)
}

func TestBounds(t *testing.T) {
	cnt := counter{}
	r := NewReducer(nil, cnt.inc)
	huge := `{"type":"Endpoint","component":"decode","endpoint":"generate","instance_id":10,"pad":"` + strings.Repeat("x", MaxRecordBytes) + `"}`
	v := fold(r, put("dynamo", "v1/instances/dynamo/decode/generate/a", huge, t0))
	require.Empty(t, v.Workers)
	require.Equal(t, 1, cnt["oversized"])

	// A card over MaxRetainedCardBytes keeps the worker and its typed subset.
	bigCard := map[string]any{"display_name": "m", "worker_type": "decode", "kv_cache_block_size": 32,
		"runtime_config": map[string]any{"total_kv_blocks": 5}, "blob": strings.Repeat("y", MaxRetainedCardBytes)}
	v = fold(r, put("dynamo", "v1/instances/dynamo/decode/generate/a", endpointJSON("decode", "generate", 10), t0),
		put("dynamo", "v1/mdc/dynamo/decode/generate/a", cardJSON("decode", "generate", 10, bigCard), t0))
	require.Len(t, v.Workers, 1)
	require.True(t, v.Workers[0].HasCard)
	require.Nil(t, v.Workers[0].Card)
	require.Equal(t, uint32(32), v.Workers[0].BlockSize)
	require.Equal(t, uint64(5), *v.Workers[0].Runtime.TotalKVBlocks)
}

func TestKeyspaceCeiling(t *testing.T) {
	cnt := counter{}
	r := NewReducer(nil, cnt.inc)
	recs := make([]events.DiscoveryRecord, 0, MaxRecordsPerKeyspace+10)
	for i := 0; i < MaxRecordsPerKeyspace+10; i++ {
		key := fmt.Sprintf("v1/instances/dynamo/decode/generate/%06x", i)
		recs = append(recs, put("dynamo", key, endpointJSON("decode", "generate", i), t0).DiscoveryRecord)
	}
	v := fold(r, events.DiscoveryResync{At: t0, Namespace: "dynamo", Records: recs})
	require.Len(t, v.Workers, MaxRecordsPerKeyspace)
	require.Equal(t, 10, cnt["over_capacity"])
	require.Equal(t, uint64(MaxRecordsPerKeyspace-1), v.Workers[len(v.Workers)-1].InstanceID, "lowest keys win, whatever the store order")

	// At capacity an existing key still updates; a new one is refused.
	v = fold(r,
		put("dynamo", recs[0].Key, endpointJSON("decode", "generate", 1<<40), t0.Add(time.Second)),
		put("dynamo", "v1/instances/dynamo/decode/generate/new", endpointJSON("decode", "generate", 1<<41), t0))
	require.Equal(t, 11, cnt["over_capacity"])
	require.Equal(t, uint64(1<<40), v.Workers[len(v.Workers)-1].InstanceID)
	require.Equal(t, MaxRecordsPerKeyspace, r.Len(events.Instances))
	// Model cards have their own ceiling.
	fold(r, put("dynamo", "v1/mdc/dynamo/decode/generate/0", cardJSON("decode", "generate", 0, map[string]any{}), t0))
	require.Equal(t, 1, r.Len(events.Models))
}

func TestResyncPreservesFirstSeenAndIsIdempotent(t *testing.T) {
	reg := NewRegistry()
	f := NewFollower(NewReducer(nil, nil), reg)
	recs := loadFixture(t, "disagg_scoped")
	f.Apply([]events.Event{events.DiscoveryResync{At: t0, Namespace: "dynamo", Records: recs}})
	require.Equal(t, uint64(1), reg.Generation())
	first := reg.Snapshot()

	// Same records an hour later: nothing changes, not even the generation.
	f.Apply([]events.Event{events.DiscoveryResync{At: t0.Add(time.Hour), Namespace: "dynamo", Records: recs}})
	require.Equal(t, uint64(1), reg.Generation())
	require.Same(t, first, reg.Snapshot())

	// A resync without the prefill worker removes it; the decode worker keeps first_seen.
	var rest []events.DiscoveryRecord
	for _, kv := range recs {
		if !strings.Contains(kv.Key, "/prefill/") {
			rest = append(rest, kv)
		}
	}
	f.Apply([]events.Event{events.DiscoveryResync{At: t0.Add(2 * time.Hour), Namespace: "dynamo", Records: rest}})
	s := reg.Snapshot()
	require.Equal(t, uint64(2), s.Generation)
	require.Len(t, s.Workers, 1)
	require.Equal(t, t0, s.Workers[0].FirstSeen)
	_, ok := s.Worker(WorkerKey{"dynamo", 7465265302745285})
	require.False(t, ok)
	w, ok := s.Worker(WorkerKey{"dynamo", 0x1a7f2b})
	require.True(t, ok)
	require.Equal(t, RoleDecode, w.Role)
}

func TestLastUpdatedFollowsValueChanges(t *testing.T) {
	r := NewReducer(nil, nil)
	ep := put("dynamo", "v1/instances/dynamo/decode/generate/a", endpointJSON("decode", "generate", 10), t0)
	card := func(blocks int, at time.Time) events.DiscoveryPut {
		return put("dynamo", "v1/mdc/dynamo/decode/generate/a", cardJSON("decode", "generate", 10,
			map[string]any{"display_name": "m", "runtime_config": map[string]any{"total_kv_blocks": blocks}}), at)
	}
	v := fold(r, ep, card(1, t0.Add(time.Minute)))
	require.Equal(t, t0.Add(time.Minute), v.Workers[0].LastUpdated)
	v = fold(r, card(1, t0.Add(2*time.Minute)))
	require.Equal(t, t0.Add(time.Minute), v.Workers[0].LastUpdated, "an identical value is no update")
	v = fold(r, card(2, t0.Add(3*time.Minute)))
	require.Equal(t, t0.Add(3*time.Minute), v.Workers[0].LastUpdated)
	require.Equal(t, t0, v.Workers[0].FirstSeen)
}

func TestPruneAndReset(t *testing.T) {
	r := NewReducer(nil, nil)
	v := fold(r,
		put("prod", "v1/instances/prod/decode/generate/a", endpointJSON("decode", "generate", 10), t0),
		put("canary", "v1/instances/canary/decode/generate/a", endpointJSON("decode", "generate", 10), t0))
	require.Len(t, v.Workers, 2)
	v = fold(r, events.DiscoveryPrune{At: t0, Keep: []string{"prod"}})
	require.Len(t, v.Workers, 1)
	require.Equal(t, "prod", v.Workers[0].Namespace)
	v = fold(r, events.DiscoveryReset{At: t0})
	require.Empty(t, v.Workers)
}

func TestRegistryNotifiesOnlyOnChange(t *testing.T) {
	reg := NewRegistry()
	ch := reg.Changed()
	gen, moved := reg.Publish(&View{}, t0)
	require.False(t, moved)
	require.Zero(t, gen)
	select {
	case <-ch:
		t.Fatal("woken without a change")
	default:
	}
	w := &Worker{Namespace: "dynamo", InstanceID: 1, FirstSeen: t0}
	gen, moved = reg.Publish(&View{Workers: []*Worker{w}}, t0)
	require.True(t, moved)
	require.Equal(t, uint64(1), gen)
	<-ch // closed
	require.Equal(t, uint64(1), reg.Snapshot().Generation, "the snapshot is swapped before waking")
	copyW := *w
	_, moved = reg.Publish(&View{Workers: []*Worker{&copyW}}, t0.Add(time.Second))
	require.False(t, moved, "an equal view does not bump the generation")
}

func TestRecordOutOfItsKeyspaceIsMalformed(t *testing.T) {
	cnt := counter{}
	r := NewReducer(nil, cnt.inc)
	v := fold(r,
		put("dynamo", "v1/instances/dynamo/decode/generate/a", cardJSON("decode", "generate", 10, map[string]any{}), t0),
		put("dynamo", "v1/mdc/dynamo/decode/generate/a", endpointJSON("decode", "generate", 10), t0),
		put("dynamo", "v1/event_channels/namespace/dynamo/topic/kv_metrics/a", endpointJSON("decode", "generate", 11), t0))
	require.Empty(t, v.Workers)
	require.Equal(t, 3, cnt["malformed"])
}

// A reset reducer is a fresh one: a worker put again right after the
// reset, before any View, is first seen anew, exactly as a new reducer
// would see it (a recording stores a replaced reducer as a reset).
func TestResetForgetsFirstSeen(t *testing.T) {
	key := "v1/instances/dynamo/decode/generate/a"
	r := NewReducer(nil, nil)
	v := fold(r, put("dynamo", key, endpointJSON("decode", "generate", 10), t0))
	require.Equal(t, t0, v.Workers[0].FirstSeen)
	t1 := t0.Add(time.Minute)
	v = fold(r, events.DiscoveryReset{At: t1}, put("dynamo", key, endpointJSON("decode", "generate", 10), t1))
	fresh := fold(NewReducer(nil, nil), put("dynamo", key, endpointJSON("decode", "generate", 10), t1))
	require.Equal(t, t1, v.Workers[0].FirstSeen)
	require.True(t, sameView(fresh, v))
}

// Publishers are spliced into the view as they change; the view stays in
// (namespace, topic, publisher id) order and equals a fresh fold of what
// is held, across namespaces, topic changes and conflicts.
func TestPublishersStaySortedAsTheyChange(t *testing.T) {
	r := NewReducer(nil, nil)
	key := func(ns, topic string, id int) string {
		return fmt.Sprintf("v1/event_channels/namespace/%s/topic/%s/%x", ns, topic, id)
	}
	held := map[string]events.DiscoveryPut{}
	step := func(evs ...events.Event) {
		t.Helper()
		for _, e := range evs {
			switch e := e.(type) {
			case events.DiscoveryPut:
				held[e.Key] = e
			case events.DiscoveryDelete:
				delete(held, e.Key)
			}
		}
		v := fold(r, evs...)
		require.True(t, sort.SliceIsSorted(v.Publishers, func(i, j int) bool {
			return publisherLess(v.Publishers[i], v.Publishers[j])
		}))
		fresh := NewReducer(nil, nil)
		for _, p := range held {
			fresh.Apply(p)
		}
		require.Equal(t, timeless(fresh.View()), timeless(v))
	}
	for _, ns := range []string{"b", "a", "c"} {
		for id := 5; id > 0; id-- {
			step(put(ns, key(ns, "kv_metrics", id), channelJSON("kv_metrics", id, "tcp://10.0.0.1:1"), t0),
				put(ns, key(ns, "kv-events", id+100), channelJSON("kv-events", id+100, "tcp://10.0.0.1:2"), t0))
		}
	}
	require.Len(t, r.View().Publishers, 30)
	step(del("a", key("a", "kv_metrics", 3), t0), del("c", key("c", "kv-events", 101), t0))
	// Publisher 4 of namespace b moves topic under the same key: it moves in the order.
	step(put("b", key("b", "kv_metrics", 4), channelJSON("kv-events", 4, "tcp://10.0.0.1:3"), t0))
	// A second key claims publisher 2 of namespace a: both are refused, then one survives.
	step(put("a", key("a", "kv-events", 2), channelJSON("kv_metrics", 2, "tcp://10.0.0.1:4"), t0))
	step(del("a", key("a", "kv_metrics", 2), t0))
	step(put("a", key("a", "kv_metrics", 3), channelJSON("kv_metrics", 3, "tcp://10.0.0.1:1"), t0))
	require.Len(t, r.View().Publishers, 29)
}
