// Command train-bpe learns a byte-level BPE tokenizer from the project's own
// prose and writes it as a Hugging Face tokenizer.json, with the
// tokenizer_config.json that carries its chat template: the test tokenizer
// under fixtures/tokenizer/. Run from the repository root:
//
//	go run ./hack/train-bpe
//
// The same corpus always gives the same files (ties between equally
// frequent pairs go to the lowest ids), so retraining changes the files only
// when the documentation has changed.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

func main() {
	var (
		out   = flag.String("out", "fixtures/tokenizer/switchyard-bpe-4k", "folder to write tokenizer.json and tokenizer_config.json into; it must hold chat_template.jinja")
		vocab = flag.Int("vocab", 4096, "tokens to learn, the 256 bytes included (special tokens come after them)")
	)
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: go run ./hack/train-bpe [-out DIR] [-vocab N] [FILE ...]\n\nFILEs default to README.md and docs/*.md.")
		flag.PrintDefaults()
	}
	flag.Parse()
	summary, err := run(*out, *vocab, flag.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "train-bpe:", err)
		os.Exit(1)
	}
	fmt.Fprintln(os.Stderr, "train-bpe:", summary)
}

// run trains on files and writes the two files into out; it returns a
// line saying what it wrote.
func run(out string, vocab int, files []string) (string, error) {
	if vocab <= 256 {
		return "", fmt.Errorf("-vocab must be more than the 256 bytes, got %d", vocab)
	}
	if len(files) == 0 {
		docs, err := filepath.Glob("docs/*.md")
		if err != nil {
			return "", err
		}
		files = append([]string{"README.md"}, docs...)
	}
	texts, err := readCorpus(files)
	if err != nil {
		return "", err
	}
	template, err := os.ReadFile(filepath.Join(out, "chat_template.jinja"))
	if err != nil {
		return "", fmt.Errorf("the chat template: %w", err)
	}
	t := newTrainer(texts, specialTokens)
	if err := t.train(vocab); err != nil {
		return "", err
	}
	tok, err := tokenizerJSON(t)
	if err != nil {
		return "", err
	}
	config, err := tokenizerConfigJSON(len(t.tokens), string(template))
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(out, "tokenizer.json"), tok, 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(out, "tokenizer_config.json"), config, 0o644); err != nil {
		return "", err
	}
	return fmt.Sprintf("%d files, %d tokens, %d merges, %d special tokens -> %s",
		len(files), len(t.tokens), len(t.merges), len(specialTokens), out), nil
}

// readCorpus reads the files in name order, so the order they were given
// in does not matter.
func readCorpus(files []string) ([]string, error) {
	files = append([]string(nil), files...)
	sort.Strings(files)
	texts := make([]string, 0, len(files))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("the corpus: %w (run from the repository root, or name the files)", err)
		}
		texts = append(texts, string(b))
	}
	return texts, nil
}
