// Package stats turns the per-request results of one simulated (or replayed) run into the figures
// a picker comparison reports: latency percentiles, throughput, goodput against an SLO, prefix-cache
// hit ratio and its infinite-cache bound, load imbalance across workers, selection reasons, and the
// downsampled series the report's charts draw.
//
// Everything here is a pure function of what was added: no clock, no goroutines, no randomness.
// A Collector is not safe for concurrent use; feed it from the simulator's single event loop.
// Definitions are in docs/reports.md.
package stats

import (
	"math"
	"slices"
	"time"

	"switchyard/internal/u64set"
	"switchyard/router/kv"
)

// StatusOK is the status of a request that completed. Every other status ("failed", "rejected",
// "refused", "cancelled", ...) counts as not completed.
const StatusOK = "ok"

// Chart series bounds: how many points Summary keeps per series.
const (
	MaxCDFPoints       = 200
	MaxHitPoints       = 200
	MaxLoadPoints      = 500
	MaxImbalancePoints = 500
)

// Request is the outcome of one request.
type Request struct {
	ID      uint64
	Arrival time.Duration // offset from run start

	PromptTokens int
	CachedTokens int // prompt tokens served from the chosen worker's prefix cache
	OutputTokens int

	TTFT, E2E time.Duration
	ITL       time.Duration // mean inter-token latency: (E2E-TTFT)/(OutputTokens-1); 0 if OutputTokens < 2

	Status string // StatusOK, or "failed"/"rejected"/"refused"/"cancelled"
	Worker string // label of the (decode) worker that served it; "" if it never reached one
	Reason string // the picker's selection reason; "" if no selection was made
}

// LoadSample is a worker's KV blocks in use at At; the value holds until the worker's next sample.
type LoadSample struct {
	At           time.Duration
	Worker       string
	ActiveBlocks uint64
}

// SLO bounds per-request latency for goodput. A zero field is no bound on that metric.
type SLO struct {
	TTFT, ITL time.Duration
}

// Percentiles of a latency, in milliseconds.
type Percentiles struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	Mean float64 `json:"mean"`
}

// Point is one point of a chart series; the units are those of the series holding it.
type Point struct{ X, Y float64 }

// WorkerLoad is one worker's active KV blocks over time: X in seconds from run start, Y in blocks,
// to be drawn as a step function (each value holds until the next point).
type WorkerLoad struct {
	Worker string
	Points []Point
}

// Series are the chart data of a run. They are kept out of summary.json.
type Series struct {
	// Empirical CDFs over completed requests: X in ms (non-decreasing), Y the fraction of
	// requests at or below X (increasing, ending at 1). At most MaxCDFPoints points each.
	TTFT, ITL, E2E []Point
	// HitRatio is the cumulative hit ratio in arrival order: X seconds, Y ratio.
	HitRatio []Point
	// Imbalance is max/mean active blocks over time (step function): X seconds, Y ratio, 0 while
	// no worker holds a block.
	Imbalance []Point
	// Load holds one step series per worker, in natural label order (decode-2 before decode-10).
	Load []WorkerLoad
}

// Summary is the per-run result. Rates are per second of the duration passed to Summary; ratios
// are in [0, 1] (imbalance is >= 1, or 0 without load). No field is ever NaN or infinite.
type Summary struct {
	DurationS float64 `json:"duration_s"`

	Requests  int            `json:"requests"`  // every request added
	Completed int            `json:"completed"` // status ok
	Failed    int            `json:"failed"`    // every status other than ok
	Statuses  map[string]int `json:"statuses"`  // requests per status other than ok
	Good      int            `json:"good"`      // ok and within every SLO bound

	TTFT Percentiles `json:"ttft_ms"`
	ITL  Percentiles `json:"itl_ms"`
	E2E  Percentiles `json:"e2e_ms"`

	ThroughputRPS    float64 `json:"throughput_rps"`
	OutputTokensPerS float64 `json:"output_tokens_per_s"`
	GoodputRPS       float64 `json:"goodput_rps"`
	GoodputRatio     float64 `json:"goodput_ratio"`

	PromptTokens  int64   `json:"prompt_tokens"` // over requests that reached a worker
	CachedTokens  int64   `json:"cached_tokens"`
	HitRatio      float64 `json:"hit_ratio"`
	HitRatioBound float64 `json:"hit_ratio_bound"`

	Imbalance float64        `json:"imbalance"`
	Reasons   map[string]int `json:"reasons"`

	Series Series `json:"-"`
}

type hitSample struct {
	arrival        time.Duration
	id             uint64
	prompt, cached int64
}

// Collector accumulates one run's results. The zero value is not usable; call NewCollector.
type Collector struct {
	slo SLO

	requests, completed, good int
	statuses                  map[string]int
	reasons                   map[string]int
	outputTokens              int64

	ttft, itl, e2e []time.Duration // completed requests; itl only for OutputTokens >= 2

	hits []hitSample // requests that reached a worker, in Add order

	loads []LoadSample

	seen                 u64set.Set // the infinite cache of the bound: sequence hashes
	boundTokens, boundHi int64
}

// NewCollector returns an empty collector that judges goodput against slo.
func NewCollector(slo SLO) *Collector {
	return &Collector{
		slo:      slo,
		statuses: make(map[string]int),
		reasons:  make(map[string]int),
	}
}

// Add records one request's outcome. Order does not matter: series are built in arrival order.
func (c *Collector) Add(r Request) {
	c.requests++
	if r.Reason != "" {
		c.reasons[r.Reason]++
	}
	if r.Worker != "" {
		c.hits = append(c.hits, hitSample{arrival: r.Arrival, id: r.ID, prompt: int64(r.PromptTokens), cached: int64(r.CachedTokens)})
	}
	if r.Status != StatusOK {
		c.statuses[r.Status]++
		return
	}
	c.completed++
	c.outputTokens += int64(r.OutputTokens)
	c.ttft = append(c.ttft, r.TTFT)
	c.e2e = append(c.e2e, r.E2E)
	if r.OutputTokens >= 2 {
		c.itl = append(c.itl, r.ITL)
	}
	if c.meetsSLO(r) {
		c.good++
	}
}

func (c *Collector) meetsSLO(r Request) bool {
	if c.slo.TTFT > 0 && r.TTFT > c.slo.TTFT {
		return false
	}
	// A request with fewer than two output tokens has no inter-token latency to violate.
	if c.slo.ITL > 0 && r.OutputTokens >= 2 && r.ITL > c.slo.ITL {
		return false
	}
	return true
}

// AddLoad records a worker's active KV blocks at a point in time. Samples may come in any order;
// two samples of one worker at the same instant resolve to the one added last.
func (c *Collector) AddLoad(s LoadSample) { c.loads = append(c.loads, s) }

// AddPrompt feeds the infinite-cache bound with one request's prompt. Call it for every request of
// the workload, in arrival order, with the engine's KV block size. A block hits when the chain of
// blocks up to and including it was seen before; a trailing partial block never hits but its
// tokens count in the denominator. A non-positive blockSize counts the tokens and never hits.
func (c *Collector) AddPrompt(tokens []uint32, blockSize int) {
	c.AddPromptBlocks(len(tokens), kv.SequenceHashes(kv.BlockHashes(tokens, blockSize, kv.BaseSeed)), blockSize)
}

// AddPromptBlocks is AddPrompt for a prompt of tokens whose blocks the caller hashed already:
// seq are the sequence hashes (kv.SequenceHashes of kv.BlockHashes under kv.BaseSeed) of its
// complete blocks of blockSize tokens.
func (c *Collector) AddPromptBlocks(tokens int, seq []uint64, blockSize int) {
	c.boundTokens += int64(tokens)
	prefix := true
	for _, h := range seq {
		if prefix {
			if c.seen.Has(h) {
				c.boundHi += int64(blockSize)
				continue
			}
			// Sequence hashes chain the whole prefix, so after the first miss no later block
			// of this prompt can be in the set: stop looking and just remember them.
			prefix = false
		}
		c.seen.Add(h)
	}
}

// Summary computes the run's figures over duration (the run's length; rates are 0 if it is not
// positive). It does not change the collector, so it may be called again after more Adds.
func (c *Collector) Summary(duration time.Duration) Summary {
	s := Summary{
		DurationS: finite(duration.Seconds()),
		Requests:  c.requests,
		Completed: c.completed,
		Failed:    c.requests - c.completed,
		Good:      c.good,
		Statuses:  cloneMap(c.statuses),
		Reasons:   cloneMap(c.reasons),
	}
	ttft, itl, e2e := sortedMs(c.ttft), sortedMs(c.itl), sortedMs(c.e2e)
	s.TTFT, s.ITL, s.E2E = percentiles(ttft), percentiles(itl), percentiles(e2e)
	s.Series.TTFT, s.Series.ITL, s.Series.E2E = cdf(ttft, MaxCDFPoints), cdf(itl, MaxCDFPoints), cdf(e2e, MaxCDFPoints)

	if secs := duration.Seconds(); secs > 0 {
		s.ThroughputRPS = finite(float64(c.completed) / secs)
		s.OutputTokensPerS = finite(float64(c.outputTokens) / secs)
		s.GoodputRPS = finite(float64(c.good) / secs)
	}
	s.GoodputRatio = ratio(int64(c.good), int64(c.requests))

	s.PromptTokens, s.CachedTokens, s.Series.HitRatio = c.hitSeries()
	s.HitRatio = ratio(s.CachedTokens, s.PromptTokens)
	s.HitRatioBound = ratio(c.boundHi, c.boundTokens)

	s.Imbalance, s.Series.Imbalance, s.Series.Load = loadFigures(c.loads, duration)
	return s
}

// hitSeries returns the token totals and the cumulative hit ratio in arrival order (ties by ID).
func (c *Collector) hitSeries() (prompt, cached int64, series []Point) {
	hs := slices.Clone(c.hits)
	slices.SortStableFunc(hs, func(a, b hitSample) int {
		if a.arrival != b.arrival {
			return cmpDur(a.arrival, b.arrival)
		}
		return cmpU64(a.id, b.id)
	})
	pts := make([]Point, 0, len(hs))
	for _, h := range hs {
		prompt += h.prompt
		cached += h.cached
		pts = append(pts, Point{X: h.arrival.Seconds(), Y: ratio(cached, prompt)})
	}
	return prompt, cached, Downsample(pts, MaxHitPoints)
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return finite(float64(a) / float64(b))
}

// finite maps NaN and ±Inf to 0 so no figure can break JSON or SVG output.
func finite(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return v
}

func cloneMap(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func cmpDur(a, b time.Duration) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
