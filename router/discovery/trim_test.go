package discovery

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A trimmed card keeps exactly what the router reads: parseCard sees the
// same typed subset, the artifact slots survive, the bulk does not.
func TestTrimCardKeepsTheTypedSubset(t *testing.T) {
	card := `{"display_name":"Qwen/Qwen3-32B","worker_type":"Decode","kv_cache_block_size":64,` +
		`"runtime_config":{"total_kv_blocks":12000,"max_num_seqs":256,"context_length":32768,"data_parallel_size":2,` +
		`"disaggregated_endpoint":"dynamo/prefill/generate","tool_call_parser":"` + strings.Repeat("x", 2<<20) + `"},` +
		`"tokenizer":{"hf_tokenizer_json":{"path":"/m/tokenizer.json","checksum":"blake3:00","size":7}},` +
		`"chat_template":"` + strings.Repeat("y", 2<<20) + `","release":"1.5.0"}`
	trimmed, ok := TrimCard(json.RawMessage(card))
	require.True(t, ok)
	require.Less(t, len(trimmed), 1024)
	require.Equal(t, parseCard(json.RawMessage(card)), parseCard(trimmed))
	require.Contains(t, string(trimmed), `"hf_tokenizer_json"`)
	require.NotContains(t, string(trimmed), "chat_template\"")
	require.NotContains(t, string(trimmed), "tool_call_parser")

	for _, bad := range []string{`[1,2]`, `"card"`, `{`, `{"runtime_config":[]}`} {
		got, ok := TrimCard(json.RawMessage(bad))
		require.False(t, ok, bad)
		require.Nil(t, parseCard(got), "an unreadable card stays unreadable")
	}
}

func FuzzTrimCard(f *testing.F) {
	f.Add([]byte(`{"display_name":"m","runtime_config":{"total_kv_blocks":1}}`))
	f.Add([]byte(`{"runtime_config":[]}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		trimmed, ok := TrimCard(raw)
		if !json.Valid(trimmed) {
			t.Fatalf("invalid JSON out: %q", trimmed)
		}
		if ok && len(raw) > 0 && json.Valid(raw) {
			// Trimming never changes what the router reads from a card.
			if a, b := parseCard(raw), parseCard(trimmed); (a == nil) != (b == nil) || (a != nil && !reflect.DeepEqual(a, b)) {
				t.Fatalf("typed subset changed: %+v vs %+v", a, b)
			}
		}
	})
}
