package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/zeebo/xxh3"

	"switchyard/router/kv"
)

// blockHash hashes one block the plain way: XXH3-64 over the tokens as
// little-endian u32, with the request's seed.
func blockHash(tokens []uint32, seed uint64) uint64 {
	b := make([]byte, 0, 4*len(tokens))
	for _, t := range tokens {
		b = binary.LittleEndian.AppendUint32(b, t)
	}
	return xxh3.HashSeed(b, seed)
}

func tokensJSON(tokens []uint32) string {
	b, _ := json.Marshal(tokens)
	return string(b)
}

// The hashes printed are Dynamo's block hashes: each complete block hashed
// with the seed of the request's LoRA adapter and cache salt (the seeds
// are the known vectors of router/kv's hash tests), the partial block
// left out, and the same as kv.BlockHashes.
func TestPromptHash(t *testing.T) {
	tokens := make([]uint32, 40) // two blocks of 16 and 8 tokens left over
	for i := range tokens {
		tokens[i] = uint32(i*7919) + 151000
	}
	cases := []struct {
		name  string
		flags []string
		seed  uint64
	}{
		{"base", nil, 1337},
		{"lora", []string{"--lora", "adapter-a"}, 8842669519798868182},
		{"salt", []string{"--salt", "tenant-a"}, 1948188790972764086},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := runWithStdin(t, tokensJSON(tokens), append([]string{"prompt", "hash", "--block-size", "16"}, c.flags...)...)
			require.NoError(t, err, out)
			want := []uint64{blockHash(tokens[:16], c.seed), blockHash(tokens[16:32], c.seed)}
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			require.Len(t, lines, 2, out)
			for i, l := range lines {
				require.Equal(t, strconv.FormatUint(want[i], 10), l)
			}
			lora, salt := "", ""
			if c.name == "lora" {
				lora = "adapter-a"
			}
			if c.name == "salt" {
				salt = "tenant-a"
			}
			require.Equal(t, kv.BlockHashes(tokens, 16, kv.Seed(lora, salt)), want)

			out, err = runWithStdin(t, tokensJSON(tokens), append([]string{"prompt", "hash", "--block-size", "16", "--json"}, c.flags...)...)
			require.NoError(t, err, out)
			var got struct {
				BlockSize int      `json:"block_size"`
				Seed      uint64   `json:"seed"`
				Tokens    int      `json:"tokens"`
				Hashes    []uint64 `json:"hashes"`
			}
			require.NoError(t, json.Unmarshal([]byte(out), &got), out)
			require.Equal(t, 16, got.BlockSize)
			require.Equal(t, c.seed, got.Seed)
			require.Equal(t, 40, got.Tokens)
			require.Equal(t, want, got.Hashes)
			require.Contains(t, out, strconv.FormatUint(want[0], 10), "hashes are exact decimals in the JSON")
		})
	}

	// Another block size cuts other blocks.
	out, err := runWithStdin(t, tokensJSON(tokens), "prompt", "hash", "--block-size", "32")
	require.NoError(t, err)
	require.Equal(t, strconv.FormatUint(blockHash(tokens[:32], 1337), 10)+"\n", out)

	// Fewer tokens than a block: no hash.
	out, err = runWithStdin(t, " [1, 2, 3]\n", "prompt", "hash", "--block-size", "16")
	require.NoError(t, err)
	require.Empty(t, out)
	out, err = runWithStdin(t, "[]", "prompt", "hash", "--block-size", "16", "--json")
	require.NoError(t, err)
	require.JSONEq(t, `{"block_size":16,"seed":1337,"tokens":0,"hashes":[]}`, out)
}

func TestPromptHashRefusesBadInput(t *testing.T) {
	hash := func(input string, args ...string) error {
		t.Helper()
		out, err := runWithStdin(t, input, append([]string{"prompt", "hash"}, args...)...)
		if err == nil {
			t.Fatalf("input %.40q args %v: accepted, printed %q", input, args, out)
		}
		return err
	}
	bs := []string{"--block-size", "16"}
	for _, c := range []struct{ input, msg string }{
		{"", "not a complete JSON array"},
		{"[1, 2", "not a complete JSON array"},
		{"[1,, 2]", "not a JSON array of token ids"},
		{`{"tokens": [1]}`, "not a JSON array of token ids"},
		{"7", "not a JSON array of token ids"},
		{`[1, "2"]`, "token 1 is not a number"},
		{"[[1]]", "token 0 is not a number"},
		{"[1, null]", "token 1 is not a number"},
		{"[1.5]", "token 0 (1.5) is not an integer"},
		{"[-1]", "token 0 (-1) is not an integer"},
		{"[1e3]", "token 0 (1e3) is not an integer"},
		{"[4294967296]", "token 0 (4294967296) is not an integer from 0 to 4294967295"},
		{"[1] [2]", "more than one JSON value"},
		{"[1] x", "more than one JSON value"},
	} {
		err := hash(c.input, bs...)
		assert.Contains(t, err.Error(), c.msg, "input %q", c.input)
		requireExit1(t, err)
	}
	for _, b := range []string{"15", "0", "-16", "65537"} {
		err := hash("[1]", "--block-size", b)
		assert.Contains(t, err.Error(), "--block-size must be between 16 and 65536, got "+b)
	}
	require.Error(t, hash("[1]"), "--block-size is required")

	// The bounds: 1,048,576 tokens pass, one more does not; input past 16 MiB
	// is refused however it ends.
	full := make([]uint32, 1<<20)
	out, err := runWithStdin(t, tokensJSON(full), "prompt", "hash", "--block-size", "65536")
	require.NoError(t, err)
	require.Len(t, strings.Fields(out), 16)
	err = hash(tokensJSON(append(full, 0)), "--block-size", "65536")
	require.ErrorContains(t, err, "more than 1048576 tokens")
	err = hash("["+strings.Repeat(" ", 16<<20)+"1]", bs...)
	require.ErrorContains(t, err, fmt.Sprintf("larger than %d bytes", 16<<20))
	err = hash("[1]"+strings.Repeat(" ", 16<<20), bs...)
	require.ErrorContains(t, err, "larger than")
}
