package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"switchyard/router/discovery"
	"switchyard/router/picker"
)

func TestDiscoveryLabelsAreClosed(t *testing.T) {
	s := New()
	s.Discovery.CountDiscovery("put")
	s.Discovery.CountDiscovery("attacker-chosen")
	if got := testutil.ToFloat64(s.Discovery.Events.WithLabelValues("put")); got != 1 {
		t.Fatalf("put = %v", got)
	}
	if got := testutil.ToFloat64(s.Discovery.Events.WithLabelValues("malformed")); got != 1 {
		t.Fatalf("unknown kind not folded into malformed: %v", got)
	}
	if n := testutil.CollectAndCount(s.Discovery.Events); n != len(discovery.EventKinds) {
		t.Fatalf("%d series, want exactly the %d closed kinds", n, len(discovery.EventKinds))
	}
}

func TestObserveSnapshot(t *testing.T) {
	s := New()
	s.Discovery.ObserveSnapshot(&discovery.Snapshot{Generation: 7, View: discovery.View{Workers: []*discovery.Worker{
		{Role: discovery.RolePrefill}, {Role: discovery.RoleDecode}, {Role: discovery.RoleDecode},
	}}})
	want := `
# HELP switchyard_dynamo_workers Discovered Dynamo workers by role.
# TYPE switchyard_dynamo_workers gauge
switchyard_dynamo_workers{role="aggregated"} 0
switchyard_dynamo_workers{role="decode"} 2
switchyard_dynamo_workers{role="prefill"} 1
switchyard_dynamo_workers{role="unknown"} 0
`
	if err := testutil.CollectAndCompare(s.Discovery.Workers, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(s.Discovery.Generation); got != 7 {
		t.Fatalf("generation = %v", got)
	}
}

func TestSelectionCountsAreClosed(t *testing.T) {
	s := New()
	s.Selection.Count("decode", "load")
	s.Selection.Count("decode", "made-up")
	s.Selection.Count("router", "load")
	if got := testutil.ToFloat64(s.Selection.Total.WithLabelValues("decode", "load")); got != 1 {
		t.Fatalf("decode/load = %v", got)
	}
	if n, want := testutil.CollectAndCount(s.Selection.Total), 2*len(picker.Reasons); n != want {
		t.Fatalf("%d series, want 2 roles x %d reasons", n, len(picker.Reasons))
	}
}
