package server

import (
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"switchyard/router/clock"
	"switchyard/router/config"
	"switchyard/router/picker"
	"switchyard/router/prompt"
	"switchyard/router/prompt/artifacts"
)

// prompts is the live router's prompt rendering: the artifacts the fleet's
// cards name, fetched under the operator's pins, and the bounded service
// the gateway asks for each request's token ids.
type prompts struct {
	store   *artifacts.Store
	fleet   *prompt.Fleet
	service *prompt.Service
}

// promptResults are the outcomes of a rendering, the label set of
// switchyard_dynamo_kv_prompts_total.
var promptResults = []string{"ok", picker.KVTokenizerUnavailable, picker.KVArtifactUnpinned, picker.KVPromptTooLarge,
	picker.KVRenderUnavailable}

func newPrompts(s *Server, cfg *config.Config, log *slog.Logger) *prompts {
	set, err := artifacts.SettingsFrom(cfg.Dynamo.KV)
	set.Pinned = cfg.ArtifactPins()
	if err != nil {
		log.Warn("dynamo.kv.artifact_cache_dir: no cache directory; remote artifacts are fetched on every load", "error", err)
	}
	store := artifacts.NewStore(set, artifacts.Options{Logger: log, Metrics: artifacts.NewMetrics(s.metrics.Registry)})
	results := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_dynamo_kv_prompts_total",
		Help: "Client prompts the router rendered and tokenized for KV-aware selection, by result (ok, or why it has no token ids).",
	}, []string{"result"})
	for _, r := range promptResults {
		results.WithLabelValues(r)
	}
	seconds := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "switchyard_dynamo_kv_render_seconds",
		Help:    "Time to render and tokenize one prompt (finished renders).",
		Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2},
	})
	s.metrics.Registry.MustRegister(results, seconds)
	fleet := prompt.NewFleet(s.core.Snapshot, store, clock.Real{}, log)
	service := prompt.New(fleet, prompt.Limits{}, prompt.Hooks{
		Result: func(r string) { results.WithLabelValues(r).Inc() },
		Render: func(d time.Duration) { seconds.Observe(d.Seconds()) },
	})
	return &prompts{store: store, fleet: fleet, service: service}
}

// reload follows dynamo.kv's artifact settings; an unpinned artifact's
// tokenizer is dropped.
func (p *prompts) reload(cfg *config.Config, log *slog.Logger) {
	set, err := artifacts.SettingsFrom(cfg.Dynamo.KV)
	set.Pinned = cfg.ArtifactPins()
	if err != nil {
		log.Warn("dynamo.kv.artifact_cache_dir: no cache directory; remote artifacts are fetched on every load", "error", err)
	}
	p.store.Reload(set)
}
