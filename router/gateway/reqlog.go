package gateway

import (
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"switchyard/router/picker"
)

// requestNote gathers, as a request goes, what its log line says if it
// fails: the error it was answered with, and the last upstream attempt.
// The nil note (a handler served without instrument) notes nothing.
type requestNote struct {
	code, message string
	// streamFailed: a stream already answered 200 ended with an error
	// event.
	streamFailed bool
	// refused is the reason the request was refused before routing, if
	// it was (a metrics.Refused* value).
	refused string

	backend        string
	upstreamStatus int // 0 when no answer came
	pinned, paired bool
	workerID       uint64
	prefillID      uint64
}

// noteOf finds the note of the request w answers, through any wrappers.
func noteOf(w http.ResponseWriter) *requestNote {
	for {
		if rec, ok := w.(*recorder); ok {
			return &rec.note
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return nil
		}
		w = u.Unwrap()
	}
}

// answered notes the error the client is answered with.
func (n *requestNote) answered(code, msg string) {
	if n != nil {
		n.code, n.message = code, msg
	}
}

// streamEnded notes the error event that ended an opened stream.
func (n *requestNote) streamEnded(code, msg string) {
	if n != nil {
		n.answered(code, msg)
		n.streamFailed = true
	}
}

// attempt notes an upstream attempt: its backend, its pins (sel, when
// pinned) and the status it answered (0 for none).
func (n *requestNote) attempt(backend string, sel *picker.Selection, status int) {
	if n == nil {
		return
	}
	n.backend, n.upstreamStatus = backend, status
	n.pinned, n.paired = sel != nil, sel != nil && sel.HasPrefill && !sel.Bypass
	if sel != nil {
		n.workerID, n.prefillID = sel.Decode.WorkerID, sel.Prefill.WorkerID
	}
}

// maxLoggedPath bounds the client-chosen path repeated in a log line.
const maxLoggedPath = 256

// logEnd writes the one line a failed request leaves: any answer of 400
// or more, or a stream ended by an error event. A client that left
// (499) is not a failure of the gateway's; it is logged at debug level.
func (g *Gateway) logEnd(r *http.Request, route string, status int, n *requestNote, took time.Duration) {
	failed := status >= 400 && status != 499 || n.streamFailed
	if !failed && status != 499 {
		return
	}
	path := r.URL.Path
	if len(path) > maxLoggedPath {
		path = path[:maxLoggedPath] + "..."
	}
	attrs := []slog.Attr{
		slog.String("route", route), slog.String("method", r.Method), slog.String("path", path),
		slog.Int("status", status), slog.Duration("duration", took),
	}
	if n.code != "" {
		attrs = append(attrs, slog.String("code", n.code), slog.String("error", n.message))
	}
	if n.backend != "" {
		attrs = append(attrs, slog.String("backend", n.backend), slog.Int("upstream_status", n.upstreamStatus))
	}
	if n.pinned {
		attrs = append(attrs, slog.String("worker_id", strconv.FormatUint(n.workerID, 10)))
	}
	if n.paired {
		attrs = append(attrs, slog.String("prefill_id", strconv.FormatUint(n.prefillID, 10)))
	}
	if !failed {
		g.log.LogAttrs(r.Context(), slog.LevelDebug, "client left before the answer", attrs...)
		return
	}
	g.log.LogAttrs(r.Context(), slog.LevelWarn, "request failed", attrs...)
}
