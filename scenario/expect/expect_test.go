package expect

import (
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"switchyard/router/core"
	"switchyard/router/envelope"
	"switchyard/router/events"
	"switchyard/router/picker"
)

func parse(t *testing.T, src string) []Expectation {
	t.Helper()
	var out []Expectation
	dec := yaml.NewDecoder(strings.NewReader(src))
	dec.KnownFields(true)
	if err := dec.Decode(&out); err != nil {
		t.Fatalf("decode: %v", err)
	}
	return out
}

func TestValidateNamesEveryProblemWithItsPath(t *testing.T) {
	exps := parse(t, `
- metric: ttft_p90
  max: 0.5
- metric: goodput
  min: 1.5
- metric: nonsense
  max: 1s
- counter: load.gap
  min: 1.5
- no_picks: {worker: 7}
- picks: {worker: 0, from: 5s, to: 2s}
- {}
- metric: e2e_p50
- no_lost: true
  max: 3
- counter: NotAName
  max: 1
`)
	errs := Validate(exps, 3)
	var got []string
	for _, e := range errs {
		got = append(got, e.Error())
	}
	all := strings.Join(got, "\n")
	for _, want := range []string{
		"expect[0].max: ttft_p90 is a latency",
		"expect[1].min: goodput is a fraction in [0, 1]",
		"expect[2].metric: unknown metric \"nonsense\"",
		"expect[3].min: a counter bound is a whole number",
		"expect[4].no_picks.worker: no worker 7 (the fleet has 3)",
		"expect[5].picks.to: must be after from",
		"expect[6]: want exactly one of",
		"expect[7]: metric e2e_p50 needs min or max",
		"expect[8]: min and max bound a metric or a counter only",
		"expect[9].counter: \"NotAName\" is not a counter name",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("missing %q in:\n%s", want, all)
		}
	}
	if errs := Validate(parse(t, "- metric: ttft_p90\n  max: 250ms\n  from: 2s\n- no_lost: true\n- picks: {worker: 2, min: 3}\n"), 3); len(errs) != 0 {
		t.Errorf("valid expectations refused: %v", errs)
	}
}

// evidence is a run of four requests over two workers: worker 0 serves
// fast early, worker 1 is picked late, one request is lost.
func evidence() *Evidence {
	start := time.Unix(0, 0)
	c := NewCollector(start, []uint64{100, 200}, SLO{TTFT: 100 * time.Millisecond})
	at := func(d time.Duration) time.Time { return start.Add(d) }
	req := func(id uint64, d time.Duration) {
		c.Record(core.Request{At: at(d), RequestID: id, PromptTokens: 100})
	}
	pick := func(id, worker uint64, d time.Duration) {
		c.Record(core.Selection{At: at(d), RequestID: id, OK: true,
			Sel: picker.Selection{Decode: picker.Pin{WorkerID: worker}, DecodeReason: picker.ReasonLoad}})
	}
	end := func(id uint64, d, ttft time.Duration, status string, cached int) {
		c.Record(core.Outcome{At: at(d), RequestID: id, Status: status, TTFT: ttft, E2E: 2 * ttft, CachedTokens: cached, PromptTokens: 100})
	}
	req(1, time.Second)
	pick(1, 100, time.Second)
	end(1, 2*time.Second, 50*time.Millisecond, "ok", 50)
	req(2, 2*time.Second)
	pick(2, 100, 2*time.Second)
	end(2, 3*time.Second, 150*time.Millisecond, "ok", 0)
	req(3, 5*time.Second)
	pick(3, 200, 5*time.Second)
	end(3, 6*time.Second, 0, "failed", 0)
	req(4, 6*time.Second)
	pick(4, 200, 6*time.Second)
	load := func(seq uint64, d time.Duration) {
		s := make([]byte, 8)
		binary.BigEndian.PutUint64(s, seq)
		c.Record(core.LoadApplied{Msg: &events.LoadMessage{At: at(d), Namespace: "ns", PublisherID: 9,
			Frames: [][]byte{[]byte("kv_metrics"), make([]byte, 8), s, nil}}, Result: envelope.Applied})
	}
	load(1, time.Second)
	load(2, 2*time.Second)
	load(5, 3*time.Second) // two messages missed
	load(6, 4*time.Second)
	c.Record(events.DiscoveryResync{At: at(4 * time.Second)})
	return c.Evidence()
}

func TestEvaluateJudgesEachKind(t *testing.T) {
	ev := evidence()
	exps := parse(t, `
- metric: ttft_p50
  max: 60ms
- metric: ttft_p90
  max: 100ms
- metric: ttft_p90
  max: 100ms
  to: 2s
- metric: served_ratio
  min: 0.5
- metric: goodput
  min: 0.5
- metric: cache_hit_ratio
  min: 0.25
- metric: ttft_p50
  max: 1s
  from: 5s
- counter: load.gap
  min: 1
  max: 1
- counter: load.applied
  max: 2
  to: 3s
- counter: discovery.resync
  min: 1
- no_picks: {worker: 1, to: 5s}
- no_picks: {worker: 0, from: 1500ms}
- picks: {worker: 1, from: 5s, min: 2}
- picks: {worker: 1, from: 5s, min: 3}
- no_lost: true
`)
	if errs := Validate(exps, 2); len(errs) > 0 {
		t.Fatal(errs)
	}
	want := []bool{true, false, true, true, false, true, false, true, true, true, true, false, true, false, false}
	vs := Evaluate(exps, ev)
	for i, v := range vs {
		if v.OK != want[i] {
			t.Errorf("%d %s: ok %v, want %v (%s)", i, v.Title, v.OK, want[i], v.Message())
		}
	}
	if got := vs[1].Got; got != "150ms" {
		t.Errorf("ttft_p90 got %q, want 150ms", got)
	}
	if !strings.Contains(vs[6].Detail, "none of 2 requests was served") {
		t.Errorf("an undefined metric must say why: %q", vs[6].Detail)
	}
	if !strings.Contains(vs[11].Message(), `"no picks of worker 0 from 1.5s" FAILED: got 1 picks (first at 2s (request 2))`) {
		t.Errorf("message: %s", vs[11].Message())
	}
	if !strings.Contains(vs[14].Detail, "first: 4") {
		t.Errorf("lost request not named: %s", vs[14].Detail)
	}
	if len(Failed(vs)) != 6 {
		t.Errorf("failed %d, want 6", len(Failed(vs)))
	}
}

func TestAnUnobservedMetricIsSkipped(t *testing.T) {
	ev := evidence()
	ev.Unobserved = map[string]string{"cache_hit_ratio": "not reported"}
	vs := Evaluate(parse(t, "- metric: cache_hit_ratio\n  min: 0.9\n- metric: served_ratio\n  min: 0.1\n"), ev)
	if vs[0].Skipped != "not reported" || len(Failed(vs)) != 0 || !vs[1].OK {
		t.Fatalf("verdicts %+v", vs)
	}
	if !strings.Contains(vs[0].Message(), "skipped: not reported") {
		t.Errorf("message %q", vs[0].Message())
	}
}

func TestTitlesAreWrittenFromTheRule(t *testing.T) {
	exps := parse(t, `
- metric: ttft_p90
  max: 250ms
  from: 2s
- counter: kv.gap
  min: 1
  max: 4
- picks: {worker: 2, from: 1s, to: 3s}
- name: custom
  no_lost: true
`)
	want := []string{"ttft_p90 <= 250ms from 2s", "counter kv.gap >= 1 and counter kv.gap <= 4",
		"at least 1 picks of worker 2 in [1s, 3s)", "custom"}
	for i, e := range exps {
		if e.Title() != want[i] {
			t.Errorf("title %q, want %q", e.Title(), want[i])
		}
	}
}

// FuzzExpectations decodes hostile YAML as expectations, validates and
// evaluates it: nothing may panic.
func FuzzExpectations(f *testing.F) {
	f.Add("- metric: ttft_p90\n  max: 250ms\n  from: 1s\n")
	f.Add("- no_picks: {worker: 1, from: 2s, to: 1s}\n- no_lost: true\n")
	f.Add("- counter: load.gap\n  min: 1e300\n")
	f.Add("- picks: {worker: -1, min: -3}\n- metric: x\n  max: NaN\n")
	ev := evidence()
	f.Fuzz(func(t *testing.T, src string) {
		var exps []Expectation
		if err := yaml.Unmarshal([]byte(src), &exps); err != nil {
			return
		}
		if len(Validate(exps, 2)) > 0 {
			return
		}
		for _, v := range Evaluate(exps, ev) {
			_ = v.Message()
		}
	})
}

func TestValidateAcceptsNoLostAndBareZero(t *testing.T) {
	var exps []Expectation
	require.NoError(t, yaml.Unmarshal([]byte(`
- no_lost: true
- counter: load.gap
  max: 0
- metric: failed
  max: 0
`), &exps))
	require.Empty(t, Validate(exps, 4))
	require.False(t, exps[1].Max.IsDuration, "a bare 0 is the number 0")

	require.NoError(t, yaml.Unmarshal([]byte("- metric: ttft_p90\n  max: 0\n"), &exps))
	errs := Validate(exps, 4)
	require.Len(t, errs, 1)
	require.Contains(t, errs[0].Error(), "expect[0].max: ttft_p90 is a latency")
}

func TestCollectorCountsPrefillReasonWithoutPrefillPin(t *testing.T) {
	start := time.Unix(0, 0)
	c := NewCollector(start, []uint64{7}, SLO{})
	c.Record(core.Selection{At: start.Add(time.Second), RequestID: 1, OK: true,
		Sel: picker.Selection{Decode: picker.Pin{WorkerID: 7}, DecodeReason: picker.ReasonLoad, PrefillReason: picker.ReasonNoPrefillPool}})
	ev := c.Evidence()
	require.Equal(t, 1, ev.Count("selection.prefill.no_prefill_pool", 0, time.Hour))
	require.Equal(t, 1, ev.Count("selection.decode.load", 0, time.Hour))
	require.Equal(t, -1, ev.Picks[0].Prefill)
}
