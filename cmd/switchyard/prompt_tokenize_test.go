package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"switchyard/router/kv"
	"switchyard/router/tokenizer"
)

// testTokenizer is the project's own test tokenizer (fixtures/tokenizer).
const testTokenizer = "../../fixtures/tokenizer/switchyard-bpe-4k/tokenizer.json"

func tokenize(t *testing.T, text string, flags ...string) ([]uint32, error) {
	t.Helper()
	out, err := runWithStdin(t, text, append([]string{"prompt", "tokenize", "--tokenizer", testTokenizer}, flags...)...)
	if err != nil {
		return nil, err
	}
	require.True(t, strings.HasSuffix(out, "]\n"), "one JSON array and a newline: %.80q", out)
	var ids []uint32
	require.NoError(t, json.Unmarshal([]byte(out), &ids), "%.80q", out)
	return ids, nil
}

// The ids printed are Hugging Face's: the expected arrays were computed by
// the tokenizers library (hack/tokenizer-oracle.js) for the fixture.
func TestPromptTokenize(t *testing.T) {
	const text = "Hello world, the router routes requests."
	ids, err := tokenize(t, text)
	require.NoError(t, err)
	require.Equal(t, []uint32{72, 570, 280, 2677, 854, 44, 265, 598, 3984, 556, 46}, ids)

	ids, err = tokenize(t, text, "--add-special-tokens")
	require.NoError(t, err)
	require.Equal(t, []uint32{4096, 72, 570, 280, 2677, 854, 44, 265, 598, 3984, 556, 46}, ids, "<|begin_of_text|> first")

	// Special tokens in the text are always recognised; nothing is added
	// without the flag, so a rendered chat keeps the one it starts with.
	rendered := "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
	ids, err = tokenize(t, rendered)
	require.NoError(t, err)
	require.Equal(t, []uint32{4096, 4098, 2007, 4099, 305, 72, 105, 4100}, ids)

	// The text exactly as read: a trailing newline is part of it (here it
	// joins the full stop, 403 is ".\n").
	withNewline, err := tokenize(t, text+"\n")
	require.NoError(t, err)
	require.Equal(t, []uint32{72, 570, 280, 2677, 854, 44, 265, 598, 3984, 556, 403}, withNewline)

	ids, err = tokenize(t, "")
	require.NoError(t, err)
	require.Empty(t, ids)
	out, err := runWithStdin(t, "", "prompt", "tokenize", "--tokenizer", testTokenizer)
	require.NoError(t, err)
	require.Equal(t, "[]\n", out)
}

// tokenize | hash: the ids printed are what `prompt hash` reads, up to the
// most ids either allows.
func TestPromptTokenizeThenHash(t *testing.T) {
	var chat strings.Builder
	chat.WriteString("<|begin_of_text|>")
	for i := 0; i < 8; i++ {
		fmt.Fprintf(&chat, "<|start_header_id|>user<|end_header_id|>\n\nQuestion %d about the fleet.<|eot_id|>", i)
	}
	ids, err := tokenize(t, chat.String())
	require.NoError(t, err)
	require.Greater(t, len(ids), 64)

	tokensOut, err := runWithStdin(t, chat.String(), "prompt", "tokenize", "--tokenizer", testTokenizer)
	require.NoError(t, err)
	hashOut, err := runWithStdin(t, tokensOut, "prompt", "hash", "--block-size", "16")
	require.NoError(t, err)
	var want []string
	for _, h := range kv.BlockHashes(ids, 16, kv.Seed("", "")) {
		want = append(want, strconv.FormatUint(h, 10))
	}
	require.Equal(t, want, strings.Fields(hashOut))
	require.Len(t, want, len(ids)/16)

	// One token per byte: 1 MiB of text gives the 1,048,576 ids both
	// commands allow, and the hash reads them all.
	require.Equal(t, maxHashTokens, tokenizeLimits.MaxTokens, "tokenize must print no more ids than hash reads")
	full := strings.Repeat("\x01", tokenizeLimits.MaxTextBytes)
	tokensOut, err = runWithStdin(t, full, "prompt", "tokenize", "--tokenizer", testTokenizer)
	require.NoError(t, err)
	hashOut, err = runWithStdin(t, tokensOut, "prompt", "hash", "--block-size", "65536", "--json")
	require.NoError(t, err)
	require.Contains(t, hashOut, `"tokens":1048576`)
}

func TestPromptTokenizeRefusesBadInput(t *testing.T) {
	// Over the router's bounds: the text, and the ids once
	// <|begin_of_text|> is added to 1 MiB of one-byte tokens.
	_, err := tokenize(t, strings.Repeat("a", tokenizeLimits.MaxTextBytes+1))
	require.ErrorContains(t, err, "larger than 1048576 bytes")
	requireExit1(t, err)
	_, err = tokenize(t, strings.Repeat("\x01", tokenizeLimits.MaxTextBytes), "--add-special-tokens")
	require.ErrorContains(t, err, "more than 1048576 tokens")
	requireExit1(t, err)

	_, err = tokenize(t, "caf\xe9")
	require.ErrorContains(t, err, "not valid UTF-8")
	requireExit1(t, err)
}

func TestPromptTokenizeRefusesBadTokenizers(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
		return path
	}
	oversized := filepath.Join(dir, "oversized.json")
	f, err := os.Create(oversized)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(int64(tokenizeLimits.MaxFileBytes)+1)) // sparse: nothing is written
	require.NoError(t, f.Close())

	fixture, err := os.ReadFile(testTokenizer)
	require.NoError(t, err)
	wordPiece := strings.Replace(string(fixture), `"type": "BPE"`, `"type": "WordPiece"`, 1)
	require.NotEqual(t, string(fixture), wordPiece)

	for _, c := range []struct{ path, msg string }{
		{filepath.Join(dir, "missing.json"), "no such file"},
		{write("notjson.json", "# not JSON"), "invalid tokenizer.json"},
		{write("empty.json", "{}"), "pre_tokenizer"},
		{write("wordpiece.json", wordPiece), `model.type: "WordPiece" is not supported`},
		{oversized, "more than the 67108864 a tokenizer.json may have"},
		{dir, "is a directory"},
	} {
		out, err := runWithStdin(t, "text", "prompt", "tokenize", "--tokenizer", c.path)
		require.Error(t, err, "%s: printed %.80q", c.path, out)
		assert.Contains(t, err.Error(), c.msg, c.path)
		assert.Contains(t, err.Error(), "--tokenizer", "the error names the flag")
		requireExit1(t, err)
	}
	_, err = runWithStdin(t, "text", "prompt", "tokenize")
	require.ErrorContains(t, err, `required flag(s) "tokenizer" not set`)

	_, err = tokenize(t, "x")
	require.NoError(t, err, "the fixture itself loads")
	_, err = tokenizer.Load(fixture, tokenizeLimits)
	require.NoError(t, err)
}
