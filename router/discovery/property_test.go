package discovery

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"switchyard/router/events"
)

// Record templates the property tests draw from: valid workers, cards that
// join, disagree or collide, channels of two topics (publisher ids collide
// across keys and topics), and garbage.
var valueTemplates = []func(id int) any{
	func(id int) any { return endpointJSON("decode", "generate", id) },
	func(id int) any { return endpointJSON("prefill", "generate", fmt.Sprintf("%x", id)) },
	func(id int) any { return endpointJSON("backend", "load_metrics", id) },
	func(id int) any {
		return cardJSON("decode", "generate", id, map[string]any{"display_name": "m", "worker_type": "decode"})
	},
	func(id int) any {
		return cardJSON("prefill", "generate", id, map[string]any{"display_name": "p", "worker_type": "decode"})
	},
	func(id int) any {
		return cardJSON("", "", id, map[string]any{"display_name": "legacy", "worker_type": "aggregated"})
	},
	func(id int) any { return channelJSON("kv_metrics", id, "tcp://127.0.0.1:9") },
	func(id int) any { return channelJSON("kv-events", id, "tcp://127.0.0.1:8") },
	func(id int) any { return "{garbage" },
}

var keyTemplates = []string{
	"v1/instances/ns/decode/generate/%x",
	"v1/instances/ns/prefill/generate/%x",
	"v1/mdc/ns/decode/generate/%x",
	"v1/mdc/ns/x/y/%x",
	"v1/event_channels/namespace/ns/topic/kv_metrics/%x",
	"v1/event_channels/namespace/ns/topic/kv-events/%x",
}

type op struct {
	key   string
	value []byte // nil = delete
}

func genOps(t *rapid.T) []op {
	n := rapid.IntRange(0, 60).Draw(t, "n")
	ops := make([]op, n)
	for i := range ops {
		key := fmt.Sprintf(rapid.SampledFrom(keyTemplates).Draw(t, "key"), rapid.IntRange(1, 4).Draw(t, "keyid"))
		if rapid.IntRange(0, 4).Draw(t, "del") == 0 {
			ops[i] = op{key: key}
			continue
		}
		tmpl := rapid.IntRange(0, len(valueTemplates)-1).Draw(t, "tmpl")
		v := put("ns", key, valueTemplates[tmpl](rapid.IntRange(1, 4).Draw(t, "id")), t0).Value
		ops[i] = op{key: key, value: v}
	}
	return ops
}

func replay(ops []op) (*View, map[string][]byte) {
	r := NewReducer(nil, nil)
	store := map[string][]byte{}
	for i, o := range ops {
		at := t0.Add(time.Duration(i) * time.Second)
		if o.value == nil {
			r.Apply(del("ns", o.key, at))
			delete(store, o.key)
		} else {
			r.Apply(put("ns", o.key, o.value, at))
			store[o.key] = o.value
		}
		if i%7 == 0 {
			r.View() // materializing midway must not change the outcome
		}
	}
	return r.View(), store
}

// timeless compares views ignoring first_seen and last_updated, which
// depend on when each record arrived.
func timeless(v *View) string {
	s := ""
	for _, w := range v.Workers {
		c := *w
		c.FirstSeen, c.LastUpdated = time.Time{}, time.Time{}
		s += fmt.Sprintf("%+v|%v|%v|%v|%v\n", c.Key(), c.Role, c.Model, c.HasCard, string(c.Card))
	}
	for _, p := range v.Publishers {
		s += fmt.Sprintf("%+v\n", *p)
	}
	return s
}

// Folding any sequence of puts and deletes gives the same fleet as one
// resync of the store's final contents, in any order.
func TestPropertyFoldEqualsResyncOfFinalState(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ops := genOps(t)
		folded, store := replay(ops)
		var recs []events.DiscoveryRecord
		for k, v := range store {
			recs = append(recs, events.DiscoveryRecord{Keyspace: keyspaceOf(k), Key: k, Value: v})
		}
		perm := rapid.Permutation(recs).Draw(t, "perm")
		resynced := NewReducer(nil, nil)
		resynced.Apply(events.DiscoveryResync{At: t0, Namespace: "ns", Records: perm})
		if a, b := timeless(folded), timeless(resynced.View()); a != b {
			t.Fatalf("fold:\n%s\nresync:\n%s", a, b)
		}
	})
}

// The same events give the same view, timestamps included.
func TestPropertyDeterministic(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ops := genOps(t)
		a, _ := replay(ops)
		b, _ := replay(slices.Clone(ops))
		if !sameView(a, b) {
			t.Fatal("two folds of the same events differ")
		}
	})
}
