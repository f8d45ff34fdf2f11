package template_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"switchyard/router/prompt/template"
)

// FuzzRender parses random templates and renders them with random messages: no input may panic,
// hang past the small limits below, or return text over the output limit, and every error must be
// one of the package's kinds.
func FuzzRender(f *testing.F) {
	for _, c := range featureCases {
		f.Add(c.src, `[{"role": "user", "content": "hi"}]`)
	}
	f.Add(`{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}`, `[]`)
	f.Add(`{% for m in messages %}{{ m|tojson(indent=1) }}{% endfor %}`, `[{"a": [1.5, {"b": null}]}, "é"]`)
	f.Add(`{{ raise_exception(messages[0]) }}`, `["boom"]`)
	limits := template.Limits{MaxOutputBytes: 4096, MaxRangeItems: 4096, MaxMacroDepth: 16, MaxNesting: 16, MaxTagBytes: 1024}
	kinds := []error{template.ErrSyntax, template.ErrTooLarge, template.ErrLimit, template.ErrDeadline,
		template.ErrRaised, template.ErrInput, template.ErrRender}
	f.Fuzz(func(t *testing.T, src, messages string) {
		tmpl, err := template.Parse(src, template.Options{Limits: limits, Now: func() time.Time { return featureNow }})
		if err == nil {
			var out string
			out, err = tmpl.Render(context.Background(), template.Input{Messages: json.RawMessage(messages), AddGenerationPrompt: true})
			if len(out) > limits.MaxOutputBytes {
				t.Fatalf("rendered %d bytes, over the limit of %d", len(out), limits.MaxOutputBytes)
			}
		}
		if err == nil {
			return
		}
		for _, kind := range kinds {
			if errors.Is(err, kind) {
				return
			}
		}
		t.Fatalf("error of no kind: %v", err)
	})
}
