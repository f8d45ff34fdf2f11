package replay

import (
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"switchyard/router/core"
	"switchyard/router/events"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"switchyard/recorder"
	"switchyard/sim"
)

const scenarioYAML = `
seed: 21
fleet:
  - {role: prefill, count: 2}
  - {role: decode, count: 2, kv_transfer_bandwidth: 2e10}
network: {load_jitter: 2ms, load_loss: 0.02}
workload:
  poisson: {rate: 25, count: 400, prompt: {min: 128, max: 3000}, output: {min: 8, max: 96}}
faults:
  - {at: 3s, worker: 2, kind: stall}
  - {at: 6s, worker: 2, kind: resume}
  - {at: 8s, worker: 3, kind: restart_publisher}
  - {at: 9s, worker: 3, kind: malformed}
`

// record simulates the scenario into a recording on disk.
func record(t *testing.T, src string) string {
	t.Helper()
	path, _ := recordWithStats(t, src)
	return path
}

func open(t *testing.T, path string) *recorder.Reader {
	t.Helper()
	rd, err := recorder.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rd.Close() })
	return rd
}

func TestReplayReproducesEverySelectionOfASimulatedRun(t *testing.T) {
	for _, p := range []string{"load", "kv"} {
		rd := open(t, record(t, "picker: "+p+"\n"+scenarioYAML))
		rep, err := Run(rd, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		if rep.Selections != 400 || !rep.Exact() || rep.Reproduced != 400 || rep.Inputs < 1000 {
			t.Fatalf("%s: report %+v", p, rep)
		}
	}
}

func TestAnotherPickerIsJudgedOnItsPins(t *testing.T) {
	rd := open(t, record(t, scenarioYAML))
	rep, err := Run(rd, 0, "random")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Exact() || rep.Reproduced == 0 || rep.Reproduced == rep.Selections || len(rep.Divergences) == 0 {
		t.Fatalf("random agreed on %d of %d selections, %d divergences listed", rep.Reproduced, rep.Selections, len(rep.Divergences))
	}
	if rep.DecodeAgree < rep.Reproduced || rep.PrefillAgree < rep.Reproduced {
		t.Fatalf("per-pin agreement below whole-selection agreement: %+v", rep)
	}
}

func execSQL(t *testing.T, path, query string) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(query); err != nil {
		t.Fatal(err)
	}
}

func TestReplayRefusesARecordingWithGapsUnlessAllowed(t *testing.T) {
	path := record(t, scenarioYAML)
	// Lose a stretch of load samples: the replayed core sees other loads.
	execSQL(t, path, `DELETE FROM load_messages WHERE seq IN (SELECT seq FROM load_messages WHERE kind = 'message' ORDER BY seq LIMIT 300 OFFSET 200)`)
	_, err := Run(open(t, path), 0, "")
	if !errors.Is(err, ErrIncomplete) || !strings.Contains(err.Error(), "sequence gaps (first at seq") {
		t.Fatalf("err = %v, want ErrIncomplete naming the gaps", err)
	}
	rep, err := RunWith(open(t, path), 0, "", Options{AllowIncomplete: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Exact() {
		t.Fatalf("a recording missing 300 load samples replayed exactly: %+v", rep)
	}
	if rep.Integrity.Missing != 300 || len(rep.Incomplete) != 1 {
		t.Fatalf("integrity %+v, problems %q", rep.Integrity, rep.Incomplete)
	}
}

// A run whose writer was never closed, as a killed process leaves it:
// every record it was given is in the file, but nothing says the run
// ended there.
func TestReplayRefusesARecordingNeverClosedUnlessAllowed(t *testing.T) {
	closed := open(t, record(t, scenarioYAML))
	want, err := closed.Integrity(1)
	if err != nil || !want.Complete() || want.LastSeq == 0 {
		t.Fatalf("closed recording: %+v, %v", want, err)
	}

	sc, err := sim.ParseScenario([]byte(scenarioYAML))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "killed.db")
	w, err := recorder.Create(path, recorder.Run{Kind: "sim", Scenario: sc.YAML(), Seed: sc.Seed, Picker: sc.Picker, Start: time.Now()},
		recorder.Options{Block: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = w.Close() })
	r, err := sim.New(sc, sim.Options{Record: w})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Execute(); err != nil {
		t.Fatal(err)
	}
	// The same scenario records the same records: wait until all are
	// committed, so only the missing end marker tells the runs apart.
	deadline := time.Now().Add(30 * time.Second)
	for written(w) != want.LastSeq {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d records written", written(w), want.LastSeq)
		}
		time.Sleep(5 * time.Millisecond)
	}

	rd := open(t, path)
	_, err = Run(rd, 0, "")
	if !errors.Is(err, ErrIncomplete) || !strings.Contains(err.Error(), "no end marker") {
		t.Fatalf("err = %v, want ErrIncomplete naming the missing end marker", err)
	}
	rep, err := RunWith(rd, 0, "", Options{AllowIncomplete: true})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Exact() || rep.Selections != 400 || rep.Integrity.Closed || len(rep.Incomplete) != 1 {
		t.Fatalf("report %+v", rep)
	}
}

func written(w *recorder.Writer) uint64 {
	var n uint64
	for _, c := range w.Stats().Written {
		n += c
	}
	return n
}

func TestRecordingsWithDropsAreRefused(t *testing.T) {
	path := record(t, scenarioYAML)
	execSQL(t, path, `INSERT INTO run_drops (run_id, tbl, dropped) VALUES (1, 'load_messages', 3)`)
	if _, err := Run(open(t, path), 0, ""); !errors.Is(err, ErrIncomplete) || !strings.Contains(err.Error(), "3 records dropped") {
		t.Fatalf("err = %v, want ErrIncomplete", err)
	}
}

func TestCounterfactualUnderTheRecordedPickerReproducesTheOutcomes(t *testing.T) {
	rd := open(t, record(t, scenarioYAML))
	cf, err := Counterfactual(rd, 0, "round_robin")
	if err != nil {
		t.Fatal(err)
	}
	if cf.Requests != 400 || cf.Recorded.TTFT != cf.Baseline.TTFT || cf.Recorded.E2E != cf.Baseline.E2E {
		t.Fatalf("baseline differs from the recording:\nrecorded %+v\nbaseline %+v", cf.Recorded.TTFT, cf.Baseline.TTFT)
	}
	if cf.Alternative.TTFT == cf.Baseline.TTFT {
		t.Fatal("round_robin re-simulated to the identical TTFT distribution")
	}
}

// dump renders every record table of a recording (everything but the
// runs table's wall-clock metadata) in seq order.
func dump(t *testing.T, path string) string {
	t.Helper()
	return dumpTables(t, path, true)
}

// dumpTables is dump; nonEmpty requires the load, kv-events and
// selection tables to hold rows.
func dumpTables(t *testing.T, path string, nonEmpty bool) string {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var out []byte
	for _, table := range recorder.Tables() {
		rows, err := db.Query("SELECT * FROM " + table + " ORDER BY seq")
		if err != nil {
			t.Fatalf("%s: %v", table, err)
		}
		cols, _ := rows.Columns()
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		n := 0
		for rows.Next() {
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			out = fmt.Appendf(out, "%s %v\n", table, vals)
			n++
		}
		rows.Close()
		if nonEmpty && n == 0 && (table == "load_messages" || table == "kv_messages" || table == "selections") {
			t.Fatalf("table %s is empty", table)
		}
	}
	return string(out)
}

func TestSimulatedRecordingsAreByteIdentical(t *testing.T) {
	kvScenario := "picker: kv\n" + scenarioYAML // kv-events are followed only for the kv picker
	a, b := dump(t, record(t, kvScenario)), dump(t, record(t, kvScenario))
	if a != b {
		t.Fatal("two recordings of one scenario differ")
	}
	if c := dump(t, record(t, strings.Replace(kvScenario, "seed: 21", "seed: 22", 1))); c == a {
		t.Fatal("another seed recorded the identical run")
	}
}

// A kv-events publisher the router cannot reach (a partition) has its
// blocks cleared by the core's staleness rule exactly core.KVStaleAfter
// after its session ended, on the simulated clock; the recording holds the
// disconnect, the tick and the clearing, and replays exactly. A publisher
// that heals in time keeps its blocks.
func TestPartitionedPublisherIsLostAfterSixtySeconds(t *testing.T) {
	const partitioned = `
seed: 9
picker: kv
fleet:
  - {role: aggregated, count: 3}
workload:
  shared_prefix: {rate: 4, count: 400, groups: 6, users_per_group: 4, system_tokens: 512, question_tokens: 96, output: {min: 8, max: 24}}
faults:
  - {at: 5s, worker: 0, kind: partition}
  - {at: 20s, worker: 1, kind: partition}
  - {at: 40s, worker: 1, kind: heal}
`
	path := record(t, partitioned)
	rd := open(t, path)
	rep, err := Run(rd, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Exact() || rep.Selections != 400 {
		t.Fatalf("report %+v", rep)
	}
	var disconnected, lost []time.Duration
	var ticks int
	var lostIDs []uint64
	err = rd.Entries(rep.RunID, func(e recorder.Entry) error {
		at := e.At.Sub(sim.Epoch)
		switch v := e.Value.(type) {
		case events.KVDisconnected:
			disconnected = append(disconnected, at)
		case events.Tick:
			ticks++
		case recorder.KVMessage:
			if v.Frames == nil {
				lost = append(lost, at)
				lostIDs = append(lostIDs, v.PublisherID)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(disconnected) != 2 || disconnected[0] != 5*time.Second || disconnected[1] != 20*time.Second {
		t.Fatalf("disconnects at %v, want 5s and 20s", disconnected)
	}
	if len(lost) != 1 || lost[0] != 5*time.Second+core.KVStaleAfter || ticks != 1 {
		t.Fatalf("publishers cleared at %v (%d ticks), want once at 65s", lost, ticks)
	}
}

// A run discovered through either Kubernetes source records its discovery
// events like any other and replays exactly; under the metadata source two
// recordings of one scenario are byte-identical, and the counterfactual
// re-simulates the recorded run (its discovery shape included).
func TestKubernetesRecordingsReplayExactly(t *testing.T) {
	for _, source := range []string{"kubernetes", "kubernetes_pods"} {
		src := "picker: kv\n" + scenarioYAML + "  - {at: 10s, worker: 1, kind: kill}\ndiscovery: {source: " + source + ", readiness_delay: 3s}\n"
		path := record(t, src)
		rep, err := Run(open(t, path), 0, "")
		if err != nil {
			t.Fatal(err)
		}
		if rep.Selections != 400 || !rep.Exact() || rep.Reproduced != 400 {
			t.Fatalf("%s: report %+v", source, rep)
		}
		cf, err := Counterfactual(open(t, path), 0, "round_robin")
		if err != nil {
			t.Fatal(err)
		}
		if cf.Recorded.TTFT != cf.Baseline.TTFT {
			t.Fatalf("%s: the re-simulation differs from the recording:\nrecorded %+v\nbaseline %+v", source, cf.Recorded.TTFT, cf.Baseline.TTFT)
		}
		if source == "kubernetes" && dump(t, path) != dump(t, record(t, src)) {
			t.Fatalf("%s: two recordings of one scenario differ", source)
		}
	}
}

// A request the simulator ends unserved (a failing worker's 500) is
// reported to the core before its outcome is recorded, as the live hosts
// do: a replay closes a request at its outcome, so an end notice written
// after it would never reach the replayed core.
func TestUnservedRequestsEndBeforeTheirOutcome(t *testing.T) {
	rd := open(t, record(t, `
seed: 5
picker: load
fleet:
  - {role: decode, count: 2}
workload:
  poisson: {rate: 40, count: 200, prompt: {min: 64, max: 512}, output: {min: 4, max: 16}}
faults:
  - {at: 1s, worker: 0, kind: fail}
  - {at: 3s, worker: 0, kind: recover}
`))
	runs, err := rd.Runs()
	if err != nil {
		t.Fatal(err)
	}
	closed := map[uint64]bool{}
	failed, late := 0, 0
	if err := rd.Entries(runs[0].ID, func(e recorder.Entry) error {
		switch v := e.Value.(type) {
		case recorder.Ended:
			if closed[v.RequestID] {
				late++
			}
		case recorder.Outcome:
			closed[v.RequestID] = true
			if v.Status == "failed" {
				failed++
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if failed == 0 {
		t.Fatal("the scenario failed no request: it tests nothing")
	}
	if late != 0 {
		t.Fatalf("%d end notices recorded after their request's outcome (of %d failed requests)", late, failed)
	}
	rep, err := Run(rd, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Exact() {
		t.Fatalf("report %+v", rep)
	}
}

// Cache state predicted from picks (no kv-events) is a function of the
// recorded picks and their times, so a replay predicts and expires exactly
// what the run did, and the run is byte-identical for a seed.
func TestPredictedCacheStateReplaysExactly(t *testing.T) {
	src := `
seed: 5
picker: kv
router: {kv: {use_kv_events: false, predicted_block_ttl: 2s}}
fleet:
  - {role: aggregated, count: 4, total_kv_blocks: 512}
workload:
  shared_prefix: {groups: 8, users_per_group: 4, system_tokens: 512, question_tokens: 64, output: {min: 8, max: 32}, rate: 30, count: 300}
`
	path, sum := recordWithStats(t, src)
	if sum.HitRatio <= 0 {
		t.Fatalf("predictions found no cached prefix: %+v", sum)
	}
	rep, err := Run(open(t, path), 0, "")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Selections != 300 || !rep.Exact() {
		t.Fatalf("report %+v", rep)
	}
	if dump(t, path) != dump(t, record(t, src)) {
		t.Fatal("two recordings of one scenario differ")
	}
	// The TTL shapes the picks, so the replay must take it from the
	// recorded settings: another TTL gives another run, exact in turn.
	longer, longSum := recordWithStats(t, strings.Replace(src, "predicted_block_ttl: 2s", "predicted_block_ttl: 60s", 1))
	if longSum.HitRatio == sum.HitRatio {
		t.Fatalf("a 60 s TTL changed nothing: hit ratio %v", sum.HitRatio)
	}
	other, err := Run(open(t, longer), 0, "")
	if err != nil {
		t.Fatal(err)
	}
	if !other.Exact() {
		t.Fatalf("the 60 s run does not replay exactly: %+v", other)
	}
}
