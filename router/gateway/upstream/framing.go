package upstream

import (
	"fmt"
	"net/http"
	"strings"

	"switchyard/router/h1"
)

// bodyKind is how an answer's body ends (RFC 9112 §6.3).
type bodyKind uint8

const (
	noBody      bodyKind = iota // HEAD, 204, 304
	lengthBody                  // Content-Length bytes
	chunkedBody                 // chunks up to a zero-size one
	untilClose                  // everything until the server closes
)

// framing is what the head says about the body and the connection.
type framing struct {
	kind      bodyKind
	length    int64 // of a lengthBody
	keepAlive bool  // the connection may carry the next request
}

// frameOf reads the framing from a response head and fixes the
// response's ContentLength, TransferEncoding and Close as net/http does
// (Transfer-Encoding moves out of the header).
func frameOf(resp *http.Response, method string) (framing, error) {
	f := framing{keepAlive: resp.ProtoMinor == 1 && !connectionClose(resp.Header)}
	te, chunked := resp.Header["Transfer-Encoding"]
	cl, sized := resp.Header["Content-Length"]
	switch {
	case method == http.MethodHead || resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified:
		f.kind = noBody
		resp.ContentLength = 0
		if sized && method == http.MethodHead {
			resp.ContentLength = -1
			if n, err := h1.ParseContentLength(cl); err == nil {
				resp.ContentLength = n
			}
		}
	case chunked:
		if len(te) != 1 || !strings.EqualFold(strings.TrimSpace(te[0]), "chunked") {
			return f, fmt.Errorf("upstream: unsupported Transfer-Encoding %q", strings.Join(te, ", "))
		}
		delete(resp.Header, "Transfer-Encoding")
		if sized {
			// Both framings: chunked wins, but a server this confused
			// gets no second request on the connection.
			delete(resp.Header, "Content-Length")
			f.keepAlive = false
		}
		f.kind = chunkedBody
		resp.ContentLength = -1
		resp.TransferEncoding = []string{"chunked"}
	case sized:
		n, err := h1.ParseContentLength(cl)
		if err != nil {
			return f, err
		}
		f.kind, f.length = lengthBody, n
		resp.ContentLength = n
	default:
		f.kind = untilClose
		f.keepAlive = false
		resp.ContentLength = -1
	}
	resp.Close = !f.keepAlive
	return f, nil
}

func connectionClose(h http.Header) bool { return h1.ConnectionHas(h, "close") }
