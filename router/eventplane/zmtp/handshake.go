package zmtp

import (
	"bytes"
	"net"
	"time"
)

// Handshake runs the ZMTP greeting and the NULL mechanism's READY exchange on
// conn and subscribes to each topic (a prefix; an empty topic means
// everything). The whole exchange must finish within lim.HandshakeTimeout.
//
// The caller keeps ownership of conn and closes it on error and when done;
// closing conn is also how a blocked ReadMessage is stopped.
func Handshake(conn net.Conn, topics [][]byte, lim Limits) (*Sub, error) {
	if err := validateLimits(lim); err != nil {
		return nil, err
	}
	s := &Sub{conn: conn, lim: lim, r: newReader(conn)}
	// Idle from now on (no deadline): a silent publisher is normal.
	if err := finishHandshake(conn, lim, s.handshake(topics)); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Sub) handshake(topics [][]byte) error {
	if err := s.conn.SetDeadline(time.Now().Add(s.lim.HandshakeTimeout)); err != nil {
		return err
	}
	if err := s.greet(ourSocketType); err != nil {
		return err
	}
	if err := s.readReady(); err != nil {
		return err
	}
	for _, t := range topics {
		if err := s.subscribe(t); err != nil {
			return err
		}
	}
	return nil
}

// greet sends our greeting, reads the peer's, and sends our READY as
// socketType. Sending the whole greeting at once is fine: we support a
// single version and a single mechanism, so there is nothing to negotiate.
func (s *Sub) greet(socketType string) error {
	putGreeting(s.wbuf[:])
	if _, err := s.conn.Write(s.wbuf[:greetingSize]); err != nil {
		return err
	}
	minor, err := readGreeting(&s.r)
	if err != nil {
		return err
	}
	s.minor = minor
	_, err = s.conn.Write(appendReadyAs(s.wbuf[:0], socketType))
	return err
}

// readReady reads the peer's first command, which under NULL must be READY
// with Socket-Type PUB or XPUB. An ERROR command is reported with its reason.
func (s *Sub) readReady() error {
	return readPeerReady(&s.r, s.lim.MaxCommandBytes, "cannot serve a SUB (need PUB or XPUB)", "PUB", "XPUB")
}

// readPeerReady reads a peer's READY command (an ERROR is reported with
// its reason), commands past maxCommand refused, and checks that the
// peer's socket type is one of want; mismatch says why not.
func readPeerReady(r *reader, maxCommand int, mismatch string, want ...string) error {
	flags, err := r.readByte()
	if err != nil {
		return err
	}
	if flags&flagCommand == 0 || flags&(flagMore|flagReserved) != 0 {
		return protoErr("handshake: expected a READY command, got frame flags 0x%02x", flags)
	}
	body, err := readCommandBody(r, flags, maxCommand)
	if err != nil {
		return err
	}
	defer r.discard(len(body))
	name, data, err := splitCommand(body)
	if err != nil {
		return err
	}
	switch string(name) {
	case "READY":
	case "ERROR":
		return peerError(data)
	default:
		return protoErr("handshake: expected READY, got command %q", clip(name))
	}
	st, err := peerSocketType(data)
	if err != nil {
		return err
	}
	for _, w := range want {
		if bytes.Equal(st, []byte(w)) {
			return nil
		}
	}
	return protoErr("handshake: peer socket type %q "+mismatch, clip(st))
}

// readCommandBody peeks a command frame's body, refusing one past
// maxCommand bytes.
func readCommandBody(r *reader, flags byte, maxCommand int) ([]byte, error) {
	size, err := readFrameSize(r, flags)
	if err != nil {
		return nil, err
	}
	if size > uint64(maxCommand) {
		return nil, protoErr("command of %d bytes exceeds %d", size, maxCommand)
	}
	return r.peek(int(size))
}

// subscribe sends a 3.0-style subscription: a data frame holding 0x01 and the
// topic. 3.1 peers accept it as well, and it is what zmq4 understands.
func (s *Sub) subscribe(topic []byte) error {
	hdr := appendFrameHeader(s.wbuf[:0], 0, 1+len(topic))
	hdr = append(hdr, 0x01)
	if len(hdr)+len(topic) <= len(s.wbuf) {
		_, err := s.conn.Write(append(hdr, topic...))
		return err
	}
	if _, err := s.conn.Write(hdr); err != nil {
		return err
	}
	_, err := s.conn.Write(topic)
	return err
}

// peerError turns an ERROR command's data (a length-prefixed reason) into a
// ProtocolError.
func peerError(data []byte) error {
	reason := data
	if len(data) > 0 && int(data[0]) <= len(data)-1 {
		reason = data[1 : 1+int(data[0])]
	}
	return protoErr("peer sent ERROR: %q", clip(reason))
}

// finishHandshake ends a handshake that returned err: a deadline that
// expired becomes a protocol error naming the timeout, and a completed
// handshake leaves the connection without a deadline (each reader sets
// its own).
func finishHandshake(conn net.Conn, lim Limits, err error) error {
	if err != nil {
		if isTimeout(err) {
			return protoErr("handshake not completed within %v", lim.HandshakeTimeout)
		}
		return err
	}
	return conn.SetDeadline(time.Time{})
}
