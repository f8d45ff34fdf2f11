package sim

import (
	"strings"
	"testing"

	"switchyard/router/core"
)

// drop loses the worker's next count kv-events messages on the way: they
// are numbered, so the router sees a sequence gap on the next one, and the
// other worker's stream is untouched.
func TestDropLosesNumberedKVMessages(t *testing.T) {
	r, s, tap := runTapped(t, `
seed: 5
picker: kv
fleet:
  - {role: aggregated, count: 2}
workload:
  poisson: {rate: 20, count: 120, prompt: {min: 100, max: 300}, output: {min: 8, max: 16}}
faults:
  - {at: 2s, worker: 0, kind: drop, count: 3}
`, Options{})
	if s.Dropped != 3 {
		t.Fatalf("dropped %d messages, want 3", s.Dropped)
	}
	lost := r.workers[0].kvPub.id
	var last uint64
	gaps := 0
	for _, out := range tap.outs {
		kv, ok := out.(core.KVApplied)
		if !ok || kv.PublisherID != lost {
			continue
		}
		seq := seqOf(kv.Frames)
		if last != 0 && seq != last+1 {
			if seq != last+4 {
				t.Fatalf("sequence %d after %d: want exactly 3 lost", seq, last)
			}
			gaps++
		}
		last = seq
	}
	if gaps != 1 {
		t.Fatalf("%d gaps in the dropping worker's stream, want 1", gaps)
	}
	if r.Core().KVResults()["gap"] == 0 {
		t.Fatalf("no kv-events gap: %v", r.Core().KVResults())
	}
}

func TestDropCountIsChecked(t *testing.T) {
	for src, want := range map[string]string{
		"{at: 1s, worker: 0, kind: drop, count: 10001}": ".count: must be in [1, 10000]",
		"{at: 1s, worker: 0, kind: drop, count: -1}":    ".count: must be in [1, 10000]",
		"{at: 1s, worker: 0, kind: gap, count: 2}":      ".count: only for drop",
	} {
		_, err := ParseScenario([]byte(`
fleet:
  - {role: aggregated, count: 1}
workload:
  poisson: {rate: 1, count: 1, prompt: {min: 10, max: 10}, output: {min: 1, max: 1}}
faults:
  - ` + src + "\n"))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: %v, want %q", src, err, want)
		}
	}
}
