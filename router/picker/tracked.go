package picker

import (
	"switchyard/router/active"
	"switchyard/router/discovery"
)

// DefaultExpectedOutputTokens predicts a request's output when it names
// no max_tokens and Tracking.ExpectedOutputTokens is 0: a typical chat
// answer, not a worst case, since the prediction only weighs ranks.
const DefaultExpectedOutputTokens = 256

// Tracking are the router-side active-sequence switches (Dynamo's
// DYN_ROUTER_TRACK_*): which parts of the routing core's own account of
// the requests it dispatched (router/active) replace the load samples'
// backlog in the pickers' costs. Off, the pickers use the samples and the
// dispatches made since them, as before tracking existed.
type Tracking struct {
	// ActiveBlocks: a rank's prompt blocks held by requests it serves,
	// from dispatch to their end, replace its sampled decode blocks and
	// the blocks dispatched since.
	ActiveBlocks bool `json:"active_blocks,omitempty"`
	// PrefillTokens: the prompt tokens a rank still has to prefill (the
	// prompt minus its cached prefix), from dispatch to the first token,
	// replace its sampled active_prefill_tokens and the tokens dispatched
	// since.
	PrefillTokens bool `json:"prefill_tokens,omitempty"`
	// OutputBlocks adds the output blocks active requests are predicted
	// to grow (max_tokens, else ExpectedOutputTokens), decaying as they
	// generate.
	OutputBlocks bool `json:"output_blocks,omitempty"`
	// ExpectedOutputTokens predicts the output of a request without
	// max_tokens; 0 means DefaultExpectedOutputTokens.
	ExpectedOutputTokens int `json:"expected_output_tokens,omitempty"`
}

// Any reports whether any switch is on, i.e. whether the core must keep
// its account at all.
func (t Tracking) Any() bool { return t.ActiveBlocks || t.PrefillTokens || t.OutputBlocks }

// expectedOutput is the output a request is predicted to generate.
func (t Tracking) expectedOutput(req Request) uint64 {
	if req.MaxTokens > 0 {
		return uint64(req.MaxTokens)
	}
	if t.ExpectedOutputTokens > 0 {
		return uint64(t.ExpectedOutputTokens)
	}
	return DefaultExpectedOutputTokens
}

// tracked returns the core's account of c's rank: prefill tokens, and
// blocks (active blocks when that switch is on, predicted output blocks
// when that one is, and the per-request decode weight); prefillOK and
// blocksOK report which replace the sampled values rather than add.
func (s *Scheduler) tracked(c *candidate) (prefill, blocks float64, prefillOK, blocksOK bool) {
	t, o := s.trackingLocked(), s.opts
	if s.active == nil || !t.Any() && o.DecodeActiveRequestWeight == 0 {
		return 0, 0, false, false
	}
	l := s.active.Load(active.Rank{Namespace: c.w.Namespace, WorkerID: c.w.InstanceID, DPRank: c.rank})
	if t.ActiveBlocks {
		blocks += float64(l.Blocks)
	}
	if t.OutputBlocks {
		blocks += float64(l.OutputBlocks)
	}
	blocks += o.DecodeActiveRequestWeight * float64(l.Requests)
	return float64(l.PrefillTokens), blocks, t.PrefillTokens, t.ActiveBlocks
}

// Tracking is the tracking the picker decides with: its settings', or
// prefill tokens and active blocks forced on for the *_tracked pickers.
func (s *Scheduler) Tracking() Tracking {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.trackingLocked()
}

func (s *Scheduler) trackingLocked() Tracking {
	t := s.opts.Track
	if s.forceTrack {
		t.ActiveBlocks, t.PrefillTokens = true, true
	}
	return t
}

// Holds are what a selection charges its ranks in the core's account of
// active requests: the rank that prefills the request (its prefill pin,
// else its decode pin) the prompt tokens missing from that rank's cache
// until the first token; the prefill rank of a pair the prompt blocks
// until then too, as it hands the KV to the decode rank; the decode rank
// the prompt blocks and the predicted output until the request ends.
func Holds(dst []active.Hold, req Request, sel Selection, t Tracking) []active.Hold {
	prefill := req.PromptTokens - min(sel.CachedTokens, req.PromptTokens)
	decode := active.Hold{Rank: active.Rank{Namespace: sel.Namespace, WorkerID: sel.Decode.WorkerID, DPRank: sel.Decode.DPRank},
		Blocks: sel.PromptBlocks}
	if t.OutputBlocks {
		decode.OutputTokens, decode.BlockSize = t.expectedOutput(req), sel.BlockSize
	}
	if !sel.HasPrefill {
		decode.PrefillTokens = prefill
		return append(dst, decode)
	}
	return append(dst, decode, active.Hold{Rank: active.Rank{Namespace: sel.Namespace, WorkerID: sel.Prefill.WorkerID,
		DPRank: sel.Prefill.DPRank}, PrefillTokens: prefill, Blocks: sel.PromptBlocks, UntilFirstToken: true})
}

// prefillsItself reports whether decode candidate c would prefill the
// request itself: an aggregated worker, or a decode worker with no
// prefill pool beside it.
func (s *Scheduler) prefillsItself(c *candidate) bool {
	return c.w.Role != discovery.RoleDecode || len(s.pools.prefill[c.w.Namespace]) == 0
}

// withTracked replaces a rank's sampled prefill tokens and decode blocks
// (with what was dispatched since) by the core's account, each when its
// switch is on; predicted output blocks and the per-request decode
// weight add to the blocks either way.
func (s *Scheduler) withTracked(c *candidate, prefillTokens, decodeBlocks float64) (float64, float64) {
	tp, tb, pOK, bOK := s.tracked(c)
	if pOK {
		prefillTokens = tp
	}
	if bOK {
		decodeBlocks = tb
	} else {
		decodeBlocks += tb
	}
	return prefillTokens, decodeBlocks
}

// tracksLoad reports whether the core's account defines a load for every
// rank, sampled or not.
func (s *Scheduler) tracksLoad() bool {
	t := s.trackingLocked()
	return s.active != nil && (t.PrefillTokens || t.ActiveBlocks)
}
