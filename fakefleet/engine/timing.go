package engine

import "time"

// Timing prices one engine step. The engine adds the two parts for a mixed
// batch and divides by Config.SpeedupRatio.
type Timing interface {
	// PrefillTime is the cost of computing newTokens uncached prompt tokens.
	PrefillTime(newTokens int) time.Duration
	// DecodeStepTime is the cost of one decode step for the whole batch
	// when activeKVFraction of the KV cache is referenced.
	DecodeStepTime(activeKVFraction float64) time.Duration
}

// Mocker is Dynamo's mocker polynomial model (dynamo-wire.md §9.1), so the
// fake fleet's latencies have the same shape as the reference mocker's.
type Mocker struct{}

// PrefillTime is 4.209989e-07·N² + 1.518344e-02·N + 16.50142 ms, 0 for N = 0.
func (Mocker) PrefillTime(n int) time.Duration {
	if n <= 0 {
		return 0
	}
	x := float64(n)
	return ms(4.209989e-07*x*x + 1.518344e-02*x + 1.650142e+01)
}

// DecodeStepTime is −25.74·p² + 54.01·p + 5.74 ms, floored at 1 ms.
func (Mocker) DecodeStepTime(p float64) time.Duration {
	return ms(max(1.0, -25.74*p*p+54.01*p+5.74))
}

func ms(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

// Constant charges fixed costs, which makes step boundaries easy to predict
// in tests: Prefill for any step with new prompt tokens, Step per decode.
type Constant struct{ Prefill, Step time.Duration }

// PrefillTime returns Prefill when there is anything to prefill.
func (c Constant) PrefillTime(n int) time.Duration {
	if n <= 0 {
		return 0
	}
	return c.Prefill
}

// DecodeStepTime returns Step.
func (c Constant) DecodeStepTime(float64) time.Duration { return c.Step }
