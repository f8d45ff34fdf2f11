// Package template renders Hugging Face chat templates as the transformers library does, so that the
// router hashes the very text a worker tokenizes.
//
// Templates are Jinja2 source written by model authors and shipped by the fleet: untrusted code even
// when an operator has pinned its checksum. The package runs them on github.com/ardanlabs/jinja (no
// file loader: include, import and extends do not parse), bounds the source, the input, the nesting,
// macro recursion, range() and the rendered text, checks the caller's context at every call the
// template makes into this package, and never lets an engine panic escape. docs/prompt-templates.md
// says what a template can still do that no check interrupts.
package template

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ardanlabs/jinja"
)

// Error kinds; every error Parse and Render return wraps exactly one of them.
var (
	// ErrSyntax: the source does not parse, or uses what this package refuses (a file loader).
	ErrSyntax = errors.New("template syntax")
	// ErrTooLarge: the source, the input or the rendered text is over its byte limit.
	ErrTooLarge = errors.New("template size limit")
	// ErrLimit: a render went over a step limit (nesting, macro depth, range items).
	ErrLimit = errors.New("template step limit")
	// ErrDeadline: the context ended while the template ran.
	ErrDeadline = errors.New("template deadline")
	// ErrRaised: the template called raise_exception; the message follows.
	ErrRaised = errors.New("template raised")
	// ErrInput: the request data cannot be given to a template (malformed JSON, a reserved name).
	ErrInput = errors.New("template input")
	// ErrRender: any other failure while rendering (an undefined call, a type error, an engine panic).
	ErrRender = errors.New("template render")
)

// Limits bound what one template and one render may cost. Zero fields take the defaults.
type Limits struct {
	MaxSourceBytes int // template source (default 1 MiB)
	MaxTagBytes    int // one {{ }} or {% %} tag, which bounds the parser's recursion (default 64 KiB)
	MaxNesting     int // nested blocks, and nested brackets within a tag (default 64)
	MaxInputBytes  int // the request JSON given to one render, all fields together (default 8 MiB)
	MaxInputDepth  int // nesting of that JSON (default 64)
	MaxOutputBytes int // rendered text (default 1 MiB)
	MaxMacroDepth  int // macro calls in progress at once (default 128)
	MaxRangeItems  int // items all range() calls of one render may produce together (default 100,000)
}

// The defaults of Limits.
const (
	DefaultMaxSourceBytes = 1 << 20
	DefaultMaxTagBytes    = 64 << 10
	DefaultMaxNesting     = 64
	DefaultMaxInputBytes  = 8 << 20
	DefaultMaxInputDepth  = 64
	DefaultMaxOutputBytes = 1 << 20
	DefaultMaxMacroDepth  = 128
	DefaultMaxRangeItems  = 100_000
)

func (l Limits) withDefaults() Limits {
	orDefault := func(v, d int) int {
		if v <= 0 {
			return d
		}
		return v
	}
	return Limits{
		MaxSourceBytes: orDefault(l.MaxSourceBytes, DefaultMaxSourceBytes),
		MaxTagBytes:    orDefault(l.MaxTagBytes, DefaultMaxTagBytes),
		MaxNesting:     orDefault(l.MaxNesting, DefaultMaxNesting),
		MaxInputBytes:  orDefault(l.MaxInputBytes, DefaultMaxInputBytes),
		MaxInputDepth:  orDefault(l.MaxInputDepth, DefaultMaxInputDepth),
		MaxOutputBytes: orDefault(l.MaxOutputBytes, DefaultMaxOutputBytes),
		MaxMacroDepth:  orDefault(l.MaxMacroDepth, DefaultMaxMacroDepth),
		MaxRangeItems:  orDefault(l.MaxRangeItems, DefaultMaxRangeItems),
	}
}

// Options configure a parsed template.
type Options struct {
	// SpecialTokens are passed to every render as variables, as transformers passes the tokenizer's
	// special_tokens_map: bos_token, eos_token, unk_token, pad_token and the like. A request's
	// template kwargs override them, as they do in transformers.
	SpecialTokens map[string]string
	// AdditionalSpecialTokens is passed as additional_special_tokens when not empty.
	AdditionalSpecialTokens []string
	// Now is the clock strftime_now reads. Nil leaves strftime_now undefined, so that templates
	// which test `strftime_now is defined` take their fallback; the package never reads the wall
	// clock itself.
	Now func() time.Time
	// Limits bound the template and its renders.
	Limits Limits
}

// Template is a parsed chat template, safe for concurrent renders.
type Template struct {
	engine    *jinja.Template
	opts      Options
	limits    Limits
	constants map[string]jinja.Value // special tokens, converted once
}

// Parse checks and compiles a template source.
func Parse(src string, opts Options) (*Template, error) {
	limits := opts.Limits.withDefaults()
	if len(src) > limits.MaxSourceBytes {
		return nil, fmt.Errorf("%w: source is %d bytes, over the limit of %d", ErrTooLarge, len(src), limits.MaxSourceBytes)
	}
	rewritten, err := rewriteSource(src, limits)
	if err != nil {
		return nil, err
	}
	engine, err := compileGuarded(rewritten)
	if err != nil {
		return nil, err
	}
	return &Template{engine: engine, opts: opts, limits: limits, constants: specialTokenValues(opts)}, nil
}

// compileGuarded compiles, turning an engine panic into an error.
func compileGuarded(src string) (t *jinja.Template, err error) {
	defer func() {
		if p := recover(); p != nil {
			t, err = nil, fmt.Errorf("%w: engine panic while parsing: %v", ErrSyntax, p)
		}
	}()
	t, err = jinja.Compile(src)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSyntax, err)
	}
	return t, nil
}

func specialTokenValues(opts Options) map[string]jinja.Value {
	values := make(map[string]jinja.Value, len(opts.SpecialTokens)+1)
	for name, token := range opts.SpecialTokens {
		values[name] = jinja.NewString(token)
	}
	if len(opts.AdditionalSpecialTokens) > 0 {
		items := make([]jinja.Value, len(opts.AdditionalSpecialTokens))
		for i, token := range opts.AdditionalSpecialTokens {
			items[i] = jinja.NewString(token)
		}
		values["additional_special_tokens"] = jinja.NewList(items)
	}
	return values
}

// Render renders the template for one request. It returns ErrDeadline as soon as it sees ctx end,
// which it checks before and after the engine runs and at every call the template makes into this
// package (tojson, range, macros, raise_exception, strftime_now); a template that loops without such
// a call is not interrupted (docs/prompt-templates.md).
func (t *Template) Render(ctx context.Context, in Input) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("%w: %v", ErrDeadline, err)
	}
	st := &renderState{ctx: ctx, limits: t.limits, now: t.opts.Now}
	vars, err := t.variables(in, st)
	if err != nil {
		return "", err
	}
	out, err := st.run(t.engine, vars)
	if err != nil {
		return "", err
	}
	if len(out) > t.limits.MaxOutputBytes {
		return "", fmt.Errorf("%w: rendered text is %d bytes, over the limit of %d", ErrTooLarge, len(out), t.limits.MaxOutputBytes)
	}
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("%w: %v", ErrDeadline, err)
	}
	return out, nil
}

// variables builds what the template sees, in transformers' precedence: globals, then the special
// tokens, then the request's kwargs, then messages, tools, documents and add_generation_prompt.
func (t *Template) variables(in Input, st *renderState) (map[string]jinja.Value, error) {
	if err := in.checkSize(t.limits.MaxInputBytes); err != nil {
		return nil, err
	}
	conv := converter{maxDepth: t.limits.MaxInputDepth}
	vars := make(map[string]jinja.Value, len(t.constants)+16)
	st.addGlobals(vars)
	for name, v := range t.constants {
		vars[name] = v
	}
	if err := addKwargs(vars, in.Kwargs, &conv); err != nil {
		return nil, err
	}
	return vars, in.addRequest(vars, &conv)
}
