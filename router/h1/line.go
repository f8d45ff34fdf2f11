package h1

import (
	"bufio"
	"errors"
)

// ErrTooLong reports a head (or trailer section) over its byte budget.
var ErrTooLong = errors.New("h1: message head exceeds its size limit")

// ReadLine reads one line without its line ending (CRLF, or a bare LF as
// net/http accepts), charging it to budget. The returned slice is only
// valid until the next read from br, unless the line was longer than br's
// buffer.
func ReadLine(br *bufio.Reader, budget *int) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		// A line longer than the buffer: gather it within the budget.
		long := append([]byte(nil), line...)
		for err == bufio.ErrBufferFull && len(long) <= *budget {
			line, err = br.ReadSlice('\n')
			long = append(long, line...)
		}
		line = long
	}
	if len(line) > *budget {
		return nil, ErrTooLong
	}
	*budget -= len(line)
	if err != nil {
		return line, err
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

// Clip bounds an echoed input in an error message.
func Clip(b []byte) string {
	const max = 64
	if len(b) > max {
		return string(b[:max]) + "..."
	}
	return string(b)
}
