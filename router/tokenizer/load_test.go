package tokenizer

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
)

// tinyDoc is a small byte-level BPE tokenizer.json built in the test: ids
// 0-255 are the bytes, then the merged tokens below, then one special token
// <|s|> (id 268) that the post-processor puts first.
func tinyDoc() map[string]any {
	vocab := map[string]any{}
	for b := 0; b < 256; b++ {
		vocab[string(byteRunes[b])] = b
	}
	merged := []string{"he", "ll", "hell", "hello", "Ġw", "or", "Ġwor", "ld", "Ġworld", "ab", "bc", "abc"}
	for i, tok := range merged {
		vocab[tok] = 256 + i
	}
	return map[string]any{
		"version":    "1.0",
		"truncation": nil,
		"padding":    nil,
		"normalizer": nil,
		"decoder":    map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		"added_tokens": []any{
			addedTok(268, "<|s|>", true), addedTok(269, "<x>", false), addedTok(270, "<x><y>", false),
		},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": qwen2Pattern}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		}},
		"post_processor": map[string]any{"type": "Sequence", "processors": []any{
			map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
			map[string]any{"type": "TemplateProcessing",
				"single":         []any{special("<|s|>", 0), seq("A", 0)},
				"pair":           []any{special("<|s|>", 0), seq("A", 0), seq("B", 1)},
				"special_tokens": map[string]any{"<|s|>": map[string]any{"id": "<|s|>", "ids": []any{268}, "tokens": []any{"<|s|>"}}},
			},
		}},
		"model": map[string]any{
			"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": nil,
			"end_of_word_suffix": nil, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
			"vocab":  vocab,
			"merges": []any{"h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or", "l d", "Ġwor ld", "a b", "b c"},
		},
	}
}

func addedTok(id int, content string, isSpecial bool) map[string]any {
	return map[string]any{"id": id, "content": content, "single_word": false, "lstrip": false,
		"rstrip": false, "normalized": false, "special": isSpecial}
}

func special(id string, typeID int) map[string]any {
	return map[string]any{"SpecialToken": map[string]any{"id": id, "type_id": typeID}}
}

func seq(id string, typeID int) map[string]any {
	return map[string]any{"Sequence": map[string]any{"id": id, "type_id": typeID}}
}

func model(doc map[string]any) map[string]any { return doc["model"].(map[string]any) }

func preTokenizers(doc map[string]any) []any {
	return doc["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)
}

func encodeDoc(t testing.TB, doc map[string]any) []byte {
	t.Helper()
	data, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func loadTiny(t *testing.T, edit func(map[string]any), limits Limits) *Tokenizer {
	t.Helper()
	doc := tinyDoc()
	if edit != nil {
		edit(doc)
	}
	tok, err := Load(encodeDoc(t, doc), limits)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return tok
}

func mustEncode(t *testing.T, tok *Tokenizer, text string, addSpecial bool) []uint32 {
	t.Helper()
	ids, err := tok.Encode(text, addSpecial)
	if err != nil {
		t.Fatalf("Encode(%q): %v", text, err)
	}
	return ids
}

func TestBothMergeFormsGiveTheSameIDs(t *testing.T) {
	asStrings := loadTiny(t, nil, Limits{})
	asPairs := loadTiny(t, func(doc map[string]any) {
		var pairs []any
		for _, m := range model(doc)["merges"].([]any) {
			left, right, _ := strings.Cut(m.(string), " ")
			pairs = append(pairs, []any{left, right})
		}
		model(doc)["merges"] = pairs
	}, Limits{})
	// hello=259, Ġworld=264, then "!" as its byte.
	want := []uint32{259, 264, '!'}
	for name, tok := range map[string]*Tokenizer{"strings": asStrings, "pairs": asPairs} {
		if got := mustEncode(t, tok, "hello world!", false); !slices.Equal(got, want) {
			t.Errorf("%s: got %v, want %v", name, got, want)
		}
	}
}

func TestMergesApplyByRank(t *testing.T) {
	// "a b" (ab=265) ranks before "b c" (bc=266): abc → ab c.
	if got := mustEncode(t, loadTiny(t, nil, Limits{}), "abc", false); !slices.Equal(got, []uint32{265, 'c'}) {
		t.Errorf("a b first: got %v", got)
	}
	swapped := loadTiny(t, func(doc map[string]any) {
		merges := model(doc)["merges"].([]any)
		merges[9], merges[10] = merges[10], merges[9]
	}, Limits{})
	if got := mustEncode(t, swapped, "abc", false); !slices.Equal(got, []uint32{'a', 266}) {
		t.Errorf("b c first: got %v", got)
	}
}

func TestIgnoreMergesTakesWholeWordsFromTheVocabulary(t *testing.T) {
	// "abc" (267) is in the vocabulary but no merge produces it.
	without := loadTiny(t, nil, Limits{})
	with := loadTiny(t, func(doc map[string]any) { model(doc)["ignore_merges"] = true }, Limits{})
	if got := mustEncode(t, without, "abc", false); !slices.Equal(got, []uint32{265, 'c'}) {
		t.Errorf("ignore_merges false: got %v", got)
	}
	if got := mustEncode(t, with, "abc", false); !slices.Equal(got, []uint32{267}) {
		t.Errorf("ignore_merges true: got %v", got)
	}
}

func TestAddedTokensSplitLeftmostLongestAndSpecialTokensWrap(t *testing.T) {
	tok := loadTiny(t, nil, Limits{})
	got := mustEncode(t, tok, "he<x><y><x>ll<|s|>", false)
	if want := []uint32{256, 270, 269, 257, 268}; !slices.Equal(got, want) {
		t.Errorf("plain: got %v, want %v", got, want)
	}
	if got := mustEncode(t, tok, "he", true); !slices.Equal(got, []uint32{268, 256}) {
		t.Errorf("with special tokens: got %v", got)
	}
	// Without a template, adding special tokens adds nothing.
	plain := loadTiny(t, func(doc map[string]any) { doc["post_processor"] = nil }, Limits{})
	if got := mustEncode(t, plain, "he", true); !slices.Equal(got, []uint32{256}) {
		t.Errorf("no post-processor: got %v", got)
	}
}

func TestNFCNormalizerComposesBetweenAddedTokens(t *testing.T) {
	tok := loadTiny(t, func(doc map[string]any) { doc["normalizer"] = map[string]any{"type": "NFC"} }, Limits{})
	decomposed := mustEncode(t, tok, "e\u0301<x>", false)
	composed := mustEncode(t, tok, "\u00e9<x>", false)
	if !slices.Equal(decomposed, composed) || len(composed) != 3 {
		t.Errorf("NFC: decomposed %v, composed %v", decomposed, composed)
	}
	raw := loadTiny(t, nil, Limits{})
	if got := mustEncode(t, raw, "e\u0301", false); len(got) != 3 {
		t.Errorf("no normalizer keeps the three bytes: got %v", got)
	}
}

func TestEncodeLimitsAndInvalidText(t *testing.T) {
	tok := loadTiny(t, nil, Limits{MaxTextBytes: 8, MaxTokens: 3})
	if _, err := tok.Encode("123456789", false); !errors.Is(err, ErrTextTooLarge) {
		t.Errorf("9 bytes over an 8-byte limit: %v", err)
	}
	if _, err := tok.Encode("a\xffb", false); !errors.Is(err, ErrInvalidUTF8) {
		t.Errorf("invalid UTF-8: %v", err)
	}
	buf := []uint32{7, 7}
	got, err := tok.AppendEncode(buf, "1 2 3 4", false)
	if !errors.Is(err, ErrTooManyTokens) || !slices.Equal(got, []uint32{7, 7}) {
		t.Errorf("over MaxTokens: got %v, %v", got, err)
	}
	// The cap counts the special tokens too: <|s|> x y is three, fine; four is not.
	if _, err := tok.Encode("xy", true); err != nil {
		t.Errorf("three tokens: %v", err)
	}
	if _, err := tok.Encode("xyz", true); !errors.Is(err, ErrTooManyTokens) {
		t.Errorf("four tokens with the special one: %v", err)
	}
	got, err = tok.AppendEncode(buf, "he", false)
	if err != nil || !slices.Equal(got, []uint32{7, 7, 256}) {
		t.Errorf("append: got %v, %v", got, err)
	}
}

func TestDecodeInvertsEncode(t *testing.T) {
	tok := loadTiny(t, nil, Limits{})
	for _, text := range []string{"hello world", "  tabs\t\nand 123 ünïcödé 😀 <x><|s|>", ""} {
		ids := mustEncode(t, tok, text, false)
		got, err := tok.Decode(ids)
		if err != nil || string(got) != text {
			t.Errorf("Decode(Encode(%q)) = %q, %v", text, got, err)
		}
	}
	if _, err := tok.Decode([]uint32{271}); !errors.Is(err, ErrUnknownID) {
		t.Errorf("unknown id: %v", err)
	}
}

func TestConcurrentEncodesAgreeWithSerialOnes(t *testing.T) {
	tok := loadTiny(t, nil, Limits{CacheEntries: 4})
	texts := []string{"hello world", "abc abc", "hell hello", "world<x>", "ll ll ll", "or or"}
	want := make([][]uint32, len(texts))
	for i, text := range texts {
		want[i] = mustEncode(t, tok, text, false)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				k := (g + i) % len(texts)
				if got, err := tok.Encode(texts[k], false); err != nil || !slices.Equal(got, want[k]) {
					errs <- texts[k]
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for text := range errs {
		t.Errorf("a concurrent Encode(%q) differed", text)
	}
}

func TestWordCacheHasAFixedSlotCount(t *testing.T) {
	for _, c := range []struct{ entries, slots int }{{1, 1}, {3, 4}, {16384, 16384}, {16385, 32768}} {
		if got := len(newWordCache(c.entries).slots); got != c.slots {
			t.Errorf("newWordCache(%d) has %d slots, want %d", c.entries, got, c.slots)
		}
	}
	if newWordCache(-1) != nil {
		t.Error("a negative count should disable the cache")
	}
	uncached := loadTiny(t, nil, Limits{CacheEntries: -1})
	if got := mustEncode(t, uncached, "hello hello", false); !slices.Equal(got, []uint32{259, ' ', 259}) {
		t.Errorf("without a cache: got %v", got)
	}
}

func TestSplitPiecesFollowThePattern(t *testing.T) {
	cases := []struct {
		text   string
		llama3 []string
		qwen2  []string
	}{
		{"Hello world", []string{"Hello", " world"}, nil},
		{"I'M here", []string{"I", "'M", " here"}, nil},
		{"'x 'LL", []string{"'x", " '", "LL"}, nil},
		{"12345", []string{"123", "45"}, []string{"1", "2", "3", "4", "5"}},
		{"a   b", []string{"a", "  ", " b"}, nil},
		{"a   ", []string{"a", "   "}, nil},
		{"a \n\n  b", []string{"a", " \n\n", " ", " b"}, nil},
		{"x\t!", []string{"x", "\t", "!"}, nil},
		{"x !!\n\ny", []string{"x", " !!\n\n", "y"}, nil},
		{"$foo (bar)", []string{"$foo", " (", "bar", ")"}, nil},
		{"\u00a0x\u3000y", []string{"\u00a0x", "\u3000y"}, nil},
	}
	for _, c := range cases {
		if c.qwen2 == nil {
			c.qwen2 = c.llama3
		}
		for _, p := range []struct {
			name string
			sp   splitPattern
			want []string
		}{{"llama3", splitPatterns[llama3Pattern], c.llama3}, {"qwen2", splitPatterns[qwen2Pattern], c.qwen2}} {
			var got []string
			for i := 0; i < len(c.text); {
				end := p.sp.pieceEnd(c.text, i)
				got = append(got, c.text[i:end])
				i = end
			}
			if !slices.Equal(got, p.want) {
				t.Errorf("%s %q: got %q, want %q", p.name, c.text, got, p.want)
			}
		}
	}
}
