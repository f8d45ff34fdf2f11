package reports

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// FuzzParseMerged: whatever the bytes, reading a merged summary.json fails cleanly or gives
// cells that lie in their grid, each index once.
func FuzzParseMerged(f *testing.F) {
	f.Add([]byte(`{"schema_version": 1, "cells": {}}`))
	f.Add([]byte(`{"schema_version": 1, "sweep": {"id": "x", "dimensions": [{"name": "seed", "values": ["1"]}], "cells": 1}, "cells": {"seed=1": {"index": 0}}}`))
	f.Add([]byte(`{"schema_version": 1, "sweep": {"dimensions": [{"name": "seed", "values": ["1", "2"]}], "cells": 2}, "cells": {"seed=2": {"index": 5}}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		s, err := ParseMerged(raw, "fuzz")
		if err != nil {
			return
		}
		seen := map[int]bool{}
		for _, c := range s.Found {
			require.True(t, c.Index() >= 0 && c.Index() < s.Cells)
			require.False(t, seen[c.Index()])
			seen[c.Index()] = true
		}
		assert.Equal(t, s.Cells, len(s.Found)+len(s.Missing))
	})
}
