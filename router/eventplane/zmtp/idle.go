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
// when nothing is buffered it waits at most idle for the next message or
// command to begin and returns ErrIdle if none did, leaving the Sub usable.
// PING is answered and other commands skipped as by ReadMessage, and every
// ceiling and MessageTimeout apply alike; the idle wait starts again after
// each command. Any other error ends the Sub as in ReadMessage.
func (s *Sub) ReadMessageOrIdle(idle time.Duration) ([][]byte, error) {
	if s.err != nil {
		return nil, s.err
	}
	if s.r.buf == nil {
		s.r.buf = readBufs.Get().(*[readBufSize]byte)[:]
	}
	for {
		if s.r.buffered() == 0 {
			if err := s.conn.SetReadDeadline(time.Now().Add(idle)); err != nil {
				return nil, s.finish(err)
			}
			// A deadline is set: a later ReadMessage clears it first.
			s.armed = true
			if err := s.r.fill(); err != nil {
				if isTimeout(err) {
					return nil, ErrIdle
				}
				s.armed = false // not a message timeout
				return nil, s.finish(err)
			}
		}
		flags, err := s.begin() // bytes are buffered: never waits without a deadline
		if err != nil {
			return nil, s.finish(err)
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
