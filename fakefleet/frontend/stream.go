package frontend

import (
	"encoding/json"
	"net/http"
)

// sse writes an event stream. The head goes out with the first event, so
// a failure before any token still gets a proper error status (which the
// router's fallback relies on) rather than an error inside a 200 stream.
type sse struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
}

func (s *sse) send(v any) error { return s.named("", v) }

// named sends v as an event with an event: line naming it, as the
// Responses API's events have; "" sends a bare data event.
func (s *sse) named(event string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.write(event, b)
}

func (s *sse) raw(data []byte) error { return s.write("", data) }

func (s *sse) write(event string, data []byte) error {
	if !s.started {
		s.started = true
		h := s.w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		s.w.WriteHeader(http.StatusOK)
	}
	buf := make([]byte, 0, len(event)+len(data)+16)
	if event != "" {
		buf = append(append(append(buf, "event: "...), event...), '\n')
	}
	buf = append(append(append(buf, "data: "...), data...), "\n\n"...)
	if _, err := s.w.Write(buf); err != nil {
		return err
	}
	return s.rc.Flush()
}

func (f *Frontend) streamed(w http.ResponseWriter, r *http.Request, in input, pl plan) {
	resp := f.newResponse(in)
	s := &sse{w: w, rc: http.NewResponseController(w)}
	first := true
	res, err := f.generate(r.Context(), pl, in, func(text string) error {
		err := s.send(resp.chunk(text, first))
		first = false
		return err
	})
	switch {
	case err == nil:
	case !s.started:
		f.failed(w, r, err)
		return
	default:
		// Mid-stream: the status is sent, so the error travels as an event
		// and the stream ends without [DONE].
		if r.Context().Err() == nil {
			_ = s.send(errorBody{errorDetail{Message: answer(err).msg, Type: "server_error", Code: "internal_error"}})
		}
		return
	}
	if s.send(resp.last(res.FinishReason)) != nil {
		return
	}
	if in.includeUsage && s.send(resp.usageChunk(res)) != nil {
		return
	}
	_ = s.raw([]byte("[DONE]"))
}
