package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"

	"gopkg.in/yaml.v3"
)

// Ceilings on what Parse will look at. A configuration file is operator
// input, but a wrong path (a log file, a binary) should fail fast, not
// exhaust memory.
const (
	maxDocumentBytes = 4 << 20
	maxNodeVisits    = 1 << 20
)

// FieldError is one problem found while decoding, at a dotted field path
// ("backends[1].url") and the line it was found on.
type FieldError struct {
	Path    string
	Line    int
	Message string
}

// Error renders "path (line N): message"; parts that are unknown are left out.
func (e FieldError) Error() string {
	switch {
	case e.Path != "" && e.Line > 0:
		return fmt.Sprintf("%s (line %d): %s", e.Path, e.Line, e.Message)
	case e.Path != "":
		return e.Path + ": " + e.Message
	case e.Line > 0:
		return fmt.Sprintf("line %d: %s", e.Line, e.Message)
	}
	return e.Message
}

// ParseError carries every problem in a document, not just the first, so
// one run of `config validate` shows them all.
type ParseError struct {
	Errors []FieldError
}

func (e *ParseError) Error() string {
	lines := make([]string, len(e.Errors))
	for i, fe := range e.Errors {
		lines[i] = fe.Error()
	}
	return strings.Join(lines, "\n")
}

// Load reads and parses the file at path, expanding ${VAR} from the
// process environment.
func Load(path string) (*Config, error) {
	data, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := Parse(data, os.LookupEnv)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// ReadFile reads a configuration file, stopping one byte past the size
// ceiling so that Parse refuses a larger file without it being read whole.
func ReadFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxDocumentBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return data, nil
}

// TopLevelFields lists the keys a router configuration may have at its
// top level.
func TopLevelFields() []string {
	t := reflect.TypeFor[Config]()
	out := make([]string, 0, t.NumField())
	for i := range t.NumField() {
		out = append(out, strings.Split(t.Field(i).Tag.Get("yaml"), ",")[0])
	}
	return out
}

// Parse decodes one YAML document over the defaults. Unknown keys, type
// errors and unresolvable ${VAR} references are all reported together in
// a *ParseError. lookupEnv resolves variables; nil means none are set.
// Parse does not validate: call Validate on the result.
func Parse(data []byte, lookupEnv func(string) (string, bool)) (*Config, error) {
	c := Default()
	if err := ParseInto(data, c, lookupEnv); err != nil {
		return nil, err
	}
	c.fillElementDefaults()
	return c, nil
}

// ParseInto decodes one YAML document into v, a pointer to a struct whose
// fields carry yaml tags, under Parse's rules: strict keys, every problem
// at its dotted path in a *ParseError, ${VAR} expansion, the size and
// alias ceilings. Fields the document leaves out keep v's values, so v
// carries the defaults. Other files of the project (the fake fleet's)
// are read this way too, and report problems like the router's.
func ParseInto(data []byte, v any, lookupEnv func(string) (string, bool)) error {
	top, err := topNode(data)
	if err != nil {
		return err
	}
	if top == nil {
		return nil
	}
	if lookupEnv == nil {
		lookupEnv = func(string) (string, bool) { return "", false }
	}
	d := decoder{lookupEnv: lookupEnv, budget: maxNodeVisits}
	d.value(top, reflect.ValueOf(v).Elem(), "")
	if len(d.errs) > 0 {
		return &ParseError{d.problems()}
	}
	return nil
}

// topNode parses data and returns its top-level mapping, or nil for a
// document with no content (empty, blank, comments only, or null).
func topNode(data []byte) (*yaml.Node, error) {
	if len(data) > maxDocumentBytes {
		return nil, &ParseError{[]FieldError{{Message: fmt.Sprintf("file is larger than %d bytes", maxDocumentBytes)}}}
	}
	root, err := parseNode(data)
	if err != nil {
		return nil, &ParseError{[]FieldError{{Message: err.Error()}}}
	}
	if root.Kind != yaml.DocumentNode || len(root.Content) == 0 {
		return nil, nil
	}
	top := resolveAlias(root.Content[0])
	if isNull(top) {
		return nil, nil
	}
	if top.Kind != yaml.MappingNode {
		return nil, &ParseError{[]FieldError{{Line: top.Line, Message: "the top level must be a mapping, got a " + kindName(top)}}}
	}
	return top, nil
}

// IsEmpty reports whether data is a document with no content: empty,
// whitespace or comments only, or a bare null. Parse reads such a file
// as all defaults; a reload refuses it (see reload guards).
func IsEmpty(data []byte) bool {
	if len(bytes.TrimSpace(data)) == 0 {
		return true // YAML refuses tabs, but blank is blank
	}
	top, err := topNode(data)
	return err == nil && top == nil
}

// TopLevelKeys lists the keys of data's top-level mapping, in file order
// (nil for an empty document), to tell kinds of files apart.
func TopLevelKeys(data []byte) ([]string, error) {
	top, err := topNode(data)
	if err != nil || top == nil {
		return nil, err
	}
	var keys []string
	for i := 0; i+1 < len(top.Content); i += 2 {
		if k := resolveAlias(top.Content[i]); k.Kind == yaml.ScalarNode {
			keys = append(keys, k.Value)
		}
	}
	return keys, nil
}

// parseNode parses exactly one YAML document into a node tree.
func parseNode(data []byte) (root yaml.Node, err error) {
	// A parser bug must surface as a bad file, not a crashed router.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("yaml: cannot parse document: %v", r)
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return yaml.Node{}, nil
		}
		return yaml.Node{}, err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return yaml.Node{}, err
		}
		return yaml.Node{}, fmt.Errorf("line %d: only one YAML document is allowed", extra.Line)
	}
	return root, nil
}
