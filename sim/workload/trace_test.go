package workload

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"switchyard/internal/traces"
)

// openMooncake opens the Mooncake conversation trace, which cannot ship with the project: without
// it the test skips, saying where to get it, or fails when CI is set (internal/traces).
func openMooncake(t testing.TB) *os.File {
	t.Helper()
	f, err := os.Open(traces.Require(t, traces.Mooncake))
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	return f
}

func TestMooncakeFirstLines(t *testing.T) {
	tr, err := NewTrace(openMooncake(t), TraceConfig{})
	require.NoError(t, err)
	var reqs []Request
	for len(reqs) < 200 {
		r, ok := tr.Next()
		require.True(t, ok, "err: %v", tr.Err())
		reqs = append(reqs, r)
	}
	require.NoError(t, tr.Err())
	requireOrdered(t, reqs)
	// Line 1: {"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0 .. 13]}
	require.Equal(t, uint64(1), reqs[0].ID)
	require.Equal(t, time.Duration(0), reqs[0].Arrival)
	require.Len(t, reqs[0].Tokens, 6758)
	require.Equal(t, 500, reqs[0].MaxTokens)
	// Lines 1 to 5 all start with hash id 0 and then diverge: their first 512 tokens are equal,
	// the next 512 are not.
	for _, r := range reqs[1:5] {
		require.Equal(t, reqs[0].Tokens[:512], r.Tokens[:512])
		require.NotEqual(t, reqs[0].Tokens[512:1024], r.Tokens[512:1024])
	}
	st := tr.Stats()
	require.Equal(t, 200, st.Requests)
}

func TestEqualHashIDsGiveEqualTokens(t *testing.T) {
	// Hash id 7 appears at different positions and with different truncations; its tokens must
	// be the same run wherever it appears, whatever block size an engine later chops them into.
	in := `{"timestamp": 0, "input_length": 1024, "output_length": 1, "hash_ids": [3, 7]}
{"timestamp": 5, "input_length": 1500, "output_length": 1, "hash_ids": [7, 9, 3]}
{"timestamp": 5, "input_length": 600, "output_length": 1, "hash_ids": [9, 7]}
{"timestamp": 9, "input_length": 1100, "output_length": 2, "hash_ids": [3]}
`
	tr, err := NewTrace(strings.NewReader(in), TraceConfig{Speedup: 4})
	require.NoError(t, err)
	reqs := collect(t, tr, 10)
	require.NoError(t, tr.Err())
	require.Len(t, reqs, 4)
	block7 := reqs[0].Tokens[512:1024]
	block3 := reqs[0].Tokens[:512]
	require.Equal(t, block7, reqs[1].Tokens[:512])
	require.Equal(t, block3[:476], reqs[1].Tokens[1024:1500], "truncated last block is a prefix of the block")
	require.Equal(t, block7[:88], reqs[2].Tokens[512:600])
	require.NotEqual(t, block3, block7)
	// Padding beyond the hash ids' coverage: deterministic, length exact, and not a repeat of block 3.
	require.Len(t, reqs[3].Tokens, 1100)
	require.Equal(t, block3, reqs[3].Tokens[:512])
	require.Equal(t, synthesize([]uint64{3}, 1100), reqs[3].Tokens)
	require.NotEqual(t, block3[:512], reqs[3].Tokens[512:1024])
	// Speedup 4: 5 ms becomes 1.25 ms.
	require.Equal(t, 1250*time.Microsecond, reqs[1].Arrival)
}

func TestMooncakeFullTraceStats(t *testing.T) {
	st, err := ReadTraceStats(openMooncake(t), TraceConfig{})
	require.NoError(t, err)
	require.Equal(t, 12031, st.Requests)
	require.InDelta(t, 0.366, st.HitRatio(), 0.01) // NOTICE: infinite-cache prefix hits are 36.6%
	require.InDelta(t, 12035, st.AvgInput(), 1)
	require.InDelta(t, 343, st.AvgOutput(), 1)
	t.Logf("requests=%d avg_input=%.1f avg_output=%.1f hit_ratio=%.4f blocks=%d",
		st.Requests, st.AvgInput(), st.AvgOutput(), st.HitRatio(), st.Blocks)
}

func TestTraceErrorsNameTheLine(t *testing.T) {
	good := `{"timestamp": 1, "input_length": 4, "output_length": 1, "hash_ids": [1]}`
	cases := map[string]struct {
		line3 string
		want  string
	}{
		"malformed":     {`{"timestamp": 2, "input_length": 4,`, "trace line 3: malformed JSON"},
		"missing field": {`{"timestamp": 2, "input_length": 4, "hash_ids": [1]}`, "trace line 3: missing output_length"},
		"backwards":     {`{"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [1]}`, "trace line 3: timestamp 0 is before"},
		"negative":      {`{"timestamp": 2, "input_length": -4, "output_length": 1, "hash_ids": [1]}`, "trace line 3: input_length must be in"},
		"huge input":    {`{"timestamp": 2, "input_length": 99999999, "output_length": 1, "hash_ids": [1]}`, "trace line 3: input_length must be in"},
		"trailing junk": {good + ` x`, "trace line 3: malformed JSON"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			in := good + "\n\n" + c.line3 + "\n" + good + "\n"
			tr, err := NewTrace(strings.NewReader(in), TraceConfig{})
			require.NoError(t, err)
			reqs := collect(t, tr, 10)
			require.Len(t, reqs, 1, "the good line before the bad one is delivered")
			require.ErrorContains(t, tr.Err(), c.want)
			_, ok := tr.Next()
			require.False(t, ok, "a failed trace stays stopped")
		})
	}
}

func TestTraceRefusesLongLines(t *testing.T) {
	const limit = 200
	good := `{"timestamp": 1, "input_length": 4, "output_length": 1, "hash_ids": [1]}`
	pad := func(n int) string { // a valid JSON line of exactly n bytes
		l := `{"timestamp": 1, "input_length": 4, "output_length": 1, "hash_ids": [1], "x": ""}`
		return l[:len(l)-2] + strings.Repeat("a", n-len(l)) + `"}`
	}
	for _, n := range []int{limit + 1, limit + 2, 10 * limit} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			for _, tail := range []string{"\n" + good + "\n", ""} { // over-long line in the middle and at EOF
				tr, err := NewTrace(strings.NewReader(good+"\n"+pad(n)+tail), TraceConfig{MaxLineBytes: limit})
				require.NoError(t, err)
				reqs := collect(t, tr, 10)
				require.Len(t, reqs, 1)
				require.ErrorContains(t, tr.Err(), "trace line 2: longer than 200 bytes")
			}
		})
	}
	tr, err := NewTrace(strings.NewReader(pad(limit)+"\n"), TraceConfig{MaxLineBytes: limit})
	require.NoError(t, err)
	require.Len(t, collect(t, tr, 10), 1, "a line of exactly the limit is accepted")
	require.NoError(t, tr.Err())
}

func FuzzTrace(f *testing.F) {
	f.Add([]byte(`{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [0, 1]}` + "\n"))
	f.Add([]byte(`{"timestamp": 1, "input_length": 0, "output_length": 0, "hash_ids": []}`))
	f.Add([]byte("{\"timestamp\": 2}\n\n[1,2]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		tr, err := NewTrace(strings.NewReader(string(data)), TraceConfig{MaxLineBytes: 4096, MaxInputTokens: 1 << 14})
		require.NoError(t, err)
		var prev time.Duration
		for {
			r, ok := tr.Next()
			if !ok {
				break
			}
			require.GreaterOrEqual(t, r.Arrival, prev)
			require.LessOrEqual(t, len(r.Tokens), 1<<14)
			require.GreaterOrEqual(t, r.MaxTokens, 0)
			prev = r.Arrival
		}
		if tr.Err() != nil {
			require.Contains(t, tr.Err().Error(), "trace line ")
		}
	})
}

func BenchmarkTraceReplay(b *testing.B) {
	data, err := os.ReadFile(traces.Require(b, traces.Mooncake))
	require.NoError(b, err)
	var n, toks int
	for b.Loop() {
		tr, err := NewTrace(strings.NewReader(string(data)), TraceConfig{})
		require.NoError(b, err)
		for {
			r, ok := tr.Next()
			if !ok {
				break
			}
			n++
			toks += len(r.Tokens)
		}
		require.NoError(b, tr.Err())
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "requests/s")
	b.ReportMetric(float64(toks)/b.Elapsed().Seconds(), "tokens/s")
}

// BenchmarkSynthesize builds a 12,035-token prompt from 24 hash ids, the
// Mooncake conversation trace's average request.
func BenchmarkSynthesize(b *testing.B) {
	ids := make([]uint64, 24)
	for i := range ids {
		ids[i] = uint64(1000 + i)
	}
	b.SetBytes(4 * 12035)
	b.ReportAllocs()
	for b.Loop() {
		synthesize(ids, 12035)
	}
}
