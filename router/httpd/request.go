package httpd

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"

	"switchyard/router/h1"
)

// headError is why a request was refused before its handler: the status
// answered (0: none, the client left or stalled mid-head), a short reason
// for counting and a message for the client.
type headError struct {
	status int
	reason string
	msg    string
}

// Reasons a request is refused before its handler (Server.Refused).
const (
	ReasonMalformed        = "malformed"
	ReasonHeadTooLarge     = "head_too_large"
	ReasonHTTPVersion      = "http_version"
	ReasonTransferEncoding = "transfer_encoding"
	ReasonExpectation      = "expectation"
)

func badRequest(msg string) *headError {
	return &headError{status: http.StatusBadRequest, reason: ReasonMalformed, msg: msg}
}

// head is a parsed request head: the request (without its body and
// context yet) and how its body is framed.
type head struct {
	req            *http.Request
	chunked        bool
	length         int64
	expectContinue bool
	closeAfter     bool
}

// readRequest reads and checks one request head into req, and its target
// into u when it is a plain path.
func (c *conn) readRequest(req *http.Request, u *url.URL) (head, *headError) {
	budget := c.srv.maxHeaderBytes()
	line, err := h1.ReadLine(c.br, &budget)
	if err == nil && len(line) == 0 { // RFC 9112 §2.2: an empty line before a request is ignored
		line, err = h1.ReadLine(c.br, &budget)
	}
	if err != nil {
		return head{}, readError(err)
	}
	method, target, proto, ok := splitRequestLine(line)
	if !ok {
		return head{}, badRequest("malformed request line")
	}
	minor, ok := protoMinor(proto)
	if !ok {
		return head{}, &headError{status: http.StatusHTTPVersionNotSupported, reason: ReasonHTTPVersion, msg: "only HTTP/1.0 and HTTP/1.1 are served here"}
	}
	if !h1.ValidHeaderName(method) {
		return head{}, badRequest("invalid method")
	}
	*req = http.Request{
		Method: methodString(method), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: minor,
		RequestURI: string(target), RemoteAddr: c.remote,
	}
	if minor == 0 {
		req.Proto = "HTTP/1.0"
	}
	if req.URL, err = parseTarget(req.RequestURI, req.Method, u); err != nil {
		return head{}, badRequest("invalid request target")
	}
	if req.Header, req.Host, err = readHeaders(c.br, &budget, &c.values); err != nil {
		if herr, ok := err.(*headError); ok {
			return head{}, herr
		}
		return head{}, readError(err)
	}
	if req.Host == "" && minor == 1 {
		return head{}, badRequest("missing required Host header")
	}
	if req.URL.Host != "" {
		req.Host = req.URL.Host
	}
	return frame(req)
}

// readError words a failed head read: too large is answered, anything
// else (the client left, a deadline) closes silently.
func readError(err error) *headError {
	if errors.Is(err, h1.ErrTooLong) {
		return &headError{status: http.StatusRequestHeaderFieldsTooLarge, reason: ReasonHeadTooLarge, msg: "request head too large"}
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || isTimeout(err) {
		return &headError{}
	}
	return badRequest(err.Error())
}

// splitRequestLine splits "METHOD SP target SP HTTP/1.x".
func splitRequestLine(line []byte) (method, target, proto []byte, ok bool) {
	sp1 := bytes.IndexByte(line, ' ')
	if sp1 <= 0 {
		return nil, nil, nil, false
	}
	rest := line[sp1+1:]
	sp2 := bytes.IndexByte(rest, ' ')
	if sp2 <= 0 {
		return nil, nil, nil, false
	}
	method, target, proto = line[:sp1], rest[:sp2], rest[sp2+1:]
	for _, b := range target {
		if b <= ' ' || b == 0x7f {
			return nil, nil, nil, false
		}
	}
	return method, target, proto, true
}

// protoMinor reads "HTTP/1.0" or "HTTP/1.1".
func protoMinor(proto []byte) (int, bool) {
	switch string(proto) {
	case "HTTP/1.1":
		return 1, true
	case "HTTP/1.0":
		return 0, true
	}
	return 0, false
}

// methodString spells the usual methods without allocating.
func methodString(m []byte) string {
	switch string(m) {
	case http.MethodPost:
		return http.MethodPost
	case http.MethodGet:
		return http.MethodGet
	case http.MethodHead:
		return http.MethodHead
	case http.MethodOptions:
		return http.MethodOptions
	}
	return string(m)
}

// parseTarget parses the request target. An origin-form path of plain
// characters, the usual case, is taken as it is, into u; anything else
// goes through url.ParseRequestURI, as net/http does.
func parseTarget(target, method string, u *url.URL) (*url.URL, error) {
	if target == "*" {
		if method != http.MethodOptions {
			return nil, errors.New("httpd: * is a target for OPTIONS only")
		}
		return &url.URL{Path: "*"}, nil
	}
	path, query, _ := strings.Cut(target, "?")
	if plainPath(path) {
		*u = url.URL{Path: path, RawQuery: query}
		return u, nil
	}
	return url.ParseRequestURI(target)
}

// plainPath reports an absolute path whose unescaped and escaped forms
// are the same, so url.URL needs no RawPath.
func plainPath(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	for i := 1; i < len(p); i++ {
		c := p[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '/' || c == '-' || c == '_' || c == '.' || c == '~':
		default:
			return false
		}
	}
	return true
}

// readHeaders reads the header fields up to the empty line. Host is taken
// out of the map, as net/http does.
func readHeaders(br *bufio.Reader, budget *int, seen *h1.Interner) (http.Header, string, error) {
	values := make([]string, 0, 8) // one backing array for most heads
	h := make(http.Header, 8)
	host, hosts := "", 0
	for {
		line, err := h1.ReadLine(br, budget)
		if err != nil {
			return nil, "", err
		}
		if len(line) == 0 {
			break
		}
		name, raw, err := h1.SplitHeaderLine(line)
		if err != nil {
			return nil, "", badRequest(err.Error())
		}
		value := seen.Intern(raw)
		if name == "Host" {
			host, hosts = value, hosts+1
			continue
		}
		if len(values) == cap(values) {
			values = make([]string, 0, 8)
		}
		values = append(values, value)
		if old, ok := h[name]; ok {
			h[name] = append(old, value)
		} else {
			h[name] = values[len(values)-1 : len(values) : len(values)]
		}
	}
	if hosts > 1 {
		return nil, "", badRequest("more than one Host header")
	}
	return h, host, nil
}

// frame reads how the body is delimited and what the head asks of the
// connection, refusing what could smuggle a second request past a proxy.
func frame(req *http.Request) (head, *headError) {
	hd := head{req: req}
	te, cl := req.Header["Transfer-Encoding"], req.Header["Content-Length"]
	switch {
	case len(te) > 0:
		if req.ProtoMinor == 0 {
			return head{}, badRequest("Transfer-Encoding in an HTTP/1.0 request")
		}
		if len(cl) > 0 {
			return head{}, badRequest("both Transfer-Encoding and Content-Length")
		}
		if len(te) != 1 || !strings.EqualFold(te[0], "chunked") {
			return head{}, &headError{status: http.StatusNotImplemented, reason: ReasonTransferEncoding, msg: "unsupported Transfer-Encoding"}
		}
		hd.chunked, hd.length = true, -1
		req.TransferEncoding = []string{"chunked"}
	case len(cl) > 0:
		n, err := h1.ParseContentLength(cl)
		if err != nil {
			return head{}, badRequest(err.Error())
		}
		hd.length = n
	}
	req.ContentLength = hd.length
	if req.ProtoMinor == 0 {
		hd.closeAfter = !h1.ConnectionHas(req.Header, "keep-alive")
	} else {
		hd.closeAfter = h1.ConnectionHas(req.Header, "close")
	}
	req.Close = hd.closeAfter
	if ex := req.Header["Expect"]; len(ex) > 0 {
		if len(ex) != 1 || !strings.EqualFold(ex[0], "100-continue") {
			return head{}, &headError{status: http.StatusExpectationFailed, reason: ReasonExpectation, msg: "unsupported Expect"}
		}
		hd.expectContinue = req.ProtoMinor == 1 && hd.length != 0
	}
	return hd, nil
}

func (e *headError) Error() string { return e.msg }
