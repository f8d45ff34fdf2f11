package artifacts

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"switchyard/router/config"
)

var tokenizerBytes = []byte(`{"version":"1.0","model":{"type":"BPE"}}`)

func TestUnpinnedIsNeverFetched(t *testing.T) {
	o := newOrigin(t)
	f := file(o.put("/tokenizer.json", tokenizerBytes), tokenizerBytes)
	s, m := newTestStore(t, Settings{AllowHTTP: true, Pinned: []string{sumA}})

	for range 3 {
		_, err := s.Fetch(context.Background(), "m", f)
		require.ErrorIs(t, err, ErrUnpinned)
		assert.Equal(t, ResultUnpinned, ResultOf(err))
	}
	_, err := s.Fetch(context.Background(), "other-model", f)
	require.ErrorIs(t, err, ErrUnpinned)
	assert.Zero(t, o.total(), "the server saw a request for an unpinned artifact")
	assert.Equal(t, 2, count(m, ResultUnpinned), "counted once per (model, checksum)")
}

func TestPinnedHTTPFetchIsCachedAndVerified(t *testing.T) {
	o := newOrigin(t)
	f := file(o.put("/tokenizer.json", tokenizerBytes), tokenizerBytes)
	s, m := newTestStore(t, Settings{AllowHTTP: true, Pinned: pinned(f.Checksum)})

	data, err := s.Fetch(context.Background(), "m", f)
	require.NoError(t, err)
	assert.Equal(t, tokenizerBytes, data)
	data, err = s.Fetch(context.Background(), "m", f)
	require.NoError(t, err)
	assert.Equal(t, tokenizerBytes, data)
	assert.Equal(t, 1, o.hitsAt("/tokenizer.json"), "the second fetch reads the cache")
	assert.Equal(t, 1, count(m, ResultFetched))
	assert.Equal(t, 1, count(m, ResultCached))

	dir := s.current().CacheDir
	info, err := os.Stat(filepath.Join(dir, "blobs"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), info.Mode().Perm())
	info, err = os.Stat(filepath.Join(dir, "blobs", string(f.Checksum)))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm())
	entries, err := os.ReadDir(filepath.Join(dir, "blobs"))
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary file left behind")
}

func TestWrongBytesFromTheServerAreRefused(t *testing.T) {
	o := newOrigin(t)
	loc := o.put("/tokenizer.json", []byte(`{"tampered":true}`))
	f := file(loc, tokenizerBytes)
	s, m := newTestStore(t, Settings{AllowHTTP: true, Pinned: pinned(f.Checksum)})

	_, err := s.Fetch(context.Background(), "m", f)
	assert.Equal(t, ResultCorrupt, ResultOf(err))
	assert.Equal(t, 1, count(m, ResultCorrupt))
	_, statErr := os.Stat(blobPath(s.current().CacheDir, f.Checksum))
	assert.ErrorIs(t, statErr, os.ErrNotExist, "corrupt bytes are never cached")
}

func TestModifiedBlobIsEvictedAndFetchedAgain(t *testing.T) {
	o := newOrigin(t)
	f := file(o.put("/tokenizer.json", tokenizerBytes), tokenizerBytes)
	s, m := newTestStore(t, Settings{AllowHTTP: true, Pinned: pinned(f.Checksum)})
	_, err := s.Fetch(context.Background(), "m", f)
	require.NoError(t, err)

	blob := blobPath(s.current().CacheDir, f.Checksum)
	require.NoError(t, os.WriteFile(blob, []byte(`{"planted":true}`), 0o600))
	data, err := s.Fetch(context.Background(), "m", f)
	require.NoError(t, err)
	assert.Equal(t, tokenizerBytes, data, "never the modified bytes")
	assert.Equal(t, 1, count(m, ResultCorrupt))
	assert.Equal(t, 2, o.hitsAt("/tokenizer.json"), "refetched after eviction")
	onDisk, err := os.ReadFile(blob)
	require.NoError(t, err)
	assert.Equal(t, tokenizerBytes, onDisk, "the good bytes replaced the modified blob")
}

func TestSizeCaps(t *testing.T) {
	big := bytes.Repeat([]byte("x"), MaxArtifactBytes+1)
	o := newOrigin(t)
	loc := o.put("/big.json", big)
	sum := Sum(big)
	s, m := newTestStore(t, Settings{AllowHTTP: true, Pinned: pinned(sum)})

	declared := CheckedFile{Path: loc, Checksum: sum, Size: MaxArtifactBytes + 1, HasSize: true}
	_, err := s.Fetch(context.Background(), "m", declared)
	assert.Equal(t, ResultTooLarge, ResultOf(err))
	assert.Zero(t, o.total(), "a declared size over the cap is refused before fetching")

	undeclared := CheckedFile{Path: loc, Checksum: sum}
	_, err = s.Fetch(context.Background(), "m", undeclared)
	assert.Equal(t, ResultTooLarge, ResultOf(err), "Content-Length over the cap")

	lying := CheckedFile{Path: loc, Checksum: sum, Size: 10, HasSize: true}
	_, err = s.Fetch(context.Background(), "m", lying)
	assert.Equal(t, ResultTooLarge, ResultOf(err), "a small declared size does not lift the cap")

	local := CheckedFile{Path: writeFile(t, big), Checksum: sum}
	_, err = s.Fetch(context.Background(), "m", local)
	assert.Equal(t, ResultTooLarge, ResultOf(err))
	assert.Equal(t, 4, count(m, ResultTooLarge))
}

func TestReadCappedStopsAtTheCap(t *testing.T) {
	// A chunked body has no Content-Length: the read itself must stop.
	r := &countingReader{}
	_, err := readCapped(r)
	assert.Equal(t, ResultTooLarge, ResultOf(err))
	assert.Equal(t, int64(MaxArtifactBytes+1), r.n, "read one byte past the cap and no more")
}

// countingReader is an endless stream of zeros that counts what was read.
type countingReader struct{ n int64 }

func (c *countingReader) Read(p []byte) (int, error) {
	clear(p)
	c.n += int64(len(p))
	return len(p), nil
}

func TestAllowFlags(t *testing.T) {
	o := newOrigin(t)
	httpFile := file(o.put("/tokenizer.json", tokenizerBytes), tokenizerBytes)
	hfFile := file("hf://Qwen/Qwen3-0.6B/tokenizer.json", tokenizerBytes)
	t.Setenv("HF_ENDPOINT", o.srv.URL)
	s, m := newTestStore(t, Settings{Pinned: pinned(Sum(tokenizerBytes))})

	_, err := s.Fetch(context.Background(), "m", httpFile)
	assert.Equal(t, ResultRefused, ResultOf(err))
	assert.Contains(t, err.Error(), "allow_http_artifacts")
	_, err = s.Fetch(context.Background(), "m", hfFile)
	assert.Equal(t, ResultRefused, ResultOf(err))
	assert.Contains(t, err.Error(), "allow_hf_artifacts")
	assert.Zero(t, o.total())
	assert.Equal(t, 2, count(m, ResultRefused))

	local := file(writeFile(t, tokenizerBytes), tokenizerBytes)
	_, err = s.Fetch(context.Background(), "m", local)
	require.NoError(t, err, "local paths are always read")
	local.Path = "file://" + local.Path
	_, err = s.Fetch(context.Background(), "m", local)
	require.NoError(t, err, "file:// is always read")

	s.Reload(Settings{AllowHTTP: true, Pinned: pinned(Sum(tokenizerBytes)), CacheDir: t.TempDir()})
	_, err = s.Fetch(context.Background(), "m", httpFile)
	require.NoError(t, err, "allow_http_artifacts applies at the next fetch")
}

func TestHFMapping(t *testing.T) {
	o := newOrigin(t)
	o.put("/Qwen/Qwen3-0.6B/resolve/main/tokenizer.json", tokenizerBytes)
	o.put("/Qwen/Qwen3-0.6B/resolve/refs%2Fpr%2F7/sub/dir/tokenizer.json", tokenizerBytes)
	t.Setenv("HF_ENDPOINT", o.srv.URL+"/")
	t.Setenv("HF_TOKEN", "hf_secret")
	// No cache directory: every fetch reaches the server.
	s := NewStore(Settings{AllowHF: true, Pinned: pinned(Sum(tokenizerBytes))}, Options{})

	_, err := s.Fetch(context.Background(), "m", file("hf://Qwen/Qwen3-0.6B/tokenizer.json", tokenizerBytes))
	require.NoError(t, err)
	_, err = s.Fetch(context.Background(), "m", file("hf://Qwen/Qwen3-0.6B/sub/dir/tokenizer.json@refs/pr/7", tokenizerBytes))
	require.NoError(t, err)
	assert.Equal(t, 1, o.hitsAt("/Qwen/Qwen3-0.6B/resolve/main/tokenizer.json"))
	assert.Equal(t, 1, o.hitsAt("/Qwen/Qwen3-0.6B/resolve/refs%2Fpr%2F7/sub/dir/tokenizer.json"))
	assert.Equal(t, []string{"Bearer hf_secret", "Bearer hf_secret"}, o.auth)
}

func TestHFDefaultEndpoint(t *testing.T) {
	loc, err := parseLocation("hf://meta-llama/Llama-3.1-8B-Instruct/tokenizer.json@8c22764")
	require.NoError(t, err)
	u, err := loc.hfURL(DefaultHFEndpoint)
	require.NoError(t, err)
	assert.Equal(t, "https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct/resolve/8c22764/tokenizer.json", u)
	_, err = loc.hfURL("ftp://mirror")
	assert.Error(t, err)
}

func TestNoTokenWithoutHFToken(t *testing.T) {
	o := newOrigin(t)
	o.put("/a/b/resolve/main/t.json", tokenizerBytes)
	t.Setenv("HF_ENDPOINT", o.srv.URL)
	t.Setenv("HF_TOKEN", "")
	s, _ := newTestStore(t, Settings{AllowHF: true, Pinned: pinned(Sum(tokenizerBytes))})
	_, err := s.Fetch(context.Background(), "m", file("hf://a/b/t.json", tokenizerBytes))
	require.NoError(t, err)
	assert.Equal(t, []string{""}, o.auth)
}

func TestFailuresAreCounted(t *testing.T) {
	o := newOrigin(t)
	loc := o.put("/t.json", tokenizerBytes)
	o.fail("/t.json", http.StatusBadGateway)
	s, m := newTestStore(t, Settings{AllowHTTP: true, Pinned: pinned(Sum(tokenizerBytes))})
	_, err := s.Fetch(context.Background(), "m", file(loc, tokenizerBytes))
	assert.Equal(t, ResultFailed, ResultOf(err))
	assert.Contains(t, err.Error(), "HTTP 502")

	_, err = s.Fetch(context.Background(), "m", file("/does/not/exist.json", tokenizerBytes))
	assert.Equal(t, ResultFailed, ResultOf(err))
	_, err = s.Fetch(context.Background(), "m", file(t.TempDir(), tokenizerBytes))
	assert.Equal(t, ResultRefused, ResultOf(err), "a directory is not a regular file")
	_, err = s.Fetch(context.Background(), "m", file("gopher://h/t", tokenizerBytes))
	assert.Equal(t, ResultUnsupported, ResultOf(err))
	assert.Equal(t, 2, count(m, ResultFailed))
	assert.Equal(t, 1, count(m, ResultRefused))
	assert.Equal(t, 1, count(m, ResultUnsupported))
}

func TestUnpinnedLogNamesTheChecksumOnce(t *testing.T) {
	var logs strings.Builder
	s := NewStore(Settings{}, Options{Logger: newTextLogger(&logs)})
	f := file("/m/tokenizer.json", tokenizerBytes)
	for range 3 {
		_, err := s.Fetch(context.Background(), "m", f)
		require.True(t, errors.Is(err, ErrUnpinned))
	}
	assert.Equal(t, 1, strings.Count(logs.String(), string(f.Checksum)), logs.String())
	assert.Contains(t, logs.String(), "b3sum")
}

func TestSettingsFromConfig(t *testing.T) {
	base := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", base)
	kv := config.Default().Dynamo.KV
	kv.PinnedArtifacts = []string{sumA}
	set, err := SettingsFrom(kv)
	require.NoError(t, err)
	assert.Equal(t, Settings{Pinned: []string{sumA}, AllowHTTP: true, AllowHF: false, CacheDir: filepath.Join(base, "switchyard", "artifacts")}, set)
}
