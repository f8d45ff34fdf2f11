package upstream

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// captureServer answers every request 200 and sends the raw bytes of each
// (head and body) to got.
func captureServer(t *testing.T) (*rawServer, chan []byte) {
	got := make(chan []byte, 16)
	rs := newRawServer(t, func(t *testing.T, _ int, c net.Conn, br *bufio.Reader) {
		for {
			var raw bytes.Buffer
			length := 0
			for {
				line, err := br.ReadString('\n')
				if err != nil {
					return
				}
				raw.WriteString(line)
				if name, value, ok := strings.Cut(strings.TrimRight(line, "\r\n"), ": "); ok && strings.EqualFold(name, "Content-Length") {
					length, _ = strconv.Atoi(value)
				}
				if line == "\r\n" {
					break
				}
			}
			if _, err := io.CopyN(&raw, br, int64(length)); err != nil {
				return
			}
			got <- raw.Bytes()
			answerOK(c, "ok")
		}
	})
	return rs, got
}

// send sends h and reads the whole answer.
func send(t *testing.T, tr *Transport, key string, h *Head, body string) string {
	t.Helper()
	resp, err := tr.Send(context.Background(), key, h, []byte(body), time.Time{}, nil)
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	return string(b)
}

// A Head reaches the server as RoundTrip writes the same request (the
// same lines, Content-Length placed after the caller's), on the same
// pooled connection.
func TestHeadIsWrittenAsRoundTripWritesARequest(t *testing.T) {
	rs, got := captureServer(t)
	tr := newTestTransport(t)
	key := rs.ln.Addr().String()
	body := `{"model":"m"}`

	req := post(t, context.Background(), rs.url()+"/v1/chat/completions?a=b", body)
	req.Header.Set("Content-Type", "application/json")
	_, answer := roundTrip(t, tr, req)
	require.Equal(t, "ok", answer)
	want := <-got

	var h Head
	h.Start(http.MethodPost, key, "/v1/chat", "/completions", "?", "a=b")
	h.Add("Content-Type", "application/json")
	require.Equal(t, "ok", send(t, tr, key, &h, body))
	require.Equal(t, sortedLines(want), sortedLines(<-got))
	require.Equal(t, 1, rs.connections(), "both on one kept-alive connection")

	// The buffer went back with the send; the Head starts again.
	require.Nil(t, h.buf)
	h.Start(http.MethodPost, key, "/v1/completions")
	h.Add("X-Trace", "1")
	require.Equal(t, "ok", send(t, tr, key, &h, ""))
	require.Equal(t, "POST /v1/completions HTTP/1.1\r\nHost: "+key+"\r\nX-Trace: 1\r\nContent-Length: 0\r\n\r\n", string(<-got))
}

// What Send frames itself is never taken from the caller's lines.
func TestHeadSkipsTheHeadersSendWrites(t *testing.T) {
	rs, got := captureServer(t)
	tr := newTestTransport(t)
	key := rs.ln.Addr().String()
	var h Head
	h.Start(http.MethodPost, key, "/p")
	for _, name := range []string{"Host", "Content-Length", "Transfer-Encoding", "Trailer", "Connection", "content-length", "HOST"} {
		h.Add(name, "x")
	}
	h.Add("Accept", "text/event-stream")
	h.AddUint("X-Id", 18446744073709551615)
	h.AddUint("Content-Length", 7)
	require.Equal(t, "ok", send(t, tr, key, &h, "abc"))
	require.Equal(t, "POST /p HTTP/1.1\r\nHost: "+key+"\r\nAccept: text/event-stream\r\nX-Id: 18446744073709551615\r\nContent-Length: 3\r\n\r\nabc", string(<-got))
}

// A head that would break the request, or smuggle a second one, is
// refused before anything is dialled.
func TestHeadRefusesWhatWouldBreakTheRequest(t *testing.T) {
	rs, _ := captureServer(t)
	tr := newTestTransport(t)
	key := rs.ln.Addr().String()
	for name, build := range map[string]func(h *Head){
		"method with a space":   func(h *Head) { h.Start("PO ST", key, "/p") },
		"CONNECT":               func(h *Head) { h.Start(http.MethodConnect, key, "/p") },
		"target with a space":   func(h *Head) { h.Start(http.MethodPost, key, "/p", " q") },
		"empty target":          func(h *Head) { h.Start(http.MethodPost, key) },
		"target not a path":     func(h *Head) { h.Start(http.MethodPost, key, "p") },
		"host with a line feed": func(h *Head) { h.Start(http.MethodPost, key+"\r\nX: y", "/p") },
		"name with a colon":     func(h *Head) { h.Start(http.MethodPost, key, "/p"); h.Add("X:Y", "1") },
		"value with a CRLF": func(h *Head) {
			h.Start(http.MethodPost, key, "/p")
			h.Add("X-A", "1\r\nX-Injected: 2")
		},
		"never started": func(h *Head) {},
	} {
		var h Head
		build(&h)
		_, err := tr.Send(context.Background(), key, &h, nil, time.Time{}, nil)
		require.Error(t, err, name)
		require.Nil(t, h.buf, "%s: the buffer goes back on failure too", name)
	}
	require.Equal(t, 0, rs.connections())
}

// The exchange deadline ends a wait for the answer with its cause, as it
// does for RoundTrip.
func TestSendDeadlineWrapsItsCause(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	rs := newRawServer(t, func(t *testing.T, _ int, c net.Conn, br *bufio.Reader) {
		if req, _ := readRequest(br); req != nil {
			<-release
		}
	})
	tr := newTestTransport(t)
	key := rs.ln.Addr().String()
	backendTimeout := errors.New("backend timeout")
	var h Head
	h.Start(http.MethodPost, key, "/p")
	start := time.Now()
	_, err := tr.Send(context.Background(), key, &h, []byte("{}"), time.Now().Add(50*time.Millisecond), backendTimeout)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, backendTimeout)
	require.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond)
}

// sortedLines is a request's request line, its header lines sorted, and
// its body.
func sortedLines(raw []byte) []string {
	head, body, _ := strings.Cut(string(raw), "\r\n\r\n")
	lines := strings.Split(head, "\r\n")
	slices.Sort(lines[1:])
	return append(lines, body)
}

// watchingContext is a context that runs callbacks itself, as the builtin
// server's request contexts do (Watch, Unwatch): the exchange registers
// its interrupt there instead of through context.AfterFunc.
type watchingContext struct {
	context.Context
	mu      sync.Mutex
	funcs   map[uint64]func()
	next    uint64
	watched int
	err     error
}

func (c *watchingContext) Watch(f func()) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.next++
	c.watched++
	c.funcs[c.next] = f
	return c.next
}

func (c *watchingContext) Unwatch(key uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.funcs[key]
	delete(c.funcs, key)
	return ok
}

func (c *watchingContext) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *watchingContext) cancel() {
	c.mu.Lock()
	c.err = context.Canceled
	funcs := c.funcs
	c.funcs = map[uint64]func(){}
	c.mu.Unlock()
	for _, f := range funcs {
		go f()
	}
}

// An exchange registers its interrupt with a watching context, takes it
// back when the answer ends, and is cut short when the context ends.
func TestSendRegistersWithAWatchingContext(t *testing.T) {
	arrived := make(chan struct{}, 1)
	release := make(chan struct{})
	defer close(release)
	rs := newRawServer(t, func(t *testing.T, n int, c net.Conn, br *bufio.Reader) {
		for {
			req, body := readRequest(br)
			if req == nil {
				return
			}
			if string(body) == "hang" {
				arrived <- struct{}{}
				<-release
				return
			}
			answerOK(c, string(body))
		}
	})
	tr := newTestTransport(t)
	key := rs.ln.Addr().String()
	ctx := &watchingContext{Context: context.Background(), funcs: map[uint64]func(){}}

	var h Head
	h.Start(http.MethodPost, key, "/p")
	resp, err := tr.Send(ctx, key, &h, []byte("ok"), time.Time{}, nil)
	require.NoError(t, err)
	_, err = io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, 1, ctx.watched)
	require.Empty(t, ctx.funcs, "the answer's end unregistered the interrupt")
	require.Equal(t, 1, tr.pool.idleCount(key))

	go func() {
		<-arrived
		ctx.cancel()
	}()
	h.Start(http.MethodPost, key, "/p")
	_, err = tr.Send(ctx, key, &h, []byte("hang"), time.Time{}, nil)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 0, tr.pool.idleCount(key), "an interrupted connection is not kept")
}
