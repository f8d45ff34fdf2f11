package config

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

// TestValidSamplesHaveNoErrors covers every testdata file not named invalid_*.
func TestValidSamplesHaveNoErrors(t *testing.T) {
	files, err := filepath.Glob("testdata/*.yaml")
	require.NoError(t, err)
	n := 0
	for _, f := range files {
		if strings.HasPrefix(filepath.Base(f), "invalid_") {
			continue
		}
		n++
		t.Run(filepath.Base(f), func(t *testing.T) {
			c, err := Load(f)
			require.NoError(t, err)
			errs, _ := c.Validate()
			assert.Empty(t, errs)
		})
	}
	assert.GreaterOrEqual(t, n, 3)
}

// TestInvalidSamplesFailAtTheirField: every testdata/invalid_*.yaml must
// fail, at the path its first line names ("# expect: <path>"), either while
// parsing or in validation.
func TestInvalidSamplesFailAtTheirField(t *testing.T) {
	files, err := filepath.Glob("testdata/invalid_*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			want := expectedPath(t, f)
			var got []string
			c, err := Load(f)
			if err != nil {
				var pe *ParseError
				require.True(t, errors.As(err, &pe), "want a *ParseError, got %v", err)
				for _, fe := range pe.Errors {
					got = append(got, fe.Path)
				}
			} else {
				errs, _ := c.Validate()
				for _, i := range errs {
					got = append(got, i.Path)
				}
			}
			assert.Contains(t, got, want, "errors at: %v", got)
		})
	}
}

func expectedPath(t *testing.T, file string) string {
	t.Helper()
	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	s := bufio.NewScanner(f)
	require.True(t, s.Scan())
	path, ok := strings.CutPrefix(s.Text(), "# expect: ")
	require.True(t, ok, "first line must be '# expect: <path>', got %q", s.Text())
	return strings.TrimSpace(path)
}

// TestFullSampleHasEveryField keeps testdata/full.yaml complete: every
// field of the schema (list elements as "[]") must appear in it.
func TestFullSampleHasEveryField(t *testing.T) {
	data, err := os.ReadFile("testdata/full.yaml")
	require.NoError(t, err)
	var root yaml.Node
	require.NoError(t, yaml.Unmarshal(data, &root))
	present := map[string]bool{}
	nodePaths(root.Content[0], "", present)

	var missing []string
	for _, p := range schemaPaths(reflect.TypeFor[Config](), "") {
		if !present[p] {
			missing = append(missing, p)
		}
	}
	assert.Empty(t, missing, "fields missing from testdata/full.yaml")
}

func nodePaths(n *yaml.Node, path string, out map[string]bool) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			p := joinPath(path, n.Content[i].Value)
			out[p] = true
			nodePaths(n.Content[i+1], p, out)
		}
	case yaml.SequenceNode:
		for _, item := range n.Content {
			nodePaths(item, path+"[]", out)
		}
	}
}

func schemaPaths(t reflect.Type, path string) []string {
	var out []string
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		p := joinPath(path, name)
		out = append(out, p)
		ft := t.Field(i).Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch {
		case ft.Kind() == reflect.Struct:
			out = append(out, schemaPaths(ft, p)...)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			out = append(out, schemaPaths(ft.Elem(), p+"[]")...)
		}
	}
	return out
}

func TestSchemaPathsSeeNestedFields(t *testing.T) {
	paths := schemaPaths(reflect.TypeFor[Config](), "")
	for _, p := range []string{"backends[].enabled", "dynamo.discovery.etcd.tls.client_key", "dynamo.event_bus.brokers[].token_hash", "dynamo.kv.conditional_disaggregation.decode_busy_threshold"} {
		assert.True(t, slices.Contains(paths, p), p)
	}
}
