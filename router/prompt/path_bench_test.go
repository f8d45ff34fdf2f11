package prompt

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"switchyard/fixtures"
	"switchyard/router/discovery"
	"switchyard/router/kv"
	"switchyard/router/load"
	"switchyard/router/picker"
)

// chatOf builds a chat completions body of turns user/assistant turns of
// prose, about tokensWanted tokens once rendered.
func chatOf(b *testing.B, svc *Service, tokensWanted int) []byte {
	prose := "The router renders each conversation with the model's own chat template, tokenizes the text, " +
		"hashes every complete block and asks which worker already holds the longest prefix of them. "
	msgs := []map[string]string{{"role": "system", "content": "You are a careful assistant. " + prose}}
	for turn := 0; ; turn++ {
		role := "user"
		if turn%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, map[string]string{"role": role, "content": fmt.Sprintf("Turn %d. %s%s", turn, prose, prose)})
		body, err := json.Marshal(map[string]any{"model": "m", "messages": msgs})
		if err != nil {
			b.Fatal(err)
		}
		ids, why := svc.Tokens(context.Background(), "m", true, body)
		if why != "" {
			b.Fatalf("render: %s", why)
		}
		if len(ids) >= tokensWanted {
			return body
		}
	}
}

// BenchmarkRenderTokenizeHashPick is a live chat request's whole KV path
// in the router: render the 8k-token conversation with the chat template,
// tokenize it, then the KV-aware pick over 16 aggregated workers, which
// hashes the prompt's blocks and walks the index. It reports the p50 and
// p99 of single requests (run with -cpu 1 for the one-core figure).
func BenchmarkRenderTokenizeHashPick(b *testing.B) {
	svc := fixtureService(b)
	body := chatOf(b, svc, 8192)

	var workers []*discovery.Worker
	total := uint64(16384)
	for i := range 16 {
		workers = append(workers, &discovery.Worker{Namespace: "ns", InstanceID: uint64(i + 1), Role: discovery.RoleAggregated,
			Model: "m", BlockSize: 16, HasCard: true, Runtime: discovery.RuntimeConfig{TotalKVBlocks: &total, DPSize: 1}})
	}
	snap := &discovery.Snapshot{View: discovery.View{Workers: workers}}
	store := load.NewStore(nil)
	store.SetLive(snap)
	tracker := kv.NewTracker(nil)
	tracker.SetLive(snap)
	pk, err := picker.New(picker.NameKV, picker.Deps{Store: store, Tracker: tracker, KV: picker.DefaultKVOptions()})
	if err != nil {
		b.Fatal(err)
	}
	durations := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		ids, why := svc.Tokens(context.Background(), "m", true, body)
		if why != "" {
			b.Fatal(why)
		}
		if _, ok := pk.Pick(picker.Request{ID: uint64(i + 1), Model: "m", Namespaces: []string{"ns"},
			PromptTokens: uint64(len(ids)), Tokens: ids, Now: start}, snap); !ok {
			b.Fatal("no pick")
		}
		durations = append(durations, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(durations)
	b.ReportMetric(float64(durations[len(durations)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(durations[len(durations)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkTokensShortChat is the router's share of a one-message chat
// request's KV path (the gateway benchmark's request): decode, render on
// a worker, tokenize.
func BenchmarkTokensShortChat(b *testing.B) {
	svc := fixtureService(b)
	body := []byte(`{"model":"Qwen/Qwen3-0.6B","messages":[{"role":"user","content":"Say ok in one word, please."}],"max_tokens":1}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, why := svc.Tokens(context.Background(), "m", true, body); why != "" {
			b.Fatal(why)
		}
	}
}

// fixtureService renders with the project's test tokenizer and chat
// template, closed when the benchmark ends.
func fixtureService(b *testing.B) *Service {
	tok, err := fixtures.TokenizerFile(fixtures.TestTokenizer, fixtures.TokenizerJSON)
	if err != nil {
		b.Fatal(err)
	}
	cfg, err := fixtures.TokenizerFile(fixtures.TestTokenizer, fixtures.TokenizerConfig)
	if err != nil {
		b.Fatal(err)
	}
	p, err := FromFiles(tok, cfg)
	if err != nil {
		b.Fatal(err)
	}
	svc := New(Static{P: p}, Limits{}, Hooks{})
	b.Cleanup(svc.Close)
	return svc
}
