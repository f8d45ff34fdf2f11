package template

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/ardanlabs/jinja"
)

// jsonOptions are the keyword arguments of transformers' tojson filter, which is
// json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
type jsonOptions struct {
	ensureASCII bool
	indent      string
	indented    bool
	itemSep     string
	keySep      string
	sortKeys    bool
}

// jsonParams is the filter's parameter order after the value, for positional arguments.
var jsonParams = []string{"ensure_ascii", "indent", "separators", "sort_keys"}

// toJSON is the tojson filter. The engine's own differs from Python's (floats, key order and HTML
// escaping under indent), so the source rewrite sends every |tojson here.
func (st *renderState) toJSON(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if err := st.checkDeadline(); err != nil {
		return st.fail(err)
	}
	if len(args) == 0 {
		return st.fail(fmt.Errorf("%w: tojson without a value", ErrRender))
	}
	opts, err := parseJSONOptions(args[1:], kwargs)
	if err != nil {
		return st.fail(err)
	}
	enc := jsonEncoder{opts: opts, limit: st.limits.MaxOutputBytes}
	err = enc.value(args[0], 0)
	if err == nil && enc.sb.Len() > enc.limit {
		err = enc.tooLarge()
	}
	if err != nil {
		return st.fail(err)
	}
	return jinja.NewString(enc.sb.String()), nil
}

func parseJSONOptions(positional []jinja.Value, kwargs map[string]jinja.Value) (jsonOptions, error) {
	if len(positional) > len(jsonParams) {
		return jsonOptions{}, fmt.Errorf("%w: tojson takes at most %d arguments", ErrRender, len(jsonParams))
	}
	named := make(map[string]jinja.Value, len(positional)+len(kwargs))
	for i, v := range positional {
		named[jsonParams[i]] = v
	}
	for k, v := range kwargs {
		if _, dup := named[k]; dup {
			return jsonOptions{}, fmt.Errorf("%w: tojson got %s twice", ErrRender, k)
		}
		named[k] = v
	}
	opts := jsonOptions{itemSep: ", ", keySep: ": "}
	for k, v := range named {
		switch k {
		case "ensure_ascii":
			opts.ensureASCII = v.IsTruthy()
		case "sort_keys":
			opts.sortKeys = v.IsTruthy()
		case "indent":
			if err := opts.setIndent(v); err != nil {
				return jsonOptions{}, err
			}
		case "separators":
		default:
			return jsonOptions{}, fmt.Errorf("%w: tojson has no argument %q", ErrRender, k)
		}
	}
	if opts.indented {
		opts.itemSep = "," // json.dumps's default when indent is given
	}
	if v, ok := named["separators"]; ok && !v.IsNone() {
		if !v.IsList() || v.AsList().Len() != 2 || !v.AsList().Get(0).IsString() || !v.AsList().Get(1).IsString() {
			return jsonOptions{}, fmt.Errorf("%w: tojson separators must be two strings", ErrRender)
		}
		opts.itemSep, opts.keySep = v.AsList().Get(0).AsString(), v.AsList().Get(1).AsString()
	}
	return opts, nil
}

// maxIndent bounds an integer indent: Python would repeat the space that often per level.
const maxIndent = 64

func (o *jsonOptions) setIndent(v jinja.Value) error {
	switch {
	case v.IsNone() || v.IsUndefined():
	case v.IsInt():
		n := min(max(v.AsInt(), 0), maxIndent) // Python: " " * n, empty when negative
		o.indent, o.indented = strings.Repeat(" ", int(n)), true
	case v.IsString():
		o.indent, o.indented = v.AsString(), true
	default:
		return fmt.Errorf("%w: tojson indent must be an integer or a string", ErrRender)
	}
	return nil
}

type jsonEncoder struct {
	opts  jsonOptions
	sb    strings.Builder
	limit int
}

func (e *jsonEncoder) value(v jinja.Value, level int) error {
	if e.sb.Len() > e.limit {
		return e.tooLarge()
	}
	switch {
	case v.IsNone():
		e.sb.WriteString("null")
	case v.IsBool():
		e.sb.WriteString(map[bool]string{true: "true", false: "false"}[v.AsBool()])
	case v.IsInt():
		e.sb.WriteString(strconv.FormatInt(v.AsInt(), 10))
	case v.IsFloat():
		e.sb.WriteString(pythonJSONFloat(v.AsFloat()))
	case v.IsString():
		e.string(v.AsString())
	case v.IsList():
		return e.list(v.AsList().Items, level)
	case v.IsDict():
		return e.dict(v.AsDict(), level)
	default: // undefined, callables: json.dumps raises TypeError
		return fmt.Errorf("%w: tojson cannot encode %s", ErrRender, kindName(v))
	}
	return nil
}

// tooLarge stops an encoding past the rendered-text limit: its result could only make the render
// too large.
func (e *jsonEncoder) tooLarge() error {
	return fmt.Errorf("%w: tojson output over %d bytes", ErrTooLarge, e.limit)
}

func (e *jsonEncoder) list(items []jinja.Value, level int) error {
	if len(items) == 0 {
		e.sb.WriteString("[]")
		return nil
	}
	e.sb.WriteByte('[')
	for i, item := range items {
		e.separator(i, level+1)
		if err := e.value(item, level+1); err != nil {
			return err
		}
	}
	e.closing(level)
	e.sb.WriteByte(']')
	return nil
}

func (e *jsonEncoder) dict(d *jinja.Dict, level int) error {
	if d.Len() == 0 {
		e.sb.WriteString("{}")
		return nil
	}
	keys := d.OrderedKeys()
	if e.opts.sortKeys {
		keys = append([]string(nil), keys...)
		sort.Strings(keys) // UTF-8 byte order is code point order, as Python sorts str
	}
	e.sb.WriteByte('{')
	for i, k := range keys {
		e.separator(i, level+1)
		e.string(k)
		e.sb.WriteString(e.opts.keySep)
		v, _ := d.Get(k)
		if err := e.value(v, level+1); err != nil {
			return err
		}
	}
	e.closing(level)
	e.sb.WriteByte('}')
	return nil
}

// separator writes what precedes item i: the item separator after the first, then, when indenting,
// a newline and the indent of the level.
func (e *jsonEncoder) separator(i, level int) {
	if i > 0 {
		e.sb.WriteString(e.opts.itemSep)
	}
	if e.opts.indented {
		e.newline(level)
	}
}

func (e *jsonEncoder) closing(level int) {
	if e.opts.indented {
		e.newline(level)
	}
}

func (e *jsonEncoder) newline(level int) {
	e.sb.WriteByte('\n')
	for range level {
		e.sb.WriteString(e.opts.indent)
	}
}

// string writes s as json.dumps does: the two-character escapes it knows, \u00XX (lower-case hex)
// for the other control characters, and non-ASCII as it is, or as \uXXXX (surrogate pairs above
// U+FFFF) with ensure_ascii.
func (e *jsonEncoder) string(s string) {
	e.sb.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			e.sb.WriteString(`\"`)
		case r == '\\':
			e.sb.WriteString(`\\`)
		case r == '\n':
			e.sb.WriteString(`\n`)
		case r == '\r':
			e.sb.WriteString(`\r`)
		case r == '\t':
			e.sb.WriteString(`\t`)
		case r == '\b':
			e.sb.WriteString(`\b`)
		case r == '\f':
			e.sb.WriteString(`\f`)
		case r < 0x20:
			fmt.Fprintf(&e.sb, `\u%04x`, r)
		case r < 0x7F || !e.opts.ensureASCII: // ensure_ascii escapes DEL too
			e.sb.WriteRune(r)
		case r > 0xFFFF:
			r -= 0x10000
			fmt.Fprintf(&e.sb, `\u%04x\u%04x`, 0xD800+(r>>10), 0xDC00+(r&0x3FF))
		default:
			fmt.Fprintf(&e.sb, `\u%04x`, r)
		}
	}
	e.sb.WriteByte('"')
}

// pythonJSONFloat formats f as json.dumps does: float.__repr__ (the shortest digits that read back,
// in positional notation for decimal exponents from -4 to 15, else scientific with a signed,
// two-digit-at-least exponent), and NaN and Infinity as Python spells them.
func pythonJSONFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	return pythonFloatRepr(f)
}

func pythonFloatRepr(f float64) string {
	sci := strconv.FormatFloat(f, 'e', -1, 64) // e.g. -1.25e+16
	mantissa, expText, _ := strings.Cut(sci, "e")
	exp, _ := strconv.Atoi(expText)
	if exp >= -4 && exp < 16 {
		s := strconv.FormatFloat(f, 'f', -1, 64)
		if !strings.Contains(s, ".") {
			s += ".0"
		}
		return s
	}
	sign := "+"
	if exp < 0 {
		sign, exp = "-", -exp
	}
	return fmt.Sprintf("%se%s%02d", mantissa, sign, exp)
}

func kindName(v jinja.Value) string {
	switch {
	case v.IsUndefined():
		return "an undefined value"
	case v.IsCallable():
		return "a function"
	}
	return "this value"
}
