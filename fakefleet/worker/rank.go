package worker

// rank is one data-parallel rank's scheduler state. Every field is guarded
// by Worker.mu.
type rank struct {
	running  int    // admitted requests
	reserved int    // blocks promised to admitted requests
	held     uint64 // blocks holding KV now
	prefill  uint64 // prompt tokens queued or not yet prefilled
	queue    []*job // waiting requests, oldest first
}

// job is one request's share of its rank.
type job struct {
	rank uint32
	// need is reserved at admission: enough blocks for the prompt and every
	// token the request may generate, so a running request never has to be
	// preempted for lack of blocks.
	need     int
	held     int // blocks holding the prompt and generated tokens
	pending  int // prompt tokens still to prefill
	admitted chan struct{}
	// isAdmitted tells release which accounting to undo; admitted may be
	// closed while the waiter is already leaving through its context.
	isAdmitted bool
}

func (r *rank) load() Load {
	return Load{KVUsedBlocks: r.held, ActiveDecodeBlocks: r.held, ActivePrefillTokens: r.prefill}
}

// enqueue puts j at the back of the queue.
func (r *rank) enqueue(j *job) {
	r.queue = append(r.queue, j)
	r.prefill += uint64(j.pending)
}

// admit starts queued requests in arrival order while the head fits. The
// head blocks those behind it (no overtaking), as in vLLM's FCFS policy.
func (r *rank) admit(cfg Config) {
	for len(r.queue) > 0 {
		j := r.queue[0]
		if r.running >= cfg.MaxNumSeqs || r.reserved+j.need > cfg.TotalKVBlocks {
			return
		}
		r.queue[0] = nil
		r.queue = r.queue[1:]
		r.running++
		r.reserved += j.need
		r.held += uint64(j.held)
		j.isAdmitted = true
		close(j.admitted)
	}
}

// release undoes everything j holds or waits for.
func (r *rank) release(j *job) {
	r.prefill -= uint64(j.pending)
	j.pending = 0
	if !j.isAdmitted {
		for i, q := range r.queue {
			if q == j {
				r.queue = append(r.queue[:i], r.queue[i+1:]...)
				break
			}
		}
		return
	}
	r.running--
	r.reserved -= j.need
	r.held -= uint64(j.held)
	j.held = 0
	j.isAdmitted = false
}

// blocksFor is how many blocks tokens fill.
func blocksFor(tokens, blockSize int) int { return (tokens + blockSize - 1) / blockSize }
