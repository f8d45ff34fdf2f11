// Command benchload offers HTTP POSTs at a fixed rate (an open loop) and
// reports the latency percentiles of their answers.
//
// A closed-loop generator such as wrk sends each connection's next request
// when the last answer arrives, so at saturation its latencies restate the
// target's throughput (Little's law: connections / requests per second) and
// a stall delays the requests that would have been sent during it without
// recording them. Here request i is released i/rate after the start (to the
// timer's resolution) and its latency runs from its release to the end of
// its answer: a request that waited for a free connection counts the wait. Below every
// target's capacity, the difference between two targets' percentiles is
// what one adds to the other at that load.
//
// The client speaks just enough HTTP/1.1 for a keep-alive benchmark: one
// prebuilt request, answers framed by Content-Length (a chunked answer is an
// error), a new connection after any failure.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	target := flag.String("url", "http://127.0.0.1:9100/v1/chat/completions", "where to POST")
	body := flag.String("body", `{"model":"Qwen/Qwen3-0.6B","messages":[{"role":"user","content":"Say ok in one word, please."}],"max_tokens":1}`, "request body (JSON)")
	rate := flag.Float64("rate", 5000, "requests offered per second")
	conns := flag.Int("conns", 64, "connections (at most this many requests in flight)")
	duration := flag.Duration("duration", 10*time.Second, "how long requests are offered, after the warm-up")
	warmup := flag.Duration("warmup", time.Second, "offered at the same rate first, not reported")
	flag.Parse()
	if *rate <= 0 || *conns <= 0 || *duration <= 0 {
		log.Fatal("rate, conns and duration must be positive")
	}
	u, err := url.Parse(*target)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		log.Fatalf("url %q: want http://host:port/path", *target)
	}
	req := fmt.Appendf(nil, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		u.RequestURI(), u.Host, len(*body), *body)

	r := run(u.Host, req, *rate, *conns, *warmup, *duration)
	fmt.Println(r)
}

// result is one run's summary, printed as "key=value" fields.
type result struct {
	offered, answered, failed, non2xx int
	seconds                           float64
	latencies                         []time.Duration // of answered requests, sorted
}

func (r result) String() string {
	q := func(p float64) string {
		if len(r.latencies) == 0 {
			return "nan"
		}
		i := min(int(p*float64(len(r.latencies))), len(r.latencies)-1)
		return strconv.FormatFloat(float64(r.latencies[i])/1e6, 'f', 3, 64)
	}
	return fmt.Sprintf("offered=%d answered=%d failed=%d non2xx=%d rps=%.0f p50_ms=%s p90_ms=%s p99_ms=%s p999_ms=%s max_ms=%s",
		r.offered, r.answered, r.failed, r.non2xx, float64(r.answered)/r.seconds, q(0.50), q(0.90), q(0.99), q(0.999), q(1))
}

// run offers requests for warmup+duration and summarises those released
// after the warm-up.
func run(addr string, req []byte, rate float64, conns int, warmup, duration time.Duration) result {
	interval := time.Duration(float64(time.Second) / rate)
	total := int((warmup + duration) / interval)
	skip := int(warmup / interval)
	// Release times; the buffer holds every request, so the pacer never
	// waits for a worker and a slow target sees its queue grow.
	due := make(chan release, total)
	var (
		mu  sync.Mutex
		res = result{offered: total - skip, latencies: make([]time.Duration, 0, total-skip)}
		wg  sync.WaitGroup
	)
	start := time.Now()
	for range conns {
		wg.Go(func() {
			w := worker{addr: addr, req: req}
			defer w.close()
			var mine []time.Duration
			failed, non2xx := 0, 0
			for r := range due {
				status, err := w.do()
				switch {
				case !r.counted:
				case err != nil:
					failed++
				default:
					if status/100 != 2 {
						non2xx++
					}
					mine = append(mine, time.Since(r.at))
				}
			}
			mu.Lock()
			res.latencies = append(res.latencies, mine...)
			res.failed += failed
			res.non2xx += non2xx
			mu.Unlock()
		})
	}
	// Release each request at its time, in batches of what is due so a
	// high rate needs no sleep per request.
	// A batch's latencies run from its release: the sleep overshoots by up
	// to the timer's resolution, which is the generator's delay, not the
	// target's.
	for i := 0; i < total; {
		released := time.Now()
		now := released.Sub(start)
		for ; i < total && time.Duration(i)*interval <= now; i++ {
			due <- release{at: released, counted: i >= skip}
		}
		time.Sleep(time.Duration(i)*interval - now)
	}
	close(due)
	wg.Wait()
	res.answered = len(res.latencies)
	res.seconds = duration.Seconds()
	slices.Sort(res.latencies)
	return res
}

// release is one request's release time; counted is false in the warm-up.
type release struct {
	at      time.Time
	counted bool
}

// worker sends requests on one keep-alive connection, redialled after a
// failure.
type worker struct {
	addr string
	req  []byte
	conn net.Conn
	br   *bufio.Reader
}

func (w *worker) close() {
	if w.conn != nil {
		_ = w.conn.Close()
	}
}

// do sends the request and reads the whole answer, returning its status.
func (w *worker) do() (int, error) {
	if w.conn == nil {
		c, err := net.Dial("tcp", w.addr)
		if err != nil {
			return 0, err
		}
		w.conn, w.br = c, newReader(c)
	}
	status, err := w.exchange()
	if err != nil {
		w.close()
		w.conn = nil
		if reported.Add(1) <= 3 { // the first few say why; the count says how often
			fmt.Fprintln(os.Stderr, "benchload:", err)
		}
	}
	return status, err
}

// reported counts failures printed.
var reported atomic.Int32

func newReader(c net.Conn) *bufio.Reader { return bufio.NewReaderSize(c, 16<<10) }

var errChunked = errors.New("chunked answer (unsupported)")

func (w *worker) exchange() (int, error) {
	if _, err := w.conn.Write(w.req); err != nil {
		return 0, err
	}
	line, err := w.br.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	// "HTTP/1.1 200 OK"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return 0, fmt.Errorf("bad status line %q", line)
	}
	status := 0
	for _, d := range line[9:12] {
		if d < '0' || d > '9' {
			return 0, fmt.Errorf("bad status line %q", line)
		}
		status = status*10 + int(d-'0')
	}
	length, closing := -1, false
	for {
		line, err := w.br.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		name, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length, err = strconv.Atoi(string(value)); err != nil || length < 0 {
				return 0, fmt.Errorf("bad Content-Length %q", value)
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			return 0, errChunked
		case bytes.EqualFold(name, []byte("Connection")):
			closing = bytes.EqualFold(value, []byte("close"))
		}
	}
	if length < 0 {
		return 0, errors.New("answer without Content-Length")
	}
	if _, err := w.br.Discard(length); err != nil {
		return 0, err
	}
	if closing {
		w.close()
		w.conn = nil
	}
	return status, nil
}
