package sim

import (
	"time"

	"switchyard/fakefleet/engine"
	"switchyard/sim/stats"
	"switchyard/sim/workload"
)

// Collect adapts a stats.Collector to a run's Observer.
func Collect(c *stats.Collector) Observer { return collector{c} }

type collector struct{ c *stats.Collector }

func (o collector) Arrived(req *workload.Request, blocks *engine.PromptBlocks) {
	o.c.AddPromptBlocks(blocks.Len, blocks.Chained, blocks.BlockSize)
}

func (o collector) Finished(r Result) {
	o.c.Add(stats.Request{ID: r.ID, Arrival: r.Arrival, PromptTokens: r.PromptTokens, CachedTokens: r.CachedTokens,
		OutputTokens: r.OutputTokens, TTFT: r.TTFT, E2E: r.E2E, ITL: r.ITL, Status: r.Status, Worker: r.Worker, Reason: r.Reason})
}

func (o collector) Load(at time.Duration, worker string, used uint64) {
	o.c.AddLoad(stats.LoadSample{At: at, Worker: worker, ActiveBlocks: used})
}
