package recorder

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"switchyard/fakefleet/wire"
	"switchyard/router/eventplane"
	"switchyard/router/events"
	"switchyard/router/picker"
)

// TestDocumentedQueries runs every SQL example of docs/recording.md
// against a recording, so the page cannot drift from the schema.
func TestDocumentedQueries(t *testing.T) {
	doc, err := os.ReadFile("../docs/recording.md")
	require.NoError(t, err)
	var queries []string
	for _, block := range strings.Split(string(doc), "```sql\n")[1:] {
		end := strings.Index(block, "```")
		require.GreaterOrEqual(t, end, 0, "unterminated sql block")
		queries = append(queries, block[:end])
	}
	require.GreaterOrEqual(t, len(queries), 5)

	path := tempPath(t)
	w := mustCreate(t, path, simRun(base), Options{Block: true})
	for _, v := range sample() {
		feed(w, v)
	}
	// The worker and request the examples name.
	w.LoadMessage(&events.LoadMessage{At: at(30), Namespace: "dynamo", PublisherID: 77,
		Frames: wire.LoadMessage(77, 1, wire.ActiveLoad{WorkerID: 1003, KVUsedBlocks: wire.U64(5)}, at(30))}, eventplane.Applied)
	w.Selection(Selection{At: at(31), RequestID: 42, OK: true, Candidates: []picker.Candidate{
		{Phase: "decode", WorkerID: 1003, Cost: 0.5, Defined: true}, {Phase: "decode", WorkerID: 1004}}})
	_, err = w.Close()
	require.NoError(t, err)
	db := rawDB(t, path)
	for _, q := range queries {
		rows, err := db.Query(q)
		require.NoError(t, err, q)
		n := 0
		for rows.Next() {
			n++
		}
		require.NoError(t, rows.Err(), q)
		rows.Close()
		require.Positive(t, n, "no rows from %s", q)
	}
}
