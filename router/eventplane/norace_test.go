//go:build !race

package eventplane_test

const raceStacks = 1
