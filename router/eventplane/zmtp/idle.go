package zmtp

import (
	"errors"
	"sync"
	"time"
)

// ErrIdle is what ReadMessageOrIdle returns when no message began within its
// idle wait. It does not end the Sub.
var ErrIdle = errors.New("zmtp: no message began within the idle wait")

// readBufs holds the read buffers of subscriptions that released theirs
// while idle, so a thousand parked subscriptions hold none and a waking one
// rarely allocates.
var readBufs = sync.Pool{New: func() any { return new([readBufSize]byte) }}

// ReadMessageOrIdle is ReadMessage for a caller that parks idle connections:
// when nothing is buffered it waits for the next message or command to begin
// until idle after the last one began (or after the call, for the first
// wait) and returns ErrIdle if none did, leaving the Sub usable. Counting
// from the last beginning costs no clock reading per message. PING is
// answered and other commands skipped as by ReadMessage, and every ceiling
// and MessageTimeout apply alike. Any other error ends the Sub as in
// ReadMessage.
func (s *Sub) ReadMessageOrIdle(idle time.Duration) ([][]byte, error) {
	if s.err != nil {
		return nil, s.err
	}
	if s.r.buf == nil {
		s.r.buf = readBufs.Get().(*[readBufSize]byte)[:]
	}
	for {
		if s.r.buffered() == 0 {
			from := s.begun
			if from.IsZero() {
				from = time.Now()
			}
			// Past already after a slow message: the read then reports a
			// timeout at once, the caller parks, and queued bytes wake it.
			if err := s.conn.SetReadDeadline(from.Add(idle)); err != nil {
				return nil, s.finish(err)
			}
			// A deadline is set: a later ReadMessage clears it first.
			s.armed = true
			if err := s.r.fill(); err != nil {
				if isTimeout(err) {
					s.begun = time.Time{}
					return nil, ErrIdle
				}
				s.armed = false // not a message timeout
				return nil, s.finish(err)
			}
		}
		// As begin, remembering when the message began.
		now := time.Now()
		if err := s.conn.SetReadDeadline(now.Add(s.lim.MessageTimeout)); err != nil {
			return nil, s.finish(err)
		}
		s.armed, s.begun = true, now
		flags, _ := s.r.readByte() // buffered, cannot fail
		if flags&flagReserved != 0 {
			return nil, s.finish(protoErr("frame flags 0x%02x use reserved bits", flags))
		}
		if flags&flagCommand != 0 {
			if err := s.handleCommand(flags); err != nil {
				return nil, s.finish(unexpectedEOF(err))
			}
			continue
		}
		msg, err := s.readData(flags)
		if err != nil {
			return nil, s.finish(unexpectedEOF(err))
		}
		return msg, nil
	}
}

// finish records the error that ends the Sub, naming a deadline hit inside
// a message as ReadMessage does.
func (s *Sub) finish(err error) error {
	if s.armed && isTimeout(err) {
		err = protoErr("message not completed within %v", s.lim.MessageTimeout)
	}
	s.err = err
	return err
}

// ReleaseBuffers hands the read buffer back to a shared pool and drops the
// message arena, so an idle Sub holds neither; the next ReadMessageOrIdle
// takes a buffer again. It does nothing and reports false while bytes are
// buffered (they belong to the next message). Frames from the last read
// must no longer be used. After it, read only with ReadMessageOrIdle.
func (s *Sub) ReleaseBuffers() bool {
	if s.r.buffered() != 0 {
		return false
	}
	if s.r.buf != nil {
		readBufs.Put((*[readBufSize]byte)(s.r.buf))
		s.r.buf, s.r.r, s.r.w = nil, 0, 0
	}
	s.arena, s.out, s.smallRun = nil, nil, 0
	return true
}
