package main

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"unicode/utf8"
)

// llama3Pattern is the Llama-3 split pattern, the one the written
// tokenizer.json names; router/tokenizer knows it byte for byte.
const llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// trainingSplit approximates llama3Pattern with Go's regexp, which has no
// look-ahead: splitWords gives back the last rune of a whitespace run
// itself, as `\s+(?!\S)` does. Go's \s is ASCII only, so a run of other
// Unicode spaces splits a little differently; that only changes which
// merges are learnt, never how the written file encodes.
var trainingSplit = regexp.MustCompile(`^(?:(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+)`)

// splitWords cuts text into the words BPE merges within.
func splitWords(text string) []string {
	var words []string
	for len(text) > 0 {
		n := wordLength(text)
		words = append(words, text[:n])
		text = text[n:]
	}
	return words
}

func wordLength(text string) int {
	loc := trainingSplit.FindStringIndex(text)
	if loc == nil || loc[1] == 0 {
		_, n := utf8.DecodeRuneInString(text)
		return n
	}
	n := loc[1]
	word := text[:n]
	// `\s+(?!\S)`: a run of spaces followed by a non-space leaves its last
	// rune to the word after it.
	if n < len(text) && strings.TrimLeft(word, " \t\f\v") == "" && utf8.RuneCountInString(word) > 1 {
		_, last := utf8.DecodeLastRuneInString(word)
		n -= last
	}
	return n
}

// splitSpecial cuts the special tokens out of text, as the encoder does,
// so that no merge is learnt across one.
func splitSpecial(text string, specials []string) []string {
	pieces := []string{text}
	for _, s := range specials {
		var next []string
		for _, p := range pieces {
			next = append(next, strings.Split(p, s)...)
		}
		pieces = next
	}
	return pieces
}

// pair is two adjacent token ids.
type pair struct{ left, right int }

// word is a distinct pre-tokenized word as token ids, and how often the
// corpus holds it.
type word struct {
	ids   []int
	count int
}

// trainer learns byte-level BPE merges. Every choice is deterministic:
// the most frequent pair wins, ties go to the lowest left id, then the
// lowest right id, so the same corpus always gives the same file.
type trainer struct {
	tokens  []string       // id -> bytes; ids 0-255 are the bytes themselves
	ids     map[string]int // bytes -> id
	merges  []pair
	words   []word
	counts  map[pair]int
	holders map[pair]map[int]struct{} // pair -> the words that hold it
}

func newTrainer(texts []string, specials []string) *trainer {
	t := &trainer{ids: map[string]int{}, counts: map[pair]int{}, holders: map[pair]map[int]struct{}{}}
	for b := 0; b < 256; b++ {
		t.addToken(string([]byte{byte(b)}))
	}
	freq := map[string]int{}
	for _, text := range texts {
		for _, piece := range splitSpecial(text, specials) {
			for _, w := range splitWords(piece) {
				freq[w]++
			}
		}
	}
	distinct := make([]string, 0, len(freq))
	for w := range freq {
		distinct = append(distinct, w)
	}
	sort.Strings(distinct)
	for i, w := range distinct {
		ids := make([]int, len(w))
		for j := 0; j < len(w); j++ {
			ids[j] = int(w[j])
		}
		t.words = append(t.words, word{ids: ids, count: freq[w]})
		t.countPairs(i, +1)
	}
	return t
}

func (t *trainer) addToken(s string) int {
	if id, ok := t.ids[s]; ok {
		return id
	}
	t.ids[s] = len(t.tokens)
	t.tokens = append(t.tokens, s)
	return len(t.tokens) - 1
}

// countPairs adds (sign +1) or removes (-1) word i's pairs from the counts.
func (t *trainer) countPairs(i, sign int) {
	w := t.words[i]
	for j := 0; j+1 < len(w.ids); j++ {
		p := pair{w.ids[j], w.ids[j+1]}
		t.counts[p] += sign * w.count
		if t.counts[p] == 0 {
			delete(t.counts, p)
		}
		if sign > 0 {
			if t.holders[p] == nil {
				t.holders[p] = map[int]struct{}{}
			}
			t.holders[p][i] = struct{}{}
		}
	}
}

// train merges until the vocabulary holds size tokens or no pair occurs
// twice; it returns an error in the second case, since the file's name
// promises its size.
func (t *trainer) train(size int) error {
	for len(t.tokens) < size {
		best, ok := t.bestPair()
		if !ok {
			return fmt.Errorf("the corpus has no pair left that occurs twice at %d tokens, short of %d: give it more text", len(t.tokens), size)
		}
		t.merge(best)
	}
	return nil
}

func (t *trainer) bestPair() (pair, bool) {
	var best pair
	bestCount := 1
	for p, c := range t.counts {
		if c > bestCount || c == bestCount && bestCount > 1 && less(p, best) {
			best, bestCount = p, c
		}
	}
	return best, bestCount > 1
}

func less(a, b pair) bool {
	if a.left != b.left {
		return a.left < b.left
	}
	return a.right < b.right
}

// merge replaces every occurrence of p by its new token, recounting only
// the words that held it.
func (t *trainer) merge(p pair) {
	merged := t.addToken(t.tokens[p.left] + t.tokens[p.right])
	t.merges = append(t.merges, p)
	holders := make([]int, 0, len(t.holders[p]))
	for i := range t.holders[p] {
		holders = append(holders, i)
	}
	sort.Ints(holders)
	delete(t.holders, p)
	for _, i := range holders {
		t.countPairs(i, -1)
		t.words[i].ids = replacePair(t.words[i].ids, p, merged)
		t.countPairs(i, +1)
	}
}

func replacePair(ids []int, p pair, merged int) []int {
	out := ids[:0]
	for j := 0; j < len(ids); j++ {
		if j+1 < len(ids) && ids[j] == p.left && ids[j+1] == p.right {
			out = append(out, merged)
			j++
			continue
		}
		out = append(out, ids[j])
	}
	return out
}
