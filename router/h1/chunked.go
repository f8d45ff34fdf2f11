package h1

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// MaxChunkLine caps a chunk-size line, extensions included.
const MaxChunkLine = 4 << 10

// MaxChunkSize keeps sizes far from int64 overflow.
const MaxChunkSize = 1 << 60

// maxTrailerBytes caps the trailer section after the last chunk, which is
// read and dropped: neither end relays trailers.
const maxTrailerBytes = 64 << 10

// ErrBadChunk reports a malformed chunked body.
var ErrBadChunk = errors.New("h1: malformed chunked encoding")

// ReadChunkSize reads a chunk-size line ("1a;ext=v\r\n").
func ReadChunkSize(br *bufio.Reader) (int64, error) {
	line, err := br.ReadSlice('\n')
	if err == bufio.ErrBufferFull || len(line) > MaxChunkLine {
		return 0, fmt.Errorf("%w: chunk-size line too long", ErrBadChunk)
	}
	if err != nil {
		return 0, BodyEOF(err)
	}
	return ParseChunkSize(line)
}

// ParseChunkSize parses a chunk-size line, line ending included.
func ParseChunkSize(line []byte) (int64, error) {
	line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
	if i := bytes.IndexByte(line, ';'); i >= 0 {
		line = line[:i]
	}
	line = bytes.TrimRight(line, " \t")
	if len(line) == 0 {
		return 0, ErrBadChunk
	}
	var n int64
	for _, c := range line {
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, fmt.Errorf("%w: chunk size %q", ErrBadChunk, Clip(line))
		}
		if n > MaxChunkSize>>4 {
			return 0, fmt.Errorf("%w: chunk size too large", ErrBadChunk)
		}
		n = n<<4 | int64(d)
	}
	return n, nil
}

// ReadChunkEnd reads the CRLF that ends a chunk's data.
func ReadChunkEnd(br *bufio.Reader) error {
	b, err := br.ReadByte()
	if err == nil && b == '\r' {
		b, err = br.ReadByte()
	}
	if err != nil {
		return BodyEOF(err)
	}
	if b != '\n' {
		return fmt.Errorf("%w: chunk data not followed by CRLF", ErrBadChunk)
	}
	return nil
}

// SkipTrailers reads the (dropped) trailer fields and the empty line that
// end a chunked body.
func SkipTrailers(br *bufio.Reader) error {
	budget := maxTrailerBytes
	for {
		line, err := ReadLine(br, &budget)
		if errors.Is(err, ErrTooLong) {
			return fmt.Errorf("%w: trailers exceed 64 KiB", ErrBadChunk)
		}
		if err != nil {
			return BodyEOF(err)
		}
		if len(line) == 0 {
			return nil
		}
	}
}

// BodyEOF turns an end of stream inside a body into ErrUnexpectedEOF.
func BodyEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
