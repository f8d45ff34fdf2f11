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
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxDocumentBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	c, err := Parse(data, os.LookupEnv)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Parse decodes one YAML document over the defaults. Unknown keys, type
// errors and unresolvable ${VAR} references are all reported together in
// a *ParseError. lookupEnv resolves variables; nil means none are set.
// Parse does not validate: call Validate on the result.
func Parse(data []byte, lookupEnv func(string) (string, bool)) (*Config, error) {
	if len(data) > maxDocumentBytes {
		return nil, &ParseError{[]FieldError{{Message: fmt.Sprintf("file is larger than %d bytes", maxDocumentBytes)}}}
	}
	if lookupEnv == nil {
		lookupEnv = func(string) (string, bool) { return "", false }
	}
	root, err := parseNode(data)
	if err != nil {
		return nil, &ParseError{[]FieldError{{Message: err.Error()}}}
	}
	c := Default()
	if root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
		top := resolveAlias(root.Content[0])
		if !isNull(top) && top.Kind != yaml.MappingNode {
			return nil, &ParseError{[]FieldError{{Line: top.Line, Message: "the top level must be a mapping, got a " + kindName(top)}}}
		}
		d := decoder{lookupEnv: lookupEnv, budget: maxNodeVisits}
		d.value(top, reflect.ValueOf(c).Elem(), "")
		if len(d.errs) > 0 {
			return nil, &ParseError{d.problems()}
		}
	}
	c.fillElementDefaults()
	return c, nil
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
