package sweep

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Cells are numbered as nested loops over the dimensions in the order
// given, the last one fastest.
func TestCellsAreNumberedLastDimensionFastest(t *testing.T) {
	g, err := Parse([]string{"seed=1,2,3", "workers=8,16"})
	require.NoError(t, err)
	require.Equal(t, 6, g.Cells())
	var keys []string
	for i := range g.Cells() {
		c, err := g.Cell(i)
		require.NoError(t, err)
		keys = append(keys, Key(c))
	}
	assert.Equal(t, []string{"seed=1,workers=8", "seed=1,workers=16", "seed=2,workers=8", "seed=2,workers=16",
		"seed=3,workers=8", "seed=3,workers=16"}, keys)
	_, err = g.Cell(6)
	assert.ErrorContains(t, err, "cells 0..5")
	_, err = g.Cell(-1)
	assert.Error(t, err)
}

func TestParseRefusesBadSpecifications(t *testing.T) {
	for spec, want := range map[string]string{
		"seed":       "want NAME=V1,V2",
		"=1,2":       "not a flag name",
		"Seed=1":     "not a flag name",
		"seed=1,,2":  "an empty value",
		"seed=":      "an empty value",
		"seed=1,2,1": "given twice",
		"seed=" + strings.Repeat("1,", MaxValues) + "1": "more than 1000 values",
	} {
		_, err := Parse([]string{spec})
		assert.ErrorContains(t, err, want, spec)
	}
	_, err := Parse([]string{"seed=1", "seed=2"})
	assert.ErrorContains(t, err, "--sweep seed is given twice")
	many := make([]string, MaxDimensions+1)
	for i := range many {
		many[i] = string(rune('a'+i)) + "=1"
	}
	_, err = Parse(many)
	assert.ErrorContains(t, err, "at most 8")
	hundred := make([]string, 100)
	for i := range hundred {
		hundred[i] = fmt.Sprintf("v%03d", i)
	}
	_, err = Parse([]string{"a=" + strings.Join(hundred, ","), "b=" + strings.Join(hundred, ","), "c=1,2"})
	assert.ErrorContains(t, err, "more than 10000 cells")
}

func TestIDDependsOnEveryArgument(t *testing.T) {
	a := ID([]string{"bench", "pickers", "--seed=1"})
	assert.Len(t, a, 16)
	assert.Equal(t, a, ID([]string{"bench", "pickers", "--seed=1"}))
	assert.NotEqual(t, a, ID([]string{"bench", "pickers", "--seed=2"}))
	assert.NotEqual(t, ID([]string{"ab", "c"}), ID([]string{"a", "bc"}), "arguments are delimited")
}
