package picker

import (
	"fmt"
	"strings"

	"switchyard/router/kv"
	"switchyard/router/load"
)

// Picker names, as the simulator, replay and bench commands accept them.
const (
	NameLoad       = "load"
	NameRoundRobin = "round_robin"
	NameRandom     = "random"
	NameKV         = "kv"
)

// Names lists the pickers New builds.
func Names() []string { return []string{NameLoad, NameRoundRobin, NameRandom, NameKV} }

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
}

// New builds the named picker.
func New(name string, d Deps) (Picker, error) {
	switch name {
	case NameLoad:
		return NewLoadBased(d.Store, d.Count), nil
	case NameRoundRobin:
		return NewRoundRobin(d.Store, d.Count), nil
	case NameRandom:
		return NewRandom(d.Store, d.Seed, d.Count), nil
	case NameKV:
		if d.Tracker == nil {
			return nil, fmt.Errorf("picker %q needs a KV tracker", name)
		}
		return newKVAware(d.Store, d.Tracker, d.KV, d.Seed, d.Count, d.KVCount, d.KVUnsupported), nil
	}
	return nil, fmt.Errorf("unknown picker %q (known: %s)", name, strings.Join(Names(), ", "))
}
