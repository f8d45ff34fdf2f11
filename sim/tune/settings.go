// Package tune searches the KV-aware picker's knobs in the simulator for
// the settings that serve a workload best under an objective. The search
// is a pure function of its inputs: the same scenario, workload and
// options give the same evaluations in the same order and the same
// recommendation, however many evaluations run at once (docs/tune.md).
package tune

import (
	"math"
	"strconv"

	"switchyard/sim"
)

// Settings is one point of the search space: the dynamo.kv knobs the
// search moves. Every other dynamo.kv setting keeps its current value.
type Settings struct {
	// PrefillLoadScale is Dynamo's kv_overlap_score_weight: the weight of
	// the prefill term against the decode term of a rank's cost.
	PrefillLoadScale          float64 `json:"prefill_load_scale"`
	OverlapScoreCredit        float64 `json:"overlap_score_credit"`
	RouterTemperature         float64 `json:"router_temperature"`
	DecodeActiveRequestWeight float64 `json:"decode_active_request_weight"`
	TrackActiveBlocks         bool    `json:"track_active_blocks"`
	TrackPrefillTokens        bool    `json:"track_prefill_tokens"`
}

// The search space's bounds and ladders. prefill_load_scale moves on a
// log scale (a factor matters, not a difference); the temperature and the
// decode weight move along ladders of the values worth telling apart.
const (
	MinPrefillLoadScale = 1.0 / 16
	MaxPrefillLoadScale = 64.0
)

var (
	// scaleGrid is the coarse grid's prefill_load_scale, powers of two.
	scaleGrid = []float64{0.25, 0.5, 1, 2, 4, 8, 16}
	// creditGrid is the coarse grid's overlap_score_credit.
	creditGrid         = []float64{1, 0.5}
	temperatureLadder  = []float64{0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5}
	decodeWeightLadder = []float64{0, 0.25, 0.5, 1, 2, 4}
)

// SettingsOf reads the searched knobs from a scenario's router.kv.
func SettingsOf(k sim.KVParams) Settings {
	o := k.Options()
	return Settings{PrefillLoadScale: o.PrefillLoadScale, OverlapScoreCredit: o.OverlapScoreCredit,
		RouterTemperature: o.Temperature, DecodeActiveRequestWeight: o.DecodeActiveRequestWeight,
		TrackActiveBlocks: o.Track.ActiveBlocks, TrackPrefillTokens: o.Track.PrefillTokens}
}

// Apply returns k with the searched knobs set to s; the rest of k is kept.
func (s Settings) Apply(k sim.KVParams) sim.KVParams {
	scale, credit := s.PrefillLoadScale, s.OverlapScoreCredit
	k.PrefillLoadScale, k.OverlapScoreCredit = &scale, &credit
	k.RouterTemperature = s.RouterTemperature
	k.DecodeActiveRequestWeight = s.DecodeActiveRequestWeight
	k.TrackActiveBlocks, k.TrackPrefillTokens = s.TrackActiveBlocks, s.TrackPrefillTokens
	return k
}

// canonical rounds every value to 6 decimals, as search.json writes them,
// so a point reached two ways is one point.
func (s Settings) canonical() Settings {
	r := func(v float64) float64 { return math.Round(v*1e6) / 1e6 }
	s.PrefillLoadScale, s.OverlapScoreCredit = r(s.PrefillLoadScale), r(s.OverlapScoreCredit)
	s.RouterTemperature, s.DecodeActiveRequestWeight = r(s.RouterTemperature), r(s.DecodeActiveRequestWeight)
	return s
}

// key identifies a canonical point.
func (s Settings) key() string {
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	b := func(v bool) string { return strconv.FormatBool(v) }
	return f(s.PrefillLoadScale) + "/" + f(s.OverlapScoreCredit) + "/" + f(s.RouterTemperature) + "/" +
		f(s.DecodeActiveRequestWeight) + "/" + b(s.TrackActiveBlocks) + "/" + b(s.TrackPrefillTokens)
}

// valid reports whether s lies inside the space the router accepts.
func (s Settings) valid() bool {
	ok := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) && v >= 0 }
	return ok(s.PrefillLoadScale) && ok(s.OverlapScoreCredit) && s.OverlapScoreCredit <= 1 &&
		ok(s.RouterTemperature) && ok(s.DecodeActiveRequestWeight)
}

// ladderNeighbours are the ladder's entries either side of the one
// nearest v (v itself when it lies between entries).
func ladderNeighbours(ladder []float64, v float64) []float64 {
	near := 0
	for i, x := range ladder {
		if math.Abs(x-v) < math.Abs(ladder[near]-v) {
			near = i
		}
	}
	var out []float64
	if ladder[near] != v {
		return []float64{ladder[near]}
	}
	if near > 0 {
		out = append(out, ladder[near-1])
	}
	if near+1 < len(ladder) {
		out = append(out, ladder[near+1])
	}
	return out
}

// CoarseGrid is the coarse grid's prefill_load_scale and
// overlap_score_credit values, the grid a sweep spreads over machines
// (docs/sweeps.md): the search's own grid stage when its budget allows
// both credits.
func CoarseGrid() (scales, credits []float64) {
	return append([]float64(nil), scaleGrid...), append([]float64(nil), creditGrid...)
}
