package template_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"switchyard/internal/oracle"
	"testing"
	"time"

	"switchyard/router/prompt/template"
)

// The golden test renders real chat templates here and with Jinja2 set up as transformers sets it
// up (hack/chat-template-oracle.py), and wants the same bytes. The templates come from the npm
// packages hack/install-test-deps.sh installs outside the clone for the tokenizer's golden test:
// they are third-party data the repository does not carry.
const (
	oracleScript = "../../../hack/chat-template-oracle.py"
)

// goldenNow is the instant strftime_now reads on both sides.
var goldenNow = time.Date(2026, time.March, 7, 14, 5, 9, 0, time.UTC)

// requireOracle returns a Python with Jinja2 (Debian's first) and the oracle folder, or skips saying
// how to get them; with CI set it fails instead, because CI installs them.
func requireOracle(t *testing.T) (python, dir string) {
	t.Helper()
	dir = oracle.Dir()
	var missing []string
	for _, candidate := range []string{"/usr/bin/python3", "python3"} {
		if exec.Command(candidate, "-c", "import jinja2.sandbox").Run() == nil {
			python = candidate
			break
		}
	}
	if python == "" {
		missing = append(missing, "no python3 can import jinja2 (Debian: python3-jinja2)")
	}
	for _, f := range oracle.Families {
		if _, err := os.Stat(configPath(dir, f.Package)); err != nil {
			missing = append(missing, fmt.Sprintf("npm package %s is missing from %s", f.Package, dir))
		}
	}
	if len(missing) == 0 {
		return python, dir
	}
	msg := fmt.Sprintf("chat template oracle unavailable: %s. Run hack/install-test-deps.sh or set %s",
		strings.Join(missing, "; "), oracle.Env)
	if os.Getenv("CI") != "" {
		t.Fatalf("%s (CI is set, so this test may not skip)", msg)
	}
	t.Skip(msg)
	return "", ""
}

func configPath(dir, pkg string) string {
	return filepath.Join(dir, "node_modules", pkg, "models", "tokenizer_config.json")
}

// goldenCase is one request; its fields are JSON text, so that key order reaches both sides as
// written.
type goldenCase struct {
	name      string
	messages  string
	tools     string // "" when the request has none
	kwargs    string // "" when none
	addPrompt bool
}

const (
	toolDefs = `[
 {"type": "function", "function": {"name": "get_weather", "description": "Weather <now> & \"later\" — für Zürich",
  "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Zürich", "東京"]},
  "days": {"type": "integer", "minimum": 1, "maximum": 7.5, "default": 3.0}, "threshold": {"type": "number", "default": 1e-7},
  "big": {"type": "number", "default": 1e20}}, "required": ["city"], "additionalProperties": false}}},
 {"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {}}}}
]`
	toolChat = `[
 {"role": "system", "content": "You are terse."},
 {"role": "user", "content": "Weather in Zürich and Tokyo?"},
 {"role": "assistant", "content": "", "tool_calls": [
  {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"days": 2, "city": "Zürich", "ratio": 0.5, "tiny": 1e-5, "whole": 3.0, "nested": {"z": [1, 2.5, null, true], "a": "\u00e9\n\t\\"}}}},
  {"id": "c2", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"東京\"}"}}]},
 {"role": "tool", "tool_call_id": "c1", "content": "{\"temp\": 3.0}"},
 {"role": "tool", "tool_call_id": "c2", "content": "sunny"},
 {"role": "assistant", "content": "<think>\nchecking\n</think>\n\nZürich 3 °C, Tokyo sunny."},
 {"role": "user", "content": "Thanks!"}
]`
)

var goldenCases = []goldenCase{
	{name: "single turn", messages: `[{"role": "user", "content": "Hello"}]`, addPrompt: true},
	{name: "single turn without generation prompt", messages: `[{"role": "user", "content": "Hello"}]`},
	{name: "system and multi-turn", addPrompt: true, messages: `[
		{"role": "system", "content": "You are a helpful assistant.\n  Be precise."},
		{"role": "user", "content": "What is 2+2?"},
		{"role": "assistant", "content": "4"},
		{"role": "user", "content": "  And 3+3?  "},
		{"role": "assistant", "content": "6"},
		{"role": "user", "content": "Thanks"}]`},
	{name: "multi-turn ending on the assistant", messages: `[
		{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"}]`},
	{name: "unicode", addPrompt: true, messages: `[
		{"role": "system", "content": "Réponds en français. 日本語も。"},
		{"role": "user", "content": "Emoji 👩‍👩‍👧 flags 🇨🇭, combining e\u0301, RTL שלום, quotes \"'\u2028, tab\tand\r\nCRLF, backslash \\ and {{ not a tag }}"}]`},
	{name: "content as text parts", addPrompt: true, messages: `[
		{"role": "user", "content": [{"type": "text", "text": "Describe "}, {"type": "text", "text": "this."}]}]`},
	{name: "tools", addPrompt: true, tools: toolDefs, messages: toolChat},
	{name: "tools without system", addPrompt: true, tools: toolDefs, messages: `[{"role": "user", "content": "Weather?"}]`},
	{name: "empty tool list", addPrompt: true, tools: `[]`, messages: `[{"role": "user", "content": "Hi"}]`},
	{name: "thinking off", addPrompt: true, kwargs: `{"enable_thinking": false}`, messages: `[{"role": "user", "content": "Quick answer?"}]`},
	{name: "thinking on", addPrompt: true, kwargs: `{"enable_thinking": true}`, messages: `[{"role": "user", "content": "Think hard."}]`},
	{name: "reasoning content kept after last query", addPrompt: false, kwargs: `{"enable_thinking": false}`, messages: `[
		{"role": "user", "content": "Q1"},
		{"role": "assistant", "content": "A1", "reasoning_content": "R1"},
		{"role": "user", "content": "Q2"},
		{"role": "assistant", "content": "A2", "reasoning_content": "\nR2\n"}]`},
}

type oracleCase struct {
	Template  string          `json:"template"`
	Variables json.RawMessage `json:"variables"`
	Now       int64           `json:"now"`
}

type oracleResult struct {
	Text  *string `json:"text"`
	Error string  `json:"error"`
}

func TestGoldenRendersMatchJinja2(t *testing.T) {
	python, dir := requireOracle(t)
	var cases []oracleCase
	type rendered struct {
		label string
		text  string
		err   error
	}
	var ours []rendered
	for _, fam := range oracle.Families {
		cfgData, err := os.ReadFile(configPath(dir, fam.Package))
		if err != nil {
			t.Fatal(err)
		}
		templates, err := template.FromTokenizerConfig(cfgData, template.Options{Now: func() time.Time { return goldenNow }})
		if err != nil {
			t.Fatalf("%s: %v", fam.Name, err)
		}
		source, specials := templateAndSpecials(t, cfgData)
		for _, c := range goldenCases {
			in := template.Input{Messages: json.RawMessage(c.messages), Tools: json.RawMessage(c.tools),
				Kwargs: json.RawMessage(c.kwargs), AddGenerationPrompt: c.addPrompt}
			tmpl, err := templates.For(in)
			if err != nil {
				t.Fatal(err)
			}
			text, err := tmpl.Render(context.Background(), in)
			ours = append(ours, rendered{fam.Name + "/" + c.name, text, err})
			cases = append(cases, oracleCase{Template: source, Variables: transformersVariables(c, specials), Now: goldenNow.Unix()})
		}
	}
	want := runOracle(t, python, cases)
	matched := 0
	for i, got := range ours {
		w := want[i]
		switch {
		case w.Text == nil && got.err == nil:
			t.Errorf("%s: Jinja2 fails (%s) but we render %q", got.label, w.Error, got.text)
		case w.Text == nil:
			matched++
			t.Logf("%s: both fail (Jinja2: %s; here: %v)", got.label, w.Error, got.err)
		case got.err != nil:
			t.Errorf("%s: Jinja2 renders %q but we fail: %v", got.label, *w.Text, got.err)
		case got.text != *w.Text:
			t.Errorf("%s: render differs\n got: %q\nwant: %q", got.label, got.text, *w.Text)
		default:
			matched++
		}
	}
	t.Logf("%d/%d renders equal to Jinja2's", matched, len(ours))
}

// templateAndSpecials reads the chat template and the special tokens transformers passes
// (special_tokens_map: the ones that are set) straight from the config, independently of the
// package.
func templateAndSpecials(t *testing.T, cfgData []byte) (string, map[string]any) {
	t.Helper()
	var cfg map[string]any
	if err := json.Unmarshal(cfgData, &cfg); err != nil {
		t.Fatal(err)
	}
	specials := map[string]any{}
	for _, name := range []string{"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token", "additional_special_tokens"} {
		if v, ok := cfg[name]; ok && v != nil {
			specials[name] = v
		}
	}
	return cfg["chat_template"].(string), specials
}

// transformersVariables writes the variables transformers' render call passes: the special tokens,
// the kwargs over them, then messages, tools and documents (None when absent) and
// add_generation_prompt.
func transformersVariables(c goldenCase, specials map[string]any) json.RawMessage {
	var b bytes.Buffer
	b.WriteString("{")
	for name, v := range specials {
		data, _ := json.Marshal(v)
		fmt.Fprintf(&b, "%q: %s, ", name, data)
	}
	if c.kwargs != "" {
		kw := strings.TrimSpace(c.kwargs)
		b.WriteString(kw[1 : len(kw)-1])
		b.WriteString(", ")
	}
	tools := c.tools
	if tools == "" {
		tools = "null"
	}
	fmt.Fprintf(&b, `"messages": %s, "tools": %s, "documents": null, "add_generation_prompt": %t}`, c.messages, tools, c.addPrompt)
	return b.Bytes()
}

func runOracle(t *testing.T, python string, cases []oracleCase) []oracleResult {
	t.Helper()
	input, err := json.Marshal(cases)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, oracleScript)
	cmd.Stdin = bytes.NewReader(input)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("oracle: %v\n%s", err, stderr.String())
	}
	var results []oracleResult
	if err := json.Unmarshal(out, &results); err != nil {
		t.Fatalf("oracle output: %v", err)
	}
	if len(results) != len(cases) {
		t.Fatalf("oracle answered %d cases of %d", len(results), len(cases))
	}
	return results
}
