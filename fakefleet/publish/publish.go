// Package publish puts a fake worker's event-plane messages on the wire
// the way a Dynamo worker does: a ZMQ PUB socket bound to an ephemeral
// loopback port, one publisher id per incarnation (random and JSON-safe),
// sequences from 1, the four-frame message with a msgpack envelope. zmq4 is
// fine here: the fake fleet only publishes, it never reads a peer.
package publish

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"

	"switchyard/fakefleet/wire"
)

// maxJSONSafe keeps publisher ids exact in JSON numbers (2^53-1).
const maxJSONSafe = 1<<53 - 1

// Publisher is one PUB socket of one publisher incarnation.
type Publisher struct {
	Topic string

	mu     sync.Mutex
	sock   zmq4.Socket
	id     uint64
	seq    uint64
	addr   string
	closed bool

	// replayN is the replay buffer size, 0 without replay (replay.go).
	replayN int
	replay  *replayServer
	// drop is how many of the next messages are lost on the way.
	drop int
}

// New binds a PUB socket for topic on 127.0.0.1 with a random publisher id.
func New(topic string) (*Publisher, error) {
	p := &Publisher{Topic: topic}
	if err := p.bind(); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *Publisher) bind() error {
	sock := zmq4.NewPub(context.Background())
	if err := sock.Listen("tcp://127.0.0.1:0"); err != nil {
		sock.Close()
		return err
	}
	p.sock, p.addr = sock, "tcp://"+sock.Addr().String()
	p.id, p.seq = rand.Uint64()&maxJSONSafe, 0
	return nil
}

// ID is the current incarnation's publisher id.
func (p *Publisher) ID() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.id
}

// Endpoint is tcp://host:port of the PUB socket, as advertised in discovery.
func (p *Publisher) Endpoint() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.addr
}

// Send publishes one msgpack payload as the next sequence.
func (p *Publisher) Send(payload []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.seq++
	return p.sendLocked(wire.Message(p.Topic, p.id, p.seq, payload, time.Now()))
}

// sendLocked keeps the message for replay under p.seq and sends it,
// unless it is to be lost on the way; p.mu held.
func (p *Publisher) sendLocked(frames [][]byte) error {
	p.keep(p.seq, frames)
	if p.drop > 0 {
		p.drop--
		return nil
	}
	return p.sock.Send(zmq4.NewMsgFrom(frames...))
}

// SkipSequence makes the next message jump a sequence (a fault: the
// subscriber sees a gap). The skipped sequence was never a message, so a
// replay cannot bring it back.
func (p *Publisher) SkipSequence() {
	p.mu.Lock()
	p.seq++
	p.mu.Unlock()
}

// DropNext loses the next n messages on the way (a fault: the subscriber
// sees a gap). They are numbered and kept for replay as if sent, so a
// replay recovers them.
func (p *Publisher) DropNext(n int) {
	p.mu.Lock()
	p.drop += max(n, 0)
	p.mu.Unlock()
}

// SendRaw publishes arbitrary frames (a fault: malformed messages).
func (p *Publisher) SendRaw(frames ...[]byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sock.Send(zmq4.NewMsgFrom(frames...))
}

// Restart closes the socket and binds a new one with a new publisher id,
// as a restarted worker process would, with a new, empty replay socket if
// it serves replay. The caller re-advertises both.
func (p *Publisher) Restart() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sock.Close()
	p.closeReplay()
	p.drop = 0
	if err := p.bind(); err != nil {
		return err
	}
	if p.replayN > 0 {
		return p.bindReplay()
	}
	return nil
}

// Close stops publishing.
func (p *Publisher) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.closed = true
		p.sock.Close()
		p.closeReplay()
	}
}
