package httpd

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// echo answers with the request's method, path, query and body.
var echo = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("X-Host", r.Host)
	fmt.Fprintf(w, "%s %s %s %s", r.Method, r.URL.Path, r.URL.RawQuery, b)
})

// A real client's requests, answered on one kept-alive connection: short
// answers carry a Content-Length, long ones are chunked, and a Date is set.
func TestServesAKeepAliveClient(t *testing.T) {
	ts := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/long" {
			_, _ = io.WriteString(w, strings.Repeat("x", 3*heldMax))
			return
		}
		echo(w, r)
	}))
	c := client(t)
	var reused []bool
	for i := range 3 {
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
			GotConn: func(info httptrace.GotConnInfo) { reused = append(reused, info.Reused) },
		})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, ts.url("/v1/chat?n=1"), strings.NewReader(fmt.Sprint("body ", i)))
		require.NoError(t, err)
		resp, err := c.Do(req)
		require.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Equal(t, fmt.Sprint("POST /v1/chat n=1 body ", i), string(b))
		require.Equal(t, int64(len(b)), resp.ContentLength)
		require.Equal(t, "text/plain", resp.Header.Get("Content-Type"))
		require.Equal(t, ts.addr, resp.Header.Get("X-Host"))
		require.NotEmpty(t, resp.Header.Get("Date"))
	}
	require.Equal(t, []bool{false, true, true}, reused)

	resp, err := c.Get(ts.url("/long"))
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, 3*heldMax, len(b))
	require.Equal(t, []string{"chunked"}, resp.TransferEncoding)
	require.Equal(t, "text/plain; charset=utf-8", resp.Header.Get("Content-Type"), "sniffed")
}

// A chunked request body is read whole; chunk extensions and trailers
// are accepted and dropped.
func TestReadsChunkedBodies(t *testing.T) {
	ts := serve(t, echo)
	c, br := raw(t, ts)
	_, err := io.WriteString(c, "POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"+
		"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nTrailer-Field: x\r\n\r\n")
	require.NoError(t, err)
	resp, body := readResponse(t, br, http.MethodPost)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "POST /c  hello world", body)

	// The same through a client streaming a body of unknown length.
	pr, pw := io.Pipe()
	go func() {
		_, _ = io.WriteString(pw, "streamed ")
		_, _ = io.WriteString(pw, "body")
		_ = pw.Close()
	}()
	got, err := client(t).Post(ts.url("/s"), "text/plain", pr)
	require.NoError(t, err)
	b, _ := io.ReadAll(got.Body)
	require.NoError(t, got.Body.Close())
	require.Equal(t, "POST /s  streamed body", string(b))
}

// A client that waits for "100 Continue" gets it when the handler reads
// the body, and not before.
func TestExpectContinue(t *testing.T) {
	ts := serve(t, echo)
	c, br := raw(t, ts)
	_, err := io.WriteString(c, "POST /e HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
	require.NoError(t, err)
	line, err := br.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "HTTP/1.1 100 Continue\r\n", line)
	blank, err := br.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "\r\n", blank)
	_, err = io.WriteString(c, "ping")
	require.NoError(t, err)
	resp, body := readResponse(t, br, http.MethodPost)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "POST /e  ping", body)
}

// A handler that never reads a body the client has not sent (it waits
// for 100 Continue) ends the connection after its answer.
func TestUnsentBodyClosesTheConnection(t *testing.T) {
	ts := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
	}))
	c, br := raw(t, ts)
	_, err := io.WriteString(c, "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1000\r\nExpect: 100-continue\r\n\r\n")
	require.NoError(t, err)
	resp, _ := readResponse(t, br, http.MethodPost)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.True(t, resp.Close, "Connection: close")
	_, err = br.ReadByte()
	require.ErrorIs(t, err, io.EOF)
}

// Flush sends what was written at once, so a stream reaches the client
// event by event.
func TestFlushStreams(t *testing.T) {
	next := make(chan struct{})
	ts := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for i := range 3 {
			fmt.Fprintf(w, "data: %d\n\n", i)
			if err := rc.Flush(); err != nil {
				return
			}
			select {
			case <-next:
			case <-r.Context().Done():
				return
			}
		}
	}))
	resp, err := client(t).Get(ts.url("/stream"))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, []string{"chunked"}, resp.TransferEncoding)
	buf := make([]byte, 64)
	for i := range 3 {
		n, err := io.ReadAtLeast(resp.Body, buf, len("data: 0\n\n"))
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("data: %d\n\n", i), string(buf[:n]))
		next <- struct{}{}
	}
	rest, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Empty(t, rest)
}

// Requests written back to back in one write are answered in order.
func TestPipelinedRequests(t *testing.T) {
	ts := serve(t, echo)
	c, br := raw(t, ts)
	_, err := io.WriteString(c, "GET /one HTTP/1.1\r\nHost: h\r\n\r\n"+
		"POST /two HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc"+
		"GET /three?q HTTP/1.1\r\nHost: h\r\n\r\n")
	require.NoError(t, err)
	for _, want := range []string{"GET /one  ", "POST /two  abc", "GET /three q "} {
		_, body := readResponse(t, br, http.MethodGet)
		require.Equal(t, want, body)
	}
}

// HTTP/1.0: the connection closes after the answer unless the client asks
// for keep-alive; a stream ends with the connection.
func TestHTTP10(t *testing.T) {
	ts := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/flush" {
			_, _ = io.WriteString(w, "part")
			w.(http.Flusher).Flush()
		}
		_, _ = io.WriteString(w, "end")
	}))
	c, br := raw(t, ts)
	_, err := io.WriteString(c, "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
	require.NoError(t, err)
	resp, body := readResponse(t, br, http.MethodGet)
	require.Equal(t, "end", body)
	require.Equal(t, "HTTP/1.0", resp.Proto)
	require.False(t, resp.Close)
	_, err = io.WriteString(c, "GET /flush HTTP/1.0\r\n\r\n")
	require.NoError(t, err)
	resp, body = readResponse(t, br, http.MethodGet)
	require.Equal(t, "partend", body)
	require.True(t, resp.Close)
	require.Equal(t, int64(-1), resp.ContentLength, "delimited by the close")
}

// HEAD and 204 answers carry no body; HEAD keeps a declared length.
func TestAnswersWithoutBodies(t *testing.T) {
	ts := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/none" {
			w.WriteHeader(http.StatusNoContent)
			_, err := io.WriteString(w, "x")
			require.ErrorIs(t, err, http.ErrBodyNotAllowed)
			return
		}
		w.Header().Set("Content-Length", "5")
		_, _ = io.WriteString(w, "hello")
	}))
	c, br := raw(t, ts)
	_, err := io.WriteString(c, "HEAD / HTTP/1.1\r\nHost: h\r\n\r\nGET /none HTTP/1.1\r\nHost: h\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n")
	require.NoError(t, err)
	resp, body := readResponse(t, br, http.MethodHead)
	require.Equal(t, int64(5), resp.ContentLength)
	require.Empty(t, body)
	resp, body = readResponse(t, br, http.MethodGet)
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	require.Empty(t, body)
	_, body = readResponse(t, br, http.MethodGet)
	require.Equal(t, "hello", body, "the connection is still in step")
}

// A handler writing past its declared length is refused; one writing
// less leaves a connection the client sees end.
func TestDeclaredLengthIsHeld(t *testing.T) {
	ts := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "4")
		if r.URL.Path == "/over" {
			_, err := io.WriteString(w, "12345")
			require.ErrorIs(t, err, http.ErrContentLength)
		}
		_, _ = io.WriteString(w, "12")
	}))
	c, br := raw(t, ts)
	_, err := io.WriteString(c, "GET /over HTTP/1.1\r\nHost: h\r\n\r\n")
	require.NoError(t, err)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	_, err = io.ReadAll(resp.Body)
	require.ErrorIs(t, err, io.ErrUnexpectedEOF, "2 of the 4 bytes, then the close")
}

// Header values with line breaks cannot add headers.
func TestHeaderValuesCannotSplitTheHead(t *testing.T) {
	ts := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Echo", "a\r\nX-Injected: 1")
		w.Header().Set("Bad Name", "v")
	}))
	resp, err := client(t).Get(ts.url("/"))
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, "a  X-Injected: 1", resp.Header.Get("X-Echo"))
	require.Empty(t, resp.Header.Get("X-Injected"))
	require.Empty(t, resp.Header.Values("Bad Name"))
}

// Malformed or unsupported heads are answered with their status, counted
// by reason, and the connection closed.
func TestRefusesBadHeads(t *testing.T) {
	ts := serve(t, echo, func(s *Server) { s.MaxHeaderBytes = 4 << 10 })
	for _, tc := range []struct {
		name, head string
		status     int
		reason     string
	}{
		{"request line", "GARBAGE\r\n\r\n", 400, ReasonMalformed},
		{"version", "GET / HTTP/2.0\r\nHost: h\r\n\r\n", 505, ReasonHTTPVersion},
		{"no host", "GET / HTTP/1.1\r\n\r\n", 400, ReasonMalformed},
		{"two hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, ReasonMalformed},
		{"folded", "GET / HTTP/1.1\r\nHost: h\r\nX: a\r\n b\r\n\r\n", 400, ReasonMalformed},
		{"header name", "GET / HTTP/1.1\r\nHost: h\r\nBad Name: v\r\n\r\n", 400, ReasonMalformed},
		{"control in value", "GET / HTTP/1.1\r\nHost: h\r\nX: a\x00b\r\n\r\n", 400, ReasonMalformed},
		{"length and chunked", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", 400, ReasonMalformed},
		{"conflicting lengths", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n", 400, ReasonMalformed},
		{"negative length", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n", 400, ReasonMalformed},
		{"coding", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501, ReasonTransferEncoding},
		{"expect", "POST / HTTP/1.1\r\nHost: h\r\nExpect: 200-ok\r\n\r\n", 417, ReasonExpectation},
		{"target", "GET /a%zz HTTP/1.1\r\nHost: h\r\n\r\n", 400, ReasonMalformed},
		{"too large", "GET / HTTP/1.1\r\nHost: h\r\nX: " + strings.Repeat("v", 8<<10) + "\r\n\r\n", 431, ReasonHeadTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(ts.refused())
			c, br := raw(t, ts)
			_, err := io.WriteString(c, tc.head)
			require.NoError(t, err)
			resp, _ := readResponse(t, br, http.MethodGet)
			require.Equal(t, tc.status, resp.StatusCode)
			require.True(t, resp.Close)
			_, err = br.ReadByte()
			require.ErrorIs(t, err, io.EOF)
			require.Equal(t, []string{tc.reason}, ts.refused()[before:])
		})
	}
}

// A body the handler left unread is drained so the connection carries on;
// one too large to drain closes it after the answer.
func TestUnreadBodies(t *testing.T) {
	ts := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.URL.Path)
	}))
	c, br := raw(t, ts)
	_, err := io.WriteString(c, "POST /small HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhelloGET /next HTTP/1.1\r\nHost: h\r\n\r\n")
	require.NoError(t, err)
	_, body := readResponse(t, br, http.MethodPost)
	require.Equal(t, "/small", body)
	_, body = readResponse(t, br, http.MethodGet)
	require.Equal(t, "/next", body)

	big := maxDrain + 1<<10
	c, br = raw(t, ts)
	go func() {
		_, _ = fmt.Fprintf(c, "POST /big HTTP/1.1\r\nHost: h\r\nContent-Length: %d\r\n\r\n", big)
		_, _ = c.Write(bytes.Repeat([]byte("b"), big))
	}()
	resp, body := readResponse(t, br, http.MethodPost)
	require.Equal(t, "/big", body)
	_ = resp
	eventually(t, "the connection to close", func() bool {
		_, err := br.ReadByte()
		return err != nil
	})
}

// A panicking handler ends its connection, not the server.
func TestPanicEndsOnlyItsConnection(t *testing.T) {
	ts := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/panic" {
			panic(http.ErrAbortHandler)
		}
		_, _ = io.WriteString(w, "fine")
	}))
	c, br := raw(t, ts)
	_, err := io.WriteString(c, "GET /panic HTTP/1.1\r\nHost: h\r\n\r\n")
	require.NoError(t, err)
	_, err = http.ReadResponse(br, nil)
	require.Error(t, err)
	resp, err := client(t).Get(ts.url("/"))
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, "fine", string(b))
}
