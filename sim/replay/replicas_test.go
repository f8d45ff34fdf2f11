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
// replicas: 1) is exactly the run it always was. (They were taken again
// once, when a subscription's messages stopped overtaking each other
// under load_jitter: one connection delivers in order.)
var singleReplicaScenarios = []struct{ name, yaml, digest string }{
	{"load, faults", "picker: load\n" + scenarioYAML, "b8a47671fb26815fc4f814f3fe6763d42da59a866407fb7a07fed9ec887962a8"},
	{"kv", "picker: kv\n" + scenarioYAML, "a0dcd64a16bc69e50fbc1307aea3f77ecfea6b2e5c7f9aeeea398b02a7e8e6de"},
	{"kv tracked, output blocks", "picker: kv\nrouter:\n  kv: {track_prefill_tokens: true, track_active_blocks: true, " +
		"track_output_blocks: true, expected_output_tokens: 48}\n" + scenarioYAML, "5da6cbdad05e7bad7f2552155e4b819d9ece04f12d28ef8a1e304594cdc0c140"},
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
