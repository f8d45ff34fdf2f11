package upstream

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"time"
)

// WithDeadline returns ctx carrying a deadline for the exchange of the
// request it is given to: the Transport ends the exchange at, through
// its connection's deadline, with an error that wraps
// context.DeadlineExceeded and cause. It is a cheaper context.WithDeadlineCause
// for the one consumer that honours it: no timer, no cancellation to
// propagate, nothing to release. It is not a context deadline: Done and
// Err are ctx's, and only this package (the Transport, and RoundTripWith
// for another RoundTripper) reads it.
func WithDeadline(ctx context.Context, at time.Time, cause error) context.Context {
	return &deadlineContext{Context: ctx, at: at, cause: cause}
}

type deadlineContext struct {
	context.Context
	at    time.Time
	cause error
}

type deadlineKey struct{}

func (d *deadlineContext) Value(key any) any {
	if key == (deadlineKey{}) {
		return d
	}
	return d.Context.Value(key)
}

// splitDeadline separates ctx's exchange deadline, if it carries one, from
// the context whose cancellation the exchange follows.
func splitDeadline(ctx context.Context) (context.Context, *deadlineContext) {
	if d, ok := ctx.(*deadlineContext); ok {
		return d.Context, d
	}
	if d, ok := ctx.Value(deadlineKey{}).(*deadlineContext); ok {
		// Wrapped again: ctx's own cancellation includes the parent's.
		return ctx, d
	}
	return ctx, nil
}

// deadline is the exchange's deadline, zero for none.
func (d *deadlineContext) deadline() time.Time {
	if d == nil {
		return time.Time{}
	}
	return d.at
}

// expired is the error of an exchange past its deadline, or nil.
func (d *deadlineContext) expired(err error, now time.Time) error {
	if d == nil || !errors.Is(err, os.ErrDeadlineExceeded) && now.Before(d.at) {
		return nil
	}
	return &canceledError{err: context.DeadlineExceeded, cause: d.cause}
}

// RoundTripWith sends req through rt, which need not know WithDeadline:
// an exchange deadline req's context carries becomes a context deadline,
// released when the answer's body is closed.
func RoundTripWith(rt http.RoundTripper, req *http.Request) (*http.Response, error) {
	parent, d := splitDeadline(req.Context())
	if d == nil {
		return rt.RoundTrip(req)
	}
	ctx, cancel := context.WithDeadlineCause(parent, d.at, d.cause)
	resp, err := rt.RoundTrip(req.WithContext(ctx))
	if err != nil {
		err = withCause(parent, ctx, err)
		cancel()
		return nil, err
	}
	resp.Body = &deadlineBody{ReadCloser: resp.Body, parent: parent, ctx: ctx, cancel: cancel}
	return resp, nil
}

// withCause words err as the Transport does when the exchange deadline
// (not the parent's cancellation) ended it, so callers see its cause.
func withCause(parent, ctx context.Context, err error) error {
	if ctx.Err() != nil && parent.Err() == nil {
		return &canceledError{err: ctx.Err(), cause: context.Cause(ctx)}
	}
	return err
}

// deadlineBody releases the deadline's context when closed.
type deadlineBody struct {
	io.ReadCloser
	parent, ctx context.Context
	cancel      context.CancelFunc
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		err = withCause(b.parent, b.ctx, err)
	}
	return n, err
}

func (b *deadlineBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}
