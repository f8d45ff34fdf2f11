package tokenizer

import (
	"errors"
	"testing"
	"unicode/utf8"
)

// FuzzLoad feeds arbitrary documents to Load: it must refuse them with an
// error or return a tokenizer that encodes without panicking.
func FuzzLoad(f *testing.F) {
	base := tinyDoc()
	f.Add(encodeDoc(f, base))
	model(base)["ignore_merges"] = true
	base["normalizer"] = map[string]any{"type": "NFC"}
	f.Add(encodeDoc(f, base))
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{},"merges":[]}}`))
	f.Add([]byte(`{"added_tokens":[{"id":1,"content":"a"}],"model":null}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := Load(data, Limits{MaxFileBytes: 1 << 20})
		if err != nil {
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrUnsupported) && !errors.Is(err, ErrLimit) {
				t.Fatalf("an error of no known kind: %v", err)
			}
			return
		}
		for _, text := range []string{"hello world", "  12345 'LL\n\n<x>", "é😀"} {
			if _, err := tok.Encode(text, true); err != nil {
				t.Fatalf("Encode(%q): %v", text, err)
			}
		}
	})
}

// FuzzEncode encodes arbitrary text with both split patterns: valid UTF-8
// must encode without error, and decoding the ids must give the text back
// (the tiny tokenizer has no normalizer), so the pieces tile the text.
func FuzzEncode(f *testing.F) {
	llama := loadTinyFuzz(f, llama3Pattern)
	qwen := loadTinyFuzz(f, qwen2Pattern)
	for _, seed := range []string{"", "hello world", "I'M   here\n\n  ok", "12345 'x 'LL", "<x><y><|s|>abc",
		"\u00a0\u3000 \t\r\n", "e\u0301 😀 你好", "a\xffb", "'ſt", " !!\n\n"} {
		f.Add(seed, false)
		f.Add(seed, true)
	}
	f.Fuzz(func(t *testing.T, text string, addSpecial bool) {
		for _, tok := range []*Tokenizer{llama, qwen} {
			ids, err := tok.Encode(text, false)
			if !utf8.ValidString(text) {
				if !errors.Is(err, ErrInvalidUTF8) {
					t.Fatalf("invalid UTF-8 %q: %v", text, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("Encode(%q): %v", text, err)
			}
			got, err := tok.Decode(ids)
			if err != nil || string(got) != text {
				t.Fatalf("Decode(Encode(%q)) = %q, %v", text, got, err)
			}
			withSpecial, err := tok.Encode(text, addSpecial)
			if err != nil {
				t.Fatalf("Encode(%q, %v): %v", text, addSpecial, err)
			}
			if addSpecial && (len(withSpecial) != len(ids)+1 || withSpecial[0] != 268) {
				t.Fatalf("Encode(%q, true) = %v, want <|s|> then %v", text, withSpecial, ids)
			}
		}
	})
}

func loadTinyFuzz(f *testing.F, pattern string) *Tokenizer {
	doc := tinyDoc()
	preTokenizers(doc)[0].(map[string]any)["pattern"] = map[string]any{"Regex": pattern}
	tok, err := Load(encodeDoc(f, doc), Limits{CacheEntries: 64})
	if err != nil {
		f.Fatal(err)
	}
	return tok
}
