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

// FuzzInputFromChatRequest checks the chat body reader against encoding/json
// decoding the body into a map (exact keys, the last of repeated ones): the
// same fields, byte for byte, and an error exactly when the body is not a
// JSON object or add_generation_prompt is not a boolean or null.
func FuzzInputFromChatRequest(f *testing.F) {
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"x"}],"add_generation_prompt":false}`))
	f.Add([]byte(`{"MESSAGES":[1],"messages":[2],"messages" : [3] ,"tools":null}`))
	f.Add([]byte(`{"\u006dessages":["a\"b\\"],"chat_template_kwargs":{"x":[{}]},"documents":[]}`))
	f.Add([]byte(` { "add_generation_prompt" : null } `))
	f.Add([]byte(`[{"messages":[]}]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		in, err := template.InputFromChatRequest(body)
		var ref map[string]json.RawMessage
		refErr := json.Unmarshal(body, &ref)
		want := template.Input{AddGenerationPrompt: true}
		if refErr == nil && ref != nil {
			want.Messages, want.Tools, want.Documents, want.Kwargs = ref["messages"], ref["tools"], ref["documents"], ref["chat_template_kwargs"]
			if v, ok := ref["add_generation_prompt"]; ok && string(v) != "null" {
				refErr = json.Unmarshal(v, &want.AddGenerationPrompt)
			}
		} else if refErr == nil { // the body is null
			refErr = errors.New("not an object")
		}
		if (err != nil) != (refErr != nil) {
			t.Fatalf("%q: error %v, encoding/json %v", body, err, refErr)
		}
		if err != nil {
			if !errors.Is(err, template.ErrInput) {
				t.Fatalf("%q: error %v is not ErrInput", body, err)
			}
			return
		}
		if string(in.Messages) != string(want.Messages) || string(in.Tools) != string(want.Tools) ||
			string(in.Documents) != string(want.Documents) || string(in.Kwargs) != string(want.Kwargs) ||
			in.AddGenerationPrompt != want.AddGenerationPrompt {
			t.Fatalf("%q:\n got %+v\nwant %+v", body, in, want)
		}
	})
}
