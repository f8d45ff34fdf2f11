package tokenizer

import (
	"errors"
	"strings"
	"testing"
)

// TestLoadRefusesWhatItCannotReproduce edits the tiny document one field at
// a time; each edit must be refused with the right kind of error and a
// message naming the field.
func TestLoadRefusesWhatItCannotReproduce(t *testing.T) {
	cases := []struct {
		name  string
		edit  func(doc map[string]any)
		kind  error
		field string
	}{
		{"model type", func(d map[string]any) { model(d)["type"] = "WordPiece" }, ErrUnsupported, "model.type"},
		{"dropout", func(d map[string]any) { model(d)["dropout"] = 0.1 }, ErrUnsupported, "model.dropout"},
		{"byte fallback", func(d map[string]any) { model(d)["byte_fallback"] = true }, ErrUnsupported, "model.byte_fallback"},
		{"subword prefix", func(d map[string]any) { model(d)["continuing_subword_prefix"] = "##" }, ErrUnsupported, "model.continuing_subword_prefix"},
		{"word suffix", func(d map[string]any) { model(d)["end_of_word_suffix"] = "</w>" }, ErrUnsupported, "model.end_of_word_suffix"},
		{"unknown model field", func(d map[string]any) { model(d)["new_option"] = true }, ErrInvalid, "new_option"},
		{"unknown top-level field", func(d map[string]any) { d["extra"] = 1 }, ErrInvalid, "extra"},
		{"truncation", func(d map[string]any) { d["truncation"] = map[string]any{"max_length": 8} }, ErrUnsupported, "truncation"},
		{"padding", func(d map[string]any) { d["padding"] = map[string]any{"strategy": "BatchLongest"} }, ErrUnsupported, "padding"},
		{"normalizer NFKC", func(d map[string]any) { d["normalizer"] = map[string]any{"type": "NFKC"} }, ErrUnsupported, "normalizer.type"},
		{"normalizer in a sequence", func(d map[string]any) {
			d["normalizer"] = map[string]any{"type": "Sequence", "normalizers": []any{map[string]any{"type": "Lowercase"}}}
		}, ErrUnsupported, "normalizer.normalizers[0].type"},
		{"no pre-tokenizer", func(d map[string]any) { d["pre_tokenizer"] = nil }, ErrUnsupported, "pre_tokenizer"},
		{"bare ByteLevel pre-tokenizer", func(d map[string]any) {
			d["pre_tokenizer"] = map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}
		}, ErrUnsupported, "pre_tokenizer.type"},
		{"unknown split pattern", func(d map[string]any) {
			preTokenizers(d)[0].(map[string]any)["pattern"] = map[string]any{"Regex": `\s+|\w+`}
		}, ErrUnsupported, "pre_tokenizer.pretokenizers[0].pattern.Regex"},
		{"string split pattern", func(d map[string]any) {
			preTokenizers(d)[0].(map[string]any)["pattern"] = map[string]any{"String": " "}
		}, ErrUnsupported, "pre_tokenizer.pretokenizers[0].pattern"},
		{"split behaviour", func(d map[string]any) { preTokenizers(d)[0].(map[string]any)["behavior"] = "Removed" }, ErrUnsupported, "behavior"},
		{"inverted split", func(d map[string]any) { preTokenizers(d)[0].(map[string]any)["invert"] = true }, ErrUnsupported, "invert"},
		{"prefix space", func(d map[string]any) { preTokenizers(d)[1].(map[string]any)["add_prefix_space"] = true }, ErrUnsupported, "add_prefix_space"},
		{"ByteLevel regex", func(d map[string]any) { preTokenizers(d)[1].(map[string]any)["use_regex"] = true }, ErrUnsupported, "use_regex"},
		{"third pre-tokenizer", func(d map[string]any) {
			pre := d["pre_tokenizer"].(map[string]any)
			pre["pretokenizers"] = append(preTokenizers(d), map[string]any{"type": "Digits", "individual_digits": true})
		}, ErrUnsupported, "pre_tokenizer.pretokenizers"},
		{"Roberta post-processor", func(d map[string]any) {
			d["post_processor"] = map[string]any{"type": "RobertaProcessing"}
		}, ErrUnsupported, "post_processor.type"},
		{"sequence B in single", func(d map[string]any) {
			tp := d["post_processor"].(map[string]any)["processors"].([]any)[1].(map[string]any)
			tp["single"] = []any{seq("B", 0)}
		}, ErrUnsupported, "single[0].Sequence.id"},
		{"unknown template token", func(d map[string]any) {
			tp := d["post_processor"].(map[string]any)["processors"].([]any)[1].(map[string]any)
			tp["single"] = []any{special("<|nope|>", 0), seq("A", 0)}
		}, ErrInvalid, "single[0].SpecialToken.id"},
		{"two templates", func(d map[string]any) {
			pp := d["post_processor"].(map[string]any)
			procs := pp["processors"].([]any)
			pp["processors"] = append(procs, procs[1])
		}, ErrUnsupported, "processors[2]"},
		{"lstrip", func(d map[string]any) { addedTokens(d)[0].(map[string]any)["lstrip"] = true }, ErrUnsupported, "added_tokens[0].lstrip"},
		{"rstrip", func(d map[string]any) { addedTokens(d)[1].(map[string]any)["rstrip"] = true }, ErrUnsupported, "added_tokens[1].rstrip"},
		{"single word", func(d map[string]any) { addedTokens(d)[0].(map[string]any)["single_word"] = true }, ErrUnsupported, "single_word"},
		{"normalized", func(d map[string]any) { addedTokens(d)[2].(map[string]any)["normalized"] = true }, ErrUnsupported, "added_tokens[2].normalized"},
		{"empty added token", func(d map[string]any) { addedTokens(d)[0].(map[string]any)["content"] = "" }, ErrInvalid, "added_tokens[0].content"},
		{"vocabulary without a byte", func(d map[string]any) {
			delete(model(d)["vocab"].(map[string]any), string(byteRunes['q']))
		}, ErrUnsupported, "0x71"},
		{"merge result not in vocabulary", func(d map[string]any) {
			model(d)["merges"] = append(model(d)["merges"].([]any), "x y")
		}, ErrInvalid, `model.merges[11]: "xy"`},
		{"merge part not in vocabulary", func(d map[string]any) {
			model(d)["merges"] = append(model(d)["merges"].([]any), "zz z")
		}, ErrInvalid, `model.merges[11]: "zz"`},
		{"merge with two spaces", func(d map[string]any) {
			model(d)["merges"] = append(model(d)["merges"].([]any), "a b c")
		}, ErrInvalid, "model.merges[11]"},
		{"merge pair of three", func(d map[string]any) {
			model(d)["merges"] = append(model(d)["merges"].([]any), []any{"a", "b", "c"})
		}, ErrInvalid, "model.merges[11]"},
		{"duplicate merge", func(d map[string]any) {
			model(d)["merges"] = append(model(d)["merges"].([]any), []any{"h", "e"})
		}, ErrInvalid, "listed twice"},
		{"id over the limit", func(d map[string]any) { model(d)["vocab"].(map[string]any)["zz"] = 1 << 30 }, ErrInvalid, "model.vocab"},
		{"negative id", func(d map[string]any) { model(d)["vocab"].(map[string]any)["zz"] = -1 }, ErrInvalid, "model.vocab"},
		{"vocabulary not an object", func(d map[string]any) { model(d)["vocab"] = []any{} }, ErrInvalid, "model.vocab"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			doc := tinyDoc()
			c.edit(doc)
			_, err := Load(encodeDoc(t, doc), Limits{})
			if !errors.Is(err, c.kind) {
				t.Fatalf("got %v, want an error of kind %v", err, c.kind)
			}
			if !strings.Contains(err.Error(), c.field) {
				t.Errorf("%q does not name %q", err, c.field)
			}
		})
	}
}

func addedTokens(doc map[string]any) []any { return doc["added_tokens"].([]any) }

func TestLoadRefusesDocumentsOverItsLimits(t *testing.T) {
	data := encodeDoc(t, tinyDoc())
	cases := []struct {
		name   string
		limits Limits
		field  string
	}{
		{"file bytes", Limits{MaxFileBytes: len(data) - 1}, "bytes"},
		{"vocabulary", Limits{MaxVocab: 267}, "model.vocab"},
		{"merges", Limits{MaxMerges: 10}, "model.merges"},
		{"added tokens", Limits{MaxAddedTokens: 2}, "added_tokens"},
		{"vocabulary key bytes", Limits{MaxTokenBytes: 6}, "model.vocab"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(data, c.limits)
			if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), c.field) {
				t.Fatalf("got %v, want ErrLimit naming %q", err, c.field)
			}
		})
	}
	if _, err := Load(data, Limits{MaxFileBytes: len(data), MaxVocab: 268, MaxMerges: 11, MaxAddedTokens: 3, MaxTokenBytes: 7}); err != nil {
		t.Fatalf("at exactly the limits: %v", err)
	}
	doc := tinyDoc()
	addedTokens(doc)[2].(map[string]any)["content"] = "<x><y><z>"
	if _, err := Load(encodeDoc(t, doc), Limits{MaxTokenBytes: 7}); !errors.Is(err, ErrLimit) ||
		!strings.Contains(err.Error(), "added_tokens[2].content") {
		t.Fatalf("a 9-byte added token over a 7-byte limit: %v", err)
	}
}
