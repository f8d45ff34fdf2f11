package upstream

import (
	"context"
	"io"
	"net/http"
	"sync"

	"switchyard/router/h1"
)

// body reads an answer's body straight from its connection, on the
// reader's goroutine. The connection goes back to the pool when the body
// ended cleanly and the answer allows keep-alive; otherwise, and on a
// Close before the end, it is closed (nothing is drained).
type body struct {
	t    *Transport
	c    *conn
	ctx  context.Context
	dl   *deadlineContext // the exchange deadline, if any
	stop cancelWatch      // unregisters the context's interrupt
	f    framing
	// left is what remains of the body (lengthBody) or of the current
	// chunk (chunkedBody); inChunk is set between a chunk's size line and
	// its data's CRLF.
	left    int64
	inChunk bool
	err     error // sticky: io.EOF once the body ended

	mu       sync.Mutex
	closed   bool // Close was called
	disposed bool // the connection was pooled or closed
}

func (b *body) Read(p []byte) (int, error) {
	b.mu.Lock()
	closed, err := b.closed, b.err
	b.mu.Unlock()
	if closed {
		return 0, http.ErrBodyReadAfterClose
	}
	if err != nil {
		return 0, err
	}
	if len(p) == 0 {
		return 0, nil
	}
	var n int
	switch b.f.kind {
	case lengthBody:
		n, err = b.readLength(p)
	case chunkedBody:
		n, err = b.readChunked(p)
	default:
		n, err = b.c.br.Read(p)
	}
	if err == io.EOF {
		b.end(nil)
	} else if err != nil {
		err = b.t.failure(b.ctx, b.dl, err)
		b.end(err)
	}
	return n, err
}

func (b *body) readLength(p []byte) (int, error) {
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.c.br.Read(p)
	b.left -= int64(n)
	if b.left == 0 {
		return n, io.EOF
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

func (b *body) readChunked(p []byte) (int, error) {
	br := b.c.br
	if b.inChunk && b.left == 0 {
		if err := h1.ReadChunkEnd(br); err != nil {
			return 0, err
		}
		b.inChunk = false
	}
	if !b.inChunk {
		size, err := h1.ReadChunkSize(br)
		if err != nil {
			return 0, err
		}
		if size == 0 {
			return 0, b.lastChunk()
		}
		b.left, b.inChunk = size, true
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := br.Read(p)
	b.left -= int64(n)
	if err != nil {
		return n, h1.BodyEOF(err)
	}
	if b.left > 0 {
		return n, nil
	}
	// The chunk's data is all read. If its CRLF (and a last chunk) are
	// already buffered, finish now: the body ends with its last data and
	// the connection is free again without another call.
	if br.Buffered() < 2 {
		return n, nil
	}
	b.inChunk = false
	if err := h1.ReadChunkEnd(br); err != nil {
		return n, err
	}
	if next, _ := br.Peek(br.Buffered()); len(next) >= 5 && string(next[:5]) == "0\r\n\r\n" {
		_, _ = br.Discard(5)
		return n, io.EOF
	}
	return n, nil
}

// lastChunk reads the trailers after the zero-size chunk.
func (b *body) lastChunk() error {
	if err := h1.SkipTrailers(b.c.br); err != nil {
		return err
	}
	return io.EOF
}

// end records how the body ended (nil: cleanly) and disposes of the
// connection unless Close got there first.
func (b *body) end(err error) {
	b.mu.Lock()
	if err == nil {
		b.err = io.EOF
	} else {
		b.err = err
	}
	if b.disposed {
		b.mu.Unlock()
		return
	}
	b.disposed = true
	b.mu.Unlock()
	b.t.release(b.c, b.stop, err == nil && b.f.keepAlive)
}

// Close ends the body. Before the body's end it closes the connection,
// which also wakes a Read blocked on another goroutine.
func (b *body) Close() error {
	b.mu.Lock()
	b.closed = true
	if b.disposed {
		b.mu.Unlock()
		return nil
	}
	b.disposed = true
	b.mu.Unlock()
	b.t.release(b.c, b.stop, false)
	return nil
}
