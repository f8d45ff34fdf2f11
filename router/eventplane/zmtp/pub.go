package zmtp

import (
	"bytes"
	"encoding/binary"
	"net"
	"sync"
	"time"
)

// The publishing side: a PubConn is one subscriber connected to a PUB
// socket we bound (replica sync: router replicas publish to each other).
// The subscriber is as untrusted as any publisher: its greeting, READY,
// subscriptions and commands are read with the same ceilings, and it can
// hold at most MaxSubscriptions topics of at most MaxTopicBytes each.

// Subscriber-side ceilings of a PubConn.
const (
	// MaxSubscriptions bounds the topics one subscriber holds.
	MaxSubscriptions = 16
	// MaxTopicBytes bounds one subscription's topic.
	MaxTopicBytes = 256
)

// PubConn is the PUB end of one connection. Run reads what the
// subscriber sends (subscriptions, PING) until the connection ends;
// WriteMessage may be called from another goroutine meanwhile.
type PubConn struct {
	conn  net.Conn
	lim   Limits
	r     reader
	minor int

	wmu  sync.Mutex // serialises writes: messages and PONGs
	wbuf []byte

	smu  sync.Mutex
	subs [][]byte
}

// AcceptPub runs the ZMTP greeting and the NULL mechanism's READY
// exchange as a PUB on conn (a connection our listener accepted). The
// exchange must finish within lim.HandshakeTimeout. The caller owns conn.
func AcceptPub(conn net.Conn, lim Limits) (*PubConn, error) {
	if err := validateLimits(lim); err != nil {
		return nil, err
	}
	p := &PubConn{conn: conn, lim: lim, r: newReader(conn)}
	if err := finishHandshake(conn, lim, p.handshake()); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *PubConn) handshake() error {
	if err := p.conn.SetDeadline(time.Now().Add(p.lim.HandshakeTimeout)); err != nil {
		return err
	}
	var g [greetingSize]byte
	putGreeting(g[:])
	if _, err := p.conn.Write(g[:]); err != nil {
		return err
	}
	minor, err := readGreeting(&p.r)
	if err != nil {
		return err
	}
	p.minor = minor
	if _, err := p.conn.Write(appendReadyAs(nil, "PUB")); err != nil {
		return err
	}
	return readPeerReady(&p.r, p.lim.MaxCommandBytes, "cannot subscribe to a PUB (need SUB or XSUB)", "SUB", "XSUB")
}

// Run reads the subscriber's subscriptions and commands until the
// connection fails or is closed, and returns why. A message or command,
// once begun, must complete within MessageTimeout.
func (p *PubConn) Run() error {
	for {
		if p.r.buffered() == 0 {
			if err := p.conn.SetReadDeadline(time.Time{}); err != nil {
				return err
			}
			if err := p.r.fill(); err != nil {
				return err
			}
		}
		if err := p.conn.SetReadDeadline(time.Now().Add(p.lim.MessageTimeout)); err != nil {
			return err
		}
		flags, _ := p.r.readByte()
		if flags&flagReserved != 0 {
			return protoErr("frame flags 0x%02x use reserved bits", flags)
		}
		if flags&flagMore != 0 {
			return protoErr("a subscriber sent a multipart message")
		}
		if flags&flagCommand != 0 {
			if err := p.command(flags); err != nil {
				return unexpectedEOF(err)
			}
			continue
		}
		size, err := readFrameSize(&p.r, flags)
		if err != nil {
			return unexpectedEOF(err)
		}
		if size == 0 || size > 1+MaxTopicBytes {
			return protoErr("subscription frame of %d bytes (1 to %d)", size, 1+MaxTopicBytes)
		}
		body, err := p.r.peek(int(size))
		if err != nil {
			return unexpectedEOF(err)
		}
		switch body[0] {
		case 1:
			err = p.subscribe(body[1:])
		case 0:
			p.cancel(body[1:])
		default:
			err = protoErr("subscriber sent a data frame that is not a subscription (0x%02x)", body[0])
		}
		p.r.discard(len(body))
		if err != nil {
			return err
		}
	}
}

func (p *PubConn) command(flags byte) error {
	body, err := readCommandBody(&p.r, flags, p.lim.MaxCommandBytes)
	if err != nil {
		return err
	}
	defer p.r.discard(len(body))
	name, data, err := splitCommand(body)
	if err != nil {
		return err
	}
	switch string(name) {
	case "SUBSCRIBE":
		return p.subscribe(data)
	case "CANCEL":
		p.cancel(data)
	case "PING":
		pong, err := appendPong(nil, data)
		if err != nil {
			return err
		}
		return p.write(pong)
	case "ERROR":
		return peerError(data)
	case "READY":
		return protoErr("READY after the handshake")
	}
	return nil
}

func (p *PubConn) subscribe(topic []byte) error {
	if len(topic) > MaxTopicBytes {
		return protoErr("subscription of %d bytes (at most %d)", len(topic), MaxTopicBytes)
	}
	p.smu.Lock()
	defer p.smu.Unlock()
	for _, s := range p.subs {
		if bytes.Equal(s, topic) {
			return nil
		}
	}
	if len(p.subs) >= MaxSubscriptions {
		return protoErr("more than %d subscriptions", MaxSubscriptions)
	}
	p.subs = append(p.subs, bytes.Clone(topic))
	return nil
}

func (p *PubConn) cancel(topic []byte) {
	p.smu.Lock()
	defer p.smu.Unlock()
	for i, s := range p.subs {
		if bytes.Equal(s, topic) {
			p.subs = append(p.subs[:i], p.subs[i+1:]...)
			return
		}
	}
}

// Subscribed reports whether the subscriber holds a subscription that is
// a prefix of topic.
func (p *PubConn) Subscribed(topic []byte) bool {
	p.smu.Lock()
	defer p.smu.Unlock()
	for _, s := range p.subs {
		if bytes.HasPrefix(topic, s) {
			return true
		}
	}
	return false
}

// WriteMessage writes one multipart message. The whole message must be
// accepted within MessageTimeout: a subscriber that stops reading is cut
// off rather than let to block its publisher.
func (p *PubConn) WriteMessage(frames ...[]byte) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	buf := p.wbuf[:0]
	for i, f := range frames {
		var flags byte
		if i < len(frames)-1 {
			flags = flagMore
		}
		buf = appendFrameHeader(buf, flags, len(f))
		buf = append(buf, f...)
	}
	p.wbuf = buf
	return p.writeLocked(buf)
}

func (p *PubConn) write(b []byte) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	return p.writeLocked(b)
}

func (p *PubConn) writeLocked(b []byte) error {
	if err := p.conn.SetWriteDeadline(time.Now().Add(p.lim.MessageTimeout)); err != nil {
		return err
	}
	if _, err := p.conn.Write(b); err != nil {
		if isTimeout(err) {
			return protoErr("message not accepted within %v", p.lim.MessageTimeout)
		}
		return err
	}
	return nil
}

// appendReadyAs appends a READY command announcing socketType.
func appendReadyAs(dst []byte, socketType string) []byte {
	body := 1 + len("READY") + 1 + len(socketTypeProp) + 4 + len(socketType)
	dst = appendFrameHeader(dst, flagCommand, body)
	dst = append(dst, byte(len("READY")))
	dst = append(dst, "READY"...)
	dst = append(dst, byte(len(socketTypeProp)))
	dst = append(dst, socketTypeProp...)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(socketType)))
	return append(dst, socketType...)
}
