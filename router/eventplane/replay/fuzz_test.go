package replay

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"switchyard/router/eventplane/zmtp"
)

// scriptConn is an in-memory net.Conn for fuzzing: reads return the
// scripted peer bytes, then io.EOF; writes are discarded.
type scriptConn struct{ r bytes.Reader }

func (c *scriptConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *scriptConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *scriptConn) Close() error                     { return nil }
func (c *scriptConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *scriptConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *scriptConn) SetDeadline(time.Time) error      { return nil }
func (c *scriptConn) SetReadDeadline(time.Time) error  { return nil }
func (c *scriptConn) SetWriteDeadline(time.Time) error { return nil }

var fuzzLimits = Limits{
	Frames: zmtp.Limits{MaxFrameBytes: 3000, MaxFramesPerMessage: 6, MaxMessageBytes: 4000,
		MaxCommandBytes: 100, HandshakeTimeout: time.Second, MessageTimeout: time.Second},
	MaxBatches: 5,
	Timeout:    time.Second,
}

// routerHello is a ROUTER's greeting (ZMTP 3.1, NULL) and READY.
func routerHello() []byte {
	g := make([]byte, 64)
	g[0], g[9], g[10], g[11] = 0xFF, 0x7F, 3, 1
	copy(g[12:], "NULL")
	prop := append([]byte{11}, "Socket-Type"...)
	prop = binary.BigEndian.AppendUint32(prop, 6)
	prop = append(prop, "ROUTER"...)
	body := append(append([]byte{5}, "READY"...), prop...)
	return append(append(g, 0x04, byte(len(body))), body...)
}

func replyBytes(frames ...[]byte) []byte {
	var out []byte
	for i, f := range frames {
		flags := byte(0)
		if i < len(frames)-1 {
			flags = 1
		}
		out = append(out, flags, byte(len(f)))
		out = append(out, f...)
	}
	return out
}

func seqFrame(s uint64) []byte { return binary.BigEndian.AppendUint64(nil, s) }

// FuzzConverse feeds arbitrary replies to a replay that asked from
// sequence 10, and checks the rules hold whatever the peer says.
func FuzzConverse(f *testing.F) {
	f.Add(replyBytes([]byte{}, seqFrame(10), []byte("a")))
	f.Add(append(replyBytes([]byte{}, seqFrame(10), []byte("a")), replyBytes([]byte{}, endSeq[:], []byte{})...))
	f.Add(append(replyBytes([]byte{}, seqFrame(12), []byte("a")), replyBytes([]byte{}, seqFrame(11), []byte("b"))...))
	f.Add(replyBytes([]byte{}, seqFrame(3), []byte("a")))
	f.Add(replyBytes([]byte{}, endSeq[:], []byte("x")))
	f.Add(replyBytes([]byte{}, seqFrame(10), []byte("t"), seqFrame(1), seqFrame(10), []byte("e")))
	f.Add(replyBytes([]byte("id"), []byte{1, 2}))
	f.Fuzz(func(t *testing.T, replies []byte) {
		conn := &scriptConn{}
		conn.r.Reset(append(routerHello(), replies...))
		var last uint64
		n := 0
		res, err := converse(conn, 10, fuzzLimits, func(seq uint64, payload [][]byte) error {
			if seq < 10 || (n > 0 && seq <= last) {
				t.Fatalf("delivered seq %d after %d", seq, last)
			}
			if len(payload) == 0 {
				t.Fatal("delivered no payload")
			}
			last = seq
			n++
			return nil
		})
		if res.Batches != n || n > fuzzLimits.MaxBatches {
			t.Fatalf("result %+v after %d deliveries", res, n)
		}
		if err == nil && !res.Ended {
			t.Fatal("a replay without end marker or stop ended without an error")
		}
		var re *RefusedError
		if err != nil && !errors.As(err, &re) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("replay ended with %v", err)
		}
	})
}
