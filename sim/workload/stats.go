package workload

import (
	"io"

	"switchyard/internal/u64set"
)

// TraceStats summarizes a trace the way the Mooncake paper does, so a replay can be checked
// against published figures before it is trusted.
type TraceStats struct {
	Requests     int
	InputTokens  int64
	OutputTokens int64
	Blocks       int64 // hash ids over all requests
	HitBlocks    int64 // leading hash ids already seen earlier in arrival order
}

// AvgInput is the mean input_length.
func (s TraceStats) AvgInput() float64 { return ratio(s.InputTokens, int64(s.Requests)) }

// AvgOutput is the mean output_length.
func (s TraceStats) AvgOutput() float64 { return ratio(s.OutputTokens, int64(s.Requests)) }

// HitRatio is the prefix-cache hit ratio of an infinite cache: the fraction of blocks whose whole
// prefix (itself and every earlier block of the same request) had been seen before. Counting only
// the leading run matches how a KV cache is reused: a block after a miss cannot be reused.
func (s TraceStats) HitRatio() float64 { return ratio(s.HitBlocks, s.Blocks) }

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// statsCounter accumulates TraceStats; seen is the infinite cache. It grows with the number of
// distinct hash ids (at most 32 bytes each), bounded by the trace file's own size.
type statsCounter struct {
	TraceStats
	seen u64set.Set
}

func newStatsCounter() statsCounter { return statsCounter{} }

func (c *statsCounter) add(rec traceLine) {
	c.Requests++
	c.InputTokens += int64(*rec.InputLength)
	c.OutputTokens += int64(*rec.OutputLength)
	c.Blocks += int64(len(rec.HashIDs))
	prefix := true
	for _, h := range rec.HashIDs {
		if prefix && c.seen.Has(h) {
			c.HitBlocks++
		} else {
			prefix = false
		}
		c.seen.Add(h)
	}
}

func (c *statsCounter) snapshot() TraceStats { return c.TraceStats }

// ReadTraceStats reads a whole trace and returns its statistics without synthesizing prompts;
// it is the cheap way to vet a trace file.
func ReadTraceStats(r io.Reader, cfg TraceConfig) (TraceStats, error) {
	t, err := NewTrace(r, cfg)
	if err != nil {
		return TraceStats{}, err
	}
	for {
		if _, ok := t.read(); !ok {
			return t.Stats(), t.Err()
		}
	}
}
