package replay

import (
	"database/sql"
	"testing"
)

// A simulated run whose publishers replay what the lossy link and a
// partition lost replays exactly: the replayed messages are kv-events
// rows like any other, and the replaying core, which never recovers,
// reproduces every selection and every kv-events result.
func TestRunWithKVReplayReplaysExactly(t *testing.T) {
	const src = `
seed: 5
picker: kv
fleet:
  - {role: aggregated, count: 3, total_kv_blocks: 2048, kv_replay: {enabled: true}}
network: {load_delay: 1ms, kv_loss: 0.02}
workload:
  shared_prefix: {rate: 15, count: 300, groups: 6, users_per_group: 4, system_tokens: 2048, question_tokens: 96, output: {min: 8, max: 24}}
faults:
  - {at: 3s, worker: 1, kind: partition}
  - {at: 3200ms, worker: 1, kind: heal}
`
	path := record(t, src)
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	var replayedRows, finished int
	err = db.QueryRow(`SELECT (SELECT count(*) FROM kv_messages WHERE kind = 'replayed'),
		(SELECT count(*) FROM kv_replays WHERE kind = 'finished')`).Scan(&replayedRows, &finished)
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	if replayedRows == 0 || finished == 0 {
		t.Fatalf("the run replayed %d messages in %d recoveries", replayedRows, finished)
	}
	rep, err := Run(open(t, path), 0, "")
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Exact() || rep.Selections != 300 {
		t.Fatalf("report %+v", rep)
	}
}
