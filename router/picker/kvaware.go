package picker

import (
	"math"
	"math/rand/v2"
	"time"

	"switchyard/router/kv"
	"switchyard/router/load"
)

// KV selection results: the closed label set of
// switchyard_dynamo_kv_selection_total{result}.
const (
	KVOverlap              = "overlap"
	KVNoOverlap            = "no_overlap"
	KVTokenizerUnavailable = "tokenizer_unavailable"
	KVPromptTooLarge       = "prompt_too_large"
	KVRenderUnavailable    = "render_unavailable"
	KVArtifactUnpinned     = "artifact_unpinned"
	KVBypass               = "bypass"
	KVUnsupported          = "unsupported"
)

// KVResults lists every KV selection result, for pre-registered series.
var KVResults = []string{KVOverlap, KVNoOverlap, KVTokenizerUnavailable, KVPromptTooLarge, KVRenderUnavailable,
	KVArtifactUnpinned, KVBypass, KVUnsupported}

// ConditionalBypassBelowTokens: with conditional disaggregation, a decode
// worker prefills a request itself when fewer prompt tokens than this are
// missing from its cache (Dynamo's conditional-prefill default).
const ConditionalBypassBelowTokens = 5000

// Block sizes a model's KV hashes may use (dynamo-wire.md §5).
const (
	minKVBlockSize = 16
	maxKVBlockSize = 65536
	// maxBlockSizes: prompts are hashed for at most two block sizes per
	// request; candidates with a third score without overlap.
	maxBlockSizes = 2
)

// KVOptions configure the KV-aware policy; every field hot-reloads
// through SetKVOptions.
type KVOptions struct {
	OverlapScoreCredit  float64  `json:"overlap_score_credit"`
	PrefillLoadScale    float64  `json:"prefill_load_scale"`
	Temperature         float64  `json:"router_temperature"`
	ConditionalDisagg   bool     `json:"conditional_disagg"`
	DecodeBusyThreshold *float64 `json:"decode_busy_threshold,omitempty"` // fraction of total_kv_blocks; nil = no check
	// PredictCache scores ranks on the cache state the router predicts
	// from its own picks instead of the workers' kv-events
	// (dynamo.kv.use_kv_events false); PredictedTTL is how long a
	// predicted block lasts (kv.DefaultPredictedTTL when 0).
	PredictCache bool          `json:"predict_cache,omitempty"`
	PredictedTTL time.Duration `json:"predicted_ttl,omitempty"`
	// OverlapScoreCreditDecay shrinks a rank's overlap credit as its tracked
	// prefill load rises above the least loaded candidate's: the credit is
	// multiplied by 1 / (1 + decay × excess), excess being that backlog in
	// blocks per block of this request. 0 turns it off; it needs
	// Track.PrefillTokens.
	OverlapScoreCreditDecay float64 `json:"overlap_score_credit_decay,omitempty"`
	// DecodeActiveRequestWeight adds this many blocks to a rank's decode
	// cost per request active on it (the core's account).
	DecodeActiveRequestWeight float64 `json:"decode_active_request_weight,omitempty"`
	// Track: the router-side active-sequence switches; they apply to the
	// load-based picker too.
	Track Tracking `json:"track,omitzero"`
}

// DefaultKVOptions are Dynamo's defaults.
func DefaultKVOptions() KVOptions {
	return KVOptions{OverlapScoreCredit: 1, PrefillLoadScale: 1}
}

// kvPolicy scores ranks by the prompt blocks they already hold (NewKVAware).
type kvPolicy struct {
	tracker *kv.Tracker
	opts    KVOptions
	rng     *rand.Rand
	count   func(result string)

	// Per pick: the prompt's hashes per block size and the overlaps.
	sizes   [maxBlockSizes]int
	hashes  [maxBlockSizes][]uint64
	matches kv.Matches
	overlap map[kv.Rank]uint32
	result  string // tokenizer_unavailable, or "" when tokens were there
	probs   []float64
	// unsupported hears of each block size the prompt cannot be hashed
	// for (outside 16..65536, or a third size for one request).
	unsupported func(model string, blockSize int)
	model       string
	// disagg: a prefill pool serves the request. Decode workers with no
	// prefill pool beside them prefill locally, as aggregated ones do, so
	// they are scored by overlap too.
	disagg bool
	// now is the pick's time, for predictions (PredictCache).
	now time.Time
	// prefill and decode are each candidate's backlog, per pick.
	prefill, decode []float64
}

// NewKVAware returns the KV-overlap-aware picker (docs/picker.md): prefill
// candidates, or aggregated ones when the model has no prefill/decode
// pool, are scored with Dynamo's worker_logit formula, crediting the
// prompt blocks each rank already holds according to tracker; decode
// ranks of a disaggregated pair (a prefill pool serves the request) use
// the load-only rule unless conditional disaggregation is on. seed feeds softmax sampling (temperature > 0).
// kvCount receives each selection's kv result.
func NewKVAware(store *load.Store, tracker *kv.Tracker, o KVOptions, seed uint64, count func(role, reason string), kvCount func(string)) *Scheduler {
	return newScheduler(store, count, newKVPolicy(tracker, o, seed, kvCount, nil))
}

func newKVPolicy(tracker *kv.Tracker, o KVOptions, seed uint64, kvCount func(string),
	unsupported func(model string, blockSize int)) *kvPolicy {
	if kvCount == nil {
		kvCount = func(string) {}
	}
	if unsupported == nil {
		unsupported = func(string, int) {}
	}
	k := &kvPolicy{tracker: tracker, opts: o, rng: rand.New(rand.NewPCG(seed, seed^0x6b76)), count: kvCount,
		overlap: map[kv.Rank]uint32{}, unsupported: unsupported}
	k.predictMode()
	return k
}

// predictMode has the tracker follow kv-events or predict cache state
// from picks, as the options say.
func (k *kvPolicy) predictMode() {
	if k.tracker != nil {
		k.tracker.SetPredicting(k.opts.PredictCache, k.opts.PredictedTTL)
	}
}

// SetKVOptions replaces the KV settings (a configuration reload); a
// picker without the KV-aware policy keeps only their tracking switches
// and decode_active_request_weight.
func (s *Scheduler) SetKVOptions(o KVOptions) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opts = o
	if k, ok := s.policy.(*kvPolicy); ok {
		k.opts = o
		k.predictMode()
	}
}

// prepare hashes the prompt for the block sizes of the decode pool's
// ranks, then of the prefill pools in the request's namespace order
// (which sizes make the two hashed must not depend on map order), and
// looks up every rank's cached prefix.
func (k *kvPolicy) prepare(req Request, pools *pools) {
	k.disagg = false
	for _, ns := range req.Namespaces {
		k.disagg = k.disagg || len(pools.prefill[ns]) > 0
	}
	clear(k.overlap)
	k.sizes = [maxBlockSizes]int{}
	k.result, k.model, k.now = "", req.Model, req.Now
	if k.opts.PredictCache {
		k.tracker.ExpirePredicted(req.Now)
	}
	if req.Tokens == nil && req.Blocks == nil {
		k.result = KVTokenizerUnavailable
		if req.NoTokens != "" {
			k.result = req.NoTokens
		}
		return
	}
	add := func(cs []candidate) {
		for i := range cs {
			k.addSize(int(cs[i].w.BlockSize))
		}
	}
	add(pools.decode)
	for _, ns := range req.Namespaces {
		add(pools.prefill[ns])
	}
	seed := kv.Seed("", req.CacheSalt)
	for i, bs := range k.sizes {
		if bs == 0 {
			break
		}
		if req.Tokens != nil {
			k.hashes[i] = kv.AppendBlockHashes(k.hashes[i][:0], req.Tokens, bs, seed)
		} else {
			k.hashes[i] = req.Blocks.AppendBlockHashes(k.hashes[i][:0], bs, seed)
		}
		k.tracker.Match(k.hashes[i], &k.matches)
		for j, r := range k.matches.Ranks {
			k.overlap[r] = k.matches.Blocks[j]
		}
	}
}

func (k *kvPolicy) addSize(bs int) {
	if bs < minKVBlockSize || bs > maxKVBlockSize {
		k.unsupported(k.model, bs)
		return
	}
	for i, s := range k.sizes {
		if s == bs {
			return
		}
		if s == 0 {
			k.sizes[i] = bs
			return
		}
	}
	k.unsupported(k.model, bs)
}

// hashed reports whether the prompt was hashed for block size bs.
func (k *kvPolicy) hashed(bs int) bool {
	for _, s := range k.sizes {
		if s == bs && s != 0 {
			return true
		}
	}
	return false
}

// overlapOf is c's cached prefix in blocks of its own block size.
func (k *kvPolicy) overlapOf(c *candidate) uint32 {
	return k.overlap[kv.Rank{Namespace: c.w.Namespace, WorkerID: c.w.InstanceID, DPRank: c.rank}]
}

// choose scores aggregated workers, and prefill workers beside decode
// workers, with the worker_logit formula; decode workers of a
// disaggregated pair take the load-only rule unless conditional
// disaggregation scores them too.
func (k *kvPolicy) choose(s *Scheduler, phase load.Phase, cands []candidate, req Request) (int, string) {
	switch {
	case phase == load.Prefill:
		return k.chooseKV(s, load.Prefill, cands, req, false)
	case !k.disagg:
		// Aggregated: each worker prefills its own requests.
		return k.chooseKV(s, load.Decode, cands, req, false)
	case k.opts.ConditionalDisagg:
		return k.chooseKV(s, load.Decode, cands, req, true)
	}
	return loadPolicy{}.choose(s, phase, cands, req)
}

// chosen counts the selection's kv result and, when cache state is
// predicted, records that the chosen rank now holds the prompt's blocks:
// it is the one that prefills them.
func (k *kvPolicy) chosen(c *candidate) {
	k.countResult(c)
	if !k.opts.PredictCache {
		return
	}
	for i, bs := range k.sizes {
		if bs != 0 && bs == int(c.w.BlockSize) {
			k.tracker.Predict(kv.Rank{Namespace: c.w.Namespace, WorkerID: c.w.InstanceID, DPRank: c.rank}, k.hashes[i], k.now)
			return
		}
	}
}

// countResult counts the selection's kv result by the rank it chose.
func (k *kvPolicy) countResult(c *candidate) {
	switch {
	case k.result != "":
		k.count(k.result)
	case !k.hashed(int(c.w.BlockSize)):
		// Its block size is outside 16..65536, or a third one for the
		// model: the prompt was not hashed for it.
		k.count(KVUnsupported)
	case k.overlapOf(c) > 0:
		k.count(KVOverlap)
	default:
		k.count(KVNoOverlap)
	}
}

// chooseKV scores candidates with the worker_logit formula:
//
//	cached_tokens        = min(overlap × bs, isl)
//	raw_prefill_blocks   = (active_prefill_tokens + isl) / bs
//	credit_blocks        = overlap_score_credit × overlap
//	adjusted_prefill     = max(0, raw_prefill_blocks − credit_blocks)
//	decode_cost_blocks   = active_decode_blocks + max(0, ceil(isl / bs) − overlap)
//	cost                 = prefill_load_scale × adjusted_prefill + decode_cost_blocks
//
// With tracking on (Tracking), the core's account of the requests it
// dispatched replaces the sampled terms: active_prefill_tokens become the
// rank's tracked prefill tokens, active_decode_blocks its tracked blocks
// (plus predicted output blocks); the samples still decide which ranks
// are fresh, quiet or stalled.
//
// decodeOnly scores decode workers for conditional disaggregation:
// max(0, decode_cost_blocks − credit_blocks). phase is the phase whose
// backlog decides freshness: Prefill for prefill workers, Decode for
// aggregated and decode workers.
func (k *kvPolicy) chooseKV(s *Scheduler, phase load.Phase, cands []candidate, req Request, decodeOnly bool) (int, string) {
	r := &s.reader
	o := k.opts
	isl := float64(req.PromptTokens)
	anyFresh := false
	k.prefill, k.decode = k.prefill[:0], k.decode[:0]
	minPrefill := math.Inf(1)
	for i := range cands {
		c := &cands[i]
		sc := r.ScoreRef(c.ref, phase)
		if c.admit(sc) {
			anyFresh = true
		}
		var prefillTokens, decodeBlocks float64
		if phase == load.Prefill {
			if sc.Kind == load.Fresh {
				prefillTokens = float64(sc.Backlog)
			}
			prefillTokens += float64(sc.Tokens)
			if d := r.ScoreRef(c.ref, load.Decode); d.Kind == load.Fresh {
				decodeBlocks = float64(d.Backlog)
			}
		} else {
			if sc.Kind == load.Fresh {
				decodeBlocks = float64(sc.Backlog)
			}
			decodeBlocks += float64(sc.Blocks)
			if pf := r.ScoreRef(c.ref, load.Prefill); pf.Kind == load.Fresh {
				prefillTokens = float64(pf.Backlog)
			}
			prefillTokens += float64(sc.Tokens)
		}
		prefillTokens, decodeBlocks = s.withTracked(c, prefillTokens, decodeBlocks)
		k.prefill, k.decode = append(k.prefill, prefillTokens), append(k.decode, decodeBlocks)
		minPrefill = math.Min(minPrefill, prefillTokens)
	}
	decay := o.OverlapScoreCreditDecay > 0 && s.trackingLocked().PrefillTokens && s.active != nil
	for i := range cands {
		c := &cands[i]
		bs := float64(max(c.w.BlockSize, 1))
		ov := float64(k.overlapOf(c))
		prefillTokens, decodeBlocks := k.prefill[i], k.decode[i]
		credit := o.OverlapScoreCredit * ov
		if decay {
			credit *= creditDecay(o.OverlapScoreCreditDecay, prefillTokens-minPrefill, bs, isl)
		}
		decodeCost := decodeBlocks + math.Max(0, math.Ceil(isl/bs)-ov)
		if decodeOnly {
			c.cost = math.Max(0, decodeCost-credit)
		} else {
			adjusted := math.Max(0, (prefillTokens+isl)/bs-credit)
			c.cost = o.PrefillLoadScale*adjusted + decodeCost
		}
	}
	if !anyFresh && s.tracksLoad() {
		// No rank has a fresh backlog for the phase, but the core's own
		// account gives every rank one: the costs above stand.
		for i := range cands {
			cands[i].ok = true
		}
		return k.lowest(s, phase, cands, true)
	}
	if !anyFresh {
		// No rank has a fresh backlog for the phase (dynamo.vllm has no
		// active_prefill_tokens): every rank competes on overlap and size.
		for i := range cands {
			c := &cands[i]
			bs := float64(max(c.w.BlockSize, 1))
			c.cost, c.ok = isl/bs-o.OverlapScoreCredit*float64(k.overlapOf(c)), true
		}
		return k.lowest(s, phase, cands, true)
	}
	sitOutStalled(cands)
	return k.lowest(s, phase, cands, false)
}

// creditDecay is the share of its overlap credit a rank keeps with
// excessTokens of tracked prefill backlog above the least loaded
// candidate's: 1 / (1 + decay × excess blocks / the request's blocks), so
// a decay of 1 halves the credit at one request's worth of excess.
func creditDecay(decay, excessTokens, bs, isl float64) float64 {
	requestBlocks := math.Max(1, math.Ceil(isl/bs))
	return 1 / (1 + decay*(excessTokens/bs)/requestBlocks)
}

// lowest picks among the ok candidates: the lowest cost with ties on the
// phase's cursor at temperature 0, else a softmax draw.
func (k *kvPolicy) lowest(s *Scheduler, phase load.Phase, cands []candidate, stale bool) (int, string) {
	if cheapest(cands) < 0 {
		return s.rotateAll(phase, len(cands)), ReasonRoundRobinStale
	}
	if t := k.opts.Temperature; t > 0 {
		return k.softmax(cands, t), ReasonKVAware
	}
	i, tied, _ := s.lowestCost(phase, cands)
	if stale && tied > 1 {
		return i, ReasonRoundRobinStale
	}
	return i, ReasonKVAware
}

// softmax draws a candidate with p_i ∝ exp(−(c_i − c_min) / ((c_max − c_min) × T)),
// uniformly when every cost is equal.
func (k *kvPolicy) softmax(cands []candidate, t float64) int {
	lo, hi := math.Inf(1), math.Inf(-1)
	for i := range cands {
		if cands[i].ok {
			lo, hi = math.Min(lo, cands[i].cost), math.Max(hi, cands[i].cost)
		}
	}
	k.probs = k.probs[:0]
	var sum float64
	for i := range cands {
		w := 0.0
		if cands[i].ok {
			w = 1
			if hi > lo {
				w = math.Exp(-(cands[i].cost - lo) / ((hi - lo) * t))
			}
		}
		k.probs = append(k.probs, w)
		sum += w
	}
	u := k.rng.Float64() * sum
	last := 0
	for i, w := range k.probs {
		if w == 0 {
			continue
		}
		last = i
		if u < w {
			return i
		}
		u -= w
	}
	return last
}

// bypass decides, under conditional disaggregation, whether the chosen
// decode worker prefills the request itself, and counts each bypass.
func (k *kvPolicy) bypass(s *Scheduler, c *candidate, req Request) bool {
	if !k.opts.ConditionalDisagg || !k.decodeFits(&s.reader, c, req) {
		return false
	}
	k.count(KVBypass)
	return true
}

// decodeFits: few enough prompt tokens are missing from c's cache, and,
// when decode_busy_threshold is set, its projected decode blocks stay
// within that fraction of its capacity (no sample or no capacity vetoes).
func (k *kvPolicy) decodeFits(r *load.Reader, c *candidate, req Request) bool {
	bs := uint64(max(c.w.BlockSize, 1))
	cached := min(uint64(k.overlapOf(c))*bs, req.PromptTokens)
	if req.PromptTokens-cached >= ConditionalBypassBelowTokens {
		return false
	}
	t := k.opts.DecodeBusyThreshold
	if t == nil {
		return true
	}
	capacity, _ := capacityOf(c.w, load.Decode)
	sc := r.ScoreRef(c.ref, load.Decode)
	if capacity == 0 || sc.Kind != load.Fresh {
		return false
	}
	projected := sc.Backlog + sc.Blocks + ceilDiv(req.PromptTokens, bs)
	return float64(projected) <= *t*float64(capacity)
}
