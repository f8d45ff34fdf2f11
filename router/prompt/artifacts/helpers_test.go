package artifacts

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

// origin is a real HTTP server standing in for a worker's metadata
// endpoint or the Hub. It serves bodies by path and records every request.
type origin struct {
	t   *testing.T
	srv *httptest.Server

	mu     sync.Mutex
	bodies map[string][]byte
	status map[string]int
	hits   map[string]int
	auth   []string
}

func newOrigin(t *testing.T) *origin {
	o := &origin{t: t, bodies: map[string][]byte{}, status: map[string]int{}, hits: map[string]int{}}
	o.srv = httptest.NewServer(http.HandlerFunc(o.serve))
	t.Cleanup(o.srv.Close)
	return o
}

func (o *origin) serve(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	o.hits[r.URL.EscapedPath()]++
	o.auth = append(o.auth, r.Header.Get("Authorization"))
	body, ok := o.bodies[r.URL.EscapedPath()]
	status := o.status[r.URL.EscapedPath()]
	o.mu.Unlock()
	switch {
	case status != 0:
		w.WriteHeader(status)
	case !ok:
		http.NotFound(w, r)
	default:
		_, _ = w.Write(body)
	}
}

// put serves body at path and returns its URL.
func (o *origin) put(path string, body []byte) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.bodies[path] = body
	delete(o.status, path)
	return o.srv.URL + path
}

func (o *origin) fail(path string, status int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.status[path] = status
}

func (o *origin) hitsAt(path string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.hits[path]
}

func (o *origin) total() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, h := range o.hits {
		n += h
	}
	return n
}

// newTestStore is a store on a fresh cache directory with its own metrics.
func newTestStore(t *testing.T, set Settings) (*Store, *Metrics) {
	if set.CacheDir == "" {
		set.CacheDir = t.TempDir()
	}
	m := NewMetrics(prometheus.NewRegistry())
	return NewStore(set, Options{Metrics: m}), m
}

func count(m *Metrics, r Result) int {
	return int(testutil.ToFloat64(m.Total.WithLabelValues(string(r))))
}

func pinned(sums ...Checksum) []string {
	out := make([]string, len(sums))
	for i, s := range sums {
		out[i] = string(s)
	}
	return out
}

// file returns a CheckedFile naming body at loc, size declared.
func file(loc string, body []byte) CheckedFile {
	return CheckedFile{Path: loc, Checksum: Sum(body), Size: uint64(len(body)), HasSize: true}
}

func writeFile(t *testing.T, body []byte) string {
	p := filepath.Join(t.TempDir(), "tokenizer.json")
	require.NoError(t, os.WriteFile(p, body, 0o600))
	return p
}

// cardJSON is a card naming a tokenizer and a template.
func cardJSON(tok, tmpl CheckedFile) []byte {
	cf := func(f CheckedFile) string {
		return fmt.Sprintf(`{"path":%q,"checksum":%q,"size":%d}`, f.Path, f.Checksum, f.Size)
	}
	return []byte(fmt.Sprintf(`{"display_name":"m","kv_cache_block_size":16,"tokenizer":{"hf_tokenizer_json":%s},`+
		`"prompt_formatter":{"hf_tokenizer_config_json":%s},"chat_template_file":null,"runtime_config":{}}`, cf(tok), cf(tmpl)))
}

func newTextLogger(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }

func mustRead(t *testing.T, p string) []byte {
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	return b
}
