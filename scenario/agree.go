package scenario

import (
	"math"
	"slices"

	"switchyard/scenario/expect"
	"switchyard/sim/stats"
)

// Agreement is how far a scenario's simulated and live runs agree: the
// same workload on the same fleet with the same faults, one on virtual
// time and one on real sockets.
type Agreement struct {
	// ServedRatio of each run.
	SimServedRatio  float64 `json:"sim_served_ratio"`
	LiveServedRatio float64 `json:"live_served_ratio"`
	// TTFT percentiles (ms) of the served requests in each run.
	SimTTFT  Quantiles `json:"sim_ttft_ms"`
	LiveTTFT Quantiles `json:"live_ttft_ms"`
	// PickShareDistance is the total variation distance between the two
	// runs' shares of decode picks per worker: 0 when they spread the
	// requests identically, 1 when they share no worker.
	PickShareDistance float64 `json:"pick_share_distance"`
	// SameWorkerPicks is the fraction of requests (matched by arrival
	// order) pinned to the same decode worker in both runs.
	SameWorkerPicks float64 `json:"same_worker_picks"`
	// VerdictsAgree counts expectations with the same verdict in both,
	// of Verdicts judged in both (not skipped in either).
	VerdictsAgree int `json:"verdicts_agree"`
	Verdicts      int `json:"verdicts"`
}

// Quantiles of a latency in milliseconds.
type Quantiles struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
}

// Agree compares two runs' evidence over a fleet of n workers.
func Agree(simEv, liveEv *expect.Evidence, n int) *Agreement {
	a := &Agreement{SimServedRatio: servedRatio(simEv), LiveServedRatio: servedRatio(liveEv),
		SimTTFT: ttftQuantiles(simEv), LiveTTFT: ttftQuantiles(liveEv)}
	ss, ls := pickShares(simEv, n), pickShares(liveEv, n)
	for i := range ss {
		a.PickShareDistance += math.Abs(ss[i]-ls[i]) / 2
	}
	a.PickShareDistance = round4(a.PickShareDistance)
	sp, lp := decodeByArrival(simEv), decodeByArrival(liveEv)
	same, both := 0, min(len(sp), len(lp))
	for i := 0; i < both; i++ {
		if sp[i] == lp[i] && sp[i] >= 0 {
			same++
		}
	}
	if both > 0 {
		a.SameWorkerPicks = round4(float64(same) / float64(both))
	}
	return a
}

// countVerdicts fills the verdict agreement once both runs are judged.
func (a *Agreement) countVerdicts(simV, liveV []expect.Verdict) {
	a.Verdicts, a.VerdictsAgree = 0, 0
	for i := 0; i < min(len(simV), len(liveV)); i++ {
		if simV[i].Skipped != "" || liveV[i].Skipped != "" {
			continue // observed in one mode only
		}
		a.Verdicts++
		if simV[i].OK == liveV[i].OK {
			a.VerdictsAgree++
		}
	}
}

func round4(v float64) float64 { return math.Round(v*1e4) / 1e4 }

func servedRatio(ev *expect.Evidence) float64 {
	if len(ev.Requests) == 0 {
		return 0
	}
	n := 0
	for _, r := range ev.Requests {
		if r.Status == "ok" {
			n++
		}
	}
	return round4(float64(n) / float64(len(ev.Requests)))
}

func ttftQuantiles(ev *expect.Evidence) Quantiles {
	var xs []float64
	for _, r := range ev.Requests {
		if r.Status == "ok" {
			xs = append(xs, float64(r.TTFT)/1e6)
		}
	}
	slices.Sort(xs)
	q := func(p float64) float64 { return math.Round(stats.Percentile(xs, p)*100) / 100 }
	return Quantiles{P50: q(50), P90: q(90)}
}

func pickShares(ev *expect.Evidence, n int) []float64 {
	shares := make([]float64, n)
	total := 0
	for _, p := range ev.Picks {
		if p.Decode >= 0 && p.Decode < n {
			shares[p.Decode]++
			total++
		}
	}
	for i := range shares {
		if total > 0 {
			shares[i] /= float64(total)
		}
	}
	return shares
}

// decodeByArrival is each request's first decode pin, in arrival order.
func decodeByArrival(ev *expect.Evidence) []int {
	pin := make(map[uint64]int, len(ev.Picks))
	for _, p := range ev.Picks {
		if _, ok := pin[p.RequestID]; !ok {
			pin[p.RequestID] = p.Decode
		}
	}
	out := make([]int, len(ev.Requests))
	for i, r := range ev.Requests {
		w, ok := pin[r.ID]
		if !ok {
			w = -1
		}
		out[i] = w
	}
	return out
}
