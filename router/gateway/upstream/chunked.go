package upstream

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// maxChunkLine caps a chunk-size line, extensions included.
const maxChunkLine = 4 << 10

// maxChunkSize keeps sizes far from int64 overflow.
const maxChunkSize = 1 << 60

// maxTrailerBytes caps the trailer section after the last chunk, which is
// read and dropped: the gateway relays no trailers.
const maxTrailerBytes = 64 << 10

var errBadChunk = errors.New("upstream: malformed chunked encoding")

// readChunkSize reads a chunk-size line ("1a;ext=v\r\n").
func readChunkSize(br *bufio.Reader) (int64, error) {
	line, err := br.ReadSlice('\n')
	if err == bufio.ErrBufferFull || len(line) > maxChunkLine {
		return 0, errors.New("upstream: chunk-size line too long")
	}
	if err != nil {
		return 0, bodyEOF(err)
	}
	return parseChunkSize(line)
}

// parseChunkSize parses a chunk-size line, line ending included.
func parseChunkSize(line []byte) (int64, error) {
	line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
	if i := bytes.IndexByte(line, ';'); i >= 0 {
		line = line[:i]
	}
	line = bytes.TrimRight(line, " \t")
	if len(line) == 0 {
		return 0, errBadChunk
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
			return 0, fmt.Errorf("%w: chunk size %q", errBadChunk, clip(line))
		}
		if n > maxChunkSize>>4 {
			return 0, fmt.Errorf("%w: chunk size too large", errBadChunk)
		}
		n = n<<4 | int64(d)
	}
	return n, nil
}

// readChunkEnd reads the CRLF that ends a chunk's data.
func readChunkEnd(br *bufio.Reader) error {
	b, err := br.ReadByte()
	if err == nil && b == '\r' {
		b, err = br.ReadByte()
	}
	if err != nil {
		return bodyEOF(err)
	}
	if b != '\n' {
		return fmt.Errorf("%w: chunk data not followed by CRLF", errBadChunk)
	}
	return nil
}

// skipTrailers reads the (dropped) trailer fields and the empty line that
// end a chunked body.
func skipTrailers(br *bufio.Reader) error {
	budget := maxTrailerBytes
	for {
		line, err := readLine(br, &budget)
		if errors.Is(err, errHeadTooLarge) {
			return errors.New("upstream: response trailers exceed 64 KiB")
		}
		if err != nil {
			return bodyEOF(err)
		}
		if len(line) == 0 {
			return nil
		}
	}
}

// bodyEOF turns an end of stream inside a body into ErrUnexpectedEOF.
func bodyEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
