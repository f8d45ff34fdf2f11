package recorder

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"switchyard/router/events"
	"switchyard/router/replica"
)

// Reader reads a recording. It opens the file read-only and may follow a
// recording a live Writer still has open.
type Reader struct {
	db      *sql.DB
	path    string
	version int // the file's schema version
}

// Open opens a recording read-only and checks its schema version.
func Open(path string) (*Reader, error) {
	if _, err := os.Stat(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("recorder: %s: no such recording", path)
		}
		return nil, fmt.Errorf("recorder: %w", err)
	}
	db, err := sql.Open("sqlite", dsn(path, "mode=ro", "_pragma=busy_timeout(10000)"))
	if err != nil {
		return nil, fmt.Errorf("recorder: %s: %w", path, err)
	}
	version, err := checkVersion(context.Background(), db, path, oldestReadable)
	if err == nil && version == 0 {
		err = fmt.Errorf("recorder: %s: %w (no meta table)", path, errNotRecording)
	}
	if err != nil {
		db.Close()
		return nil, err
	}
	return &Reader{db: db, path: path, version: version}, nil
}

// Close closes the file.
func (r *Reader) Close() error { return r.db.Close() }

// Runs lists the recorded runs in id order.
func (r *Reader) Runs() ([]RunInfo, error) {
	ctx := context.Background()
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, r.errf("runs", err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only
	lastSeq := "last_seq"
	if r.version < 2 {
		lastSeq = "NULL" // version 1 has no last_seq
	}
	rows, err := tx.QueryContext(ctx, `SELECT id, kind, config, scenario, seed, version, picker, started_at, ended_at, `+lastSeq+`
		FROM runs ORDER BY id`)
	if err != nil {
		return nil, r.errf("runs", err)
	}
	defer rows.Close()
	var out []RunInfo
	byID := map[int64]int{}
	for rows.Next() {
		var ri RunInfo
		var seed int64
		var started string
		var ended sql.NullString
		var last sql.NullInt64
		if err := rows.Scan(&ri.ID, &ri.Kind, &ri.Config, &ri.Scenario, &seed, &ri.Version, &ri.Picker, &started, &ended, &last); err != nil {
			return nil, r.errf("runs", err)
		}
		ri.Seed, ri.LastSeq = i2u(seed), i2u(last.Int64)
		if ri.Start, err = time.Parse(time.RFC3339Nano, started); err != nil {
			return nil, r.errf(fmt.Sprintf("run %d started_at", ri.ID), err)
		}
		ri.Start = ri.Start.UTC()
		if ended.Valid {
			if ri.EndedAt, err = time.Parse(time.RFC3339Nano, ended.String); err != nil {
				return nil, r.errf(fmt.Sprintf("run %d ended_at", ri.ID), err)
			}
			ri.EndedAt = ri.EndedAt.UTC()
		}
		ri.Dropped = map[string]uint64{}
		byID[ri.ID] = len(out)
		out = append(out, ri)
	}
	if err := rows.Err(); err != nil {
		return nil, r.errf("runs", err)
	}
	drops, err := tx.QueryContext(ctx, `SELECT run_id, tbl, dropped FROM run_drops ORDER BY run_id, tbl`)
	if err != nil {
		return nil, r.errf("run_drops", err)
	}
	defer drops.Close()
	for drops.Next() {
		var id, n int64
		var tbl string
		if err := drops.Scan(&id, &tbl, &n); err != nil {
			return nil, r.errf("run_drops", err)
		}
		if i, ok := byID[id]; ok {
			out[i].Dropped[tbl] = i2u(n)
		}
	}
	if err := drops.Err(); err != nil {
		return nil, r.errf("run_drops", err)
	}
	return out, nil
}

func (r *Reader) errf(what string, err error) error {
	return fmt.Errorf("recorder: %s: %s: %w", r.path, what, err)
}

// cursor walks one table of a run in seq order.
type cursor struct {
	name string
	rows *sql.Rows
	scan func(*sql.Rows) (Entry, error)
	head Entry
	ok   bool
}

func (c *cursor) next() error {
	c.ok = false
	if !c.rows.Next() {
		return c.rows.Err()
	}
	e, err := c.scan(c.rows)
	if err != nil {
		return err
	}
	c.head, c.ok = e, true
	return nil
}

// Entries calls fn with every record of the run, in seq order, from one
// consistent snapshot of the file. It stops at the first error, fn's
// included, and returns it.
func (r *Reader) Entries(runID int64, fn func(Entry) error) error {
	ctx := context.Background()
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return r.errf("entries", err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only
	var exists int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM runs WHERE id = ?`, runID).Scan(&exists); err != nil {
		return r.errf("entries", err)
	}
	if exists == 0 {
		return fmt.Errorf("recorder: %s: no run %d", r.path, runID)
	}
	specs := []struct {
		name, query string
		scan        func(*sql.Rows) (Entry, error)
	}{
		{"discovery", `SELECT seq, at_ns, op, namespace, keyspace, key, revision, value, value IS NULL, keep, records
			FROM discovery WHERE run_id = ? ORDER BY seq`, func(rows *sql.Rows) (Entry, error) { return scanDiscovery(ctx, tx, runID, rows) }},
		{"published", `SELECT seq, at_ns, generation, workers FROM published WHERE run_id = ? ORDER BY seq`, scanPublished},
		{"load_messages", `SELECT seq, at_ns, kind, namespace, publisher_id, frames, result FROM load_messages WHERE run_id = ? ORDER BY seq`, scanLoad},
		{"kv_messages", `SELECT seq, at_ns, kind, namespace, publisher_id, frames, result FROM kv_messages WHERE run_id = ? ORDER BY seq`, scanKV},
		{"requests", `SELECT seq, at_ns, request_id, model, namespaces, prompt_tokens, max_tokens, generation, session, route, tokens, tokens IS NULL
			FROM requests WHERE run_id = ? ORDER BY seq`, scanRequest},
		{"selections", `SELECT seq, at_ns, request_id, ok, namespace, decode_worker, decode_rank, decode_declared, decode_role, decode_reason,
			has_prefill, prefill_worker, prefill_rank, prefill_declared, prefill_role, prefill_reason, candidates
			FROM selections WHERE run_id = ? ORDER BY seq`, scanSelection},
		{"ended", `SELECT seq, at_ns, request_id, reason FROM ended WHERE run_id = ? ORDER BY seq`, scanEnded},
		{"outcomes", outcomesQuery, scanOutcome},
	}
	peerCols := "0, 0"
	if r.version >= 5 {
		peerCols = "peer_silent_after_ns, peer_request_ttl_ns"
	}
	if r.version >= 3 {
		specs = append(specs, []struct {
			name, query string
			scan        func(*sql.Rows) (Entry, error)
		}{
			{"ticks", `SELECT seq, at_ns FROM ticks WHERE run_id = ? ORDER BY seq`, scanTick},
			{"config_changes", `SELECT seq, at_ns, picker, max_staleness_ns, kv_stale_after_ns, kv, ` + peerCols + ` FROM config_changes WHERE run_id = ? ORDER BY seq`, scanConfigChange},
		}...)
	}
	if r.version >= 4 {
		specs = append(specs, struct {
			name, query string
			scan        func(*sql.Rows) (Entry, error)
		}{"request_progress", `SELECT seq, at_ns, request_id, kind, output_tokens FROM request_progress WHERE run_id = ? ORDER BY seq`, scanProgress})
	}
	if r.version >= 5 {
		specs = append(specs, struct {
			name, query string
			scan        func(*sql.Rows) (Entry, error)
		}{"peer_batches", `SELECT seq, at_ns, batch FROM peer_batches WHERE run_id = ? ORDER BY seq`, scanPeerBatch})
	}
	if r.version >= 6 {
		specs = append(specs, struct {
			name, query string
			scan        func(*sql.Rows) (Entry, error)
		}{"kv_replays", `SELECT seq, at_ns, kind, namespace, publisher_id, from_seq, to_seq, reason, error, recovered, lost, duplicates, held
			FROM kv_replays WHERE run_id = ? ORDER BY seq`, scanKVReplay})
	}
	cursors := make([]*cursor, 0, len(specs))
	defer func() {
		for _, c := range cursors {
			c.rows.Close()
		}
	}()
	for _, s := range specs {
		rows, err := tx.QueryContext(ctx, s.query, runID)
		if err != nil {
			return r.errf(s.name, err)
		}
		c := &cursor{name: s.name, rows: rows, scan: s.scan}
		cursors = append(cursors, c)
		if err := c.next(); err != nil {
			return r.errf(s.name, err)
		}
	}
	var last uint64
	for {
		var first *cursor
		for _, c := range cursors {
			if c.ok && (first == nil || c.head.Seq < first.head.Seq) {
				first = c
			}
		}
		if first == nil {
			return nil
		}
		e := first.head
		if last != 0 && e.Seq == last {
			return fmt.Errorf("recorder: %s: run %d: seq %d appears twice (%s)", r.path, runID, e.Seq, first.name)
		}
		last = e.Seq
		if err := fn(e); err != nil {
			return err
		}
		if err := first.next(); err != nil {
			return r.errf(first.name, err)
		}
	}
}

const outcomesQuery = `SELECT seq, at_ns, request_id, status, error, prompt_tokens, cached_tokens, output_tokens, ttft_ns, e2e_ns, itl_ns
	FROM outcomes WHERE run_id = ? ORDER BY seq`

// Outcomes returns the run's outcomes in seq order.
func (r *Reader) Outcomes(runID int64) ([]Outcome, error) {
	rows, err := r.db.QueryContext(context.Background(), outcomesQuery, runID)
	if err != nil {
		return nil, r.errf("outcomes", err)
	}
	defer rows.Close()
	var out []Outcome
	for rows.Next() {
		e, err := scanOutcome(rows)
		if err != nil {
			return nil, r.errf("outcomes", err)
		}
		out = append(out, e.Value.(Outcome))
	}
	if err := rows.Err(); err != nil {
		return nil, r.errf("outcomes", err)
	}
	return out, nil
}

func seqErr(seq int64, err error) error { return fmt.Errorf("seq %d: %w", seq, err) }

func scanDiscovery(ctx context.Context, tx *sql.Tx, runID int64, rows *sql.Rows) (Entry, error) {
	var (
		seq               int64
		at, rev, records  sql.NullInt64
		op                string
		ns, ks, key, keep sql.NullString
		value             []byte
		valueNull         bool
	)
	if err := rows.Scan(&seq, &at, &op, &ns, &ks, &key, &rev, &value, &valueNull, &keep, &records); err != nil {
		return Entry{}, err
	}
	e := Entry{Seq: i2u(seq), At: fromNS(at)}
	switch op {
	case "put":
		e.Value = events.DiscoveryPut{At: e.At, Namespace: ns.String, Revision: rev.Int64,
			DiscoveryRecord: events.DiscoveryRecord{Keyspace: parseKeyspace(ks.String), Key: key.String, Value: nullBlob(value, valueNull)}}
	case "delete":
		e.Value = events.DiscoveryDelete{At: e.At, Namespace: ns.String, Keyspace: parseKeyspace(ks.String), Key: key.String, Revision: rev.Int64}
	case "resync":
		recs, err := scanResync(ctx, tx, runID, seq, records)
		if err != nil {
			return Entry{}, seqErr(seq, err)
		}
		e.Value = events.DiscoveryResync{At: e.At, Namespace: ns.String, Records: recs, Revision: rev.Int64}
	case "prune":
		k, err := decodeStrings(keep)
		if err != nil {
			return Entry{}, seqErr(seq, fmt.Errorf("keep: %w", err))
		}
		e.Value = events.DiscoveryPrune{At: e.At, Keep: k}
	case "reset":
		e.Value = events.DiscoveryReset{At: e.At}
	default:
		return Entry{}, seqErr(seq, fmt.Errorf("unknown discovery op %q", op))
	}
	return e, nil
}

func scanResync(ctx context.Context, tx *sql.Tx, runID, seq int64, records sql.NullInt64) ([]events.DiscoveryRecord, error) {
	if !records.Valid {
		return nil, nil
	}
	rows, err := tx.QueryContext(ctx, `SELECT idx, keyspace, key, value, value IS NULL FROM resync_records
		WHERE run_id = ? AND seq = ? ORDER BY idx`, runID, seq)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	recs := []events.DiscoveryRecord{}
	for rows.Next() {
		var idx int64
		var ks, key string
		var value []byte
		var valueNull bool
		if err := rows.Scan(&idx, &ks, &key, &value, &valueNull); err != nil {
			return nil, err
		}
		if idx != int64(len(recs)) {
			return nil, fmt.Errorf("resync record %d missing", len(recs))
		}
		recs = append(recs, events.DiscoveryRecord{Keyspace: parseKeyspace(ks), Key: key, Value: nullBlob(value, valueNull)})
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if int64(len(recs)) != records.Int64 {
		return nil, fmt.Errorf("resync holds %d records, %d recorded", records.Int64, len(recs))
	}
	return recs, nil
}

func scanPublished(rows *sql.Rows) (Entry, error) {
	var seq, gen int64
	var at sql.NullInt64
	var p Published
	if err := rows.Scan(&seq, &at, &gen, &p.Workers); err != nil {
		return Entry{}, err
	}
	p.At, p.Generation = fromNS(at), i2u(gen)
	return Entry{Seq: i2u(seq), At: p.At, Value: p}, nil
}

type frameRow struct {
	seq         int64
	at          time.Time
	kind        string // a session kind, or "" for a message
	namespace   string
	publisherID uint64
	frames      [][]byte
	result      string
}

func scanFrameRow(rows *sql.Rows) (frameRow, error) {
	var (
		f      frameRow
		at     sql.NullInt64
		kind   string
		pid    int64
		blob   []byte
		result sql.NullString
	)
	if err := rows.Scan(&f.seq, &at, &kind, &f.namespace, &pid, &blob, &result); err != nil {
		return f, err
	}
	f.at, f.publisherID, f.result = fromNS(at), i2u(pid), result.String
	switch kind {
	case kindSubscribed, kindConnected, kindDisconnected, kindUnsubscribed:
		f.kind = kind
	case "message", kindReplayed:
		if kind == kindReplayed {
			f.kind = kind
		}
		if blob != nil { // a frames BLOB is never empty: it starts with the count
			frames, err := DecodeFrames(blob)
			if err != nil {
				return f, seqErr(f.seq, err)
			}
			f.frames = frames
		}
	default:
		return f, seqErr(f.seq, fmt.Errorf("unknown kind %q", kind))
	}
	return f, nil
}

func scanLoad(rows *sql.Rows) (Entry, error) {
	f, err := scanFrameRow(rows)
	if err != nil {
		return Entry{}, err
	}
	e := Entry{Seq: i2u(f.seq), At: f.at}
	switch f.kind {
	case "":
		e.Value = LoadMessage{LoadMessage: events.LoadMessage{At: f.at, Namespace: f.namespace, PublisherID: f.publisherID, Frames: f.frames}, Result: f.result}
	case kindConnected:
		e.Value = events.LoadConnected{At: f.at, Namespace: f.namespace, PublisherID: f.publisherID}
	default:
		return e, seqErr(f.seq, fmt.Errorf("kind %q is not a kv_metrics row", f.kind))
	}
	return e, nil
}

func scanKV(rows *sql.Rows) (Entry, error) {
	f, err := scanFrameRow(rows)
	if err != nil {
		return Entry{}, err
	}
	e := Entry{Seq: i2u(f.seq), At: f.at}
	switch f.kind {
	case kindSubscribed:
		e.Value = events.KVSubscribed{At: f.at, Namespace: f.namespace, PublisherID: f.publisherID, Replay: f.result == resultReplay}
	case kindConnected:
		e.Value = events.KVConnected{At: f.at, Namespace: f.namespace, PublisherID: f.publisherID}
	case kindDisconnected:
		e.Value = events.KVDisconnected{At: f.at, Namespace: f.namespace, PublisherID: f.publisherID}
	case kindUnsubscribed:
		e.Value = events.KVUnsubscribed{At: f.at, Namespace: f.namespace, PublisherID: f.publisherID}
	default:
		e.Value = KVMessage{KVMessage: events.KVMessage{At: f.at, Namespace: f.namespace, PublisherID: f.publisherID, Frames: f.frames},
			Result: f.result, Replayed: f.kind == kindReplayed}
	}
	return e, nil
}

func scanKVReplay(rows *sql.Rows) (Entry, error) {
	var (
		seq, pid, from, to          int64
		at                          sql.NullInt64
		kind, ns                    string
		reason, errText             sql.NullString
		recovered, lost, dups, held sql.NullInt64
	)
	if err := rows.Scan(&seq, &at, &kind, &ns, &pid, &from, &to, &reason, &errText, &recovered, &lost, &dups, &held); err != nil {
		return Entry{}, err
	}
	e := Entry{Seq: i2u(seq), At: fromNS(at)}
	switch kind {
	case "wanted":
		e.Value = KVReplayWanted{At: e.At, Namespace: ns, PublisherID: i2u(pid), From: i2u(from), To: i2u(to)}
	case "finished":
		e.Value = KVReplayFinished{At: e.At, Namespace: ns, PublisherID: i2u(pid), From: i2u(from), To: i2u(to),
			Reason: reason.String, Err: errText.String, Recovered: i2u(recovered.Int64), Lost: i2u(lost.Int64),
			Duplicates: i2u(dups.Int64), Held: int(held.Int64)}
	default:
		return e, seqErr(seq, fmt.Errorf("unknown kv_replays kind %q", kind))
	}
	return e, nil
}

func scanRequest(rows *sql.Rows) (Entry, error) {
	var (
		seq, id, prompt, gen, session int64
		at                            sql.NullInt64
		ns                            sql.NullString
		tokens                        []byte
		tokensNull                    bool
		q                             Request
	)
	if err := rows.Scan(&seq, &at, &id, &q.Model, &ns, &prompt, &q.MaxTokens, &gen, &session, &q.Route, &tokens, &tokensNull); err != nil {
		return Entry{}, err
	}
	q.At, q.RequestID, q.PromptTokens, q.Generation, q.Session = fromNS(at), i2u(id), i2u(prompt), i2u(gen), i2u(session)
	var err error
	if q.Namespaces, err = decodeStrings(ns); err != nil {
		return Entry{}, seqErr(seq, fmt.Errorf("namespaces: %w", err))
	}
	if q.Tokens, err = decodeTokens(tokens, tokensNull); err != nil {
		return Entry{}, seqErr(seq, err)
	}
	return Entry{Seq: i2u(seq), At: q.At, Value: q}, nil
}

func scanSelection(rows *sql.Rows) (Entry, error) {
	var (
		seq, id, dw, pw        int64
		at                     sql.NullInt64
		ok, dDecl, hasP, pDecl bool
		dRole, pRole           string
		cands                  sql.NullString
		s                      Selection
	)
	sel := &s.Sel
	if err := rows.Scan(&seq, &at, &id, &ok, &sel.Namespace,
		&dw, &sel.Decode.DPRank, &dDecl, &dRole, &sel.DecodeReason, &hasP,
		&pw, &sel.Prefill.DPRank, &pDecl, &pRole, &sel.PrefillReason, &cands); err != nil {
		return Entry{}, err
	}
	s.At, s.RequestID, s.OK = fromNS(at), i2u(id), ok
	sel.Decode.WorkerID, sel.Decode.DPDeclared, sel.Decode.Role = i2u(dw), dDecl, parseRole(dRole)
	sel.Prefill.WorkerID, sel.Prefill.DPDeclared, sel.Prefill.Role = i2u(pw), pDecl, parseRole(pRole)
	sel.HasPrefill = hasP
	var err error
	if s.Candidates, err = decodeCandidates(cands); err != nil {
		return Entry{}, seqErr(seq, fmt.Errorf("candidates: %w", err))
	}
	return Entry{Seq: i2u(seq), At: s.At, Value: s}, nil
}

func scanEnded(rows *sql.Rows) (Entry, error) {
	var seq, id int64
	var at sql.NullInt64
	var e Ended
	if err := rows.Scan(&seq, &at, &id, &e.Reason); err != nil {
		return Entry{}, err
	}
	e.At, e.RequestID = fromNS(at), i2u(id)
	return Entry{Seq: i2u(seq), At: e.At, Value: e}, nil
}

func scanOutcome(rows *sql.Rows) (Entry, error) {
	var seq, id, ttft, e2e, itl int64
	var at sql.NullInt64
	var o Outcome
	if err := rows.Scan(&seq, &at, &id, &o.Status, &o.Error, &o.PromptTokens, &o.CachedTokens, &o.OutputTokens, &ttft, &e2e, &itl); err != nil {
		return Entry{}, err
	}
	o.At, o.RequestID = fromNS(at), i2u(id)
	o.TTFT, o.E2E, o.ITL = time.Duration(ttft), time.Duration(e2e), time.Duration(itl)
	return Entry{Seq: i2u(seq), At: o.At, Value: o}, nil
}

func scanTick(rows *sql.Rows) (Entry, error) {
	var (
		seq int64
		at  sql.NullInt64
	)
	if err := rows.Scan(&seq, &at); err != nil {
		return Entry{}, err
	}
	t := events.Tick{At: fromNS(at)}
	return Entry{Seq: i2u(seq), At: t.At, Value: t}, nil
}

func scanProgress(rows *sql.Rows) (Entry, error) {
	var (
		seq, id int64
		at, out sql.NullInt64
		kind    string
	)
	if err := rows.Scan(&seq, &at, &id, &kind, &out); err != nil {
		return Entry{}, err
	}
	e := Entry{Seq: i2u(seq), At: fromNS(at)}
	switch kind {
	case "first_token":
		e.Value = FirstToken{At: e.At, RequestID: i2u(id)}
	case "output":
		if !out.Valid {
			return Entry{}, seqErr(seq, fmt.Errorf("request_progress.output_tokens: %v", out))
		}
		e.Value = Progress{At: e.At, RequestID: i2u(id), OutputTokens: i2u(out.Int64)}
	default:
		return Entry{}, seqErr(seq, fmt.Errorf("unknown request_progress kind %q", kind))
	}
	return e, nil
}

// scanPeerBatch decodes a recorded peer batch through the same decoder
// the live host used.
func scanPeerBatch(rows *sql.Rows) (Entry, error) {
	var (
		seq   int64
		at    sql.NullInt64
		batch []byte
	)
	if err := rows.Scan(&seq, &at, &batch); err != nil {
		return Entry{}, err
	}
	e := Entry{Seq: i2u(seq), At: fromNS(at)}
	v := PeerBatch{At: e.At}
	if err := replica.Decode(batch, &v.Batch); err != nil {
		return Entry{}, seqErr(seq, fmt.Errorf("peer_batches.batch: %w", err))
	}
	e.Value = v
	return e, nil
}

func scanConfigChange(rows *sql.Rows) (Entry, error) {
	var (
		seq, staleness, staleAfter int64
		peerSilent, peerTTL        int64
		at                         sql.NullInt64
		name, kvJSON               string
	)
	if err := rows.Scan(&seq, &at, &name, &staleness, &staleAfter, &kvJSON, &peerSilent, &peerTTL); err != nil {
		return Entry{}, err
	}
	c := ConfigChanged{At: fromNS(at)}
	c.Picker, c.MaxStaleness, c.KVStaleAfter = name, time.Duration(staleness), time.Duration(staleAfter)
	c.PeerSilentAfter, c.PeerRequestTTL = time.Duration(peerSilent), time.Duration(peerTTL)
	if err := json.Unmarshal([]byte(kvJSON), &c.KV); err != nil {
		return Entry{}, seqErr(seq, fmt.Errorf("config_changes.kv: %w", err))
	}
	return Entry{Seq: i2u(seq), At: c.At, Value: c}, nil
}
