package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"switchyard/fixtures"
	"switchyard/internal/etcdtest"
	"switchyard/router/prompt/artifacts"
)

// fixtureChecksum is the blake3 checksum of one of the test tokenizer's
// files, as an operator pins it.
func fixtureChecksum(t *testing.T, file string) string {
	t.Helper()
	data, err := fixtures.TokenizerFile(fixtures.TestTokenizer, file)
	require.NoError(t, err)
	return string(artifacts.Sum(data))
}

// writeFleetFile writes a fleet file with extra lines into dir.
func writeFleetFile(t *testing.T, dir, etcd, frontend, extra string) string {
	t.Helper()
	path := filepath.Join(dir, "fleet.yaml")
	require.NoError(t, os.WriteFile(path, []byte(fmt.Sprintf(`etcd: {endpoints: [%q]}
frontend: %q
model: m
workers: {aggregated: 1}
%s`, etcd, frontend, extra)), 0o600))
	return path
}

// tokenizer and tokenizer_config are checked by config validate at their
// field paths: relative paths from the fleet file's folder, files that
// exist and load as the fleet loads them.
func TestFleetFileTokenizerValidation(t *testing.T) {
	f := newRenderFixture(t) // the test tokenizer's files in f.dir
	notJSON := f.write(t, "broken.json", "# not JSON")
	noTemplate := f.write(t, "notemplate.json", `{"bos_token": "<|begin_of_text|>"}`)
	badTemplate := f.write(t, "badtemplate.json", `{"chat_template": "{% for m in messages %}"}`)
	require.NoError(t, os.Mkdir(filepath.Join(f.dir, "sub"), 0o700))

	for _, c := range []struct {
		name, extra string
		problems    []string // empty: the file validates
	}{
		{"relative paths", "tokenizer: tokenizer.json\ntokenizer_config: tokenizer_config.json\n", nil},
		{"absolute path, no config", "tokenizer: " + f.tokenizer + "\n", nil},
		{"builtin", "tokenizer: builtin:switchyard-bpe-4k\n", nil},
		{"missing tokenizer", "tokenizer: missing.json\n", []string{"error: tokenizer: ", "missing.json: no such file"}},
		{"directory", "tokenizer: sub\n", []string{"error: tokenizer: ", "is not a regular file"}},
		{"not a tokenizer", "tokenizer: " + notJSON + "\n", []string{"error: tokenizer: invalid tokenizer.json"}},
		{"config without tokenizer", "tokenizer_config: tokenizer_config.json\n", []string{"error: tokenizer_config: needs tokenizer"}},
		{"missing config", "tokenizer: tokenizer.json\ntokenizer_config: nope.json\n", []string{"error: tokenizer_config: ", "nope.json: no such file"}},
		{"config without template", "tokenizer: tokenizer.json\ntokenizer_config: " + noTemplate + "\n",
			[]string{"error: tokenizer_config: template input: tokenizer_config.json has no chat_template"}},
		{"config with a bad template", "tokenizer: tokenizer.json\ntokenizer_config: " + badTemplate + "\n",
			[]string{"error: tokenizer_config: template syntax"}},
		{"unknown builtin", "tokenizer: builtin:llama\n", []string{"error: tokenizer: the only built-in tokenizer is builtin:switchyard-bpe-4k"}},
		{"builtin with a config", "tokenizer: builtin:switchyard-bpe-4k\ntokenizer_config: tokenizer_config.json\n",
			[]string{"error: tokenizer_config: must be empty with a built-in tokenizer"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := writeFleetFile(t, f.dir, "http://127.0.0.1:2379", "127.0.0.1:8000", c.extra)
			out, err := run(t, "config", "validate", path)
			if len(c.problems) == 0 {
				require.NoError(t, err, out)
				require.Equal(t, "fleet config OK (0 warnings)\n", out)
				return
			}
			requireExit1(t, err)
			for _, p := range c.problems {
				assert.Contains(t, out, p)
			}
		})
	}
}

// A fleet file's tokenizer reaches the cards: every worker names the
// files by absolute path and checksum, and the fleet reports the
// checksums a router pins. A built-in tokenizer's files live only while
// the fleet runs.
func TestFleetFileTokenizerReachesTheCards(t *testing.T) {
	if testing.Short() {
		t.Skip("runs an etcd and a fleet")
	}
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	f := newRenderFixture(t)
	want := []string{fixtureChecksum(t, fixtures.TokenizerJSON), fixtureChecksum(t, fixtures.TokenizerConfig)}

	t.Run("paths", func(t *testing.T) {
		path := writeFleetFile(t, f.dir, etcd.Endpoint(), freeAddr(t), "tokenizer: tokenizer.json\ntokenizer_config: tokenizer_config.json\n")
		ff, err := loadFleetFile(path)
		require.NoError(t, err)
		rf, err := startFleet(t.Context(), ff, slog.New(slog.DiscardHandler))
		require.NoError(t, err)
		defer rf.Close()
		require.Equal(t, want, rf.fleet.Checksums())
		cards := cardValues(t, cli)
		assert.Contains(t, cards, fmt.Sprintf(`"path":%q`, f.tokenizer), "the card names the file by absolute path")
		assert.Contains(t, cards, fmt.Sprintf(`"path":%q`, f.config))
		assert.Contains(t, cards, want[0])
		assert.Contains(t, cards, want[1])
	})

	t.Run("builtin", func(t *testing.T) {
		path := writeFleetFile(t, t.TempDir(), etcd.Endpoint(), freeAddr(t), "tokenizer: builtin:switchyard-bpe-4k\n")
		ff, err := loadFleetFile(path)
		require.NoError(t, err)
		rf, err := startFleet(t.Context(), ff, slog.New(slog.DiscardHandler))
		require.NoError(t, err)
		require.Equal(t, want, rf.fleet.Checksums(), "the built-in tokenizer is the fixture's two files")
		require.NotEmpty(t, rf.artifactsDir)
		tok, err := os.ReadFile(filepath.Join(rf.artifactsDir, "tokenizer", fixtures.TokenizerJSON))
		require.NoError(t, err, "the files the cards name exist while the fleet runs")
		require.Equal(t, want[0], string(artifacts.Sum(tok)))
		rf.Close()
		_, err = os.Stat(rf.artifactsDir)
		require.True(t, os.IsNotExist(err), "removed when the fleet stops: %v", err)
	})
}

// cardValues are the raw values of every discovery record in etcd.
func cardValues(t *testing.T, cli *clientv3.Client) string {
	t.Helper()
	resp, err := cli.Get(context.Background(), "v1/", clientv3.WithPrefix())
	require.NoError(t, err)
	var all strings.Builder
	for _, kv := range resp.Kvs {
		all.Write(kv.Value)
		all.WriteByte('\n')
	}
	return all.String()
}
