// Package recorder persists everything that crosses the routing core's
// boundary during a run, live or simulated, to a SQLite file, and reads it
// back in order for replay.
//
// Inputs are stored as they crossed the boundary (raw discovery values,
// raw event-plane frames, receipt times) with decoded columns beside them
// for queries; outputs (published generations, selections with their
// candidates, ended requests, outcomes) are stored as the core produced
// them. Every record of a run carries a sequence number, global across the
// tables of the run, in the order the caller handed records over; merging
// the tables by seq recovers that order.
//
// Close writes the run's end marker (end time, last seq, drop counts); a
// run without one, or with gaps in its seqs, is incomplete
// (Reader.Integrity).
//
// Only the runs table holds wall-clock data (start and end of the run).
// Record tables hold nothing but what the caller passed, so a simulated
// run recorded twice with the same seed has identical record tables.
//
// See docs/recording.md for the schema.
package recorder

import (
	"time"

	"switchyard/router/core"
	"switchyard/router/events"
)

// Run describes one recorded run. It is written to the runs table.
type Run struct {
	Kind     string    // "live" or "sim"
	Config   string    // the router configuration as YAML, secrets already masked
	Scenario string    // the simulation scenario YAML ("" for live)
	Seed     uint64    // the simulation seed; for a live run, the seed of the router's picker
	Version  string    // switchyard version string
	Picker   string    // picker name, e.g. "load"
	Start    time.Time // wall-clock start: metadata only, never used for determinism
}

// The decisions and inputs the core hands its port are recorded as they
// are: these are the core's output types.
type (
	Published = core.Published
	Request   = core.Request
	Selection = core.Selection
	Ended     = core.Ended
	Outcome   = core.Outcome
	// FirstToken and Progress are the inputs of the core's
	// active-sequence account.
	FirstToken = core.FirstToken
	Progress   = core.Progress
	// PeerBatch is a batch of a peer replica's events (replica sync).
	PeerBatch = core.PeerBatch
	// ConfigChanged is a configuration change the core applied.
	ConfigChanged = core.ConfigChanged
	// KVReplayWanted is a replay the core asked of a publisher;
	// KVReplayFinished the end of a gap's recovery. Both are outputs a
	// replay does not feed back.
	KVReplayWanted   = events.KVReplayWanted
	KVReplayFinished = core.KVReplayFinished
)

// Outcome statuses.
const (
	StatusOK        = "ok"
	StatusRefused   = "refused"
	StatusFailed    = "failed"
	StatusCancelled = "cancelled"
	StatusRejected  = "rejected"
)

// LoadMessage is a recorded kv_metrics message with the result the core
// gave it (an envelope.Result name).
type LoadMessage struct {
	events.LoadMessage
	Result string
}

// KVMessage is a recorded kv-events message with the result the core
// gave it (a KV tracker result). Replayed: a publisher replayed it to
// fill a gap; it is applied like any other.
type KVMessage struct {
	events.KVMessage
	Result   string
	Replayed bool
}

// Stats counts records per table (keys: Tables()).
type Stats struct {
	// Written records are committed to the file.
	Written map[string]uint64
	// Dropped records are not in the file: the queue was full, a write
	// failed, or the writer was closed.
	Dropped map[string]uint64
	// Queued records wait for the writer goroutine.
	Queued int
}

// RunInfo is a recorded run.
type RunInfo struct {
	Run
	ID int64
	// EndedAt is zero when the writer was never closed (the process
	// ended first): the run's tail may be missing and its drops unknown.
	EndedAt time.Time
	// LastSeq is the last seq the writer assigned, written by Close with
	// EndedAt: the run holds the records 1 to LastSeq, less its drops. It
	// is 0 when the run was not closed, or was recorded under schema
	// version 1, whose end marker does not count records.
	LastSeq uint64
	// Dropped counts the records each table lost (only tables that lost
	// some). A replay refuses a run with drops.
	Dropped map[string]uint64
}

// Entry is one record of a run. Value is exactly one of
// events.DiscoveryPut, events.DiscoveryDelete, events.DiscoveryResync,
// events.DiscoveryPrune, events.DiscoveryReset, Published,
// events.LoadConnected, LoadMessage, events.KVSubscribed,
// events.KVConnected, events.KVDisconnected, events.KVUnsubscribed,
// KVMessage, events.Tick, ConfigChanged, Request, Selection, Ended,
// Outcome, FirstToken, Progress, PeerBatch, KVReplayWanted,
// KVReplayFinished.
type Entry struct {
	Seq   uint64
	At    time.Time
	Value any
}
