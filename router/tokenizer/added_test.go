package tokenizer

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// splitNaive is the reference: at each position, the longest token that
// starts there, else one byte of text.
func splitNaive(tokens map[string]uint32, text string) []string {
	var out []string
	from := 0
	for p := 0; p < len(text); {
		best := ""
		for tok := range tokens {
			if len(tok) > len(best) && strings.HasPrefix(text[p:], tok) {
				best = tok
			}
		}
		if best == "" {
			p++
			continue
		}
		if p > from {
			out = append(out, "text:"+text[from:p])
		}
		out = append(out, "token:"+best)
		p += len(best)
		from = p
	}
	if from < len(text) {
		out = append(out, "text:"+text[from:])
	}
	return out
}

// TestAddedTrieMatchesReference checks leftmost-longest splitting against
// the naive search on tokens that share prefixes (nodes with one child and
// with several), over a small alphabet so matches and near misses are common.
func TestAddedTrieMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	word := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = "<|ab>"[rng.IntN(5)]
		}
		return string(b)
	}
	for round := range 300 {
		tokens := map[string]uint32{}
		trie := newAddedTrie()
		for i := range 1 + rng.IntN(8) {
			tok := word(1 + rng.IntN(6))
			if _, dup := tokens[tok]; dup {
				continue
			}
			tokens[tok] = uint32(i)
			trie.insert(tok, uint32(i))
		}
		names := map[uint32]string{}
		for tok, id := range tokens {
			names[id] = tok
		}
		for range 20 {
			text := word(rng.IntN(40))
			var got []string
			trie.split(text, func(s string) { got = append(got, "text:"+s) }, func(id uint32) { got = append(got, "token:"+names[id]) })
			if want := splitNaive(tokens, text); !slices.Equal(got, want) {
				t.Fatalf("round %d, tokens %v, text %q:\n got %q\nwant %q", round, tokens, text, got, want)
			}
		}
	}
}

// BenchmarkAddedSplit splits a rendered chat prompt around the special
// tokens of a Llama-3-style template (all starting with "<|").
func BenchmarkAddedSplit(b *testing.B) {
	trie := newAddedTrie()
	for i, tok := range []string{"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>", "<|python_tag|>", "<|finetune_right_pad_id|>"} {
		trie.insert(tok, uint32(i))
	}
	turn := "<|start_header_id|>user<|end_header_id|>\n\nSay ok in one word, please. A <b>tag</b> or two.<|eot_id|>"
	text := "<|begin_of_text|>" + strings.Repeat(turn, 4) + "<|start_header_id|>assistant<|end_header_id|>\n\n"
	n := 0
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		trie.split(text, func(string) { n++ }, func(uint32) { n++ })
	}
	if n == 0 {
		b.Fatal("nothing split")
	}
}
