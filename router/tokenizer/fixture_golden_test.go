package tokenizer_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"switchyard/router/tokenizer"
)

// fixtureFile is the project's own test tokenizer (fixtures/tokenizer).
const fixtureFile = "../../fixtures/tokenizer/switchyard-bpe-4k/tokenizer.json"

// TestFixtureIDsMatchHuggingFace checks the project's test tokenizer
// against Hugging Face's library as the golden test checks the Llama-3.1
// and Qwen3 files: the golden corpus, chats rendered by its template, and
// the prose it was trained on, where its merges apply most.
func TestFixtureIDsMatchHuggingFace(t *testing.T) {
	dir := requireOracle(t)
	data, err := os.ReadFile(fixtureFile)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(data, tokenizer.Limits{})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	corpus := append(goldenCorpus(), renderedChats()...)
	corpus = append(corpus, proseParagraphs(t)...)
	want := runOracle(t, dir, fixtureFile, corpus)
	for pass := 0; pass < 2; pass++ {
		compareCorpus(t, tok, corpus, want)
	}
}

// renderedChats are what the fixture's chat template renders.
func renderedChats() []string {
	turn := func(role, content string) string {
		return "<|start_header_id|>" + role + "<|end_header_id|>\n\n" + content + "<|eot_id|>"
	}
	system := turn("system", "You are a helpful assistant. Answer in one sentence.")
	user := turn("user", "Which worker holds the longest prefix of this prompt?")
	assistant := turn("assistant", "The one whose kv-events reported its blocks, 1,024 tokens' worth.")
	open := "<|start_header_id|>assistant<|end_header_id|>\n\n"
	return []string{
		"<|begin_of_text|>" + user + open,
		"<|begin_of_text|>" + system + user + open,
		"<|begin_of_text|>" + system + user + assistant + user + open,
		"<|begin_of_text|>" + turn("user", "  spaced\r\n\ttext  ") + "<|end_of_text|>",
	}
}

// proseParagraphs are the paragraphs of the documentation the fixture was
// trained on; a paragraph the docs gained since only adds cases.
func proseParagraphs(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range append(files, "../../README.md") {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, strings.Split(string(b), "\n\n")...)
	}
	if len(out) < 500 {
		t.Fatalf("only %d paragraphs of prose", len(out))
	}
	return out
}
