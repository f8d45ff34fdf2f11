package main

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"

	"switchyard/fakefleet/frontend"
	"switchyard/recorder"
	"switchyard/router/picker"
	"switchyard/sim/replay"
)

// promptsOK reads switchyard_dynamo_kv_prompts_total{result="ok"}.
func promptsOK(t *testing.T, d *demo) float64 {
	return metricValue(t, d, `switchyard_dynamo_kv_prompts_total{result="ok"}`)
}

// overlapSelections reads switchyard_dynamo_kv_selection_total{result="overlap"}
// from the router's /metrics.
func overlapSelections(t *testing.T, d *demo) float64 {
	return metricValue(t, d, `switchyard_dynamo_kv_selection_total{result="overlap"}`)
}

// metricValue reads one series from the router's /metrics.
func metricValue(t *testing.T, d *demo, series string) float64 {
	t.Helper()
	resp, err := http.Get(d.base() + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(body)
	require.NotNil(t, m, "no series %s in /metrics", series)
	v, err := strconv.ParseFloat(string(m[1]), 64)
	require.NoError(t, err)
	return v
}

// The whole KV path, live: the demo fleet's cards name the project's test
// tokenizer, pinned in the router's configuration; the router renders
// each chat with its chat template, tokenizes it, and scores prefill
// workers by the blocks they report holding. A multi-turn conversation
// sent through the official OpenAI client lands, turn after turn, on the
// prefill worker that cached its prefix, and the selections count overlap.
// The recording holds every request's token ids, and its replay makes each
// KV-aware selection again.
func TestDemoRoutesAConversationToItsCache(t *testing.T) {
	rec := filepath.Join(t.TempDir(), "kv.db")
	d := startTestDemoWith(t, demoOptions{addr: "127.0.0.1:0", prefills: 2, decodes: 2, speedup: 50, drain: 30 * time.Second,
		kv: true, record: rec})
	ctx := context.Background()
	oai := openai.NewClient(option.WithBaseURL(d.base()+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	system := strings.Repeat("You are the switchyard's careful assistant; answer in plain words and cite the docs. ", 60)
	msgs := []openai.ChatCompletionMessageParamUnion{openai.SystemMessage(system), openai.UserMessage("Which worker holds my prefix?")}

	waitFor(t, 30*time.Second, "the router to tokenize prompts with the fleet's pinned tokenizer", func() bool {
		// A probe of its own: the artifacts load in the background.
		_, err := oai.Completions.New(ctx, openai.CompletionNewParams{Model: openai.CompletionNewParamsModel(demoModel),
			MaxTokens: openai.Int(1), Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("probe")}})
		require.NoError(t, err)
		return promptsOK(t, d) > 0
	})
	ask := func() (string, string) {
		t.Helper()
		var resp *http.Response
		res, err := oai.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: demoModel, MaxTokens: openai.Int(4), Messages: msgs},
			option.WithResponseInto(&resp))
		require.NoError(t, err)
		prefill := resp.Header.Get(frontend.HeaderPrefillWorker)
		require.NotEmpty(t, prefill, "a disaggregated pick names its prefill worker")
		return prefill, res.Choices[0].Message.Content
	}
	first, answer := ask()
	id, err := strconv.ParseUint(first, 10, 64)
	require.NoError(t, err)
	waitFor(t, 30*time.Second, "the first turn's blocks in the router's index", func() bool {
		for _, r := range d.srv.KV().Stats().Ranks {
			if r.Rank.WorkerID == id && r.Blocks > 0 {
				return true
			}
		}
		return false
	})
	before := overlapSelections(t, d)
	for turn := 2; turn <= 4; turn++ {
		msgs = append(msgs, openai.AssistantMessage(answer), openai.UserMessage("And turn "+strconv.Itoa(turn)+"?"))
		var got string
		got, answer = ask()
		require.Equal(t, first, got, "turn %d goes to the prefill worker holding the conversation\n%s", turn, kvMetrics(t, d))
	}
	require.GreaterOrEqual(t, overlapSelections(t, d)-before, 3.0, "each later turn scored prefix overlap")

	d.stop()
	rd, err := recorder.Open(rec)
	require.NoError(t, err)
	defer rd.Close()
	rep, err := replay.Run(rd, 0, "")
	require.NoError(t, err)
	require.True(t, rep.Exact(), "divergences: %+v", rep.Divergences)
	var withTokens, kvAware int
	require.NoError(t, rd.Entries(rep.RunID, func(e recorder.Entry) error {
		switch v := e.Value.(type) {
		case recorder.Request:
			if len(v.Tokens) > 0 {
				withTokens++
			}
		case recorder.Selection:
			if v.Sel.PrefillReason == picker.ReasonKVAware {
				kvAware++
			}
		}
		return nil
	}))
	require.GreaterOrEqual(t, withTokens, 4, "the conversation's turns were recorded with their token ids")
	require.GreaterOrEqual(t, kvAware, 3, "the later turns were the KV-aware picker's")
}

// kvMetrics are the router's KV and prompt series, for failure messages.
func kvMetrics(t *testing.T, d *demo) string {
	resp, err := http.Get(d.base() + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var out []string
	for _, l := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(l, "switchyard_dynamo_kv_") && !strings.HasSuffix(l, " 0") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
