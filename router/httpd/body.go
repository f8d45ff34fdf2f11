package httpd

import (
	"errors"
	"io"

	"switchyard/router/h1"
)

var errBodyClosed = errors.New("http: invalid Read on closed Body")

// body is a request body, read from the connection's buffer: exactly
// Content-Length bytes, or chunks up to the last one. Its end tells the
// connection that the bytes after it are no longer the body's.
type body struct {
	w         *response
	chunked   bool
	remaining int64 // of the body, or of the current chunk
	inChunk   bool  // a chunk's data was read, its CRLF not yet
	done      bool
	closed    bool
	err       error // sticky: a broken body leaves the connection unusable
	// continueDue: the client waits for "100 Continue" before it sends.
	continueDue bool
}

func (b *body) Read(p []byte) (int, error) {
	switch {
	case b.closed:
		return 0, errBodyClosed
	case b.err != nil:
		return 0, b.err
	case b.done:
		return 0, io.EOF
	case len(p) == 0:
		return 0, nil
	}
	if b.continueDue {
		b.continueDue = false
		b.w.writeContinue()
	}
	var n int
	var err error
	if b.chunked {
		n, err = b.readChunked(p)
	} else {
		n, err = b.readLength(p)
	}
	if err != nil && err != io.EOF {
		b.err = err
	}
	return n, err
}

func (b *body) readLength(p []byte) (int, error) {
	if int64(len(p)) > b.remaining {
		p = p[:b.remaining]
	}
	n, err := b.w.c.br.Read(p)
	b.remaining -= int64(n)
	if b.remaining == 0 {
		b.finish()
		return n, io.EOF
	}
	if err != nil {
		return n, h1.BodyEOF(err)
	}
	return n, nil
}

func (b *body) readChunked(p []byte) (int, error) {
	br := b.w.c.br
	if b.remaining == 0 {
		if b.inChunk {
			if err := h1.ReadChunkEnd(br); err != nil {
				return 0, err
			}
			b.inChunk = false
		}
		size, err := h1.ReadChunkSize(br)
		if err != nil {
			return 0, err
		}
		if size == 0 {
			if err := h1.SkipTrailers(br); err != nil {
				return 0, err
			}
			b.finish()
			return 0, io.EOF
		}
		b.remaining, b.inChunk = size, true
	}
	if int64(len(p)) > b.remaining {
		p = p[:b.remaining]
	}
	n, err := br.Read(p)
	b.remaining -= int64(n)
	if err != nil {
		return n, h1.BodyEOF(err)
	}
	return n, nil
}

func (b *body) finish() {
	b.done = true
	b.w.c.socketFree.Store(true)
}

// Close ends the handler's reading; what it left is drained (or the
// connection closed) once its answer is written.
func (b *body) Close() error {
	b.closed = true
	return nil
}

// wontDrain reports, before the answer, a body the connection will not
// survive: one the client waits to be asked for, or longer than the drain.
func (b *body) wontDrain() bool {
	if b.done || b.err != nil {
		return b.err != nil
	}
	return b.continueDue || !b.chunked && b.remaining > maxDrain
}

// drain reads and drops what the handler left of the body, up to max
// bytes, and reports whether the connection can carry another request.
func (b *body) drain(max int64) bool {
	switch {
	case b.done:
		return true
	case b.err != nil || b.continueDue: // broken, or never sent
		return false
	}
	b.closed = false
	n, err := io.CopyN(io.Discard, b, max+1)
	return err == io.EOF && n <= max
}
