package replay

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"testing"
)

// benchBatches is a full vLLM buffer; benchPayload a typical batch of a
// few stored blocks.
const (
	benchBatches = DefaultMaxBatches
	benchPayload = 256
)

// frameBytes encodes one ZMTP message (short or long frames).
func frameBytes(dst []byte, frames ...[]byte) []byte {
	for i, f := range frames {
		flags := byte(0)
		if i < len(frames)-1 {
			flags = 1
		}
		if len(f) > 255 {
			dst = append(dst, flags|2)
			dst = binary.BigEndian.AppendUint64(dst, uint64(len(f)))
		} else {
			dst = append(dst, flags, byte(len(f)))
		}
		dst = append(dst, f...)
	}
	return dst
}

// replayStream is what a ROUTER holding benchBatches sends for a request
// from 0: its greeting and READY, every batch, the end marker.
func replayStream() []byte {
	out := routerHello()
	payload := make([]byte, benchPayload)
	for seq := range uint64(benchBatches) {
		out = frameBytes(out, []byte{}, seqFrame(seq), payload)
	}
	return frameBytes(out, []byte{}, endSeq[:], []byte{})
}

// plainDialer dials loopback without a policy (the benchmark's own peer).
type plainDialer struct{}

func (plainDialer) Dial(ctx context.Context, hostPort string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", hostPort)
}

// BenchmarkFetch10k is one replay of a full 10,000-batch buffer over
// loopback TCP from a peer that writes pre-encoded replies as fast as the
// socket takes them: the cost of the router's side of a replay.
func BenchmarkFetch10k(b *testing.B) {
	stream := replayStream()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if _, err := c.Write(stream); err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, c)
			}()
		}
	}()
	f := &Fetcher{Dialer: plainDialer{}, Limits: DefaultLimits}
	ep := "tcp://" + ln.Addr().String()
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		res, err := f.Fetch(context.Background(), ep, 0, func(uint64, [][]byte) error { return nil })
		if err != nil || res.Batches != benchBatches || !res.Ended {
			b.Fatalf("%+v, %v", res, err)
		}
	}
	b.ReportMetric(float64(b.N*benchBatches)/b.Elapsed().Seconds(), "batches/s")
}
