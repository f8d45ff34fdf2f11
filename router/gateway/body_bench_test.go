package gateway

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"switchyard/router/picker"
)

// The parse benchmarks: the cost of reading an OpenAI chat body by size,
// for realistic bodies (messages of prose) and adversarial ones (empty
// "{}" messages, refused past maxMessages), next to the parser this one
// replaced (kept below, as it was, for the comparison). Figures are in
// docs/benchmarks.md.
//
//	go test -run '^$' -bench ParseInbound -benchmem ./router/gateway/

var parseSizes = []struct {
	name string
	size int
}{{"1KiB", 1 << 10}, {"64KiB", 64 << 10}, {"1MiB", 1 << 20}, {"10MiB", 10 << 20}}

// realisticChat is a chat body of about size bytes: user and assistant
// turns of prose, one of them with content parts.
func realisticChat(size int) []byte {
	var b strings.Builder
	b.WriteString(`{"model":"llama-3-8b","stream":true,"max_tokens":256,"messages":[{"role":"system","content":"You are a helpful assistant."}`)
	// About 500 turns, each of one sentence or more.
	reps := min(max(1, size/(60*500)), 200)
	turn := strings.Repeat("The quick brown fox jumps over the lazy dog, then \\\"naps\\\". ", reps)
	for i := 0; b.Len() < size-len(turn)-64; i++ {
		role := [...]string{"user", "assistant"}[i%2]
		if i%5 == 4 {
			fmt.Fprintf(&b, `,{"role":%q,"content":[{"type":"text","text":"%s"},{"type":"image_url","image_url":{"url":"https://example.com/a.png"}}]}`, role, turn)
			continue
		}
		fmt.Fprintf(&b, `,{"role":%q,"content":"%s"}`, role, turn)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

// emptyMessages is a chat body of about size bytes of "{}" messages.
func emptyMessages(size int) []byte {
	head := `{"model":"llama-3-8b","messages":[`
	n := max(1, (size-len(head)-2)/3)
	return []byte(head + strings.TrimSuffix(strings.Repeat(`{},`, n), ",") + `]}`)
}

func BenchmarkParseInbound(b *testing.B) {
	for _, body := range []struct {
		name string
		make func(int) []byte
	}{{"realistic", realisticChat}, {"empty-messages", emptyMessages}} {
		for _, sz := range parseSizes {
			data := body.make(sz.size)
			for _, p := range []struct {
				name  string
				parse func([]byte, kind, picker.Estimator) (*inbound, *problem)
			}{{"one-pass", parseInbound}, {"before", legacyParseInbound}} {
				b.Run(body.name+"/"+sz.name+"/"+p.name, func(b *testing.B) {
					b.SetBytes(int64(len(data)))
					b.ReportAllocs()
					for b.Loop() {
						_, _ = p.parse(data, kindChat, picker.Heuristic{})
					}
				})
			}
		}
	}
}

// The parser before the one-pass reader, for the comparison.

// legacyParseInbound decodes what routing needs and removes nvext.token_data.
// Field names are matched exactly, as the upstream servers match them
// (encoding/json's struct decoding would also accept "Model" or "NVEXT").
func legacyParseInbound(body []byte, k kind, est picker.Estimator) (*inbound, *problem) {
	bad := badRequest
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil || top == nil {
		return nil, bad("the request body must be a JSON object")
	}
	in := &inbound{body: body}
	raw, ok := top["model"]
	if !ok || json.Unmarshal(raw, &in.model) != nil || strings.TrimSpace(in.model) == "" {
		return nil, bad("model is required and must be a non-empty string")
	}
	if raw, ok := top["stream"]; ok && string(raw) != "null" {
		if json.Unmarshal(raw, &in.stream) != nil {
			return nil, bad("stream must be true or false")
		}
	}
	var text string
	var tokens uint64
	if k == kindChat {
		text = legacyChatText(top["messages"])
	} else {
		text, tokens = legacyPromptText(top["prompt"])
	}
	in.promptTokens = est.Estimate(text) + tokens
	in.maxTokens = legacyMaxTokensOf(top)
	stripped, changed, err := legacyStripTokenData(top)
	if err != nil {
		return nil, bad("the request body could not be re-encoded")
	}
	if changed {
		in.body = stripped
	}
	return in, nil
}

// legacyMaxTokensOf reads the output limit: max_completion_tokens (OpenAI's
// newer name, which wins) or max_tokens.
func legacyMaxTokensOf(top map[string]json.RawMessage) int {
	for _, f := range [...]string{"max_completion_tokens", "max_tokens"} {
		var n int
		if raw, ok := top[f]; ok && json.Unmarshal(raw, &n) == nil && n > 0 {
			return n
		}
	}
	return 0
}

// legacyChatText concatenates the text of every message: string contents, and
// the text parts of array contents. Anything else is the upstream's to
// validate; the estimate only needs the words.
func legacyChatText(raw json.RawMessage) string {
	var msgs []struct {
		Content json.RawMessage `json:"content"`
	}
	if json.Unmarshal(raw, &msgs) != nil {
		return ""
	}
	var b strings.Builder
	for _, m := range msgs {
		var s string
		if json.Unmarshal(m.Content, &s) == nil {
			b.WriteString(s)
			b.WriteByte('\n')
			continue
		}
		var parts []struct {
			Text string `json:"text"`
		}
		if json.Unmarshal(m.Content, &parts) == nil {
			for _, p := range parts {
				b.WriteString(p.Text)
				b.WriteByte('\n')
			}
		}
	}
	return b.String()
}

// legacyPromptText reads a completions prompt: a string, a list of strings, or
// pre-tokenized prompts (token ids count as themselves).
func legacyPromptText(raw json.RawMessage) (string, uint64) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, 0
	}
	var list []string
	if json.Unmarshal(raw, &list) == nil {
		return strings.Join(list, "\n"), 0
	}
	var ids []uint64
	if json.Unmarshal(raw, &ids) == nil {
		return "", uint64(len(ids))
	}
	var batches [][]uint64
	if json.Unmarshal(raw, &batches) == nil {
		var n uint64
		for _, b := range batches {
			n += uint64(len(b))
		}
		return "", n
	}
	return "", 0
}

// legacyStripTokenData removes the client-forbidden nvext fields. Other nvext
// fields stay. The body is re-encoded only when something was removed, and
// then without HTML escaping so strings keep their bytes.
func legacyStripTokenData(top map[string]json.RawMessage) ([]byte, bool, error) {
	raw, ok := top["nvext"]
	if !ok {
		return nil, false, nil
	}
	var nv map[string]json.RawMessage
	if json.Unmarshal(raw, &nv) != nil || nv == nil {
		return nil, false, nil // not an object: the upstream refuses it
	}
	removed := false
	for _, f := range clientForbiddenNvext {
		if _, ok := nv[f]; ok {
			delete(nv, f)
			removed = true
		}
	}
	if !removed {
		return nil, false, nil
	}
	if len(nv) == 0 {
		delete(top, "nvext")
	} else {
		b, err := marshal(nv)
		if err != nil {
			return nil, false, err
		}
		top["nvext"] = b
	}
	b, err := marshal(top)
	return b, err == nil, err
}

// The benchmark bodies are what they claim: realistic ones are accepted,
// adversarial ones past 4096 messages refused.
func TestParseBenchmarkBodies(t *testing.T) {
	for _, sz := range parseSizes {
		_, p := parseInbound(realisticChat(sz.size), kindChat, picker.Heuristic{})
		if p != nil {
			t.Fatalf("realistic %s refused: %s", sz.name, p.message)
		}
	}
	if _, p := parseInbound(emptyMessages(1<<20), kindChat, picker.Heuristic{}); p == nil {
		t.Fatal("a MiB of empty messages accepted")
	}
}
