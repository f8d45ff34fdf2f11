package config

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse feeds arbitrary bytes through everything a reload does with a
// file: parse, validate, mask, render, classify. None of it may panic.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.yaml")
	for _, name := range files {
		if data, err := os.ReadFile(name); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte("a: &a {<<: *a}\n"))
	f.Add([]byte("backends: [{name: ${X:-}}]\n"))
	env := envOf(map[string]string{"X": "1", "ETCD_PASSWORD": "p", "ADMIN_TOKEN": "t"})
	f.Fuzz(func(t *testing.T, data []byte) {
		empty := IsEmpty(data)
		_, _ = TopLevelKeys(data)
		c, err := Parse(data, env)
		if empty && err != nil {
			t.Fatalf("an empty document must parse: %v", err)
		}
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		c.Validate()
		if _, err := c.Masked().YAML(); err != nil {
			t.Fatalf("YAML: %v", err)
		}
		DiscoveryChange(Default(), c)
		DiscoveryChange(c, c.Clone())
	})
}
