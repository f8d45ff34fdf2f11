package replay

import (
	"database/sql"
	"testing"
)

// Runs that track active sequences replay exactly: the recorded first
// tokens and output progress are fed back at their places. Without them
// (their rows deleted), the replayed pickers see prefill that never
// finishes and choose otherwise: the recorded inputs are what reproduce
// the picks.
func TestReplayOfTrackedRunsIsExactAndNeedsTheFirstTokens(t *testing.T) {
	for _, tc := range []struct{ name, yaml string }{
		{"load_tracked", "picker: load_tracked\n" + scenarioYAML},
		{"kv_tracked", "picker: kv_tracked\n" + scenarioYAML},
		{"kv with output blocks", "picker: kv\nrouter:\n  kv: {track_prefill_tokens: true, track_active_blocks: true, " +
			"track_output_blocks: true, expected_output_tokens: 48, decode_active_request_weight: 0.5}\n" + scenarioYAML},
	} {
		path := record(t, tc.yaml)
		rd := open(t, path)
		rep, err := Run(rd, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		if rep.Selections != 400 || !rep.Exact() {
			t.Fatalf("%s: report %+v", tc.name, rep)
		}
		var firsts, outputs int
		db, err := sql.Open("sqlite", path)
		if err != nil {
			t.Fatal(err)
		}
		err = db.QueryRow(`SELECT count(*) FILTER (WHERE kind = 'first_token'), count(*) FILTER (WHERE kind = 'output')
			FROM request_progress`).Scan(&firsts, &outputs)
		db.Close()
		if err != nil {
			t.Fatal(err)
		}
		if firsts < 350 {
			t.Fatalf("%s: %d first tokens recorded for 400 requests", tc.name, firsts)
		}
		if tracksOutput := tc.name == "kv with output blocks"; tracksOutput != (outputs > 0) {
			t.Fatalf("%s: %d output progress rows", tc.name, outputs)
		}

		execSQL(t, path, `DELETE FROM request_progress`)
		rd = open(t, path)
		rep, err = RunWith(rd, 0, "", Options{AllowIncomplete: true})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Reproduced == rep.Selections {
			t.Fatalf("%s: every pick reproduced without the first tokens", tc.name)
		}
	}
}

// A recording of the load picker replayed under load_tracked is judged on
// its pins: tracking the recorded first tokens changes picks.
func TestTrackingChangesPicksOfARecordedRun(t *testing.T) {
	rd := open(t, record(t, "picker: load\n"+scenarioYAML))
	rep, err := Run(rd, 0, "load_tracked")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Reproduced == rep.Selections {
		t.Fatalf("load_tracked reproduced every pick of load: %+v", rep)
	}
}
