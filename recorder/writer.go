package recorder

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite" // the pure-Go SQLite driver, registered as "sqlite"

	"switchyard/router/core"
	"switchyard/router/discovery"
	"switchyard/router/envelope"
	"switchyard/router/events"
	"switchyard/router/load"
	"switchyard/router/replica"
)

// Defaults of Options.
const (
	DefaultQueueSize = 65536
	DefaultBatchSize = 2048
)

// Options tune a Writer.
type Options struct {
	// QueueSize bounds the records waiting for the writer goroutine
	// (default 65536).
	QueueSize int
	// BatchSize is the most records written per transaction (default
	// 2048).
	BatchSize int
	// Block makes record calls wait for queue space instead of dropping.
	// The simulator sets it: a simulated run must lose nothing. Live
	// routing leaves it false: a record call never blocks, and a full
	// queue drops the record and counts it.
	Block bool
	// Logger receives write errors and refused records; nil discards.
	Logger *slog.Logger

	// beforeBatch runs in the writer goroutine before each batch is
	// written (tests stall the writer with it).
	beforeBatch func()
}

// Writer records one run. Record methods copy what they are given and
// enqueue it; a single goroutine owns the database connection and writes
// in batches. Callers serialise record calls, so the order of calls is
// the order of seq; Stats may be called from any goroutine.
type Writer struct {
	db    *sql.DB
	path  string
	runID int64
	opts  Options
	log   *slog.Logger

	mu     sync.RWMutex // record calls hold it shared; Close exclusively
	closed bool
	ch     chan record
	seq    atomic.Uint64

	written, dropped [numTables]atomic.Uint64
	refusedOnce      sync.Once

	// Owned by the writer goroutine until done is closed.
	stmts   [numStmts]*sql.Stmt
	dec     *envelope.Decoder
	msg     envelope.Message
	frames  [][]byte
	err     error
	nerrors int
	done    chan struct{}

	closeOnce  sync.Once
	closeStats Stats
	closeErr   error
}

// record is one queued record: v is one of the types write accepts,
// already copied from the caller's buffers.
type record struct {
	seq uint64
	t   table
	v   any
}

// frameRecord is a queued load or KV event-plane record.
type frameRecord struct {
	at          time.Time
	namespace   string
	publisherID uint64
	kind        string // a session kind (connected, ...); "" for a message
	frames      []byte // the frames BLOB; nil for a session row or nil frames
	result      string
}

const (
	sDiscovery = iota
	sResyncRecord
	sPublished
	sLoad
	sKV
	sRequest
	sSelection
	sEnded
	sOutcome
	sTick
	sConfigChange
	sProgress
	sPeerBatch
	sKVReplay
	numStmts
)

var inserts = [numStmts]string{
	sDiscovery:    `INSERT INTO discovery (run_id, seq, at_ns, op, namespace, keyspace, key, revision, value, keep, records) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
	sResyncRecord: `INSERT INTO resync_records (run_id, seq, idx, keyspace, key, value) VALUES (?, ?, ?, ?, ?, ?)`,
	sPublished:    `INSERT INTO published (run_id, seq, at_ns, generation, workers) VALUES (?, ?, ?, ?, ?)`,
	sLoad: `INSERT INTO load_messages (run_id, seq, at_ns, kind, namespace, publisher_id, frames, result,
		sequence, worker_id, dp_rank, kv_used_blocks, active_decode_blocks, active_prefill_tokens)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
	sKV: `INSERT INTO kv_messages (run_id, seq, at_ns, kind, namespace, publisher_id, frames, result) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
	sRequest: `INSERT INTO requests (run_id, seq, at_ns, request_id, model, namespaces, prompt_tokens, max_tokens,
		generation, session, route, tokens) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
	sSelection: `INSERT INTO selections (run_id, seq, at_ns, request_id, ok, namespace,
		decode_worker, decode_rank, decode_declared, decode_role, decode_reason, has_prefill,
		prefill_worker, prefill_rank, prefill_declared, prefill_role, prefill_reason, candidates)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
	sEnded: `INSERT INTO ended (run_id, seq, at_ns, request_id, reason) VALUES (?, ?, ?, ?, ?)`,
	sOutcome: `INSERT INTO outcomes (run_id, seq, at_ns, request_id, status, error, prompt_tokens, cached_tokens,
		output_tokens, ttft_ns, e2e_ns, itl_ns) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
	sTick: `INSERT INTO ticks (run_id, seq, at_ns) VALUES (?, ?, ?)`,
	sConfigChange: `INSERT INTO config_changes (run_id, seq, at_ns, picker, max_staleness_ns, kv_stale_after_ns, kv,
		peer_silent_after_ns, peer_request_ttl_ns) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
	sProgress:  `INSERT INTO request_progress (run_id, seq, at_ns, request_id, kind, output_tokens) VALUES (?, ?, ?, ?, ?, ?)`,
	sPeerBatch: `INSERT INTO peer_batches (run_id, seq, at_ns, replica_id, batch_seq, events, batch) VALUES (?, ?, ?, ?, ?, ?, ?)`,
	sKVReplay: `INSERT INTO kv_replays (run_id, seq, at_ns, kind, namespace, publisher_id, from_seq, to_seq, reason, error,
		recovered, lost, duplicates, held) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
}

// Create opens path for recording, creating the file and its schema if
// needed, and starts a new run in it. An existing recording of the same
// schema version gets the run appended; any other file is refused. The
// database is in WAL mode with synchronous=NORMAL, so readers can follow
// a live recording.
func Create(path string, run Run, opts Options) (*Writer, error) {
	if run.Kind != "live" && run.Kind != "sim" {
		return nil, fmt.Errorf("recorder: run kind %q: want live or sim", run.Kind)
	}
	if opts.QueueSize <= 0 {
		opts.QueueSize = DefaultQueueSize
	}
	if opts.BatchSize <= 0 {
		opts.BatchSize = DefaultBatchSize
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	db, err := sql.Open("sqlite", dsn(path,
		"_pragma=busy_timeout(10000)", "_pragma=journal_mode(WAL)", "_pragma=synchronous(NORMAL)", "_txlock=immediate"))
	if err != nil {
		return nil, fmt.Errorf("recorder: %s: %w", path, err)
	}
	// One connection: the writer goroutine's. PRAGMAs in the DSN apply
	// to it whenever it is (re)opened.
	db.SetMaxOpenConns(1)
	w, err := create(db, path, run, opts, log)
	if err != nil {
		db.Close()
		return nil, err
	}
	return w, nil
}

func create(db *sql.DB, path string, run Run, opts Options, log *slog.Logger) (*Writer, error) {
	ctx := context.Background()
	var mode string
	if err := db.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil {
		return nil, fmt.Errorf("recorder: %s: %w", path, err)
	}
	if mode != "wal" {
		return nil, fmt.Errorf("recorder: %s: journal mode is %q, not wal", path, mode)
	}
	if err := ensureSchema(ctx, db, path); err != nil {
		return nil, err
	}
	w := &Writer{
		db:   db,
		path: path,
		opts: opts,
		ch:   make(chan record, opts.QueueSize),
		dec:  envelope.NewDecoder(discovery.TopicLoad, load.MaxPayloadBytes),
		done: make(chan struct{}),
	}
	for i, q := range inserts {
		var err error
		if w.stmts[i], err = db.PrepareContext(ctx, q); err != nil {
			w.closeStmts()
			return nil, fmt.Errorf("recorder: %s: %w", path, err)
		}
	}
	res, err := db.ExecContext(ctx, `INSERT INTO runs (kind, config, scenario, seed, version, picker, started_at)
		VALUES (?, ?, ?, ?, ?, ?, ?)`,
		run.Kind, run.Config, run.Scenario, u2i(run.Seed), run.Version, run.Picker, run.Start.UTC().Format(time.RFC3339Nano))
	if err != nil {
		w.closeStmts()
		return nil, fmt.Errorf("recorder: %s: starting a run: %w", path, err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		w.closeStmts()
		return nil, fmt.Errorf("recorder: %s: %w", path, err)
	}
	w.runID = id
	w.log = log.With("recording", path, "run", id)
	go w.run()
	return w, nil
}

// RunID is the id of the run in the runs table.
func (w *Writer) RunID() int64 { return w.runID }

// enqueue assigns the next seq and queues v, or counts it dropped. A
// dropped record keeps its seq, so the gap shows where it was.
func (w *Writer) enqueue(t table, v any) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed {
		w.dropped[t].Add(1)
		return
	}
	r := record{seq: w.seq.Add(1), t: t, v: v}
	if w.opts.Block {
		w.ch <- r
		return
	}
	select {
	case w.ch <- r:
	default:
		w.dropped[t].Add(1)
	}
}

// Discovery records a discovery input: events.DiscoveryPut, Delete,
// Resync, Prune or Reset (or a pointer to one). Any other event is not
// recorded; it is counted as a dropped discovery record and logged once.
func (w *Writer) Discovery(ev events.Event) {
	if isNil(ev) {
		w.dropped[tDiscovery].Add(1)
		return
	}
	switch e := ev.(type) {
	case *events.DiscoveryPut:
		w.Discovery(*e)
	case *events.DiscoveryDelete:
		w.Discovery(*e)
	case *events.DiscoveryResync:
		w.Discovery(*e)
	case *events.DiscoveryPrune:
		w.Discovery(*e)
	case *events.DiscoveryReset:
		w.Discovery(*e)
	case events.DiscoveryPut:
		e.Value = bytes.Clone(e.Value)
		w.enqueue(tDiscovery, e)
	case events.DiscoveryDelete:
		w.enqueue(tDiscovery, e)
	case events.DiscoveryResync:
		if e.Records != nil {
			recs := make([]events.DiscoveryRecord, len(e.Records))
			for i, kv := range e.Records {
				recs[i] = events.DiscoveryRecord{Keyspace: kv.Keyspace, Key: kv.Key, Value: bytes.Clone(kv.Value)}
			}
			e.Records = recs
		}
		w.enqueue(tDiscovery, e)
	case events.DiscoveryPrune:
		e.Keep = slices.Clone(e.Keep)
		w.enqueue(tDiscovery, e)
	case events.DiscoveryReset:
		w.enqueue(tDiscovery, e)
	default:
		w.dropped[tDiscovery].Add(1)
		w.refusedOnce.Do(func() {
			w.log.Error("recorder: not a discovery event; not recorded", "type", fmt.Sprintf("%T", ev))
		})
	}
}

// isNil reports a nil event or a nil pointer to a discovery event.
func isNil(ev events.Event) bool {
	switch e := ev.(type) {
	case nil:
		return true
	case *events.DiscoveryPut:
		return e == nil
	case *events.DiscoveryDelete:
		return e == nil
	case *events.DiscoveryResync:
		return e == nil
	case *events.DiscoveryPrune:
		return e == nil
	case *events.DiscoveryReset:
		return e == nil
	}
	return false
}

// Published records that the registry published a generation and the
// load store was updated to it.
func (w *Writer) Published(p Published) { w.enqueue(tPublished, p) }

// LoadConnected records that a kv_metrics subscription (re)connected.
func (w *Writer) LoadConnected(ev events.LoadConnected) {
	w.enqueue(tLoad, &frameRecord{at: ev.At, namespace: ev.Namespace, publisherID: ev.PublisherID, kind: kindConnected})
}

// LoadMessage records a kv_metrics message and the result the core gave
// it. The frames are copied; the caller may reuse them at once.
func (w *Writer) LoadMessage(ev *events.LoadMessage, result envelope.Result) {
	if ev == nil {
		w.dropped[tLoad].Add(1)
		return
	}
	r := &frameRecord{at: ev.At, namespace: ev.Namespace, publisherID: ev.PublisherID, result: result.String()}
	if ev.Frames != nil {
		r.frames = EncodeFrames(ev.Frames)
	}
	w.enqueue(tLoad, r)
}

// Session kinds of a kv-events subscription, as kv_messages.kind names
// them (a message is "message").
const (
	kindSubscribed   = "subscribed"
	kindConnected    = "connected"
	kindDisconnected = "disconnected"
	kindUnsubscribed = "unsubscribed"
	// kindReplayed is a message row, of a message a publisher replayed.
	kindReplayed = "replayed"
	// resultReplay is a subscribed row's result when its publisher
	// offers replay.
	resultReplay = "replay"
)

// KVConnected records that a KV-event subscription (re)connected.
func (w *Writer) KVConnected(namespace string, publisherID uint64, at time.Time) {
	w.kvSession(kindConnected, namespace, publisherID, at)
}

func (w *Writer) kvSession(kind, namespace string, publisherID uint64, at time.Time) {
	w.enqueue(tKV, &frameRecord{at: at, namespace: namespace, publisherID: publisherID, kind: kind})
}

// KVMessage records a KV-event message and the result the core gave it.
// The frames are copied.
func (w *Writer) KVMessage(namespace string, publisherID uint64, frames [][]byte, at time.Time, result string) {
	r := &frameRecord{at: at, namespace: namespace, publisherID: publisherID, result: result}
	if frames != nil {
		r.frames = EncodeFrames(frames)
	}
	w.enqueue(tKV, r)
}

// Request records a request as received, before its pick.
func (w *Writer) Request(r Request) {
	r.Namespaces = slices.Clone(r.Namespaces)
	r.Tokens = slices.Clone(r.Tokens)
	w.enqueue(tRequests, r)
}

// Selection records a picker's answer and its candidates.
func (w *Writer) Selection(s Selection) {
	s.Candidates = slices.Clone(s.Candidates)
	w.enqueue(tSelections, s)
}

// Ended records that the picker was told a request ended unserved.
func (w *Writer) Ended(e Ended) { w.enqueue(tEnded, e) }

// Outcome records how a request ended.
func (w *Writer) Outcome(o Outcome) { w.enqueue(tOutcomes, o) }

// Record records one output of the routing core, so a *Writer is the
// core's port (core.Port). Any other event is taken as a discovery input
// (Discovery counts and logs one that is not).
func (w *Writer) Record(out core.Output) {
	switch o := out.(type) {
	case core.Published:
		w.Published(o)
	case events.LoadConnected:
		w.LoadConnected(o)
	case core.LoadApplied:
		w.LoadMessage(o.Msg, o.Result)
	case events.KVSubscribed:
		r := &frameRecord{at: o.At, namespace: o.Namespace, publisherID: o.PublisherID, kind: kindSubscribed}
		if o.Replay {
			r.result = resultReplay
		}
		w.enqueue(tKV, r)
	case events.KVConnected:
		w.KVConnected(o.Namespace, o.PublisherID, o.At)
	case events.KVDisconnected:
		w.kvSession(kindDisconnected, o.Namespace, o.PublisherID, o.At)
	case events.KVUnsubscribed:
		w.kvSession(kindUnsubscribed, o.Namespace, o.PublisherID, o.At)
	case events.Tick:
		w.enqueue(tTicks, o)
	case core.ConfigChanged:
		w.enqueue(tConfigChanges, o)
	case core.KVApplied:
		if o.Replayed {
			w.enqueue(tKV, &frameRecord{at: o.At, namespace: o.Namespace, publisherID: o.PublisherID, kind: kindReplayed,
				frames: EncodeFrames(o.Frames), result: o.Result})
			break
		}
		w.KVMessage(o.Namespace, o.PublisherID, o.Frames, o.At, o.Result)
	case events.KVReplayWanted:
		w.enqueue(tKVReplays, o)
	case core.KVReplayFinished:
		w.enqueue(tKVReplays, o)
	case core.Request:
		w.Request(o)
	case core.Selection:
		w.Selection(o)
	case core.Ended:
		w.Ended(o)
	case core.Outcome:
		w.Outcome(o)
	case core.FirstToken:
		w.enqueue(tProgress, o)
	case core.Progress:
		w.enqueue(tProgress, o)
	case core.PeerBatch:
		// Encoded now: the batch's slices are the core's only during the
		// call. The core applied it, so it encodes.
		p, err := replica.Append(nil, &o.Batch)
		if err != nil {
			w.dropped[tPeerBatches].Add(1)
			return
		}
		w.enqueue(tPeerBatches, peerBatchRow{at: o.At, replica: o.Batch.Replica, seq: o.Batch.Seq, events: len(o.Batch.Events), batch: p})
	default:
		w.Discovery(out)
	}
}

// peerBatchRow is a peer batch as it is written: encoded.
type peerBatchRow struct {
	at           time.Time
	replica, seq uint64
	events       int
	batch        []byte
}

// A Writer is the routing core's output port.
var _ core.Port = (*Writer)(nil)

// Stats counts written and dropped records per table.
func (w *Writer) Stats() Stats {
	s := Stats{Written: make(map[string]uint64, numTables), Dropped: make(map[string]uint64, numTables), Queued: len(w.ch)}
	for t := range numTables {
		s.Written[tableNames[t]] = w.written[t].Load()
		s.Dropped[tableNames[t]] = w.dropped[t].Load()
	}
	return s
}

// Close stops recording: later record calls are counted as dropped. It
// waits for the queue to drain, writes the run's end time and drop counts,
// and closes the file. It returns the final counts and the first write
// error, if any. Close may be called again; it returns the same.
func (w *Writer) Close() (Stats, error) {
	w.closeOnce.Do(func() {
		w.mu.Lock()
		w.closed = true
		close(w.ch)
		w.mu.Unlock()
		<-w.done
		st := w.Stats()
		errs := []error{w.err}
		if w.nerrors > 1 {
			errs = append(errs, fmt.Errorf("recorder: %d more failed batches", w.nerrors-1))
		}
		errs = append(errs, w.finish(st))
		w.closeStmts()
		if err := w.db.Close(); err != nil {
			errs = append(errs, fmt.Errorf("recorder: %s: %w", w.path, err))
		}
		w.closeStats, w.closeErr = st, errors.Join(errs...)
	})
	return w.closeStats, w.closeErr
}

// finish writes the run's end marker: its end (wall clock), its last seq
// and its drop counts.
func (w *Writer) finish(st Stats) error {
	ctx := context.Background()
	tx, err := w.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("recorder: %s: ending run %d: %w", w.path, w.runID, err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit this is a no-op
	var total uint64
	for _, name := range tableNames {
		n := st.Dropped[name]
		if n == 0 {
			continue
		}
		total += n
		if _, err := tx.ExecContext(ctx, `INSERT INTO run_drops (run_id, tbl, dropped) VALUES (?, ?, ?)`, w.runID, name, u2i(n)); err != nil {
			return fmt.Errorf("recorder: %s: ending run %d: %w", w.path, w.runID, err)
		}
	}
	// Close has stopped record calls, so no seq follows this one.
	if _, err := tx.ExecContext(ctx, `UPDATE runs SET ended_at = ?, dropped = ?, last_seq = ? WHERE id = ?`,
		time.Now().UTC().Format(time.RFC3339Nano), u2i(total), u2i(w.seq.Load()), w.runID); err != nil {
		return fmt.Errorf("recorder: %s: ending run %d: %w", w.path, w.runID, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("recorder: %s: ending run %d: %w", w.path, w.runID, err)
	}
	return nil
}

func (w *Writer) closeStmts() {
	for i, s := range w.stmts {
		if s != nil {
			s.Close()
			w.stmts[i] = nil
		}
	}
}

// run is the writer goroutine: it takes whatever is queued, up to
// BatchSize records, and writes it in one transaction.
func (w *Writer) run() {
	defer close(w.done)
	batch := make([]record, 0, w.opts.BatchSize)
	for r := range w.ch {
		batch = append(batch[:0], r)
	fill:
		for len(batch) < w.opts.BatchSize {
			select {
			case r, ok := <-w.ch:
				if !ok {
					break fill
				}
				batch = append(batch, r)
			default:
				break fill
			}
		}
		if w.opts.beforeBatch != nil {
			w.opts.beforeBatch()
		}
		w.writeBatch(batch)
		clear(batch) // release the records' buffers
	}
}

func (w *Writer) writeBatch(batch []record) {
	err := w.tryBatch(batch)
	if err == nil {
		for _, r := range batch {
			w.written[r.t].Add(1)
		}
		return
	}
	// The transaction rolled back: none of the batch is in the file.
	for _, r := range batch {
		w.dropped[r.t].Add(1)
	}
	err = fmt.Errorf("recorder: %s: run %d: writing %d records from seq %d: %w", w.path, w.runID, len(batch), batch[0].seq, err)
	if w.err == nil {
		w.err = err
	}
	w.nerrors++
	w.log.Error("recorder: batch lost", "err", err)
}

func (w *Writer) tryBatch(batch []record) (err error) {
	ctx := context.Background()
	tx, err := w.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tx.Rollback() //nolint:errcheck // the batch error is the one reported
		}
	}()
	var stmts [numStmts]*sql.Stmt
	stmt := func(i int) *sql.Stmt {
		if stmts[i] == nil {
			stmts[i] = tx.StmtContext(ctx, w.stmts[i])
		}
		return stmts[i]
	}
	for _, r := range batch {
		if err := w.insert(ctx, stmt, r); err != nil {
			return fmt.Errorf("%s seq %d: %w", tableNames[r.t], r.seq, err)
		}
	}
	return tx.Commit()
}

func (w *Writer) insert(ctx context.Context, stmt func(int) *sql.Stmt, r record) error {
	run, seq := w.runID, u2i(r.seq)
	var err error
	switch v := r.v.(type) {
	case events.DiscoveryPut:
		_, err = stmt(sDiscovery).ExecContext(ctx, run, seq, atNS(v.At), "put", v.Namespace, v.Keyspace.String(), v.Key, v.Revision, blob(v.Value), nil, nil)
	case events.DiscoveryDelete:
		_, err = stmt(sDiscovery).ExecContext(ctx, run, seq, atNS(v.At), "delete", v.Namespace, v.Keyspace.String(), v.Key, v.Revision, nil, nil, nil)
	case events.DiscoveryResync:
		var n any
		if v.Records != nil {
			n = len(v.Records)
		}
		if _, err = stmt(sDiscovery).ExecContext(ctx, run, seq, atNS(v.At), "resync", v.Namespace, nil, nil, v.Revision, nil, nil, n); err != nil {
			return err
		}
		for i, kv := range v.Records {
			if _, err = stmt(sResyncRecord).ExecContext(ctx, run, seq, i, kv.Keyspace.String(), kv.Key, blob(kv.Value)); err != nil {
				return err
			}
		}
	case events.DiscoveryPrune:
		keep, jerr := jsonStrings(v.Keep)
		if jerr != nil {
			return jerr
		}
		_, err = stmt(sDiscovery).ExecContext(ctx, run, seq, atNS(v.At), "prune", nil, nil, nil, nil, nil, keep, nil)
	case events.DiscoveryReset:
		_, err = stmt(sDiscovery).ExecContext(ctx, run, seq, atNS(v.At), "reset", nil, nil, nil, nil, nil, nil, nil)
	case Published:
		_, err = stmt(sPublished).ExecContext(ctx, run, seq, atNS(v.At), u2i(v.Generation), v.Workers)
	case *frameRecord:
		if r.t == tKV {
			kind, result := "message", any(v.result)
			switch {
			case v.kind == kindReplayed:
				kind = kindReplayed
			case v.kind != "" && v.result != "":
				kind = v.kind // a subscribed row offering replay
			case v.kind != "":
				kind, result = v.kind, nil
			}
			_, err = stmt(sKV).ExecContext(ctx, run, seq, atNS(v.at), kind, v.namespace, u2i(v.publisherID), blob(v.frames), result)
			break
		}
		if v.kind != "" {
			_, err = stmt(sLoad).ExecContext(ctx, run, seq, atNS(v.at), "connected", v.namespace, u2i(v.publisherID),
				nil, nil, nil, nil, nil, nil, nil, nil)
			break
		}
		var d [6]any // sequence, worker_id, dp_rank, kv_used_blocks, active_decode_blocks, active_prefill_tokens
		w.decodeLoad(v.frames, &d)
		_, err = stmt(sLoad).ExecContext(ctx, run, seq, atNS(v.at), "message", v.namespace, u2i(v.publisherID),
			blob(v.frames), v.result, d[0], d[1], d[2], d[3], d[4], d[5])
	case Request:
		ns, jerr := jsonStrings(v.Namespaces)
		if jerr != nil {
			return jerr
		}
		_, err = stmt(sRequest).ExecContext(ctx, run, seq, atNS(v.At), u2i(v.RequestID), v.Model, ns, u2i(v.PromptTokens),
			v.MaxTokens, u2i(v.Generation), u2i(v.Session), v.Route, tokensBlob(v.Tokens))
	case Selection:
		cands, jerr := jsonCandidates(v.Candidates)
		if jerr != nil {
			return jerr
		}
		s := v.Sel
		_, err = stmt(sSelection).ExecContext(ctx, run, seq, atNS(v.At), u2i(v.RequestID), boolInt(v.OK), s.Namespace,
			u2i(s.Decode.WorkerID), s.Decode.DPRank, boolInt(s.Decode.DPDeclared), s.Decode.Role.String(), s.DecodeReason,
			boolInt(s.HasPrefill),
			u2i(s.Prefill.WorkerID), s.Prefill.DPRank, boolInt(s.Prefill.DPDeclared), s.Prefill.Role.String(), s.PrefillReason,
			cands)
	case Ended:
		_, err = stmt(sEnded).ExecContext(ctx, run, seq, atNS(v.At), u2i(v.RequestID), v.Reason)
	case events.Tick:
		_, err = stmt(sTick).ExecContext(ctx, run, seq, atNS(v.At))
	case core.ConfigChanged:
		kvJSON, jerr := json.Marshal(v.KV)
		if jerr != nil {
			return jerr
		}
		_, err = stmt(sConfigChange).ExecContext(ctx, run, seq, atNS(v.At), v.Picker, int64(v.MaxStaleness), int64(v.KVStaleAfter), string(kvJSON),
			int64(v.PeerSilentAfter), int64(v.PeerRequestTTL))
	case events.KVReplayWanted:
		_, err = stmt(sKVReplay).ExecContext(ctx, run, seq, atNS(v.At), "wanted", v.Namespace, u2i(v.PublisherID), u2i(v.From), u2i(v.To),
			nil, nil, nil, nil, nil, nil)
	case core.KVReplayFinished:
		_, err = stmt(sKVReplay).ExecContext(ctx, run, seq, atNS(v.At), "finished", v.Namespace, u2i(v.PublisherID), u2i(v.From), u2i(v.To),
			v.Reason, v.Err, u2i(v.Recovered), u2i(v.Lost), u2i(v.Duplicates), v.Held)
	case peerBatchRow:
		_, err = stmt(sPeerBatch).ExecContext(ctx, run, seq, atNS(v.at), u2i(v.replica), u2i(v.seq), v.events, v.batch)
	case FirstToken:
		_, err = stmt(sProgress).ExecContext(ctx, run, seq, atNS(v.At), u2i(v.RequestID), "first_token", nil)
	case Progress:
		_, err = stmt(sProgress).ExecContext(ctx, run, seq, atNS(v.At), u2i(v.RequestID), "output", u2i(v.OutputTokens))
	case Outcome:
		_, err = stmt(sOutcome).ExecContext(ctx, run, seq, atNS(v.At), u2i(v.RequestID), v.Status, v.Error,
			v.PromptTokens, v.CachedTokens, v.OutputTokens, int64(v.TTFT), int64(v.E2E), int64(v.ITL))
	default:
		err = fmt.Errorf("unknown record %T", r.v)
	}
	return err
}

// decodeLoad fills the decoded kv_metrics columns with the router's own
// decoders; whatever does not decode stays NULL.
func (w *Writer) decodeLoad(blob []byte, d *[6]any) {
	if blob == nil {
		return
	}
	frames, err := decodeFrames(w.frames, blob)
	if err != nil {
		return
	}
	w.frames = frames
	defer clear(w.frames)
	if w.dec.Decode(frames, &w.msg) != envelope.Applied {
		return
	}
	d[0] = u2i(w.msg.Sequence)
	var a load.ActiveLoad
	if !load.DecodeActiveLoad(w.msg.Envelope.Payload, &a) {
		return
	}
	d[1], d[2] = u2i(a.WorkerID), int64(a.DPRank)
	if a.HasKVUsedBlocks {
		d[3] = u2i(a.KVUsedBlocks)
	}
	if a.HasDecodeBlocks {
		d[4] = u2i(a.ActiveDecodeBlocks)
	}
	if a.HasPrefillTokens {
		d[5] = u2i(a.ActivePrefillTokens)
	}
}
