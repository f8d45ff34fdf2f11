package sim

import (
	"crypto/sha256"
	"fmt"
	"hash"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"switchyard/fakefleet/engine"
	"switchyard/recorder"
	"switchyard/router/core"
	"switchyard/router/envelope"
	"switchyard/router/events"
	"switchyard/sim/workload"
)

// textTap renders every tapped call as a line and hashes them, so two runs
// can be compared for exact equality without a database.
type textTap struct {
	h          hash.Hash
	lines      int
	selections []recorder.Selection
	outcomes   []recorder.Outcome
	kinds      map[string]int
}

func newTextTap() *textTap { return &textTap{h: sha256.New(), kinds: map[string]int{}} }

func (t *textTap) line(kind string, v any) {
	t.lines++
	t.kinds[kind]++
	fmt.Fprintf(t.h, "%s %+v\n", kind, v)
}
func (t *textTap) Discovery(ev events.Event)             { t.line("discovery", ev) }
func (t *textTap) Published(p recorder.Published)        { t.line("published", p) }
func (t *textTap) LoadConnected(ev events.LoadConnected) { t.line("connected", ev) }
func (t *textTap) Request(r recorder.Request)            { t.line("request", r) }
func (t *textTap) Ended(e recorder.Ended) {
	if e.Reason == core.EndedServed {
		t.line("served", e)
		return
	}
	t.line("ended", e)
}
func (t *textTap) Outcome(o recorder.Outcome) {
	t.line("outcome", o)
	t.outcomes = append(t.outcomes, o)
}
func (t *textTap) Selection(s recorder.Selection) {
	t.line("selection", s)
	t.selections = append(t.selections, s)
}
func (t *textTap) LoadMessage(ev *events.LoadMessage, res envelope.Result) {
	t.line("load", fmt.Sprintf("%v %s %x %v", ev.At, ev.Namespace, ev.Frames, res))
}
func (t *textTap) KVConnected(ns string, id uint64, at time.Time) {
	t.line("kvconnected", fmt.Sprint(ns, id, at))
}
func (t *textTap) KVMessage(ns string, id uint64, frames [][]byte, at time.Time, res string) {
	t.line("kv", fmt.Sprintf("%v %s %x %s", at, ns, frames, res))
}

// Record renders each core output as the line of its kind.
func (t *textTap) Record(out core.Output) {
	switch o := out.(type) {
	case core.Published:
		t.Published(o)
	case events.LoadConnected:
		t.LoadConnected(o)
	case core.LoadApplied:
		t.LoadMessage(o.Msg, o.Result)
	case events.KVConnected:
		t.KVConnected(o.Namespace, o.PublisherID, o.At)
	case core.KVApplied:
		t.KVMessage(o.Namespace, o.PublisherID, o.Frames, o.At, o.Result)
	case core.Request:
		t.Request(o)
	case core.Selection:
		t.Selection(o)
	case core.Ended:
		t.Ended(o)
	case core.Outcome:
		t.Outcome(o)
	case core.PeerBatch:
		t.line("peer", o)
	default:
		t.Discovery(out)
	}
}

func (t *textTap) sum() string { return fmt.Sprintf("%x", t.h.Sum(nil)) }

func scenario(t *testing.T, src string) *Scenario {
	t.Helper()
	sc, err := ParseScenario([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

func execute(t *testing.T, sc *Scenario, opts Options) (Summary, *textTap) {
	t.Helper()
	tap := newTextTap()
	opts.Record = tap
	r, err := New(sc, opts)
	if err != nil {
		t.Fatal(err)
	}
	s, err := r.Execute()
	if err != nil {
		t.Fatal(err)
	}
	return s, tap
}

const aggScenario = `
seed: 7
fleet:
  - role: aggregated
    count: 3
    total_kv_blocks: 4096
workload:
  poisson: {rate: 40, count: 300, prompt: {min: 200, max: 2000}, output: {min: 8, max: 64}}
`

func TestRunServesEveryRequestOnTheEngineModel(t *testing.T) {
	s, tap := execute(t, scenario(t, aggScenario), Options{})
	if s.Requests != 300 || s.Served != 300 || s.Failed != 0 || s.Refused != 0 {
		t.Fatalf("summary %+v", s)
	}
	if s.LoadMessages == 0 || tap.kinds["load"] != int(s.LoadMessages) || tap.kinds["connected"] != 3 {
		t.Fatalf("load plane: %+v kinds %v", s, tap.kinds)
	}
	perWorker := map[uint64]int{}
	for _, sel := range tap.selections {
		if !sel.OK || sel.Sel.HasPrefill {
			t.Fatalf("selection %+v", sel)
		}
		perWorker[sel.Sel.Decode.WorkerID]++
		if len(sel.Candidates) != 3 {
			t.Fatalf("candidates %+v", sel.Candidates)
		}
	}
	if len(perWorker) != 3 {
		t.Fatalf("picks went to %d workers: %v", len(perWorker), perWorker)
	}
	for _, o := range tap.outcomes {
		if o.Status != "ok" || o.TTFT <= 0 || o.E2E < o.TTFT || o.OutputTokens < 8 {
			t.Fatalf("outcome %+v", o)
		}
	}
}

func TestRunIsDeterministic(t *testing.T) {
	for _, router := range []string{"", // the scenario's default picker
		"picker: kv\nrouter: {kv: {track_prefill_tokens: true, track_active_blocks: true, track_output_blocks: true}}\n",
		// Through two brokers, one killed then restarted, the other drained
		// then killed: failover, pending and the wake jitter's draws.
		"picker: kv\nrouter: {load_transport: broker}\nbrokers: [{id: a, namespaces: [dynamo]}, {id: b, namespaces: [dynamo]}]\n",
		// The faults of the router's surroundings: etcd, leases, a
		// degraded link (its loss draws), the shim and a reload.
		"picker: load\n"} {
		faults := ""
		if strings.Contains(router, "brokers") {
			faults = "  - {at: 1s, kind: kill_broker, broker: a}\n  - {at: 1500ms, kind: drain_broker, broker: b}\n" +
				"  - {at: 2500ms, kind: kill_broker, broker: b}\n  - {at: 5s, kind: restart_broker, broker: a}\n"
		}
		if router == "picker: load\n" {
			faults = "  - {at: 1s, kind: etcd_restart, duration: 1500ms}\n  - {at: 1200ms, worker: 0, kind: lease_expiry, duration: 3s}\n" +
				"  - {at: 1500ms, worker: 2, kind: degrade, delay: 4ms, loss: 0.2}\n  - {at: 3500ms, kind: etcd_compaction}\n" +
				"  - {at: 4s, kind: shim_slow, delay: 10ms}\n  - {at: 4500ms, kind: shim_fail}\n  - {at: 5s, kind: shim_recover}\n" +
				"  - {at: 5500ms, kind: reload, router: {picker: kv, kv: {router_temperature: 0.3}}}\n  - {at: 6s, worker: 2, kind: heal}\n"
		}
		sc := scenario(t, aggScenario+router+`
network: {load_jitter: 3ms, load_loss: 0.05}
faults:
  - {at: 2s, worker: 1, kind: stall}
  - {at: 4s, worker: 1, kind: resume}
  - {at: 3s, worker: 2, kind: restart_publisher}
`+faults)
		_, a := execute(t, sc, Options{})
		_, b := execute(t, sc, Options{})
		if a.sum() != b.sum() || a.lines != b.lines {
			t.Fatalf("%q: two runs of one scenario differ: %d lines %s vs %d lines %s", router, a.lines, a.sum(), b.lines, b.sum())
		}
		sc.Seed++
		_, c := execute(t, sc, Options{})
		if c.sum() == a.sum() {
			t.Fatalf("%q: a different seed produced the identical run", router)
		}
	}
}

func TestDisaggregatedPairsPrefillWithDecode(t *testing.T) {
	sc := scenario(t, `
seed: 3
fleet:
  - {role: prefill, count: 2}
  - {role: decode, count: 2, kv_transfer_bandwidth: 1e9}
workload:
  poisson: {rate: 10, count: 50, prompt: {min: 500, max: 500}, output: {min: 10, max: 10}}
`)
	s, tap := execute(t, sc, Options{})
	if s.Served != 50 {
		t.Fatalf("summary %+v", s)
	}
	for _, sel := range tap.selections {
		if !sel.Sel.HasPrefill || sel.Sel.Prefill.WorkerID == sel.Sel.Decode.WorkerID {
			t.Fatalf("selection %+v", sel.Sel)
		}
	}
	// 500 tokens = 8 blocks of 2 MiB at 1 GB/s: ≈16.8 ms of transfer is
	// part of every TTFT.
	for _, o := range tap.outcomes {
		if o.TTFT < 16*time.Millisecond {
			t.Fatalf("TTFT %v does not include the KV transfer", o.TTFT)
		}
	}
}

func TestKilledWorkerLeavesAfterItsLease(t *testing.T) {
	sc := scenario(t, `
seed: 5
fleet:
  - {role: aggregated, count: 2}
network: {lease_ttl: 2s}
workload:
  poisson: {rate: 20, count: 200, prompt: {min: 100, max: 400}, output: {min: 4, max: 16}}
faults:
  - {at: 1s, worker: 0, kind: kill}
`)
	r, err := New(sc, Options{Record: newTextTap()})
	if err != nil {
		t.Fatal(err)
	}
	tap := r.opts.Record.(*textTap)
	s, err := r.Execute()
	if err != nil {
		t.Fatal(err)
	}
	dead := r.workers[0].id
	gone := Epoch.Add(1*time.Second + 2*time.Second + sc.Network.DiscoveryDelay.Std())
	for _, sel := range tap.selections {
		if sel.At.After(gone) && sel.Sel.Decode.WorkerID == dead {
			t.Fatalf("picked the dead worker at %v, after its records vanished", sel.At.Sub(Epoch))
		}
	}
	if s.Failed == 0 || s.Served+s.Failed != 200 || tap.kinds["ended"] != s.Failed {
		t.Fatalf("summary %+v, ended %d", s, tap.kinds["ended"])
	}
	if tap.kinds["served"] != int(s.Served) {
		t.Fatalf("%d served requests reported to the core, want %d", tap.kinds["served"], s.Served)
	}
}

func TestSharedPrefixesHitTheCache(t *testing.T) {
	sc := scenario(t, `
seed: 11
fleet:
  - {role: aggregated, count: 2}
workload:
  shared_prefix: {groups: 2, users_per_group: 4, system_tokens: 2048, question_tokens: 64, output: {min: 4, max: 4}, rate: 5, count: 40}
`)
	_, tap := execute(t, sc, Options{})
	cached := 0
	for _, o := range tap.outcomes {
		cached += o.CachedTokens
	}
	if cached < 20*2048 {
		t.Fatalf("only %d prompt tokens came from the cache", cached)
	}
}

type countingObserver struct {
	arrived, finished, loads int
}

func (o *countingObserver) Arrived(*workload.Request, *engine.PromptBlocks) { o.arrived++ }
func (o *countingObserver) Finished(Result)                                 { o.finished++ }
func (o *countingObserver) Load(time.Duration, string, uint64)              { o.loads++ }

func TestUntilCancelsWhatIsStillRunning(t *testing.T) {
	sc := scenario(t, aggScenario+"until: 2s\n")
	obs := &countingObserver{}
	s, tap := execute(t, sc, Options{Observer: obs})
	if s.Virtual != 2*time.Second || obs.arrived != s.Requests || obs.finished != s.Requests || obs.loads == 0 {
		t.Fatalf("summary %+v observer %+v", s, obs)
	}
	cancelled := 0
	for _, o := range tap.outcomes {
		if o.Status == "cancelled" {
			cancelled++
		}
	}
	if s.Requests >= 300 || cancelled == 0 {
		t.Fatalf("requests %d cancelled %d", s.Requests, cancelled)
	}
}

func TestScenarioValidationNamesEveryProblem(t *testing.T) {
	_, err := ParseScenario([]byte(`
picker: fastest
fleet:
  - {role: prefill, count: 2, dp_size: -1}
network: {load_loss: 1.5}
workload: {}
faults:
  - {at: 1s, worker: 9, kind: explode}
`))
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"picker", "fleet[0].dp_size", "prefill workers need decode", "load_loss", "exactly one of", "faults[0].worker", "faults[0].kind"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if _, err := ParseScenario([]byte("fleet: [{role: aggregated, count: 1}]\nworkload: {poisson: {rate: 1, count: 1, prompt: {min: 1, max: 1}, output: {min: 1, max: 1}}}\nbogus: 1\n")); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("unknown field: %v", err)
	}
}

func TestStalledWorkerSitsOutUnderTheLoadPicker(t *testing.T) {
	sc := scenario(t, `
seed: 9
fleet:
  - {role: aggregated, count: 2}
workload:
  poisson: {rate: 20, count: 300, prompt: {min: 300, max: 600}, output: {min: 4, max: 8}}
faults:
  - {at: 1s, worker: 0, kind: stall}
`)
	r, err := New(sc, Options{Record: newTextTap()})
	if err != nil {
		t.Fatal(err)
	}
	tap := r.opts.Record.(*textTap)
	if _, err := r.Execute(); err != nil {
		t.Fatal(err)
	}
	stalled := r.workers[0].id
	late := 0
	for _, sel := range tap.selections {
		if sel.At.Sub(Epoch) > 8*time.Second && sel.Sel.Decode.WorkerID == stalled {
			late++
		}
	}
	if late > 0 {
		t.Fatalf("%d picks went to the stalled worker after the stall rule applied", late)
	}
}

// Every scenario shipped in scenarios/ is valid; those that need no trace
// run here (the trace tests run the others).
func TestBundledScenariosParseAndRun(t *testing.T) {
	files, err := filepath.Glob("../scenarios/*.yaml")
	if err != nil || len(files) < 8 {
		t.Fatalf("scenarios: %v, %v", files, err)
	}
	for _, path := range files {
		sc, err := LoadScenario(path)
		if err != nil {
			t.Fatal(err)
		}
		if sc.Workload.Trace != nil {
			continue
		}
		s, _ := execute(t, sc, Options{})
		if s.Served < s.Requests*9/10 || s.Requests != sc.ExpectedRequests() {
			t.Fatalf("%s: %+v (expected %d requests)", path, s, sc.ExpectedRequests())
		}
	}
}

func TestFailSlowAndMalformedRecordFaults(t *testing.T) {
	sc := scenario(t, `
seed: 12
fleet:
  - {role: aggregated, count: 2}
workload:
  poisson: {rate: 20, count: 200, prompt: {min: 100, max: 300}, output: {min: 16, max: 16}}
faults:
  - {at: 1s, worker: 0, kind: fail}
  - {at: 1s, worker: 0, kind: malformed_record}
  - {at: 3s, worker: 0, kind: recover}
  - {at: 4s, worker: 1, kind: slow, factor: 4}
`)
	r, err := New(sc, Options{Record: newTextTap()})
	if err != nil {
		t.Fatal(err)
	}
	tap := r.opts.Record.(*textTap)
	s, err := r.Execute()
	if err != nil {
		t.Fatal(err)
	}
	if s.Failed == 0 || s.Served+s.Failed != 200 || tap.kinds["ended"] != s.Failed {
		t.Fatalf("summary %+v, ended %d", s, tap.kinds["ended"])
	}
	for _, o := range tap.outcomes {
		at := o.At.Sub(Epoch)
		if o.Status == "failed" && (at < time.Second || at > 3*time.Second+time.Millisecond) {
			t.Fatalf("a request failed at %v, outside the fail window", at)
		}
	}
	// The malformed record is refused by the reducer; both workers stay.
	if got := len(r.Core().Snapshot().Workers); got != 2 {
		t.Fatalf("%d workers after a malformed record", got)
	}
	// Worker 1 decodes four times slower after 4 s: its ITL rises (less
	// than fourfold: prefill chunks share the steps).
	itl := map[uint64]time.Duration{}
	for _, o := range tap.outcomes {
		itl[o.RequestID] = o.ITL
	}
	var early, late []time.Duration
	for _, sel := range tap.selections {
		if sel.Sel.Decode.WorkerID != r.workers[1].id || itl[sel.RequestID] == 0 {
			continue
		}
		switch at := sel.At.Sub(Epoch); {
		case at < 3*time.Second:
			early = append(early, itl[sel.RequestID])
		case at > 5*time.Second:
			late = append(late, itl[sel.RequestID])
		}
	}
	if len(early) == 0 || len(late) == 0 || avg(late) < 2*avg(early) {
		t.Fatalf("ITL before slow %v (n=%d), after %v (n=%d)", avg(early), len(early), avg(late), len(late))
	}
}

func avg(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	var s time.Duration
	for _, d := range ds {
		s += d
	}
	return s / time.Duration(len(ds))
}

func TestExpectedRequestsCountsTraceLines(t *testing.T) {
	dir := t.TempDir()
	for body, want := range map[string]int{"": 0, "a\n": 1, "a\nb": 2, "a\nb\n": 2} {
		if err := os.WriteFile(dir+"/t.jsonl", []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		sc := &Scenario{Workload: Workload{Trace: &TraceSpec{Path: "t.jsonl"}}, dir: dir}
		if got := sc.ExpectedRequests(); got != want {
			t.Fatalf("%q: %d lines, want %d", body, got, want)
		}
		sc.Workload.Trace.Limit = 1
		if got := sc.ExpectedRequests(); got != min(want, 1) {
			t.Fatalf("%q with limit 1: %d", body, got)
		}
	}
}

// fewestBlocksTap checks each selection as it is made: the candidate list
// is the core's reused buffer, valid only during the call.
type fewestBlocksTap struct {
	*textTap
	t      *testing.T
	byLoad int
}

func (f *fewestBlocksTap) Record(out core.Output) {
	if s, ok := out.(core.Selection); ok {
		f.Selection(s)
		return
	}
	f.textTap.Record(out)
}

func (f *fewestBlocksTap) Selection(s recorder.Selection) {
	f.textTap.Selection(s)
	if s.Sel.DecodeReason != "load" {
		return
	}
	f.byLoad++
	for _, c := range s.Candidates {
		if !c.Defined || c.WorkerID != s.Sel.Decode.WorkerID || c.DPRank != s.Sel.Decode.DPRank {
			continue
		}
		for _, o := range s.Candidates {
			if o.Defined && o.Cost < c.Cost {
				f.t.Errorf("request %d: chose %v blocks over %v", s.RequestID, c.Cost, o.Cost)
			}
		}
	}
}

func TestScenarioNamesTheExamplePolicy(t *testing.T) {
	sc := scenario(t, "picker: least_kv_blocks\n"+aggScenario)
	tap := &fewestBlocksTap{textTap: newTextTap(), t: t}
	r, err := New(sc, Options{Record: tap})
	if err != nil {
		t.Fatal(err)
	}
	s, err := r.Execute()
	if err != nil {
		t.Fatal(err)
	}
	if s.Requests != 300 || len(tap.selections) != 300 {
		t.Fatalf("requests %d selections %d", s.Requests, len(tap.selections))
	}
	if tap.byLoad == 0 {
		t.Fatal("no selection was decided by blocks in use")
	}
}
