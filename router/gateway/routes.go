package gateway

import (
	"net/http"
	"time"

	"switchyard/router/config"
	"switchyard/router/metrics"
)

// Upstream paths; a backend's base URL is prepended.
const (
	pathChat       = "/v1/chat/completions"
	pathCompletion = "/v1/completions"
	pathModels     = "/v1/models"
)

// Handler serves the OpenAI-compatible routes, the Anthropic Messages
// ingress and the Responses ingress, and answers any other /v1 (or
// /anthropic) path with a 404 in the API's shape. Mount it at "/v1/"
// and "/anthropic/".
func (g *Gateway) Handler() http.Handler {
	mux := http.NewServeMux()
	chat := g.instrument(metrics.RouteChatCompletions, http.MethodPost, g.admit(false, g.inference(kindChat, pathChat)))
	completion := g.instrument(metrics.RouteCompletions, http.MethodPost, g.admit(false, g.inference(kindCompletion, pathCompletion)))
	mux.Handle(pathChat, chat)
	mux.Handle(pathCompletion, completion)
	mux.Handle(pathModels, g.instrument(metrics.RouteModels, http.MethodGet, http.HandlerFunc(g.models)))
	// The Anthropic routes check their method themselves, to refuse in
	// Anthropic's error shape.
	mux.Handle(pathMessages, g.instrument(metrics.RouteMessages, "", g.admit(true, g.messages())))
	mux.Handle(pathAnthropicMessages, g.instrument(metrics.RouteMessages, "", g.admit(true, g.messages())))
	mux.Handle(anthropicPrefix, g.instrument(metrics.RouteOther, "", http.HandlerFunc(anthropicNotFound)))
	mux.Handle(pathResponses, g.instrument(metrics.RouteResponses, http.MethodPost, g.admit(false, g.responses())))
	mux.Handle("/v1/", g.instrument(metrics.RouteOther, "", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, codeNotFound, "no such route: "+r.Method+" "+r.URL.Path)
	})))
	return StripDynamoHeaders(exactRoutes{
		exact: map[string]http.Handler{pathChat: chat, pathCompletion: completion},
		mux:   mux,
	})
}

// exactRoutes sends the busiest routes' exact paths straight to their
// handlers, sparing each request ServeMux's tree walk and its
// allocations; every other path goes through the mux.
type exactRoutes struct {
	exact map[string]http.Handler
	mux   *http.ServeMux
}

func (e exactRoutes) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h, ok := e.exact[r.URL.Path]; ok {
		h.ServeHTTP(w, r)
		return
	}
	e.mux.ServeHTTP(w, r)
}

// instrument counts and times a route, and refuses other methods with an
// OpenAI-shaped 405 (ServeMux's own would be plain text).
func (g *Gateway) instrument(route, method string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.inflight.Add(1)
		defer g.inflight.Done()
		start := time.Now()
		rec := &recorder{ResponseWriter: w}
		defer func() {
			status, took := rec.status(r), time.Since(start)
			g.metrics.ObserveRequest(route, status, took)
			if rec.note.refused != "" {
				g.metrics.CountRefused(rec.note.refused)
			}
			g.logEnd(r, route, status, &rec.note, took)
		}()
		if method != "" && r.Method != method {
			w.Header().Set("Allow", method)
			writeError(rec, http.StatusMethodNotAllowed, codeMethodNotAllowed, "use "+method+" for "+r.URL.Path)
			return
		}
		h.ServeHTTP(rec, r)
	})
}

// inference is the chat and text completion ingress.
func (g *Gateway) inference(k kind, path string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Stripped again here, so this route is safe even if mounted
		// without the global middleware.
		stripDynamo(r.Header)
		st := g.st.Load()
		key, ok := st.authenticate(r)
		if !ok {
			writeUnauthorized(w)
			return
		}
		body, held, p := g.readBody(w, r, st)
		defer g.bodies.give(held)
		if p != nil {
			p.write(w)
			return
		}
		if !g.parsing(r.Context()) {
			return // the client left
		}
		in, p := parseInbound(body, k, g.est)
		g.parsed()
		if p != nil {
			p.write(w)
			return
		}
		deadline := time.Now().Add(orDefault(st.cfg.Gateway.RequestTimeout.Std(), config.DefaultRequestTimeout))
		x := &exchange{
			g: g, st: st, w: w, r: r, ctx: r.Context(), deadline: deadline, key: key, in: in, route: path, path: path,
			disclose: wantsDisclosure(r.Header), now: g.clock.Now(), note: noteOf(w), chat: k == kindChat,
		}
		x.serve()
	})
}

func orDefaultInt(v, def int64) int64 {
	if v <= 0 {
		return def
	}
	return v
}

// recorder remembers the status written, for the request metrics. Unwrap
// lets http.ResponseController reach the connection (flush, deadlines).
type recorder struct {
	http.ResponseWriter
	code int
	note requestNote
}

func (r *recorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	return r.ResponseWriter.Write(p)
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// status is the code to count: 499 (nginx's "client closed request") when
// the client left before an answer was written.
func (r *recorder) status(req *http.Request) int {
	switch {
	case r.code != 0:
		return r.code
	case req.Context().Err() != nil:
		return 499
	}
	return http.StatusOK
}
