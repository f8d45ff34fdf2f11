// Package picker chooses the Dynamo workers a request is pinned to: a
// decode (worker, dp_rank) and, when that worker is a decode worker with
// prefill workers beside it, a prefill (worker, dp_rank) in the same
// namespace. Pickers are part of the deterministic core: they read the
// registry snapshot, the load store and the time they are given, and keep
// only their round-robin cursors.
package picker

import (
	"time"

	"switchyard/router/discovery"
)

// Request is what a picker needs to know about one request.
type Request struct {
	// ID identifies the request in dispatch accounting.
	ID uint64
	// Model is the Dynamo model name (display_name) after dynamo.shim.model_map.
	Model string
	// Namespaces are the namespaces with a usable shim replica for this
	// request, in configuration order. Workers elsewhere are not candidates.
	Namespaces []string
	// PromptTokens is the estimated prompt size.
	PromptTokens uint64
	// Now is the decision time (the request's receipt time).
	Now time.Time
	// Tokens are the prompt's token ids: rendered and tokenized by the
	// router for client requests (router/prompt), supplied by a trusted
	// internal caller (the simulator, trace replay), or nil. CacheSalt
	// seeds their block hashes (dynamo-wire.md §5).
	Tokens    []uint32
	CacheSalt string
	// NoTokens says why Tokens is nil when the caller tried to render the
	// prompt (a KV selection result: tokenizer_unavailable,
	// artifact_unpinned, prompt_too_large, render_unavailable); empty
	// counts tokenizer_unavailable.
	NoTokens string
	// Blocks, when Tokens is nil, hashes the prompt's blocks instead: a
	// trusted internal caller (the simulator) that keeps no token ids
	// hands over what kv.AppendBlockHashes of them would give.
	Blocks BlockHasher

	// Route and MaxTokens describe the request to a recording: the
	// ingress route and the requested output limit (0 when the client set
	// none). Pickers do not read them.
	Route     string
	MaxTokens int
}

// BlockHasher appends the LocalBlockHash of every complete block of a
// prompt, as kv.AppendBlockHashes over its token ids.
type BlockHasher interface {
	AppendBlockHashes(dst []uint64, blockSize int, seed uint64) []uint64
}

// Pin is one chosen worker rank.
type Pin struct {
	WorkerID uint64
	DPRank   uint32
	// DPDeclared: the card declares data_parallel_size, so the rank header
	// is sent (even for rank 0).
	DPDeclared bool
	Role       discovery.Role
}

// Selection is a picker's answer.
type Selection struct {
	Namespace string
	Decode    Pin
	// Prefill is set when HasPrefill; otherwise only the decode worker is
	// pinned (an aggregated worker, or no prefill worker for the model).
	// A value, not a pointer, so a pick allocates nothing.
	Prefill    Pin
	HasPrefill bool
	// Bypass: conditional disaggregation chose to let the decode worker
	// prefill the request itself; only the decode pin is sent and the
	// routing path is unified.
	Bypass bool
	// Reasons, as counted under switchyard_dynamo_selection_total.
	DecodeReason, PrefillReason string
	// PromptBlocks is the prompt's size in the decode worker's KV blocks,
	// what the pinned ranks are charged with until they answer (Dispatch).
	PromptBlocks uint64
	// CachedTokens is the prompt prefix the rank that prefills the request
	// (the prefill pin, else the decode pin) holds in its cache, by the KV
	// index; 0 for pickers without one. The core's account of active
	// requests charges that rank the rest of the prompt (Holds).
	CachedTokens uint64
	// BlockSize is the decode worker's KV block size.
	BlockSize uint64
}

// Selection reasons (the closed reason label set).
const (
	ReasonLoad              = "load"
	ReasonRoundRobin        = "round_robin"
	ReasonRoundRobinStale   = "round_robin_stale"
	ReasonNoPrefillPool     = "no_prefill_pool"
	ReasonKVAware           = "kv_aware"
	ReasonConditionalBypass = "conditional_bypass"
	// ReasonRandom: the random picker (offline comparisons) drew the rank.
	ReasonRandom = "random"
)

// Reasons lists every reason, for pre-registered metric series.
var Reasons = []string{ReasonLoad, ReasonRoundRobin, ReasonRoundRobinStale, ReasonNoPrefillPool, ReasonKVAware, ReasonConditionalBypass, ReasonRandom}

// Picker chooses workers. ok is false when no worker in the request's
// namespaces serves the model: the request then takes standard routing.
// A picker only reads the load store; whoever asks it records what the
// selection pinned (Dispatch), when a pinned request ended unserved
// (EndDispatch) and when one was served to its end (FinishDispatch).
type Picker interface {
	Pick(req Request, snap *discovery.Snapshot) (sel Selection, ok bool)
}

// Candidate is one rank a pick considered, with its cost when the picker
// could define one. The recorder stores them beside each selection.
type Candidate struct {
	Phase    string // "prefill" or "decode"
	WorkerID uint64
	DPRank   uint32
	Cost     float64
	Defined  bool // Cost is meaningful
}

// Explainer is implemented by pickers that can list the candidates of
// their last pick. The caller must serialise Pick and Candidates (the
// routing core does): a concurrent pick replaces the list.
type Explainer interface {
	Candidates(dst []Candidate) []Candidate
}
