package artifacts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"switchyard/router/config"
)

// Store bounds.
const (
	// maxNotedUnpinned caps the (model, checksum) pairs remembered so that
	// each unpinned artifact is logged once.
	maxNotedUnpinned = 1024
	// DefaultFetchTimeout bounds one HTTP fetch when Options.Client is nil.
	DefaultFetchTimeout = 2 * time.Minute
	maxRedirects        = 5
)

// Settings are the dynamo.kv fields the store follows.
type Settings struct {
	// Pinned are "blake3:<hex>" checksums; malformed entries pin nothing
	// (config validation refuses them before they get here).
	Pinned    []string
	AllowHTTP bool
	AllowHF   bool
	// CacheDir holds blobs/<checksum>; empty disables the cache, so remote
	// artifacts are fetched on every load.
	CacheDir string
}

// SettingsFrom reads the store's settings from a parsed configuration. An
// error says the cache directory could not be determined; the settings
// returned with it work without a cache.
func SettingsFrom(kv config.KV) (Settings, error) {
	s := Settings{Pinned: kv.PinnedArtifacts, AllowHTTP: kv.AllowHTTPArtifacts, AllowHF: kv.AllowHFArtifacts}
	dir, err := kv.EffectiveArtifactCacheDir()
	s.CacheDir = dir
	return s, err
}

// Options are a Store's collaborators; zero values take defaults.
type Options struct {
	// Client fetches http(s) and hf artifacts. The default has a
	// DefaultFetchTimeout timeout and follows at most 5 redirects.
	Client *http.Client
	// Getenv reads HF_ENDPOINT and HF_TOKEN (default os.Getenv).
	Getenv  func(string) string
	Logger  *slog.Logger
	Metrics *Metrics
}

// Store fetches artifact bytes under the operator's pins and allow flags,
// verifies them and caches remote ones by checksum. It is safe for
// concurrent use.
type Store struct {
	client  *http.Client
	getenv  func(string) string
	log     *slog.Logger
	metrics *Metrics

	mu        sync.Mutex
	settings  Settings
	pins      map[Checksum]struct{}
	noted     map[notedKey]struct{}
	notedFull bool
	onReload  []func()
}

type notedKey struct {
	model    string
	checksum Checksum
}

// NewStore returns a store following s.
func NewStore(s Settings, o Options) *Store {
	st := &Store{client: o.Client, getenv: o.Getenv, log: o.Logger, metrics: o.Metrics, noted: map[notedKey]struct{}{}}
	if st.client == nil {
		st.client = &http.Client{Timeout: DefaultFetchTimeout, CheckRedirect: limitRedirects}
	}
	if st.getenv == nil {
		st.getenv = os.Getenv
	}
	if st.log == nil {
		st.log = slog.New(slog.DiscardHandler)
	}
	st.apply(s)
	return st
}

// limitRedirects stops after maxRedirects. net/http already drops the
// Authorization header when a redirect leaves the original host, so an
// HF_TOKEN is not handed to a CDN.
func limitRedirects(_ *http.Request, via []*http.Request) error {
	if len(via) >= maxRedirects {
		return fmt.Errorf("stopped after %d redirects", maxRedirects)
	}
	return nil
}

// Reload applies new settings. Loaders built on this store drop, before
// Reload returns, every value loaded from an artifact no longer pinned.
func (s *Store) Reload(set Settings) {
	s.mu.Lock()
	s.apply(set)
	hooks := s.onReload
	s.mu.Unlock()
	for _, h := range hooks {
		h()
	}
}

func (s *Store) apply(set Settings) {
	set.Pinned = append([]string(nil), set.Pinned...)
	s.settings = set
	s.pins = make(map[Checksum]struct{}, len(set.Pinned))
	for _, p := range set.Pinned {
		if c, err := ParseChecksum(p); err == nil {
			s.pins[c] = struct{}{}
		}
	}
}

func (s *Store) addReloadHook(h func()) {
	s.mu.Lock()
	s.onReload = append(s.onReload, h)
	s.mu.Unlock()
}

// Pinned reports whether c may be fetched, cached and loaded.
func (s *Store) Pinned(c Checksum) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.pins[c]
	return ok
}

func (s *Store) current() Settings {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.settings
}

// Fetch returns the verified bytes of f for model (named in logs). An
// unpinned checksum is refused before anything is read. Every outcome is
// counted (unpinned ones once per model and checksum); errors are *Error
// values carrying their result.
func (s *Store) Fetch(ctx context.Context, model string, f CheckedFile) ([]byte, error) {
	data, res, err := s.fetch(ctx, model, f)
	if res != ResultUnpinned { // noteUnpinned counts those, once per pair
		s.metrics.Count(res)
	}
	return data, err
}

func (s *Store) fetch(ctx context.Context, model string, f CheckedFile) ([]byte, Result, error) {
	where := string(f.Checksum)
	if !s.Pinned(f.Checksum) {
		s.noteUnpinned(model, f)
		return nil, ResultUnpinned, &Error{Result: ResultUnpinned, Where: where, Reason: "review the file and pin its checksum", Err: ErrUnpinned}
	}
	if f.HasSize && f.Size > MaxArtifactBytes {
		return nil, ResultTooLarge, refusal(ResultTooLarge, where, "declared size %d bytes, limit %d", f.Size, MaxArtifactBytes)
	}
	if err := checkPath(f.Path); err != nil {
		return nil, ResultRefused, refusal(ResultRefused, where, "path: %v", err)
	}
	loc, err := parseLocation(f.Path)
	if err != nil {
		return nil, ResultOf(err), &Error{Result: ResultOf(err), Where: where, Reason: "path", Err: err}
	}
	set := s.current()
	if err := allowed(loc, set); err != nil {
		return nil, ResultRefused, &Error{Result: ResultRefused, Where: where, Reason: err.Error()}
	}
	cache := set.CacheDir != "" && loc.kind != locLocal
	if cache {
		if data, ok := s.readBlob(set.CacheDir, f.Checksum); ok {
			return data, ResultCached, nil
		}
	}
	data, err := s.read(ctx, loc)
	if err != nil {
		return nil, ResultOf(err), &Error{Result: ResultOf(err), Where: where, Reason: "reading " + describe(loc), Err: err}
	}
	if got := Sum(data); got != f.Checksum {
		s.log.Warn("artifact does not match its checksum", "model", model, "checksum", f.Checksum, "got", got, "source", describe(loc))
		return nil, ResultCorrupt, refusal(ResultCorrupt, where, "%s hashes to %s", describe(loc), got)
	}
	if cache {
		if err := writeBlob(set.CacheDir, f.Checksum, data); err != nil {
			s.log.Warn("artifact cache write failed; the artifact is served uncached", "checksum", f.Checksum, "err", err)
		}
	}
	return data, ResultFetched, nil
}

// allowed applies the allow flags; local files are always allowed.
func allowed(loc location, set Settings) error {
	switch {
	case loc.kind == locHTTP && !set.AllowHTTP:
		return errors.New("http(s) artifacts are off (dynamo.kv.allow_http_artifacts: false)")
	case loc.kind == locHF && !set.AllowHF:
		return errors.New("hf:// artifacts are off (dynamo.kv.allow_hf_artifacts: false)")
	}
	return nil
}

// describe names a location for logs without HF credentials.
func describe(loc location) string {
	switch loc.kind {
	case locHTTP:
		return loc.url
	case locHF:
		return "hf://" + loc.repo + "/" + loc.file + "@" + loc.rev
	}
	return loc.local
}

// noteUnpinned counts and logs an unpinned artifact once per (model,
// checksum), with what an operator needs to review it: a counter that moves
// on every request would say nothing the selection counter does not. The
// remembered pairs are capped; past the cap every sighting is counted and
// one line says further ones go unlogged.
func (s *Store) noteUnpinned(model string, f CheckedFile) {
	k := notedKey{model, f.Checksum}
	s.mu.Lock()
	_, seen := s.noted[k]
	full := len(s.noted) >= maxNotedUnpinned
	logFull := full && !seen && !s.notedFull
	if !seen && !full {
		s.noted[k] = struct{}{}
	}
	if logFull {
		s.notedFull = true
	}
	s.mu.Unlock()
	if !seen {
		s.metrics.Count(ResultUnpinned)
	}
	switch {
	case logFull:
		s.log.Warn("unpinned artifacts: further ones are counted but not logged", "remembered", maxNotedUnpinned)
	case !seen && !full:
		s.log.Warn("artifact not pinned: review it (b3sum) and add its checksum to dynamo.kv.pinned_artifacts to use it",
			"model", model, "checksum", f.Checksum, "path", quoteBounded(f.Path))
	}
}

// read fetches a location's bytes, stopping at MaxArtifactBytes.
func (s *Store) read(ctx context.Context, loc location) ([]byte, error) {
	switch loc.kind {
	case locLocal:
		return readLocal(loc.local)
	case locHTTP:
		return s.get(ctx, loc.url, "")
	}
	u, err := loc.hfURL(s.hfEndpoint())
	if err != nil {
		return nil, err
	}
	return s.get(ctx, u, s.getenv("HF_TOKEN"))
}

func (s *Store) hfEndpoint() string {
	if e := s.getenv("HF_ENDPOINT"); e != "" {
		return e
	}
	return DefaultHFEndpoint
}

func readLocal(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, refusal(ResultRefused, path, "not a regular file")
	}
	if info.Size() > MaxArtifactBytes {
		return nil, refusal(ResultTooLarge, path, "%d bytes, limit %d", info.Size(), MaxArtifactBytes)
	}
	return readCapped(f)
}

func (s *Store) get(ctx context.Context, url, bearer string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	if resp.ContentLength > MaxArtifactBytes {
		return nil, refusal(ResultTooLarge, "response", "Content-Length %d, limit %d", resp.ContentLength, MaxArtifactBytes)
	}
	return readCapped(resp.Body)
}

// readCapped reads at most MaxArtifactBytes; one byte more is too_large,
// found without holding more than the cap and that byte.
func readCapped(r io.Reader) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxArtifactBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxArtifactBytes {
		return nil, refusal(ResultTooLarge, "body", "more than %d bytes", MaxArtifactBytes)
	}
	return data, nil
}
