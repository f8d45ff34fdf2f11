package upstream

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"time"

	"switchyard/router/h1"
)

// Transport is an http.RoundTripper for plain HTTP/1.1 backends; see the
// package comment. It is safe for concurrent use.
type Transport struct {
	// Fallback serves the requests Transport does not speak (see
	// handles); it must be set.
	Fallback http.RoundTripper
	dialer   net.Dialer
	pool     *pool
}

// New returns a Transport that sends what it cannot serve to fallback.
func New(fallback http.RoundTripper) *Transport {
	return &Transport{
		Fallback: fallback,
		// The limits of the gateway's net/http transport.
		dialer: net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second},
		pool:   newPool(),
	}
}

// CloseIdleConnections closes the pooled connections, and the fallback's.
func (t *Transport) CloseIdleConnections() {
	t.pool.closeIdle()
	if c, ok := t.Fallback.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// handles reports whether Transport serves req itself: plain http to a
// host, a method that is a token, and a body of known length (the
// gateway always holds the whole body) without trailers.
func handles(req *http.Request) bool {
	u := req.URL
	if u == nil || u.Scheme != "http" || u.Host == "" || u.User != nil {
		return false
	}
	if req.Method == http.MethodConnect || !h1.ValidHeaderName(req.Method) {
		return false
	}
	if len(req.TransferEncoding) > 0 || len(req.Trailer) > 0 || req.Header.Get("Expect") != "" {
		return false
	}
	unknownLength := req.Body != nil && req.Body != http.NoBody && req.ContentLength <= 0
	return !unknownLength
}

// RoundTrip sends req and reads the answer's head on the caller's
// goroutine. Pooled connections their server closed are skipped; on a
// reused connection that still fails before any byte of the request went
// out it tries once more on a new connection. Never once the request was
// sent, even if not a byte came back: the server may have acted on it,
// and inference requests are not idempotent.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !handles(req) {
		return RoundTripWith(t.Fallback, req)
	}
	ctx, dl := splitDeadline(req.Context())
	return t.roundTrip(ctx, dl, hostPort(req), (*stdRequest)(req))
}

// roundTrip is RoundTrip's and Send's: tries on a pooled connection, and
// once more on a new one when a reused one fails before any byte left.
func (t *Transport) roundTrip(ctx context.Context, dl *deadlineContext, key string, out outgoing) (*http.Response, error) {
	for retry := false; ; retry = true {
		resp, c, err := t.tryOnce(ctx, dl, out, key, retry)
		if err == nil {
			return resp, nil
		}
		out.sent()
		if retry || c == nil || !c.reused || !staleConn(err) || ctx.Err() != nil {
			return nil, err
		}
		if out, err = out.again(); err != nil {
			return nil, err
		}
	}
}

// outgoing is a request as an exchange writes it: an http.Request or a
// Head.
type outgoing interface {
	// writeTo writes the whole request and flushes.
	writeTo(w *bufio.Writer, closeAfter bool) error
	requestMethod() string
	// closeAfter reports whether the request asks for the connection's
	// close after its answer.
	closeAfter() bool
	// sent releases the body once it is written or will not be.
	sent()
	// again is the same request for a second attempt.
	again() (outgoing, error)
	// request is the http.Request, for the answer's Request field.
	request() *http.Request
}

// stdRequest is an http.Request as an outgoing.
type stdRequest http.Request

func (r *stdRequest) req() *http.Request { return (*http.Request)(r) }
func (r *stdRequest) writeTo(w *bufio.Writer, closeAfter bool) error {
	return writeRequest(w, r.req(), closeAfter)
}
func (r *stdRequest) requestMethod() string  { return r.Method }
func (r *stdRequest) closeAfter() bool       { return closeRequested(r.req()) }
func (r *stdRequest) sent()                  { closeBody(r.req()) }
func (r *stdRequest) request() *http.Request { return r.req() }
func (r *stdRequest) again() (outgoing, error) {
	req, err := rewound(r.req())
	return (*stdRequest)(req), err
}

// tryOnce makes one attempt on a pooled connection (unless fresh) or a
// new one. It returns the connection used, if any, with the error.
func (t *Transport) tryOnce(ctx context.Context, dl *deadlineContext, out outgoing, key string, fresh bool) (*http.Response, *conn, error) {
	if ctx.Err() != nil {
		return nil, nil, t.failure(ctx, nil, ctx.Err())
	}
	now := time.Now()
	if err := dl.expired(nil, now); err != nil {
		return nil, nil, err
	}
	var c *conn
	if !fresh {
		// A connection its server closed while it idled is dropped here,
		// before any byte of the request could be lost with it. One that
		// idled for less than peekAfterIdle is not checked: a busy router
		// would pay a system call per request for nothing.
		for c = t.pool.get(key); c != nil && c.idledFor(t.pool.now()) >= peekAfterIdle && c.peerClosed(); c = t.pool.get(key) {
			c.close()
		}
	}
	if c == nil {
		nc, err := t.dial(ctx, dl, key)
		if err != nil {
			return nil, nil, t.failure(ctx, dl, fmt.Errorf("upstream: %w", err))
		}
		c = newConn(nc, key)
	}
	resp, err := t.exchange(ctx, dl, c, out, now)
	return resp, c, err
}

// dial connects to key within the exchange deadline, if any.
func (t *Transport) dial(ctx context.Context, dl *deadlineContext, key string) (net.Conn, error) {
	if dl == nil {
		return t.dialer.DialContext(ctx, "tcp", key)
	}
	dctx, cancel := context.WithDeadlineCause(ctx, dl.at, dl.cause)
	defer cancel()
	return t.dialer.DialContext(dctx, "tcp", key)
}

// exchange writes out on c and reads the answer's head. The exchange
// deadline (dl) is the connection's; the context's cancellation
// interrupts a blocked write or read by putting that deadline in the
// past. No goroutine or timer of its own waits on either.
func (t *Transport) exchange(ctx context.Context, dl *deadlineContext, c *conn, out outgoing, now time.Time) (*http.Response, error) {
	// Set before the interrupt is registered: an interrupt that fires
	// at once must not be overwritten.
	c.setDeadline(dl.deadline(), now)
	stop := watchCancel(ctx, c)
	c.written = 0
	closeAfter := out.closeAfter()
	if err := out.writeTo(c.bw, closeAfter); err != nil {
		t.release(c, stop, false)
		if c.written == 0 && isNetError(err) && dl.expired(err, time.Now()) == nil {
			err = &unsentError{err}
		}
		return nil, t.failure(ctx, dl, err)
	}
	out.sent()
	// The answer's head and its body reader, in one allocation.
	a := &answer{}
	resp, err := readHead(c.br, &c.values, &a.resp)
	if err != nil {
		t.release(c, stop, false)
		return nil, t.failure(ctx, dl, err)
	}
	f, err := frameOf(resp, out.requestMethod())
	if err != nil {
		t.release(c, stop, false)
		return nil, err
	}
	f.keepAlive = f.keepAlive && !closeAfter
	resp.Request = out.request()
	if f.kind == noBody || f.kind == lengthBody && f.length == 0 {
		resp.Body = http.NoBody
		t.release(c, stop, f.keepAlive)
		return resp, nil
	}
	a.body = body{t: t, c: c, ctx: ctx, dl: dl, stop: stop, f: f, left: f.length}
	resp.Body = &a.body
	return resp, nil
}

// answer is an exchange's result: the head and the body's reader.
type answer struct {
	resp http.Response
	body body
}

// watcher is a context that runs callbacks itself once done, registered
// and unregistered without allocating: the builtin server's request
// contexts.
type watcher interface {
	Watch(f func()) (key uint64)
	Unwatch(key uint64) bool
}

// afterFuncer is a context that runs callbacks itself once done.
type afterFuncer interface {
	AfterFunc(f func()) (stop func() bool)
}

// cancelWatch is an exchange's registration for its context's
// cancellation: with a watcher, its key; with another context, the stop
// func of its AfterFunc or context.AfterFunc; with neither, nothing.
type cancelWatch struct {
	w       watcher
	key     uint64
	stopped func() bool
}

// stop unregisters, and reports whether the interrupt never fired (and
// now never will).
func (cw cancelWatch) stop() bool {
	switch {
	case cw.w != nil:
		return cw.w.Unwatch(cw.key)
	case cw.stopped != nil:
		return cw.stopped()
	}
	return true
}

// watchCancel arranges for c's blocked I/O to be interrupted once ctx is
// canceled. A context that runs callbacks itself (the builtin server's
// request contexts) takes the interrupt directly: no derived context and
// no Done channel is made for it.
func watchCancel(ctx context.Context, c *conn) cancelWatch {
	switch w := ctx.(type) {
	case watcher:
		return cancelWatch{w: w, key: w.Watch(c.interruptFn)}
	case afterFuncer:
		return cancelWatch{stopped: w.AfterFunc(c.interruptFn)}
	}
	if ctx.Done() == nil {
		return cancelWatch{}
	}
	return cancelWatch{stopped: context.AfterFunc(ctx, c.interruptFn)}
}

// release pools c when it may carry another request, and closes it
// otherwise. A context whose interrupt already fired (stop reports
// false) may have set a deadline on c, which is then never reused.
func (t *Transport) release(c *conn, cw cancelWatch, keepAlive bool) {
	if cw.stop() && keepAlive && c.br.Buffered() == 0 {
		t.pool.put(c)
		return
	}
	c.close()
}

// failure words err, or the context's end or the exchange deadline when
// it is why err happened: the error then wraps context.Canceled or
// context.DeadlineExceeded and the cause, so callers can tell a
// cancellation or deadline from a broken backend.
func (t *Transport) failure(ctx context.Context, dl *deadlineContext, err error) error {
	if ctx.Err() != nil {
		return &canceledError{err: ctx.Err(), cause: context.Cause(ctx)}
	}
	if e := dl.expired(err, time.Now()); e != nil {
		return e
	}
	return err
}

// canceledError is a request ended by its context.
type canceledError struct{ err, cause error }

func (e *canceledError) Error() string {
	if e.cause != nil && e.cause != e.err {
		return "upstream: " + e.err.Error() + ": " + e.cause.Error()
	}
	return "upstream: " + e.err.Error()
}

func (e *canceledError) Unwrap() []error { return []error{e.err, e.cause} }

// unsentError is a write that failed before any byte reached the socket.
type unsentError struct{ err error }

func (e *unsentError) Error() string { return "upstream: writing the request: " + e.err.Error() }
func (e *unsentError) Unwrap() error { return e.err }

// staleConn reports whether err is what a reused connection that its
// server had closed looks like before anything of the request was sent.
func staleConn(err error) bool {
	var unsent *unsentError
	return errors.As(err, &unsent)
}

// isNetError tells a socket's failure from a request the writer refused.
func isNetError(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, net.ErrClosed)
}

// isPeerClose reports whether a read failed because the server closed
// the connection.
func isPeerClose(err error) bool {
	return err == io.EOF || errors.Is(err, syscall.ECONNRESET)
}

// rewound is req with a fresh copy of its body, for a second attempt.
func rewound(req *http.Request) (*http.Request, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return req, nil
	}
	if req.GetBody == nil {
		return nil, errors.New("upstream: connection closed by the server and the request body cannot be sent again")
	}
	b, err := req.GetBody()
	if err != nil {
		return nil, err
	}
	r := *req
	r.Body = b
	return &r, nil
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// hostPort is the dial address of req's URL, port 80 by default.
func hostPort(req *http.Request) string {
	u := req.URL
	if u.Port() != "" {
		return u.Host
	}
	return net.JoinHostPort(u.Hostname(), "80")
}
