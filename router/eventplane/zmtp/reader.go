package zmtp

import (
	"errors"
	"io"
	"net"
)

// readBufSize is the fixed read buffer each subscription owns. bufio's 4 KiB
// default would double the idle footprint of a thousand subscriptions for no
// gain: it must only hold a whole greeting (64 B) and the largest command
// body (MaxCommandBytes ≤ readBufSize), both parsed in place. Frame bodies
// larger than the buffer bypass it.
const readBufSize = 2048

// maxEmptyReads bounds how often a misbehaving net.Conn may return (0, nil)
// before the reader gives up instead of spinning.
const maxEmptyReads = 100

var errPeekTooLarge = errors.New("zmtp: internal error: peek beyond the read buffer")

// reader is a minimal buffered reader over a net.Conn. Unlike bufio.Reader it
// lets callers look at n bytes in place (peek) and then drop them (discard),
// which is how greetings and commands are parsed without copying.
type reader struct {
	conn net.Conn
	buf  []byte
	r, w int // unread bytes are buf[r:w]
}

func newReader(conn net.Conn) reader {
	return reader{conn: conn, buf: make([]byte, readBufSize)}
}

func (b *reader) buffered() int { return b.w - b.r }

// fill reads at least one more byte into the buffer. It never allocates.
func (b *reader) fill() error {
	if b.r == b.w {
		b.r, b.w = 0, 0
	} else if b.w == len(b.buf) {
		b.w = copy(b.buf, b.buf[b.r:b.w])
		b.r = 0
	}
	if b.w == len(b.buf) {
		return errPeekTooLarge
	}
	for range maxEmptyReads {
		n, err := b.conn.Read(b.buf[b.w:])
		b.w += n
		if n > 0 {
			// A sticky error (EOF, reset) comes back on the next Read.
			return nil
		}
		if err != nil {
			return err
		}
	}
	return io.ErrNoProgress
}

func (b *reader) readByte() (byte, error) {
	if b.r == b.w {
		if err := b.fill(); err != nil {
			return 0, err
		}
	}
	c := b.buf[b.r]
	b.r++
	return c, nil
}

// peek returns the next n bytes without consuming them. The slice aliases the
// buffer and is valid until the next call on b. n must fit the buffer; the
// callers guarantee it (64-byte greeting, commands ≤ MaxCommandBytes).
func (b *reader) peek(n int) ([]byte, error) {
	if n > len(b.buf) {
		return nil, errPeekTooLarge
	}
	if len(b.buf)-b.r < n {
		b.w = copy(b.buf, b.buf[b.r:b.w])
		b.r = 0
	}
	for b.w-b.r < n {
		if err := b.fill(); err != nil {
			return nil, err
		}
	}
	return b.buf[b.r : b.r+n], nil
}

// discard drops n bytes that a previous peek returned.
func (b *reader) discard(n int) { b.r += n }

// readFull fills dst. Bodies at least as large as the buffer are read straight
// into dst, so a large frame is copied once, not twice.
func (b *reader) readFull(dst []byte) error {
	n := copy(dst, b.buf[b.r:b.w])
	b.r += n
	dst = dst[n:]
	if len(dst) >= len(b.buf) {
		_, err := io.ReadFull(b.conn, dst)
		return err
	}
	for len(dst) > 0 {
		if err := b.fill(); err != nil {
			return err
		}
		n := copy(dst, b.buf[b.r:b.w])
		b.r += n
		dst = dst[n:]
	}
	return nil
}
