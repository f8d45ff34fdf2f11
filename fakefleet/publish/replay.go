package publish

import (
	"context"
	"encoding/binary"
	"errors"

	"github.com/go-zeromq/zmq4"
)

// Replay: a publisher may keep its last messages and resend them on
// request, as vLLM's KV-event publisher does from its replay socket. A
// client (DEALER) sends ["", start_seq (8 bytes BE)]; the ROUTER answers
// every kept message with seq >= start_seq as ["", seq (8 bytes BE),
// the message's frames...], then the end marker ["", -1 (8 signed bytes
// BE), ""]. For a vLLM publisher the frames after the sequence are its one
// payload frame; for Dynamo's four-frame event-plane messages there is no
// upstream replay, so this is Switchyard's extension: the original four
// frames, seq being the envelope's sequence.

// DefaultReplayBuffer is how many messages a replaying publisher keeps:
// vLLM's default buffer_steps.
const DefaultReplayBuffer = 10_000

// replayEndSeq is the end marker's sequence, -1 as 8 signed BE bytes.
var replayEndSeq = []byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}

// ErrReplayServed is returned by ServeReplay on a publisher that serves
// replay already.
var ErrReplayServed = errors.New("publish: replay is served already")

type kept struct {
	seq    uint64
	frames [][]byte
}

// ring keeps the last max messages in sequence order. It grows as
// messages come, so a quiet publisher holds little.
type ring struct {
	buf   []kept
	max   int
	start int // index of the oldest once the ring is full
}

func (r *ring) add(seq uint64, frames [][]byte) {
	if len(r.buf) < r.max {
		r.buf = append(r.buf, kept{seq, frames})
		return
	}
	r.buf[r.start] = kept{seq, frames}
	r.start = (r.start + 1) % len(r.buf)
}

// from returns the kept messages with seq >= start, oldest first.
func (r *ring) from(start uint64) []kept {
	var out []kept
	for k := range len(r.buf) {
		if m := r.buf[(r.start+k)%len(r.buf)]; m.seq >= start {
			out = append(out, m)
		}
	}
	return out
}

// replayServer is one incarnation's ROUTER socket and its buffer.
type replayServer struct {
	sock zmq4.Socket
	addr string
	ring ring
}

// ServeReplay keeps the last n messages (DefaultReplayBuffer when n <= 0)
// and serves them on a ROUTER socket bound to an ephemeral loopback port.
// A Restart starts a new buffer on a new socket: a restarted process
// remembers nothing. Messages sent before ServeReplay are not kept.
func (p *Publisher) ServeReplay(n int) error {
	if n <= 0 {
		n = DefaultReplayBuffer
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.replayN != 0 {
		return ErrReplayServed
	}
	p.replayN = n
	return p.bindReplay()
}

// bindReplay starts the current incarnation's replay server; p.mu held.
func (p *Publisher) bindReplay() error {
	sock := zmq4.NewRouter(context.Background())
	if err := sock.Listen("tcp://127.0.0.1:0"); err != nil {
		sock.Close()
		return err
	}
	rs := &replayServer{sock: sock, addr: "tcp://" + sock.Addr().String(),
		ring: ring{max: p.replayN}}
	p.replay = rs
	go p.serveReplay(rs)
	return nil
}

// closeReplay stops the current replay server; p.mu held. The serving
// goroutine ends when its socket's Recv fails.
func (p *Publisher) closeReplay() {
	if p.replay != nil {
		p.replay.sock.Close()
		p.replay = nil
	}
}

// ReplayEndpoint is tcp://host:port of the replay socket, "" when the
// publisher does not serve replay.
func (p *Publisher) ReplayEndpoint() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.replay == nil {
		return ""
	}
	return p.replay.addr
}

// keep records a message just sent (or dropped on the way) under seq;
// p.mu held.
func (p *Publisher) keep(seq uint64, frames [][]byte) {
	if p.replay != nil {
		p.replay.ring.add(seq, frames)
	}
}

// serveReplay answers requests until the socket closes. Requests that are
// not ["", 8 bytes] (behind the identity the ROUTER adds) are ignored, as
// vLLM ignores them.
func (p *Publisher) serveReplay(rs *replayServer) {
	for {
		req, err := rs.sock.Recv()
		if err != nil {
			return
		}
		if len(req.Frames) != 3 || len(req.Frames[1]) != 0 || len(req.Frames[2]) != 8 {
			continue
		}
		id, start := req.Frames[0], binary.BigEndian.Uint64(req.Frames[2])
		p.mu.Lock()
		msgs := rs.ring.from(start)
		p.mu.Unlock()
		if err := answer(rs.sock, id, msgs); err != nil {
			continue // the client went away; serve the next one
		}
	}
}

func answer(sock zmq4.Socket, id []byte, msgs []kept) error {
	for _, m := range msgs {
		frames := make([][]byte, 0, 3+len(m.frames))
		frames = append(frames, id, []byte{}, binary.BigEndian.AppendUint64(nil, m.seq))
		frames = append(frames, m.frames...)
		if err := sock.Send(zmq4.NewMsgFrom(frames...)); err != nil {
			return err
		}
	}
	return sock.Send(zmq4.NewMsgFrom(id, []byte{}, replayEndSeq, []byte{}))
}
