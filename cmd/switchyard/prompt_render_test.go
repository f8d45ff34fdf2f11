package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"switchyard/fixtures"
	"switchyard/router/prompt"
)

// renderFixture is the test tokenizer's files written to a fresh folder,
// as an operator has them next to a model.
type renderFixture struct {
	dir, config, jinja, tokenizer string
}

func newRenderFixture(t *testing.T) renderFixture {
	t.Helper()
	dir := t.TempDir()
	f := renderFixture{dir: dir}
	for name, path := range map[string]*string{fixtures.TokenizerConfig: &f.config, fixtures.ChatTemplate: &f.jinja, fixtures.TokenizerJSON: &f.tokenizer} {
		data, err := fixtures.TokenizerFile(fixtures.TestTokenizer, name)
		require.NoError(t, err)
		*path = filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(*path, data, 0o644))
	}
	return f
}

func (f renderFixture) write(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(f.dir, name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	return path
}

const renderChat = `{"model": "m", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}]}`

// The chat as the fixture's template writes it: <|begin_of_text|> from
// tokenizer_config.json's bos_token, each message under its role header,
// the assistant's turn opened.
const renderedChat = "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>" +
	"<|start_header_id|>user<|end_header_id|>\n\nHello there<|eot_id|>" +
	"<|start_header_id|>assistant<|end_header_id|>\n\n"

func TestPromptRender(t *testing.T) {
	f := newRenderFixture(t)
	req := f.write(t, "chat.json", renderChat)

	out, err := run(t, "prompt", "render", "--template", f.config, "--request", req)
	require.NoError(t, err)
	require.Equal(t, renderedChat, out, "the text exactly, no newline added")

	// From stdin, the same.
	out, err = runWithStdin(t, renderChat, "prompt", "render", "--template", f.config, "--request", "-")
	require.NoError(t, err)
	require.Equal(t, renderedChat, out)

	// A plain template file has no special tokens (a card's
	// chat_template_file renders without them too): no bos_token.
	out, err = run(t, "prompt", "render", "--template", f.jinja, "--request", req)
	require.NoError(t, err)
	require.Equal(t, strings.TrimPrefix(renderedChat, "<|begin_of_text|>"), out)

	// add_generation_prompt false leaves the assistant's turn closed.
	noGen := f.write(t, "nogen.json", `{"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": false}`)
	out, err = run(t, "prompt", "render", "--template", f.config, "--request", noGen)
	require.NoError(t, err)
	require.Equal(t, "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>", out)
}

// render --tokenizer prints the ids the router computes for the same body
// from the same files (prompt.FromFiles, the fake fleet's path), and
// render | tokenize | hash equals render --tokenizer | hash.
func TestPromptRenderPipesAsTheRouterHashes(t *testing.T) {
	f := newRenderFixture(t)
	var messages []string
	for i := 0; i < 6; i++ {
		messages = append(messages, `{"role": "user", "content": "Question `+strings.Repeat("about the fleet and its routes ", i+1)+`"}`,
			`{"role": "assistant", "content": "An answer."}`)
	}
	body := `{"model": "m", "messages": [` + strings.Join(messages, ", ") + `]}`
	req := f.write(t, "chat.json", body)

	idsOut, err := run(t, "prompt", "render", "--template", f.config, "--request", req, "--tokenizer", f.tokenizer)
	require.NoError(t, err)
	var ids []uint32
	require.NoError(t, json.Unmarshal([]byte(idsOut), &ids))
	require.Greater(t, len(ids), 64)

	tok, err := os.ReadFile(f.tokenizer)
	require.NoError(t, err)
	cfg, err := os.ReadFile(f.config)
	require.NoError(t, err)
	p, err := prompt.FromFiles(tok, cfg)
	require.NoError(t, err)
	svc := prompt.New(prompt.Static{P: p}, prompt.Limits{}, prompt.Hooks{})
	defer svc.Close()
	want, why := svc.Tokens(context.Background(), "m", true, []byte(body))
	require.Empty(t, why)
	require.Equal(t, want, ids, "the ids the router hashes")

	text, err := run(t, "prompt", "render", "--template", f.config, "--request", req)
	require.NoError(t, err)
	tokensOut, err := runWithStdin(t, text, "prompt", "tokenize", "--tokenizer", f.tokenizer)
	require.NoError(t, err)
	require.Equal(t, idsOut, tokensOut, "render | tokenize prints what render --tokenizer prints")

	viaText, err := runWithStdin(t, tokensOut, "prompt", "hash", "--block-size", "16")
	require.NoError(t, err)
	viaIDs, err := runWithStdin(t, idsOut, "prompt", "hash", "--block-size", "16")
	require.NoError(t, err)
	require.Equal(t, viaIDs, viaText)
	require.Len(t, strings.Fields(viaIDs), len(ids)/16)
}

func TestPromptRenderRefusesBadInput(t *testing.T) {
	f := newRenderFixture(t)
	req := f.write(t, "chat.json", renderChat)
	huge := `{"messages": [{"role": "user", "content": "` + strings.Repeat("a", renderLimits.MaxRenderedBytes) + `"}]}`
	manyMessages := `{"messages": [` + strings.TrimSuffix(strings.Repeat(`{"role": "user", "content": "a"},`, renderLimits.MaxMessages+1), ",") + `]}`
	manyTools := `{"messages": [], "tools": [` + strings.TrimSuffix(strings.Repeat(`{},`, renderLimits.MaxTools+1), ",") + `]}`

	for _, c := range []struct {
		name       string
		template   string
		request    string
		msg        []string
		extraFlags []string
	}{
		{"missing template", filepath.Join(f.dir, "missing.json"), req, []string{"--template", "missing.json", "no such file"}, nil},
		{"missing request", f.config, filepath.Join(f.dir, "missing-req.json"), []string{"--request", "missing-req.json", "no such file"}, nil},
		{"no chat template", f.tokenizer, req, []string{"--template", "tokenizer.json", "template input", "no chat_template"}, nil},
		{"syntax", f.write(t, "bad.jinja", "{% for m in messages %}"), req, []string{"--template", "bad.jinja", "template syntax"}, nil},
		{"raised", f.write(t, "raise.jinja", `{{ raise_exception("system messages are not supported") }}`), req,
			[]string{"--request", "chat.json", "--template", "raise.jinja", "template raised: system messages are not supported"}, nil},
		{"not a chat body", f.config, f.write(t, "list.json", `[1, 2]`), []string{"--request", "list.json", "not an OpenAI chat completions body"}, nil},
		{"no messages", f.config, f.write(t, "nomsg.json", `{"prompt": "hi"}`), []string{"no messages"}, nil},
		{"too many messages", f.config, f.write(t, "many.json", manyMessages), []string{"4097 messages, more than the 4096"}, nil},
		{"too many tools", f.config, f.write(t, "tools.json", manyTools), []string{"513 tools, more than the 512"}, nil},
		{"body too large", f.config, f.write(t, "big.json", `{"messages": [], "x": "`+strings.Repeat("a", renderLimits.MaxBodyBytes)+`"}`),
			[]string{"--request", "big.json", "more than the 4194304"}, nil},
		{"rendered too large", f.config, f.write(t, "huge.json", huge), []string{"template size limit", "over the limit of 1048576"}, nil},
		{"bad tokenizer", f.config, req, []string{"--tokenizer", "no such file"}, []string{"--tokenizer", filepath.Join(f.dir, "none.json")}},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"prompt", "render", "--template", c.template, "--request", c.request}, c.extraFlags...)
			out, err := run(t, args...)
			require.Error(t, err, "printed %.80q", out)
			for _, m := range c.msg {
				assert.Contains(t, err.Error(), m)
			}
			assert.Empty(t, out, "nothing printed on an error")
			requireExit1(t, err)
		})
	}

	_, err := run(t, "prompt", "render", "--template", f.config)
	require.ErrorContains(t, err, `required flag(s) "request" not set`)
}

// A template that loops without calling back into the template package
// cannot be interrupted; the command gives up at the router's deadline
// (shortened here) rather than hang.
func TestPromptRenderGivesUpAtTheDeadline(t *testing.T) {
	f := newRenderFixture(t)
	req := f.write(t, "chat.json", renderChat)
	// About a million empty iterations: far longer than the deadline, and
	// short enough that the abandoned render ends soon after the test.
	loop := f.write(t, "loop.jinja", `{%- set s = "x" * 1000 -%}{%- for a in s -%}{%- for b in s -%}{%- endfor -%}{%- endfor -%}done`)
	saved := renderLimits.Deadline
	renderLimits.Deadline = 20 * time.Millisecond
	defer func() { renderLimits.Deadline = saved }()

	out, err := run(t, "prompt", "render", "--template", loop, "--request", req)
	require.ErrorContains(t, err, "template deadline: the template ran past the router's 20ms deadline", out)
	requireExit1(t, err)
}
