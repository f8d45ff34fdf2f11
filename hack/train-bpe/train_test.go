package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"switchyard/router/tokenizer"
)

func TestSplitWordsFollowsTheLlama3Pattern(t *testing.T) {
	cases := map[string][]string{
		"a   b":           {"a", "  ", " b"}, // `\s+(?!\S)` leaves one space to the word
		"I'm HERE'S":      {"I", "'m", " HERE", "'S"},
		"x 12345":         {"x", " ", "123", "45"},
		"end.\n\nNext":    {"end", ".\n\n", "Next"},
		"a \n b":          {"a", " \n", " b"},
		"tail   ":         {"tail", "   "},
		"(parens) -> ok!": {"(parens", ")", " ->", " ok", "!"},
	}
	for text, want := range cases {
		if got := splitWords(text); !slices.Equal(got, want) {
			t.Errorf("splitWords(%q) = %q, want %q", text, got, want)
		}
	}
}

const corpus = `The router routes each request to the worker that holds its prefix.
The worker reports the blocks it stores; the router hashes the prompt into blocks
and routes the request to the worker holding the longest run of them.
<|eot_id|>Routes, routers and routing: the words repeat so that merges are learnt.`

func train(t *testing.T, dir string, size int) []byte {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "chat_template.jinja"), []byte("{{ bos_token }}"), 0o644); err != nil {
		t.Fatal(err)
	}
	text := filepath.Join(dir, "corpus.md")
	if err := os.WriteFile(text, []byte(corpus), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := run(dir, size, []string{text}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// The same corpus gives the same file, the file loads in router/tokenizer
// with the size asked for, and its merges shorten the corpus's words.
func TestTrainIsDeterministicAndLoads(t *testing.T) {
	const size = 300
	first := train(t, t.TempDir(), size)
	if second := train(t, t.TempDir(), size); !bytes.Equal(first, second) {
		t.Fatal("two runs on the same corpus wrote different files")
	}
	tok, err := tokenizer.Load(first, tokenizer.Limits{})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	text := "the router routes the request"
	ids, err := tok.Encode(text, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) >= len(text)/2 {
		t.Errorf("%q encodes to %d ids %v: the learnt merges hardly apply", text, len(ids), ids)
	}
	for _, id := range ids {
		if id >= size {
			t.Errorf("id %d is past the vocabulary of %d", id, size)
		}
	}
	if back, err := tok.Decode(ids); err != nil || string(back) != text {
		t.Errorf("Decode gives %q, %v", back, err)
	}

	// The special tokens follow the vocabulary, and the post-processor adds the first.
	withSpecial, err := tok.Encode("<|start_header_id|>user<|end_header_id|>", true)
	if err != nil {
		t.Fatal(err)
	}
	if withSpecial[0] != size || withSpecial[1] != size+2 || withSpecial[len(withSpecial)-1] != size+3 {
		t.Errorf("special token ids %v, want %d first, then %d ... %d", withSpecial, size, size+2, size+3)
	}
}

func TestTrainWritesTheConfig(t *testing.T) {
	dir := t.TempDir()
	train(t, dir, 300)
	data, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var config tokenizerConfig
	if err := json.Unmarshal(data, &config); err != nil {
		t.Fatal(err)
	}
	if config.ChatTemplate != "{{ bos_token }}" || config.BOSToken != "<|begin_of_text|>" || config.EOSToken != "<|eot_id|>" {
		t.Errorf("config %+v", config)
	}
	if got := config.AddedTokensDecoder["304"].Content; got != "<|eot_id|>" {
		t.Errorf("token 304 is %q, want <|eot_id|>", got)
	}
}

func TestTrainRefusesTooSmallACorpus(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "chat_template.jinja"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	text := filepath.Join(dir, "corpus.md")
	if err := os.WriteFile(text, []byte(corpus), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := run(dir, 4096, []string{text})
	if err == nil || !strings.Contains(err.Error(), "no pair left that occurs twice") {
		t.Fatalf("err = %v", err)
	}
	if _, err := run(dir, 256, []string{text}); err == nil {
		t.Fatal("a vocabulary of only the bytes was accepted")
	}
}
