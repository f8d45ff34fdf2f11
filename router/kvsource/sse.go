package kvsource

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strconv"
)

// The SSE framing of a kv_cache_index stream (the text/event-stream
// format, restricted): lines end with LF or CRLF; an event is its id,
// event and data fields ended by a blank line; lines starting with ':' are
// comments (the listener's keepalives); retry and unknown fields are
// ignored. Every id is a decimal uint64, larger than the one before.

// MaxLineBytes caps one line, its line end excluded: a data line holds
// one event.
const MaxLineBytes = MaxEventBytes + 64

// Errors of the parser. Each leaves it unusable: the consumer drops the
// stream and resumes from the last id it applied.
var (
	ErrLineTooLong = errors.New("sse line longer than the cap")
	ErrDataTooLong = errors.New("sse event data longer than the cap")
	ErrBadID       = errors.New("sse id is not a decimal uint64")
)

// SSEEvent is one dispatched event. Data aliases the parser's buffer
// until the next call to Next.
type SSEEvent struct {
	ID    uint64
	HasID bool
	Type  string
	Data  []byte
}

// Parser reads SSE events from a stream, never holding more than one line
// and one event's data.
type Parser struct {
	r    *bufio.Reader
	line []byte
	data []byte
	err  error
}

// NewParser reads from r.
func NewParser(r io.Reader) *Parser { return &Parser{r: bufio.NewReaderSize(r, 16<<10)} }

// Next returns the next event with data or an id. io.EOF ends a stream cut
// between events, io.ErrUnexpectedEOF one cut inside an event.
func (p *Parser) Next() (SSEEvent, error) {
	if p.err != nil {
		return SSEEvent{}, p.err
	}
	ev, err := p.next()
	if err != nil {
		p.err = err
	}
	return ev, err
}

func (p *Parser) next() (SSEEvent, error) {
	var ev SSEEvent
	p.data = p.data[:0]
	started, hasData := false, false
	for {
		line, err := p.readLine()
		if err != nil {
			if errors.Is(err, io.EOF) && started {
				return SSEEvent{}, io.ErrUnexpectedEOF
			}
			return SSEEvent{}, err
		}
		if len(line) == 0 {
			if hasData || ev.HasID {
				ev.Data = p.data
				return ev, nil
			}
			ev, started = SSEEvent{}, false
			continue
		}
		if line[0] == ':' {
			continue
		}
		started = true
		name, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			name, value = line[:i], line[i+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		switch string(name) {
		case "id":
			id, err := strconv.ParseUint(string(value), 10, 64)
			if err != nil || len(value) == 0 || value[0] == '+' {
				return SSEEvent{}, ErrBadID
			}
			ev.ID, ev.HasID = id, true
		case "event":
			ev.Type = string(value)
		case "data":
			if hasData {
				p.data = append(p.data, '\n')
			}
			if len(p.data)+len(value) > MaxEventBytes {
				return SSEEvent{}, ErrDataTooLong
			}
			p.data = append(p.data, value...)
			hasData = true
		}
	}
}

// readLine returns the next line without its LF or CRLF.
func (p *Parser) readLine() ([]byte, error) {
	p.line = p.line[:0]
	for {
		chunk, err := p.r.ReadSlice('\n')
		if len(p.line)+len(chunk) > MaxLineBytes+2 {
			return nil, ErrLineTooLong
		}
		p.line = append(p.line, chunk...)
		if err == nil {
			break
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if errors.Is(err, io.EOF) && len(p.line) > 0 {
			return nil, io.ErrUnexpectedEOF
		}
		return nil, err
	}
	l := p.line[:len(p.line)-1]
	if n := len(l); n > 0 && l[n-1] == '\r' {
		l = l[:n-1]
	}
	if len(l) > MaxLineBytes {
		return nil, ErrLineTooLong
	}
	return l, nil
}

// AppendSSE appends one event to b. data must hold no line break (one
// JSON value as encoding/json writes it).
func AppendSSE(b []byte, id uint64, typ string, data []byte) []byte {
	b = append(b, "id: "...)
	b = strconv.AppendUint(b, id, 10)
	b = append(b, "\nevent: "...)
	b = append(b, typ...)
	b = append(b, "\ndata: "...)
	b = append(b, data...)
	return append(b, '\n', '\n')
}

// Keepalive is the comment a listener writes on an idle stream.
const Keepalive = ": keepalive\n\n"
