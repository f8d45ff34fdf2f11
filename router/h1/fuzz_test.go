package h1

import (
	"bufio"
	"bytes"
	"testing"
)

// FuzzChunkSize checks the chunk-size parser against its definition: hex
// digits, optional extensions, never a negative size.
func FuzzChunkSize(f *testing.F) {
	for _, seed := range []string{"0\r\n", "1a;ext=v\r\n", "FFFF \r\n", "\r\n", "-1\r\n", "1000000000000000000\r\n"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		n, err := ReadChunkSize(bufio.NewReader(bytes.NewReader(line)))
		if err == nil && (n < 0 || n > MaxChunkSize) {
			t.Fatalf("size %d from %q", n, line)
		}
	})
}
