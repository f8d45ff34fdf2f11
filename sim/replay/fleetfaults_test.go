package replay

import (
	"database/sql"
	"strings"
	"testing"
)

// surroundings are the faults of the router's surroundings on the replay
// tests' scenario: etcd away and compacted, a lapsed lease, a degraded
// link, a slow then failing shim, and a reload that turns on KV-aware
// selection.
const surroundings = scenarioYAML + `  - {at: 1s, kind: etcd_restart, duration: 1500ms}
  - {at: 1500ms, worker: 0, kind: lease_expiry, duration: 2s}
  - {at: 2s, worker: 1, kind: degrade, delay: 3ms, loss: 0.2}
  - {at: 4s, kind: etcd_compaction}
  - {at: 5s, kind: shim_slow, delay: 20ms}
  - {at: 6s, kind: shim_fail}
  - {at: 6500ms, kind: shim_recover}
  - {at: 7s, worker: 1, kind: heal}
  - {at: 10s, kind: reload, router: {picker: kv, max_staleness: 2s, kv: {router_temperature: 0.2}}}
`

// A recording with these faults holds the relists, the configuration
// change and the shim's failures like any other input and outcome: it
// replays exactly, two recordings are byte-identical, the re-simulation
// under the recorded picker reproduces it, and its scenario holds the
// faults.
func TestRecordingsWithTheSurroundingsFaultsReplayExactly(t *testing.T) {
	src := "picker: load\n" + surroundings
	path := record(t, src)
	rep, err := Run(open(t, path), 0, "")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Selections != 400 || !rep.Exact() || rep.Reproduced != 400 {
		t.Fatalf("report %+v", rep)
	}
	if dump(t, path) != dump(t, record(t, src)) {
		t.Fatal("two recordings of one scenario differ")
	}
	cf, err := Counterfactual(open(t, path), 0, "round_robin")
	if err != nil {
		t.Fatal(err)
	}
	if cf.Recorded.TTFT != cf.Baseline.TTFT {
		t.Fatalf("the re-simulation differs from the recording:\nrecorded %+v\nbaseline %+v", cf.Recorded.TTFT, cf.Baseline.TTFT)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var scen string
	var changes, shimFailed int
	if err := db.QueryRow(`SELECT scenario FROM runs`).Scan(&scen); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(`SELECT count(*) FROM config_changes WHERE picker = 'kv'`).Scan(&changes); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(`SELECT count(*) FROM outcomes WHERE status = 'failed' AND error LIKE '%shim%'`).Scan(&shimFailed); err != nil {
		t.Fatal(err)
	}
	if changes != 1 || shimFailed == 0 {
		t.Fatalf("%d configuration changes to kv, %d shim failures recorded", changes, shimFailed)
	}
	for _, want := range []string{"kind: etcd_restart", "duration: 1.5s", "kind: lease_expiry", "loss: 0.2", "kind: shim_fail", "picker: kv"} {
		if !strings.Contains(scen, want) {
			t.Fatalf("the recording's scenario lacks %q:\n%s", want, scen)
		}
	}
}
