package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strconv"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"switchyard/router/config"
	"switchyard/router/discovery"
	"switchyard/router/metrics"
	"switchyard/router/prompt"
)

// rewritingBackend is a backend with global prompts and, when single, one
// leading system message required.
func rewritingBackend(u *upstream, single bool, globals []string, models ...string) config.Backend {
	b := backendFor(u, models...)
	b.GlobalPrompts, b.RequiresSingleLeadingSystem = globals, single
	return b
}

func rewriteCount(f *fixture, result string) float64 {
	return testutil.ToFloat64(f.metrics.Gateway.PromptRewrites.WithLabelValues(result))
}

// A shim replica and a unified backend each get the chat bodies their
// own settings make, exactly: global prompts first, system messages merged
// where required, every other member and message as the client wrote it.
// Completions bodies and bodies that cannot be merged go as they came.
func TestPromptRewritesReachBackends(t *testing.T) {
	shim, vllm := newUpstream(t, "dyn-a"), newUpstream(t, "vllm")
	cfg := dynamoConfig([]string{"dyn-a"},
		rewritingBackend(shim, true, []string{"Be brief.", "Cite sources."}, dynamoModel),
		rewritingBackend(vllm, false, []string{"Unified rule."}, plainModel))
	logs := &captureHandler{}
	f := newFixture(t, cfg, []*discovery.Worker{worker("dynamo", aggID, discovery.RoleAggregated, dynamoModel)}, withLog(logs))

	for i, stream := range []string{"false", "true"} {
		in := `{"model":"Qwen/Qwen3-32B","stream":` + stream + `, "messages":[{"role":"user","content":"Hi"},{"content":"Use metric units.","role":"system"}],"temperature":0.2}`
		resp, body := f.post(pathChat, in, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		got := shim.requests()[i]
		assert.Equal(t, `{"model":"Qwen/Qwen3-32B","stream":`+stream+`, "messages":[{"role":"system","content":"Be brief.\n\nCite sources.\n\nUse metric units."},{"role":"user","content":"Hi"}],"temperature":0.2}`,
			string(got.Body))
		assert.Equal(t, strconv.FormatUint(aggID, 10), got.Header.Get(hdrWorkerID), "still pinned")
	}

	resp, body := f.post(pathChat, chatBody(plainModel, false), nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	assert.Equal(t, `{"model":"llama-3-8b","stream":false,"messages":[{"role":"system","content":"Unified rule."},{"role":"user","content":"Say hello"}]}`,
		string(vllm.requests()[0].Body))
	assert.Equal(t, 3.0, rewriteCount(f, metrics.RewriteRewritten))

	completion := `{"model":"Qwen/Qwen3-32B","prompt":"Hi"}`
	resp, body = f.post(pathCompletion, completion, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	assert.Equal(t, completion, string(shim.requests()[2].Body), "completions bodies are not rewritten")

	image := `{"model":"Qwen/Qwen3-32B","messages":[{"role":"system","content":"a"},{"role":"system","content":[{"type":"image_url","image_url":{"url":"data:,"}}]},{"role":"user","content":"Hi"}]}`
	for i := range 2 {
		resp, body = f.post(pathChat, image, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		assert.Equal(t, image, string(shim.requests()[3+i].Body), "a system message that is not text leaves the body as it was")
	}
	assert.Equal(t, 2.0, rewriteCount(f, metrics.RewriteNonTextSystem), "counted every time")
	warned := logs.warnings()
	require.Len(t, warned, 1, "logged once per backend")
	assert.Equal(t, "dyn-a", warned[0].attrs["backend"])
	assert.Equal(t, metrics.RewriteNonTextSystem, warned[0].attrs["result"])
	assert.Equal(t, 3.0, rewriteCount(f, metrics.RewriteRewritten))
}

// The Anthropic and Responses ingresses' converted chat bodies are
// rewritten for the backend they are sent to.
func TestPromptRewritesOfConvertedBodies(t *testing.T) {
	shim := newUpstream(t, "dyn-a")
	b := rewritingBackend(shim, true, []string{"Be brief."}, dynamoModel)
	b.ResponsesAPI = config.ResponsesConverted
	f := newFixture(t, dynamoConfig([]string{"dyn-a"}, b), []*discovery.Worker{worker("dynamo", aggID, discovery.RoleAggregated, dynamoModel)})

	for i, in := range []struct{ path, body string }{
		{pathMessages, `{"model":"Qwen/Qwen3-32B","max_tokens":8,"system":"Answer in French.","messages":[{"role":"user","content":"Hi"}]}`},
		{pathResponses, `{"model":"Qwen/Qwen3-32B","instructions":"Answer in French.","input":"Hi"}`},
	} {
		resp, body := f.post(in.path, in.body, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		got := shim.requests()[i]
		require.Equal(t, pathChat, got.Path)
		var sent struct{ Messages []json.RawMessage }
		require.NoError(t, json.Unmarshal(got.Body, &sent), string(got.Body))
		require.Len(t, sent.Messages, 2, string(got.Body))
		assert.JSONEq(t, `{"role":"system","content":"Be brief.\n\nAnswer in French."}`, string(sent.Messages[0]), in.path)
		role, _, _ := roleAndContent(sent.Messages[1])
		assert.Equal(t, "user", role)
	}
	assert.Equal(t, 2.0, rewriteCount(f, metrics.RewriteRewritten))
}

// A reload rebuilds every backend's rewrite with the gateway state: the
// next request is sent with the new settings.
func TestPromptRewritesFollowReload(t *testing.T) {
	vllm := newUpstream(t, "vllm")
	cfg := dynamoConfig(nil, backendFor(vllm, plainModel))
	f := newFixture(t, cfg, nil)
	resp, _ := f.post(pathChat, chatBody(plainModel, false), nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)

	next := cfg.Clone()
	next.Backends[0].GlobalPrompts = []string{"New rule."}
	errs, _ := next.Validate()
	require.Empty(t, errs)
	f.gw.Reload(next)
	resp, _ = f.post(pathChat, chatBody(plainModel, false), nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)

	got := vllm.requests()
	assert.Equal(t, chatBody(plainModel, false), string(got[0].Body))
	assert.Equal(t, `{"model":"llama-3-8b","stream":false,"messages":[{"role":"system","content":"New rule."},{"role":"user","content":"Say hello"}]}`,
		string(got[1].Body))
}

// recordingPrompter is the real prompt service, noting every body it is
// asked to render.
type recordingPrompter struct {
	svc *prompt.Service
	mu  sync.Mutex
	got [][]byte
}

func (p *recordingPrompter) Tokens(ctx context.Context, model string, chat bool, body []byte) ([]uint32, string) {
	p.mu.Lock()
	p.got = append(p.got, body)
	p.mu.Unlock()
	return p.svc.Tokens(ctx, model, chat, body)
}

func (p *recordingPrompter) bodies() [][]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.got
}

// fixturePromptService renders with the project's test tokenizer and its
// chat template, as the fake fleet's frontends do.
func fixturePromptService(t *testing.T) *prompt.Service {
	t.Helper()
	const dir = "../../fixtures/tokenizer/switchyard-bpe-4k/"
	tok, err := os.ReadFile(dir + "tokenizer.json")
	require.NoError(t, err)
	tc, err := os.ReadFile(dir + "tokenizer_config.json")
	require.NoError(t, err)
	p, err := prompt.FromFiles(tok, tc)
	require.NoError(t, err)
	svc := prompt.New(prompt.Static{P: p}, prompt.Limits{}, prompt.Hooks{})
	t.Cleanup(svc.Close)
	return svc
}

// The prompt the router renders is the body the pool's first replica is
// sent, global prompts and merged system messages included, so its ids
// are the ones that frontend tokenizes; they go as nvext.token_data to it
// and to replicas rewriting alike, never to one whose body differs.
func TestRenderSeesTheFirstReplicasRewrite(t *testing.T) {
	first, alike, plain := newUpstream(t, "dyn-a"), newUpstream(t, "dyn-b"), newUpstream(t, "dyn-c")
	globals := []string{"You are Switchyard's test assistant."}
	cfg := dynamoConfig([]string{"dyn-a", "dyn-b", "dyn-c"},
		rewritingBackend(first, true, globals, dynamoModel),
		rewritingBackend(alike, true, globals, dynamoModel),
		backendFor(plain, dynamoModel))
	cfg.Dynamo.KV.Enabled, cfg.Dynamo.KV.SendTokenData = true, true
	svc := fixturePromptService(t)
	rec := &recordingPrompter{svc: svc}
	f := newFixture(t, cfg, []*discovery.Worker{worker("dynamo", aggID, discovery.RoleAggregated, dynamoModel)},
		func(o *fixtureOptions) { o.prompter = rec })

	in := `{"model":"Qwen/Qwen3-32B","messages":[{"role":"user","content":"What is a radix tree?"},{"role":"system","content":"Answer in one line."}]}`
	rewritten := `{"model":"Qwen/Qwen3-32B","messages":[{"role":"system","content":"You are Switchyard's test assistant.\n\nAnswer in one line."},{"role":"user","content":"What is a radix tree?"}]}`
	want, why := svc.Tokens(context.Background(), dynamoModel, true, []byte(rewritten))
	require.Empty(t, why)
	unrewritten, _ := svc.Tokens(context.Background(), dynamoModel, true, []byte(in))
	require.NotEqual(t, unrewritten, want, "the rewrite changes the prompt's tokens")

	for range 3 { // round robin over the pool: dyn-a, dyn-b, dyn-c
		resp, body := f.post(pathChat, in, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	}
	for _, got := range rec.bodies() {
		require.Equal(t, rewritten, string(got), "rendered as the first replica is sent it")
	}
	require.Len(t, rec.bodies(), 3)
	require.Equal(t, want, f.picker.lastPick().Tokens)

	for _, u := range []*upstream{first, alike} {
		sent := u.requests()[0].Body
		ids, top := tokenDataOf(t, sent)
		assert.Equal(t, want, ids, u.name)
		assert.JSONEq(t, `[{"role":"system","content":"You are Switchyard's test assistant.\n\nAnswer in one line."},{"role":"user","content":"What is a radix tree?"}]`,
			string(top["messages"]), u.name)
	}
	assert.Equal(t, in, string(plain.requests()[0].Body), "a replica rewriting otherwise gets its own body and no token_data")
	assert.Equal(t, 3.0, rewriteCount(f, metrics.RewriteRewritten), "one rewrite per request serves its render and its send")
}
