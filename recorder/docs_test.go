package recorder

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"switchyard/fakefleet/wire"
	"switchyard/router/envelope"
	"switchyard/router/events"
	"switchyard/router/picker"
)

// newerThanDebian12 are SQL features of SQLite releases after 3.40, the
// sqlite3 of Debian 12. A documented query using one returns NULL or fails
// there, while a newer sqlite3 (or the Go driver's) would not notice.
var newerThanDebian12 = []string{"'subsec'", "timediff(", "unhex(", "octet_length(", "concat(", "concat_ws(", "string_agg("}

// readableTime is what the documented queries' "at" columns must hold.
var readableTime = regexp.MustCompile(`^2025-03-04 05:06:\d\d\.\d{3}$`)

// documentedQueries returns the SQL examples of docs/recording.md.
func documentedQueries(t *testing.T) []string {
	t.Helper()
	doc, err := os.ReadFile("../docs/recording.md")
	require.NoError(t, err)
	var queries []string
	for _, block := range strings.Split(string(doc), "```sql\n")[1:] {
		end := strings.Index(block, "```")
		require.GreaterOrEqual(t, end, 0, "unterminated sql block")
		queries = append(queries, block[:end])
	}
	require.GreaterOrEqual(t, len(queries), 5)
	return queries
}

// documentedRecording writes a closed recording holding the workers and
// requests the examples name.
func documentedRecording(t *testing.T) string {
	t.Helper()
	path := tempPath(t)
	w := mustCreate(t, path, simRun(base), Options{Block: true})
	for _, v := range sample() {
		feed(w, v)
	}
	w.LoadMessage(&events.LoadMessage{At: at(30), Namespace: "dynamo", PublisherID: 77,
		Frames: wire.LoadMessage(77, 1, wire.ActiveLoad{WorkerID: 1003, DPRank: 1, KVUsedBlocks: wire.U64(5),
			ActiveDecodeBlocks: wire.U64(3), ActivePrefillTokens: wire.U64(900)}, at(30))}, envelope.Applied)
	w.Selection(Selection{At: at(31), RequestID: 42, OK: true, Candidates: []picker.Candidate{
		{Phase: "decode", WorkerID: 1003, Cost: 0.5, Defined: true}, {Phase: "decode", WorkerID: 1004}}})
	_, err := w.Close()
	require.NoError(t, err)
	return path
}

// TestDocumentedQueries runs every SQL example of docs/recording.md
// against a recording, through the Go driver and through the sqlite3
// command-line tool, so the page can drift neither from the schema nor
// from the SQLite operators have.
func TestDocumentedQueries(t *testing.T) {
	queries := documentedQueries(t)
	for _, q := range queries {
		for _, feature := range newerThanDebian12 {
			require.NotContains(t, q, feature, "needs a SQLite newer than 3.40")
		}
	}
	path := documentedRecording(t)
	db := rawDB(t, path)
	cli, err := exec.LookPath("sqlite3")
	require.NoError(t, err, "the sqlite3 command-line tool is missing: hack/install-test-deps.sh installs it")
	version, err := exec.Command(cli, "--version").Output()
	require.NoError(t, err)
	t.Logf("sqlite3 %s", bytes.TrimSpace(version))

	for i, q := range queries {
		viaDriver := queryDriver(t, db, q)
		checkSensible(t, fmt.Sprintf("query %d through the driver", i+1), q, viaDriver)
		viaCLI := queryCLI(t, cli, path, q)
		checkSensible(t, fmt.Sprintf("query %d through sqlite3", i+1), q, viaCLI)
		require.Len(t, viaCLI, len(viaDriver), "query %d: sqlite3 and the driver disagree on the rows of\n%s", i+1, q)
		for r := range viaDriver {
			if at, ok := viaDriver[r]["at"]; ok {
				require.Equal(t, at, viaCLI[r]["at"], "query %d row %d", i+1, r)
			}
		}
	}
}

// checkSensible: the query returned rows, no column is NULL in all of
// them (what a date function given a modifier it does not know returns),
// and readable times are timestamps of the recording.
func checkSensible(t *testing.T, what, q string, rows []map[string]any) {
	t.Helper()
	require.NotEmpty(t, rows, "%s: no rows from\n%s", what, q)
	for col := range rows[0] {
		set := 0
		for _, row := range rows {
			if row[col] != nil {
				set++
			}
		}
		require.Positive(t, set, "%s: column %s is NULL in every row of\n%s", what, col, q)
	}
	for _, row := range rows {
		if at, ok := row["at"]; ok && at != nil { // a zero time is stored NULL
			require.Regexp(t, readableTime, fmt.Sprint(at), "%s", what)
		}
	}
}

func queryDriver(t *testing.T, db *sql.DB, q string) []map[string]any {
	t.Helper()
	rows, err := db.Query(q)
	require.NoError(t, err, q)
	defer rows.Close()
	cols, err := rows.Columns()
	require.NoError(t, err)
	var out []map[string]any
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		require.NoError(t, rows.Scan(ptrs...), q)
		row := make(map[string]any, len(cols))
		for i, c := range cols {
			if b, ok := vals[i].([]byte); ok {
				vals[i] = string(b)
			}
			row[c] = vals[i]
		}
		out = append(out, row)
	}
	require.NoError(t, rows.Err(), q)
	return out
}

// queryCLI runs q with the sqlite3 tool in JSON output mode.
func queryCLI(t *testing.T, cli, path, q string) []map[string]any {
	t.Helper()
	cmd := exec.Command(cli, "-bail", "-json", path)
	cmd.Stdin = strings.NewReader(q)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "sqlite3: %s\n%s", stderr.String(), q)
	require.Empty(t, stderr.String(), q)
	var out []map[string]any
	if stdout.Len() == 0 { // sqlite3 prints nothing for no rows
		return nil
	}
	dec := json.NewDecoder(&stdout)
	dec.UseNumber()
	require.NoError(t, dec.Decode(&out), "sqlite3 output of\n%s", q)
	return out
}
