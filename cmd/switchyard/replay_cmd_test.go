package main

import (
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// simRecording records the CLI scenario with `switchyard sim --record`.
func simRecording(t *testing.T) string {
	t.Helper()
	db := filepath.Join(t.TempDir(), "run.db")
	out, err := run(t, "sim", "--scenario", writeFile(t, "s.yaml", simScenario), "--record", db)
	require.NoError(t, err, out)
	return db
}

// damage changes a recording outside the recorder.
func damage(t *testing.T, path, query string) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	defer db.Close()
	_, err = db.Exec(query)
	require.NoError(t, err)
}

func requireExit(t *testing.T, err error, code int) {
	t.Helper()
	var ee *exitError
	require.True(t, errors.As(err, &ee), "want *exitError, got %T: %v", err, err)
	assert.Equal(t, code, ee.code, "%v", err)
}

func TestReplayOfACompleteRecordingExits0(t *testing.T) {
	out, err := run(t, "replay", simRecording(t))
	require.NoError(t, err, out)
	assert.Contains(t, out, "every selection reproduced")
	assert.NotContains(t, out, "incomplete")
}

func TestReplayRefusesAnIncompleteRecording(t *testing.T) {
	for _, c := range []struct {
		name, damage, problem string
	}{
		// What a process killed before Close leaves: no end marker.
		{"no end marker", `UPDATE runs SET ended_at = NULL, dropped = NULL, last_seq = NULL`,
			"recording incomplete: no end marker"},
		// A record lost in the middle (an outcome: the inputs, and so the
		// selections, stay whole).
		{"sequence gap", `DELETE FROM outcomes WHERE seq = (SELECT seq FROM outcomes ORDER BY seq LIMIT 1 OFFSET 20)`,
			"recording incomplete: 1 sequence gaps (first at seq "},
	} {
		t.Run(c.name, func(t *testing.T) {
			db := simRecording(t)
			damage(t, db, c.damage)

			_, err := run(t, "replay", db)
			requireExit(t, err, 3)
			assert.Contains(t, err.Error(), "run 1 is incomplete; replay it anyway with --allow-incomplete")
			assert.Contains(t, err.Error(), c.problem)

			_, err = run(t, "replay", db, "--counterfactual", "round_robin")
			requireExit(t, err, 3)

			out, err := run(t, "replay", db, "--allow-incomplete")
			require.NoError(t, err, out)
			assert.Contains(t, out, c.problem)
			assert.Contains(t, out, "reproduced 150 (100.00%)")
			assert.Contains(t, out, "every recorded selection reproduced, but the recording is incomplete")
			assert.NotContains(t, out, "  every selection reproduced")
		})
	}
}
