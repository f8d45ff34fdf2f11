// Package active is the router's own account of the requests it
// dispatched, for their whole life (Dynamo's active sequences): per
// worker rank, the prompt blocks a request holds until it ends, the
// prompt tokens the rank still has to prefill until the request's first
// token, and optionally the output blocks the request is predicted to
// grow, decaying as it generates. Every per-rank figure is a running sum,
// so reading a rank's load costs one map lookup.
//
// The package is pure: no clock, no goroutines, no locks. The routing
// core owns a Set and serialises every call to it. It is bounded: a
// request beyond MaxRequests, or beyond MaxPerRank on one of its ranks,
// is refused and counted, never allocated for.
package active

// Bounds of a Set.
const (
	// MaxRequests bounds the requests tracked at once, across all ranks.
	MaxRequests = 65536
	// MaxPerRank bounds the requests one rank holds.
	MaxPerRank = 4096
)

// Rank is one worker rank.
type Rank struct {
	Namespace string
	WorkerID  uint64
	DPRank    uint32
}

// Load is what a rank holds for the requests dispatched to it.
type Load struct {
	// PrefillTokens are prompt tokens still to prefill: charged at
	// dispatch, cleared at each request's first token.
	PrefillTokens uint64
	// Blocks are prompt blocks held by active requests.
	Blocks uint64
	// OutputBlocks are the output blocks active requests are still
	// predicted to grow.
	OutputBlocks uint64
	// Requests counts the active requests on the rank.
	Requests uint64
}

// Hold is what one request charges one rank.
type Hold struct {
	Rank          Rank
	PrefillTokens uint64
	Blocks        uint64
	// UntilFirstToken: the rank lets the request go at its first token
	// (the prefill worker of a pair hands the KV to the decode worker).
	UntilFirstToken bool
	// OutputTokens predicts the request's output on this rank, in tokens,
	// and BlockSize converts it to blocks; 0 predicts none.
	OutputTokens uint64
	BlockSize    uint64
}

// maxHolds: a request is pinned to a decode rank and at most one prefill
// rank.
const maxHolds = 2

type hold struct {
	Hold
	out     uint64 // predicted output blocks still charged
	present bool   // still charged to its rank
}

type request struct {
	holds      [maxHolds]hold
	n          int
	firstToken bool
}

// rankState is one rank's running sums.
type rankState struct {
	load Load
}

// Set tracks active requests per rank. The zero Set is not usable; call
// New.
type Set struct {
	reqs    map[uint64]*request
	ranks   map[Rank]*rankState
	refused uint64
	free    []*request // recycled requests, so steady traffic allocates nothing
}

// New returns an empty set.
func New() *Set {
	return &Set{reqs: map[uint64]*request{}, ranks: map[Rank]*rankState{}}
}

// Add charges request id's holds to their ranks. It refuses (and counts)
// a request already tracked, one with no or too many holds, and one the
// bounds cannot take; the request is still served, only its load goes
// unaccounted.
func (s *Set) Add(id uint64, holds ...Hold) bool {
	if _, dup := s.reqs[id]; dup || len(holds) == 0 || len(holds) > maxHolds || len(s.reqs) >= MaxRequests {
		s.refused++
		return false
	}
	for _, h := range holds {
		if rs := s.ranks[h.Rank]; rs != nil && rs.load.Requests >= MaxPerRank {
			s.refused++
			return false
		}
	}
	r := s.newRequest()
	for _, h := range holds {
		hd := hold{Hold: h, present: true, out: outputBlocks(h.OutputTokens, 0, h.BlockSize)}
		r.holds[r.n] = hd
		r.n++
		rs := s.rank(h.Rank)
		rs.load.PrefillTokens += h.PrefillTokens
		rs.load.Blocks += h.Blocks
		rs.load.OutputBlocks += hd.out
		rs.load.Requests++
	}
	s.reqs[id] = r
	return true
}

// FirstToken clears request id's prefill tokens from its ranks and lets
// the ranks that hold it only until then go. It reports whether the
// request was tracked and had not had its first token yet.
func (s *Set) FirstToken(id uint64) bool {
	r := s.reqs[id]
	if r == nil || r.firstToken {
		return false
	}
	r.firstToken = true
	for i := 0; i < r.n; i++ {
		h := &r.holds[i]
		rs := s.ranks[h.Rank]
		rs.load.PrefillTokens -= h.PrefillTokens
		h.PrefillTokens = 0
		if h.UntilFirstToken {
			s.release(h, rs)
		}
	}
	return true
}

// Progress reports that request id has generated outputTokens so far:
// its predicted output blocks decay to what is still to come. It reports
// whether the request was tracked.
func (s *Set) Progress(id uint64, outputTokens uint64) bool {
	r := s.reqs[id]
	if r == nil {
		return false
	}
	for i := 0; i < r.n; i++ {
		h := &r.holds[i]
		if !h.present || h.out == 0 {
			continue
		}
		left := outputBlocks(h.OutputTokens, outputTokens, h.BlockSize)
		if left < h.out {
			s.ranks[h.Rank].load.OutputBlocks -= h.out - left
			h.out = left
		}
	}
	return true
}

// End releases everything request id still holds. It reports whether the
// request was tracked.
func (s *Set) End(id uint64) bool {
	r := s.reqs[id]
	if r == nil {
		return false
	}
	for i := 0; i < r.n; i++ {
		h := &r.holds[i]
		if h.present {
			rs := s.ranks[h.Rank]
			rs.load.PrefillTokens -= h.PrefillTokens
			s.release(h, rs)
		}
	}
	delete(s.reqs, id)
	*r = request{}
	s.free = append(s.free, r)
	return true
}

// Clear forgets every request (tracking was switched off); the refusal
// count stays.
func (s *Set) Clear() {
	clear(s.reqs)
	clear(s.ranks)
	s.free = s.free[:0]
}

// Load is what rank k holds.
func (s *Set) Load(k Rank) Load {
	if rs := s.ranks[k]; rs != nil {
		return rs.load
	}
	return Load{}
}

// Len is the number of tracked requests.
func (s *Set) Len() int { return len(s.reqs) }

// Refused counts the requests Add refused.
func (s *Set) Refused() uint64 { return s.refused }

// release takes h's blocks off its rank; a rank left with nothing is
// forgotten, so ranks that left the fleet cost nothing.
func (s *Set) release(h *hold, rs *rankState) {
	rs.load.Blocks -= h.Blocks
	rs.load.OutputBlocks -= h.out
	rs.load.Requests--
	h.present, h.out = false, 0
	if rs.load == (Load{}) {
		delete(s.ranks, h.Rank)
	}
}

func (s *Set) rank(k Rank) *rankState {
	rs := s.ranks[k]
	if rs == nil {
		rs = &rankState{}
		s.ranks[k] = rs
	}
	return rs
}

func (s *Set) newRequest() *request {
	if n := len(s.free); n > 0 {
		r := s.free[n-1]
		s.free = s.free[:n-1]
		return r
	}
	return &request{}
}

// outputBlocks is the blocks still to come of a request predicted to
// generate expected tokens that has generated done: whole blocks, rounded
// up, and none once it reaches its prediction.
func outputBlocks(expected, done, blockSize uint64) uint64 {
	if blockSize == 0 || done >= expected {
		return 0
	}
	return (expected - done + blockSize - 1) / blockSize
}
