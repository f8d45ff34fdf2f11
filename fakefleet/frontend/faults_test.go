package frontend

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func (f *fleet) frontend() *Frontend { return f.srv.Config.Handler.(*Frontend) }

// While failing, every request is answered 500 and no worker sees it; once
// it ends, requests are served again.
func TestFailingAnswers500WithoutReachingAWorker(t *testing.T) {
	f := newFleet(t)
	cli := f.client(dec, "5")
	f.frontend().SetFailing(true)
	_, err := cli.Chat.Completions.New(context.Background(), chatParams(aggModel, 3))
	var apiErr *openai.Error
	require.True(t, errors.As(err, &apiErr), "an API error, got %v", err)
	assert.Equal(t, http.StatusInternalServerError, apiErr.StatusCode)
	assert.Contains(t, apiErr.Message, ShimFailure)
	assert.Empty(t, f.worker(aggID).rec.ranks(), "no worker was reached")

	f.frontend().SetFailing(false)
	_, err = cli.Chat.Completions.New(context.Background(), chatParams(aggModel, 3))
	require.NoError(t, err)
	assert.NotEmpty(t, f.worker(aggID).rec.ranks())
}

// The delay is added before each hop: a disaggregated request crosses two,
// so it takes at least twice the delay (a lower bound only: a busy
// machine makes it longer, never shorter).
func TestDelayIsAddedToEveryHop(t *testing.T) {
	f := newFleet(t)
	const d = 150 * time.Millisecond
	f.frontend().SetDelay(d)
	cli := f.client(dec, decStr, "x-dynamo-prefill-instance-id", preStr)
	start := time.Now()
	_, err := cli.Chat.Completions.New(context.Background(), chatParams(disaggModel, 2))
	require.NoError(t, err)
	assert.GreaterOrEqual(t, time.Since(start), 2*d)

	f.frontend().SetDelay(0)
	_, err = cli.Chat.Completions.New(context.Background(), chatParams(disaggModel, 2))
	require.NoError(t, err)
}
