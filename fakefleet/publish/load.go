package publish

import (
	"sync"
	"time"

	"switchyard/fakefleet/wire"
)

// Load is what one rank reports.
type Load struct {
	KVUsedBlocks, ActiveDecodeBlocks, ActivePrefillTokens uint64
}

// Fields chooses which ActiveLoad fields a worker fills. Dynamo 1.4.2's
// dynamo.vllm workers set only kv_used_blocks (the default); a scheduler
// also fills the active_* fields.
type Fields struct {
	ActiveDecodeBlocks, ActivePrefillTokens bool
}

// LoadReporter publishes a worker's ActiveLoad samples change-driven, as
// Dynamo's publishers do: a change schedules a publish after a 1 ms
// debounce, and a rank whose load is unchanged is not published again.
type LoadReporter struct {
	pub      *Publisher
	workerID uint64
	read     func(rank uint32) Load
	fields   Fields
	debounce time.Duration

	mu      sync.Mutex
	last    map[uint32]Load
	dirty   map[uint32]bool
	timer   *time.Timer
	stalled bool
	closed  bool
}

// NewLoadReporter publishes samples of workerID on pub, reading each rank's
// load with read.
func NewLoadReporter(pub *Publisher, workerID uint64, read func(rank uint32) Load, fields Fields) *LoadReporter {
	return &LoadReporter{pub: pub, workerID: workerID, read: read, fields: fields,
		debounce: time.Millisecond, last: map[uint32]Load{}, dirty: map[uint32]bool{}}
}

// Changed notes that a rank's load may have changed.
func (r *LoadReporter) Changed(rank uint32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.stalled {
		return
	}
	r.dirty[rank] = true
	if r.timer == nil {
		r.timer = time.AfterFunc(r.debounce, r.flush)
	}
}

// Publish publishes a rank now, changed or not (a worker's first sample).
func (r *LoadReporter) Publish(rank uint32) error {
	l := r.read(rank)
	r.mu.Lock()
	r.last[rank] = l
	r.mu.Unlock()
	return r.send(rank, l)
}

func (r *LoadReporter) flush() {
	r.mu.Lock()
	r.timer = nil
	ranks := make([]uint32, 0, len(r.dirty))
	for rank := range r.dirty {
		ranks = append(ranks, rank)
	}
	clear(r.dirty)
	stop := r.closed || r.stalled
	r.mu.Unlock()
	if stop {
		return
	}
	for _, rank := range ranks {
		l := r.read(rank)
		r.mu.Lock()
		same := r.last[rank] == l
		r.last[rank] = l
		r.mu.Unlock()
		if !same {
			_ = r.send(rank, l)
		}
	}
}

func (r *LoadReporter) send(rank uint32, l Load) error {
	a := wire.ActiveLoad{WorkerID: r.workerID, DPRank: rank, KVUsedBlocks: wire.U64(l.KVUsedBlocks)}
	if r.fields.ActiveDecodeBlocks {
		a.ActiveDecodeBlocks = wire.U64(l.ActiveDecodeBlocks)
	}
	if r.fields.ActivePrefillTokens {
		a.ActivePrefillTokens = wire.U64(l.ActivePrefillTokens)
	}
	return r.pub.Send(wire.Marshal(&a, false))
}

// SetStalled stops (or resumes) publishing: a stalled worker's last
// sample stands while its real load moves on.
func (r *LoadReporter) SetStalled(s bool) {
	r.mu.Lock()
	r.stalled = s
	r.mu.Unlock()
}

// Close stops the reporter.
func (r *LoadReporter) Close() {
	r.mu.Lock()
	r.closed = true
	if r.timer != nil {
		r.timer.Stop()
	}
	r.mu.Unlock()
}
