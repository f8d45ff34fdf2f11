package recorder

import (
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"switchyard/fakefleet/wire"
	"switchyard/router/envelope"
	"switchyard/router/events"
)

func TestRoundTripEveryKind(t *testing.T) {
	path := tempPath(t)
	in := sample()
	w := mustCreate(t, path, simRun(base), Options{Block: true})
	for _, v := range in {
		feed(w, v)
	}
	st, err := w.Close()
	require.NoError(t, err)
	var written uint64
	for _, n := range st.Written {
		written += n
	}
	require.Equal(t, uint64(len(in)), written)
	for tbl, n := range st.Dropped {
		require.Zero(t, n, tbl)
	}

	got := readEntries(t, path, w.RunID())
	require.Len(t, got, len(in))
	for i, e := range got {
		require.Equal(t, uint64(i+1), e.Seq, "seq of record %d", i)
		require.Equal(t, in[i], e.Value, "record %d (%T)", i, in[i])
		require.Equal(t, entryAt(in[i]), e.At, "at of record %d", i)
	}

	// Nil and empty survive as such, not just as equal lengths.
	require.Nil(t, got[3].Value.(events.DiscoveryResync).Records)
	require.NotNil(t, got[2].Value.(events.DiscoveryResync).Records)
	require.Nil(t, got[5].Value.(events.DiscoveryPut).Value)
	require.NotNil(t, got[6].Value.(events.DiscoveryPut).Value)
	require.Nil(t, got[28].Value.(Request).Tokens)
	require.NotNil(t, got[27].Value.(Request).Tokens)
	require.Nil(t, got[16].Value.(LoadMessage).Frames)
	require.NotNil(t, got[15].Value.(LoadMessage).Frames)
	require.True(t, got[len(got)-1].At.IsZero())
}

func TestRunsMetadata(t *testing.T) {
	path := tempPath(t)
	start := time.Date(2025, 6, 1, 12, 0, 0, 123456789, time.FixedZone("X", 3600))
	run := simRun(start)
	w := mustCreate(t, path, run, Options{})
	require.Equal(t, int64(1), w.RunID())
	before := time.Now()
	_, err := w.Close()
	require.NoError(t, err)

	r, err := Open(path)
	require.NoError(t, err)
	defer r.Close()
	runs, err := r.Runs()
	require.NoError(t, err)
	require.Len(t, runs, 1)
	ri := runs[0]
	require.Equal(t, int64(1), ri.ID)
	run.Start = start.UTC()
	require.Equal(t, run, ri.Run)
	require.False(t, ri.EndedAt.Before(before.Add(-time.Second)), "ended_at %v", ri.EndedAt)
	require.Empty(t, ri.Dropped)
}

func TestSeqOrderAcrossTables(t *testing.T) {
	path := tempPath(t)
	in := sample()
	w := mustCreate(t, path, simRun(base), Options{Block: true, BatchSize: 3})
	for _, v := range in {
		feed(w, v)
	}
	_, err := w.Close()
	require.NoError(t, err)

	db := rawDB(t, path)
	rows, err := db.Query(`SELECT seq, kind FROM timeline WHERE run_id = ? ORDER BY seq`, w.RunID())
	require.NoError(t, err)
	defer rows.Close()
	var kinds []string
	for rows.Next() {
		var seq int64
		var kind string
		require.NoError(t, rows.Scan(&seq, &kind))
		require.Equal(t, int64(len(kinds)+1), seq)
		kinds = append(kinds, kind)
	}
	require.NoError(t, rows.Err())
	want := []string{"discovery.reset", "discovery.resync", "discovery.resync", "discovery.resync",
		"discovery.put", "discovery.put", "discovery.put", "discovery.delete",
		"discovery.prune", "discovery.prune", "discovery.prune", "published",
		"load.connected", "load.message", "load.message", "load.message", "load.message",
		"kv.connected", "kv.message", "kv.subscribed", "kv.disconnected", "tick", "kv.message", "kv.unsubscribed",
		"config_changed", "config_changed", "request", "request", "request",
		"selection", "selection", "selection", "progress.first_token", "progress.output", "progress.output", "peer_batch", "peer_batch",
		"kv.subscribed", "kv_replay.wanted", "kv.replayed", "kv_replay.finished", "kv_replay.finished", "ended", "outcome", "outcome", "outcome"}
	require.Equal(t, want, kinds)

	var n int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM resync_records WHERE run_id = ? AND seq = 2`, w.RunID()).Scan(&n))
	require.Equal(t, 300, n)
}

func TestDecodedLoadColumns(t *testing.T) {
	path := tempPath(t)
	w := mustCreate(t, path, simRun(base), Options{Block: true})
	const pid = 1<<63 + 9
	good := wire.LoadMessage(pid, 77, wire.ActiveLoad{WorkerID: 1<<63 + 5, DPRank: 3,
		ActiveDecodeBlocks: wire.U64(12), ActivePrefillTokens: wire.U64(4096), KVUsedBlocks: wire.U64(300)}, at(1))
	sparse := wire.LoadMessage(pid, 78, wire.ActiveLoad{WorkerID: 8}, at(2))
	badPayload := wire.Message("kv_metrics", pid, 79, []byte{0xc1}, at(3))
	wrongTopic := wire.Message("kv-events", pid, 80, []byte{0x80}, at(4))
	for i, f := range [][][]byte{good, sparse, badPayload, wrongTopic, {[]byte("short")}} {
		w.LoadMessage(&events.LoadMessage{At: at(i), Namespace: "dynamo", PublisherID: pid, Frames: f}, envelope.Applied)
	}
	w.LoadConnected(events.LoadConnected{At: at(9), Namespace: "dynamo", PublisherID: pid})
	_, err := w.Close()
	require.NoError(t, err)

	db := rawDB(t, path)
	rows, err := db.Query(`SELECT seq, publisher_id, sequence, worker_id, dp_rank, kv_used_blocks, active_decode_blocks,
		active_prefill_tokens, frames IS NULL FROM load_messages ORDER BY seq`)
	require.NoError(t, err)
	defer rows.Close()
	type row struct {
		seq, pid                                        int64
		sequence, worker, rank, kvUsed, decode, prefill sql.NullInt64
		framesNull                                      bool
	}
	var got []row
	for rows.Next() {
		var r row
		require.NoError(t, rows.Scan(&r.seq, &r.pid, &r.sequence, &r.worker, &r.rank, &r.kvUsed, &r.decode, &r.prefill, &r.framesNull))
		got = append(got, r)
	}
	require.NoError(t, rows.Err())
	require.Len(t, got, 6)
	v := func(x int64) sql.NullInt64 { return sql.NullInt64{Int64: x, Valid: true} }
	var null sql.NullInt64
	pidBits := int64(-1<<63 + 9) // 2^63+9 as int64 bits
	require.Equal(t, row{1, pidBits, v(77), v(-1<<63 + 5), v(3), v(300), v(12), v(4096), false}, got[0])
	require.Equal(t, row{2, pidBits, v(78), v(8), v(0), null, null, null, false}, got[1])
	// The envelope decodes, the payload does not: only the sequence.
	require.Equal(t, row{3, pidBits, v(79), null, null, null, null, null, false}, got[2])
	require.Equal(t, row{4, pidBits, null, null, null, null, null, null, false}, got[3])
	require.Equal(t, row{5, pidBits, null, null, null, null, null, null, false}, got[4])
	require.Equal(t, row{6, pidBits, null, null, null, null, null, null, true}, got[5])

	// The raw frames are kept beside the columns, undecodable or not.
	entries := readEntries(t, path, 1)
	require.Equal(t, badPayload, entries[2].Value.(LoadMessage).Frames)
	require.Equal(t, uint64(pid), entries[2].Value.(LoadMessage).PublisherID)
}

// stalled returns Options whose writer goroutine, once it holds its first
// record, waits until release is closed; entered is closed when it waits.
func stalled(opts Options) (o Options, entered, release chan struct{}) {
	entered, release = make(chan struct{}), make(chan struct{})
	var once sync.Once
	opts.beforeBatch = func() {
		once.Do(func() {
			close(entered)
			<-release
		})
	}
	return opts, entered, release
}

func TestDropsCounted(t *testing.T) {
	path := tempPath(t)
	opts, entered, release := stalled(Options{QueueSize: 1})
	w := mustCreate(t, path, simRun(base), opts)
	const sent = 100
	w.Outcome(Outcome{At: at(0), RequestID: 0, Status: StatusOK})
	<-entered // the writer holds record 1 and waits; the queue is empty
	for i := 1; i < sent; i++ {
		w.Outcome(Outcome{At: at(i), RequestID: uint64(i), Status: StatusOK})
	}
	st := w.Stats()
	require.Equal(t, 1, st.Queued)
	require.Equal(t, uint64(sent-2), st.Dropped["outcomes"])
	require.Zero(t, st.Written["outcomes"])
	close(release)
	st, err := w.Close()
	require.NoError(t, err)
	require.Equal(t, uint64(2), st.Written["outcomes"])
	require.Equal(t, uint64(sent-2), st.Dropped["outcomes"])
	require.Equal(t, uint64(sent), st.Written["outcomes"]+st.Dropped["outcomes"])

	// After Close, record calls are counted, not written, and do not panic.
	w.Outcome(Outcome{Status: StatusOK})
	w.LoadMessage(&events.LoadMessage{Frames: [][]byte{{1}}}, envelope.Applied)
	require.Equal(t, uint64(sent-1), w.Stats().Dropped["outcomes"])
	require.Equal(t, uint64(1), w.Stats().Dropped["load_messages"])
	st2, err := w.Close()
	require.NoError(t, err)
	require.Equal(t, st, st2)

	r, err := Open(path)
	require.NoError(t, err)
	defer r.Close()
	runs, err := r.Runs()
	require.NoError(t, err)
	require.Equal(t, map[string]uint64{"outcomes": sent - 2}, runs[0].Dropped)
	outs, err := r.Outcomes(w.RunID())
	require.NoError(t, err)
	require.Len(t, outs, 2)
	require.Equal(t, []uint64{0, 1}, []uint64{outs[0].RequestID, outs[1].RequestID})
	var total int64
	require.NoError(t, rawDB(t, path).QueryRow(`SELECT dropped FROM runs WHERE id = ?`, w.RunID()).Scan(&total))
	require.Equal(t, int64(sent-2), total)
	// The dropped records kept their seqs: the gap shows where they were.
	entries := readEntries(t, path, w.RunID())
	require.Equal(t, []uint64{1, 2}, []uint64{entries[0].Seq, entries[1].Seq})
	in, err := r.Integrity(w.RunID())
	require.NoError(t, err)
	require.Equal(t, Integrity{RunID: w.RunID(), Closed: true, LastSeq: sent, Records: 2, Gaps: 1, Missing: sent - 2,
		FirstGap: 3, Dropped: sent - 2}, in)
	require.False(t, in.Complete())
}

func TestBlockLosesNothing(t *testing.T) {
	path := tempPath(t)
	opts, entered, release := stalled(Options{QueueSize: 1, BatchSize: 1, Block: true})
	w := mustCreate(t, path, simRun(base), opts)
	const sent = 500
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range sent {
			w.Published(Published{At: at(i), Generation: uint64(i), Workers: i % 7})
		}
	}()
	<-entered
	// The writer holds one record and the queue holds one: the sender
	// must be waiting, not dropping.
	require.Eventually(t, func() bool { return w.Stats().Queued == 1 }, 5*time.Second, time.Millisecond)
	time.Sleep(20 * time.Millisecond)
	select {
	case <-done:
		t.Fatal("the sender finished while the writer was stalled")
	default:
	}
	require.Zero(t, w.Stats().Dropped["published"])
	close(release)
	<-done
	st, err := w.Close()
	require.NoError(t, err)
	require.Equal(t, uint64(sent), st.Written["published"])
	require.Zero(t, st.Dropped["published"])
	entries := readEntries(t, path, w.RunID())
	require.Len(t, entries, sent)
	for i, e := range entries {
		require.Equal(t, Published{At: at(i), Generation: uint64(i), Workers: i % 7}, e.Value)
	}
}

func TestAppendSecondRun(t *testing.T) {
	path := tempPath(t)
	w1 := mustCreate(t, path, simRun(base), Options{Block: true})
	w1.Ended(Ended{At: at(1), RequestID: 1, Reason: "first"})
	w1.Ended(Ended{At: at(2), RequestID: 2, Reason: "first"})
	_, err := w1.Close()
	require.NoError(t, err)

	live := Run{Kind: "live", Config: "x: 1\n", Version: "v2", Picker: "round_robin", Start: base.Add(time.Hour)}
	w2 := mustCreate(t, path, live, Options{})
	require.Equal(t, int64(2), w2.RunID())
	w2.Ended(Ended{At: at(3), RequestID: 3, Reason: "second"})
	_, err = w2.Close()
	require.NoError(t, err)

	r, err := Open(path)
	require.NoError(t, err)
	defer r.Close()
	runs, err := r.Runs()
	require.NoError(t, err)
	require.Len(t, runs, 2)
	require.Equal(t, simRun(base), runs[0].Run)
	require.Equal(t, live, runs[1].Run)
	require.Equal(t, []Entry{{1, at(3), Ended{At: at(3), RequestID: 3, Reason: "second"}}}, readEntries(t, path, 2))
	require.Len(t, readEntries(t, path, 1), 2)
	require.ErrorContains(t, r.Entries(3, func(Entry) error { return nil }), "no run 3")
}

func TestSchemaVersionRefused(t *testing.T) {
	path := tempPath(t)
	w := mustCreate(t, path, simRun(base), Options{})
	_, err := w.Close()
	require.NoError(t, err)
	_, err = rawDB(t, path).Exec(`UPDATE meta SET value = '7' WHERE key = 'schema_version'`)
	require.NoError(t, err)

	_, err = Create(path, simRun(base), Options{})
	require.ErrorContains(t, err, `schema version "7"`)
	_, err = Open(path)
	require.ErrorContains(t, err, `schema version "7"; this build reads versions 1 to 6`)
}

// A version 3 recording has no request_progress table: it is read (its
// runs tracked nothing), and this build does not append to it.
func TestSchemaVersion3IsReadNotAppended(t *testing.T) {
	path, w := recordOutcomes(t, 20, true)
	db := rawDB(t, path)
	for _, q := range []string{`DROP VIEW timeline`, `DROP TABLE request_progress`,
		`CREATE VIEW timeline AS SELECT run_id, seq, at_ns, 'outcome' AS kind, request_id FROM outcomes`,
		`UPDATE meta SET value = '3' WHERE key = 'schema_version'`} {
		_, err := db.Exec(q)
		require.NoError(t, err, q)
	}
	require.True(t, integrityOf(t, path, w.RunID()).Complete())
	require.Len(t, readEntries(t, path, w.RunID()), 20)
	_, err := Create(path, simRun(base), Options{})
	require.ErrorContains(t, err, `schema version "3"; this build writes version 6 only`)
}

// A version 4 recording has no peer batches nor the replica-sync
// settings: it is read (its configuration changes with the defaults), and
// this build does not append to it.
func TestSchemaVersion4IsReadNotAppended(t *testing.T) {
	var cfgLoad ConfigChanged
	cfgLoad.Picker = "load"
	path := tempPath(t)
	w := mustCreate(t, path, simRun(base), Options{Block: true})
	cfg := cfgLoad
	cfg.At = at(1)
	w.Record(cfg)
	w.Ended(Ended{At: at(2), RequestID: 1, Reason: "x"})
	_, err := w.Close()
	require.NoError(t, err)
	db := rawDB(t, path)
	for _, q := range []string{`DROP VIEW timeline`, `DROP TABLE peer_batches`,
		`ALTER TABLE config_changes DROP COLUMN peer_silent_after_ns`, `ALTER TABLE config_changes DROP COLUMN peer_request_ttl_ns`,
		`CREATE VIEW timeline AS SELECT run_id, seq, at_ns, 'ended' AS kind, request_id FROM ended`,
		`UPDATE meta SET value = '4' WHERE key = 'schema_version'`} {
		_, err := db.Exec(q)
		require.NoError(t, err, q)
	}
	got := readEntries(t, path, w.RunID())
	require.Len(t, got, 2)
	require.Equal(t, cfg, got[0].Value)
	_, err = Create(path, simRun(base), Options{})
	require.ErrorContains(t, err, `schema version "4"; this build writes version 6 only`)
}

func TestOtherFilesRefused(t *testing.T) {
	dir := t.TempDir()
	other := dir + "/other.db"
	db := rawDB(t, other)
	_, err := db.Exec(`CREATE TABLE t (x)`)
	require.NoError(t, err)
	db.Close()
	_, err = Create(other, simRun(base), Options{})
	require.ErrorContains(t, err, "not a switchyard recording")
	_, err = Open(other)
	require.ErrorContains(t, err, "not a switchyard recording")

	garbage := dir + "/garbage.db"
	require.NoError(t, os.WriteFile(garbage, []byte(strings.Repeat("not sqlite ", 100)), 0o600))
	_, err = Create(garbage, simRun(base), Options{})
	require.Error(t, err)
	_, err = Open(garbage)
	require.Error(t, err)

	_, err = Open(dir + "/missing.db")
	require.ErrorContains(t, err, "no such recording")
	_, err = os.Stat(dir + "/missing.db")
	require.True(t, errors.Is(err, os.ErrNotExist), "Open created the file")

	_, err = Create(dir+"/kind.db", Run{Kind: "replay"}, Options{})
	require.ErrorContains(t, err, `run kind "replay"`)
}

// dumpEvents returns every row of every record table of a file, in key
// order.
func dumpEvents(t *testing.T, path string) map[string][][]any {
	t.Helper()
	db := rawDB(t, path)
	out := map[string][][]any{}
	for _, tbl := range append(Tables(), "resync_records") {
		rows, err := db.Query(`SELECT * FROM ` + tbl + ` ORDER BY run_id, seq` + map[bool]string{true: ", idx"}[tbl == "resync_records"])
		require.NoError(t, err)
		cols, err := rows.Columns()
		require.NoError(t, err)
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			require.NoError(t, rows.Scan(ptrs...))
			out[tbl] = append(out[tbl], vals)
		}
		require.NoError(t, rows.Err())
		rows.Close()
	}
	return out
}

func TestDeterministicEventTables(t *testing.T) {
	in := sample()
	var paths [2]string
	for i, start := range []time.Time{base, time.Now()} {
		paths[i] = tempPath(t)
		w := mustCreate(t, paths[i], simRun(start), Options{Block: true, BatchSize: 1 + 7*i})
		for _, v := range in {
			feed(w, v)
		}
		_, err := w.Close()
		require.NoError(t, err)
	}
	a, b := dumpEvents(t, paths[0]), dumpEvents(t, paths[1])
	for _, tbl := range append(Tables(), "resync_records") {
		require.NotEmpty(t, a[tbl], tbl)
	}
	require.Equal(t, a, b)

	var s1, s2 string
	require.NoError(t, rawDB(t, paths[0]).QueryRow(`SELECT started_at FROM runs`).Scan(&s1))
	require.NoError(t, rawDB(t, paths[1]).QueryRow(`SELECT started_at FROM runs`).Scan(&s2))
	require.NotEqual(t, s1, s2, "the runs differ only in wall-clock metadata")
}

func TestCorruptRecordingIsAnError(t *testing.T) {
	for _, tc := range []struct{ name, damage, want string }{
		{"frames count", `UPDATE load_messages SET frames = x'05' || x'01'`, "corrupt frames blob"},
		{"frames length", `UPDATE kv_messages SET frames = x'01' || x'ffffffff0f' || x'00'`, "corrupt frames blob"},
		{"frames trailing", `UPDATE load_messages SET frames = x'0100' || x'00'`, "trailing"},
		{"tokens", `UPDATE requests SET tokens = x'010203'`, "tokens blob"},
		{"candidates", `UPDATE selections SET candidates = '[{"cost":"lots"}]'`, "candidates"},
		{"resync", `DELETE FROM resync_records WHERE idx = 5`, "resync record 5 missing"},
		{"keep", `UPDATE discovery SET keep = '{' WHERE op = 'prune' AND keep IS NOT NULL`, "keep"},
		{"seq twice", `INSERT INTO ended (run_id, seq, at_ns, request_id, reason) VALUES (1, 1, 0, 0, '')`, "seq 1 appears twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := tempPath(t)
			w := mustCreate(t, path, simRun(base), Options{Block: true})
			for _, v := range sample() {
				feed(w, v)
			}
			_, err := w.Close()
			require.NoError(t, err)
			_, err = rawDB(t, path).Exec(tc.damage)
			require.NoError(t, err)
			r, err := Open(path)
			require.NoError(t, err)
			defer r.Close()
			err = r.Entries(w.RunID(), func(Entry) error { return nil })
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestEntriesStopsAtCallbackError(t *testing.T) {
	path := tempPath(t)
	w := mustCreate(t, path, simRun(base), Options{Block: true})
	for _, v := range sample() {
		feed(w, v)
	}
	_, err := w.Close()
	require.NoError(t, err)
	r, err := Open(path)
	require.NoError(t, err)
	defer r.Close()
	stop := errors.New("stop")
	n := 0
	err = r.Entries(w.RunID(), func(Entry) error {
		n++
		if n == 4 {
			return stop
		}
		return nil
	})
	require.ErrorIs(t, err, stop)
	require.Equal(t, 4, n)
}

func TestReaderFollowsLiveWriter(t *testing.T) {
	path := tempPath(t)
	w := mustCreate(t, path, Run{Kind: "live", Start: time.Now()}, Options{})
	for i := range 10 {
		w.Ended(Ended{At: at(i), RequestID: uint64(i), Reason: "x"})
	}
	require.Eventually(t, func() bool { return w.Stats().Written["ended"] == 10 }, 5*time.Second, time.Millisecond)
	require.Len(t, readEntries(t, path, w.RunID()), 10)

	r, err := Open(path)
	require.NoError(t, err)
	defer r.Close()
	runs, err := r.Runs()
	require.NoError(t, err)
	require.True(t, runs[0].EndedAt.IsZero(), "an open run has no end")

	for i := 10; i < 20; i++ {
		w.Ended(Ended{At: at(i), RequestID: uint64(i), Reason: "x"})
	}
	_, err = w.Close()
	require.NoError(t, err)
	n := 0
	require.NoError(t, r.Entries(w.RunID(), func(Entry) error { n++; return nil }))
	require.Equal(t, 20, n)
	runs, err = r.Runs()
	require.NoError(t, err)
	require.False(t, runs[0].EndedAt.IsZero())
}

func TestWriteErrorReturnedByClose(t *testing.T) {
	path := tempPath(t)
	opts, entered, release := stalled(Options{Block: true})
	w := mustCreate(t, path, simRun(base), opts)
	w.Outcome(Outcome{Status: StatusOK})
	w.Ended(Ended{Reason: "x"})
	<-entered
	// Another connection removes a table under the stalled writer.
	_, err := rawDB(t, path).Exec(`DROP TABLE outcomes`)
	require.NoError(t, err)
	close(release)
	w.Published(Published{Generation: 1})
	st, err := w.Close()
	require.ErrorContains(t, err, "outcomes")
	require.Equal(t, uint64(1), st.Dropped["outcomes"])
	require.Equal(t, uint64(1), st.Written["published"])
	require.Equal(t, st.Dropped["ended"]+st.Written["ended"], uint64(1))
}

func TestDiscoveryRefusesOtherEvents(t *testing.T) {
	path := tempPath(t)
	w := mustCreate(t, path, simRun(base), Options{Block: true})
	w.Discovery(events.LoadConnected{At: at(1)})
	w.Discovery(nil)
	w.Discovery((*events.DiscoveryPut)(nil))
	w.Discovery(&events.DiscoveryDelete{At: at(2), Namespace: "n", Keyspace: events.Models, Key: "k", Revision: 3})
	st, err := w.Close()
	require.NoError(t, err)
	require.Equal(t, uint64(3), st.Dropped["discovery"])
	require.Equal(t, uint64(1), st.Written["discovery"])
	entries := readEntries(t, path, w.RunID())
	require.Equal(t, []Entry{{1, at(2), events.DiscoveryDelete{At: at(2), Namespace: "n", Keyspace: events.Models, Key: "k", Revision: 3}}}, entries)
}

func TestRecordCallsCopy(t *testing.T) {
	path := tempPath(t)
	opts, entered, release := stalled(Options{Block: true})
	w := mustCreate(t, path, simRun(base), opts)
	w.Ended(Ended{})
	<-entered
	frames := [][]byte{[]byte("kv_metrics"), make([]byte, 8), make([]byte, 8), []byte{1, 2, 3}}
	tokens := []uint32{1, 2, 3}
	ns := []string{"a"}
	value := []byte("value")
	keep := []string{"a"}
	w.LoadMessage(&events.LoadMessage{Namespace: "n", Frames: frames}, envelope.Malformed)
	w.KVMessage("n", 1, frames, time.Time{}, "malformed")
	w.Request(Request{Tokens: tokens, Namespaces: ns})
	w.Discovery(events.DiscoveryPut{DiscoveryRecord: events.DiscoveryRecord{Value: value}})
	w.Discovery(events.DiscoveryResync{Records: []events.DiscoveryRecord{{Value: value}}})
	w.Discovery(events.DiscoveryPrune{Keep: keep})
	// The caller reuses its buffers at once.
	frames[3][0], frames[0] = 9, nil
	tokens[0], ns[0], value[0], keep[0] = 9, "z", 'X', "z"
	close(release)
	_, err := w.Close()
	require.NoError(t, err)
	e := readEntries(t, path, w.RunID())
	want := [][]byte{[]byte("kv_metrics"), make([]byte, 8), make([]byte, 8), []byte{1, 2, 3}}
	require.Equal(t, want, e[1].Value.(LoadMessage).Frames)
	require.Equal(t, want, e[2].Value.(KVMessage).Frames)
	require.Equal(t, []uint32{1, 2, 3}, e[3].Value.(Request).Tokens)
	require.Equal(t, []string{"a"}, e[3].Value.(Request).Namespaces)
	require.Equal(t, []byte("value"), e[4].Value.(events.DiscoveryPut).Value)
	require.Equal(t, []byte("value"), e[5].Value.(events.DiscoveryResync).Records[0].Value)
	require.Equal(t, []string{"a"}, e[6].Value.(events.DiscoveryPrune).Keep)
}

func TestFramesRoundTrip(t *testing.T) {
	for _, frames := range [][][]byte{
		{},
		{{}},
		{[]byte("kv_metrics"), {0, 0, 0, 0, 0, 0, 0, 1}, make([]byte, 300)},
		{make([]byte, 1<<16), {}, {7}},
	} {
		b := EncodeFrames(frames)
		got, err := DecodeFrames(b)
		require.NoError(t, err)
		require.Equal(t, frames, got)
		for _, f := range got {
			require.NotNil(t, f)
		}
	}
	_, err := DecodeFrames(nil)
	require.ErrorContains(t, err, "bad frame count")
	huge := binary.AppendUvarint(nil, 1<<62)
	_, err = DecodeFrames(huge)
	require.ErrorContains(t, err, "frames declared")
	_, err = DecodeFrames([]byte{1, 0x80})
	require.ErrorContains(t, err, "bad length")
}

func FuzzDecodeFrames(f *testing.F) {
	f.Add(EncodeFrames(wire.LoadMessage(1, 2, wire.ActiveLoad{WorkerID: 3}, base)))
	f.Add(EncodeFrames([][]byte{{}, {1}}))
	f.Add([]byte{0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Add([]byte{2, 0x80, 0x80, 0x01, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		frames, err := DecodeFrames(b)
		if err != nil {
			return
		}
		total := 0
		for _, fr := range frames {
			total += len(fr)
		}
		if total+len(frames) > len(b) {
			t.Fatalf("%d frames of %d bytes from a %d-byte blob", len(frames), total, len(b))
		}
		again, err := DecodeFrames(EncodeFrames(frames))
		if err != nil {
			t.Fatalf("re-encoded frames do not decode: %v", err)
		}
		if fmt.Sprint(again) != fmt.Sprint(frames) {
			t.Fatalf("frames changed through a round trip")
		}
	})
}
