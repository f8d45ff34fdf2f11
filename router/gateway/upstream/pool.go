package upstream

import (
	"sync"
	"time"
)

// Pool limits, as the gateway's net/http transport had them.
const (
	maxIdlePerHost = 128
	maxIdleTotal   = 1024
	idleTimeout    = 90 * time.Second
)

// pool keeps idle keep-alive connections per host, newest last: the
// newest is handed out first, being the least likely to have been closed
// by its server. One timer closes connections idle past idleTimeout.
type pool struct {
	mu    sync.Mutex
	idle  map[string][]*conn
	total int
	sweep *time.Timer // armed while any connection idles
	now   func() time.Time
}

func newPool() *pool {
	return &pool{idle: map[string][]*conn{}, now: time.Now}
}

// get returns the newest idle connection to key, or nil.
func (p *pool) get(key string) *conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	list := p.idle[key]
	if len(list) == 0 {
		return nil
	}
	c := list[len(list)-1]
	list[len(list)-1] = nil
	p.idle[key] = list[:len(list)-1]
	p.total--
	c.reused = true
	return c
}

// put keeps c for reuse, or closes it when the pool is full.
func (p *pool) put(c *conn) {
	p.mu.Lock()
	if p.total >= maxIdleTotal || len(p.idle[c.key]) >= maxIdlePerHost {
		p.mu.Unlock()
		c.close()
		return
	}
	c.idleAt = p.now()
	p.idle[c.key] = append(p.idle[c.key], c)
	p.total++
	if p.sweep == nil {
		p.sweep = time.AfterFunc(idleTimeout, p.closeExpired)
	}
	p.mu.Unlock()
}

// closeExpired closes the connections idle for idleTimeout or longer and
// rearms the timer for the oldest one left.
func (p *pool) closeExpired() {
	p.mu.Lock()
	now := p.now()
	var expired []*conn
	oldest := now
	for key, list := range p.idle {
		// Oldest first: the expired ones are a prefix.
		n := 0
		for n < len(list) && now.Sub(list[n].idleAt) >= idleTimeout {
			n++
		}
		expired = append(expired, list[:n]...)
		rest := append(list[:0], list[n:]...)
		clear(list[len(rest):])
		if len(rest) == 0 {
			delete(p.idle, key)
			continue
		}
		p.idle[key] = rest
		if rest[0].idleAt.Before(oldest) {
			oldest = rest[0].idleAt
		}
	}
	p.total -= len(expired)
	p.sweep = nil
	if p.total > 0 {
		p.sweep = time.AfterFunc(oldest.Add(idleTimeout).Sub(now), p.closeExpired)
	}
	p.mu.Unlock()
	for _, c := range expired {
		c.close()
	}
}

// closeIdle closes every idle connection; the pool stays usable.
func (p *pool) closeIdle() {
	p.mu.Lock()
	idle := p.idle
	p.idle = map[string][]*conn{}
	p.total = 0
	if p.sweep != nil {
		p.sweep.Stop()
		p.sweep = nil
	}
	p.mu.Unlock()
	for _, list := range idle {
		for _, c := range list {
			c.close()
		}
	}
}

// idleCount is the number of idle connections to key.
func (p *pool) idleCount(key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle[key])
}
