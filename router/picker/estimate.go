package picker

import "unicode"

// Estimator estimates a prompt's token count. The heuristic below stands
// in until the KV-aware work brings real tokenizers.
type Estimator interface {
	Estimate(text string) uint64
}

// Heuristic estimates without a tokenizer: the larger of characters/4 and
// words*4/3, which over-estimates rather than under-estimates for code,
// CJK and unusual scripts, where a token covers fewer characters.
type Heuristic struct{}

// Estimate implements Estimator.
func (Heuristic) Estimate(text string) uint64 {
	var chars, words uint64
	inWord := false
	for _, r := range text {
		chars++
		if unicode.IsSpace(r) {
			inWord = false
			continue
		}
		if !inWord {
			words++
			inWord = true
		}
		if r > 0x2E7F { // CJK and beyond: about a token per character
			chars += 3
		}
	}
	return max((chars+3)/4, (words*4+2)/3)
}
