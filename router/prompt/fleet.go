package prompt

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"switchyard/router/clock"
	"switchyard/router/discovery"
	"switchyard/router/picker"
	"switchyard/router/prompt/artifacts"
	"switchyard/router/prompt/template"
	"switchyard/router/tokenizer"
)

// tokenizerCostFactor estimates the memory a loaded tokenizer holds from
// its file's size, which the loader's 256 MiB budget sums: a loaded
// Llama-3.1 tokenizer holds 26.9 MB for a 9 MB file (docs/benchmarks.md).
const tokenizerCostFactor = 3

// Fleet is the Source of a live router: for each model, the artifacts
// every worker serving it names on its card, fetched under the operator's
// pins (artifacts.Store) and loaded in the background. A model whose
// workers disagree, or whose artifacts are still loading, has none yet.
type Fleet struct {
	snapshot   func() *discovery.Snapshot
	tokenizers *artifacts.Loader[*tokenizer.Tokenizer]
	configs    *artifacts.Loader[*template.Templates]
	files      *artifacts.Loader[*template.Template]
	log        *slog.Logger

	mu     sync.Mutex
	gen    uint64
	models map[string]artifacts.ModelArtifacts
	// keys spells each model's artifact key, once per generation.
	keys   map[string]string
	warned map[string]string // model → the agreement error last logged
}

// NewFleet reads the fleet from snapshot and its artifacts from store.
func NewFleet(snapshot func() *discovery.Snapshot, store *artifacts.Store, clk clock.Clock, log *slog.Logger) *Fleet {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f := &Fleet{snapshot: snapshot, log: log, warned: map[string]string{}}
	f.tokenizers = artifacts.NewLoader(store, clk, func(data []byte) (*tokenizer.Tokenizer, int64, error) {
		t, err := tokenizer.Load(data, tokenizer.Limits{})
		return t, int64(len(data)) * tokenizerCostFactor, err
	}, artifacts.LoaderLimits{})
	f.configs = artifacts.NewLoader(store, clk, func(data []byte) (*template.Templates, int64, error) {
		ts, err := template.FromTokenizerConfig(data, template.Options{})
		return ts, int64(len(data)), err
	}, artifacts.LoaderLimits{})
	f.files = artifacts.NewLoader(store, clk, func(data []byte) (*template.Template, int64, error) {
		t, err := template.ParseFile(data, template.Options{})
		return t, int64(len(data)), err
	}, artifacts.LoaderLimits{})
	return f
}

// Close stops the background loads.
func (f *Fleet) Close() {
	f.tokenizers.Close()
	f.configs.Close()
	f.files.Close()
}

// agreement is the fleet's answer for model at the current generation;
// every card is parsed once per generation.
func (f *Fleet) agreement(model string) (artifacts.ModelArtifacts, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, ok := f.currentLocked()[model]
	if !ok {
		return artifacts.ModelArtifacts{Model: model, Err: artifacts.ErrNoWorkers}, ""
	}
	if m.Err != nil && len(f.warned) < 1024 && f.warned[model] != m.Err.Error() {
		f.warned[model] = m.Err.Error()
		f.log.Warn("KV-aware selection has no tokenizer for this model; its requests score without prefix overlap",
			"model", model, "reason", m.Err.Error())
	}
	return m, f.keys[model]
}

// Warm starts loading, in the background, the artifacts of every model
// the current fleet agrees on, so that the first requests after a worker
// appears find them ready. Hosts call it when the registry changes.
func (f *Fleet) Warm() {
	f.mu.Lock()
	current := f.currentLocked()
	models := make([]artifacts.ModelArtifacts, 0, len(current))
	keys := make([]string, 0, len(current))
	for _, m := range current {
		if m.Err == nil {
			models = append(models, m)
			keys = append(keys, f.keys[m.Model])
		}
	}
	f.mu.Unlock()
	for i, m := range models {
		f.prepare(m, keys[i])
	}
}

// currentLocked is the fleet's answer per model at the registry's current
// generation; every card is parsed once per generation. f.mu is held.
func (f *Fleet) currentLocked() map[string]artifacts.ModelArtifacts {
	snap := f.snapshot()
	if f.models == nil || snap.Generation != f.gen {
		f.models, f.gen = artifacts.FleetArtifacts(snap.Workers), snap.Generation
		f.keys = make(map[string]string, len(f.models))
		for model, m := range f.models {
			f.keys[model] = m.Key.String()
		}
	}
	return f.models
}

// Prepared implements Source.
func (f *Fleet) Prepared(model string) (*Prepared, string) {
	m, key := f.agreement(model)
	if m.Err != nil {
		return nil, picker.KVTokenizerUnavailable
	}
	return f.prepare(m, key)
}

// prepare asks the loaders for both of the model's artifacts at once, so
// one request starts every load it needs. key is m.Key spelled out.
func (f *Fleet) prepare(m artifacts.ModelArtifacts, key string) (*Prepared, string) {
	model := m.Model
	tok, tokWhy := ready(f.tokenizers.Get(model, m.Artifacts.Tokenizer.File))
	p := &Prepared{Key: key}
	if tok != nil {
		p.Encoder = encoder{tok}
	}
	art := m.Artifacts.ChatTemplateFile
	if art == nil {
		art = m.Artifacts.PromptFormatter
	}
	tmplWhy := ""
	switch {
	case art == nil: // completions only
	case art.Kind == artifacts.KindHFChatTemplate:
		var t *template.Template
		if t, tmplWhy = ready(f.files.Get(model, art.File)); tmplWhy == "" {
			p.Template = single{t}
		}
	default: // a tokenizer_config.json, or a JSON file with a chat_template member
		var ts *template.Templates
		if ts, tmplWhy = ready(f.configs.Get(model, art.File)); tmplWhy == "" {
			p.Template = chooser{ts}
		}
	}
	if why := cmp.Or(tokWhy, tmplWhy); why != "" {
		return nil, why
	}
	return p, ""
}

// ready maps a loader's answer to a value or a KV selection result.
func ready[T any](v T, st artifacts.Status, _ error) (T, string) {
	switch st {
	case artifacts.StatusReady:
		return v, ""
	case artifacts.StatusUnpinned:
		return v, picker.KVArtifactUnpinned
	default:
		return v, picker.KVTokenizerUnavailable
	}
}

// chooser renders with the template a tokenizer_config.json picks for the
// request (transformers' choice among named templates).
type chooser struct{ ts *template.Templates }

func (c chooser) Render(ctx context.Context, in template.Input) (string, error) {
	t, err := c.ts.For(in)
	if err != nil {
		return "", err
	}
	return renderWith(ctx, t, in)
}

// single renders with one template file.
type single struct{ t *template.Template }

func (s single) Render(ctx context.Context, in template.Input) (string, error) {
	return renderWith(ctx, s.t, in)
}

func renderWith(ctx context.Context, t *template.Template, in template.Input) (string, error) {
	out, err := t.Render(ctx, in)
	if errors.Is(err, template.ErrTooLarge) {
		return "", fmt.Errorf("%w: %w", ErrTooLarge, err)
	}
	return out, err
}

// encoder reports a tokenizer's size limits as ErrTooLarge.
type encoder struct{ t *tokenizer.Tokenizer }

func (e encoder) AppendEncode(dst []uint32, text string, addSpecial bool) ([]uint32, error) {
	ids, err := e.t.AppendEncode(dst, text, addSpecial)
	if errors.Is(err, tokenizer.ErrTextTooLarge) || errors.Is(err, tokenizer.ErrTooManyTokens) {
		err = fmt.Errorf("%w: %w", ErrTooLarge, err)
	}
	return ids, err
}

// TokenizerEncoder returns t as the service's Encoder, its size limits
// reported as ErrTooLarge.
func TokenizerEncoder(t *tokenizer.Tokenizer) Encoder { return encoder{t} }
