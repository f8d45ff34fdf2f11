package httpd

import (
	"context"
	"sync"
	"time"
)

// requestContext is a request's context: canceled when its handler
// returns or the watch sees the client leave. It implements AfterFunc, so
// a context derived from it (a handler's timeout) registers a callback
// instead of starting a goroutine per derivation, and makes its Done
// channel only when someone asks. Watch and Unwatch are AfterFunc
// without allocating, for a caller that registers per request (the
// gateway's upstream client, once per exchange).
type requestContext struct {
	parent context.Context
	mu     sync.Mutex
	done   chan struct{}
	err    error
	funcs  []afterFunc
	// funcsBuf holds the first callbacks, which are all most requests
	// register, without a slice of their own.
	funcsBuf [2]afterFunc
	lastKey  uint64
}

// afterFunc is a registered callback; key tells registrations apart.
type afterFunc struct {
	f   func()
	key uint64
}

func (c *requestContext) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c *requestContext) Value(key any) any           { return c.parent.Value(key) }

func (c *requestContext) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
		if c.err != nil {
			close(c.done)
		}
	}
	return c.done
}

func (c *requestContext) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// AfterFunc runs f on its own goroutine once the context is canceled; stop
// reports whether it kept f from running.
func (c *requestContext) AfterFunc(f func()) (stop func() bool) {
	key := c.Watch(f)
	return func() bool { return c.Unwatch(key) }
}

// Watch runs f on its own goroutine once the context is canceled (at once
// if it is), and returns the key that Unwatch takes.
func (c *requestContext) Watch(f func()) (key uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lastKey++
	if c.err != nil {
		go f()
		return c.lastKey
	}
	if c.funcs == nil {
		c.funcs = c.funcsBuf[:0]
	}
	c.funcs = append(c.funcs, afterFunc{f: f, key: c.lastKey})
	return c.lastKey
}

// Unwatch reports whether it kept the f that Watch returned key for from
// running; once it has run, or been unwatched, false.
func (c *requestContext) Unwatch(key uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, a := range c.funcs {
		if a.key == key {
			c.funcs = append(c.funcs[:i], c.funcs[i+1:]...)
			return true
		}
	}
	return false
}

// cancel ends the context with context.Canceled.
func (c *requestContext) cancel() {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = context.Canceled
	if c.done != nil {
		close(c.done)
	}
	funcs := c.funcs
	c.funcs = nil
	c.mu.Unlock()
	for _, a := range funcs {
		go a.f()
	}
}
