package gateway

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"switchyard/router/config"
)

// logRecord is one captured log line, its attributes flattened.
type logRecord struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

// captureHandler is a real slog.Handler that keeps every record.
type captureHandler struct {
	mu      sync.Mutex
	records []logRecord
}

func (h *captureHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *captureHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *captureHandler) WithGroup(string) slog.Handler            { return h }

func (h *captureHandler) Handle(_ context.Context, r slog.Record) error {
	rec := logRecord{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.String()
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, rec)
	return nil
}

// warnings lists the records at WARN or above.
func (h *captureHandler) warnings() []logRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []logRecord
	for _, r := range h.records {
		if r.level >= slog.LevelWarn {
			out = append(out, r)
		}
	}
	return out
}

func withLog(h slog.Handler) func(*fixtureOptions) {
	return func(o *fixtureOptions) { o.log = slog.New(h) }
}

// A failed request leaves exactly one WARN line, however many attempts it
// made, naming its route, status, code, backend, pins and the upstream's
// status; attempts are logged at debug level; a served request leaves no
// warning.
func TestFailedRequestIsLoggedOnce(t *testing.T) {
	live := newUpstream(t, "dyn-live")
	live.setRespond(respondStatus(http.StatusInternalServerError, "engine exploded"))
	dead := config.DefaultBackend()
	dead.Name, dead.URL, dead.Models = "dyn-dead", deadURL(t), []string{clientModel}
	vllm := newUpstream(t, "vllm")
	logs := &captureHandler{}
	f := newFixture(t, dynamoConfig([]string{"dyn-dead", "dyn-live"}, dead, backendFor(live, clientModel), backendFor(vllm, plainModel)),
		pairWorkers(clientModel), withLog(logs))

	resp, body := f.post(pathChat, chatBody(plainModel, false), nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	resp, body = f.post(pathChat, chatBody(clientModel, false), nil)
	require.Equal(t, http.StatusBadGateway, resp.StatusCode, string(body))
	require.Len(t, append(live.requests(), vllm.requests()...), 2)

	eventually(t, "the log line", func() bool { return len(logs.warnings()) > 0 })
	w := logs.warnings()
	require.Len(t, w, 1, "one line per failed request, none for the served one")
	assert.Equal(t, "request failed", w[0].msg)
	assert.Equal(t, map[string]string{
		"route": "chat_completions", "method": "POST", "path": pathChat, "status": "502", "duration": w[0].attrs["duration"],
		"code": codeDecodeFailed, "error": "the Dynamo frontend answered HTTP 500 Internal Server Error",
		"backend": "dyn-live", "upstream_status": "500", "worker_id": "9007199254740993", "prefill_id": "18446744073709551557",
	}, w[0].attrs)

	debug := 0
	logs.mu.Lock()
	for _, r := range logs.records {
		if r.level == slog.LevelDebug && r.attrs["backend"] != "" {
			debug++
		}
	}
	logs.mu.Unlock()
	assert.GreaterOrEqual(t, debug, 3, "each attempt (dead, live, vllm) at debug level")

	// Refused before routing: still one line, with the gateway's code.
	resp, _ = f.post(pathChat, `{"model":`, nil)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	eventually(t, "the second line", func() bool { return len(logs.warnings()) == 2 })
	second := logs.warnings()[1]
	assert.Equal(t, "400", second.attrs["status"])
	assert.Equal(t, codeInvalidRequest, second.attrs["code"])
	assert.Empty(t, second.attrs["backend"])
}
