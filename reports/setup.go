package reports

import (
	"fmt"
	"strings"
	"time"
)

// Setup is what the pickers ran on beyond the workload: the fleet's worker groups with their
// engine settings, the simulated network and the router's settings. It is written to
// summary.json as "fleet_config", so two runs whose knobs differ never look alike.
type Setup struct {
	Workers []WorkerGroup
	Network Network
	Router  Router
}

// WorkerGroup is Count identical workers of one role and their engine card.
type WorkerGroup struct {
	Role                string
	Count               int
	DPSize              int
	BlockSize           int // tokens per KV block
	TotalKVBlocks       int // KV cache capacity per data-parallel rank, in blocks
	MaxNumBatchedTokens int
	MaxNumSeqs          int
	ContextLength       int
	SpeedupRatio        float64
	KVTransferBandwidth float64 // bytes/s; 0 = instantaneous
	KVBytesPerBlock     int
	LoadFields          []string // scheduler fields sent beside kv_used_blocks
	// Engine is the engine profile's name; "" is the mocker polynomial.
	Engine string
}

// Network is the simulated path between the fleet and the router.
type Network struct {
	DiscoveryDelay, SubscribeDelay, LoadDelay, LoadJitter time.Duration
	LoadLoss                                              float64 // probability a load sample is lost
	PublishDebounce, RequestDelay, LeaseTTL               time.Duration
}

// Router is the routing core's settings for the run.
type Router struct {
	MaxStaleness time.Duration // 0 = the load store's default
	KV           KVSettings
}

// KVSettings are the KV-aware picker's settings, defaults filled in.
type KVSettings struct {
	OverlapScoreCredit, PrefillLoadScale, Temperature float64
	ConditionalDisaggregation                         bool
	DecodeBusyThreshold                               *float64 // nil = no check
}

type setupJSON struct {
	Workers []workerGroupJSON `json:"workers"`
	Network networkJSON       `json:"network"`
	Router  routerJSON        `json:"router"`
}

type workerGroupJSON struct {
	Role                string   `json:"role"`
	Count               int      `json:"count"`
	DPSize              int      `json:"dp_size"`
	BlockSize           int      `json:"block_size"`
	TotalKVBlocks       int      `json:"total_kv_blocks"`
	MaxNumBatchedTokens int      `json:"max_num_batched_tokens"`
	MaxNumSeqs          int      `json:"max_num_seqs"`
	ContextLength       int      `json:"context_length"`
	SpeedupRatio        float64  `json:"speedup_ratio"`
	KVTransferBandwidth float64  `json:"kv_transfer_bandwidth"`
	KVBytesPerBlock     int      `json:"kv_bytes_per_block"`
	LoadFields          []string `json:"load_fields"`
	// Engine is left out on the mocker, so reports made before profiles
	// existed keep their bytes.
	Engine string `json:"engine_profile,omitempty"`
}

type networkJSON struct {
	DiscoveryDelayMs  float64 `json:"discovery_delay_ms"`
	SubscribeDelayMs  float64 `json:"subscribe_delay_ms"`
	LoadDelayMs       float64 `json:"load_delay_ms"`
	LoadJitterMs      float64 `json:"load_jitter_ms"`
	LoadLoss          float64 `json:"load_loss"`
	PublishDebounceMs float64 `json:"publish_debounce_ms"`
	RequestDelayMs    float64 `json:"request_delay_ms"`
	LeaseTTLMs        float64 `json:"lease_ttl_ms"`
}

type routerJSON struct {
	MaxStalenessMs float64 `json:"max_staleness_ms"`
	KV             kvJSON  `json:"kv"`
}

type kvJSON struct {
	OverlapScoreCredit        float64 `json:"overlap_score_credit"`
	PrefillLoadScale          float64 `json:"prefill_load_scale"`
	RouterTemperature         float64 `json:"router_temperature"`
	ConditionalDisaggregation bool    `json:"conditional_disaggregation"`
	DecodeBusyCheck           bool    `json:"decode_busy_check"`
	DecodeBusyThreshold       float64 `json:"decode_busy_threshold"` // 0 when decode_busy_check is false
}

// setupOf is the JSON form of s; a missing Setup is written with every key at its zero value, so
// the keys are always there.
func setupOf(s *Setup) setupJSON {
	out := setupJSON{Workers: []workerGroupJSON{}}
	if s == nil {
		return out
	}
	for _, g := range s.Workers {
		fields := append([]string{}, g.LoadFields...)
		out.Workers = append(out.Workers, workerGroupJSON{Role: g.Role, Count: g.Count, DPSize: g.DPSize, BlockSize: g.BlockSize,
			TotalKVBlocks: g.TotalKVBlocks, MaxNumBatchedTokens: g.MaxNumBatchedTokens, MaxNumSeqs: g.MaxNumSeqs,
			ContextLength: g.ContextLength, SpeedupRatio: round6(g.SpeedupRatio), KVTransferBandwidth: round6(g.KVTransferBandwidth),
			KVBytesPerBlock: g.KVBytesPerBlock, LoadFields: fields, Engine: g.Engine})
	}
	n := s.Network
	out.Network = networkJSON{DiscoveryDelayMs: msOf(n.DiscoveryDelay), SubscribeDelayMs: msOf(n.SubscribeDelay),
		LoadDelayMs: msOf(n.LoadDelay), LoadJitterMs: msOf(n.LoadJitter), LoadLoss: round6(n.LoadLoss),
		PublishDebounceMs: msOf(n.PublishDebounce), RequestDelayMs: msOf(n.RequestDelay), LeaseTTLMs: msOf(n.LeaseTTL)}
	k := s.Router.KV
	out.Router = routerJSON{MaxStalenessMs: msOf(s.Router.MaxStaleness), KV: kvJSON{OverlapScoreCredit: round6(k.OverlapScoreCredit),
		PrefillLoadScale: round6(k.PrefillLoadScale), RouterTemperature: round6(k.Temperature),
		ConditionalDisaggregation: k.ConditionalDisaggregation, DecodeBusyCheck: k.DecodeBusyThreshold != nil}}
	if k.DecodeBusyThreshold != nil {
		out.Router.KV.DecodeBusyThreshold = round6(*k.DecodeBusyThreshold)
	}
	return out
}

// Describe is a one-line description of the fleet for people: per group the count, role and
// KV capacity, then the network's load path when it is not the default.
func (s *Setup) Describe() string {
	if s == nil {
		return ""
	}
	var groups []string
	for _, g := range s.Workers {
		d := fmt.Sprintf("%d %s (%d KV blocks × %d tokens", g.Count, g.Role, g.TotalKVBlocks, g.BlockSize)
		if g.DPSize > 1 {
			d += fmt.Sprintf(", dp %d", g.DPSize)
		}
		if g.Engine != "" {
			d += ", profile " + g.Engine
		}
		groups = append(groups, d+")")
	}
	n := s.Network
	net := fmt.Sprintf("load delay %s", n.LoadDelay)
	if n.LoadJitter > 0 {
		net += fmt.Sprintf(" + jitter %s", n.LoadJitter)
	}
	if n.LoadLoss > 0 {
		net += fmt.Sprintf(", loss %g", n.LoadLoss)
	}
	return strings.Join(groups, " + ") + "; " + net
}
