package workload

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The example trace in scenarios/ is this generator's output; -update rewrites it.
var update = flag.Bool("update", false, "rewrite the generated example trace")

const exampleTrace = "../../scenarios/traces/synthetic-conversations.jsonl"

func synthBytes(t testing.TB, cfg SynthTraceConfig, seed uint64) []byte {
	t.Helper()
	var b bytes.Buffer
	require.NoError(t, WriteSynthTrace(&b, cfg, seed))
	return b.Bytes()
}

func TestSynthTraceFollowsTheMooncakeFormat(t *testing.T) {
	cfg := DefaultSynthTrace()
	data := synthBytes(t, cfg, 7)
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	require.Len(t, lines, cfg.Requests)
	prev := int64(0)
	seen := map[uint64]bool{}
	for i, l := range lines {
		var rec struct {
			Timestamp    int64    `json:"timestamp"`
			InputLength  int      `json:"input_length"`
			OutputLength int      `json:"output_length"`
			HashIDs      []uint64 `json:"hash_ids"`
		}
		dec := json.NewDecoder(strings.NewReader(l))
		dec.DisallowUnknownFields()
		require.NoError(t, dec.Decode(&rec), "line %d", i+1)
		require.GreaterOrEqual(t, rec.Timestamp, prev, "line %d", i+1)
		prev = rec.Timestamp
		require.LessOrEqual(t, rec.InputLength, cfg.MaxInput)
		require.Len(t, rec.HashIDs, (rec.InputLength+TraceBlockTokens-1)/TraceBlockTokens, "line %d", i+1)
		require.GreaterOrEqual(t, rec.OutputLength, cfg.Output.Min)
		require.LessOrEqual(t, rec.OutputLength, cfg.Output.Max)
		sys := rec.HashIDs[0]
		require.Zero(t, sys%uint64(cfg.SystemBlocks), "line %d: every prompt opens with a system prompt", i+1)
		require.Less(t, sys, uint64(cfg.SystemPrompts*cfg.SystemBlocks), "line %d", i+1)
		for b := range cfg.SystemBlocks {
			require.Equal(t, sys+uint64(b), rec.HashIDs[b], "line %d: the whole system prompt", i+1)
		}
		for _, id := range rec.HashIDs {
			seen[id] = true
		}
	}
	require.True(t, strings.HasPrefix(lines[0], `{"timestamp": 0, "input_length": `), "the first request is at the trace's start: %s", lines[0])
	// Every request's message ends in at least one block of its own.
	require.GreaterOrEqual(t, len(seen), cfg.Requests+cfg.SystemPrompts*cfg.SystemBlocks)
}

func TestSynthTraceIsSeeded(t *testing.T) {
	cfg := DefaultSynthTrace()
	require.Equal(t, synthBytes(t, cfg, 1), synthBytes(t, cfg, 1))
	require.NotEqual(t, synthBytes(t, cfg, 1), synthBytes(t, cfg, 2))
}

// Replayed, the trace has the prefix sharing it was built with: continuing a conversation reuses
// its earlier blocks, so the infinite-cache hit ratio follows Continue.
func TestSynthTraceReplaysWithSharedPrefixes(t *testing.T) {
	cfg := DefaultSynthTrace()
	cfg.Requests, cfg.SystemBlocks = 2000, 1
	tr, err := NewTrace(bytes.NewReader(synthBytes(t, cfg, 3)), TraceConfig{})
	require.NoError(t, err)
	reqs := collect(t, tr, cfg.Requests)
	require.NoError(t, tr.Err())
	require.Len(t, reqs, cfg.Requests)
	requireOrdered(t, reqs)
	conversational := tr.Stats().HitRatio()

	cfg.Continue = 0
	st, err := ReadTraceStats(bytes.NewReader(synthBytes(t, cfg, 3)), TraceConfig{})
	require.NoError(t, err)
	require.Equal(t, cfg.Requests, st.Requests)
	t.Logf("hit ratio: %.3f conversational, %.3f with system prompts only", conversational, st.HitRatio())
	require.Greater(t, st.HitRatio(), 0.0, "system prompts are shared")
	require.Greater(t, conversational, st.HitRatio()+0.2, "conversations share their history")
}

func TestSynthTraceRefusesBadConfigs(t *testing.T) {
	cases := map[string]func(c *SynthTraceConfig){
		"Requests must be >= 1":          func(c *SynthTraceConfig) { c.Requests = 0 },
		"Requests must be <=":            func(c *SynthTraceConfig) { c.Requests = MaxSynthTraceRequests + 1 },
		"Rate must be a finite rate":     func(c *SynthTraceConfig) { c.Rate = 0 },
		"Continue must be in [0, 1]":     func(c *SynthTraceConfig) { c.Continue = 1.5 },
		"Message.Max":                    func(c *SynthTraceConfig) { c.Message.Max = 1 },
		"MaxInput must be <=":            func(c *SynthTraceConfig) { c.MaxInput = MaxPromptTokens + 1 },
		"must be <= MaxInput":            func(c *SynthTraceConfig) { c.MaxInput = 2048 },
		"SystemBlocks <= 4096":           func(c *SynthTraceConfig) { c.SystemBlocks, c.MaxInput = 5000, MaxPromptTokens },
		"SystemPrompts must be >= 1":     func(c *SynthTraceConfig) { c.SystemPrompts = 0 },
		"workload synthetic trace: inva": func(c *SynthTraceConfig) { c.Output = Range{} },
	}
	for want, breach := range cases {
		cfg := DefaultSynthTrace()
		breach(&cfg)
		var b bytes.Buffer
		err := WriteSynthTrace(&b, cfg, 1)
		require.ErrorContains(t, err, want)
		require.Zero(t, b.Len(), "nothing is written for a bad config")
	}
}

// The example trace is exactly the generator's output for DefaultSynthTrace and seed 1, so it
// is the project's own data and can be rebuilt: go test ./sim/workload/ -run ExampleTrace -update.
func TestExampleTraceIsGenerated(t *testing.T) {
	want := synthBytes(t, DefaultSynthTrace(), 1)
	if *update {
		require.NoError(t, os.MkdirAll(filepath.Dir(exampleTrace), 0o755))
		require.NoError(t, os.WriteFile(exampleTrace, want, 0o644))
	}
	got, err := os.ReadFile(exampleTrace)
	require.NoError(t, err)
	require.Equal(t, string(want), string(got), "rebuild with -update")
	st, err := ReadTraceStats(bytes.NewReader(got), TraceConfig{})
	require.NoError(t, err)
	require.Equal(t, 200, st.Requests)
	t.Logf("example trace: requests=%d avg_input=%.1f avg_output=%.1f hit_ratio=%.4f blocks=%d",
		st.Requests, st.AvgInput(), st.AvgOutput(), st.HitRatio(), st.Blocks)
}
