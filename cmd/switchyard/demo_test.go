package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	aoption "github.com/anthropics/anthropic-sdk-go/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// startTestDemo starts the demo stack in process (embedded etcd, engine
// workers under real leases, the frontend emulation, the router on a free
// port) and waits until the router has discovered the four workers. It is
// stopped at the end of the test, if the test has not stopped it.
func startTestDemo(t *testing.T, speedup float64, drain time.Duration) *demo {
	t.Helper()
	return startTestDemoWith(t, demoOptions{addr: "127.0.0.1:0", prefills: 2, decodes: 2, speedup: speedup, drain: drain, kv: true})
}

// startTestDemoWith starts the demo with o and waits for its fleet.
func startTestDemoWith(t *testing.T, o demoOptions) *demo {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the demo stack")
	}
	d, err := startDemo(context.Background(), o, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(d.stop)
	admin := adminClient{base: d.base(), token: d.token}
	waitFor(t, 60*time.Second, "the demo fleet's four workers", func() bool {
		_, body := admin.workers(t)
		return workerCount(body) == 4
	})
	return d
}

func (d *demo) base() string { return "http://" + d.srv.Addr() }

// Every ingress the README lists works in the demo through the official
// SDKs, buffered and streamed. A fake worker's text depends only on the
// prompt's size, so a streamed answer must spell exactly the buffered one.
func TestDemoIngressesThroughSDKs(t *testing.T) {
	d := startTestDemo(t, 50, 30*time.Second)
	ctx := context.Background()
	oai := openai.NewClient(option.WithBaseURL(d.base()+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	ant := anthropic.NewClient(aoption.WithBaseURL(d.base()+"/"), aoption.WithAPIKey("unused"), aoption.WithMaxRetries(0))
	const tokens = 5

	t.Run("models", func(t *testing.T) {
		page, err := oai.Models.List(ctx)
		require.NoError(t, err)
		require.Len(t, page.Data, 1)
		assert.Equal(t, demoModel, page.Data[0].ID)
	})

	t.Run("chat", func(t *testing.T) {
		p := openai.ChatCompletionNewParams{Model: demoModel, MaxTokens: openai.Int(tokens),
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello there, fleet")}}
		res, err := oai.Chat.Completions.New(ctx, p)
		require.NoError(t, err)
		require.Len(t, res.Choices, 1)
		buffered := res.Choices[0].Message.Content
		assert.Len(t, strings.Fields(buffered), tokens)
		assert.Equal(t, "length", res.Choices[0].FinishReason)

		stream := oai.Chat.Completions.NewStreaming(ctx, p)
		var acc openai.ChatCompletionAccumulator
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		require.NoError(t, stream.Err())
		require.NoError(t, stream.Close())
		require.Len(t, acc.Choices, 1)
		assert.Equal(t, buffered, acc.Choices[0].Message.Content)
		assert.Equal(t, "length", acc.Choices[0].FinishReason)
	})

	t.Run("completions", func(t *testing.T) {
		p := openai.CompletionNewParams{Model: openai.CompletionNewParamsModel(demoModel), MaxTokens: openai.Int(tokens),
			Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")}}
		res, err := oai.Completions.New(ctx, p)
		require.NoError(t, err)
		require.Len(t, res.Choices, 1)
		buffered := res.Choices[0].Text
		assert.Len(t, strings.Fields(buffered), tokens)

		stream := oai.Completions.NewStreaming(ctx, p)
		var streamed strings.Builder
		for stream.Next() {
			for _, c := range stream.Current().Choices {
				streamed.WriteString(c.Text)
			}
		}
		require.NoError(t, stream.Err())
		require.NoError(t, stream.Close())
		assert.Equal(t, buffered, streamed.String())
	})

	t.Run("responses", func(t *testing.T) {
		p := responses.ResponseNewParams{Model: demoModel, MaxOutputTokens: openai.Int(tokens),
			Instructions: openai.String("Be brief."),
			Input:        responses.ResponseNewParamsInputUnion{OfString: openai.String("Hello there, fleet")}}
		res, err := oai.Responses.New(ctx, p)
		require.NoError(t, err)
		buffered := res.OutputText()
		assert.Len(t, strings.Fields(buffered), tokens)
		assert.Equal(t, responses.ResponseStatusIncomplete, res.Status)
		assert.Equal(t, int64(tokens), res.Usage.OutputTokens)

		stream := oai.Responses.NewStreaming(ctx, p)
		var deltas strings.Builder
		var last responses.ResponseStreamEventUnion
		for stream.Next() {
			ev := stream.Current()
			if ev.Type == "response.output_text.delta" {
				deltas.WriteString(ev.Delta)
			}
			last = ev
		}
		require.NoError(t, stream.Err())
		require.NoError(t, stream.Close())
		assert.Equal(t, buffered, deltas.String())
		assert.Equal(t, "response.incomplete", last.Type)
		assert.Equal(t, buffered, last.Response.OutputText())
	})

	t.Run("messages", func(t *testing.T) {
		p := anthropic.MessageNewParams{Model: anthropic.Model(demoModel), MaxTokens: tokens,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Hello there, fleet"))}}
		msg, err := ant.Messages.New(ctx, p)
		require.NoError(t, err)
		require.Len(t, msg.Content, 1)
		buffered := msg.Content[0].Text
		assert.Len(t, strings.Fields(buffered), tokens)
		assert.Equal(t, anthropic.StopReasonMaxTokens, msg.StopReason)

		stream := ant.Messages.NewStreaming(ctx, p)
		var streamed anthropic.Message
		for stream.Next() {
			require.NoError(t, streamed.Accumulate(stream.Current()))
		}
		require.NoError(t, stream.Err())
		require.NoError(t, stream.Close())
		require.Len(t, streamed.Content, 1)
		assert.Equal(t, buffered, streamed.Content[0].Text)
		assert.Equal(t, anthropic.StopReasonMaxTokens, streamed.StopReason)
	})

	t.Run("banner", func(t *testing.T) { checkBanner(t, d) })
}

// The banner has a curl line for every ingress and for the admin API, and
// each of them, sent as printed, answers 200.
func checkBanner(t *testing.T, d *demo) {
	var out bytes.Buffer
	d.printBanner(&out)
	banner := out.String()
	curl := regexp.MustCompile(`curl -s (?:-H 'Authorization: Bearer (\w+)' )?(http://\S+)(?: -H 'Content-Type: application/json' \\\n\s+-d '([^']*)')?`)
	seen := map[string]bool{}
	for _, m := range curl.FindAllStringSubmatch(banner, -1) {
		token, url, body := m[1], m[2], m[3]
		path := strings.TrimPrefix(url, d.base())
		seen[path] = true
		method, reader := http.MethodGet, io.Reader(nil)
		if body != "" {
			method, reader = http.MethodPost, strings.NewReader(body)
		}
		req, err := http.NewRequest(method, url, reader)
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		answer, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode, "%s %s: %s", method, path, answer)
	}
	for _, path := range []string{"/v1/chat/completions", "/v1/completions", "/v1/models", "/v1/messages", "/v1/responses", "/admin/dynamo/workers"} {
		assert.True(t, seen[path], "no curl line for %s in:\n%s", path, banner)
	}
}

// Stopping the demo drains the router before it stops the fleet: a stream
// in flight when the stop begins runs to its last token and [DONE], while
// the router already refuses new connections.
func TestDemoStopDrainsStreamInFlight(t *testing.T) {
	const tokens = 150
	d := startTestDemo(t, 1, 60*time.Second) // at speedup 1 a decode step takes milliseconds
	body := fmt.Sprintf(`{"model":%q,"max_tokens":%d,"stream":true,"messages":[{"role":"user","content":"tell a long story"}]}`, demoModel, tokens)
	resp, err := http.Post(d.base()+"/v1/chat/completions", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	events := bufio.NewScanner(resp.Body)
	require.True(t, nextEvent(events) != "", "the stream's first event")

	stopped := make(chan time.Duration)
	begin := time.Now()
	go func() {
		d.stop()
		stopped <- time.Since(begin)
	}()
	addr := d.srv.Addr()
	waitFor(t, 30*time.Second, "the router to stop accepting", func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return true
		}
		c.Close()
		return false
	})

	var data []string
	for ev := nextEvent(events); ev != ""; ev = nextEvent(events) {
		data = append(data, ev)
	}
	require.NotEmpty(t, data)
	assert.Equal(t, "[DONE]", data[len(data)-1], "the stream ends whole")
	for _, ev := range data {
		assert.NotContains(t, ev, `"error"`)
	}
	finished := 0
	for _, ev := range data {
		if strings.Contains(ev, `"finish_reason":"length"`) {
			finished++
		}
	}
	assert.Equal(t, 1, finished, "the answer ran to max_tokens")
	select {
	case took := <-stopped:
		assert.Less(t, took, 60*time.Second)
	case <-time.After(90 * time.Second):
		t.Fatal("the demo did not stop after its stream ended")
	}
}

// nextEvent is the data of the stream's next event, "" at its end.
func nextEvent(s *bufio.Scanner) string {
	for s.Scan() {
		if data, ok := strings.CutPrefix(s.Text(), "data: "); ok {
			return data
		}
	}
	return ""
}

// With nothing in flight, stopping takes the time its work takes, not the
// drain timeout; idle keep-alive connections of a client that has been
// served do not hold it up.
func TestDemoIdleStopIsPrompt(t *testing.T) {
	const drain = 30 * time.Second
	d := startTestDemo(t, 50, drain)
	resp, err := http.Post(d.base()+"/v1/chat/completions", "application/json",
		strings.NewReader(fmt.Sprintf(`{"model":%q,"max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`, demoModel)))
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	begin := time.Now()
	d.stop()
	assert.Less(t, time.Since(begin), drain/2, "an idle stop waits for nothing")
}
