// Package tokenizer encodes text into token ids exactly as Hugging Face's
// tokenizers library does for the byte-level BPE tokenizer.json files of the
// Llama-3.x and Qwen2/Qwen3 families, in pure Go and in time linear in the
// input (up to a logarithmic factor in the BPE merge heap).
//
// A tokenizer.json the package cannot reproduce exactly is refused by Load
// with an error naming the field and value, never tokenized approximately:
// KV-aware routing hashes the ids, and ids that differ from the worker's by
// one token are worth less than no ids at all.
//
// Everything about a loaded Tokenizer is immutable except its word cache,
// which is safe for concurrent use, so one Tokenizer serves any number of
// concurrent Encode calls.
package tokenizer

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Errors a caller can tell apart with errors.Is.
var (
	// ErrUnsupported marks a tokenizer.json that uses a feature or value
	// this package does not reproduce exactly.
	ErrUnsupported = errors.New("tokenizer.json not supported")
	// ErrInvalid marks a tokenizer.json that is malformed or inconsistent.
	ErrInvalid = errors.New("invalid tokenizer.json")
	// ErrLimit marks a tokenizer.json over one of the Limits.
	ErrLimit = errors.New("tokenizer.json over a limit")
	// ErrTextTooLarge marks text longer than Limits.MaxTextBytes.
	ErrTextTooLarge = errors.New("text too large to tokenize")
	// ErrTooManyTokens marks text that encodes to more than Limits.MaxTokens.
	ErrTooManyTokens = errors.New("text encodes to too many tokens")
	// ErrInvalidUTF8 marks text that is not valid UTF-8 (Hugging Face's
	// library only ever sees valid Unicode text).
	ErrInvalidUTF8 = errors.New("text is not valid UTF-8")
	// ErrUnknownID marks a token id Decode cannot turn into bytes.
	ErrUnknownID = errors.New("unknown token id")
)

// Limits bound what Load accepts and what Encode produces. A zero field
// takes its default from DefaultLimits.
type Limits struct {
	// MaxFileBytes bounds the tokenizer.json document (default 64 MiB, the
	// size cap on a model card's artifacts).
	MaxFileBytes int
	// MaxVocab bounds model.vocab entries (default 1,048,576).
	MaxVocab int
	// MaxMerges bounds model.merges entries (default 1,048,576).
	MaxMerges int
	// MaxAddedTokens bounds added_tokens entries and the special tokens of
	// a post-processor template (default 16,384).
	MaxAddedTokens int
	// MaxTokenBytes bounds the length of one vocab key or added token
	// (default 1,024 bytes).
	MaxTokenBytes int
	// MaxTextBytes bounds the text of one Encode call (default 1 MiB, the
	// rendered-prompt cap).
	MaxTextBytes int
	// MaxTokens bounds the ids one Encode call produces, special tokens
	// included (default 1,048,576).
	MaxTokens int
	// CacheEntries is the fixed number of slots of the per-word cache
	// (default 16,384, rounded up to a power of two; negative disables it).
	CacheEntries int
}

// DefaultLimits returns the limits a zero Limits field falls back to.
func DefaultLimits() Limits {
	return Limits{
		MaxFileBytes:   64 << 20,
		MaxVocab:       1 << 20,
		MaxMerges:      1 << 20,
		MaxAddedTokens: 16384,
		MaxTokenBytes:  1024,
		MaxTextBytes:   1 << 20,
		MaxTokens:      1 << 20,
		CacheEntries:   16384,
	}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	pick := func(v, def int) int {
		if v == 0 {
			return def
		}
		return v
	}
	return Limits{
		MaxFileBytes:   pick(l.MaxFileBytes, d.MaxFileBytes),
		MaxVocab:       pick(l.MaxVocab, d.MaxVocab),
		MaxMerges:      pick(l.MaxMerges, d.MaxMerges),
		MaxAddedTokens: pick(l.MaxAddedTokens, d.MaxAddedTokens),
		MaxTokenBytes:  pick(l.MaxTokenBytes, d.MaxTokenBytes),
		MaxTextBytes:   pick(l.MaxTextBytes, d.MaxTextBytes),
		MaxTokens:      pick(l.MaxTokens, d.MaxTokens),
		CacheEntries:   pick(l.CacheEntries, d.CacheEntries),
	}
}

// Tokenizer is a loaded byte-level BPE tokenizer. Build one with Load.
type Tokenizer struct {
	limits Limits
	// added splits added and special tokens out of the text first.
	added addedTrie
	// nfc applies the NFC normalizer to the text between added tokens.
	nfc bool
	// split is the pre-tokenizer's split pattern.
	split splitPattern
	// bpe is the model: vocabulary keyed by raw bytes, merge ranks, cache.
	bpe *bpeModel
	// prefix and suffix are the post-processor's special tokens around a
	// single sequence, added when Encode is asked to add special tokens.
	prefix, suffix []uint32
	// idBytes decodes an id into its bytes; known marks the ids it holds.
	idBytes []string
	known   []bool
	// addedList holds the added tokens while loading.
	addedList []addedToken
}

type addedToken struct {
	content string
	id      uint32
}

// Encode returns the ids of text. With addSpecial the post-processor's
// special tokens are added (Llama-3's <|begin_of_text|>); added and special
// tokens written inside the text are always recognised.
func (t *Tokenizer) Encode(text string, addSpecial bool) ([]uint32, error) {
	return t.AppendEncode(nil, text, addSpecial)
}

// AppendEncode appends the ids of text to dst, as Encode, so a caller can
// reuse one buffer. On error it returns dst unchanged (up to its length).
func (t *Tokenizer) AppendEncode(dst []uint32, text string, addSpecial bool) ([]uint32, error) {
	if len(text) > t.limits.MaxTextBytes {
		return dst, fmt.Errorf("%w: %d bytes, limit %d", ErrTextTooLarge, len(text), t.limits.MaxTextBytes)
	}
	if !utf8.ValidString(text) {
		return dst, ErrInvalidUTF8
	}
	e := encoder{t: t, out: dst, start: len(dst), max: t.limits.MaxTokens}
	if addSpecial {
		e.appendIDs(t.prefix)
	}
	t.added.split(text, e.segment, e.addedToken)
	if addSpecial {
		e.appendIDs(t.suffix)
	}
	if e.over {
		return dst[:e.start], fmt.Errorf("%w: more than %d", ErrTooManyTokens, t.limits.MaxTokens)
	}
	return e.out, nil
}

// encoder is the state of one AppendEncode call.
type encoder struct {
	t     *Tokenizer
	out   []uint32
	start int
	max   int
	over  bool
}

func (e *encoder) appendIDs(ids []uint32) {
	if e.over {
		return
	}
	if len(e.out)-e.start+len(ids) > e.max {
		e.over = true
		return
	}
	e.out = append(e.out, ids...)
}

func (e *encoder) addedToken(id uint32) { e.appendIDs([]uint32{id}) }

// segment encodes text between added tokens: normalize, split, BPE.
func (e *encoder) segment(text string) {
	if e.over {
		return
	}
	if e.t.nfc && !norm.NFC.IsNormalString(text) {
		text = norm.NFC.String(text)
	}
	split := e.t.split
	for p := 0; p < len(text) && !e.over; {
		end := split.pieceEnd(text, p)
		e.out = e.t.bpe.appendWord(e.out, text[p:end])
		if len(e.out)-e.start > e.max {
			e.over = true
		}
		p = end
	}
}

// Decode returns the bytes the ids stand for: the inverse of Encode without
// special tokens, up to normalization.
func (t *Tokenizer) Decode(ids []uint32) ([]byte, error) {
	var out []byte
	for _, id := range ids {
		if int(id) >= len(t.known) || !t.known[id] {
			return nil, fmt.Errorf("%w: %d", ErrUnknownID, id)
		}
		out = append(out, t.idBytes[id]...)
	}
	return out, nil
}
