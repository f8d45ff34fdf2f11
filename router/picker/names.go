package picker

import (
	"fmt"
	"strings"

	"switchyard/router/load"
)

// Picker names, as the simulator, replay and bench commands accept them.
const (
	NameLoad       = "load"
	NameRoundRobin = "round_robin"
	NameRandom     = "random"
)

// Names lists the pickers New builds.
func Names() []string { return []string{NameLoad, NameRoundRobin, NameRandom} }

// New builds the named picker over store. seed feeds the random picker
// and is ignored by the others.
func New(name string, store *load.Store, seed uint64, count func(role, reason string)) (Picker, error) {
	switch name {
	case NameLoad:
		return NewLoadBased(store, count), nil
	case NameRoundRobin:
		return NewRoundRobin(store, count), nil
	case NameRandom:
		return NewRandom(store, seed, count), nil
	}
	return nil, fmt.Errorf("unknown picker %q (known: %s)", name, strings.Join(Names(), ", "))
}
