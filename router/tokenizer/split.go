package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// The split patterns this package reproduces, as tokenizer.json spells them
// (pre_tokenizer Split, behavior Isolated). They differ only in how many
// digits one piece may hold. Each is implemented by a hand-written scanner:
// Go's regexp has no look-ahead, and a back-tracking engine is quadratic on
// long whitespace runs (\s+(?!\S)), which clients control.
const (
	llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	qwen2Pattern  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// splitPattern is one of the supported patterns, by the longest digit run
// one piece may hold.
type splitPattern struct{ maxDigits int }

// splitPatterns maps the pattern text to its scanner.
var splitPatterns = map[string]splitPattern{
	llama3Pattern: {maxDigits: 3},
	qwen2Pattern:  {maxDigits: 1},
}

// runeClass is the class of a rune in the patterns' terms.
type runeClass uint8

const (
	classOther  runeClass = iota // none of the below: punctuation, symbols, marks
	classLetter                  // \p{L}
	classNumber                  // \p{N}
	classSpace                   // \s (Unicode White_Space)
)

// asciiClass classifies ASCII without the unicode tables.
var asciiClass = func() (t [utf8.RuneSelf]runeClass) {
	for c := 0; c < utf8.RuneSelf; c++ {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
			t[c] = classLetter
		case '0' <= c && c <= '9':
			t[c] = classNumber
		case c == ' ', '\t' <= c && c <= '\r':
			t[c] = classSpace
		}
	}
	return t
}()

func classOf(r rune) runeClass {
	if r < utf8.RuneSelf {
		return asciiClass[r]
	}
	switch {
	case unicode.IsLetter(r):
		return classLetter
	case unicode.IsNumber(r):
		return classNumber
	case unicode.IsSpace(r):
		return classSpace
	}
	return classOther
}

// runeAt decodes the rune at byte offset p of valid UTF-8 text.
func runeAt(s string, p int) (rune, int) {
	if c := s[p]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[p:])
}

// pieceEnd returns where the piece that starts at p ends: the end of the
// regex match the alternatives, tried in order, would make at p. Every rune
// is matched by some alternative, so pieces tile the text and the scanner
// never skips. Each call reads the piece and at most one rune past it,
// except a whitespace run, which it reads once; the whole scan is linear.
func (sp splitPattern) pieceEnd(s string, p int) int {
	r, n := runeAt(s, p)
	class := classOf(r)
	// (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if r == '\'' {
		if end := contractionEnd(s, p+n); end > 0 {
			return end
		}
	}
	switch class {
	case classLetter: // [^\r\n\p{L}\p{N}]?\p{L}+ with the optional rune absent
		return runEnd(s, p+n, classLetter)
	case classNumber: // \p{N}{1,3} or \p{N}
		return numberEnd(s, p+n, sp.maxDigits-1)
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+ with the optional rune present.
	if r != '\r' && r != '\n' && p+n < len(s) {
		if next, _ := runeAt(s, p+n); classOf(next) == classLetter {
			return runEnd(s, p+n, classLetter)
		}
	}
	//  ?[^\s\p{L}\p{N}]+[\r\n]*
	if class == classOther {
		return newlinesEnd(s, runEnd(s, p, classOther))
	}
	if r == ' ' && p+n < len(s) {
		if next, _ := runeAt(s, p+n); classOf(next) == classOther {
			return newlinesEnd(s, runEnd(s, p+n, classOther))
		}
	}
	return whitespaceEnd(s, p)
}

// whitespaceEnd ends a piece that starts with whitespace at p, by the last
// three alternatives:
//
//	\s*[\r\n]+  up to and including the run's last CR or LF;
//	\s+(?!\S)   else the whole run at the end of the text, or all of the run
//	            but its last rune when at least two runes are left;
//	\s+         else the single whitespace rune.
func whitespaceEnd(s string, p int) int {
	end, lastNewlineEnd, lastRuneStart := p, -1, p
	for end < len(s) {
		r, n := runeAt(s, end)
		if classOf(r) != classSpace {
			break
		}
		if r == '\r' || r == '\n' {
			lastNewlineEnd = end + n
		}
		lastRuneStart = end
		end += n
	}
	switch {
	case lastNewlineEnd > 0:
		return lastNewlineEnd
	case end == len(s):
		return end
	case lastRuneStart > p:
		return lastRuneStart
	}
	return end
}

// contractionEnd matches s|t|re|ve|m|ll|d case-insensitively at p (just
// after an apostrophe) and returns the end of the match, or 0.
func contractionEnd(s string, p int) int {
	first, n := foldedAt(s, p)
	switch first {
	case 's', 't', 'm', 'd':
		return p + n
	case 'r', 'v':
		if second, m := foldedAt(s, p+n); second == 'e' {
			return p + n + m
		}
	case 'l':
		if second, m := foldedAt(s, p+n); second == 'l' {
			return p + n + m
		}
	}
	return 0
}

// foldedAt returns the rune at p case-folded for the contraction letters:
// ASCII upper case to lower case, and U+017F LATIN SMALL LETTER LONG S to
// 's', the one non-ASCII rune whose case folding reaches those letters.
// Past the end of s it returns 0.
func foldedAt(s string, p int) (rune, int) {
	if p >= len(s) {
		return 0, 0
	}
	r, n := runeAt(s, p)
	switch {
	case 'A' <= r && r <= 'Z':
		r += 'a' - 'A'
	case r == 'ſ':
		r = 's'
	}
	return r, n
}

// runEnd returns the end of the run of runes of one class starting at p.
func runEnd(s string, p int, class runeClass) int {
	for p < len(s) {
		r, n := runeAt(s, p)
		if classOf(r) != class {
			break
		}
		p += n
	}
	return p
}

// numberEnd extends a number piece by up to more further number runes.
func numberEnd(s string, p int, more int) int {
	for ; more > 0 && p < len(s); more-- {
		r, n := runeAt(s, p)
		if classOf(r) != classNumber {
			break
		}
		p += n
	}
	return p
}

// newlinesEnd extends a piece over the CR and LF bytes that follow it.
func newlinesEnd(s string, p int) int {
	for p < len(s) && (s[p] == '\r' || s[p] == '\n') {
		p++
	}
	return p
}
