package replay

import (
	"crypto/sha256"
	"database/sql"
	"fmt"
	"testing"
)

// singleReplicaScenarios are recorded by one router replica; their
// recordings' digests were taken before the simulator could run several
// replicas, and must not move: one replica (the setting left out, or
// replicas: 1) is exactly the run it always was.
var singleReplicaScenarios = []struct{ name, yaml, digest string }{
	{"load, faults", "picker: load\n" + scenarioYAML, "7d043b6e71e35ef9a639dcb350aadc3b8d85f097dadab03b0813571bf8082306"},
	{"kv", "picker: kv\n" + scenarioYAML, "b5d9c5701c6ef8cdf707413c927810938c03e54b1395c20808ea3006926f4230"},
	{"kv tracked, output blocks", "picker: kv\nrouter:\n  kv: {track_prefill_tokens: true, track_active_blocks: true, " +
		"track_output_blocks: true, expected_output_tokens: 48}\n" + scenarioYAML, "a096d9a24d2470ad42b8ba32fa84624071da006077d4f87e5931372f4cce7050"},
}

func TestOneReplicaRecordsWhatItAlwaysDid(t *testing.T) {
	for _, tc := range singleReplicaScenarios {
		got := fmt.Sprintf("%x", sha256.Sum256([]byte(dumpTables(t, record(t, tc.yaml), false))))
		if got != tc.digest {
			t.Errorf("%s: recording digest %s, want %s", tc.name, got, tc.digest)
		}
	}
}

// A replica's recording holds the batches its peers sent it, and a replay
// of it reproduces every pick; without them (the rows deleted), the
// replayed core misses its peers' load and picks otherwise. A replica
// without sync replays exactly as well.
func TestReplicaRecordingsReplayWithTheirPeersBatches(t *testing.T) {
	unsynced := record(t, "picker: kv_tracked\n"+scenarioYAML+"router: {replicas: 2}\n")
	rep, err := Run(open(t, unsynced), 0, "")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Selections != 200 || !rep.Exact() {
		t.Fatalf("unsynced replica: report %+v", rep)
	}

	path := record(t, "picker: kv_tracked\n"+scenarioYAML+"router: {replicas: 2, replica_sync: true, sync_delay: 2ms}\n")
	rep, err = Run(open(t, path), 0, "")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Selections != 200 || !rep.Exact() {
		t.Fatalf("synced replica: report %+v", rep)
	}
	var batches, events int
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	err = db.QueryRow(`SELECT count(*), coalesce(sum(events), 0) FROM peer_batches`).Scan(&batches, &events)
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	if batches < 100 || events < 500 {
		t.Fatalf("%d peer batches with %d events recorded", batches, events)
	}

	execSQL(t, path, `DELETE FROM peer_batches`)
	rep, err = RunWith(open(t, path), 0, "", Options{AllowIncomplete: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Reproduced == rep.Selections {
		t.Fatalf("every pick reproduced without the peers' batches: %+v", rep)
	}
}
