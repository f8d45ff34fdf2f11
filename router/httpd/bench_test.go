package httpd

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// BenchmarkServe answers a small JSON POST on kept-alive loopback
// connections, 64 at once, from this server and from net/http's, in the
// same run. The client is a raw connection that writes the request and
// reads the answer by its Content-Length, so it costs little and the same
// for both; "cpu-µs/op" is the whole process's CPU time per request.
func BenchmarkServe(b *testing.B) {
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"Say ok in one word, please."}],"max_tokens":1}`)
	answer := []byte(`{"id":"x","choices":[{"index":0,"message":{"role":"assistant","content":"ok"}}]}`)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(answer)
	})
	request := []byte("POST /v1/chat/completions HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + string(body))
	for _, tc := range []struct {
		name  string
		serve func(net.Listener) (stop func())
	}{
		{"httpd", func(ln net.Listener) func() {
			s := &Server{Handler: h}
			go func() { _ = s.Serve(ln) }()
			return func() { _ = s.Close() }
		}},
		{"net_http", func(ln net.Listener) func() {
			s := &http.Server{Handler: h}
			go func() { _ = s.Serve(ln) }()
			return func() { _ = s.Close() }
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			stop := tc.serve(ln)
			defer stop()
			b.SetParallelism(32) // 64 clients on 2 cores
			b.ReportAllocs()
			before := cpuTime()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				c, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					b.Error(err)
					return
				}
				defer c.Close()
				br := bufio.NewReader(c)
				for pb.Next() {
					if _, err := c.Write(request); err != nil {
						b.Error(err)
						return
					}
					if err := readAnswer(br); err != nil {
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

var contentLength = []byte("content-length:")

// readAnswer reads one 200 answer and its Content-Length body.
func readAnswer(br *bufio.Reader) error {
	n := -1
	for first := true; ; first = false {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return err
		}
		if first && !bytes.HasPrefix(line, []byte("HTTP/1.1 200 ")) {
			return io.ErrUnexpectedEOF
		}
		if len(line) <= 2 {
			break
		}
		if len(line) > len(contentLength) && bytes.EqualFold(line[:len(contentLength)], contentLength) {
			n, err = strconv.Atoi(string(bytes.TrimSpace(line[len(contentLength):])))
			if err != nil {
				return err
			}
		}
	}
	if n < 0 {
		return io.ErrUnexpectedEOF
	}
	_, err := br.Discard(n)
	return err
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
