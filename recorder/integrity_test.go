package recorder

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// recordOutcomes writes n outcome records (seqs 1 to n) and, with
// closeIt, closes the writer. An unclosed writer is closed at the end of
// the test, after the checks: until then the file is what a process
// killed before Close leaves behind.
func recordOutcomes(t *testing.T, n int, closeIt bool) (string, *Writer) {
	t.Helper()
	path := tempPath(t)
	w := mustCreate(t, path, simRun(base), Options{Block: true})
	for i := range n {
		w.Outcome(Outcome{At: at(i), RequestID: uint64(i), Status: StatusOK})
	}
	if closeIt {
		_, err := w.Close()
		require.NoError(t, err)
	} else {
		t.Cleanup(func() { _, _ = w.Close() })
		require.Eventually(t, func() bool { return w.Stats().Written["outcomes"] == uint64(n) }, 10*time.Second, time.Millisecond)
	}
	return path, w
}

func integrityOf(t *testing.T, path string, run int64) Integrity {
	t.Helper()
	r, err := Open(path)
	require.NoError(t, err)
	defer r.Close()
	in, err := r.Integrity(run)
	require.NoError(t, err)
	return in
}

func TestIntegrityOfAClosedRun(t *testing.T) {
	path, w := recordOutcomes(t, 50, true)
	in := integrityOf(t, path, w.RunID())
	require.Equal(t, Integrity{RunID: 1, Closed: true, LastSeq: 50, Records: 50}, in)
	require.True(t, in.Complete())
	require.Empty(t, in.Problems())
}

func TestIntegrityOfARunNeverClosed(t *testing.T) {
	path, w := recordOutcomes(t, 50, false)
	in := integrityOf(t, path, w.RunID())
	require.Equal(t, Integrity{RunID: 1, Records: 50}, in)
	require.False(t, in.Complete())
	require.Len(t, in.Problems(), 1)
	require.Contains(t, in.Problems()[0], "no end marker")
}

func TestIntegrityFindsGaps(t *testing.T) {
	path, w := recordOutcomes(t, 50, true)
	// Two stretches missing in the middle, and the tail: only the end
	// marker's last seq shows that records 49 and 50 ever existed.
	_, err := rawDB(t, path).Exec(`DELETE FROM outcomes WHERE seq IN (10, 20, 21, 22, 49, 50)`)
	require.NoError(t, err)
	in := integrityOf(t, path, w.RunID())
	require.Equal(t, Integrity{RunID: 1, Closed: true, LastSeq: 50, Records: 44, Gaps: 3, Missing: 6, FirstGap: 10}, in)
	require.False(t, in.Complete())
	require.Equal(t, []string{"3 sequence gaps (first at seq 10): 6 records missing"}, in.Problems())
}

func TestIntegrityRefusesImpossibleSeqs(t *testing.T) {
	for name, damage := range map[string]string{
		"duplicate":      `INSERT INTO ended (run_id, seq, at_ns, request_id, reason) VALUES (1, 7, 0, 1, 'x')`,
		"not positive":   `UPDATE outcomes SET seq = -3 WHERE seq = 1`,
		"beyond the end": `UPDATE runs SET last_seq = 40`,
	} {
		t.Run(name, func(t *testing.T) {
			path, w := recordOutcomes(t, 50, true)
			_, err := rawDB(t, path).Exec(damage)
			require.NoError(t, err)
			r, err := Open(path)
			require.NoError(t, err)
			defer r.Close()
			_, err = r.Integrity(w.RunID())
			require.Error(t, err)
			_, err = r.Integrity(99)
			require.ErrorContains(t, err, "no run 99")
		})
	}
}

// A version 1 recording (no runs.last_seq) is read; its closed runs are
// complete as far as can be told, and say that their tail is unchecked.
// This build does not append to it.
func TestSchemaVersion1IsReadNotAppended(t *testing.T) {
	path, w := recordOutcomes(t, 20, true)
	db := rawDB(t, path)
	_, err := db.Exec(`ALTER TABLE runs DROP COLUMN last_seq`)
	require.NoError(t, err)
	_, err = db.Exec(`UPDATE meta SET value = '1' WHERE key = 'schema_version'`)
	require.NoError(t, err)
	_, err = db.Exec(`DELETE FROM outcomes WHERE seq = 20`)
	require.NoError(t, err)

	in := integrityOf(t, path, w.RunID())
	require.Equal(t, Integrity{RunID: 1, Closed: true, TailUnchecked: true, Records: 19}, in)
	require.True(t, in.Complete())
	require.Len(t, readEntries(t, path, w.RunID()), 19)

	_, err = Create(path, simRun(base), Options{})
	require.ErrorContains(t, err, `schema version "1"; this build writes version 6 only`)
}
