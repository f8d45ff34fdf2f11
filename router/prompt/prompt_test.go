package prompt

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"switchyard/fixtures"
	"switchyard/router/picker"
	"switchyard/router/prompt/template"
	"switchyard/router/tokenizer"
)

// testTokenizer is the project's own test tokenizer, loaded for real.
func testTokenizer(t *testing.T) *tokenizer.Tokenizer {
	t.Helper()
	data, err := fixtures.TokenizerFile(fixtures.TestTokenizer, fixtures.TokenizerJSON)
	require.NoError(t, err)
	tok, err := tokenizer.Load(data, tokenizer.Limits{})
	require.NoError(t, err)
	return tok
}

// funcRenderer renders with a function: the test stands in for a chat
// template to provoke what a real one rarely does on demand (run long,
// never return, produce too much).
// It is given the request's raw messages.
type funcRenderer func(ctx context.Context, messages []byte) (string, error)

func (f funcRenderer) Render(ctx context.Context, in template.Input) (string, error) {
	return f(ctx, in.Messages)
}

// fixedSource answers one Prepared for every model, or a reason.
type fixedSource struct {
	p   *Prepared
	why string
}

func (f fixedSource) Prepared(string) (*Prepared, string) { return f.p, f.why }

type counts struct {
	mu sync.Mutex
	m  map[string]int
}

func (c *counts) add(r string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[r]++
}

func (c *counts) get(r string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[r]
}

func newService(t *testing.T, r Renderer, lim Limits) (*Service, *counts, *tokenizer.Tokenizer) {
	tok := testTokenizer(t)
	c := &counts{m: map[string]int{}}
	s := New(fixedSource{p: &Prepared{Encoder: tok, Template: r, Key: "k"}}, lim, Hooks{Result: c.add})
	t.Cleanup(s.Close)
	return s, c, tok
}

func echo(_ context.Context, body []byte) (string, error) { return string(body), nil }

func TestChatAndCompletionTokenize(t *testing.T) {
	s, c, tok := newService(t, funcRenderer(echo), Limits{})
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hello there"}]}`)
	ids, why := s.Tokens(context.Background(), "m", true, body)
	require.Empty(t, why)
	want, err := tok.Encode(`[{"role":"user","content":"hello there"}]`, false)
	require.NoError(t, err)
	require.Equal(t, want, ids, "the rendered text, encoded without added special tokens")

	ids, why = s.Tokens(context.Background(), "m", false, []byte(`{"model":"m","prompt":"once upon a time"}`))
	require.Empty(t, why)
	want, err = tok.Encode("once upon a time", true)
	require.NoError(t, err)
	require.Equal(t, want, ids, "a completions prompt is encoded with special tokens")
	require.Equal(t, 2, c.get("ok"))

	_, why = s.Tokens(context.Background(), "m", false, []byte(`{"model":"m","prompt":["a","b"]}`))
	require.Equal(t, picker.KVRenderUnavailable, why, "only a single prompt string is tokenized")
}

func TestSourceReasonsPassThrough(t *testing.T) {
	c := &counts{m: map[string]int{}}
	s := New(fixedSource{why: picker.KVArtifactUnpinned}, Limits{}, Hooks{Result: c.add})
	_, why := s.Tokens(context.Background(), "m", true, []byte(`{"messages":[]}`))
	require.Equal(t, picker.KVArtifactUnpinned, why)
	s = New(fixedSource{}, Limits{}, Hooks{Result: c.add})
	_, why = s.Tokens(context.Background(), "m", true, []byte(`{"messages":[]}`))
	require.Equal(t, picker.KVTokenizerUnavailable, why)
	require.Equal(t, 1, c.get(picker.KVArtifactUnpinned))
	require.Equal(t, 1, c.get(picker.KVTokenizerUnavailable))
}

func TestCapsCountPromptTooLarge(t *testing.T) {
	s, c, _ := newService(t, funcRenderer(echo), Limits{MaxMessages: 2, MaxTools: 1, MaxBodyBytes: 1 << 10, MaxTokens: 50})
	msg := `{"role":"user","content":"x"}`
	for _, body := range []string{
		`{"messages":[` + msg + `,` + msg + `,` + msg + `]}`,
		`{"messages":[` + msg + `],"tools":[{},{}]}`,
		`{"messages":[{"role":"user","content":"` + strings.Repeat("a", 2<<10) + `"}]}`,
		`{"messages":[{"role":"user","content":"` + strings.Repeat("word ", 100) + `"}]}`,
		// The caps count what the render decodes: of repeated keys, the last.
		`{"messages":[],"messages":[` + msg + `,` + msg + `,` + msg + `]}`,
	} {
		_, why := s.Tokens(context.Background(), "m", true, []byte(body))
		require.Equal(t, picker.KVPromptTooLarge, why, body[:40])
	}
	require.Equal(t, 5, c.get(picker.KVPromptTooLarge))
	// Keys match exactly, as the backend's decoder matches them: "MESSAGES"
	// is neither rendered nor counted.
	_, why := s.Tokens(context.Background(), "m", true, []byte(`{"MESSAGES":[`+msg+`,`+msg+`,`+msg+`],"messages":[`+msg+`]}`))
	require.Empty(t, why)

	big := funcRenderer(func(context.Context, []byte) (string, error) { return strings.Repeat("z", 2<<20), nil })
	s, _, _ = newService(t, big, Limits{})
	_, why = s.Tokens(context.Background(), "m", true, []byte(`{"messages":[]}`))
	require.Equal(t, picker.KVPromptTooLarge, why, "rendered text past 1 MiB")
}

// A render that never returns is abandoned at the deadline: the request
// goes on without tokens, the template is not run again, and the permit
// it holds is the only one lost.
func TestRunawayRenderIsContained(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	var started sync.WaitGroup
	started.Add(1)
	stuck := funcRenderer(func(context.Context, []byte) (string, error) {
		started.Done()
		<-release // ignores its context, as an engine without step limits would
		return "", nil
	})
	s, c, _ := newService(t, stuck, Limits{Permits: 2, Deadline: 50 * time.Millisecond})
	body := []byte(`{"messages":[]}`)
	_, why := s.Tokens(context.Background(), "m", true, body)
	started.Wait()
	require.Equal(t, picker.KVRenderUnavailable, why)
	_, why = s.Tokens(context.Background(), "m", true, body)
	require.Equal(t, picker.KVRenderUnavailable, why, "the overrun template is not rendered again")
	require.Equal(t, 2, c.get(picker.KVRenderUnavailable))
	// Completions do not use the template: they still tokenize, on the
	// permit left.
	ids, why := s.Tokens(context.Background(), "m", false, []byte(`{"prompt":"still here"}`))
	require.Empty(t, why)
	require.NotEmpty(t, ids)
}

// With every permit taken, a request waits PermitWait and goes on.
func TestPermitWaitIsBounded(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 4)
	slow := funcRenderer(func(ctx context.Context, body []byte) (string, error) {
		started <- struct{}{}
		<-release
		return string(body), nil
	})
	s, _, _ := newService(t, slow, Limits{Permits: 2, PermitWait: 10 * time.Millisecond, Deadline: time.Minute})
	body := []byte(`{"messages":[]}`)
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, why := s.Tokens(context.Background(), "m", true, body)
			require.Empty(t, why)
		}()
	}
	<-started
	<-started
	_, why := s.Tokens(context.Background(), "m", true, body)
	require.Equal(t, picker.KVRenderUnavailable, why, "no permit within the wait")
	close(release)
	wg.Wait()
	_, why = s.Tokens(context.Background(), "m", true, body)
	require.Empty(t, why, "permits come back")
}
