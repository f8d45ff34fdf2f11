package outputcount

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// mebiStream is about 1 MiB of a streamed chat answer, one token per
// event, as Dynamo's frontend sends it.
func mebiStream() []byte {
	one := chatStream(1, -1)
	one = one[:strings.Index(one, "data: {\"id\":\"chatcmpl-1\",\"choices\":[{\"index\":0,\"delta\":{},")]
	return bytes.Repeat([]byte(one), (1<<20)/len(one))
}

// readChunk is what an HTTP body read hands over at a time.
const readChunk = 4 << 10

// BenchmarkCopy is the plain relay the counter rides on: 1 MiB read into
// a buffer 4 KiB at a time and handed on.
func BenchmarkCopy(b *testing.B) {
	stream := mebiStream()
	buf := make([]byte, readChunk)
	b.SetBytes(int64(len(stream)))
	for b.Loop() {
		_, _ = io.CopyBuffer(sink{}, struct{ io.Reader }{bytes.NewReader(stream)}, buf)
	}
}

// BenchmarkCopyCounted is the same copy with every read counted.
func BenchmarkCopyCounted(b *testing.B) {
	stream := mebiStream()
	buf := make([]byte, readChunk)
	b.SetBytes(int64(len(stream)))
	for b.Loop() {
		c := New(16, func(uint64) {})
		_, _ = io.CopyBuffer(io.MultiWriter(sink{}, c), struct{ io.Reader }{bytes.NewReader(stream)}, buf)
	}
}

// sink takes the bytes as a client connection would, without the
// shortcuts io.Discard offers a copy.
type sink struct{}

func (sink) Write(p []byte) (int, error) { return len(p), nil }
