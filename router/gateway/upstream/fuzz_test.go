package upstream

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"switchyard/router/h1/h1test"
)

// FuzzResponse feeds arbitrary bytes to the answer path: head, framing
// and body. It must never panic, and a body never yields more bytes than
// the input held.
func FuzzResponse(f *testing.F) {
	for _, seed := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\nT: v\r\n\r\n",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
		"HTTP/1.0 200 OK\r\n\r\nclose-delimited",
		"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffff\r\n",
		"HTTP/1.1 200 OK\nx-lower: v\n\nbare LF",
		"HTTP/1.1 999 \r\n\r\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tr := New(http.DefaultTransport)
		c := newConn(&h1test.Conn{R: bytes.NewReader(data)}, "fuzz:80")
		req, err := http.NewRequest(http.MethodPost, "http://fuzz/", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := tr.exchange(context.Background(), nil, c, req)
		if err != nil {
			return
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		if n > int64(len(data)) {
			t.Fatalf("body of %d bytes from %d bytes of input", n, len(data))
		}
		_ = resp.Body.Close()
		tr.CloseIdleConnections()
	})
}
