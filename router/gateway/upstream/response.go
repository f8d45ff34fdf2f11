package upstream

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"

	"switchyard/router/h1"
)

// maxHeadBytes caps one response head (status line and headers), as
// MaxResponseHeaderBytes did on the net/http transport: heads are small,
// and a backend sending megabytes of headers is broken or hostile.
const maxHeadBytes = 64 << 10

// maxInformational caps the 1xx answers skipped before the final one.
const maxInformational = 5

var (
	errHeadTooLarge    = errors.New("upstream: response head exceeds 64 KiB")
	errTooManyInterims = errors.New("upstream: too many 1xx responses")
)

// readHead reads the status line and headers of the final answer to a
// request into resp, skipping 1xx interim answers. The body, if any,
// follows in br.
func readHead(br *bufio.Reader, values *h1.Interner, resp *http.Response) (*http.Response, error) {
	for interim := 0; ; interim++ {
		resp, err := readOneHead(br, values, resp, interim == 0)
		if err != nil {
			return nil, err
		}
		switch code := resp.StatusCode; {
		case code == http.StatusSwitchingProtocols:
			return nil, errors.New("upstream: unexpected 101 Switching Protocols")
		case code >= 200:
			return resp, nil
		}
		if interim == maxInformational {
			return nil, errTooManyInterims
		}
	}
}

// readOneHead reads one response head, its header values interned in
// values (the connection's: its answers repeat them). first marks the first head of an
// answer, whose empty read says the server closed the connection before
// answering. That is not retried: the request went out, and the server
// may have acted on it.
func readOneHead(br *bufio.Reader, values *h1.Interner, resp *http.Response, first bool) (*http.Response, error) {
	budget := maxHeadBytes
	line, err := h1.ReadLine(br, &budget)
	if err != nil {
		if first && len(line) == 0 && isPeerClose(err) {
			return nil, fmt.Errorf("upstream: connection closed before any byte of the answer: %w", err)
		}
		return nil, headError(err)
	}
	if err := parseStatusLine(line, resp); err != nil {
		return nil, err
	}
	all := make([]string, 0, 8) // one backing array for most heads
	h := make(http.Header, 8)
	for {
		line, err := h1.ReadLine(br, &budget)
		if err != nil {
			return nil, headError(err)
		}
		if len(line) == 0 {
			break
		}
		name, raw, err := h1.SplitHeaderLine(line)
		if err != nil {
			return nil, err
		}
		value := values.Intern(raw)
		if len(all) == cap(all) {
			all = make([]string, 0, 8)
		}
		all = append(all, value)
		v := all[len(all)-1 : len(all) : len(all)]
		if old, ok := h[name]; ok {
			h[name] = append(old, value)
		} else {
			h[name] = v
		}
	}
	resp.Header = h
	return resp, nil
}

// headError words a failed head read; an early EOF is unexpected there.
func headError(err error) error {
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	if errors.Is(err, h1.ErrTooLong) {
		return errHeadTooLarge
	}
	return fmt.Errorf("upstream: reading the response head: %w", err)
}

// parseStatusLine parses "HTTP/1.x 200 OK" into resp; the reason may be
// empty.
func parseStatusLine(line []byte, resp *http.Response) error {
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' ||
		(line[7] != '0' && line[7] != '1') || (len(line) > 12 && line[12] != ' ') {
		return fmt.Errorf("upstream: malformed status line %q", h1.Clip(line))
	}
	code := 0
	for _, c := range line[9:12] {
		if c < '0' || c > '9' {
			return fmt.Errorf("upstream: malformed status code in %q", h1.Clip(line))
		}
		code = code*10 + int(c-'0')
	}
	if code < 100 {
		return fmt.Errorf("upstream: malformed status code in %q", h1.Clip(line))
	}
	var reason []byte
	if len(line) > 12 {
		reason = line[13:]
	}
	if !h1.ValidHeaderValue(reason) {
		return errors.New("upstream: control character in the status line")
	}
	*resp = http.Response{StatusCode: code, Status: statusText(code, reason), ProtoMajor: 1, Proto: "HTTP/1.1"}
	if line[7] == '0' {
		resp.Proto = "HTTP/1.0"
	} else {
		resp.ProtoMinor = 1
	}
	return nil
}
