package frontend

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func apiErr(t *testing.T, err error) *openai.Error {
	t.Helper()
	var e *openai.Error
	require.True(t, errors.As(err, &e), "want an API error, got %v", err)
	return e
}

// The direct-mode frontend's refusals, with their exact statuses and texts.
func TestRefusals(t *testing.T) {
	f := newFleet(t)
	cases := []struct {
		name    string
		model   string
		headers []string
		status  int
		msg     string
	}{
		{"no worker pin", aggModel, nil, http.StatusBadRequest, ""},
		{"hex worker id is absent", aggModel, []string{dec, "0x5"}, http.StatusBadRequest, ""},
		{"unknown worker", aggModel, []string{dec, "12345"}, http.StatusInternalServerError,
			"Failed to generate completions: instance_id=12345 not found"},
		{"worker of another model", disaggModel, []string{dec, "5", "x-dynamo-prefill-instance-id", preStr},
			http.StatusInternalServerError, "Failed to generate completions: instance_id=5 not found"},
		{"prefill pin names a decode worker", disaggModel, []string{dec, decStr, "x-dynamo-prefill-instance-id", decStr},
			http.StatusInternalServerError, "Failed to generate completions: instance_id=" + decStr + " not found"},
		{"decode pin names the prefill worker", disaggModel, []string{dec, preStr, "x-dynamo-prefill-instance-id", preStr},
			http.StatusInternalServerError, "Failed to generate completions: instance_id=" + preStr + " not found"},
		{"no prefill pin", disaggModel, []string{dec, decStr}, http.StatusServiceUnavailable,
			"Prefill worker ID required in Direct routing mode but none found in request. Expected prefill_worker_id to be set via x-dynamo-prefill-instance-id header by external router (e.g., EPP)."},
		{"hex prefill id is absent", disaggModel, []string{dec, decStr, "x-dynamo-prefill-instance-id", "0xdbb6f1c5b7f0c"},
			http.StatusServiceUnavailable, prefillIDRequired},
		{"unknown model", "nope", []string{dec, "5"}, http.StatusNotFound, "Model not found: nope"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cli := f.client(c.headers...)
			_, err := cli.Chat.Completions.New(context.Background(), chatParams(c.model, 2))
			e := apiErr(t, err)
			assert.Equal(t, c.status, e.StatusCode)
			if c.msg != "" {
				assert.Equal(t, c.msg, e.Message)
			}
		})
	}
	for id, e := range f.dir.workers {
		assert.Empty(t, e.rec.ranks(), "worker %d ran nothing", id)
	}
}

// An injected worker failure is a 500, buffered or streamed (before any
// token, so the stream's status still says so).
func TestInjectedFailure(t *testing.T) {
	f := newFleet(t)
	f.worker(aggID).w.SetFailing(true)
	cli := f.client(dec, "5")
	_, err := cli.Chat.Completions.New(context.Background(), chatParams(aggModel, 2))
	e := apiErr(t, err)
	assert.Equal(t, http.StatusInternalServerError, e.StatusCode)
	assert.Contains(t, e.Message, "Failed to generate completions: instance_id=5")

	stream := cli.Chat.Completions.NewStreaming(context.Background(), chatParams(aggModel, 2))
	assert.False(t, stream.Next())
	assert.Equal(t, http.StatusInternalServerError, apiErr(t, stream.Err()).StatusCode)
	require.NoError(t, stream.Close())

	// A failing prefill worker fails the request before the decode hop.
	f.worker(prefillID).w.SetFailing(true)
	cli = f.client(dec, decStr, "x-dynamo-prefill-instance-id", preStr)
	_, err = cli.Chat.Completions.New(context.Background(), chatParams(disaggModel, 2))
	assert.Equal(t, http.StatusInternalServerError, apiErr(t, err).StatusCode)
	assert.Empty(t, f.worker(decodeID).rec.ranks())
}

// A rank the worker lacks is the worker's error, not a routing refusal.
func TestRankOutOfRange(t *testing.T) {
	f := newFleet(t)
	cli := f.client(dec, "5", "x-dynamo-dp-rank", "1")
	_, err := cli.Chat.Completions.New(context.Background(), chatParams(aggModel, 2))
	e := apiErr(t, err)
	assert.Equal(t, http.StatusInternalServerError, e.StatusCode)
	assert.Equal(t, "Failed to generate completions: dp_rank=1 out of range for instance_id=5", e.Message)
}

func TestBadBodies(t *testing.T) {
	f := newFleet(t)
	cli := f.client(dec, "5")
	p := chatParams(aggModel, 0)
	p.MaxTokens = openai.Int(0)
	_, err := cli.Chat.Completions.New(context.Background(), p)
	assert.Equal(t, http.StatusBadRequest, apiErr(t, err).StatusCode)

	p = chatParams(aggModel, 2)
	p.Messages = nil
	_, err = cli.Chat.Completions.New(context.Background(), p)
	assert.Equal(t, http.StatusBadRequest, apiErr(t, err).StatusCode)
}
