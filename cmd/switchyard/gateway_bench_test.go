package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// benchShimAnswer is the fixed chat completion the in-process shim
// answers, as hack/benchshim does.
const benchShimAnswer = `{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"bench","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":8,"completion_tokens":1,"total_tokens":9}}`

// benchChat is the request hack/bench-gateway.sh sends.
const benchChat = `{"model":"Qwen/Qwen3-0.6B","messages":[{"role":"user","content":"Say ok in one word, please."}],"max_tokens":1}`

// benchConns is the number of client connections, as in the 64-connection
// row of hack/bench-gateway.sh.
const benchConns = 64

// BenchmarkGatewayChat measures what the router adds to a buffered chat
// completion: the demo stack (embedded etcd, 2 prefill and 2 decode fake
// workers) in front of an in-process stand-in for the shim, driven by
// benchConns concurrent clients, with KV-aware routing (router_kv: each
// prompt rendered and tokenized) and without (router_load). "direct"
// sends the same request to the shim itself, so the router's own cost
// per request is the difference (allocations, bytes and the process's
// CPU time per request, reported as cpu-µs/op).
func BenchmarkGatewayChat(b *testing.B) {
	shim := startBenchShim(b)
	targets := []struct{ name, base string }{{"direct", shim}}
	for _, kv := range []bool{true, false} {
		d, err := startDemo(context.Background(), demoOptions{addr: "127.0.0.1:0", shimURL: shim, prefills: 2, decodes: 2,
			speedup: 10, drain: time.Second, kv: kv}, slog.New(slog.DiscardHandler))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(d.stop)
		waitForRouted(b, d.base())
		name := "router_kv"
		if !kv {
			name = "router_load"
		}
		targets = append(targets, struct{ name, base string }{name, d.base()})
	}

	for _, target := range targets {
		b.Run(target.name, func(b *testing.B) {
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: benchConns, DisableCompression: true}}
			defer client.CloseIdleConnections()
			url := target.base + "/v1/chat/completions"
			b.SetParallelism(max(1, benchConns/runtime.GOMAXPROCS(0)))
			b.ReportAllocs()
			before := cpuTime()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := postChat(client, url); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64((cpuTime()-before).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

// startBenchShim serves the fixed answer on loopback and returns its URL.
func startBenchShim(b *testing.B) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, benchShimAnswer)
	}), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// waitForRouted waits until the router pins and answers a request.
func waitForRouted(b *testing.B, base string) {
	b.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := postChat(http.DefaultClient, base+"/v1/chat/completions")
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("the router did not answer: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func postChat(client *http.Client, url string) error {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(benchChat))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return &statusError{resp.StatusCode}
	}
	return nil
}

type statusError struct{ code int }

func (e *statusError) Error() string { return "HTTP " + http.StatusText(e.code) }

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
