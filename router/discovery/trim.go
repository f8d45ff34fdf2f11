package discovery

import (
	"bytes"
	"encoding/json"
)

// trimmedCard is what the router reads from a model card: the typed subset
// (cardWire; its tags omit empty members, which decoding ignores) and the
// artifact slots KV-aware routing loads tokenizers and chat templates from
// (router/prompt/artifacts).
type trimmedCard struct {
	cardWire
	Tokenizer        json.RawMessage `json:"tokenizer,omitempty"`
	PromptFormatter  json.RawMessage `json:"prompt_formatter,omitempty"`
	ChatTemplateFile json.RawMessage `json:"chat_template_file,omitempty"`
}

// maxTrimmedMemberBytes bounds one kept artifact slot of a trimmed card:
// slots are small, so a larger one is dropped rather than kept beside the
// bulk it was trimmed of (the router would refuse it anyway).
const maxTrimmedMemberBytes = 64 << 10

// TrimCard reduces a model card to the members the router reads, for
// holders that keep fleet-authored records and must stay compact (the
// Kubernetes metadata source trims cards over MaxRetainedCardBytes as it
// classifies them). The trimmed card reads exactly as the original does
// (parseCard). ok is false when the card does not fit that schema; the
// trimmed card then does not either, so the worker gets no card, as with
// the original.
func TrimCard(raw json.RawMessage) (trimmed json.RawMessage, ok bool) {
	if parseCard(raw) == nil {
		return unreadableCard, false
	}
	var c trimmedCard
	if json.Unmarshal(raw, &c) != nil {
		return unreadableCard, false
	}
	for _, m := range []*json.RawMessage{&c.Tokenizer, &c.PromptFormatter, &c.ChatTemplateFile} {
		if len(*m) > maxTrimmedMemberBytes {
			*m = nil
		}
	}
	// A bootstrap endpoint is read only as "an object".
	if de := bytes.TrimSpace(c.RuntimeConfig.DisaggregatedEndpoint); len(de) > 0 && de[0] == '{' {
		c.RuntimeConfig.DisaggregatedEndpoint = json.RawMessage(`{}`)
	}
	b, err := json.Marshal(&c)
	if err != nil {
		return unreadableCard, false
	}
	return b, true
}

// unreadableCard is a card value parseCard refuses, as the original was.
var unreadableCard = json.RawMessage(`"unreadable card"`)
