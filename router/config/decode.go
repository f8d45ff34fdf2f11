package config

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// decoder walks a yaml.Node tree alongside a Go value by reflection. Doing
// the walk ourselves (rather than yaml.Decoder.KnownFields) is what lets
// every problem be reported at once with its full dotted path, and lets
// ${ENV} expansion see each scalar together with its path.
type decoder struct {
	lookupEnv func(string) (string, bool)
	errs      []FieldError
	// budget bounds the nodes visited, so aliases that fan out cannot turn
	// a small file into unbounded work.
	budget    int
	exhausted bool
	// dropped counts problems past maxReportedErrors; a file that is not a
	// configuration at all should give a readable report, not a flood.
	dropped int
}

const maxReportedErrors = 100

// spend takes one visit from the budget; once it runs out the document is
// refused with a single error.
func (d *decoder) spend(path string, n *yaml.Node) bool {
	if d.budget > 0 {
		d.budget--
		return true
	}
	if !d.exhausted {
		d.exhausted = true
		d.fail(path, n, "document expands to too many nodes (aliases?)")
	}
	return false
}

var durationType = reflect.TypeFor[Duration]()

// elementDefaulter is a list element type whose absent keys have non-zero
// defaults: each decoded element starts from them, so explicit values
// (zeros included) can be told apart from absent ones.
type elementDefaulter interface{ setDefaults() }

func (d *decoder) fail(path string, n *yaml.Node, format string, args ...any) {
	if len(d.errs) >= maxReportedErrors {
		d.dropped++
		return
	}
	d.errs = append(d.errs, FieldError{Path: path, Line: n.Line, Message: fmt.Sprintf(format, args...)})
}

// problems returns the reported errors, with a last line counting the rest.
func (d *decoder) problems() []FieldError {
	if d.dropped == 0 {
		return d.errs
	}
	return append(d.errs, FieldError{Message: fmt.Sprintf("... and %d more problems", d.dropped)})
}

// value decodes n into v. A null node leaves scalars and structs at their
// defaults and clears lists, maps and optional blocks.
func (d *decoder) value(n *yaml.Node, v reflect.Value, path string) {
	if !d.spend(path, n) {
		return
	}
	n = resolveAlias(n)
	if isNull(n) {
		switch v.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Map:
			v.SetZero()
		}
		return
	}
	if v.Type() == durationType {
		if s, ok := d.scalar(n, path, "a duration"); ok {
			dur, err := parseDuration(s)
			if err != nil {
				d.fail(path, n, "%v", err)
				return
			}
			v.Set(reflect.ValueOf(dur))
		}
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		d.value(n, v.Elem(), path)
	case reflect.Struct:
		d.structure(n, v, path)
	case reflect.Slice:
		d.sequence(n, v, path)
	case reflect.Map:
		d.mapping(n, v, path)
	case reflect.String:
		if s, ok := d.scalar(n, path, "a string"); ok {
			v.SetString(s)
		}
	case reflect.Bool:
		d.boolean(n, v, path)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		d.integer(n, v, path)
	case reflect.Float32, reflect.Float64:
		d.float(n, v, path)
	default:
		// Only reachable if the schema grows a type this walker lacks;
		// the schema tests decode every field, so this fails there first.
		d.fail(path, n, "internal: unsupported field type %s", v.Type())
	}
}

// scalar returns the expanded text of a scalar node.
func (d *decoder) scalar(n *yaml.Node, path, want string) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		d.fail(path, n, "want %s, got a %s", want, kindName(n))
		return "", false
	}
	s, err := expandEnv(n.Value, d.lookupEnv)
	if err != nil {
		d.fail(path, n, "%v", err)
		return "", false
	}
	return s, true
}

// Typed scalars are parsed from their text after expansion, whatever their
// YAML tag, so that "${PORT}" or a quoted "64" reads as a number.
func (d *decoder) boolean(n *yaml.Node, v reflect.Value, path string) {
	s, ok := d.scalar(n, path, "true or false")
	if !ok {
		return
	}
	switch s {
	case "true", "True", "TRUE":
		v.SetBool(true)
	case "false", "False", "FALSE":
		v.SetBool(false)
	default:
		d.fail(path, n, "want true or false, got %q", s)
	}
}

func (d *decoder) integer(n *yaml.Node, v reflect.Value, path string) {
	s, ok := d.scalar(n, path, "an integer")
	if !ok {
		return
	}
	i, err := strconv.ParseInt(s, 0, v.Type().Bits())
	if err != nil {
		d.fail(path, n, "want an integer that fits in %d bits, got %q", v.Type().Bits(), s)
		return
	}
	v.SetInt(i)
}

func (d *decoder) float(n *yaml.Node, v reflect.Value, path string) {
	s, ok := d.scalar(n, path, "a number")
	if !ok {
		return
	}
	f, err := strconv.ParseFloat(s, v.Type().Bits())
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		d.fail(path, n, "want a finite number, got %q", s)
		return
	}
	v.SetFloat(f)
}

func (d *decoder) sequence(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.SequenceNode {
		d.fail(path, n, "want a list, got a %s", kindName(n))
		return
	}
	if len(n.Content) == 0 {
		v.SetZero() // "[]" and absent mean the same; keep one representation
		return
	}
	out := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, item := range n.Content {
		if e, ok := out.Index(i).Addr().Interface().(elementDefaulter); ok {
			e.setDefaults()
		}
		d.value(item, out.Index(i), fmt.Sprintf("%s[%d]", path, i))
	}
	v.Set(out)
}

// mapping decodes a free-form map (string keys, not expanded).
func (d *decoder) mapping(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.fail(path, n, "want a mapping, got a %s", kindName(n))
		return
	}
	pairs := d.pairs(n, path)
	if len(pairs) == 0 {
		v.SetZero()
		return
	}
	out := reflect.MakeMap(v.Type())
	for _, p := range pairs {
		elem := reflect.New(v.Type().Elem()).Elem()
		d.value(p.value, elem, path+"["+strconv.Quote(p.key.Value)+"]")
		out.SetMapIndex(reflect.ValueOf(p.key.Value).Convert(v.Type().Key()), elem)
	}
	v.Set(out)
}

// structure decodes a mapping into a schema struct; unknown keys are errors.
func (d *decoder) structure(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.fail(path, n, "want a mapping, got a %s", kindName(n))
		return
	}
	fields := fieldIndex(v.Type())
	for _, p := range d.pairs(n, path) {
		child := joinPath(path, p.key.Value)
		i, ok := fields[p.key.Value]
		if !ok {
			d.fail(child, p.key, "unknown field")
			continue
		}
		d.value(p.value, v.Field(i), child)
	}
}

type pair struct{ key, value *yaml.Node }

// pairs lists a mapping's entries with "<<" merge keys flattened: explicit
// keys win over merged ones, and earlier merges win over later ones, as
// YAML's merge-key convention says. Duplicate explicit keys are errors
// (yaml.v3 only checks them when decoding into Go values, not into Nodes).
func (d *decoder) pairs(n *yaml.Node, path string) []pair {
	var out []pair
	first := map[string]*yaml.Node{}
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := resolveAlias(n.Content[i]), n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.fail(path, k, "mapping keys must be strings, got a %s", kindName(k))
			continue
		}
		if k.Value == "<<" && k.ShortTag() == "!!merge" {
			merges = append(merges, val)
			continue
		}
		if prev, dup := first[k.Value]; dup {
			d.fail(joinPath(path, k.Value), k, "duplicate key (first at line %d)", prev.Line)
			continue
		}
		first[k.Value] = k
		out = append(out, pair{k, val})
	}
	visiting := map[*yaml.Node]bool{n: true}
	for _, m := range merges {
		d.merge(m, path, first, &out, visiting)
	}
	return out
}

// merge appends the entries of a merge-key value not already present.
func (d *decoder) merge(m *yaml.Node, path string, seen map[string]*yaml.Node, out *[]pair, visiting map[*yaml.Node]bool) {
	if !d.spend(path, m) {
		return
	}
	m = resolveAlias(m)
	if visiting[m] {
		d.fail(path, m, "merge key refers to its own mapping")
		return
	}
	switch m.Kind {
	case yaml.SequenceNode:
		for _, item := range m.Content {
			if resolveAlias(item).Kind != yaml.MappingNode {
				d.fail(path, item, "merge key wants mappings, got a %s", kindName(resolveAlias(item)))
				continue
			}
			d.merge(item, path, seen, out, visiting)
		}
	case yaml.MappingNode:
		visiting[m] = true
		defer delete(visiting, m)
		for i := 0; i+1 < len(m.Content); i += 2 {
			k := resolveAlias(m.Content[i])
			if k.Kind != yaml.ScalarNode {
				continue
			}
			if k.Value == "<<" && k.ShortTag() == "!!merge" {
				d.merge(m.Content[i+1], path, seen, out, visiting)
				continue
			}
			if _, dup := seen[k.Value]; dup {
				continue
			}
			seen[k.Value] = k
			*out = append(*out, pair{k, m.Content[i+1]})
		}
	default:
		d.fail(path, m, "merge key wants a mapping, got a %s", kindName(m))
	}
}

// fieldIndex maps yaml names to struct field indices.
func fieldIndex(t reflect.Type) map[string]int {
	out := make(map[string]int, t.NumField())
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if name != "" && name != "-" {
			out[name] = i
		}
	}
	return out
}

// resolveAlias follows alias nodes to the anchored node. yaml.v3 anchors
// point at real nodes, but a malformed tree is cut off after a few hops.
func resolveAlias(n *yaml.Node) *yaml.Node {
	for hops := 0; n.Kind == yaml.AliasNode && n.Alias != nil && hops < 8; hops++ {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == 0 || n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" || n.Kind == yaml.AliasNode
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	case yaml.ScalarNode:
		return "scalar"
	case yaml.AliasNode:
		return "alias"
	case yaml.DocumentNode:
		return "document"
	}
	return "empty node"
}

func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}
