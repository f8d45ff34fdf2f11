package config

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"time"
	"unicode"
)

// MaxPinnedArtifacts caps dynamo.kv.pinned_artifacts. A fleet serves a
// handful of models, each naming a tokenizer and a template or two; the cap
// keeps the pin set small.
const MaxPinnedArtifacts = 256

func (k *checker) kv(c *Config) {
	const p = "dynamo.kv"
	kv := c.Dynamo.KV
	// Parse already refuses NaN and infinities, so plain comparisons do.
	if kv.OverlapScoreCredit < 0 || kv.OverlapScoreCredit > 1 {
		k.err(p+".overlap_score_credit", "must be between 0.0 and 1.0 (credit beyond the cached blocks would make cached prompts cheaper than free), got %g", kv.OverlapScoreCredit)
	}
	if kv.PrefillLoadScale < 0 {
		k.err(p+".prefill_load_scale", "must be >= 0, got %g", kv.PrefillLoadScale)
	}
	if ttl := time.Duration(kv.PredictedBlockTTL); ttl < time.Second || ttl > 24*time.Hour {
		k.err(p+".predicted_block_ttl", "must be between 1s and 24h, got %s", ttl)
	}
	if kv.RouterTemperature < 0 {
		k.err(p+".router_temperature", "must be >= 0 (0 picks the lowest cost), got %g", kv.RouterTemperature)
	}
	k.uniqueList(p+".pinned_artifacts", kv.PinnedArtifacts, MaxPinnedArtifacts, func(s string) string {
		if !blake3Checksum.MatchString(s) {
			return "must be \"blake3:\" followed by 64 lowercase hex digits"
		}
		return ""
	})
	if kv.Enabled && len(kv.PinnedArtifacts) == 0 {
		k.warn(p+".pinned_artifacts", "empty: no tokenizer or template may be loaded, so every selection scores without prefix overlap (artifact_unpinned)")
	}
	k.errIf(p+".artifact_cache_dir", cacheDirProblem(kv.ArtifactCacheDir))
	if kv.ExpectedOutputTokens < 0 || kv.ExpectedOutputTokens > maxExpectedOutputTokens {
		k.err(p+".expected_output_tokens", "must be between 0 (the default prediction) and %d, got %d", maxExpectedOutputTokens, kv.ExpectedOutputTokens)
	}
	if d := kv.OverlapScoreCreditDecay; d < 0 || math.IsNaN(d) || math.IsInf(d, 0) {
		k.err(p+".overlap_score_credit_decay", "must be a number >= 0, got %g", d)
	}
	if kv.DecodeActiveRequestWeight < 0 || math.IsNaN(kv.DecodeActiveRequestWeight) || math.IsInf(kv.DecodeActiveRequestWeight, 0) {
		k.err(p+".decode_active_request_weight", "must be a number >= 0, got %g", kv.DecodeActiveRequestWeight)
	}
	cd := kv.ConditionalDisaggregation
	if t := cd.DecodeBusyThreshold; t != nil && (*t < 0 || *t > 1) {
		k.err(p+".conditional_disaggregation.decode_busy_threshold", "must be a fraction of total_kv_blocks between 0.0 and 1.0, got %g", *t)
	}
	if t := kv.Replay.Timeout.Std(); t < MinKVReplayTimeout || t > MaxKVReplayTimeout {
		k.err(p+".replay.timeout", "must be between %s and %s, got %s", MinKVReplayTimeout, MaxKVReplayTimeout, t)
	}
	if n := kv.Replay.MaxHeldMessages; n < 1 || n > MaxKVReplayHeld {
		k.err(p+".replay.max_held_messages", "must be between 1 and %d, got %d", MaxKVReplayHeld, n)
	}
	k.kvSources(c)
	if cd.Enabled {
		k.warn(p+".conditional_disaggregation.enabled", "Dynamo 1.5 direct-mode frontends refuse a request without a prefill worker id while prefill workers are registered, so bypassed requests can fail with 503")
	}
}

// maxExpectedOutputTokens bounds dynamo.kv.expected_output_tokens: no
// model generates more in one answer.
const maxExpectedOutputTokens = 1 << 20

// cacheDirProblem checks an explicit artifact_cache_dir; empty means the
// per-user default. A relative path would move with the process's working
// directory, so it is refused rather than guessed at.
func cacheDirProblem(dir string) string {
	switch {
	case dir == "":
		return ""
	case strings.ContainsFunc(dir, unicode.IsControl):
		return "must not contain control characters"
	case !filepath.IsAbs(dir):
		return "must be an absolute path (or empty for the per-user cache directory)"
	}
	return ""
}

// kvSources checks dynamo.kv.sources and the seed's advisories tying them
// to the event bus's kv_listener grants.
func (k *checker) kvSources(c *Config) {
	const p = "dynamo.kv.sources"
	srcs := c.Dynamo.KV.Sources
	if len(srcs) > MaxKVSources {
		k.err(p, "at most %d entries, got %d", MaxKVSources, len(srcs))
	}
	bus := c.Dynamo.EventBus
	granted := map[string]bool{}
	for _, e := range bus.Brokers {
		if e.Role == BusRoleKVListener {
			for _, b := range e.Backends {
				granted[b] = true
			}
		}
	}
	seen := map[string]int{}
	configured := map[string]bool{}
	for i, s := range srcs {
		q := index(p, i)
		switch {
		case s.Backend == "":
			k.err(q+".backend", "required")
		case len(s.Backend) > 253 || strings.IndexFunc(s.Backend, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0:
			k.err(q+".backend", "must be at most 253 bytes without spaces or control characters")
		default:
			if j, dup := seen[s.Backend]; dup {
				k.err(q+".backend", "duplicate of %s.backend", index(p, j))
			}
			seen[s.Backend] = i
			configured[s.Backend] = true
		}
		if s.Transport != KVSourceTransportEventBus {
			k.err(q+".transport", "must be event_bus, got %q", s.Transport)
			continue
		}
		if s.Namespace == "" {
			k.err(q+".namespace", "required: discovery watches several Dynamo namespaces")
		} else if msg := namespaceProblem(s.Namespace); msg != "" {
			k.err(q+".namespace", "%s", msg)
		}
		if !bus.Enabled {
			k.warn(q+".transport", "event_bus while dynamo.event_bus.enabled is false: no kv-listener can connect, the source stays without a stream")
		} else if s.Backend != "" && !granted[s.Backend] {
			k.warn(q+".backend", "no kv_listener entry of dynamo.event_bus.brokers grants it: no listener may announce it")
		}
	}
	for i, e := range bus.Brokers {
		if e.Role != BusRoleKVListener {
			continue
		}
		for j, b := range e.Backends {
			if b != "" && !configured[b] {
				k.warn(fmt.Sprintf("%s.backends[%d]", index("dynamo.event_bus.brokers", i), j), "granted backend %q has no matching dynamo.kv.sources entry: its events are not followed", b)
			}
		}
	}
}
