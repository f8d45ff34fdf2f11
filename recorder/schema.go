package recorder

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// SchemaVersion is the version of the recording schema this build
// writes. Create appends runs only to a file of this version; other
// versions are refused, never migrated.
//
// Version 2 added runs.last_seq, the end marker's count of the records
// the writer assigned. Version 1 recordings are still read: their runs end
// with ended_at alone, so a missing tail of records cannot be detected in
// them (Integrity.TailUnchecked).
//
// Version 3 added the inputs of the core's kv-events staleness rule
// (kv_messages kinds subscribed, disconnected and unsubscribed; the ticks
// table) and configuration changes (config_changes). In older recordings
// a cleared publisher's row is the input itself; replay applies it.
//
// Version 4 added the inputs of the core's active-sequence account
// (request_progress: each request's first token, and its output at block
// boundaries while output blocks are tracked). Older recordings have
// none; their runs tracked nothing, and replay feeds nothing.
//
// Version 5 added replica sync: the batches of peer replicas' events the
// core applied (peer_batches, each the batch's own encoding), and the
// replica-sync time rules' settings in config_changes. Older recordings
// have no peers.
//
// Version 6 added gap recovery by replay: kv_messages kind 'replayed' (a
// message a publisher replayed, applied), a subscribed row's result
// 'replay' (its publisher offers replay), and the kv_replays table (each
// replay asked for, each recovery's end). Held messages are kv_messages
// rows at their release, so a replay, which never recovers, feeds the
// tracker what it applied live. Older recordings have none of these.
const SchemaVersion = 6

// oldestReadable is the oldest schema version Open reads.
const oldestReadable = 1

// table is one record table; it indexes the written and dropped counters.
type table uint8

const (
	tDiscovery table = iota
	tPublished
	tLoad
	tKV
	tRequests
	tSelections
	tEnded
	tOutcomes
	tTicks
	tConfigChanges
	tProgress
	tPeerBatches
	tKVReplays
	numTables
)

var tableNames = [numTables]string{
	"discovery", "published", "load_messages", "kv_messages",
	"requests", "selections", "ended", "outcomes", "ticks", "config_changes", "request_progress",
	"peer_batches", "kv_replays",
}

// Tables lists the record tables, the keys of Stats and RunInfo.Dropped.
func Tables() []string { return append([]string(nil), tableNames[:]...) }

// Every record table has the primary key (run_id, seq), whose index gives
// a run's records in seq order. The tables keep their rowid: rows of a
// kilobyte or more (candidates, frames, token ids) would overflow the much
// smaller cells of a WITHOUT ROWID table onto mostly empty pages.
var schema = []string{
	`CREATE TABLE meta (
	key   TEXT PRIMARY KEY,
	value TEXT NOT NULL
)`,
	`CREATE TABLE runs (
	id         INTEGER PRIMARY KEY,
	kind       TEXT NOT NULL CHECK (kind IN ('live', 'sim')),
	config     TEXT NOT NULL,
	scenario   TEXT NOT NULL,
	seed       INTEGER NOT NULL,
	version    TEXT NOT NULL,
	picker     TEXT NOT NULL,
	started_at TEXT NOT NULL,
	ended_at   TEXT,
	dropped    INTEGER,
	last_seq   INTEGER
)`,
	`CREATE TABLE run_drops (
	run_id  INTEGER NOT NULL REFERENCES runs (id),
	tbl     TEXT NOT NULL,
	dropped INTEGER NOT NULL,
	PRIMARY KEY (run_id, tbl)
) WITHOUT ROWID`,
	`CREATE TABLE discovery (
	run_id    INTEGER NOT NULL,
	seq       INTEGER NOT NULL,
	at_ns     INTEGER,
	op        TEXT NOT NULL CHECK (op IN ('put', 'delete', 'resync', 'prune', 'reset')),
	namespace TEXT,
	keyspace  TEXT,
	key       TEXT,
	revision  INTEGER,
	value     BLOB,
	keep      TEXT,
	records   INTEGER,
	PRIMARY KEY (run_id, seq)
)`,
	`CREATE TABLE resync_records (
	run_id   INTEGER NOT NULL,
	seq      INTEGER NOT NULL,
	idx      INTEGER NOT NULL,
	keyspace TEXT NOT NULL,
	key      TEXT NOT NULL,
	value    BLOB,
	PRIMARY KEY (run_id, seq, idx)
)`,
	`CREATE TABLE published (
	run_id     INTEGER NOT NULL,
	seq        INTEGER NOT NULL,
	at_ns      INTEGER,
	generation INTEGER NOT NULL,
	workers    INTEGER NOT NULL,
	PRIMARY KEY (run_id, seq)
)`,
	`CREATE TABLE load_messages (
	run_id                INTEGER NOT NULL,
	seq                   INTEGER NOT NULL,
	at_ns                 INTEGER,
	kind                  TEXT NOT NULL CHECK (kind IN ('connected', 'message')),
	namespace             TEXT NOT NULL,
	publisher_id          INTEGER NOT NULL,
	frames                BLOB,
	result                TEXT,
	sequence              INTEGER,
	worker_id             INTEGER,
	dp_rank               INTEGER,
	kv_used_blocks        INTEGER,
	active_decode_blocks  INTEGER,
	active_prefill_tokens INTEGER,
	PRIMARY KEY (run_id, seq)
)`,
	`CREATE TABLE kv_messages (
	run_id       INTEGER NOT NULL,
	seq          INTEGER NOT NULL,
	at_ns        INTEGER,
	kind         TEXT NOT NULL CHECK (kind IN ('subscribed', 'connected', 'message', 'replayed', 'disconnected', 'unsubscribed')),
	namespace    TEXT NOT NULL,
	publisher_id INTEGER NOT NULL,
	frames       BLOB,
	result       TEXT,
	PRIMARY KEY (run_id, seq)
)`,
	`CREATE TABLE requests (
	run_id        INTEGER NOT NULL,
	seq           INTEGER NOT NULL,
	at_ns         INTEGER,
	request_id    INTEGER NOT NULL,
	model         TEXT NOT NULL,
	namespaces    TEXT,
	prompt_tokens INTEGER NOT NULL,
	max_tokens    INTEGER NOT NULL,
	generation    INTEGER NOT NULL,
	session       INTEGER NOT NULL,
	route         TEXT NOT NULL,
	tokens        BLOB,
	PRIMARY KEY (run_id, seq)
)`,
	`CREATE TABLE selections (
	run_id           INTEGER NOT NULL,
	seq              INTEGER NOT NULL,
	at_ns            INTEGER,
	request_id       INTEGER NOT NULL,
	ok               INTEGER NOT NULL,
	namespace        TEXT NOT NULL,
	decode_worker    INTEGER NOT NULL,
	decode_rank      INTEGER NOT NULL,
	decode_declared  INTEGER NOT NULL,
	decode_role      TEXT NOT NULL,
	decode_reason    TEXT NOT NULL,
	has_prefill      INTEGER NOT NULL,
	prefill_worker   INTEGER NOT NULL,
	prefill_rank     INTEGER NOT NULL,
	prefill_declared INTEGER NOT NULL,
	prefill_role     TEXT NOT NULL,
	prefill_reason   TEXT NOT NULL,
	candidates       TEXT,
	PRIMARY KEY (run_id, seq)
)`,
	`CREATE TABLE ended (
	run_id     INTEGER NOT NULL,
	seq        INTEGER NOT NULL,
	at_ns      INTEGER,
	request_id INTEGER NOT NULL,
	reason     TEXT NOT NULL,
	PRIMARY KEY (run_id, seq)
)`,
	`CREATE TABLE outcomes (
	run_id        INTEGER NOT NULL,
	seq           INTEGER NOT NULL,
	at_ns         INTEGER,
	request_id    INTEGER NOT NULL,
	status        TEXT NOT NULL,
	error         TEXT NOT NULL,
	prompt_tokens INTEGER NOT NULL,
	cached_tokens INTEGER NOT NULL,
	output_tokens INTEGER NOT NULL,
	ttft_ns       INTEGER NOT NULL,
	e2e_ns        INTEGER NOT NULL,
	itl_ns        INTEGER NOT NULL,
	PRIMARY KEY (run_id, seq)
)`,
	`CREATE TABLE ticks (
	run_id INTEGER NOT NULL,
	seq    INTEGER NOT NULL,
	at_ns  INTEGER,
	PRIMARY KEY (run_id, seq)
)`,
	`CREATE TABLE config_changes (
	run_id           INTEGER NOT NULL,
	seq              INTEGER NOT NULL,
	at_ns            INTEGER,
	picker           TEXT NOT NULL,
	max_staleness_ns INTEGER NOT NULL,
	kv_stale_after_ns INTEGER NOT NULL,
	kv               TEXT NOT NULL,
	peer_silent_after_ns INTEGER NOT NULL DEFAULT 0,
	peer_request_ttl_ns  INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (run_id, seq)
)`,
	`CREATE TABLE peer_batches (
	run_id     INTEGER NOT NULL,
	seq        INTEGER NOT NULL,
	at_ns      INTEGER,
	replica_id INTEGER NOT NULL,
	batch_seq  INTEGER NOT NULL,
	events     INTEGER NOT NULL,
	batch      BLOB NOT NULL,
	PRIMARY KEY (run_id, seq)
)`,
	`CREATE TABLE kv_replays (
	run_id       INTEGER NOT NULL,
	seq          INTEGER NOT NULL,
	at_ns        INTEGER,
	kind         TEXT NOT NULL CHECK (kind IN ('wanted', 'finished')),
	namespace    TEXT NOT NULL,
	publisher_id INTEGER NOT NULL,
	from_seq     INTEGER NOT NULL,
	to_seq       INTEGER NOT NULL,
	reason       TEXT,
	error        TEXT,
	recovered    INTEGER,
	lost         INTEGER,
	duplicates   INTEGER,
	held         INTEGER,
	PRIMARY KEY (run_id, seq)
)`,
	`CREATE TABLE request_progress (
	run_id        INTEGER NOT NULL,
	seq           INTEGER NOT NULL,
	at_ns         INTEGER,
	request_id    INTEGER NOT NULL,
	kind          TEXT NOT NULL CHECK (kind IN ('first_token', 'output')),
	output_tokens INTEGER,
	PRIMARY KEY (run_id, seq)
)`,
	`CREATE VIEW timeline AS
	SELECT run_id, seq, at_ns, 'discovery.' || op AS kind, NULL AS request_id FROM discovery
	UNION ALL SELECT run_id, seq, at_ns, 'published', NULL FROM published
	UNION ALL SELECT run_id, seq, at_ns, 'load.' || kind, NULL FROM load_messages
	UNION ALL SELECT run_id, seq, at_ns, 'kv.' || kind, NULL FROM kv_messages
	UNION ALL SELECT run_id, seq, at_ns, 'request', request_id FROM requests
	UNION ALL SELECT run_id, seq, at_ns, 'selection', request_id FROM selections
	UNION ALL SELECT run_id, seq, at_ns, 'ended', request_id FROM ended
	UNION ALL SELECT run_id, seq, at_ns, 'outcome', request_id FROM outcomes
	UNION ALL SELECT run_id, seq, at_ns, 'tick', NULL FROM ticks
	UNION ALL SELECT run_id, seq, at_ns, 'config_changed', NULL FROM config_changes
	UNION ALL SELECT run_id, seq, at_ns, 'progress.' || kind, request_id FROM request_progress
	UNION ALL SELECT run_id, seq, at_ns, 'peer_batch', NULL FROM peer_batches
	UNION ALL SELECT run_id, seq, at_ns, 'kv_replay.' || kind, NULL FROM kv_replays`,
}

// errNotRecording: the file is a SQLite database, but not a recording.
var errNotRecording = errors.New("not a switchyard recording")

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// checkVersion reads the schema version of a recording and checks that
// it lies in [oldest, SchemaVersion]. It returns 0 when the database has
// no meta table.
func checkVersion(ctx context.Context, q querier, path string, oldest int) (version int, err error) {
	var n int
	if err := q.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'meta'`).Scan(&n); err != nil {
		return 0, fmt.Errorf("recorder: %s: %w", path, err)
	}
	if n == 0 {
		return 0, nil
	}
	var v string
	err = q.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = 'schema_version'`).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("recorder: %s: %w (meta has no schema_version)", path, errNotRecording)
	}
	if err != nil {
		return 0, fmt.Errorf("recorder: %s: %w", path, err)
	}
	got, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || got < oldest || got > SchemaVersion {
		if oldest == SchemaVersion {
			return 0, fmt.Errorf("recorder: %s has schema version %q; this build writes version %d only (record to a new file)", path, v, SchemaVersion)
		}
		return 0, fmt.Errorf("recorder: %s has schema version %q; this build reads versions %d to %d", path, v, oldest, SchemaVersion)
	}
	return got, nil
}

// ensureSchema creates the schema in an empty database, or checks the
// version of an existing recording.
func ensureSchema(ctx context.Context, db *sql.DB, path string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("recorder: %s: %w", path, err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit this is a no-op
	version, err := checkVersion(ctx, tx, path, SchemaVersion)
	if err != nil {
		return err
	}
	if version != 0 {
		return nil
	}
	var objects int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master`).Scan(&objects); err != nil {
		return fmt.Errorf("recorder: %s: %w", path, err)
	}
	if objects != 0 {
		return fmt.Errorf("recorder: %s: %w (it holds other tables)", path, errNotRecording)
	}
	for _, s := range schema {
		if _, err := tx.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("recorder: %s: creating schema: %w", path, err)
		}
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO meta (key, value) VALUES ('schema_version', ?)`, strconv.Itoa(SchemaVersion)); err != nil {
		return fmt.Errorf("recorder: %s: %w", path, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("recorder: %s: %w", path, err)
	}
	return nil
}

// dsn is the driver's connection string for path: a file: URI, with the
// characters a URI gives meaning to escaped.
func dsn(path string, params ...string) string {
	var b strings.Builder
	b.WriteString("file:")
	if strings.HasPrefix(path, "/") {
		b.WriteString("//") // an empty authority, so a path starting "//" stays a path
	}
	for i := 0; i < len(path); i++ {
		switch c := path[i]; c {
		case '?', '#', '%':
			fmt.Fprintf(&b, "%%%02X", c)
		default:
			b.WriteByte(c)
		}
	}
	for i, p := range params {
		if i == 0 {
			b.WriteByte('?')
		} else {
			b.WriteByte('&')
		}
		b.WriteString(p)
	}
	return b.String()
}
