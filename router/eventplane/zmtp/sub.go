package zmtp

import (
	"io"
	"math/bits"
	"net"
	"time"
)

// writeScratchSize holds our greeting (64 B, the largest thing we write from
// it), READY, a PONG, and the header of a subscription.
const writeScratchSize = 64

// Message arena sizing. The arena starts at minArena and doubles as declared
// sizes require, up to MaxMessageBytes. After a burst of large messages it is
// released once shrinkAfter consecutive messages have used less than a
// quarter of it, so one big message does not pin memory for the life of the
// subscription.
const (
	minArena    = 512
	shrinkAbove = 16 << 10
	shrinkAfter = 64
)

// Sub is one subscription on one connection. Idle, it owns about 2.3 KiB of
// heap (the read buffer and the struct); after its first kv_metrics-sized
// message about 3 KiB. It is not safe for concurrent use, except that another
// goroutine may close the connection to stop it.
type Sub struct {
	conn  net.Conn
	lim   Limits
	r     reader
	wbuf  [writeScratchSize]byte
	minor int

	// arena holds the frame bodies of the current message back to back; out
	// is the reused result slice whose frames alias arena.
	arena    []byte
	out      [][]byte
	smallRun int

	armed bool  // a read deadline is set (a message is in progress)
	err   error // first error; the session is over once set

	begun time.Time // when the last message began (ReadMessageOrIdle)
}

// PeerMinor is the ZMTP 3 minor version the peer announced: 0 or 1.
func (s *Sub) PeerMinor() int { return s.minor }

// ReadMessage returns the next multipart data message. The frames alias
// internal buffers and stay valid only until the next call; in steady state
// it allocates nothing. PING commands
// are answered and other commands skipped on the way. After an error the Sub
// is finished and every later call returns the same error.
func (s *Sub) ReadMessage() ([][]byte, error) {
	if s.err != nil {
		return nil, s.err
	}
	msg, err := s.readMessage()
	if err != nil {
		if s.armed && isTimeout(err) {
			err = protoErr("message not completed within %v", s.lim.MessageTimeout)
		}
		s.err = err
		return nil, err
	}
	return msg, nil
}

func (s *Sub) readMessage() ([][]byte, error) {
	for {
		flags, err := s.begin()
		if err != nil {
			return nil, err
		}
		if flags&flagCommand != 0 {
			if err := s.handleCommand(flags); err != nil {
				return nil, unexpectedEOF(err)
			}
			continue
		}
		msg, err := s.readData(flags)
		return msg, unexpectedEOF(err)
	}
}

// begin waits, without a deadline, for the first byte of the next message or
// command, then gives the rest of it MessageTimeout to arrive.
func (s *Sub) begin() (byte, error) {
	if s.r.buffered() == 0 {
		if s.armed {
			if err := s.conn.SetReadDeadline(time.Time{}); err != nil {
				return 0, err
			}
			s.armed = false
		}
		if err := s.r.fill(); err != nil {
			return 0, err
		}
	}
	if err := s.conn.SetReadDeadline(time.Now().Add(s.lim.MessageTimeout)); err != nil {
		return 0, err
	}
	s.armed = true
	flags, _ := s.r.readByte() // buffered, cannot fail
	if flags&flagReserved != 0 {
		return 0, protoErr("frame flags 0x%02x use reserved bits", flags)
	}
	return flags, nil
}

// readData reads a data message whose first flags byte is given.
func (s *Sub) readData(flags byte) ([][]byte, error) {
	if s.out == nil {
		s.out = make([][]byte, 0, s.lim.MaxFramesPerMessage)
	}
	s.out = s.out[:0]
	used := 0
	for {
		if flags&flagCommand != 0 {
			return nil, protoErr("command frame inside a multipart message")
		}
		if len(s.out) == s.lim.MaxFramesPerMessage {
			return nil, protoErr("message has more than %d frames", s.lim.MaxFramesPerMessage)
		}
		size, err := readFrameSize(&s.r, flags)
		if err != nil {
			return nil, err
		}
		if size > uint64(s.lim.MaxFrameBytes) {
			return nil, protoErr("frame of %d bytes exceeds %d", size, s.lim.MaxFrameBytes)
		}
		n := int(size)
		if used+n > s.lim.MaxMessageBytes {
			return nil, protoErr("message of more than %d bytes exceeds %d", used+n, s.lim.MaxMessageBytes)
		}
		s.reserve(used, n)
		body := s.arena[used : used+n : used+n]
		if err := s.r.readFull(body); err != nil {
			return nil, err
		}
		s.out = append(s.out, body)
		used += n
		if flags&flagMore == 0 {
			s.maybeShrink(used)
			return s.out, nil
		}
		if flags, err = s.r.readByte(); err != nil {
			return nil, err
		}
		if flags&flagReserved != 0 {
			return nil, protoErr("frame flags 0x%02x use reserved bits", flags)
		}
	}
}

// reserve makes the arena hold used+n bytes, growing it to the next power of
// two (at least minArena, at most MaxMessageBytes). The caller has checked
// used+n against MaxMessageBytes, so the allocation is bounded by it. Frames
// already read into the old arena are moved and re-pointed.
func (s *Sub) reserve(used, n int) {
	need := used + n
	if s.arena != nil && need <= len(s.arena) {
		return
	}
	size := minArena
	if need > minArena {
		size = 1 << bits.Len(uint(need-1))
	}
	size = min(size, s.lim.MaxMessageBytes)
	if size < need { // MaxMessageBytes below minArena
		size = need
	}
	grown := make([]byte, size)
	copy(grown, s.arena[:used])
	off := 0
	for i, f := range s.out {
		end := off + len(f)
		s.out[i] = grown[off:end:end]
		off = end
	}
	s.arena = grown
}

// maybeShrink releases an arena that a past burst left much larger than
// what messages now need.
func (s *Sub) maybeShrink(used int) {
	if len(s.arena) <= shrinkAbove || used*4 >= len(s.arena) {
		s.smallRun = 0
		return
	}
	s.smallRun++
	if s.smallRun >= shrinkAfter {
		s.arena, s.smallRun = nil, 0
	}
}

// handleCommand processes a command between messages: PING is answered with
// PONG, ERROR ends the session, READY again is a violation, and anything else
// (PONG, SUBSCRIBE, CANCEL, future commands) is skipped.
func (s *Sub) handleCommand(flags byte) error {
	if flags&flagMore != 0 {
		return protoErr("command frame with the MORE flag")
	}
	body, err := readCommandBody(&s.r, flags, s.lim.MaxCommandBytes)
	if err != nil {
		return err
	}
	defer s.r.discard(len(body))
	name, data, err := splitCommand(body)
	if err != nil {
		return err
	}
	switch string(name) {
	case "PING":
		pong, err := appendPong(s.wbuf[:0], data)
		if err != nil {
			return err
		}
		// A peer that pings but never reads would eventually block this
		// write forever; bound it like a message.
		if err := s.conn.SetWriteDeadline(time.Now().Add(s.lim.MessageTimeout)); err != nil {
			return err
		}
		if _, err := s.conn.Write(pong); err != nil {
			if isTimeout(err) {
				return protoErr("PONG not accepted within %v", s.lim.MessageTimeout)
			}
			return err
		}
	case "ERROR":
		return peerError(data)
	case "READY":
		return protoErr("READY after the handshake")
	}
	return nil
}

// unexpectedEOF reports an EOF inside a message or command as
// io.ErrUnexpectedEOF: only an EOF between messages is a clean close.
func unexpectedEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
