package reports

import (
	"fmt"
	"math/rand/v2"
	"time"

	"switchyard/sim/stats"
)

// run builds a realistic Summary with a seeded generator: latencies with a long tail, a few
// failures, prompts sharing prefixes, and load samples on the given number of workers.
func run(seed uint64, workers int, slow float64) stats.Summary {
	rng := rand.New(rand.NewPCG(seed, 7))
	c := stats.NewCollector(stats.SLO{TTFT: 800 * time.Millisecond, ITL: 40 * time.Millisecond})
	const n = 1500
	dur := 60 * time.Second
	reasons := []string{"load", "kv_aware", "round_robin"}
	for i := range n {
		arr := time.Duration(i) * dur / n
		ttft := time.Duration(slow * (20 + rng.ExpFloat64()*200) * float64(time.Millisecond))
		itl := time.Duration(slow * (8 + rng.ExpFloat64()*10) * float64(time.Millisecond))
		out := 1 + rng.IntN(300)
		e2e := ttft + itl*time.Duration(max(out-1, 0))
		if out < 2 {
			itl = 0
		}
		status := stats.StatusOK
		if rng.IntN(100) == 0 {
			status = "failed"
		}
		prompt := 200 + rng.IntN(1500)
		w := fmt.Sprintf("decode-%d", rng.IntN(workers))
		c.Add(stats.Request{ID: uint64(i + 1), Arrival: arr, PromptTokens: prompt, CachedTokens: prompt * rng.IntN(80) / 100 / max(1, int(slow)),
			OutputTokens: out, TTFT: ttft, ITL: itl, E2E: e2e, Status: status, Worker: w, Reason: reasons[rng.IntN(len(reasons))]})
		tok := make([]uint32, prompt)
		g := uint32(rng.IntN(5))
		for j := range tok {
			if j < 256 {
				tok[j] = g*1000 + uint32(j)
			} else {
				tok[j] = rng.Uint32() % 32000
			}
		}
		c.AddPrompt(tok, 16)
	}
	for i := range 2000 {
		at := time.Duration(i) * dur / 2000
		c.AddLoad(stats.LoadSample{At: at, Worker: fmt.Sprintf("decode-%d", i%workers), ActiveBlocks: uint64(100 + rng.IntN(400*(1+i%workers)))})
	}
	return c.Summary(dur)
}

func comparison() Comparison {
	return Comparison{
		Title:     "Pickers on <synthetic> & co",
		Trace:     "synthetic 1500 requests",
		Fleet:     "4 decode workers",
		Seed:      42,
		Generated: "test",
		SLO:       stats.SLO{TTFT: 800 * time.Millisecond, ITL: 40 * time.Millisecond},
		Pickers: []Run{
			{Name: "load", Summary: run(1, 4, 1)},
			{Name: "kv|aware", Summary: run(2, 4, 0.7)},
			{Name: "random <b>", Summary: run(3, 12, 1.4)},
		},
	}
}
