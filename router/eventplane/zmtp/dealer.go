package zmtp

import (
	"net"
	"time"
)

// The DEALER side: a request/reply conversation with a ROUTER, which is how
// a vLLM publisher's replay socket is asked to resend buffered batches.
// Replies are as fleet-authored as published messages, so they are read
// by the same bounded reader under the same Limits; only the handshake
// (READY as DEALER, a ROUTER or DEALER peer, no subscriptions) and the
// ability to send differ.

const dealerSocketType = "DEALER"

// Dealer is the DEALER end of one connection. It is not safe for
// concurrent use, except that another goroutine may close the connection
// to stop it.
type Dealer struct {
	s    Sub
	wbuf []byte
}

// HandshakeDealer runs the ZMTP greeting and the NULL mechanism's READY
// exchange as a DEALER on conn; the peer must be a ROUTER (or a DEALER).
// The exchange must finish within lim.HandshakeTimeout. The caller owns
// conn and closes it on error and when done.
func HandshakeDealer(conn net.Conn, lim Limits) (*Dealer, error) {
	if err := validateLimits(lim); err != nil {
		return nil, err
	}
	d := &Dealer{s: Sub{conn: conn, lim: lim, r: newReader(conn)}}
	if err := finishHandshake(conn, lim, d.handshake()); err != nil {
		return nil, err
	}
	return d, nil
}

func (d *Dealer) handshake() error {
	s := &d.s
	if err := s.conn.SetDeadline(time.Now().Add(s.lim.HandshakeTimeout)); err != nil {
		return err
	}
	if err := s.greet(dealerSocketType); err != nil {
		return err
	}
	return readPeerReady(&s.r, s.lim.MaxCommandBytes, "cannot serve a DEALER (need ROUTER or DEALER)", "ROUTER", "DEALER")
}

// PeerMinor is the ZMTP 3 minor version the peer announced: 0 or 1.
func (d *Dealer) PeerMinor() int { return d.s.minor }

// Send writes one multipart message (at least one frame). The whole
// message must be accepted within MessageTimeout.
func (d *Dealer) Send(frames ...[]byte) error {
	if d.s.err != nil {
		return d.s.err
	}
	if len(frames) == 0 {
		return errEmptyMessage
	}
	buf := d.wbuf[:0]
	for i, f := range frames {
		var flags byte
		if i < len(frames)-1 {
			flags = flagMore
		}
		buf = appendFrameHeader(buf, flags, len(f))
		buf = append(buf, f...)
	}
	d.wbuf = buf
	if err := d.s.conn.SetWriteDeadline(time.Now().Add(d.s.lim.MessageTimeout)); err != nil {
		return err
	}
	if _, err := d.s.conn.Write(buf); err != nil {
		if isTimeout(err) {
			err = protoErr("message not accepted within %v", d.s.lim.MessageTimeout)
		}
		d.s.err = err
		return err
	}
	return nil
}

// ReadMessage returns the next reply, under the same rules as
// Sub.ReadMessage: frames alias internal buffers until the next call,
// every ceiling of Limits holds, PING is answered, and after an error
// every later call returns it. There is no deadline between messages; a
// caller that bounds the whole conversation closes the connection.
func (d *Dealer) ReadMessage() ([][]byte, error) { return d.s.ReadMessage() }
