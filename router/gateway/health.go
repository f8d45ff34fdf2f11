package gateway

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"switchyard/router/clock"
	"switchyard/router/config"
)

// runtime is the state of one backend that outlives a configuration
// reload: its health and its circuit breaker. A reload keeps a backend's
// runtime when nothing that shapes that state changed.
type runtime struct {
	name    string
	base    string
	probe   config.HealthCheck
	cb      config.CircuitBreaker
	probing bool

	healthy atomic.Bool
	breaker *breaker

	stop context.CancelFunc
	done sync.WaitGroup
}

// fits reports whether a reloaded backend can keep rt.
func (rt *runtime) fits(name, base string, b config.Backend) bool {
	return rt.name == name && rt.base == base && rt.probe == b.HealthCheck && rt.cb == b.CircuitBreaker &&
		rt.probing == probes(b)
}

// probes reports whether a backend is actively health-checked: only
// enabled backends with checks on. The others count as healthy.
func probes(b config.Backend) bool { return b.IsEnabled() && b.HealthCheck.Enabled }

// prober runs health checks; one per gateway, shared by every runtime.
type prober struct {
	client  *http.Client
	clock   clock.Clock
	log     *slog.Logger
	healthy func(backend string, ok bool)
}

func (p *prober) newRuntime(name, base string, b config.Backend) *runtime {
	rt := &runtime{name: name, base: base, probe: b.HealthCheck, cb: b.CircuitBreaker, probing: probes(b)}
	rt.healthy.Store(true)
	p.healthy(name, true)
	rt.breaker = newBreaker(b.CircuitBreaker.FailureThreshold, orDefault(b.CircuitBreaker.OpenFor.Std(), config.DefaultOpenFor),
		func(open bool) {
			if open {
				p.log.Warn("backend circuit breaker opened", "backend", name, "open_for", b.CircuitBreaker.OpenFor.String())
			} else {
				p.log.Info("backend circuit breaker closed", "backend", name)
			}
		})
	ctx, cancel := context.WithCancel(context.Background())
	rt.stop = cancel
	if rt.probing {
		rt.done.Add(1)
		go func() {
			defer rt.done.Done()
			p.loop(ctx, rt)
		}()
	}
	return rt
}

// close stops the runtime's probe loop and waits for it.
func (rt *runtime) close() {
	rt.stop()
	rt.done.Wait()
}

// loop probes at once (a backend starts healthy, so a fresh router serves
// immediately; a dead one is out after unhealthy_threshold probes), then
// every interval until stopped.
func (p *prober) loop(ctx context.Context, rt *runtime) {
	interval := orDefault(rt.probe.Interval.Std(), config.DefaultHealthInterval)
	var passes, fails int
	for {
		ok := p.check(ctx, rt)
		if ctx.Err() != nil {
			return
		}
		if ok {
			passes, fails = passes+1, 0
		} else {
			passes, fails = 0, fails+1
		}
		switch {
		case ok && !rt.healthy.Load() && passes >= rt.probe.HealthyThreshold:
			rt.healthy.Store(true)
			p.healthy(rt.name, true)
			p.log.Info("backend healthy", "backend", rt.name)
		case !ok && rt.healthy.Load() && fails >= rt.probe.UnhealthyThreshold:
			rt.healthy.Store(false)
			p.healthy(rt.name, false)
			p.log.Warn("backend unhealthy", "backend", rt.name, "failed_probes", fails)
		}
		if !clock.Sleep(p.clock, interval, ctx.Done()) {
			return
		}
	}
}

// maxProbeBody is how much of a probe's answer is read, so the connection
// can be reused without trusting the backend to send a small body.
const maxProbeBody = 4 << 10

// check is one probe: a GET answered 2xx within the probe timeout.
func (p *prober) check(ctx context.Context, rt *runtime) bool {
	ctx, cancel := context.WithTimeout(ctx, orDefault(rt.probe.Timeout.Std(), config.DefaultHealthTimeout))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rt.base+rt.probe.Path, nil)
	if err != nil {
		return false
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxProbeBody))
	_ = resp.Body.Close()
	return resp.StatusCode >= 200 && resp.StatusCode < 300
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}
