//go:build race

package eventplane_test

// raceStacks: the race detector doubles stack reservations, so the idle
// subscription memory ceiling doubles with it.
const raceStacks = 2
