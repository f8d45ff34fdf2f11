package core

import (
	"fmt"
	"maps"
	"testing"
	"time"

	"switchyard/router/events"
	"switchyard/router/kv"
	"switchyard/router/picker"
)

// collect is a port that keeps every output it is handed.
type collect struct{ outs []Output }

func (c *collect) Record(out Output) { c.outs = append(c.outs, out) }

// drive feeds c one input of each kind the core records, in a fixed order.
func drive(c *Core, at time.Time) {
	c.Discovery([]events.Event{events.DiscoveryReset{At: at}})
	c.LoadConnected(events.LoadConnected{At: at, Namespace: "ns", PublisherID: 1})
	c.LoadMessage(&events.LoadMessage{At: at, Namespace: "ns", PublisherID: 1, Frames: [][]byte{{0}}})
	c.KVConnected(events.KVConnected{At: at, Namespace: "ns", PublisherID: 2})
	c.KVMessage(&events.KVMessage{At: at, Namespace: "ns", PublisherID: 2, Frames: [][]byte{{0}}})
	c.KVPublisherLost(events.KVPublisherLost{At: at, Namespace: "ns", PublisherID: 2})
	req := picker.Request{ID: 7, Model: "m", Namespaces: []string{"ns"}, Now: at, Tokens: []uint32{1, 2, 3}}
	sel, _ := c.Pick(Arrival{Req: req, Session: 3})
	c.Ended(req, sel, at, "failed")
	c.Outcome(Outcome{At: at, RequestID: 7, Status: "refused"})
}

// The port sees every input and decision, in the order the core handled
// them; a lost publisher that cleared nothing is not an output.
func TestPortReceivesEveryOutputInOrder(t *testing.T) {
	port := &collect{}
	c, err := New(Options{Picker: picker.NameKV, Port: port})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	drive(c, at)
	var kinds []string
	for _, out := range port.outs {
		kinds = append(kinds, fmt.Sprintf("%T", out))
		if !out.Time().Equal(at) {
			t.Errorf("%T at %v, want %v", out, out.Time(), at)
		}
	}
	want := "[events.DiscoveryReset events.LoadConnected core.LoadApplied events.KVConnected core.KVApplied " +
		"core.Request core.Selection core.Ended core.Outcome]"
	if got := fmt.Sprint(kinds); got != want {
		t.Fatalf("outputs %s\nwant    %s", got, want)
	}
	if r := port.outs[5].(Request); r.RequestID != 7 || r.Session != 3 || len(r.Tokens) != 3 || r.Generation != c.Snapshot().Generation {
		t.Fatalf("request %+v", r)
	}
	if s := port.outs[6].(Selection); s.OK || s.RequestID != 7 {
		t.Fatalf("a pick with no workers: %+v", s)
	}
	if res := port.outs[4].(KVApplied).Result; res == kv.PublisherLostResult {
		t.Fatalf("kv-events result %q", res)
	}
}

// A core without a port runs the same and records nothing.
func TestNilPortRecordsNothing(t *testing.T) {
	c, err := New(Options{Picker: picker.NameLoad})
	if err != nil {
		t.Fatal(err)
	}
	drive(c, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	if len(c.LoadResults()) == 0 || len(c.KVResults()) == 0 {
		t.Fatalf("inputs not applied: load %v, kv %v", c.LoadResults(), c.KVResults())
	}
}

// WithoutTokens drops a request's token ids and passes everything else.
func TestWithoutTokens(t *testing.T) {
	port := &collect{}
	c, err := New(Options{Picker: picker.NameLoad, Port: WithoutTokens(port)})
	if err != nil {
		t.Fatal(err)
	}
	drive(c, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	if len(port.outs) != 9 {
		t.Fatalf("%d outputs, want 9", len(port.outs))
	}
	if r := port.outs[5].(Request); r.Tokens != nil || r.RequestID != 7 {
		t.Fatalf("request %+v", r)
	}
}

// Selections are counted under "role/reason", each pair's key spelled
// once however often it is counted.
func TestSelectionReasonsAreCountedByRoleAndReason(t *testing.T) {
	c, err := New(Options{Picker: picker.NameLoad})
	if err != nil {
		t.Fatal(err)
	}
	c.countSelection("decode", "least_loaded")
	c.countSelection("decode", "least_loaded")
	c.countSelection("prefill", "least_loaded")
	want := map[string]uint64{"decode/least_loaded": 2, "prefill/least_loaded": 1}
	if got := c.Reasons(); !maps.Equal(got, want) {
		t.Fatalf("reasons %v, want %v", got, want)
	}
	if len(c.reasonKeys) != 2 {
		t.Fatalf("%d keys spelled, want one per pair", len(c.reasonKeys))
	}
}
