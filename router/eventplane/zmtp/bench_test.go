package zmtp

import (
	"bytes"
	"net"
	"testing"
	"time"

	"switchyard/router/envelope"
)

// kvMetricsBatch encodes n 4-frame kv_metrics messages with a ~200 B payload.
func kvMetricsBatch(n int) []byte {
	payload := bytes.Repeat([]byte{0x5A}, 200)
	var b []byte
	for seq := range n {
		b = append(b, message(kvMetrics(9, uint64(seq), payload)...)...)
	}
	return b
}

func reportMsgs(b *testing.B) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkReadMessage measures parsing alone: an in-memory conn replays a
// batch of kv_metrics messages forever.
func BenchmarkReadMessage(b *testing.B) {
	conn := &memConn{head: pubHello(1), body: kvMetricsBatch(256), loop: true}
	s, err := Handshake(conn, [][]byte{[]byte("kv_metrics")}, envelope.LoadLimits)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := s.ReadMessage(); err != nil {
			b.Fatal(err)
		}
	}
	reportMsgs(b)
}

// BenchmarkReadMessageLoopback adds real TCP: a peer streams kv_metrics
// messages over 127.0.0.1 as fast as the Sub reads them.
func BenchmarkReadMessageLoopback(b *testing.B) {
	batch := kvMetricsBatch(256)
	client, _ := rawPeer(b, func(c net.Conn) error {
		if _, err := c.Write(pubHello(1)); err != nil {
			return err
		}
		for {
			if _, err := c.Write(batch); err != nil {
				return nil // the benchmark closed the connection
			}
		}
	})
	s, err := Handshake(client, [][]byte{[]byte("kv_metrics")}, envelope.LoadLimits)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := s.ReadMessage(); err != nil {
			b.Fatal(err)
		}
	}
	reportMsgs(b)
	b.StopTimer()
	client.Close()
}

// BenchmarkReadMessageOrIdle is BenchmarkReadMessage read as a direct
// subscription reads: with an idle wait before each message.
func BenchmarkReadMessageOrIdle(b *testing.B) {
	conn := &memConn{head: pubHello(1), body: kvMetricsBatch(256), loop: true}
	s, err := Handshake(conn, [][]byte{[]byte("kv_metrics")}, envelope.LoadLimits)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := s.ReadMessageOrIdle(time.Second); err != nil {
			b.Fatal(err)
		}
	}
	reportMsgs(b)
}

// BenchmarkReadMessageOrIdleLoopback is BenchmarkReadMessageLoopback read
// with an idle wait before each message, real deadlines included.
func BenchmarkReadMessageOrIdleLoopback(b *testing.B) {
	batch := kvMetricsBatch(256)
	client, _ := rawPeer(b, func(c net.Conn) error {
		if _, err := c.Write(pubHello(1)); err != nil {
			return err
		}
		for {
			if _, err := c.Write(batch); err != nil {
				return nil // the benchmark closed the connection
			}
		}
	})
	s, err := Handshake(client, [][]byte{[]byte("kv_metrics")}, envelope.LoadLimits)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := s.ReadMessageOrIdle(time.Second); err != nil {
			b.Fatal(err)
		}
	}
	reportMsgs(b)
	b.StopTimer()
	client.Close()
}
