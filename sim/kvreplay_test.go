package sim

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"switchyard/recorder"
	"switchyard/router/core"
	"switchyard/router/events"
)

func TestReplayRingKeepsTheLastMessages(t *testing.T) {
	g := newReplayRing(3)
	for s := uint64(1); s <= 5; s++ {
		g.add(s, [][]byte{{byte(s)}})
	}
	var got []uint64
	g.between(1, 10, func(seq uint64, frames [][]byte) {
		if frames[0][0] != byte(seq) {
			t.Fatalf("seq %d carries frames of %d", seq, frames[0][0])
		}
		got = append(got, seq)
	})
	if len(got) != 3 || got[0] != 3 || got[2] != 5 {
		t.Fatalf("kept %v, want 3 4 5", got)
	}
	got = got[:0]
	g.between(4, 4, func(seq uint64, _ [][]byte) { got = append(got, seq) })
	if len(got) != 1 || got[0] != 4 {
		t.Fatalf("between 4 and 4: %v", got)
	}
}

// lossyKV is a KV-aware run over a lossy link, a broken link and a
// publisher restart; replay is what the test adds.
const lossyKV = `
seed: 11
picker: kv
fleet:
  - role: aggregated
    count: 3
    total_kv_blocks: 2048
network: {load_delay: 1ms, load_jitter: 2ms, load_loss: 0.01}
workload:
  shared_prefix: {groups: 6, users_per_group: 4, system_tokens: 2048, question_tokens: 128, output: {min: 8, max: 32}, rate: 20, count: 500}
faults:
  - {at: 4s, worker: 0, kind: partition}
  - {at: 4300ms, worker: 0, kind: heal}
  - {at: 9s, worker: 1, kind: restart_publisher}
  - {at: 12s, worker: 2, kind: partition}
  - {at: 12100ms, worker: 2, kind: heal}
`

func withReplay(src, buffer string) string {
	return src[:len("\nseed: 11\npicker: kv\nfleet:\n  - role: aggregated\n    count: 3\n    total_kv_blocks: 2048\n")] +
		"    kv_replay: {enabled: true" + buffer + "}\n" +
		src[len("\nseed: 11\npicker: kv\nfleet:\n  - role: aggregated\n    count: 3\n    total_kv_blocks: 2048\n"):]
}

// With replay the gaps a lossy link and a partition open are filled:
// the tracker sees (almost) none of them, the replays are counted, and
// the same seed loses the same messages with replay or without.
func TestKVReplayRecoversGapsInTheSimulator(t *testing.T) {
	off := scenario(t, lossyKV)
	on := scenario(t, withReplay(lossyKV, ""))
	sOff, _ := execute(t, off, Options{})
	rOn, err := New(on, Options{})
	if err != nil {
		t.Fatal(err)
	}
	sOn, err := rOn.Execute()
	if err != nil {
		t.Fatal(err)
	}
	rOff, err := New(off, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rOff.Execute(); err != nil {
		t.Fatal(err)
	}
	gapsOff, gapsOn := rOff.Core().KVResults()["gap"], rOn.Core().KVResults()["gap"]
	counts := rOn.Core().KVReplayCounts()
	t.Logf("gaps off %d on %d; replay %v; summary on %+v", gapsOff, gapsOn, counts, sOn)
	if gapsOff < 5 {
		t.Fatalf("the lossy run saw only %d gaps", gapsOff)
	}
	if counts[core.ReplayRequested] == 0 || counts[core.ReplayRecovered] == 0 || sOn.ReplayMessages == 0 {
		t.Fatalf("nothing replayed: %v %+v", counts, sOn)
	}
	// The restarted publisher numbers its messages anew: its first
	// events after the restart may still show a gap, nothing else does.
	if gapsOn*5 > gapsOff {
		t.Fatalf("replay left %d of %d gaps", gapsOn, gapsOff)
	}
	if sOff.Served != sOn.Served || sOff.Requests != sOn.Requests {
		t.Fatalf("served %d/%d without replay, %d/%d with", sOff.Served, sOff.Requests, sOn.Served, sOn.Requests)
	}
}

// A publisher whose ring is smaller than a gap replays what it still
// holds; the rest is lost and counted.
func TestKVReplaySmallBufferLosesTheRest(t *testing.T) {
	r, err := New(scenario(t, withReplay(lossyKV, ", buffer: 2")), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Execute(); err != nil {
		t.Fatal(err)
	}
	counts := r.Core().KVReplayCounts()
	if counts[core.ReplayLost] == 0 || counts[core.ReplayRequested] == 0 {
		t.Fatalf("a two-message ring lost nothing: %v", counts)
	}
}

// A run with replay records byte-identically for a seed, and a core that
// never recovers, fed the recorded kv-events rows as replay feeds them,
// ends with the live core's index.
func TestKVReplayRecordingIsExact(t *testing.T) {
	sc := scenario(t, withReplay(lossyKV, ""))
	dir := t.TempDir()
	var cores [2]*core.Core
	var paths [2]string
	for i := range paths {
		paths[i] = filepath.Join(dir, []string{"a.db", "b.db"}[i])
		w, err := recorder.Create(paths[i], recorder.Run{Kind: "sim", Scenario: sc.YAML(), Seed: sc.Seed, Picker: sc.Picker,
			Start: time.Unix(0, 0)}, recorder.Options{Block: true})
		if err != nil {
			t.Fatal(err)
		}
		r, err := New(sc, Options{Record: w})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Execute(); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Close(); err != nil {
			t.Fatal(err)
		}
		cores[i] = r.Core()
	}
	a, b := dumpRecordTables(t, paths[0]), dumpRecordTables(t, paths[1])
	if a != b {
		t.Fatal("two recordings of one replay scenario differ")
	}

	rd, err := recorder.Open(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	runs, err := rd.Runs()
	if err != nil {
		t.Fatal(err)
	}
	replayed, err := core.New(core.Options{Picker: sc.Picker})
	if err != nil {
		t.Fatal(err)
	}
	var wanted, finished, replayedRows int
	err = rd.Entries(runs[0].ID, func(e recorder.Entry) error {
		switch v := e.Value.(type) {
		case events.DiscoveryPut, events.DiscoveryDelete, events.DiscoveryResync, events.DiscoveryPrune, events.DiscoveryReset:
			replayed.ApplyDiscovery(v.(events.Event))
		case recorder.Published:
			replayed.Publish(v.At)
		case events.KVSubscribed:
			replayed.KVSubscribed(v)
		case events.KVConnected:
			replayed.KVConnected(v)
		case events.KVDisconnected:
			replayed.KVDisconnected(v)
		case events.KVUnsubscribed:
			replayed.KVUnsubscribed(v)
		case events.Tick:
			replayed.Tick(v)
		case recorder.KVMessage:
			if v.Frames == nil {
				return nil // an output of the tick or unsubscription before it
			}
			if v.Replayed {
				replayedRows++
			}
			ev := v.KVMessage
			if got := replayed.KVMessage(&ev); got != v.Result {
				t.Errorf("seq %d: replayed result %s, recorded %s", e.Seq, got, v.Result)
			}
		case recorder.KVReplayWanted:
			wanted++
		case recorder.KVReplayFinished:
			finished++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if wanted == 0 || finished == 0 || replayedRows == 0 {
		t.Fatalf("recorded %d wanted, %d finished, %d replayed rows", wanted, finished, replayedRows)
	}
	live, again := cores[0].Tracker().Stats(), replayed.Tracker().Stats()
	if live.Nodes == 0 || live.Nodes != again.Nodes || live.Ownerships != again.Ownerships || len(live.Ranks) != len(again.Ranks) {
		t.Fatalf("index: live %d nodes %d ownerships, replayed %d %d", live.Nodes, live.Ownerships, again.Nodes, again.Ownerships)
	}
	for i := range live.Ranks {
		if live.Ranks[i] != again.Ranks[i] {
			t.Fatalf("rank %d: live %+v, replayed %+v", i, live.Ranks[i], again.Ranks[i])
		}
	}
}

// dumpRecordTables renders every record table of a recording in seq
// order.
func dumpRecordTables(t *testing.T, path string) string {
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
		for rows.Next() {
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			out = fmt.Appendf(out, "%s %v\n", table, vals)
		}
		rows.Close()
	}
	return string(out)
}
