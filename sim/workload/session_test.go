package workload

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSessionsExtendThePreviousTurn(t *testing.T) {
	cfg := SessionConfig{Sessions: 30, Turns: 6, Rate: 0.5,
		Think: DurationRange{2 * time.Second, 20 * time.Second}, Message: Range{5, 25}, Output: Range{1, 40}}
	src, err := NewSessions(cfg, 5)
	require.NoError(t, err)
	reqs := collect(t, src, 1000)
	require.Len(t, reqs, cfg.Sessions*cfg.Turns)
	requireOrdered(t, reqs)

	bySession := map[uint64][]Request{}
	for _, r := range reqs {
		require.NotZero(t, r.Session)
		bySession[r.Session] = append(bySession[r.Session], r)
	}
	require.Len(t, bySession, cfg.Sessions)
	for id, turns := range bySession {
		require.Len(t, turns, cfg.Turns, "session %d", id)
		require.GreaterOrEqual(t, len(turns[0].Tokens), cfg.Message.Min)
		require.LessOrEqual(t, len(turns[0].Tokens), cfg.Message.Max)
		for k := 1; k < len(turns); k++ {
			prev, cur := turns[k-1], turns[k]
			// prompt(k) = prompt(k-1) + output(k-1) + message(k)
			require.Equal(t, prev.Tokens, cur.Tokens[:len(prev.Tokens)], "session %d turn %d", id, k)
			msg := len(cur.Tokens) - len(prev.Tokens) - prev.MaxTokens
			require.GreaterOrEqual(t, msg, cfg.Message.Min)
			require.LessOrEqual(t, msg, cfg.Message.Max)
			gap := cur.Arrival - prev.Arrival
			require.GreaterOrEqual(t, gap, cfg.Think.Min)
			require.LessOrEqual(t, gap, cfg.Think.Max)
		}
	}
	// Sessions overlap in time, so the stream switches session far more often than once per session.
	switches := 0
	for i := 1; i < len(reqs); i++ {
		if reqs[i].Session != reqs[i-1].Session {
			switches++
		}
	}
	require.Greater(t, switches, 2*cfg.Sessions)
}
