package eventplane_test

import (
	"encoding/binary"

	"net"
	"testing"
	"time"

	"switchyard/fakefleet/wire"
	"switchyard/router/envelope"
	"switchyard/router/eventplane"
	"switchyard/router/eventplane/zmtp"
	"switchyard/router/events"
	"switchyard/router/load"
)

// zmtpFrame appends one ZMTP data frame.
func zmtpFrame(dst []byte, body []byte, more bool) []byte {
	var flags byte
	if more {
		flags = 0x01
	}
	if len(body) > 255 {
		dst = append(dst, flags|0x02)
		dst = binary.BigEndian.AppendUint64(dst, uint64(len(body)))
	} else {
		dst = append(dst, flags, byte(len(body)))
	}
	return append(dst, body...)
}

// publisherGreeting is what a PUB peer sends before any message.
func publisherGreeting() []byte {
	g := make([]byte, 64)
	g[0], g[9], g[10], g[11] = 0xff, 0x7f, 3, 0
	copy(g[12:], "NULL")
	ready := []byte{5, 'R', 'E', 'A', 'D', 'Y', 11, 'S', 'o', 'c', 'k', 'e', 't', '-', 'T', 'y', 'p', 'e', 0, 0, 0, 3, 'P', 'U', 'B'}
	g = append(g, 0x04, byte(len(ready)))
	return append(g, ready...)
}

// replayConn is an in-memory publisher: after the greeting it serves an
// endless stream of kv_metrics messages with increasing sequences, built by
// patching a template, so the benchmark measures only the reader, the
// decoders and the store.
type replayConn struct {
	net.Conn // nil: only Read, Write, deadlines and Close are used
	pending  []byte
	template []byte
	seqAt    [2]int // offsets of the two sequence fields to patch
	seq      uint64
}

func newReplayConn(pid, worker uint64) *replayConn {
	// The envelope's sequence is written as a fixed-width uint64 (0xcf), a
	// width the decoder accepts like any other, so it can be patched.
	payload := wire.Marshal(&wire.ActiveLoad{WorkerID: worker, KVUsedBlocks: wire.U64(7)}, false)
	env := []byte{0x85, 0xa5, 't', 'o', 'p', 'i', 'c', 0xaa}
	env = append(env, "kv_metrics"...)
	env = append(env, 0xac)
	env = append(env, "publisher_id"...)
	env = append(env, 0xcf)
	env = binary.BigEndian.AppendUint64(env, pid)
	env = append(env, 0xa8)
	env = append(env, "sequence"...)
	env = append(env, 0xcf)
	envSeq := len(env)
	env = binary.BigEndian.AppendUint64(env, 0)
	env = append(env, 0xac)
	env = append(env, "published_at"...)
	env = append(env, 0xce, 0, 0, 0, 1)
	env = append(env, 0xa7)
	env = append(env, "payload"...)
	env = append(env, 0xc4, byte(len(payload)))
	env = append(env, payload...)

	c := &replayConn{}
	var m []byte
	m = zmtpFrame(m, []byte("kv_metrics"), true)
	pidb := binary.BigEndian.AppendUint64(nil, pid)
	m = zmtpFrame(m, pidb, true)
	c.seqAt[0] = len(m) + 2
	m = zmtpFrame(m, make([]byte, 8), true)
	frame := append([]byte{1, 0, 0, 0, 0}, env...)
	binary.BigEndian.PutUint32(frame[1:5], uint32(len(env)))
	hdr := 2
	if len(frame) > 255 {
		hdr = 9
	}
	c.seqAt[1] = len(m) + hdr + 5 + envSeq
	m = zmtpFrame(m, frame, false)
	c.template = m
	c.pending = publisherGreeting()
	return c
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.pending) == 0 {
		c.seq++
		binary.BigEndian.PutUint64(c.template[c.seqAt[0]:], c.seq)
		binary.BigEndian.PutUint64(c.template[c.seqAt[1]:], c.seq)
		c.pending = c.template
	}
	n := copy(p, c.pending)
	c.pending = c.pending[n:]
	return n, nil
}

func (c *replayConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *replayConn) SetReadDeadline(time.Time) error  { return nil }
func (c *replayConn) SetWriteDeadline(time.Time) error { return nil }
func (c *replayConn) SetDeadline(time.Time) error      { return nil }
func (c *replayConn) Close() error                     { return nil }
func (c *replayConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *replayConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }

// BenchmarkLoadPipeline: one kv_metrics message through the bounded ZMTP
// reader (read as a direct subscription reads, with the idle wait that
// parks it), the frame and envelope decoder, the ActiveLoad decoder and the
// store. msgs/s = 1e9 / ns/op; run with -cpu 1 for the one-core figure.
func BenchmarkLoadPipeline(b *testing.B) {
	const pid, worker = 2046539, 1736491
	var refused int
	store := load.NewStore(func(r envelope.Result) {
		if r != envelope.Applied {
			refused++
		}
	})
	store.SetLive(fleet(worker, pid, "tcp://127.0.0.1:1"))
	conn := newReplayConn(pid, worker)
	sub, err := zmtp.Handshake(conn, [][]byte{[]byte("kv_metrics")}, envelope.LoadLimits)
	if err != nil {
		b.Fatal(err)
	}
	sink := load.Subscriber{Store: store}
	at := time.Unix(1_700_000_000, 0)
	sink.Connected("dynamo", pid, at)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		frames, err := sub.ReadMessageOrIdle(eventplane.ParkAfter)
		if err != nil {
			b.Fatal(err)
		}
		sink.Deliver("dynamo", pid, frames, at)
	}
	if refused > 0 {
		b.Fatalf("%d messages were not applied", refused)
	}
}

// BenchmarkBaselineStoreApply is the same message applied to the store from
// ready frames (no transport), to show what the ZMTP reader adds.
func BenchmarkBaselineStoreApply(b *testing.B) {
	const pid, worker = 2046539, 1736491
	store := load.NewStore(nil)
	store.SetLive(fleet(worker, pid, "tcp://127.0.0.1:1"))
	msgs := make([][][]byte, 4096)
	for i := range msgs {
		msgs[i] = wire.LoadMessage(pid, uint64(i)+1, wire.ActiveLoad{WorkerID: worker, KVUsedBlocks: wire.U64(7)}, time.Unix(0, 0))
	}
	ev := events.LoadMessage{Namespace: "dynamo", PublisherID: pid}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%len(msgs) == 0 {
			store.Connected(events.LoadConnected{Namespace: "dynamo", PublisherID: pid})
		}
		ev.Frames = msgs[i%len(msgs)]
		if r := store.Apply(&ev); r != envelope.Applied {
			b.Fatalf("%v", r)
		}
	}
}
