package workload

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"switchyard/router/kv"
)

// A deferred prompt's length, tokens and block hashes are exactly the eager trace's, for block
// sizes that divide the trace's 512-token blocks and ones that do not, for truncated and padded
// lines and repeated hash ids.
func TestDeferredPromptsMatchSynthesizedOnes(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	var b strings.Builder
	for i := range 300 {
		ids := make([]string, rng.IntN(6))
		for j := range ids {
			ids[j] = fmt.Sprint(rng.IntN(12)) // few ids: prompts share blocks
		}
		n := len(ids)*TraceBlockTokens + rng.IntN(700) - 350 // truncated or padded
		if rng.IntN(5) == 0 {
			n = len(ids) * TraceBlockTokens
		}
		n = max(n, 0)
		fmt.Fprintf(&b, `{"timestamp": %d, "input_length": %d, "output_length": 3, "hash_ids": [%s]}`+"\n",
			i, n, strings.Join(ids, ","))
	}
	trace := b.String()
	for _, bs := range []int{1, 16, 64, 100, 512, 700, 1024} {
		for _, seed := range []uint64{kv.BaseSeed, kv.Seed("", "salt")} {
			eager, err := NewTrace(strings.NewReader(trace), TraceConfig{})
			require.NoError(t, err)
			lazy, err := NewTrace(strings.NewReader(trace), TraceConfig{DeferTokens: true})
			require.NoError(t, err)
			want, got := collect(t, eager, 1000), collect(t, lazy, 1000)
			require.Len(t, got, len(want))
			for i := range want {
				w, g := &want[i], &got[i]
				require.Nil(t, g.Tokens)
				require.Equal(t, w.PromptLen(), g.PromptLen(), "line %d", i)
				wantHashes := kv.AppendBlockHashes(nil, w.Tokens, bs, seed)
				require.Equal(t, wantHashes, g.AppendBlockHashes(nil, bs, seed), "line %d, block size %d", i, bs)
				// Appending keeps what dst held.
				require.Equal(t, append([]uint64{42}, wantHashes...), g.AppendBlockHashes([]uint64{42}, bs, seed))
				require.Equal(t, w.Tokens, g.PromptTokens(), "line %d", i)
				require.Equal(t, w.Tokens, g.Tokens, "synthesized once and kept")
			}
		}
	}
}

func BenchmarkTracePromptHashes(b *testing.B) {
	ids := make([]uint64, 24)
	for i := range ids {
		ids[i] = uint64(i) * 7919
	}
	b.Run("synthesize-then-hash", func(b *testing.B) {
		for range b.N {
			kv.BlockHashes(synthesize(ids, 12000), 64, kv.BaseSeed)
		}
	})
	b.Run("deferred", func(b *testing.B) {
		var dst []uint64
		for range b.N {
			p := TracePrompt{HashIDs: ids, Len: 12000}
			dst = p.AppendBlockHashes(dst[:0], 64, kv.BaseSeed)
		}
	})
}
