// Command benchshim is a fast stand-in for `dynamo.frontend --router-mode
// direct` in proxy-overhead benchmarks: it answers chat completions at once
// with a fixed OpenAI-shaped body (or a short SSE stream), so what a load
// generator measures in front of it is the proxy, not the backend.
package main

import (
	"flag"
	"io"
	"log"
	"net/http"
	"strings"
)

const body = `{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"bench","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":8,"completion_tokens":1,"total_tokens":9}}`

const chunk = `data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"bench","choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":null}]}` + "\n\n"

func main() {
	addr := flag.String("addr", "127.0.0.1:9100", "listen address")
	flag.Parse()
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if strings.Contains(string(b), `"stream":true`) {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, chunk)
			io.WriteString(w, "data: [DONE]\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, body)
	})
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	log.Fatal(http.ListenAndServe(*addr, mux))
}
