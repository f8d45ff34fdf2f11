package eventplane

import (
	"context"
	"slices"
	"sync"
	"time"

	"switchyard/router/clock"
)

// CoverageDebounce is how long the coverage reporter lets changes settle
// before it recomputes: a broker that connects or leaves moves many
// subscriptions at once, and the gauges follow the settled state.
const CoverageDebounce = 250 * time.Millisecond

// BusSessions is implemented by a Bus that can count the live,
// non-draining sessions covering a namespace. Without it coverage counts
// one session for a covered namespace and none otherwise.
type BusSessions interface {
	Sessions(namespace string) int
}

// NamespaceCoverage is one configured namespace under the broker
// transport: the sessions covering it and the subscriptions of each
// family waiting for one.
type NamespaceCoverage struct {
	Namespace string
	Sessions  int
	// Pending counts pending subscriptions per family (kv_metrics,
	// kv-events); every family of the reporter has an entry.
	Pending map[string]int
}

// Coverage reports each namespace's sessions and pending subscriptions:
// namespaces lists the configured ones; a namespace a subscription names
// outside them is added. The result is sorted by namespace.
func Coverage(bus Bus, namespaces []string, sups ...*Supervisor) []NamespaceCoverage {
	byNS := map[string]*NamespaceCoverage{}
	add := func(ns string) *NamespaceCoverage {
		c := byNS[ns]
		if c == nil {
			c = &NamespaceCoverage{Namespace: ns, Pending: make(map[string]int, len(sups))}
			for _, s := range sups {
				c.Pending[s.fam.Topic] = 0
			}
			byNS[ns] = c
		}
		return c
	}
	for _, ns := range namespaces {
		add(ns)
	}
	for _, s := range sups {
		for _, sub := range s.Subscriptions() {
			c := add(sub.Namespace)
			if sub.State == Pending {
				c.Pending[sub.Family]++
			}
		}
	}
	out := make([]NamespaceCoverage, 0, len(byNS))
	for ns, c := range byNS {
		switch b := bus.(type) {
		case nil:
		case BusSessions:
			c.Sessions = b.Sessions(ns)
		default:
			if b.Covers(ns) {
				c.Sessions = 1
			}
		}
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b NamespaceCoverage) int {
		if a.Namespace < b.Namespace {
			return -1
		}
		if a.Namespace > b.Namespace {
			return 1
		}
		return 0
	})
	return out
}

// CoverageReporter keeps a debounced Coverage: it recomputes
// CoverageDebounce after the bus's sessions or a supervisor's
// subscriptions changed, never by polling, and serves the last result to
// the admin API and the gauges.
type CoverageReporter struct {
	clk        clock.Clock
	bus        Bus
	namespaces func() []string
	sups       []*Supervisor

	mu   sync.Mutex
	last []NamespaceCoverage
}

// NewCoverageReporter reports on sups' subscriptions and bus's sessions
// (bus may be nil: no sessions) for the namespaces namespaces returns.
func NewCoverageReporter(clk clock.Clock, bus Bus, namespaces func() []string, sups ...*Supervisor) *CoverageReporter {
	r := &CoverageReporter{clk: clk, bus: bus, namespaces: namespaces, sups: sups}
	r.refresh()
	return r
}

// Coverage is the last debounced result.
func (r *CoverageReporter) Coverage() []NamespaceCoverage {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

func (r *CoverageReporter) refresh() {
	c := Coverage(r.bus, r.namespaces(), r.sups...)
	r.mu.Lock()
	r.last = c
	r.mu.Unlock()
}

// Run follows changes until ctx ends. Kick asks for a recomputation from
// outside (the configured namespaces changed).
func (r *CoverageReporter) Run(ctx context.Context, kick <-chan struct{}) {
	changed := make(chan struct{}, 1)
	note := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, s := range r.sups {
		wg.Add(1)
		go func(ch <-chan struct{}) {
			defer wg.Done()
			for {
				select {
				case <-ch:
					note()
				case <-ctx.Done():
					return
				}
			}
		}(s.StateChanged())
	}
	if r.bus != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-r.bus.Changed():
					note()
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	for {
		select {
		case <-changed:
		case <-kick:
		case <-ctx.Done():
			return
		}
		if !clock.Sleep(r.clk, CoverageDebounce, ctx.Done()) {
			return
		}
		// Changes during the debounce are in this result.
		select {
		case <-changed:
		default:
		}
		r.refresh()
	}
}
