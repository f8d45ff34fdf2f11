package artifacts

import (
	"errors"
	"fmt"

	"switchyard/router/discovery"
)

// SlotKey names what fills one slot; zero when the slot is empty.
type SlotKey struct {
	Kind     Kind
	Checksum Checksum
}

// ArtifactKey is what a worker's card says its prompts are rendered and
// tokenized with. Two workers with equal keys produce the same token ids
// for the same request, so their KV blocks are comparable.
type ArtifactKey struct {
	Tokenizer        SlotKey
	PromptFormatter  SlotKey
	ChatTemplateFile SlotKey
}

// Key is the card's ArtifactKey.
func (c CardArtifacts) Key() ArtifactKey {
	return ArtifactKey{slotKey(c.Tokenizer), slotKey(c.PromptFormatter), slotKey(c.ChatTemplateFile)}
}

func slotKey(a *Artifact) SlotKey {
	if a == nil {
		return SlotKey{}
	}
	return SlotKey{a.Kind, a.File.Checksum}
}

func (k ArtifactKey) String() string {
	return fmt.Sprintf("tokenizer=%s prompt_formatter=%s chat_template_file=%s", k.Tokenizer, k.PromptFormatter, k.ChatTemplateFile)
}

func (s SlotKey) String() string {
	if s.Kind == "" {
		return "none"
	}
	return string(s.Kind) + ":" + string(s.Checksum)
}

// Reasons a model has no usable ArtifactKey; the caller counts the model's
// selections as tokenizer_unavailable.
var (
	// ErrDisagree: workers serving the model name different artifacts (a
	// rolling upgrade, or a misconfigured worker).
	ErrDisagree = errors.New("workers serving the model name different artifacts")
	// ErrNoCard: a worker's card is missing or over the retained-card
	// ceiling, so what it tokenizes with is unknown.
	ErrNoCard = errors.New("a worker serving the model has no readable card")
	// ErrNoTokenizer: the workers agree, but name no tokenizer.
	ErrNoTokenizer = errors.New("the model's cards name no tokenizer")
	// ErrNoWorkers: no worker serves the model.
	ErrNoWorkers = errors.New("no worker serves the model")
)

// ModelArtifacts is the fleet's answer for one model.
type ModelArtifacts struct {
	Model string
	// Key is the key every worker agrees on; meaningful only when Err is nil.
	Key ArtifactKey
	// Artifacts are the slots of the first worker (in registry order) with
	// that key: where to fetch from. Workers that agree name the same bytes,
	// whatever their paths.
	Artifacts CardArtifacts
	// Workers is how many workers serve the model.
	Workers int
	// Err says why the model has no usable key: ErrDisagree, ErrNoCard,
	// ErrNoTokenizer, or a worker's slot *Error.
	Err error
}

// FleetArtifacts answers, for every model the workers serve, whether all
// of them agree on one ArtifactKey. It parses every card once, so call it
// when the registry generation moves, not per request. Workers without a
// model name are skipped.
func FleetArtifacts(workers []*discovery.Worker) map[string]ModelArtifacts {
	out := map[string]ModelArtifacts{}
	for _, w := range workers {
		if w.Model == "" {
			continue
		}
		m, seen := out[w.Model]
		m.Model = w.Model
		m.Workers++
		if m.Err == nil {
			m = m.join(w, seen)
		}
		out[w.Model] = m
	}
	for name, m := range out {
		if m.Err == nil && m.Key.Tokenizer.Kind == "" {
			m.Err = ErrNoTokenizer
			out[name] = m
		}
	}
	return out
}

// ModelAgreement is FleetArtifacts for one model; Workers is 0 when no
// worker serves it.
func ModelAgreement(workers []*discovery.Worker, model string) ModelArtifacts {
	var serving []*discovery.Worker
	for _, w := range workers {
		if w.Model == model {
			serving = append(serving, w)
		}
	}
	if len(serving) == 0 {
		return ModelArtifacts{Model: model, Err: ErrNoWorkers}
	}
	return FleetArtifacts(serving)[model]
}

// join adds one worker's card to the model's answer.
func (m ModelArtifacts) join(w *discovery.Worker, seen bool) ModelArtifacts {
	if !w.HasCard || w.Card == nil {
		m.Err = fmt.Errorf("worker %x: %w", w.InstanceID, ErrNoCard)
		return m
	}
	arts, err := ParseCard(w.Card)
	if err != nil {
		m.Err = fmt.Errorf("worker %x: %w", w.InstanceID, err)
		return m
	}
	key := arts.Key()
	switch {
	case !seen:
		m.Key, m.Artifacts = key, arts
	case key != m.Key:
		m.Err = fmt.Errorf("%w: worker %x names %s, another %s", ErrDisagree, w.InstanceID, key, m.Key)
	}
	return m
}
