package prompt

import (
	"fmt"

	"switchyard/router/prompt/artifacts"
	"switchyard/router/prompt/template"
	"switchyard/router/tokenizer"
)

// Static is a Source with one Prepared for every model: what a frontend
// that ships its model's files (the fake fleet's) tokenizes with.
type Static struct{ P *Prepared }

// Prepared implements Source.
func (s Static) Prepared(string) (*Prepared, string) { return s.P, "" }

// FromFiles prepares a tokenizer.json and a tokenizer_config.json (its
// chat_template and special tokens; nil for none), keyed as a card naming
// them would be.
func FromFiles(tokenizerJSON, tokenizerConfig []byte) (*Prepared, error) {
	tok, err := tokenizer.Load(tokenizerJSON, tokenizer.Limits{})
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	key := artifacts.ArtifactKey{Tokenizer: artifacts.SlotKey{Kind: artifacts.KindHFTokenizerJSON, Checksum: artifacts.Sum(tokenizerJSON)}}
	p := &Prepared{Encoder: encoder{tok}}
	if tokenizerConfig != nil {
		ts, err := template.FromTokenizerConfig(tokenizerConfig, template.Options{})
		if err != nil {
			return nil, fmt.Errorf("tokenizer_config.json: %w", err)
		}
		p.Template = chooser{ts}
		key.PromptFormatter = artifacts.SlotKey{Kind: artifacts.KindHFTokenizerConfigJSON, Checksum: artifacts.Sum(tokenizerConfig)}
	}
	p.Key = key.String()
	return p, nil
}

// TemplateFromFile parses a chat template file as the router reads a
// card's: a tokenizer_config.json (its chat_template, named templates
// included, and special tokens) or, with plain, a chat_template.jinja.
// The Renderer picks and renders exactly as a live request's does.
func TemplateFromFile(data []byte, plain bool) (Renderer, error) {
	if plain {
		t, err := template.ParseFile(data, template.Options{})
		if err != nil {
			return nil, err
		}
		return single{t}, nil
	}
	ts, err := template.FromTokenizerConfig(data, template.Options{})
	if err != nil {
		return nil, err
	}
	return chooser{ts}, nil
}
