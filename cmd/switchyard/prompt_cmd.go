package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/spf13/cobra"

	"switchyard/router/kv"
	"switchyard/router/tokenizer"
)

func init() { register(newPromptCmd) }

// Bounds of `prompt hash` input: the token cap of the router's prompt
// rendering, and the bytes such a prompt can take as JSON.
const (
	maxHashTokens     = 1 << 20
	maxHashInputBytes = 16 << 20
	minHashBlockSize  = 16
	maxHashBlockSize  = 65536
)

func newPromptCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "prompt",
		Short: "Inspect prompts as the KV-aware picker sees them",
	}
	cmd.AddCommand(newPromptHashCmd(), newPromptTokenizeCmd(), newPromptRenderCmd())
	return cmd
}

func newPromptHashCmd() *cobra.Command {
	var (
		blockSize  int
		lora, salt string
		asJSON     bool
	)
	cmd := &cobra.Command{
		Use:   "hash --block-size N [--lora NAME] [--salt SALT] [--json]",
		Short: "Print the KV block hashes of a JSON array of token ids read from stdin",
		Long: "Reads a JSON array of token ids (unsigned 32-bit integers) on stdin and prints the\n" +
			"hash of every complete block of --block-size tokens, one decimal per line: the\n" +
			"hashes Dynamo workers report as tokens_hash in their kv-events, and the ones the\n" +
			"router matches prompts with. --lora and --salt seed them as a LoRA adapter's or\n" +
			"a cache salt's requests are seeded. A trailing partial block has no hash.\n" +
			"At most 1,048,576 tokens (16 MiB of input).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if blockSize < minHashBlockSize || blockSize > maxHashBlockSize {
				return &exitError{1, fmt.Errorf("--block-size must be between %d and %d, got %d", minHashBlockSize, maxHashBlockSize, blockSize)}
			}
			tokens, err := readTokens(cmd.InOrStdin())
			if err != nil {
				return &exitError{1, err}
			}
			seed := kv.Seed(lora, salt)
			hashes := kv.BlockHashes(tokens, blockSize, seed)
			out := bufio.NewWriter(cmd.OutOrStdout())
			if asJSON {
				if hashes == nil {
					hashes = []uint64{}
				}
				b, err := json.Marshal(struct {
					BlockSize int      `json:"block_size"`
					Seed      uint64   `json:"seed"`
					Tokens    int      `json:"tokens"`
					Hashes    []uint64 `json:"hashes"`
				}{blockSize, seed, len(tokens), hashes})
				if err != nil {
					return err
				}
				out.Write(b)
				out.WriteByte('\n')
			} else {
				for _, h := range hashes {
					out.WriteString(strconv.FormatUint(h, 10))
					out.WriteByte('\n')
				}
			}
			return out.Flush()
		},
	}
	cmd.Flags().IntVar(&blockSize, "block-size", 0, "tokens per KV block (the model card's kv_cache_block_size), 16 to 65536")
	_ = cmd.MarkFlagRequired("block-size")
	cmd.Flags().StringVar(&lora, "lora", "", "LoRA adapter name the prompt is served under")
	cmd.Flags().StringVar(&salt, "salt", "", "cache salt of the request")
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"block_size", "seed", "tokens", "hashes"} as JSON`)
	return cmd
}

// readTokens reads one JSON array of token ids, within the input bounds,
// and nothing after it but whitespace.
func readTokens(r io.Reader) ([]uint32, error) {
	lr := &io.LimitedReader{R: r, N: maxHashInputBytes + 1}
	dec := json.NewDecoder(lr)
	dec.UseNumber()
	tooLarge := func() error {
		return fmt.Errorf("the input is larger than %d bytes", maxHashInputBytes)
	}
	bad := func(err error) error {
		if lr.N <= 0 {
			return tooLarge()
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return errors.New("the input is not a complete JSON array of token ids")
		}
		return fmt.Errorf("the input is not a JSON array of token ids: %w", err)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, bad(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return nil, errors.New("the input is not a JSON array of token ids")
	}
	tokens := []uint32{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, bad(err)
		}
		n, ok := tok.(json.Number)
		if !ok {
			return nil, fmt.Errorf("token %d is not a number", len(tokens))
		}
		v, err := strconv.ParseUint(n.String(), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("token %d (%s) is not an integer from 0 to 4294967295", len(tokens), n)
		}
		if len(tokens) == maxHashTokens {
			return nil, fmt.Errorf("more than %d tokens", maxHashTokens)
		}
		tokens = append(tokens, uint32(v))
	}
	if _, err := dec.Token(); err != nil { // the closing bracket
		return nil, bad(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if lr.N <= 0 {
			return nil, tooLarge()
		}
		return nil, errors.New("the input has more than one JSON value")
	}
	if lr.N <= 0 {
		return nil, tooLarge()
	}
	return tokens, nil
}

// tokenizeLimits are the router's: the text of one rendered prompt (1 MiB)
// and its ids (1,048,576, which `prompt hash` accepts), so the command
// refuses what the router would not tokenize rather than show ids it never
// computes.
var tokenizeLimits = tokenizer.DefaultLimits()

func newPromptTokenizeCmd() *cobra.Command {
	var (
		tokenizerPath string
		addSpecial    bool
	)
	cmd := &cobra.Command{
		Use:   "tokenize --tokenizer FILE [--add-special-tokens]",
		Short: "Print the token ids of the text read from stdin as a JSON array",
		Long: "Reads text (UTF-8) on stdin, exactly as it arrives, a trailing newline included, and\n" +
			"prints its token ids under the Hugging Face tokenizer.json FILE as one JSON array,\n" +
			"the input of `prompt hash`. Special tokens written in the text are recognised;\n" +
			"the post-processor's (Llama-3's <|begin_of_text|>) are added only with\n" +
			"--add-special-tokens, since the router tokenizes rendered chats without them.\n" +
			"At most 1 MiB of text and 1,048,576 ids, the router's bounds.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tok, err := loadTokenizerFile(tokenizerPath)
			if err != nil {
				return &exitError{1, err}
			}
			text, err := readText(cmd.InOrStdin())
			if err != nil {
				return &exitError{1, err}
			}
			ids, err := tok.Encode(text, addSpecial)
			if err != nil {
				return &exitError{1, encodeError(err)}
			}
			out := bufio.NewWriter(cmd.OutOrStdout())
			out.Write(appendIDsJSON(make([]byte, 0, 8*len(ids)+3), ids))
			return out.Flush()
		},
	}
	cmd.Flags().StringVar(&tokenizerPath, "tokenizer", "", "the model's Hugging Face tokenizer.json")
	_ = cmd.MarkFlagRequired("tokenizer")
	cmd.Flags().BoolVar(&addSpecial, "add-special-tokens", false, "add the post-processor's special tokens (Llama-3: <|begin_of_text|> first)")
	return cmd
}

// loadTokenizerFile reads and loads a tokenizer.json, refusing a file over
// the size cap before reading it.
func loadTokenizerFile(path string) (*tokenizer.Tokenizer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--tokenizer: %w", err)
	}
	defer f.Close()
	limit := int64(tokenizeLimits.MaxFileBytes)
	if info, err := f.Stat(); err == nil && info.Mode().IsRegular() && info.Size() > limit {
		return nil, fmt.Errorf("--tokenizer %s: %d bytes, more than the %d a tokenizer.json may have", path, info.Size(), limit)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("--tokenizer %s: %w", path, err)
	}
	tok, err := tokenizer.Load(data, tokenizeLimits)
	if err != nil {
		return nil, fmt.Errorf("--tokenizer %s: %w", path, err)
	}
	return tok, nil
}

// readText reads all of r, within the text bound.
func readText(r io.Reader) (string, error) {
	max := int64(tokenizeLimits.MaxTextBytes)
	b, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return "", fmt.Errorf("reading the text: %w", err)
	}
	if int64(len(b)) > max {
		return "", fmt.Errorf("the input is larger than %d bytes, the most the router tokenizes", max)
	}
	return string(b), nil
}

func encodeError(err error) error {
	switch {
	case errors.Is(err, tokenizer.ErrInvalidUTF8):
		return errors.New("the input is not valid UTF-8 text")
	case errors.Is(err, tokenizer.ErrTooManyTokens):
		return fmt.Errorf("the input encodes to more than %d tokens, the most the router hashes", tokenizeLimits.MaxTokens)
	}
	return err
}

// appendIDsJSON writes ids as one JSON array and a newline.
func appendIDsJSON(b []byte, ids []uint32) []byte {
	b = append(b, '[')
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, uint64(id), 10)
	}
	return append(b, ']', '\n')
}
