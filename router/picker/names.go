package picker

import (
	"fmt"
	"strings"

	"switchyard/router/active"
	"switchyard/router/kv"
	"switchyard/router/load"
)

// Picker names, as the simulator, replay and bench commands accept them.
const (
	NameLoad          = "load"
	NameRoundRobin    = "round_robin"
	NameRandom        = "random"
	NameKV            = "kv"
	NameLeastKVBlocks = "least_kv_blocks"
	// NameLoadTracked and NameKVTracked are load and kv with the core's
	// account of prefill tokens and active blocks forced on, whatever the
	// settings say: for comparisons (bench pickers).
	NameLoadTracked = "load_tracked"
	NameKVTracked   = "kv_tracked"
)

// policies is the registry: every picker New builds, by name, in the order
// Names lists them. Adding a policy is one entry here.
var policies = []struct {
	name  string
	build func(d Deps) (policy, error)
}{
	{NameLoad, func(Deps) (policy, error) { return loadPolicy{}, nil }},
	{NameRoundRobin, func(Deps) (policy, error) { return roundRobinPolicy{}, nil }},
	{NameRandom, func(d Deps) (policy, error) { return newRandomPolicy(d.Seed), nil }},
	{NameKV, func(d Deps) (policy, error) {
		if d.Tracker == nil {
			return nil, fmt.Errorf("picker %q needs a KV tracker", NameKV)
		}
		return newKVPolicy(d.Tracker, d.KV, d.Seed, d.KVCount, d.KVUnsupported), nil
	}},
	{NameLeastKVBlocks, func(Deps) (policy, error) { return leastKVBlocks{}, nil }},
	{NameLoadTracked, func(Deps) (policy, error) { return loadPolicy{}, nil }},
	{NameKVTracked, func(d Deps) (policy, error) {
		if d.Tracker == nil {
			return nil, fmt.Errorf("picker %q needs a KV tracker", NameKVTracked)
		}
		return newKVPolicy(d.Tracker, d.KV, d.Seed, d.KVCount, d.KVUnsupported), nil
	}},
}

// forcesTracking reports the pickers that track whatever the settings say.
func forcesTracking(name string) bool { return name == NameLoadTracked || name == NameKVTracked }

// IsKV reports whether the named picker scores KV overlap (it needs the
// KV index and kv-events).
func IsKV(name string) bool { return name == NameKV || name == NameKVTracked }

// Names lists the pickers New builds.
func Names() []string {
	names := make([]string, len(policies))
	for i, p := range policies {
		names[i] = p.name
	}
	return names
}

// Deps is what New builds a picker from.
type Deps struct {
	Store *load.Store
	// Tracker and KV are the KV-aware picker's index and settings.
	Tracker *kv.Tracker
	KV      KVOptions
	// Seed feeds the random picker and the KV-aware picker's sampling.
	Seed uint64
	// Count receives each selection's role and reason; KVCount each
	// KV-aware selection's result. Either may be nil.
	Count   func(role, reason string)
	KVCount func(result string)
	// KVUnsupported hears of every block size a request's prompt could
	// not be hashed for (the host logs each once); it may be nil.
	KVUnsupported func(model string, blockSize int)
	// Active is the core's account of the requests it dispatched, which
	// the pickers read when KV.Track says so; nil reads nothing.
	Active *active.Set
}

// New builds the named picker.
func New(name string, d Deps) (Picker, error) {
	for _, p := range policies {
		if p.name != name {
			continue
		}
		pol, err := p.build(d)
		if err != nil {
			return nil, err
		}
		s := newScheduler(d.Store, d.Count, pol)
		s.active, s.opts, s.forceTrack = d.Active, d.KV, forcesTracking(name)
		return s, nil
	}
	return nil, fmt.Errorf("unknown picker %q (known: %s)", name, strings.Join(Names(), ", "))
}
