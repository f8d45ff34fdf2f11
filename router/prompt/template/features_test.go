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

// featureCase is a small template written for one feature. want is Jinja2's output (transformers'
// setup); TestFeaturesMatchJinja2 checks that it still is when the oracle is installed.
type featureCase struct {
	name, src, vars, want string
}

const featureVars = `{"messages": [{"role": "user", "content": "hi"}], "tools": null, "documents": null,
 "add_generation_prompt": true, "bos_token": "<s>",
 "x": {"b": 1.0, "a": "é<>&'\"", "c": [1e-5, 1e16, 1e15, -0.0, 0.0001, 123456789.125, 2, null, true]},
 "s": "é😀\u0001\u001f\u007f\u2028\\/"}`

var featureCases = []featureCase{
	{"tojson keeps key order, prints floats as Python", `{{ x|tojson }}`, featureVars,
		`{"b": 1.0, "a": "é<>&'\"", "c": [1e-05, 1e+16, 1000000000000000.0, -0.0, 0.0001, 123456789.125, 2, null, true]}`},
	{"tojson indent", `{{ x|tojson(indent=2) }}`, featureVars,
		"{\n  \"b\": 1.0,\n  \"a\": \"é<>&'\\\"\",\n  \"c\": [\n    1e-05,\n    1e+16,\n    1000000000000000.0,\n    -0.0,\n    0.0001,\n    123456789.125,\n    2,\n    null,\n    true\n  ]\n}"},
	{"tojson separators", `{{ x.c[:2]|tojson(separators=(',', ':')) }}`, featureVars, `[1e-05,1e+16]`},
	{"tojson sort_keys", `{{ ({'b': 1, 'a': {'d': 2, 'c': 3} })|tojson(sort_keys=true) }}`, featureVars, `{"a": {"c": 3, "d": 2}, "b": 1}`},
	{"tojson escapes", `{{ s|tojson }}`, featureVars, "\"é😀\\u0001\\u001f\u007f\u2028\\\\/\""},
	{"tojson ensure_ascii", `{{ s|tojson(ensure_ascii=true) }}`, featureVars, `"\u00e9\ud83d\ude00\u0001\u001f\u007f\u2028\\/"`},
	{"tojson inside a string is text", `{{ "a|tojson" }}{# x|tojson #}`, featureVars, `a|tojson`},
	{"raw block is untouched", `{% raw %}{{ x|tojson }}{% endraw %}`, featureVars, `{{ x|tojson }}`},
	{"strftime_now", `{{ strftime_now("%Y-%m-%d %H:%M:%S %a %A %b %B %j %p %I %y %w %%") }}`, featureVars,
		`2026-03-07 14:05:09 Sat Saturday Mar March 066 PM 02 26 6 %`},
	{"loop controls", `{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}`, featureVars, `0134`},
	{"range forms", `{{ range(3)|list }}{{ range(10, 0, -3)|list }}{{ range(2, 2)|list }}`, featureVars, `[0, 1, 2][10, 7, 4, 1][]`},
	{"trim_blocks and lstrip_blocks", "A\r\n  {% if true %}\n  B\r  {% endif %}\r\nC {{ 1 }}\n", featureVars, "A\n  B\nC 1"},
	{"macro whitespace is unchanged", "{% macro m(x) %}\n  [{{ x }}]\n{% endmacro %}{{ m(1) }}|{%- macro n(y) -%}\n  ({{ y }})\n  {%- endmacro %}{{ n(2) }}|\n  {% macro o() %}\n o\n  {%- endmacro %}{{ o() }}", featureVars,
		"  [1]\n|(2)|\n o"},
	{"recursive macro", `{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }}`, featureVars, `54321`},
	{"tools absent is none", `{{ tools is none }} {{ tools is defined }} {{ documents is none }}`, featureVars, `True True True`},
	{"special tokens and flags", `{{ bos_token }}{{ messages[0].content }}{{ add_generation_prompt }}{{ eos_token is defined }}`, featureVars, `<s>hiTrueFalse`},
	{"namespace and slices", `{% set ns = namespace(n=0) %}{% for m in messages[::-1] %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}`, featureVars, `1`},
}

var featureNow = time.Date(2026, time.March, 7, 14, 5, 9, 0, time.UTC)

// renderVars renders src with variables given as one JSON object, the way the oracle receives them:
// messages, tools, documents and add_generation_prompt go through Input, the rest as kwargs.
func renderVars(ctx context.Context, src, vars string, opts template.Options) (string, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal([]byte(vars), &fields); err != nil {
		return "", err
	}
	in := template.Input{Messages: fields["messages"], Tools: fields["tools"], Documents: fields["documents"]}
	in.AddGenerationPrompt = string(fields["add_generation_prompt"]) == "true"
	kwargs := map[string]json.RawMessage{}
	for k, v := range fields {
		if k != "messages" && k != "tools" && k != "documents" && k != "add_generation_prompt" {
			kwargs[k] = v
		}
	}
	in.Kwargs, _ = json.Marshal(kwargs) // their key order does not matter to these cases
	if opts.Now == nil {
		opts.Now = func() time.Time { return featureNow }
	}
	tmpl, err := template.Parse(src, opts)
	if err != nil {
		return "", err
	}
	return tmpl.Render(ctx, in)
}

func TestFeatures(t *testing.T) {
	for _, c := range featureCases {
		got, err := renderVars(context.Background(), c.src, c.vars, template.Options{})
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if got != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.name, got, c.want)
		}
	}
}

// TestFeaturesMatchJinja2 checks the expectations above against the oracle, so that they are
// Jinja2's and not ours.
func TestFeaturesMatchJinja2(t *testing.T) {
	python, _ := requireOracle(t)
	cases := make([]oracleCase, len(featureCases))
	for i, c := range featureCases {
		cases[i] = oracleCase{Template: c.src, Variables: json.RawMessage(c.vars), Now: featureNow.Unix()}
	}
	for i, res := range runOracle(t, python, cases) {
		if res.Text == nil {
			t.Errorf("%s: Jinja2 fails: %s", featureCases[i].name, res.Error)
		} else if *res.Text != featureCases[i].want {
			t.Errorf("%s: Jinja2 renders %q, the test expects %q", featureCases[i].name, *res.Text, featureCases[i].want)
		}
	}
}

func TestStrftimeNowUndefinedWithoutClock(t *testing.T) {
	tmpl, err := template.Parse(`{{ strftime_now is defined }}`, template.Options{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.Render(context.Background(), template.Input{Messages: json.RawMessage(`[]`)})
	if err != nil || got != "False" {
		t.Fatalf("got %q, %v; want False: without a clock the engine's wall-clock built-in must be hidden", got, err)
	}
}

func TestKwargsOverrideSpecialTokens(t *testing.T) {
	tmpl, err := template.Parse(`{{ bos_token }}|{{ enable_thinking }}`, template.Options{SpecialTokens: map[string]string{"bos_token": "<s>"}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.Render(context.Background(), template.Input{Messages: json.RawMessage(`[]`),
		Kwargs: json.RawMessage(`{"bos_token": "<B>", "enable_thinking": false}`)})
	if err != nil || got != "<B>|False" {
		t.Fatalf("got %q, %v", got, err)
	}
}

func TestFromTokenizerConfig(t *testing.T) {
	cfg := `{"bos_token": {"__type": "AddedToken", "content": "<bos>", "lstrip": false}, "eos_token": "<eos>", "unk_token": null,
		"additional_special_tokens": ["<a>", {"content": "<b>"}],
		"chat_template": [{"name": "default", "template": "D{{ bos_token }}{{ eos_token }}{{ unk_token is defined }}{{ additional_special_tokens|join(',') }}"},
		                  {"name": "tool_use", "template": "T{{ tools|length }}"}]}`
	ts, err := template.FromTokenizerConfig([]byte(cfg), template.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ tools, want string }{{"", "D<bos><eos>False<a>,<b>"}, {"null", "D<bos><eos>False<a>,<b>"}, {"[]", "T0"}, {`[{"type": "function"}]`, "T1"}} {
		in := template.Input{Messages: json.RawMessage(`[]`), Tools: json.RawMessage(c.tools)}
		tmpl, err := ts.For(in)
		if err != nil {
			t.Fatal(err)
		}
		got, err := tmpl.Render(context.Background(), in)
		if err != nil || got != c.want {
			t.Errorf("tools %q: got %q, %v; want %q", c.tools, got, err, c.want)
		}
	}
	if ts.Named("tool_use") == nil || ts.Named("nope") != nil {
		t.Error("Named does not find the named templates")
	}

	single, err := template.FromTokenizerConfig([]byte(`{"chat_template": "S{{ eos_token }}", "eos_token": "<e>"}`), template.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tmpl, _ := single.For(template.Input{Tools: json.RawMessage(`[]`)})
	if got, err := tmpl.Render(context.Background(), template.Input{Messages: json.RawMessage(`[]`)}); err != nil || got != "S<e>" {
		t.Errorf("single template: got %q, %v", got, err)
	}

	noDefault, err := template.FromTokenizerConfig([]byte(`{"chat_template": [{"name": "tool_use", "template": "T"}]}`), template.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := noDefault.For(template.Input{}); err == nil {
		t.Error("a list without default gave a template for a request without tools")
	}
}

func TestInputFromChatRequest(t *testing.T) {
	body := `{"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}],
		"chat_template_kwargs": {"enable_thinking": false}}`
	in, err := template.InputFromChatRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if !in.AddGenerationPrompt || string(in.Kwargs) != `{"enable_thinking": false}` || !strings.HasPrefix(string(in.Tools), "[") {
		t.Fatalf("input %+v", in)
	}
	in, err = template.InputFromChatRequest([]byte(`{"messages": [], "add_generation_prompt": false}`))
	if err != nil || in.AddGenerationPrompt {
		t.Fatalf("add_generation_prompt false was not kept: %+v, %v", in, err)
	}
	if _, err := template.InputFromChatRequest([]byte(`{"messages": `)); err == nil {
		t.Fatal("a truncated body was accepted")
	}
}

// Keys match exactly (an escaped key is its decoded text), the last of
// repeated keys counts, and what is not a chat request object is refused.
func TestInputFromChatRequestKeys(t *testing.T) {
	in, err := template.InputFromChatRequest([]byte(`{"MESSAGES":["upper"],"messages":["exact"],"Messages":["title"]}`))
	if err != nil || string(in.Messages) != `["exact"]` {
		t.Fatalf("messages %s, %v: want the exact key's", in.Messages, err)
	}
	in, err = template.InputFromChatRequest([]byte(`{"\u006dessages":["escaped"],"tools":[1],"tools":[2],"add_generation_prompt":null}`))
	if err != nil || string(in.Messages) != `["escaped"]` || string(in.Tools) != `[2]` || !in.AddGenerationPrompt {
		t.Fatalf("input %+v, %v: want the escaped key, the last tools, null as the default", in, err)
	}
	for _, body := range []string{`[]`, `"x"`, `{"add_generation_prompt":"yes"}`, `{"a":1}{}`} {
		if _, err := template.InputFromChatRequest([]byte(body)); !errors.Is(err, template.ErrInput) {
			t.Errorf("%s: error %v, want ErrInput", body, err)
		}
	}
}

func TestParseFile(t *testing.T) {
	if _, err := template.ParseFile([]byte("{{ 'a' }}\xff"), template.Options{}); err == nil {
		t.Fatal("a template file that is not UTF-8 was accepted")
	}
	tmpl, err := template.ParseFile([]byte("{{ messages|length }}\n"), template.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := tmpl.Render(context.Background(), template.Input{Messages: json.RawMessage(`[1, 2]`)}); got != "2" { // Jinja2 drops one final newline
		t.Fatalf("got %q", got)
	}
}
