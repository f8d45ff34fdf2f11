package template_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"switchyard/router/prompt/template"
)

var oneMessage = json.RawMessage(`[{"role": "user", "content": "hi"}]`)

func TestParseErrors(t *testing.T) {
	small := template.Limits{MaxSourceBytes: 64, MaxTagBytes: 32, MaxNesting: 3}
	for _, c := range []struct {
		name, src string
		limits    template.Limits
		kind      error
	}{
		{"unclosed block", `{% if x %}`, template.Limits{}, template.ErrSyntax},
		{"unclosed tag", `{{ x `, template.Limits{}, template.ErrSyntax},
		{"include has no loader", `{% include "other.jinja" %}`, template.Limits{}, template.ErrSyntax},
		{"import has no loader", `{% import "m.jinja" as m %}`, template.Limits{}, template.ErrSyntax},
		{"extends has no loader", `{% extends "base.jinja" %}`, template.Limits{}, template.ErrSyntax},
		{"source too large", strings.Repeat("a", 65), small, template.ErrTooLarge},
		{"tag too large", `{{ "` + strings.Repeat("a", 40) + `" }}`, small, template.ErrTooLarge},
		{"blocks too deep", `{% if a %}{% if b %}{% for c in d %}{% if e %}{% endif %}{% endfor %}{% endif %}{% endif %}`, template.Limits{MaxNesting: 3}, template.ErrLimit},
		{"brackets too deep", `{{ ((((1)))) }}`, small, template.ErrLimit},
	} {
		_, err := template.Parse(c.src, template.Options{Limits: c.limits})
		if !errors.Is(err, c.kind) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.kind)
		}
	}
}

func TestRenderErrors(t *testing.T) {
	for _, c := range []struct {
		name, src string
		in        template.Input
		limits    template.Limits
		kind      error
		says      string
	}{
		{"raise_exception", `{{ raise_exception("Conversation roles must alternate") }}`, template.Input{Messages: oneMessage}, template.Limits{}, template.ErrRaised, "Conversation roles must alternate"},
		{"output too large", `{% for i in range(100) %}0123456789{% endfor %}`, template.Input{Messages: oneMessage}, template.Limits{MaxOutputBytes: 999}, template.ErrTooLarge, "1000 bytes"},
		{"tojson output too large", `{{ messages|tojson }}`, template.Input{Messages: json.RawMessage(`["` + strings.Repeat("x", 100) + `"]`)}, template.Limits{MaxOutputBytes: 50}, template.ErrTooLarge, "tojson"},
		{"input too large", `x`, template.Input{Messages: oneMessage}, template.Limits{MaxInputBytes: 10}, template.ErrTooLarge, "request data"},
		{"input too deep", `x`, template.Input{Messages: json.RawMessage(`[[[[1]]]]`)}, template.Limits{MaxInputDepth: 3}, template.ErrLimit, "nested"},
		{"runaway recursion", `{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}`, template.Input{Messages: oneMessage}, template.Limits{}, template.ErrLimit, "macro"},
		{"range budget", `{% for i in range(60) %}{% for j in range(60) %}{% endfor %}{% endfor %}`, template.Input{Messages: oneMessage}, template.Limits{MaxRangeItems: 1000}, template.ErrLimit, "range"},
		{"huge range", `{{ range(-9223372036854775807, 9223372036854775807)|length }}`, template.Input{Messages: oneMessage}, template.Limits{}, template.ErrLimit, "range"},
		{"messages missing", `x`, template.Input{}, template.Limits{}, template.ErrInput, "messages"},
		{"messages not a list", `x`, template.Input{Messages: json.RawMessage(`{"role": "user"}`)}, template.Limits{}, template.ErrInput, "array"},
		{"malformed JSON", `x`, template.Input{Messages: json.RawMessage(`[{"role": }]`)}, template.Limits{}, template.ErrInput, "messages"},
		{"trailing JSON", `x`, template.Input{Messages: json.RawMessage(`[] []`)}, template.Limits{}, template.ErrInput, "after"},
		{"integer beyond 64 bits", `x`, template.Input{Messages: json.RawMessage(`[123456789012345678901234567890]`)}, template.Limits{}, template.ErrInput, "64 bits"},
		{"reserved kwarg", `x`, template.Input{Messages: oneMessage, Kwargs: json.RawMessage(`{"messages": []}`)}, template.Limits{}, template.ErrInput, "reserved"},
		{"private kwarg", `x`, template.Input{Messages: oneMessage, Kwargs: json.RawMessage(`{"__switchyard_tojson": 1}`)}, template.Limits{}, template.ErrInput, "reserved"},
		{"kwargs not an object", `x`, template.Input{Messages: oneMessage, Kwargs: json.RawMessage(`[1]`)}, template.Limits{}, template.ErrInput, "object"},
		{"undefined function", `{{ no_such_function() }}`, template.Input{Messages: oneMessage}, template.Limits{}, template.ErrRender, "not callable"},
		{"tojson of undefined", `{{ nothing|tojson }}`, template.Input{Messages: oneMessage}, template.Limits{}, template.ErrRender, "undefined"},
		{"tojson bad argument", `{{ 1|tojson(colour=1) }}`, template.Input{Messages: oneMessage}, template.Limits{}, template.ErrRender, "colour"},
		{"strftime directive", `{{ strftime_now("%Q") }}`, template.Input{Messages: oneMessage}, template.Limits{}, template.ErrRender, "%Q"},
	} {
		tmpl, err := template.Parse(c.src, template.Options{Limits: c.limits, Now: func() time.Time { return featureNow }})
		if err != nil {
			t.Errorf("%s: parse: %v", c.name, err)
			continue
		}
		out, err := tmpl.Render(context.Background(), c.in)
		if !errors.Is(err, c.kind) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: got %q, %v; want %v saying %q", c.name, out, err, c.kind, c.says)
		}
	}
}

func TestRenderStopsAtDeadline(t *testing.T) {
	tmpl, err := template.Parse(`{% for i in range(3) %}{{ i }}{% endfor %}`, template.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := tmpl.Render(ctx, template.Input{Messages: oneMessage}); !errors.Is(err, template.ErrDeadline) {
		t.Fatalf("an ended context gave %v, want ErrDeadline", err)
	}

	// The context ends while the template runs: the next call into the package sees it and the
	// loop below, which would otherwise run for a long time, stops.
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	cancelling := func() time.Time { cancel(); return featureNow }
	tmpl, err = template.Parse(`{{ strftime_now("%Y") }}{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}`,
		template.Options{Now: cancelling, Limits: template.Limits{MaxRangeItems: 1 << 40}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tmpl.Render(ctx, template.Input{Messages: oneMessage}); !errors.Is(err, template.ErrDeadline) {
		t.Fatalf("a context ended during the render gave %v, want ErrDeadline", err)
	}
}
