package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzScenarioInputs: whatever a scenario file holds, reading it for the files it names fails
// cleanly or names files by non-empty paths under the scenario's folder or absolute ones.
func FuzzScenarioInputs(f *testing.F) {
	f.Add([]byte("workload:\n  trace:\n    path: t.jsonl\nfleet:\n  - {engine: {profile: p.json}}\n"))
	f.Add([]byte("workload: {trace: {path: /abs/t.jsonl}}\n"))
	f.Add([]byte("fleet: 3\n"))
	f.Add([]byte("{{{"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		dir := t.TempDir()
		p := filepath.Join(dir, "sc.yaml")
		require.NoError(t, os.WriteFile(p, raw, 0o644))
		ins, err := scenarioInputs("in/sc.yaml", p)
		if err != nil {
			return
		}
		for _, in := range ins {
			require.NotEmpty(t, in.Path)
			require.NotEmpty(t, in.What)
		}
	})
}
